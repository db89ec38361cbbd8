//! The upstream client: pooled keep-alive HTTP/1.1 connections to one base URL.
//!
//! A request goes upstream as it came — method, path and query appended to the base URL
//! unchanged, every end-to-end header (the `Idempotency-Key` and the scope headers among them),
//! the body streamed — with three changes a proxy must make (RFC 9110, section 7.6):
//! hop-by-hop headers (`Connection` and the headers it names, `Keep-Alive`, `Proxy-*`, `TE`,
//! `Trailer`, `Transfer-Encoding`, `Upgrade`) are dropped in both directions, `Host` becomes the
//! upstream's, and `X-Forwarded-For` / `-Proto` / `-Host` say who asked. The request body is cut
//! off at `server.body_limit`.

use std::net::SocketAddr;
use std::time::Duration;

use axum::body::Body;
use axum::http::{header, request, HeaderMap, HeaderName, HeaderValue, Request, Response, Uri};
use http_body_util::{LengthLimitError, Limited};
use hyper::body::Incoming;
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};

use crate::config::ProxySettings;

/// Idle pooled connections are closed after this long; below common upstream keep-alive
/// timeouts would be ideal, but the upstream closing first is handled (the request is retried
/// on a fresh connection when it was never sent).
const POOL_IDLE: Duration = Duration::from_secs(60);

/// Why an upstream exchange produced no response.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    #[error("upstream did not answer within {0:?}")]
    Timeout(Duration),
    #[error("request body exceeds server.body_limit")]
    TooLarge,
    #[error("upstream request failed")]
    Failed(#[source] hyper_util::client::legacy::Error),
    #[error("upstream response body failed")]
    Body(#[source] Box<dyn std::error::Error + Send + Sync>),
}

/// One proxy's upstream: its base URL and connection pool.
pub struct Upstream {
    client: Client<HttpsConnector<HttpConnector>, Body>,
    /// `scheme://authority` plus the base path without its trailing slash.
    base: String,
    timeout: Duration,
    body_limit: usize,
}

impl Upstream {
    /// The client for validated settings (the upstream URL was checked by `ProxySettings`).
    pub fn new(settings: &ProxySettings, body_limit: usize) -> Self {
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        http.set_connect_timeout(Some(settings.upstream_timeout.0));
        let connector = HttpsConnectorBuilder::new()
            .with_webpki_roots()
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        let client = Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(POOL_IDLE)
            .build(connector);
        Self {
            client,
            base: settings.upstream.trim_end_matches('/').to_owned(),
            timeout: settings.upstream_timeout.0,
            body_limit,
        }
    }

    /// `upstream_timeout`.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Rewrites a received request's head for the upstream: URI, `Host`, hop-by-hop headers and
    /// `X-Forwarded-*`.
    pub fn prepare(&self, parts: &mut request::Parts, peer: SocketAddr) -> Result<(), String> {
        let path_and_query = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        parts.uri = format!("{}{path_and_query}", self.base)
            .parse::<Uri>()
            .map_err(|e| format!("cannot build the upstream URI: {e}"))?;
        parts.version = http::Version::HTTP_11;
        let headers = &mut parts.headers;
        strip_hop_by_hop(headers);
        let host = headers.remove(header::HOST);
        forwarded_for(headers, peer);
        headers.insert("x-forwarded-proto", HeaderValue::from_static("http"));
        match host {
            Some(host) => headers.insert("x-forwarded-host", host),
            None => headers.remove("x-forwarded-host"),
        };
        Ok(())
    }

    /// A prepared request's body, cut off at `server.body_limit` while it streams.
    pub fn limit(&self, body: Body) -> Body {
        Body::new(Limited::new(body, self.body_limit))
    }

    /// Sends a prepared request and waits for the response head (no deadline of its own: the
    /// caller bounds the whole exchange with `upstream_timeout`).
    pub async fn send(&self, request: Request<Body>) -> Result<Response<Incoming>, UpstreamError> {
        self.client.request(request).await.map_err(|error| {
            if has_cause::<LengthLimitError>(&error) {
                UpstreamError::TooLarge
            } else {
                UpstreamError::Failed(error)
            }
        })
    }
}

/// Appends the peer to `X-Forwarded-For` (a list that proxies before us may have started).
fn forwarded_for(headers: &mut HeaderMap, peer: SocketAddr) {
    let peer = peer.ip().to_string();
    let earlier: Vec<&str> = headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect();
    let list = if earlier.is_empty() {
        peer
    } else {
        format!("{}, {peer}", earlier.join(", "))
    };
    if let Ok(value) = HeaderValue::from_str(&list) {
        headers.insert("x-forwarded-for", value);
    }
}

fn has_cause<E: std::error::Error + 'static>(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(error);
    while let Some(current) = cause {
        if current.is::<E>() {
            return true;
        }
        cause = current.source();
    }
    false
}

/// Whether `name` is hop-by-hop in a message with these `headers`: one of the fixed list, or
/// named by its `Connection` header.
pub fn is_hop_by_hop(name: &HeaderName, headers: &HeaderMap) -> bool {
    const FIXED: [HeaderName; 6] = [
        header::CONNECTION,
        header::TE,
        header::TRAILER,
        header::TRANSFER_ENCODING,
        header::UPGRADE,
        HeaderName::from_static("keep-alive"),
    ];
    FIXED.contains(name)
        || name.as_str().starts_with("proxy-")
        || connection_names(headers).any(|listed| listed.eq_ignore_ascii_case(name.as_str()))
}

fn connection_names(headers: &HeaderMap) -> impl Iterator<Item = &str> {
    headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|name| !name.is_empty())
}

/// Removes every hop-by-hop header from a message about to be forwarded.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let doomed: Vec<HeaderName> = headers
        .keys()
        .filter(|name| is_hop_by_hop(name, headers))
        .cloned()
        .collect();
    for name in doomed {
        headers.remove(name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_headers_go_end_to_end_headers_stay() {
        let mut headers = HeaderMap::new();
        for (name, value) in [
            ("connection", "keep-alive, X-Secret-Hop"),
            ("x-secret-hop", "1"),
            ("keep-alive", "timeout=5"),
            ("proxy-authorization", "Basic x"),
            ("proxy-connection", "keep-alive"),
            ("te", "trailers"),
            ("trailer", "x-checksum"),
            ("transfer-encoding", "chunked"),
            ("upgrade", "websocket"),
            ("authorization", "Bearer a"),
            ("idempotency-key", "\"k1\""),
            ("content-type", "application/json"),
            ("content-length", "2"),
        ] {
            headers.append(name, HeaderValue::from_static(value));
        }
        strip_hop_by_hop(&mut headers);
        let mut left: Vec<&str> = headers.keys().map(HeaderName::as_str).collect();
        left.sort_unstable();
        assert_eq!(
            left,
            [
                "authorization",
                "content-length",
                "content-type",
                "idempotency-key"
            ]
        );
        assert_eq!(headers["idempotency-key"], "\"k1\"");
    }

    #[test]
    fn requests_are_rewritten_for_the_upstream() {
        let settings = ProxySettings {
            upstream: "http://orders:3000/base/".to_owned(),
            ..ProxySettings::default()
        };
        let upstream = Upstream::new(&settings, 1024);
        let (mut parts, ()) = Request::post("/v1/orders?x=1&y")
            .header("host", "api.example.com")
            .header("x-forwarded-for", "203.0.113.7")
            .header("connection", "close")
            .body(())
            .unwrap()
            .into_parts();
        upstream
            .prepare(&mut parts, ([192, 0, 2, 1], 5000).into())
            .unwrap();
        assert_eq!(parts.uri, "http://orders:3000/base/v1/orders?x=1&y");
        let headers = &parts.headers;
        assert!(headers.get("host").is_none() && headers.get("connection").is_none());
        assert_eq!(headers["x-forwarded-for"], "203.0.113.7, 192.0.2.1");
        assert_eq!(headers["x-forwarded-host"], "api.example.com");
        assert_eq!(headers["x-forwarded-proto"], "http");
    }
}
