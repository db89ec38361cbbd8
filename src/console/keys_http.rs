//! The proxy keys page (`/keys`: look up, forget) and API (`GET`/`DELETE /api/v1/keys`). The
//! page looks up with a POST, so that the principal's scope headers (credentials) never travel
//! in a URL; the API takes them from `X-Hookonce-Scope-<Name>` headers, or from the header of
//! the name itself as the proxy would (but `Authorization`, which authenticates the API).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, Query, State};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::{Form, Json};
use serde::Deserialize;
use serde_json::json;

use super::auth::csrf_matches;
use super::guard::{api_user, page_user};
use super::keys::{self, KeyError, KeyQuery};
use super::pages::{nav, page};
use super::state::Console;
use super::views::{KeyFormView, KeysView};

/// The key form's fields, kept to fill the form again.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct KeyForm {
    #[serde(default)]
    pub proxy: String,
    #[serde(default)]
    pub method: String,
    #[serde(default)]
    pub path: String,
    #[serde(default)]
    pub key: String,
    /// `Name: value` per line.
    #[serde(default)]
    pub principal: String,
    #[serde(default)]
    pub csrf: String,
}

fn principal_of(text: &str) -> Result<HeaderMap, KeyError> {
    let mut headers = HeaderMap::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let Some((name, value)) = line.split_once(':') else {
            return Err(KeyError::Invalid(
                "a scope header line is `Name: value`".into(),
            ));
        };
        // The value is a credential: no error repeats it.
        let name = HeaderName::from_bytes(name.trim().as_bytes())
            .map_err(|_| KeyError::Invalid(format!("{:?} is not a header name", name.trim())))?;
        let value = HeaderValue::from_str(value.trim())
            .map_err(|_| KeyError::Invalid(format!("the value of {name} is not a header value")))?;
        headers.append(name, value);
    }
    Ok(headers)
}

fn query_of<'a>(form: &'a KeyForm, principal: HeaderMap) -> KeyQuery<'a> {
    KeyQuery {
        proxy: &form.proxy,
        method: if form.method.is_empty() {
            "POST"
        } else {
            &form.method
        },
        path: &form.path,
        key: &form.key,
        principal,
    }
}

fn view(console: &Console, user: &super::guard::PageUser, form: KeyForm) -> KeysView {
    let method = if form.method.is_empty() {
        "POST".to_owned()
    } else {
        form.method
    };
    KeysView {
        nav: nav(&user.session),
        proxies: console.settings.proxies.keys().cloned().collect(),
        form: KeyFormView {
            proxy: form.proxy,
            method,
            path: form.path,
            key: form.key,
            principal: form.principal,
        },
        looked_up: false,
        found: None,
    }
}

pub async fn keys_page(
    State(console): State<Arc<Console>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
) -> Response {
    let Some(user) = page_user(&console, &headers, peer) else {
        return Redirect::to("/login").into_response();
    };
    let form = KeyForm {
        proxy: console
            .settings
            .proxies
            .keys()
            .next()
            .cloned()
            .unwrap_or_default(),
        ..KeyForm::default()
    };
    page(StatusCode::OK, Some(&user), view(&console, &user, form))
}

pub async fn look_up_page(
    State(console): State<Arc<Console>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Form(form): Form<KeyForm>,
) -> Response {
    let Some(user) = page_user(&console, &headers, peer) else {
        return Redirect::to("/login").into_response();
    };
    let found = match principal_of(&form.principal) {
        Ok(principal) => keys::look_up(&console, &query_of(&form, principal)).await,
        Err(error) => Err(error),
    };
    let mut shown = view(&console, &user, form);
    shown.looked_up = true;
    match found {
        Ok(found) => shown.found = found,
        Err(error) => shown.nav.notice = error.to_string(),
    }
    page(StatusCode::OK, Some(&user), shown)
}

pub async fn forget_page(
    State(console): State<Arc<Console>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Form(form): Form<KeyForm>,
) -> Response {
    let Some(user) = page_user(&console, &headers, peer) else {
        return (StatusCode::UNAUTHORIZED, "log in first").into_response();
    };
    let principal = principal_of(&form.principal).unwrap_or_default();
    let query = query_of(&form, principal);
    let who = &user.session.principal;
    let done = if user.set_cookie.is_some() || !csrf_matches(&user.session, &form.csrf) {
        keys::refuse(&console, who, &query, "missing or wrong CSRF token").await
    } else {
        keys::forget(&console, who, &query).await
    };
    let mut shown = view(&console, &user, form.clone());
    shown.nav.notice = done.message;
    page(done.status, Some(&user), shown)
}

/// The scope headers of an API request for `proxy`.
fn api_principal(console: &Console, proxy: &str, headers: &HeaderMap) -> HeaderMap {
    let mut principal = HeaderMap::new();
    let Some(settings) = console.settings.proxies.get(proxy) else {
        return principal;
    };
    for name in &settings.scope_headers {
        let Ok(header) = HeaderName::from_bytes(name.as_bytes()) else {
            continue;
        };
        let scoped = format!("x-hookonce-scope-{}", header.as_str());
        let given: Vec<&HeaderValue> = match headers.get_all(scoped.as_str()).iter().next() {
            Some(_) => headers.get_all(scoped.as_str()).iter().collect(),
            None if header != header::AUTHORIZATION => headers.get_all(&header).iter().collect(),
            None => Vec::new(),
        };
        for value in given {
            principal.append(header.clone(), value.clone());
        }
    }
    principal
}

fn api_error(error: KeyError) -> Response {
    let status = match error {
        KeyError::Invalid(_) => StatusCode::BAD_REQUEST,
        KeyError::NoStore => StatusCode::CONFLICT,
        KeyError::Store(_) => StatusCode::SERVICE_UNAVAILABLE,
    };
    (status, Json(json!({ "error": error.to_string() }))).into_response()
}

fn unauthorized() -> Response {
    let error = json!({ "error": "a valid Authorization: Bearer token is required" });
    (StatusCode::UNAUTHORIZED, Json(error)).into_response()
}

fn form_of(query: &HashMap<String, String>) -> KeyForm {
    let get = |name: &str| query.get(name).cloned().unwrap_or_default();
    KeyForm {
        proxy: get("proxy"),
        method: get("method"),
        path: get("path"),
        key: get("key"),
        ..KeyForm::default()
    }
}

pub async fn key_json(
    State(console): State<Arc<Console>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    if api_user(&console, &headers, peer).is_none() {
        return unauthorized();
    }
    let form = form_of(&query);
    let principal = api_principal(&console, &form.proxy, &headers);
    match keys::look_up(&console, &query_of(&form, principal)).await {
        Ok(Some(state)) => Json(state).into_response(),
        Ok(None) => (
            StatusCode::NOT_FOUND,
            Json(json!({ "error": "no record of this key" })),
        )
            .into_response(),
        Err(error) => api_error(error),
    }
}

pub async fn forget_json(
    State(console): State<Arc<Console>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let Some(user) = api_user(&console, &headers, peer) else {
        return unauthorized();
    };
    let form = form_of(&query);
    let principal = api_principal(&console, &form.proxy, &headers);
    let key = query_of(&form, principal);
    let done = if !user.by_token && headers.contains_key(header::ORIGIN) {
        let why = "a write from a browser needs a bearer token";
        keys::refuse(&console, &user.principal, &key, why).await
    } else {
        keys::forget(&console, &user.principal, &key).await
    };
    let body = if done.status == StatusCode::OK {
        json!({ "forgotten": done.count, "message": done.message })
    } else {
        json!({ "error": done.message })
    };
    (done.status, Json(body)).into_response()
}
