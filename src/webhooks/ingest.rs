//! One request's pipeline, and the one place where outcomes become HTTP answers
//! (docs/design.md, "Outcomes and status codes").
//!
//! source → who may call (the client's address against the source's `allowed_ips`, then the
//! client's allowance of rejected requests: [`crate::access`]) → body (bounded:
//! [`crate::body`]) → admission (the server's) → provider verification over the raw bytes → the
//! source's `rate_limit` → forward each event → acknowledge. Every request ends in exactly one [`Reply`]: it
//! is counted, logged once and turned into a response here, whichever step it stopped at.
//! Requests refused before they reach this pipeline (by hyper or the router) are counted here too,
//! by [`Ingest::refused`].

use std::future::Future;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::Response;
use futures_util::future::Either;
use opentelemetry::trace::TraceContextExt as _;
use opentelemetry::KeyValue;

use super::reply::Reply;
use super::{LiveSource, Source};
use crate::access::{ClientAddr, Gate};
use crate::body::{BodyError, BodyReader, ReceivedBody};
use crate::forward::{Delivery, Forwarded, Forwarder, Target};
use crate::metrics::{Metrics, SourceMetrics, UNKNOWN_SOURCE};
use crate::outcome::Outcome;
use crate::store::StoreError;
use crate::telemetry;
use crate::timer::RequestTimer;
use crate::util::{error_chain, unix_ms, FastMap};
use crate::webhooks::providers::{RawRequest, Verified, VerifiedEvent, VerifyError};

/// The request pipeline shared by every connection.
pub struct Ingest {
    sources: FastMap<String, Source>,
    unknown: SourceMetrics,
    forwarder: Arc<dyn Forwarder>,
    metrics: Arc<Metrics>,
    forward_latency: metrics::Histogram,
    body: Arc<BodyReader>,
    request_timeout: Duration,
    retry_after: HeaderValue,
    /// Trusted proxies and the clients' rejected requests; a reload replaces it.
    gate: ArcSwap<Gate>,
}

/// A request whose body is in, waiting to be admitted and handled.
pub struct Received {
    source: String,
    client: ClientAddr,
    /// The source's live part as the request found it: it finishes on this one, whatever a
    /// reload swaps in meanwhile.
    live: Arc<LiveSource>,
    headers: HeaderMap,
    body: ReceivedBody,
    started: Instant,
    /// The deadline timer of the request's connection.
    timer: RequestTimer,
}

impl Ingest {
    pub fn new(
        sources: FastMap<String, Source>,
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
            gate: ArcSwap::from_pointee(Gate::default()),
        }
    }

    /// The configured source `name`.
    pub fn source(&self, name: &str) -> Option<&Source> {
        self.sources.get(name)
    }

    /// The same pipeline behind `gate` (trusted proxies, the clients' rejected requests).
    pub fn with_gate(self, gate: Gate) -> Self {
        self.gate.store(Arc::new(gate));
        self
    }

    /// Replaces the gate (a reload); requests already past it are not charged twice.
    pub fn swap_gate(&self, gate: Gate) {
        self.gate.store(Arc::new(gate));
    }

    /// Where a configured source's events go.
    pub fn target(&self, source: &str) -> Option<&Target> {
        self.sources.get(source).map(|s| &s.target)
    }

    pub fn forwarder(&self) -> &Arc<dyn Forwarder> {
        &self.forwarder
    }

    /// The first step of `POST /webhooks/{source}` from the socket peer `peer`: the source, who
    /// may call it, and the whole body. A request that ends here (an unknown source, a client not
    /// allowed or over its rejected requests, a body too large, too slow, cut short or over the
    /// memory budget) is answered and counted here, without ever being admitted; the refusals
    /// before the body leave it unread (the server's lingering close drains it).
    pub async fn receive(
        &self,
        source: String,
        peer: IpAddr,
        headers: HeaderMap,
        body: Body,
        timer: RequestTimer,
    ) -> Result<Received, Response> {
        let started = Instant::now();
        let gate = self.gate.load();
        let client = gate.client(peer, &headers);
        let Some(known) = self.sources.get(&source) else {
            let reply = Reply::rejected(Outcome::UnknownSource, "no such source");
            return Err(self.conclude(&client, &source, reply, started));
        };
        let live = known.live.load_full();
        if !live.access.admits(&client) {
            let detail = format!("client {client} is not in sources.{source}.allowed_ips");
            let reply = Reply::rejected(Outcome::Forbidden, detail);
            return Err(self.conclude(&client, &source, reply, started));
        }
        if let Err(wait) = gate.check(&client) {
            let detail = format!("client {client} is over server.rejected_limit");
            return Err(self.conclude(&client, &source, Reply::limited(wait, detail), started));
        }
        match self.body.read(&headers, body).await {
            Ok(body) => Ok(Received {
                source,
                client,
                live,
                headers,
                body,
                started,
                timer,
            }),
            Err(error) => {
                let reply = Reply::rejected(body_outcome(&error), error_chain(&error));
                Err(self.conclude(&client, &source, reply, started))
            }
        }
    }

    /// Charges `client` for a request that ended in a rejection (see [`crate::access::charges`]),
    /// then counts, logs and renders it.
    fn conclude(
        &self,
        client: &ClientAddr,
        source: &str,
        reply: Reply,
        started: Instant,
    ) -> Response {
        self.gate.load().settle(client, reply.outcome);
        self.finish(source, client, reply, started)
    }

    /// Answers a received request that could not be admitted (too many in flight).
    pub fn overloaded(&self, request: Received) -> Response {
        let reply = Reply::rejected(Outcome::Unavailable, "too many requests in flight");
        self.finish(&request.source, &request.client, reply, request.started)
    }

    /// The rest of an admitted request, within what is left of `server.request_timeout`: in
    /// its server span when telemetry is on.
    ///
    /// Not an `async fn`: one would hold both paths' futures side by side (and the request
    /// beside them), a future twice as large for every request to move. The traced path is
    /// boxed, so the future is the untraced path's.
    pub fn process(&self, request: Received) -> impl Future<Output = Response> + Send + '_ {
        if telemetry::enabled() {
            Either::Right(Box::pin(self.process_traced(request)))
        } else {
            Either::Left(self.process_in_span(request))
        }
    }

    async fn process_traced(&self, request: Received) -> Response {
        // The source is named as the request ends (`annotate`), as its log line names it.
        let span = telemetry::Span::server("webhook", &request.headers, || {
            [KeyValue::new("http.request.method", "POST")]
        });
        let response = telemetry::within(&span, self.process_in_span(request)).await;
        span.answered(response.status().as_u16());
        response
    }

    async fn process_in_span(&self, request: Received) -> Response {
        let deadline = request.started + self.request_timeout;
        let reply = self.pipeline(&request, deadline).await;
        self.conclude(&request.client, &request.source, reply, request.started)
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

    /// Verifies and forwards a received request. Its one wait is the forwarder's call, which
    /// [`Ingest::forward_events`] keeps within `deadline` (`server.request_timeout` from the
    /// headers): any other wait added here must be bounded by it too.
    async fn pipeline(&self, received: &Received, deadline: Instant) -> Reply {
        let Some(source) = self.sources.get(&received.source) else {
            return Reply::rejected(Outcome::UnknownSource, "no such source");
        };
        // Loaded once, at `receive`: a reload that swaps the provider mid-request does not change
        // this one's.
        let live = &received.live;
        let headers = &received.headers;
        let received_at_ms = unix_ms();
        let request = RawRequest {
            headers,
            body: &received.body.bytes,
            now_unix: (received_at_ms / 1000) as i64,
        };
        let verifying = telemetry::Span::child("verify", telemetry::Kind::Internal, Vec::new);
        let verified = live.provider.verify(&request);
        if let Err(error) = &verified {
            verifying.fail(|| error.to_string());
        }
        verifying.end();
        let events = match verified {
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
                    retry_after: None,
                }
            }
            Err(error) => return Reply::rejected(verify_outcome(&error), error),
        };
        if events.is_empty() {
            return Reply::rejected(Outcome::Malformed, "request carries no event");
        }
        // Only now, verified: a forged delivery must not spend the source's allowance.
        if let Err(wait) = live.access.take_delivery() {
            let detail = format!("over sources.{}.rate_limit", received.source);
            return Reply::limited(wait, detail);
        }
        self.forward_events(source, live, &events, received_at_ms, received, deadline)
            .await
    }

    /// Forwards every event of one verified request in one forwarder call, answered by
    /// `deadline` (else 503, nothing counted per event); each event is counted under its own
    /// outcome, and the reply speaks for the request (see [`Outcome::of_request`]).
    async fn forward_events(
        &self,
        source: &Source,
        live: &LiveSource,
        events: &[VerifiedEvent],
        received_at_ms: u64,
        received: &Received,
        deadline: Instant,
    ) -> Reply {
        let content_type = received
            .headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok());
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
        let forwarding = self.forwarder.forward_all(&deliveries);
        // One timer, the connection's: the forwarder's bound when it ends first (running out of
        // it is the store's timeout), else the request's deadline.
        let (until, bound) = match self.forwarder.bound() {
            Some(bound) if started + bound < deadline => (started + bound, Some(bound)),
            _ => (deadline, None),
        };
        let result = match (received.timer.within(until, forwarding).await, bound) {
            (Some(result), _) => result,
            (None, Some(bound)) => Err(StoreError::Timeout(bound).into()),
            (None, None) => return Reply::rejected(Outcome::Unavailable, "request timed out"),
        };
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
            retry_after: None,
        }
    }

    /// Counts, logs and renders one finished request.
    fn finish(&self, name: &str, client: &ClientAddr, reply: Reply, started: Instant) -> Response {
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
        if telemetry::enabled() {
            annotate(label, &reply, status);
        }
        reply.log(label, client, status, elapsed);
        reply.render(status, &self.retry_after)
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
        Outcome::Forbidden => StatusCode::FORBIDDEN,
        Outcome::RateLimited => StatusCode::TOO_MANY_REQUESTS,
    }
}

/// Writes what came of the request onto its span (the current one), when that span records:
/// the source as its log line names it, the outcome and the event ID. The status code is set as
/// the span is answered (`Span::answered`): a key appears once in a span's attributes.
fn annotate(source: &str, reply: &Reply, status: StatusCode) {
    let cx = opentelemetry::Context::current();
    let span = cx.span();
    if !span.is_recording() {
        return;
    }
    span.set_attribute(KeyValue::new("hookonce.source", source.to_owned()));
    span.set_attribute(KeyValue::new("hookonce.outcome", reply.outcome.label()));
    if let Some(event_id) = &reply.event_id {
        span.set_attribute(KeyValue::new("hookonce.event_id", event_id.clone()));
    }
    if status.is_server_error() {
        span.set_status(opentelemetry::trace::Status::error(reply.outcome.label()));
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
