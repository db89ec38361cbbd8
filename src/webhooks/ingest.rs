//! One request's pipeline, and the one place where outcomes become HTTP answers
//! (docs/design.md, "Outcomes and status codes").
//!
//! body (bounded: [`crate::body`]) → admission (the server's) → provider verification over the
//! raw bytes → forward each event → acknowledge. Every request ends in exactly one [`Reply`]: it
//! is counted, logged once and turned into a response here, whichever step it stopped at.
//! Requests refused before they reach this pipeline (by hyper or the router) are counted here too,
//! by [`Ingest::refused`].

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;

use super::{LiveSource, Source};
use crate::body::{BodyError, BodyReader, ReceivedBody};
use crate::forward::{Delivery, Forwarded, Forwarder, Target};
use crate::metrics::{Metrics, SourceMetrics, UNKNOWN_SOURCE};
use crate::outcome::Outcome;
use crate::util::{error_chain, unix_ms};
use crate::webhooks::providers::{Ack, RawRequest, Verified, VerifiedEvent, VerifyError};

/// The request pipeline shared by every connection.
pub struct Ingest {
    sources: HashMap<String, Source>,
    unknown: SourceMetrics,
    forwarder: Arc<dyn Forwarder>,
    metrics: Arc<Metrics>,
    forward_latency: metrics::Histogram,
    body: Arc<BodyReader>,
    request_timeout: Duration,
    retry_after: HeaderValue,
}

/// A request whose body is in, waiting to be admitted and handled.
pub struct Received {
    source: String,
    headers: HeaderMap,
    body: ReceivedBody,
    started: Instant,
}

/// How a request ended: the outcome that speaks for it, and what to send back.
struct Reply {
    outcome: Outcome,
    ack: Option<Ack>,
    replayed: bool,
    /// A handshake answer (Slack's url_verification) sent instead of an acknowledgement.
    handshake: Option<Bytes>,
    event_id: Option<String>,
    events: usize,
    detail: Option<String>,
}

impl Reply {
    fn rejected(outcome: Outcome, detail: impl ToString) -> Self {
        Self {
            outcome,
            ack: None,
            replayed: false,
            handshake: None,
            event_id: None,
            events: 0,
            detail: Some(detail.to_string()),
        }
    }
}

impl Ingest {
    pub fn new(
        sources: HashMap<String, Source>,
        forwarder: Arc<dyn Forwarder>,
        metrics: Arc<Metrics>,
        body: Arc<BodyReader>,
        request_timeout: Duration,
        retry_after_secs: u32,
    ) -> Self {
        let forward_latency = metrics.forward_to(forwarder.sink_label());
        Self {
            unknown: metrics.source(UNKNOWN_SOURCE),
            sources,
            forwarder,
            metrics,
            forward_latency,
            body,
            request_timeout,
            retry_after: HeaderValue::from(retry_after_secs),
        }
    }

    /// The configured source `name`.
    pub fn source(&self, name: &str) -> Option<&Source> {
        self.sources.get(name)
    }

    /// Where a configured source's events go.
    pub fn target(&self, source: &str) -> Option<&Target> {
        self.sources.get(source).map(|s| &s.target)
    }

    pub fn forwarder(&self) -> &Arc<dyn Forwarder> {
        &self.forwarder
    }

    /// The first step of `POST /webhooks/{source}`: the source and the whole body. A request
    /// that ends here (an unknown source, a body too large, too slow, cut short or over the memory
    /// budget) is answered and counted here, without ever being admitted.
    pub async fn receive(
        &self,
        source: String,
        headers: HeaderMap,
        body: Body,
    ) -> Result<Received, Response> {
        let started = Instant::now();
        if !self.sources.contains_key(&source) {
            let reply = Reply::rejected(Outcome::UnknownSource, "no such source");
            return Err(self.finish(&source, reply, started));
        }
        match self.body.read(&headers, body).await {
            Ok(body) => Ok(Received {
                source,
                headers,
                body,
                started,
            }),
            Err(error) => {
                let reply = Reply::rejected(body_outcome(&error), error_chain(&error));
                Err(self.finish(&source, reply, started))
            }
        }
    }

    /// Answers a received request that could not be admitted (too many in flight).
    pub fn overloaded(&self, request: Received) -> Response {
        let reply = Reply::rejected(Outcome::Unavailable, "too many requests in flight");
        self.finish(&request.source, reply, request.started)
    }

    /// The rest of an admitted request, within what is left of `server.request_timeout`.
    pub async fn process(&self, request: Received) -> Response {
        let left = self
            .request_timeout
            .saturating_sub(request.started.elapsed());
        let reply = match tokio::time::timeout(left, self.pipeline(&request)).await {
            Ok(reply) => reply,
            Err(_) => Reply::rejected(Outcome::Unavailable, "request timed out"),
        };
        self.finish(&request.source, reply, request.started)
    }

    /// Counts (and logs) a request that hyper or the router refused before it reached
    /// [`Ingest::receive`]: under its source when `source` names a configured one, else under
    /// `_unknown`. It carries no event, so only `hookonce_http_requests_total` counts it.
    pub fn refused(&self, source: Option<&str>, status: StatusCode) {
        let (label, metrics) = match source.and_then(|name| self.sources.get_key_value(name)) {
            Some((name, source)) => (name.as_str(), &source.metrics),
            None => (UNKNOWN_SOURCE, &self.unknown),
        };
        metrics.refused(&self.metrics, status.as_u16());
        tracing::info!(
            message = "Request refused before the webhook handler.",
            source = label,
            status = status.as_u16()
        );
    }

    async fn pipeline(&self, received: &Received) -> Reply {
        let Some(source) = self.sources.get(&received.source) else {
            return Reply::rejected(Outcome::UnknownSource, "no such source");
        };
        // Loaded once: a reload that swaps the provider mid-request does not change this one's.
        let live = source.live.load_full();
        let headers = &received.headers;
        let received_at_ms = unix_ms();
        let request = RawRequest {
            headers,
            body: &received.body.bytes,
            now_unix: (received_at_ms / 1000) as i64,
        };
        let events = match live.provider.verify(&request) {
            Ok(Verified::Events(events)) => events,
            Ok(Verified::Handshake(answer)) => {
                return Reply {
                    outcome: Outcome::Forwarded,
                    ack: None,
                    replayed: false,
                    handshake: Some(answer),
                    event_id: None,
                    events: 0,
                    detail: Some("handshake answered".to_owned()),
                }
            }
            Err(error) => return Reply::rejected(verify_outcome(&error), error),
        };
        if events.is_empty() {
            return Reply::rejected(Outcome::Malformed, "request carries no event");
        }
        let content_type = headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok());
        self.forward_events(source, &live, &events, received_at_ms, content_type)
            .await
    }

    /// Forwards every event of one verified request in one forwarder call; each event is
    /// counted under its own outcome, and the reply speaks for the request (see
    /// [`Outcome::of_request`]).
    async fn forward_events(
        &self,
        source: &Source,
        live: &LiveSource,
        events: &[VerifiedEvent],
        received_at_ms: u64,
        content_type: Option<&str>,
    ) -> Reply {
        let deliveries: Vec<Delivery<'_>> = events
            .iter()
            .map(|event| Delivery {
                target: &source.target,
                event,
                received_at_ms,
                content_type,
            })
            .collect();
        let started = Instant::now();
        let result = self.forwarder.forward_all(&deliveries).await;
        self.forward_latency.record(started.elapsed().as_secs_f64());
        let (outcomes, detail) = match &result {
            Ok(answers) if answers.len() == events.len() => {
                (answers.iter().map(forward_outcome).collect(), None)
            }
            Ok(_) => (
                vec![Outcome::Unavailable; events.len()],
                Some("the forwarder lost track of an event".to_owned()),
            ),
            Err(error) => (
                vec![Outcome::Unavailable; events.len()],
                Some(error_chain(error)),
            ),
        };
        let outcome = Outcome::of_request(&outcomes);
        let answers = result.as_deref().unwrap_or_default();
        for (i, event_outcome) in outcomes.iter().enumerate() {
            // An event withheld with its request counts under the request's outcome: that is
            // what kept it out of the queue.
            match answers.get(i) {
                Some(Forwarded::Withheld) => source.metrics.event(outcome),
                Some(Forwarded::New {
                    reclaimed: true, ..
                }) => {
                    source.metrics.event(*event_outcome);
                    source.metrics.lease_reclaimed();
                }
                _ => source.metrics.event(*event_outcome),
            }
        }
        Reply {
            outcome,
            ack: outcome.is_accepted().then(|| live.provider.ack()),
            replayed: outcomes.iter().all(|o| *o == Outcome::Duplicate),
            handshake: None,
            event_id: Some(events[0].event_id().to_owned()),
            events: events.len(),
            detail,
        }
    }

    /// Counts, logs and renders one finished request.
    fn finish(&self, name: &str, reply: Reply, started: Instant) -> Response {
        let status = status_of(reply.outcome);
        let (label, metrics) = match self.sources.get(name) {
            Some(source) => (name, &source.metrics),
            None => (UNKNOWN_SOURCE, &self.unknown),
        };
        // Events that reached the forwarder were counted one by one; a request rejected before
        // that counts as one event of its outcome.
        if reply.events == 0 && reply.handshake.is_none() {
            metrics.event(reply.outcome);
        }
        let elapsed = started.elapsed();
        metrics.request(
            &self.metrics,
            reply.outcome,
            status.as_u16(),
            elapsed.as_secs_f64(),
        );
        log_request(label, &reply, status, elapsed);
        self.render(reply, status)
    }

    fn render(&self, reply: Reply, status: StatusCode) -> Response {
        if let Some(answer) = reply.handshake {
            return (status, [(header::CONTENT_TYPE, "application/json")], answer).into_response();
        }
        if let Some(ack) = reply.ack {
            let mut response =
                (status, [(header::CONTENT_TYPE, ack.content_type)], ack.body).into_response();
            if reply.replayed {
                response
                    .headers_mut()
                    .insert("idempotency-replayed", HeaderValue::from_static("true"));
            }
            return response;
        }
        let body = format!("{{\"error\":\"{}\"}}", reply.outcome.label());
        let mut response =
            (status, [(header::CONTENT_TYPE, "application/json")], body).into_response();
        if matches!(reply.outcome, Outcome::Unavailable | Outcome::InFlight) {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, self.retry_after.clone());
        }
        if reply.outcome == Outcome::BodyTimeout {
            // The rest of the body is not read: the connection cannot carry another request.
            response
                .headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        response
    }
}

/// The HTTP status of every outcome. The only such mapping in the code.
pub fn status_of(outcome: Outcome) -> StatusCode {
    match outcome {
        Outcome::Forwarded | Outcome::Duplicate => StatusCode::OK,
        Outcome::InFlight => StatusCode::CONFLICT,
        Outcome::PayloadMismatch => StatusCode::UNPROCESSABLE_ENTITY,
        Outcome::InvalidSignature | Outcome::StaleTimestamp => StatusCode::UNAUTHORIZED,
        Outcome::Malformed => StatusCode::BAD_REQUEST,
        // Nobody reads this answer: the client is gone. 400 is what it would have heard (its
        // request was incomplete) and what `hookonce_http_requests_total` records.
        Outcome::Aborted => StatusCode::BAD_REQUEST,
        Outcome::BodyTimeout => StatusCode::REQUEST_TIMEOUT,
        Outcome::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        Outcome::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        Outcome::UnknownSource => StatusCode::NOT_FOUND,
    }
}

/// The outcome of a request whose body did not arrive.
fn body_outcome(error: &BodyError) -> Outcome {
    match error {
        BodyError::DeclaredTooLarge(_) | BodyError::TooLarge => Outcome::TooLarge,
        BodyError::TimedOut(_) => Outcome::BodyTimeout,
        BodyError::MemoryFull => Outcome::Unavailable,
        BodyError::Aborted(_) => Outcome::Aborted,
        BodyError::Unreadable(_) => Outcome::Malformed,
    }
}

fn verify_outcome(error: &VerifyError) -> Outcome {
    match error {
        VerifyError::MissingHeader(_)
        | VerifyError::GarbledHeader(_)
        | VerifyError::BadSignature => Outcome::InvalidSignature,
        VerifyError::StaleTimestamp => Outcome::StaleTimestamp,
        VerifyError::Malformed(_) => Outcome::Malformed,
    }
}

/// One event's outcome. A withheld event is new but was not written because another event of
/// its request was refused; it counts under the request's outcome, so here it is the mildest.
fn forward_outcome(answer: &Forwarded) -> Outcome {
    match answer {
        Forwarded::New { .. } | Forwarded::Withheld => Outcome::Forwarded,
        Forwarded::Duplicate { .. } => Outcome::Duplicate,
        Forwarded::Mismatch => Outcome::PayloadMismatch,
        Forwarded::InFlight => Outcome::InFlight,
    }
}

fn log_request(source: &str, reply: &Reply, status: StatusCode, elapsed: Duration) {
    let latency_ms = elapsed.as_secs_f64() * 1000.0;
    let event_id = reply.event_id.as_deref().unwrap_or("");
    let outcome = reply.outcome.label();
    let status = status.as_u16();
    let detail = reply.detail.as_deref().unwrap_or("");
    // One line per request, at warn when the provider was not acknowledged (it will retry).
    macro_rules! log_at {
        ($level:ident, $message:literal) => {
            tracing::$level!(
                message = $message,
                source,
                event_id,
                events = reply.events,
                outcome,
                status,
                latency_ms,
                detail
            )
        };
    }
    if reply.outcome == Outcome::Unavailable {
        log_at!(warn, "Webhook not acknowledged.");
    } else {
        log_at!(info, "Webhook handled.");
    }
}
