//! The Idempotency-Key proxy: a reverse proxy in front of an internal HTTP API that executes each
//! keyed request once and answers its retries with the first response (docs/design.md,
//! "Idempotency-Key proxy").
//!
//! A request whose method and path match (`route`) and that carries a valid key (`key`) is
//! claimed in the ledger under a key derived from its principal, method, path and key (`scope`),
//! forwarded (`upstream`), and its response stored (`response`) for `ttl`; a retry gets that
//! response again, a retry with another payload 422, one while the first is running 409
//! (`problem`). Everything else passes through untouched, also while the store is down.
//!
//! Public API: [`Proxy::build`]`(name, &settings, door, &metrics)` per `[proxies.NAME]`, where
//! the [`Door`] is what every proxy shares with the webhook front (the ledger, the body reader and
//! the admission pool);
//! [`Proxy::handle`]`(request, peer)` answers one request (`server` calls it from the proxy's
//! listener); [`Proxy::record_key`] is the store key `hookonce inspect` and `forget` read;
//! [`Proxy::refresh_gauges`] updates the stuck-claim gauges (the metrics upkeep task).
//! [`Proxy::answer`] is the one place where an outcome becomes an HTTP answer.

mod claims;
mod execute;
pub mod key;
mod passthrough;
pub mod problem;
#[cfg(test)]
mod property_tests;
pub mod response;
pub mod route_match;
pub mod scope;
pub mod upstream;

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, Request, Response};
use futures_util::future::Either;

use crate::access::Networks;
use crate::admission::Admission;
use crate::body::{BodyError, BodyReader, ReceivedBody};
use crate::config::{ConfigError, Settings};
use crate::ledger::Ledger;
use crate::metrics::{Metrics, ProxyMetrics};
use crate::outcome::ProxyOutcome;
use crate::telemetry;
use crate::util::finish_even_if_dropped;
use claims::Claims;
use key::KeyError;
use opentelemetry::KeyValue;
use problem::Problem;
use response::StoredResponse;
use route_match::{Routes, Routing};
use scope::Scope;
use upstream::{Upstream, UpstreamError};

pub(crate) use crate::util::error_chain;

/// One configured proxy, ready to serve.
pub struct Proxy {
    name: String,
    routes: Routes,
    require_key: bool,
    scope_headers: Vec<HeaderName>,
    key_prefix: String,
    ttl: Duration,
    lease: Duration,
    wait: Duration,
    max_stored_body: usize,
    retry_statuses: Vec<u16>,
    store_set_cookie: bool,
    body_limit: usize,
    retry_after: HeaderValue,
    ledger: Arc<dyn Ledger>,
    body: Arc<BodyReader>,
    admission: Arc<Admission>,
    upstream: Upstream,
    metrics: ProxyMetrics,
    claims: Claims,
}

/// What every proxy shares with the webhook front: the ledger its records live in, the body reader
/// (deadline and memory budget) and the pool of admission permits.
#[derive(Clone)]
pub struct Door {
    pub ledger: Arc<dyn Ledger>,
    pub body: Arc<BodyReader>,
    pub admission: Arc<Admission>,
}

/// How a request ended: the outcome that is counted, and what the client gets.
struct ProxyReply {
    outcome: ProxyOutcome,
    ending: Ending,
    detail: Option<String>,
}

enum Ending {
    /// The upstream's answer (executed, passed through, or a released retry status).
    Upstream(Response<Body>),
    /// A stored response, answered again.
    Replay(StoredResponse),
    /// The upstream gave no answer.
    Failed(UpstreamError),
    /// hookonce answers by itself; the outcome says how.
    Refused,
}

impl ProxyReply {
    fn refused(outcome: ProxyOutcome, detail: impl ToString) -> Self {
        Self {
            outcome,
            ending: Ending::Refused,
            detail: Some(detail.to_string()),
        }
    }
}

/// One keyed request, read and identified, on its way to the ledger.
struct KeyedRequest {
    record_key: String,
    fingerprint: String,
    parts: axum::http::request::Parts,
    /// The body, holding its share of the body memory budget until the request is done.
    body: ReceivedBody,
    peer: SocketAddr,
    /// The admission permit, held until the request is settled (also after its client left).
    _admitted: crate::admission::Admitted,
}

impl Proxy {
    /// The proxy `[proxies.<name>]` of validated `settings`, keeping its records in the door's
    /// ledger.
    pub fn build(name: &str, settings: &Settings, door: Door, metrics: &Metrics) -> Option<Self> {
        let proxy = settings.proxies.get(name)?;
        let body_limit = settings.server.body_limit.0 as usize;
        let metrics = metrics.proxy(name);
        Some(Self {
            name: name.to_owned(),
            routes: Routes::new(&proxy.methods, &proxy.routes),
            require_key: proxy.require_key,
            scope_headers: proxy
                .scope_headers
                .iter()
                .filter_map(|h| HeaderName::from_bytes(h.as_bytes()).ok())
                .collect(),
            key_prefix: settings.store.key_prefix.clone(),
            ttl: proxy.ttl.0,
            lease: proxy.lease.0,
            wait: proxy.wait.0,
            max_stored_body: proxy.max_stored_body.0 as usize,
            retry_statuses: proxy.retry_statuses.clone(),
            store_set_cookie: proxy.store_set_cookie,
            body_limit,
            retry_after: HeaderValue::from(settings.server.retry_after_secs),
            ledger: door.ledger,
            body: door.body,
            admission: door.admission,
            upstream: Upstream::new(proxy, body_limit)
                .trusting(Networks::new(&settings.server.trusted_proxies)),
            claims: Claims::new(metrics.claims_held.clone()),
            metrics,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The store key of `key` sent by the principal in `headers` to `method path`.
    pub fn record_key(
        &self,
        headers: &HeaderMap,
        method: &Method,
        path: &str,
        key: &str,
    ) -> String {
        let scope = Scope::of(headers, &self.scope_headers);
        scope::record_key(&self.key_prefix, &self.name, &scope, method, path, key)
    }

    /// The configured scope headers, for the operator commands.
    pub fn scope_headers(&self) -> &[HeaderName] {
        &self.scope_headers
    }

    /// The reply to a request that could not be admitted (`server.max_in_flight`).
    fn overloaded() -> ProxyReply {
        ProxyReply::refused(ProxyOutcome::Unavailable, "too many requests in flight")
    }

    /// Answers one request received on this proxy's listener from `peer`: in its server span
    /// when telemetry is on.
    ///
    /// Not an `async fn`: one would hold both paths' futures side by side, a future twice as
    /// large for every request to move. The traced path is boxed, so the future is the
    /// untraced path's.
    pub fn handle(
        self: &Arc<Self>,
        request: Request<Body>,
        peer: SocketAddr,
    ) -> impl Future<Output = Response<Body>> + Send + '_ {
        let started = Instant::now();
        if telemetry::enabled() {
            Either::Right(Box::pin(self.handle_traced(request, peer, started)))
        } else {
            Either::Left(self.handle_in_span(request, peer, started))
        }
    }

    /// The request's server span, beneath its `traceparent` when it carries one. Neither its
    /// Idempotency-Key nor its scope headers are ever an attribute.
    async fn handle_traced(
        self: &Arc<Self>,
        request: Request<Body>,
        peer: SocketAddr,
        started: Instant,
    ) -> Response<Body> {
        let span = telemetry::Span::server("proxy", request.headers(), || {
            [
                KeyValue::new("hookonce.proxy", self.name.clone()),
                KeyValue::new("http.request.method", request.method().to_string()),
            ]
        });
        let response = telemetry::within(&span, self.handle_in_span(request, peer, started)).await;
        span.answered(response.status().as_u16());
        response
    }

    /// Routes and answers the request, in whatever span is current.
    async fn handle_in_span(
        self: &Arc<Self>,
        request: Request<Body>,
        peer: SocketAddr,
        started: Instant,
    ) -> Response<Body> {
        let method = request.method().clone();
        let path = request.uri().path().to_owned();
        match self.route(request, peer, started).await {
            Routed::Replied(reply) => self.finish(reply, &method, &path, started),
            Routed::Answered(response) => response,
        }
    }

    /// Updates the stuck-claim gauges from the claims held now.
    pub fn refresh_gauges(&self) {
        let (count, oldest) = self.claims.snapshot();
        self.metrics.claims_held.set(count as f64);
        self.metrics
            .oldest_claim
            .set(oldest.map_or(0.0, |age| age.as_secs_f64()));
    }

    /// `request` passed through, its exchange on the heap: the upstream client's future is
    /// several kilobytes, and held inline it would make every keyed request's future (moved on
    /// each spawn and wrap) that much larger too.
    fn passed(
        &self,
        request: Request<Body>,
        peer: SocketAddr,
    ) -> Pin<Box<impl Future<Output = ProxyReply> + '_>> {
        Box::pin(self.pass_through(request, peer))
    }

    async fn route(
        self: &Arc<Self>,
        request: Request<Body>,
        peer: SocketAddr,
        started: Instant,
    ) -> Routed {
        let refused =
            |outcome, detail: String| Routed::Replied(ProxyReply::refused(outcome, detail));
        match self.routes.route(request.method(), request.uri().path()) {
            Routing::Unrouted => return Routed::Replied(self.passed(request, peer).await),
            Routing::NonCanonical => {
                return refused(
                    ProxyOutcome::NonCanonicalPath,
                    "path not in canonical form".into(),
                )
            }
            Routing::Keyed => {}
        }
        let key = match key::from_headers(request.headers()) {
            Ok(key) => key,
            Err(KeyError::Missing) if !self.require_key => {
                return Routed::Replied(self.passed(request, peer).await)
            }
            Err(KeyError::Missing) => {
                return refused(ProxyOutcome::MissingKey, "no Idempotency-Key".into())
            }
            Err(KeyError::Invalid) => {
                return refused(ProxyOutcome::InvalidKey, "malformed Idempotency-Key".into())
            }
        };
        let (parts, body) = request.into_parts();
        // The body first, under its own deadline and the shared memory budget, and only then a
        // permit: a client that stalls its body never holds one (nor starves the webhooks).
        let body = match self.body.read(&parts.headers, body).await {
            Ok(body) => body,
            Err(error) => return refused(body_outcome(&error), error_chain(&error)),
        };
        let Some(admitted) = self.admission.try_admit() else {
            return Routed::Replied(Self::overloaded());
        };
        let uri = &parts.uri;
        let keyed = KeyedRequest {
            record_key: self.record_key(&parts.headers, &parts.method, uri.path(), &key),
            fingerprint: scope::fingerprint(&parts.method, uri.path(), uri.query(), &body.bytes),
            parts,
            body,
            peer,
            _admitted: admitted,
        };
        // From the claim on, the request runs to its end, answered, counted and logged inside
        // `finish_even_if_dropped`: a client that disconnects must not strand a claim, lose the
        // response its retry will be answered with, or leave the execution uncounted. The
        // execution (4 KB of future) is boxed where it is made, so that only a pointer moves
        // through the context and into `finish_even_if_dropped`: each move of the future itself
        // copied all of it into memory no request had touched yet.
        let proxy = Arc::clone(self);
        let method = keyed.parts.method.clone();
        let path = keyed.parts.uri.path().to_owned();
        let run = finish_even_if_dropped(telemetry::in_current(Box::pin(async move {
            let reply = proxy.execute(keyed).await;
            proxy.finish(reply, &method, &path, started)
        })));
        match run.await {
            Ok(response) => Routed::Answered(response),
            Err(panic) => refused(ProxyOutcome::Unavailable, panic),
        }
    }

    /// The one mapping from how a request ended to what the client gets.
    fn answer(&self, outcome: ProxyOutcome, ending: Ending) -> Response<Body> {
        let problem = match (outcome, ending) {
            (_, Ending::Upstream(response)) => return response,
            (_, Ending::Replay(stored)) => return stored.replay(),
            (_, Ending::Failed(UpstreamError::Timeout(_))) => Problem::UpstreamTimeout,
            (_, Ending::Failed(UpstreamError::TooLarge)) => Problem::TooLarge,
            (_, Ending::Failed(_)) => Problem::UpstreamFailed,
            (ProxyOutcome::MissingKey, Ending::Refused) => Problem::MissingKey,
            (ProxyOutcome::InvalidKey, Ending::Refused) => Problem::InvalidKey,
            (ProxyOutcome::KeyReused, Ending::Refused) => Problem::KeyReused,
            (ProxyOutcome::InFlight, Ending::Refused) => Problem::InFlight,
            (ProxyOutcome::TooLarge, Ending::Refused) => Problem::TooLarge,
            (ProxyOutcome::Malformed | ProxyOutcome::Aborted, Ending::Refused) => {
                Problem::Malformed
            }
            (ProxyOutcome::BodyTimeout, Ending::Refused) => Problem::BodyTimeout,
            (ProxyOutcome::NonCanonicalPath, Ending::Refused) => Problem::NonCanonicalPath,
            (ProxyOutcome::Incomplete, Ending::Refused) => Problem::Incomplete,
            (_, Ending::Refused) => Problem::Unavailable,
        };
        problem.response(&self.retry_after)
    }

    /// Answers, counts and logs one request; the only exit of `handle`.
    fn finish(
        &self,
        reply: ProxyReply,
        method: &Method,
        path: &str,
        started: Instant,
    ) -> Response<Body> {
        let ProxyReply {
            outcome,
            ending,
            detail,
        } = reply;
        let response = self.answer(outcome, ending);
        telemetry::annotate_current(|| [KeyValue::new("hookonce.outcome", outcome.label())]);
        let seconds = started.elapsed().as_secs_f64();
        self.metrics.request(outcome, seconds);
        let status = response.status().as_u16();
        let latency_ms = crate::util::log_millis(seconds);
        // As text, not `%` (Display through the formatting machinery): the same line, made faster.
        let (proxy, method) = (self.name.as_str(), method.as_str());
        // Never the scope headers or the key's record: the principal stays out of every log.
        // Passed-through requests are the upstream's business; they log at debug only.
        macro_rules! log_at {
            ($level:ident) => {
                tracing::$level!(
                    proxy,
                    outcome = outcome.label(),
                    status,
                    method,
                    path,
                    latency_ms,
                    detail
                )
            };
        }
        if outcome == ProxyOutcome::PassedThrough {
            log_at!(debug);
        } else {
            log_at!(info);
        }
        response
    }
}

/// The outcome of a keyed request whose body did not arrive.
fn body_outcome(error: &BodyError) -> ProxyOutcome {
    match error {
        BodyError::DeclaredTooLarge(_) | BodyError::TooLarge => ProxyOutcome::TooLarge,
        BodyError::TimedOut(_) => ProxyOutcome::BodyTimeout,
        BodyError::MemoryFull => ProxyOutcome::Unavailable,
        BodyError::Aborted(_) => ProxyOutcome::Aborted,
        BodyError::Unreadable(_) => ProxyOutcome::Malformed,
    }
}

/// What routing one request came to: a reply still to be answered, counted and logged, or a
/// response already answered, counted and logged where it ran to its end.
enum Routed {
    Replied(ProxyReply),
    Answered(Response<Body>),
}

/// Which store key `hookonce inspect` and `forget` read for the configured proxy `name`: the
/// principal's scope headers in `principal`, and `key` as a client would send the header.
pub fn record_key_of(
    settings: &Settings,
    name: &str,
    principal: &HeaderMap,
    method: &Method,
    path: &str,
    key: &str,
) -> Result<String, ConfigError> {
    let Some(proxy) = settings.proxies.get(name) else {
        return Err(ConfigError::invalid(
            format!("proxies.{name}"),
            "no proxy of this name is configured",
        ));
    };
    let Some(key) = key::parse(key.as_bytes()) else {
        return Err(ConfigError::invalid(
            "KEY",
            "is not a valid Idempotency-Key",
        ));
    };
    for name in principal.keys() {
        if !proxy
            .scope_headers
            .iter()
            .any(|h| h.eq_ignore_ascii_case(name.as_str()))
        {
            return Err(ConfigError::invalid(
                "--principal",
                format!(
                    "{name} is not one of scope_headers {:?}",
                    proxy.scope_headers
                ),
            ));
        }
    }
    let names: Vec<HeaderName> = proxy
        .scope_headers
        .iter()
        .filter_map(|h| HeaderName::from_bytes(h.as_bytes()).ok())
        .collect();
    let scope = Scope::of(principal, &names);
    let prefix = &settings.store.key_prefix;
    Ok(scope::record_key(prefix, name, &scope, method, path, &key))
}
