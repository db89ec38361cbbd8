//! The pages and API of a filtered replay: `GET /dead-letters/{route}/replay-matching` shows how
//! many dead letters match and asks to confirm; `POST` replays them (an operator with the
//! session's CSRF token). The API's `GET` and `POST /api/v1/dead-letters/{route}/replay-matching`
//! answer `{"count"}` and `{"replayed"}`.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::{Form, Json};
use serde::Deserialize;
use serde_json::json;

use super::auth::csrf_matches;
use super::batch::{self, Filter};
use super::guard::{api_user, page_user};
use super::pages::{dead_letters_view, nav, page};
use super::state::Console;
use super::views::ReplayPreview;

fn filter(query: &HashMap<String, String>) -> Filter {
    Filter {
        source: query.get("source").filter(|s| !s.is_empty()).cloned(),
        event_type: query.get("event_type").cloned().unwrap_or_default(),
    }
}

pub async fn preview_page(
    State(console): State<Arc<Console>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Path(route): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let Some(user) = page_user(&console, &headers, peer) else {
        return Redirect::to("/login").into_response();
    };
    let filter = filter(&query);
    let count = match batch::matching(&console, &route, &filter).await {
        Ok(matched) => matched.len(),
        Err(error) => {
            let notice = error.to_string();
            return dead_letters_view(&console, &user, &route, StatusCode::BAD_REQUEST, notice)
                .await;
        }
    };
    let view = ReplayPreview {
        nav: nav(&user.session),
        route,
        source: filter.source.unwrap_or_default(),
        event_type: filter.event_type,
        count,
    };
    page(StatusCode::OK, Some(&user), view)
}

#[derive(Deserialize)]
pub struct ConfirmForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    source: String,
    #[serde(default)]
    event_type: String,
    #[serde(default)]
    previewed: usize,
}

pub async fn replay_page(
    State(console): State<Arc<Console>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Path(route): Path<String>,
    Form(form): Form<ConfirmForm>,
) -> Response {
    let Some(user) = page_user(&console, &headers, peer) else {
        return (StatusCode::UNAUTHORIZED, "log in first").into_response();
    };
    let filter = Filter {
        source: Some(form.source).filter(|s| !s.is_empty()),
        event_type: form.event_type,
    };
    let who = &user.session.principal;
    let done = if user.set_cookie.is_some() || !csrf_matches(&user.session, &form.csrf) {
        batch::refuse(
            &console,
            who,
            &route,
            &filter,
            "missing or wrong CSRF token",
        )
        .await
    } else {
        batch::replay_matching(&console, who, &route, &filter, form.previewed).await
    };
    dead_letters_view(&console, &user, &route, done.status, done.message).await
}

fn unauthorized() -> Response {
    let mut response = (
        StatusCode::UNAUTHORIZED,
        Json(json!({ "error": "a valid Authorization: Bearer token is required" })),
    )
        .into_response();
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        header::HeaderValue::from_static("Bearer realm=\"hookonce console\""),
    );
    response
}

pub async fn preview_json(
    State(console): State<Arc<Console>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Path(route): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    if api_user(&console, &headers, peer).is_none() {
        return unauthorized();
    }
    match batch::matching(&console, &route, &filter(&query)).await {
        Ok(matched) => Json(json!({ "count": matched.len() })).into_response(),
        Err(error) => (
            StatusCode::BAD_REQUEST,
            Json(json!({ "error": error.to_string() })),
        )
            .into_response(),
    }
}

pub async fn replay_json(
    State(console): State<Arc<Console>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Path(route): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let Some(user) = api_user(&console, &headers, peer) else {
        return unauthorized();
    };
    let filter = filter(&query);
    let done = if !user.by_token && headers.contains_key(header::ORIGIN) {
        let why = "a write from a browser needs a bearer token";
        batch::refuse(&console, &user.principal, &route, &filter, why).await
    } else {
        let previewed = query
            .get("previewed")
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        batch::replay_matching(&console, &user.principal, &route, &filter, previewed).await
    };
    let body = if done.status == StatusCode::OK {
        json!({ "replayed": done.count, "message": done.message })
    } else {
        json!({ "error": done.message })
    };
    (done.status, Json(body)).into_response()
}
