//! The HTTP client of the daemon's outgoing HTTP hops: the proxy's upstream, the relay's workers,
//! the HTTP sink and the telemetry export. One pool of keep-alive HTTP/1.1 connections, plain or
//! TLS (rustls, the public CAs), `TCP_NODELAY` on, no redirects followed (a worker or upstream
//! that redirects is misconfigured, and following would resend the body elsewhere).
//!
//! hyper's own pooled client rather than reqwest's: reqwest parses each request's URL from text
//! twice more (its redirect layer and its response) and runs it through layers these hops do not
//! use; a relayed event cost 126 000 instructions through reqwest, 86 000 through this. Here a
//! request goes out with the `http::Uri` its URL was read into once.

use std::time::Duration;

use axum::body::Body;
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use http_body_util::BodyExt;
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use percent_encoding::percent_decode_str;

/// Idle pooled connections are closed after this long; a peer closing first is handled (a
/// request never sent is retried on a fresh connection).
const POOL_IDLE: Duration = Duration::from_secs(60);

/// The pooled client type.
pub type Pooled = Client<HttpsConnector<HttpConnector>, Body>;

/// A pooled client whose connection attempts give up after `connect_timeout` (none: only the
/// caller's deadline bounds them), keeping at most `max_idle_per_host` idle connections per peer.
pub fn pooled(connect_timeout: Option<Duration>, max_idle_per_host: usize) -> Pooled {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_connect_timeout(connect_timeout);
    let connector = HttpsConnectorBuilder::new()
        .with_webpki_roots()
        .https_or_http()
        .enable_http1()
        .wrap_connector(http);
    Client::builder(TokioExecutor::new())
        .pool_timer(TokioTimer::new())
        .pool_idle_timeout(POOL_IDLE)
        .pool_max_idle_per_host(max_idle_per_host)
        .build(connector)
}

/// A `POST` of `body` to `uri` with `headers`.
pub fn post(
    uri: http::Uri,
    headers: http::HeaderMap,
    body: impl Into<Body>,
) -> http::Request<Body> {
    let mut request = http::Request::new(body.into());
    *request.method_mut() = http::Method::POST;
    *request.uri_mut() = uri;
    *request.headers_mut() = headers;
    request
}

/// A URL as requests are sent to it: the URI without user and password, and those as an
/// `Authorization: Basic` value (RFC 7617: `user:password` in base64, each percent-decoded), as
/// reqwest sends them. The error never holds the URL (it may carry credentials).
pub fn target(text: &str) -> Result<(http::Uri, Option<http::HeaderValue>), String> {
    let mut url = url::Url::parse(text).map_err(|e| format!("is not a URL: {e}"))?;
    let basic_auth = if url.username().is_empty() && url.password().is_none() {
        None
    } else {
        let decode = |part: &str| percent_decode_str(part).decode_utf8_lossy().into_owned();
        let pair = format!(
            "{}:{}",
            decode(url.username()),
            decode(url.password().unwrap_or_default())
        );
        let mut value = http::HeaderValue::try_from(format!("Basic {}", BASE64.encode(pair)))
            .map_err(|_| "has a user or password that is not a header value".to_owned())?;
        value.set_sensitive(true);
        // Neither fails on a URL with a host, which validation asked for.
        let _ = url.set_username("");
        let _ = url.set_password(None);
        Some(value)
    };
    let uri = url
        .as_str()
        .parse::<http::Uri>()
        .map_err(|_| "is not an HTTP URI".to_owned())?;
    Ok((uri, basic_auth))
}

/// Reads up to `limit` bytes of an answer's body, so that a small answer frees its connection
/// for reuse and a huge one is not held in memory.
pub async fn read_some(response: http::Response<hyper::body::Incoming>, limit: usize) -> Vec<u8> {
    let mut body = response.into_body();
    let mut kept = Vec::new();
    while let Some(Ok(frame)) = body.frame().await {
        if let Some(chunk) = frame.data_ref() {
            kept.extend_from_slice(&chunk[..chunk.len().min(limit - kept.len())]);
            if kept.len() >= limit {
                break;
            }
        }
    }
    kept
}
