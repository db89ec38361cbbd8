//! What stands before every console handler: the concurrency limit, the security headers on
//! every answer, and who the request comes from — a session cookie (pages), a bearer token (the
//! API), or the authenticating proxy's header (both).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::auth::{bearer, cookie, Principal, Session};
use super::state::Console;

/// The session cookie's name.
pub const COOKIE: &str = "hookonce_console";

/// The Content-Security-Policy of every answer: nothing from another origin, no inline script
/// or style.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' \
                       data:; frame-ancestors 'none'; form-action 'self'; base-uri 'none'";

/// Answers 503 at once when `console.max_in_flight` requests are being served.
pub async fn limit(State(console): State<Arc<Console>>, request: Request, next: Next) -> Response {
    let Ok(_permit) = Arc::clone(&console.limit).try_acquire_owned() else {
        return (StatusCode::SERVICE_UNAVAILABLE, "the console is busy").into_response();
    };
    next.run(request).await
}

/// Adds the security headers to every answer.
pub async fn secure(response: Response) -> Response {
    let mut response = response;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers
        .entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    response
}

/// Who a page request is from: its session, or a new one for a principal the proxy's header
/// (or an open loopback console) names — then with the cookie to set.
pub struct PageUser {
    pub session: Session,
    pub set_cookie: Option<HeaderValue>,
}

/// The page user of a request, if it has one.
pub fn page_user(console: &Console, headers: &HeaderMap, peer: SocketAddr) -> Option<PageUser> {
    let by_peer = console.access.load().by_peer(peer.ip(), headers);
    if let Some(session) = cookie(headers, COOKIE).and_then(|id| console.sessions.get(id)) {
        // Behind a proxy the header speaks for the user now; a session opened for another
        // identity is not theirs.
        if by_peer.as_ref().is_none_or(|p| *p == session.principal) {
            return Some(PageUser {
                session,
                set_cookie: None,
            });
        }
    }
    let principal = by_peer?;
    let (id, session) = console.sessions.open(principal)?;
    Some(PageUser {
        session,
        set_cookie: Some(session_cookie(console, &id)),
    })
}

/// The `Set-Cookie` value of session `id`.
pub fn session_cookie(console: &Console, id: &str) -> HeaderValue {
    let secure = if console.secure_cookie {
        "; Secure"
    } else {
        ""
    };
    let max_age = console.sessions.ttl().as_secs();
    HeaderValue::from_str(&format!(
        "{COOKIE}={id}; Path=/; HttpOnly; SameSite=Strict; Max-Age={max_age}{secure}"
    ))
    .unwrap_or_else(|_| HeaderValue::from_static("invalid=1"))
}

/// The cookie that ends a session in the browser.
pub fn expired_cookie() -> HeaderValue {
    HeaderValue::from_static("hookonce_console=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0")
}

/// How an API request authenticated.
pub struct ApiUser {
    pub principal: Principal,
    /// By a bearer token (a write needs one, or comes from no browser).
    pub by_token: bool,
}

/// The API user of a request: its bearer token, or the proxy's header (or an open console).
/// A session cookie does not authenticate the API, so that no page of another origin can make
/// a browser call it.
pub fn api_user(console: &Console, headers: &HeaderMap, peer: SocketAddr) -> Option<ApiUser> {
    if let Some(token) = bearer(headers) {
        return console
            .access
            .load()
            .by_token(token)
            .map(|principal| ApiUser {
                principal,
                by_token: true,
            });
    }
    console
        .access
        .load()
        .by_peer(peer.ip(), headers)
        .map(|principal| ApiUser {
            principal,
            by_token: false,
        })
}
