//! The upstream client: pooled keep-alive HTTP/1.1 connections to one base URL.
//!
//! A request goes upstream as it came — method, path and query appended to the base URL
//! unchanged, every end-to-end header (the `Idempotency-Key` and the scope headers among them),
//! the body streamed — with three changes a proxy must make (RFC 9110, section 7.6):
//! hop-by-hop headers (`Connection` and the headers it names, `Keep-Alive`, `Proxy-*`, `TE`,
//! `Trailer`, `Transfer-Encoding`, `Upgrade`) are dropped in both directions, `Host` becomes the
//! upstream's, and `X-Forwarded-For` / `-Proto` / `-Host` and `Forwarded` say who asked. The
//! request body is cut off at `server.body_limit`.
//!
//! The forwarding headers are believed only from a peer in `server.trusted_proxies` (a load
//! balancer in front): its `X-Forwarded-*`, `Forwarded` and `X-Real-IP` go on, with the peer
//! appended to `X-Forwarded-For` (and to `Forwarded`, when it sent one), so that an upstream
//! behind an HTTPS front still learns the client's scheme and host. Any other peer's are dropped
//! and replaced by what hookonce saw itself: the peer, `http`, and the `Host` it was sent.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use axum::body::Body;
use axum::http::uri::{self, Authority, Scheme};
use axum::http::{header, request, HeaderMap, HeaderName, HeaderValue, Request, Response, Uri};
use http_body_util::{LengthLimitError, Limited};
use hyper::body::Incoming;

use crate::access::{Networks, X_FORWARDED_FOR};
use crate::config::ProxySettings;
use crate::http_client;
use crate::telemetry;
use crate::util::with_ip_text;

// The forwarding headers hookonce writes, as names made once: a header map looks a name given
// as text up only after parsing it, at every call.
const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");

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
    client: http_client::Pooled,
    /// `scheme://authority` plus the base path without its trailing slash.
    base: String,
    /// The upstream's scheme and authority when its URL has no path of its own (the common
    /// case): a request's URI is then its own path and query on them, with nothing to parse.
    origin: Option<(Scheme, Authority)>,
    /// The `Host` every request is sent with ([`host_of`]).
    host: Option<HeaderValue>,
    timeout: Duration,
    body_limit: usize,
    /// Peers whose forwarding headers are passed on (`server.trusted_proxies`).
    trusted: Networks,
}

impl Upstream {
    /// The client for validated settings (the upstream URL was checked by `ProxySettings`).
    pub fn new(settings: &ProxySettings, body_limit: usize) -> Self {
        let client = http_client::pooled(Some(settings.upstream_timeout.0), usize::MAX);
        let base = settings.upstream.trim_end_matches('/').to_owned();
        let origin = origin_of(&base);
        let host = host_of(&base);
        Self {
            client,
            base,
            origin,
            host,
            timeout: settings.upstream_timeout.0,
            body_limit,
            trusted: Networks::default(),
        }
    }

    /// The same client, passing on the forwarding headers of peers in `trusted`.
    pub fn trusting(self, trusted: Networks) -> Self {
        Self { trusted, ..self }
    }

    /// `upstream_timeout`.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Rewrites a received request's head for the upstream: URI, `Host`, hop-by-hop headers,
    /// `X-Forwarded-*` and `Forwarded`.
    pub fn prepare(&self, parts: &mut request::Parts, peer: SocketAddr) -> Result<(), String> {
        parts.uri = upstream_uri(&self.base, self.origin.as_ref(), &parts.uri)?;
        parts.version = http::Version::HTTP_11;
        let headers = &mut parts.headers;
        strip_hop_by_hop(headers);
        let host = headers.remove(header::HOST);
        if let Some(upstream) = &self.host {
            headers.insert(header::HOST, upstream.clone());
        }
        let peer = peer.ip().to_canonical();
        let trusted = self.trusted.contains(peer);
        if !trusted {
            drop_forwarding(headers);
        }
        forwarded_for(headers, peer);
        if !headers.contains_key(&X_FORWARDED_PROTO) {
            headers.insert(X_FORWARDED_PROTO, HeaderValue::from_static("http"));
        }
        if let (false, Some(host)) = (headers.contains_key(&X_FORWARDED_HOST), host) {
            headers.insert(X_FORWARDED_HOST, host);
        }
        if trusted && headers.contains_key(header::FORWARDED) {
            append_forwarded(headers, peer);
        }
        Ok(())
    }

    /// A prepared request's body, cut off at `server.body_limit` while it streams.
    pub fn limit(&self, body: Body) -> Body {
        Body::new(Limited::new(body, self.body_limit))
    }

    /// Sends a prepared request and waits for the response head (no deadline of its own: the
    /// caller bounds the whole exchange with `upstream_timeout`).
    /// With telemetry on, the exchange is a client span whose `traceparent` the upstream gets
    /// (in place of any the client sent, which is the proxy span's parent).
    pub async fn send(
        &self,
        mut request: Request<Body>,
    ) -> Result<Response<Incoming>, UpstreamError> {
        let span = telemetry::Span::child("proxy upstream", telemetry::Kind::Client, Vec::new);
        span.inject(request.headers_mut());
        let result = self.client.request(request).await.map_err(|error| {
            if has_cause::<LengthLimitError>(&error) {
                UpstreamError::TooLarge
            } else {
                UpstreamError::Failed(error)
            }
        });
        match &result {
            Ok(response) => span.set(|| {
                [opentelemetry::KeyValue::new(
                    "http.response.status_code",
                    i64::from(response.status().as_u16()),
                )]
            }),
            Err(error) => span.fail(|| error.to_string()),
        }
        span.end();
        result
    }
}

/// Removes what an untrusted peer said about earlier hops: every `X-Forwarded-*`, `Forwarded`
/// and `X-Real-IP` header.
fn drop_forwarding(headers: &mut HeaderMap) {
    let doomed: Vec<HeaderName> = headers
        .keys()
        .filter(|name| {
            let name = name.as_str();
            name.starts_with("x-forwarded-") || name == "forwarded" || name == "x-real-ip"
        })
        .cloned()
        .collect();
    for name in doomed {
        headers.remove(name);
    }
}

/// Appends `item` to the list header `name`, its earlier lines joined into one.
fn append_to_list(headers: &mut HeaderMap, name: HeaderName, item: &str) {
    let earlier: Vec<&str> = headers
        .get_all(&name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect();
    let value = if earlier.is_empty() {
        HeaderValue::from_str(item)
    } else {
        HeaderValue::from_str(&format!("{}, {item}", earlier.join(", ")))
    };
    if let Ok(value) = value {
        headers.insert(name, value);
    }
}

/// Appends the peer to `X-Forwarded-For` (a list that trusted proxies before us may have
/// started).
fn forwarded_for(headers: &mut HeaderMap, peer: IpAddr) {
    with_ip_text(peer, |peer| {
        append_to_list(headers, X_FORWARDED_FOR, peer);
    });
}

/// The `Host` a request to `base` is sent with: its host, and its port unless that is the
/// scheme's default. The value hyper's client would set for each request (by `format!` when
/// there is a port), made once.
fn host_of(base: &str) -> Option<HeaderValue> {
    let uri = base.parse::<Uri>().ok()?;
    let host = uri.host()?;
    let default = if matches!(uri.scheme_str(), Some("https" | "wss")) {
        443
    } else {
        80
    };
    match uri.port_u16() {
        Some(port) if port != default => HeaderValue::from_str(&format!("{host}:{port}")).ok(),
        _ => HeaderValue::from_str(host).ok(),
    }
}

/// The scheme and authority of the upstream URL `base` (its trailing slash trimmed), when it has
/// no path of its own.
fn origin_of(base: &str) -> Option<(Scheme, Authority)> {
    let parts = base.parse::<Uri>().ok()?.into_parts();
    let bare = parts
        .path_and_query
        .as_ref()
        .is_none_or(|p| p.as_str().is_empty() || p == "/");
    Some((parts.scheme?, parts.authority?)).filter(|_| bare)
}

/// The upstream URI for a request received for `received`: `base`, then the request's path and
/// query; put together from `origin` (the parts of a `base` without a path) as they are.
fn upstream_uri(
    base: &str,
    origin: Option<&(Scheme, Authority)>,
    received: &Uri,
) -> Result<Uri, String> {
    if let (Some((scheme, authority)), Some(path_and_query)) = (origin, received.path_and_query()) {
        let mut parts = uri::Parts::default();
        parts.scheme = Some(scheme.clone());
        parts.authority = Some(authority.clone());
        parts.path_and_query = Some(path_and_query.clone());
        return Uri::from_parts(parts).map_err(|e| format!("cannot build the upstream URI: {e}"));
    }
    let path_and_query = received.path_and_query().map_or("/", |p| p.as_str());
    format!("{base}{path_and_query}")
        .parse::<Uri>()
        .map_err(|e| format!("cannot build the upstream URI: {e}"))
}

/// Appends the peer's element to `Forwarded` (RFC 7239: an IPv6 node quoted, in brackets).
fn append_forwarded(headers: &mut HeaderMap, peer: IpAddr) {
    let element = match peer {
        IpAddr::V4(v4) => format!("for={v4}"),
        IpAddr::V6(v6) => format!("for=\"[{v6}]\""),
    };
    append_to_list(headers, header::FORWARDED, &element);
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

/// The hop-by-hop headers of one message: the fixed list, `Proxy-*`, and the names its
/// `Connection` header lists, read once for all the names asked about (a message without
/// `Connection` costs nothing more).
pub struct HopByHop<'a> {
    listed: Vec<&'a str>,
}

impl<'a> HopByHop<'a> {
    pub fn of(headers: &'a HeaderMap) -> Self {
        Self {
            listed: connection_names(headers).collect(),
        }
    }

    pub fn contains(&self, name: &HeaderName) -> bool {
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
            || self
                .listed
                .iter()
                .any(|listed| listed.eq_ignore_ascii_case(name.as_str()))
    }
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
    let hop = HopByHop::of(headers);
    let doomed: Vec<HeaderName> = headers
        .keys()
        .filter(|name| hop.contains(name))
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
    fn the_upstream_uri_is_the_base_then_the_path_and_query() {
        let received: Uri = "/v1/orders?x=1".parse().unwrap();
        for (base, expected) in [
            (
                "http://127.0.0.1:3000",
                "http://127.0.0.1:3000/v1/orders?x=1",
            ),
            ("https://api.internal", "https://api.internal/v1/orders?x=1"),
            (
                "http://127.0.0.1:3000/api",
                "http://127.0.0.1:3000/api/v1/orders?x=1",
            ),
        ] {
            let origin = origin_of(base);
            assert_eq!(origin.is_some(), !base.ends_with("/api"), "{base}");
            let uri = upstream_uri(base, origin.as_ref(), &received).unwrap();
            assert_eq!(uri, expected.parse::<Uri>().unwrap());
            assert_eq!(uri.to_string(), expected);
        }
        // A received URI in absolute form keeps only its path and query.
        let absolute: Uri = "http://client.example/v1/orders".parse().unwrap();
        let base = "http://127.0.0.1:3000";
        let uri = upstream_uri(base, origin_of(base).as_ref(), &absolute).unwrap();
        assert_eq!(uri.to_string(), "http://127.0.0.1:3000/v1/orders");
    }

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

    fn forwarded_request() -> request::Parts {
        Request::post("/v1/orders?x=1&y")
            .header("host", "api.example.com")
            .header("x-forwarded-for", "203.0.113.7")
            .header("x-forwarded-proto", "https")
            .header("x-forwarded-host", "shop.example.com")
            .header("x-forwarded-port", "443")
            .header("x-real-ip", "203.0.113.7")
            .header("forwarded", "for=203.0.113.7;proto=https")
            .header("connection", "close")
            .body(())
            .unwrap()
            .into_parts()
            .0
    }

    fn upstream() -> Upstream {
        let settings = ProxySettings {
            upstream: "http://orders:3000/base/".to_owned(),
            ..ProxySettings::default()
        };
        let trusted = crate::config::Cidr::parse("192.0.2.0/24").unwrap();
        Upstream::new(&settings, 1024).trusting(Networks::new(&[trusted]))
    }

    /// The upstream's `Host`: what hyper's client would set, the port only when it is not the
    /// scheme's default.
    #[test]
    fn the_host_is_the_upstreams_authority() {
        for (base, host) in [
            ("http://orders:3000/base", "orders:3000"),
            ("http://orders:80", "orders"),
            ("http://orders:443", "orders:443"),
            ("https://api.example.com:443/v2", "api.example.com"),
            ("https://api.example.com:8443", "api.example.com:8443"),
            ("http://[::1]:8080", "[::1]:8080"),
            ("http://10.0.0.5", "10.0.0.5"),
        ] {
            assert_eq!(host_of(base).unwrap(), host, "{base}");
        }
    }

    #[test]
    fn an_untrusted_peers_forwarding_headers_are_replaced_by_what_hookonce_saw() {
        let mut parts = forwarded_request();
        let peer = ([198, 51, 100, 1], 5000).into();
        upstream().prepare(&mut parts, peer).unwrap();
        assert_eq!(parts.uri, "http://orders:3000/base/v1/orders?x=1&y");
        let headers = &parts.headers;
        assert_eq!(headers["host"], "orders:3000");
        assert!(headers.get("connection").is_none());
        assert_eq!(headers["x-forwarded-for"], "198.51.100.1");
        assert_eq!(headers["x-forwarded-host"], "api.example.com");
        assert_eq!(headers["x-forwarded-proto"], "http");
        for dropped in ["x-forwarded-port", "x-real-ip", "forwarded"] {
            assert!(headers.get(dropped).is_none(), "{dropped}");
        }
    }

    #[test]
    fn a_trusted_peers_forwarding_headers_are_kept_and_appended_to() {
        let mut parts = forwarded_request();
        upstream()
            .prepare(&mut parts, ([192, 0, 2, 1], 5000).into())
            .unwrap();
        let headers = &parts.headers;
        assert_eq!(headers["x-forwarded-for"], "203.0.113.7, 192.0.2.1");
        assert_eq!(headers["x-forwarded-host"], "shop.example.com");
        assert_eq!(headers["x-forwarded-proto"], "https");
        assert_eq!(headers["x-forwarded-port"], "443");
        assert_eq!(headers["x-real-ip"], "203.0.113.7");
        assert_eq!(
            headers["forwarded"],
            "for=203.0.113.7;proto=https, for=192.0.2.1"
        );
        // A trusted peer that says nothing gets what hookonce saw.
        let (mut bare, ()) = Request::post("/")
            .header("host", "api.example.com")
            .body(())
            .unwrap()
            .into_parts();
        let v6_trusted = crate::config::Cidr::parse("2001:db8::/32").unwrap();
        let settings = ProxySettings {
            upstream: "http://orders:3000".to_owned(),
            ..ProxySettings::default()
        };
        let v6 = Upstream::new(&settings, 1024).trusting(Networks::new(&[v6_trusted]));
        let peer: IpAddr = "2001:db8::7".parse().unwrap();
        v6.prepare(&mut bare, (peer, 5000).into()).unwrap();
        assert_eq!(bare.headers["x-forwarded-for"], "2001:db8::7");
        assert_eq!(bare.headers["x-forwarded-proto"], "http");
        assert_eq!(bare.headers["x-forwarded-host"], "api.example.com");
        assert!(bare.headers.get("forwarded").is_none());
        let mut with_forwarded = bare.clone();
        with_forwarded
            .headers
            .insert("forwarded", HeaderValue::from_static("for=203.0.113.9"));
        v6.prepare(&mut with_forwarded, (peer, 5000).into())
            .unwrap();
        assert_eq!(
            with_forwarded.headers["forwarded"],
            "for=203.0.113.9, for=\"[2001:db8::7]\""
        );
    }
}
