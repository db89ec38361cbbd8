//! How one webhook request ended ([`Reply`]), and how that is written: the response (body,
//! acknowledgement, `Retry-After`, `Connection: close`) and the one log line per request. The
//! status comes from `ingest::status_of`, the one outcome → HTTP mapping; this file only renders.

use std::time::Duration;

use axum::body::Body;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::Response;
use bytes::Bytes;

use crate::access::{retry_after_secs, ClientAddr};
use crate::outcome::Outcome;
use crate::util::REPLAYED;
use crate::webhooks::providers::Ack;

/// How a request ended: the outcome that speaks for it, and what to send back.
pub(super) struct Reply {
    pub outcome: Outcome,
    pub ack: Option<Ack>,
    pub replayed: bool,
    /// A handshake answer (Slack's url_verification) sent instead of an acknowledgement.
    pub handshake: Option<Bytes>,
    pub event_id: Option<String>,
    pub events: usize,
    pub detail: Option<String>,
    /// The `Retry-After` of a `rate_limited` answer: until the bucket has a token again.
    pub retry_after: Option<u64>,
}

impl Reply {
    pub fn rejected(outcome: Outcome, detail: impl ToString) -> Self {
        Self {
            outcome,
            ack: None,
            replayed: false,
            handshake: None,
            event_id: None,
            events: 0,
            detail: Some(detail.to_string()),
            retry_after: None,
        }
    }

    /// A `rate_limited` answer, to be retried after `wait`.
    pub fn limited(wait: Duration, detail: impl ToString) -> Self {
        Self {
            retry_after: Some(retry_after_secs(wait)),
            ..Self::rejected(Outcome::RateLimited, detail)
        }
    }

    /// The response with `status`; `retry_after` is `server.retry_after_secs`, sent with 503 and
    /// 409.
    pub fn render(self, status: StatusCode, retry_after: &HeaderValue) -> Response {
        if let Some(answer) = self.handshake {
            return typed(status, "application/json", answer);
        }
        if let Some(ack) = self.ack {
            let mut response = typed(status, ack.content_type, ack.body);
            if self.replayed {
                response
                    .headers_mut()
                    .insert(REPLAYED, HeaderValue::from_static("true"));
            }
            return response;
        }
        let body = format!("{{\"error\":\"{}\"}}", self.outcome.label());
        let mut response = typed(status, "application/json", body);
        if matches!(self.outcome, Outcome::Unavailable | Outcome::InFlight) {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, retry_after.clone());
        }
        if let Some(seconds) = self.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        if self.outcome == Outcome::BodyTimeout {
            // The rest of the body is not read: the connection cannot carry another request.
            response
                .headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        response
    }

    /// The request's one log line, at warn when the provider was not acknowledged (it will
    /// retry).
    pub fn log(&self, source: &str, client: &ClientAddr, status: StatusCode, elapsed: Duration) {
        let unavailable = self.outcome == Outcome::Unavailable;
        // The fields are made only for a line that is written: with the level off (`RUST_LOG=warn`
        // for the `info` line), formatting the client's address cost an allocation per request.
        let enabled = if unavailable {
            tracing::enabled!(tracing::Level::WARN)
        } else {
            tracing::enabled!(tracing::Level::INFO)
        };
        if !enabled {
            return;
        }
        client.with_text(|client| self.log_line(unavailable, source, client, status, elapsed));
    }

    fn log_line(
        &self,
        unavailable: bool,
        source: &str,
        client: &str,
        status: StatusCode,
        elapsed: Duration,
    ) {
        let latency_ms = crate::util::log_millis(elapsed.as_secs_f64());
        let event_id = self.event_id.as_deref().unwrap_or("");
        let outcome = self.outcome.label();
        let status = status.as_u16();
        let detail = self.detail.as_deref().unwrap_or("");
        macro_rules! log_at {
            ($level:ident, $message:literal) => {
                tracing::$level!(
                    message = $message,
                    source,
                    client,
                    event_id,
                    events = self.events,
                    outcome,
                    status,
                    latency_ms,
                    detail
                )
            };
        }
        if unavailable {
            log_at!(warn, "Webhook not acknowledged.");
        } else {
            log_at!(info, "Webhook handled.");
        }
    }
}

/// A response of `status` with `body` of type `content_type`. Built by hand rather than as
/// axum's `(status, [(CONTENT_TYPE, …)], body)`: that tuple's body sets a text/plain type for
/// the header part to replace, and the header part copies the static type into a new value.
fn typed(status: StatusCode, content_type: &'static str, body: impl Into<Body>) -> Response {
    let mut response = Response::new(body.into());
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}
