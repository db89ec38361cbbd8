//! The console's JSON API under `/api/v1/`, for scripts: the same data and writes as the pages,
//! authenticated by `Authorization: Bearer <token>` (or the authenticating proxy's header). 401
//! without a valid token; 403 for a viewer's write, and for a write authenticated without a
//! token from a browser (an `Origin` header), which could be another site's page.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use super::guard::{api_user, ApiUser};
use super::overview::overview;
use super::reads::{self, ReadError};
use super::state::Console;
use super::writes::{self, Action, Write};
use crate::relay::dlq;

fn problem(status: StatusCode, message: impl Into<String>) -> Response {
    let mut response = (status, Json(json!({ "error": message.into() }))).into_response();
    if status == StatusCode::UNAUTHORIZED {
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            header::HeaderValue::from_static("Bearer realm=\"hookonce console\""),
        );
    }
    response
}

fn read_failed(error: ReadError) -> Response {
    let status = match error {
        ReadError::UnknownSource(_) => StatusCode::NOT_FOUND,
        ReadError::NoStreams => StatusCode::CONFLICT,
        ReadError::Dlq(dlq::DlqError::Config(_)) => StatusCode::NOT_FOUND,
        _ => StatusCode::SERVICE_UNAVAILABLE,
    };
    problem(status, error.to_string())
}

macro_rules! user_or_401 {
    ($console:expr, $headers:expr, $peer:expr) => {
        match api_user(&$console, &$headers, $peer) {
            Some(user) => user,
            None => {
                return problem(
                    StatusCode::UNAUTHORIZED,
                    "a valid Authorization: Bearer token is required",
                )
            }
        }
    };
}

pub async fn overview_json(
    State(console): State<Arc<Console>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
) -> Response {
    user_or_401!(console, headers, peer);
    match overview(&console).await {
        Ok(overview) => Json(overview).into_response(),
        Err(error) => read_failed(ReadError::Store(error)),
    }
}

pub async fn events_json(
    State(console): State<Arc<Console>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    user_or_401!(console, headers, peer);
    let Some(source) = query.get("source") else {
        return problem(StatusCode::BAD_REQUEST, "source is required");
    };
    let id = query.get("id").map(String::as_str);
    let before = query.get("before").map(String::as_str);
    match reads::events(&console, source, id, before).await {
        Ok(page) => Json(page).into_response(),
        Err(error) => read_failed(error),
    }
}

pub async fn event_json(
    State(console): State<Arc<Console>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Path((source, event_id)): Path<(String, String)>,
) -> Response {
    user_or_401!(console, headers, peer);
    match reads::event(&console, &source, &event_id).await {
        Ok(Some(event)) => Json(event).into_response(),
        Ok(None) => problem(
            StatusCode::NOT_FOUND,
            "no such event (or its record expired)",
        ),
        Err(error) => read_failed(error),
    }
}

pub async fn dead_letters_json(
    State(console): State<Arc<Console>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    user_or_401!(console, headers, peer);
    let Some(store) = &console.store else {
        return problem(
            StatusCode::CONFLICT,
            "no dead letters without a Redis store",
        );
    };
    let routes: Vec<&str> = match query.get("route") {
        Some(route) => vec![route.as_str()],
        None => console.routes.iter().map(|r| r.name.as_str()).collect(),
    };
    let mut out = Vec::new();
    for route in routes {
        match dlq::newest(&console.settings, store, route, reads::PAGE).await {
            Ok(letters) => out.extend(letters.into_iter().map(|d| (route.to_owned(), d))),
            Err(error) => return read_failed(ReadError::Dlq(error)),
        }
    }
    let letters: Vec<_> = out
        .into_iter()
        .map(|(route, d)| {
            let mut value = serde_json::to_value(d).unwrap_or_default();
            value["route"] = json!(route);
            value
        })
        .collect();
    Json(json!({ "dead_letters": letters })).into_response()
}

async fn write(
    console: &Console,
    user: ApiUser,
    headers: &HeaderMap,
    write: Write<'_>,
) -> Response {
    if !user.by_token && headers.contains_key(header::ORIGIN) {
        let done = writes::refuse(
            console,
            &user.principal,
            &write,
            "a write from a browser needs a bearer token",
        )
        .await;
        return problem(done.status, done.message);
    }
    let done = writes::perform(console, &user.principal, &write).await;
    if done.status != StatusCode::OK {
        return problem(done.status, done.message);
    }
    let count_name = match write.action {
        Action::Replay => "replayed",
        Action::Delete => "deleted",
    };
    Json(json!({ count_name: done.count, "message": done.message })).into_response()
}

pub async fn replay_json(
    State(console): State<Arc<Console>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Path(target): Path<(String, String)>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    dead_letter_write(Action::Replay, &console, peer, &headers, target, &query).await
}

pub async fn delete_json(
    State(console): State<Arc<Console>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Path(target): Path<(String, String)>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    dead_letter_write(Action::Delete, &console, peer, &headers, target, &query).await
}

/// One dead letter's replay or delete through the API: `(route, id)`, `?source=` when the route
/// reads several sources.
async fn dead_letter_write(
    action: Action,
    console: &Console,
    peer: SocketAddr,
    headers: &HeaderMap,
    (route, id): (String, String),
    query: &HashMap<String, String>,
) -> Response {
    let user = user_or_401!(console, headers, peer);
    let w = Write {
        action,
        route: &route,
        id: &id,
        source: query.get("source").map(String::as_str),
    };
    write(console, user, headers, w).await
}

pub async fn audit_json(
    State(console): State<Arc<Console>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
) -> Response {
    user_or_401!(console, headers, peer);
    match console.audit.newest(200).await {
        Ok(entries) => Json(json!({ "entries": entries })).into_response(),
        Err(error) => read_failed(ReadError::Store(error)),
    }
}
