//! The Idempotency-Key proxy (docs/design.md, "Idempotency-Key proxy"), end to end: a real
//! upstream HTTP server (`support::upstream`), the daemon in this process or as the real binary,
//! over a real redis-server and the memory store alike.
//!
//! Topics: `core` (the core path on both stores, in one test each), `cli` (`inspect`, `forget`
//! and `check-config` on a proxy's keys), `replay` (keys, replay, pass-through), `upstream` (what the upstream answers and
//! which answers are stored), `concurrency` (duplicates in flight, lost responses, leases),
//! `store` (expiry, Redis down and back, what Redis holds), `incomplete` (answers that break
//! after a storable head, the exchange's deadline), `crash` (a proxy SIGKILLed
//! mid-request), `metrics`.

mod cli;
mod concurrency;
mod core;
mod crash;
mod edges;
mod incomplete;
mod metrics;
mod replay;
mod store;
mod upstream;

use bytes::Bytes;
use reqwest::header::HeaderMap;

use crate::support::metrics::PROXY_REQUESTS;
use crate::support::settings::ProxySettings;
use crate::support::upstream::Upstream;
use crate::support::{Backend, TestApp};

/// The proxy every test configures.
pub const PROXY: &str = "orders";
/// The routed path the tests post to.
pub const ORDERS: &str = "/v1/orders";
/// The principal of most requests.
pub const ALICE: &str = "Bearer alice";

/// A proxy named [`PROXY`] in front of `upstream`, otherwise the defaults.
pub fn settings(upstream: &Upstream) -> ProxySettings {
    ProxySettings {
        upstream: upstream.url(),
        ..ProxySettings::default()
    }
}

/// A daemon with only the proxy [`PROXY`] (no webhook source), changed by `change`.
pub async fn start(
    backend: Backend,
    upstream: &Upstream,
    change: impl FnOnce(&mut ProxySettings),
) -> TestApp {
    let mut proxy = settings(upstream);
    change(&mut proxy);
    TestApp::builder(backend)
        .without_sources()
        .proxy(PROXY, proxy)
        .start()
        .await
}

/// One answer of the proxy, read whole.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Answer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|v| v.to_str().unwrap())
    }

    pub fn replayed(&self) -> bool {
        self.header("idempotency-replayed") == Some("true")
    }

    /// The headers a replay must repeat: all but `Date` (each answer gets its own) and the
    /// replay's own marks, sorted by name with each name's values in order.
    pub fn stored_headers(&self) -> Vec<(String, Vec<u8>)> {
        let mut headers: Vec<(String, Vec<u8>)> = self
            .headers
            .iter()
            .filter(|(name, _)| {
                !matches!(
                    name.as_str(),
                    "date" | "idempotency-replayed" | "idempotency-replay-truncated"
                )
            })
            .map(|(name, value)| (name.as_str().to_owned(), value.as_bytes().to_vec()))
            .collect();
        headers.sort_by(|a, b| a.0.cmp(&b.0));
        headers
    }

    /// The problem+json body of an error hookonce answered itself, checked for its shape:
    /// the media type, `status` equal to the HTTP status, and the given `title`.
    pub fn assert_problem(&self, status: u16, title: &str) -> serde_json::Value {
        let problem = self.assert_problem_status(status);
        assert_eq!(problem["title"], title, "{problem}");
        problem
    }

    /// As [`Answer::assert_problem`], for an error whose title the contract leaves open: any
    /// non-empty one.
    pub fn assert_problem_status(&self, status: u16) -> serde_json::Value {
        assert_eq!(self.status, status, "{self:?}");
        let media = self.header("content-type").unwrap_or("");
        assert!(
            media.starts_with("application/problem+json"),
            "content-type {media:?} of {self:?}"
        );
        let problem: serde_json::Value = serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("problem+json body: {e}: {self:?}"));
        assert_eq!(problem["status"], status, "{problem}");
        assert!(
            problem["title"].as_str().is_some_and(|t| !t.is_empty()),
            "{problem}"
        );
        problem
    }

    pub fn text(&self) -> &str {
        std::str::from_utf8(&self.body).unwrap()
    }
}

/// Sends `method path` to the proxy with `headers` and `body`.
pub async fn send(
    t: &TestApp,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Answer {
    let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let mut request = t
        .client
        .request(method, t.proxy_url(PROXY, path))
        .body(body.to_vec());
    for (name, value) in headers {
        // From bytes: a test may send what `from_str` refuses (obs-text, a tab).
        let value = reqwest::header::HeaderValue::from_bytes(value.as_bytes()).unwrap();
        request = request.header(*name, value);
    }
    let response = request.send().await.expect("the proxy answers");
    Answer {
        status: response.status().as_u16(),
        headers: response.headers().clone(),
        body: response.bytes().await.unwrap(),
    }
}

/// `POST /v1/orders` as Alice with `Idempotency-Key: key`.
pub async fn order(t: &TestApp, key: &str, body: &[u8]) -> Answer {
    send(
        t,
        "POST",
        ORDERS,
        &[("idempotency-key", key), ("authorization", ALICE)],
        body,
    )
    .await
}

/// `hookonce_proxy_requests_total{proxy="orders",outcome}`.
pub async fn outcome(t: &TestApp, outcome: &str) -> f64 {
    t.metric(PROXY_REQUESTS, &[("proxy", PROXY), ("outcome", outcome)])
        .await
}

/// Every key and value Redis holds, as bytes, to look for what must not be stored in clear.
pub fn redis_dump(t: &TestApp) -> Vec<u8> {
    let redis = t.redis.as_ref().expect("the Redis backend");
    let mut connection = redis.connection();
    let keys: Vec<Vec<u8>> = ::redis::cmd("KEYS")
        .arg("*")
        .query(&mut connection)
        .unwrap();
    let mut dump = Vec::new();
    for key in keys {
        let kind: String = ::redis::cmd("TYPE")
            .arg(&key)
            .query(&mut connection)
            .unwrap();
        let value: Vec<Vec<u8>> = match kind.as_str() {
            "string" => vec![::redis::cmd("GET")
                .arg(&key)
                .query(&mut connection)
                .unwrap()],
            "hash" => ::redis::cmd("HGETALL")
                .arg(&key)
                .query(&mut connection)
                .unwrap(),
            other => panic!("unexpected Redis type {other} for a proxy key"),
        };
        dump.extend_from_slice(&key);
        dump.push(b'\n');
        for part in value {
            dump.extend_from_slice(&part);
            dump.push(b'\n');
        }
    }
    dump
}

pub fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}
