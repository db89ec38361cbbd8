//! The console's HTML pages and forms: login and logout, overview, events, one event, dead
//! letters (replay, delete) and the audit log. A page without a user sends the browser to
//! `/login`; a form that writes without its session's CSRF token is refused (403) and audited.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use askama::Template;
use axum::extract::{ConnectInfo, Path, Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::Form;
use serde::Deserialize;

use super::auth::{cookie, csrf_matches, Session};
use super::guard::{expired_cookie, page_user, session_cookie, PageUser, COOKIE};
use super::overview::overview;
use super::reads::{self, ReadError};
use super::state::Console;
use super::views::*;
use super::writes::{self, Action, Write};
use crate::relay::dlq;

/// A rendered page with its status, and the session cookie when one was just opened.
pub(super) fn page(status: StatusCode, user: Option<&PageUser>, body: impl Template) -> Response {
    let html = match body.render() {
        Ok(html) => html,
        Err(error) => {
            tracing::warn!(message = "Console template failed.", %error);
            return (StatusCode::INTERNAL_SERVER_ERROR, "template error").into_response();
        }
    };
    let mut response = (
        status,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        html,
    )
        .into_response();
    if let Some(cookie) = user.and_then(|u| u.set_cookie.clone()) {
        response.headers_mut().insert(header::SET_COOKIE, cookie);
    }
    response
}

pub(super) fn nav(session: &Session) -> Nav {
    Nav {
        who: session.principal.who.clone(),
        role: session.principal.role.label().to_owned(),
        csrf: session.csrf.clone(),
        notice: String::new(),
    }
}

fn error_page(user: &PageUser, status: StatusCode, message: String) -> Response {
    let view = ErrorPage {
        nav: nav(&user.session),
        status: status.as_u16(),
        message,
    };
    page(status, Some(user), view)
}

fn read_failed(user: &PageUser, error: ReadError) -> Response {
    let status = match error {
        ReadError::UnknownSource(_) => StatusCode::NOT_FOUND,
        ReadError::NoStreams => StatusCode::CONFLICT,
        _ => StatusCode::SERVICE_UNAVAILABLE,
    };
    error_page(user, status, error.to_string())
}

macro_rules! user_or_login {
    ($console:expr, $headers:expr, $peer:expr) => {
        match page_user(&$console, &$headers, $peer) {
            Some(user) => user,
            None => return Redirect::to("/login").into_response(),
        }
    };
}

pub async fn login_form() -> Response {
    page(StatusCode::OK, None, LoginPage { failed: false })
}

#[derive(Deserialize)]
pub struct LoginForm {
    #[serde(default)]
    token: String,
}

pub async fn login(State(console): State<Arc<Console>>, Form(form): Form<LoginForm>) -> Response {
    let Some(principal) = console.access.load().by_token(&form.token) else {
        return page(StatusCode::UNAUTHORIZED, None, LoginPage { failed: true });
    };
    let Some((id, _)) = console.sessions.open(principal) else {
        return (StatusCode::SERVICE_UNAVAILABLE, "too many sessions").into_response();
    };
    let mut response = Redirect::to("/").into_response();
    response
        .headers_mut()
        .insert(header::SET_COOKIE, session_cookie(&console, &id));
    response
}

#[derive(Deserialize)]
pub struct CsrfForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    source: Option<String>,
}

pub async fn logout(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    Form(form): Form<CsrfForm>,
) -> Response {
    if let Some(id) = cookie(&headers, COOKIE) {
        if let Some(session) = console.sessions.get(id) {
            if !csrf_matches(&session, &form.csrf) {
                return (StatusCode::FORBIDDEN, "missing or wrong CSRF token").into_response();
            }
            console.sessions.close(id);
        }
    }
    let mut response = Redirect::to("/login").into_response();
    response
        .headers_mut()
        .insert(header::SET_COOKIE, expired_cookie());
    response
}

pub async fn overview_page(
    State(console): State<Arc<Console>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
) -> Response {
    let user = user_or_login!(console, headers, peer);
    match overview(&console).await {
        Ok(overview) => {
            let charts = overview
                .sources
                .iter()
                .map(|s| Chart::of(&s.source, &s.per_minute))
                .collect();
            let view = OverviewPage {
                nav: nav(&user.session),
                overview,
                charts,
            };
            page(StatusCode::OK, Some(&user), view)
        }
        Err(error) => read_failed(&user, ReadError::Store(error)),
    }
}

pub async fn events_page(
    State(console): State<Arc<Console>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let user = user_or_login!(console, headers, peer);
    let sources: Vec<String> = console.targets.keys().cloned().collect();
    let source = match query.get("source").filter(|s| !s.is_empty()) {
        Some(source) => source.clone(),
        None => sources.first().cloned().unwrap_or_default(),
    };
    let id = query.get("id").map(|s| s.trim().to_owned());
    let before = query.get("before").map(String::as_str);
    match reads::events(&console, &source, id.as_deref(), before).await {
        Ok(page_data) => {
            let view = EventsView {
                nav: nav(&user.session),
                sources,
                page: page_data,
                searched: id.unwrap_or_default(),
            };
            page(StatusCode::OK, Some(&user), view)
        }
        Err(error) => read_failed(&user, error),
    }
}

pub async fn event_page(
    State(console): State<Arc<Console>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Path((source, event_id)): Path<(String, String)>,
) -> Response {
    let user = user_or_login!(console, headers, peer);
    match reads::event(&console, &source, &event_id).await {
        Ok(Some(event)) => {
            let view = EventView {
                nav: nav(&user.session),
                event,
            };
            page(StatusCode::OK, Some(&user), view)
        }
        Ok(None) => error_page(
            &user,
            StatusCode::NOT_FOUND,
            format!(
                "No event {event_id:?} in {source:?}: never forwarded, its record expired, or \
                 its entry was trimmed."
            ),
        ),
        Err(error) => read_failed(&user, error),
    }
}

/// The dead letters page of `route` (the first route when empty), with a notice.
pub(super) async fn dead_letters_view(
    console: &Console,
    user: &PageUser,
    route: &str,
    status: StatusCode,
    notice: String,
) -> Response {
    let routes: Vec<String> = console.routes.iter().map(|r| r.name.clone()).collect();
    let route = if route.is_empty() {
        routes.first().cloned().unwrap_or_default()
    } else {
        route.to_owned()
    };
    let letters = match (&console.store, route.is_empty()) {
        (Some(store), false) => {
            match dlq::newest(&console.settings, store, &route, reads::PAGE).await {
                Ok(letters) => letters,
                Err(error) => return error_page(user, StatusCode::BAD_REQUEST, error.to_string()),
            }
        }
        _ => Vec::new(),
    };
    let mut nav = nav(&user.session);
    nav.notice = notice;
    let view = DeadLettersView {
        nav,
        routes,
        route,
        letters,
    };
    page(status, Some(user), view)
}

pub async fn dead_letters_page(
    State(console): State<Arc<Console>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let user = user_or_login!(console, headers, peer);
    let route = query.get("route").cloned().unwrap_or_default();
    dead_letters_view(&console, &user, &route, StatusCode::OK, String::new()).await
}

pub async fn dead_letter_write(
    State(console): State<Arc<Console>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Path((route, id, action)): Path<(String, String, String)>,
    Form(form): Form<CsrfForm>,
) -> Response {
    let Some(user) = page_user(&console, &headers, peer) else {
        return (StatusCode::UNAUTHORIZED, "log in first").into_response();
    };
    let action = match action.as_str() {
        "replay" => Action::Replay,
        "delete" => Action::Delete,
        _ => return StatusCode::NOT_FOUND.into_response(),
    };
    let write = Write {
        action,
        route: &route,
        id: &id,
        source: form.source.as_deref().filter(|s| !s.is_empty()),
    };
    let who = &user.session.principal;
    // A session opened by this very request has no form of its own yet: its token cannot match.
    let done = if user.set_cookie.is_some() || !csrf_matches(&user.session, &form.csrf) {
        writes::refuse(&console, who, &write, "missing or wrong CSRF token").await
    } else {
        writes::perform(&console, who, &write).await
    };
    dead_letters_view(&console, &user, &route, done.status, done.message).await
}

pub async fn audit_page(
    State(console): State<Arc<Console>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
) -> Response {
    let user = user_or_login!(console, headers, peer);
    match console.audit.newest(200).await {
        Ok(entries) => {
            let view = AuditView {
                nav: nav(&user.session),
                entries,
            };
            page(StatusCode::OK, Some(&user), view)
        }
        Err(error) => read_failed(&user, ReadError::Store(error)),
    }
}

pub async fn stylesheet() -> Response {
    (
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/css; charset=utf-8"),
            ),
            (
                header::CACHE_CONTROL,
                HeaderValue::from_static("max-age=3600"),
            ),
        ],
        include_str!("assets/console.css"),
    )
        .into_response()
}
