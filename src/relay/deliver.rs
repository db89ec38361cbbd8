//! One delivery attempt: `POST` the raw body to the route's worker with hookonce's headers,
//! then read the answer. 2xx is delivered; anything else is a [`Failure`] to retry or give up on.

use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{header, HeaderMap, HeaderName, HeaderValue};

use super::backoff::parse_retry_after;
use super::route::{Route, RouteSource};
use crate::http_client::{self, Pooled};
use crate::store::StreamEntry;
use crate::util::error_chain;

/// The most of a worker's answer that is read (to reuse the connection) and kept for the
/// dead letter's `last_error`.
const KEPT_ANSWER: usize = 200;
const READ_ANSWER: usize = 64 << 10;

/// The HTTP client every route of a relay shares: pooled connections, no redirects (a worker
/// that redirects is misconfigured, and following would resend the body elsewhere); each
/// attempt's deadline (the route's `timeout`) bounds its connecting too.
pub fn client() -> Pooled {
    http_client::pooled(None, 1024)
}

/// Why an attempt did not succeed.
#[derive(Debug, Clone)]
pub struct Failure {
    /// The worker's status; `None` when there was no answer (timeout, connection error).
    pub status: Option<u16>,
    pub error: String,
    /// The worker's `Retry-After`, if it sent one.
    pub retry_after: Option<Duration>,
}

/// The headers of one attempt: the route's static ones first, so that hookonce's own win.
pub fn headers(
    route: &Route,
    source: &RouteSource,
    (stream, entry): (&str, &StreamEntry),
    attempt: u32,
    now_unix: u64,
) -> HeaderMap {
    let credentials = route.credentials.load();
    let mut headers = credentials.headers.clone();
    if let Some(basic) = &route.basic_auth {
        headers
            .entry(header::AUTHORIZATION)
            .or_insert_with(|| basic.clone());
    }
    let event_id = entry.text("event_id");
    let key = source.target.record_key_in(stream, &event_id);
    let content_type = entry
        .field("content_type")
        .filter(|v| !v.is_empty())
        .unwrap_or(b"application/json");
    let fields: [(&str, &[u8]); 7] = [
        ("content-type", content_type),
        ("idempotency-key", key.as_bytes()),
        ("x-hookonce-source", source.name.as_bytes()),
        (
            "x-hookonce-provider",
            entry.field("provider").unwrap_or_default(),
        ),
        ("x-hookonce-event-id", event_id.as_bytes()),
        (
            "x-hookonce-event-type",
            entry.field("event_type").unwrap_or_default(),
        ),
        (
            "x-hookonce-received-at",
            entry.field("received_at").unwrap_or_default(),
        ),
    ];
    for (name, value) in fields {
        headers.insert(HeaderName::from_static(name), header_value(value));
    }
    headers.insert(
        HeaderName::from_static("x-hookonce-attempt"),
        HeaderValue::from(attempt),
    );
    if let Some(signer) = &credentials.signer {
        let body = entry.field("body").unwrap_or_default();
        for (name, value) in signer.sign(&key, now_unix, body) {
            headers.insert(
                HeaderName::from_static(name),
                header_value(value.as_bytes()),
            );
        }
    }
    headers
}

/// A header value from stored bytes; a control character (an event type is the provider's
/// text) becomes `?` rather than failing the delivery.
fn header_value(bytes: &[u8]) -> HeaderValue {
    HeaderValue::from_bytes(bytes).unwrap_or_else(|_| {
        let clean: Vec<u8> = bytes
            .iter()
            .map(|&b| {
                if b == b'\t' || (b >= 0x20 && b != 0x7f) {
                    b
                } else {
                    b'?'
                }
            })
            .collect();
        HeaderValue::from_bytes(&clean).unwrap_or_else(|_| HeaderValue::from_static("?"))
    })
}

/// One attempt. The error text never holds the URL (it may carry credentials).
pub async fn attempt(
    client: &Pooled,
    route: &Route,
    headers: HeaderMap,
    body: Bytes,
) -> Result<(), Failure> {
    let request = http_client::post(route.url.clone(), headers, body);
    let exchange = async {
        let response = client.request(request).await.map_err(|e| no_answer(&e))?;
        let status = response.status();
        let retry_after = response
            .headers()
            .get(http::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| parse_retry_after(v, SystemTime::now()));
        let answer = http_client::read_some(response, READ_ANSWER).await;
        if status.is_success() {
            return Ok(());
        }
        let text = String::from_utf8_lossy(&answer);
        let text: String = text.chars().take(KEPT_ANSWER).collect();
        Err(Failure {
            status: Some(status.as_u16()),
            error: format!("HTTP {}: {}", status.as_u16(), text.trim()),
            retry_after,
        })
    };
    match tokio::time::timeout(route.timeout, exchange).await {
        Ok(result) => result,
        Err(_) => Err(Failure {
            status: None,
            error: format!("no answer within {:?}", route.timeout),
            retry_after: None,
        }),
    }
}

/// The error text of an attempt without an answer (hyper's errors never hold the URL).
fn no_answer(error: &hyper_util::client::legacy::Error) -> Failure {
    Failure {
        status: None,
        error: error_chain(error),
        retry_after: None,
    }
}
