//! Every metric name in one place (docs/design.md, "Metrics"), with handles registered up front.
//!
//! Handles are registered once per source at startup, so the request path never formats a label
//! or looks up a key. Each application owns its own Prometheus recorder rather than the global
//! one, which keeps applications started side by side (tests, benchmarks) from sharing counters.

use std::sync::Arc;

use metrics::{
    Counter, Gauge, Histogram, Key, KeyName, Label, Metadata, Recorder, SharedString, Unit,
};
use metrics_exporter_prometheus::{
    Matcher, PrometheusBuilder, PrometheusHandle, PrometheusRecorder,
};

use crate::outcome::Outcome;

mod proxy;
mod relay;

pub use proxy::{CompletionFailure, ProxyMetrics};
pub use relay::RelayMetrics;

pub const EVENTS_TOTAL: &str = "hookonce_events_total";
pub const DUPLICATE_HITS_TOTAL: &str = "hookonce_duplicate_hits_total";
pub const HTTP_REQUESTS_TOTAL: &str = "hookonce_http_requests_total";
pub const REQUEST_DURATION_SECONDS: &str = "hookonce_request_duration_seconds";
pub const STORE_DURATION_SECONDS: &str = "hookonce_store_duration_seconds";
pub const FORWARD_DURATION_SECONDS: &str = "hookonce_forward_duration_seconds";
pub const STORE_BATCH_REQUESTS: &str = "hookonce_store_batch_requests";
pub const STORE_BATCH_EVENTS: &str = "hookonce_store_batch_events";
pub const BUILD_INFO: &str = "hookonce_build_info";
pub const REQUESTS_IN_FLIGHT: &str = "hookonce_requests_in_flight";
pub const BODY_READS_IN_FLIGHT: &str = "hookonce_body_reads_in_flight";
pub const BODY_MEMORY_BYTES: &str = "hookonce_body_memory_bytes";
pub const LEASE_RECLAIMS_TOTAL: &str = "hookonce_lease_reclaims_total";
pub const STREAM_LENGTH: &str = "hookonce_stream_length";
pub const READY: &str = "hookonce_ready";
pub const PROXY_REQUESTS_TOTAL: &str = "hookonce_proxy_requests_total";
pub const PROXY_DURATION_SECONDS: &str = "hookonce_proxy_duration_seconds";
pub const PROXY_UPSTREAM_DURATION_SECONDS: &str = "hookonce_proxy_upstream_duration_seconds";
pub const PROXY_CLAIMS_HELD: &str = "hookonce_proxy_claims_held";
pub const PROXY_OLDEST_CLAIM_SECONDS: &str = "hookonce_proxy_oldest_claim_seconds";
pub const PROXY_LEASE_TAKEOVERS_TOTAL: &str = "hookonce_proxy_lease_takeovers_total";
pub const PROXY_COMPLETION_FAILURES_TOTAL: &str = "hookonce_proxy_completion_failures_total";
pub const RELAY_DELIVERIES_TOTAL: &str = "hookonce_relay_deliveries_total";
pub const RELAY_ATTEMPT_DURATION_SECONDS: &str = "hookonce_relay_attempt_duration_seconds";
pub const RELAY_END_TO_END_SECONDS: &str = "hookonce_relay_end_to_end_seconds";
pub const RELAY_LAG: &str = "hookonce_relay_lag";
pub const DEAD_LETTERS: &str = "hookonce_dead_letters";

/// Metric names that are gauges (the others are counters or, ending in `_seconds`, histograms).
const GAUGES: [&str; 8] = [
    BUILD_INFO,
    REQUESTS_IN_FLIGHT,
    BODY_READS_IN_FLIGHT,
    BODY_MEMORY_BYTES,
    STREAM_LENGTH,
    READY,
    PROXY_CLAIMS_HELD,
    PROXY_OLDEST_CLAIM_SECONDS,
];

/// Label value for requests whose source is not configured.
pub const UNKNOWN_SOURCE: &str = "_unknown";

/// Status codes the daemon answers on webhook routes, and those hyper and the router answer
/// before the handler (405, 431); others (414) are registered on first use.
const KNOWN_STATUSES: [u16; 12] = [200, 400, 401, 404, 405, 408, 409, 413, 422, 431, 500, 503];

/// Requests or events per coalesced script call.
const BATCH_BUCKETS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 1024.0];

const LATENCY_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
    10.0,
];

/// Every metric's unit and help text.
const HELP: [(&str, Unit, &str); 22] = [
    (EVENTS_TOTAL, Unit::Count, "Events by source and outcome."),
    (
        DUPLICATE_HITS_TOTAL,
        Unit::Count,
        "Duplicate deliveries absorbed.",
    ),
    (
        HTTP_REQUESTS_TOTAL,
        Unit::Count,
        "Webhook requests by source and status.",
    ),
    (
        REQUEST_DURATION_SECONDS,
        Unit::Seconds,
        "Webhook request latency.",
    ),
    (
        STORE_DURATION_SECONDS,
        Unit::Seconds,
        "Latency of store operations.",
    ),
    (
        FORWARD_DURATION_SECONDS,
        Unit::Seconds,
        "Latency of forwarding one event.",
    ),
    (
        STORE_BATCH_REQUESTS,
        Unit::Count,
        "Requests per atomic-mode script call (several when concurrent requests coalesce).",
    ),
    (
        STORE_BATCH_EVENTS,
        Unit::Count,
        "Events per atomic-mode script call.",
    ),
    (BUILD_INFO, Unit::Count, "Build information."),
    (
        REQUESTS_IN_FLIGHT,
        Unit::Count,
        "Requests admitted (a webhook's body is in) and being handled.",
    ),
    (
        BODY_READS_IN_FLIGHT,
        Unit::Count,
        "Webhook request bodies being received, before admission.",
    ),
    (
        BODY_MEMORY_BYTES,
        Unit::Bytes,
        "Bytes of webhook request bodies held in memory (of server.body_memory_limit).",
    ),
    (
        LEASE_RECLAIMS_TOTAL,
        Unit::Count,
        "Claims taken over after an earlier lease expired (two-phase mode).",
    ),
    (
        STREAM_LENGTH,
        Unit::Count,
        "Entries in a source's Redis Stream (sampled).",
    ),
    (
        READY,
        Unit::Count,
        "1 while the store and sink answer readiness checks, else 0.",
    ),
    (
        PROXY_REQUESTS_TOTAL,
        Unit::Count,
        "Idempotency-Key proxy requests by proxy and outcome.",
    ),
    (
        PROXY_DURATION_SECONDS,
        Unit::Seconds,
        "Idempotency-Key proxy request latency by outcome.",
    ),
    (
        PROXY_UPSTREAM_DURATION_SECONDS,
        Unit::Seconds,
        "Latency of the upstream exchange of proxied requests.",
    ),
    (
        PROXY_CLAIMS_HELD,
        Unit::Count,
        "Idempotency keys this process is executing now (processing claims it holds).",
    ),
    (
        PROXY_OLDEST_CLAIM_SECONDS,
        Unit::Count,
        "Age of the oldest processing claim this process holds; 0 when none (sampled).",
    ),
    (
        PROXY_LEASE_TAKEOVERS_TOTAL,
        Unit::Count,
        "Claims taken over after their lease expired (the proxy holding them died).",
    ),
    (
        PROXY_COMPLETION_FAILURES_TOTAL,
        Unit::Count,
        "Executed requests whose response does not protect their retries: not stored, taken over, or stored but not confirmed by the replicas.",
    ),
];

/// The application's recorder and its text exposition.
pub struct Metrics {
    recorder: PrometheusRecorder,
    handle: PrometheusHandle,
    /// Requests admitted (a webhook's body read) and not yet answered.
    pub in_flight: Gauge,
    /// Webhook request bodies being read, before admission.
    body_reads: Gauge,
    /// Bytes of request bodies held in memory.
    body_memory: Gauge,
    /// 1 while the store (and sink) answered the last readiness check, else 0.
    pub ready: Gauge,
}

impl Metrics {
    pub fn new() -> Arc<Self> {
        let recorder = PrometheusBuilder::new()
            .set_buckets_for_metric(Matcher::Suffix("_seconds".to_owned()), LATENCY_BUCKETS)
            .expect("bucket list is non-empty")
            .set_buckets_for_metric(
                Matcher::Prefix("hookonce_store_batch_".to_owned()),
                BATCH_BUCKETS,
            )
            .expect("bucket list is non-empty")
            .build_recorder();
        let handle = recorder.handle();
        let in_flight =
            recorder.register_gauge(&Key::from_static_name(REQUESTS_IN_FLIGHT), &metadata());
        let body_reads =
            recorder.register_gauge(&Key::from_static_name(BODY_READS_IN_FLIGHT), &metadata());
        let body_memory =
            recorder.register_gauge(&Key::from_static_name(BODY_MEMORY_BYTES), &metadata());
        let ready = recorder.register_gauge(&Key::from_static_name(READY), &metadata());
        let metrics = Self {
            recorder,
            handle,
            in_flight,
            body_reads,
            body_memory,
            ready,
        };
        metrics.describe();
        metrics
            .gauge(
                BUILD_INFO,
                vec![Label::new("version", env!("CARGO_PKG_VERSION"))],
            )
            .set(1.0);
        Arc::new(metrics)
    }

    fn describe(&self) {
        for (name, unit, text) in HELP.into_iter().chain(relay::HELP) {
            let name = KeyName::from_const_str(name);
            let text = SharedString::const_str(text);
            match unit {
                _ if GAUGES.contains(&name.as_str()) || relay::GAUGES.contains(&name.as_str()) => {
                    self.recorder.describe_gauge(name, None, text)
                }
                Unit::Seconds => self.recorder.describe_histogram(name, Some(unit), text),
                _ if name.as_str().starts_with("hookonce_store_batch_") => {
                    self.recorder.describe_histogram(name, None, text)
                }
                _ => self.recorder.describe_counter(name, None, text),
            }
        }
    }

    /// Folds recorded histogram samples into their buckets (otherwise done only by `render`).
    pub fn run_upkeep(&self) {
        self.handle.run_upkeep();
    }

    /// The Prometheus text format of every metric.
    pub fn render(&self) -> String {
        self.handle.render()
    }

    pub fn counter(&self, name: &'static str, labels: Vec<Label>) -> Counter {
        self.recorder
            .register_counter(&Key::from_parts(name, labels), &metadata())
    }

    pub fn gauge(&self, name: &'static str, labels: Vec<Label>) -> Gauge {
        self.recorder
            .register_gauge(&Key::from_parts(name, labels), &metadata())
    }

    pub fn histogram(&self, name: &'static str, labels: Vec<Label>) -> Histogram {
        self.recorder
            .register_histogram(&Key::from_parts(name, labels), &metadata())
    }

    /// Handles for one source's events and requests.
    pub fn source(&self, source: &str) -> SourceMetrics {
        let label = || Label::new("source", source.to_owned());
        let per_outcome = |name| {
            Outcome::ALL
                .map(|o| self.counter(name, vec![label(), Label::new("outcome", o.label())]))
        };
        let durations = Outcome::ALL.map(|o| {
            self.histogram(
                REQUEST_DURATION_SECONDS,
                vec![label(), Label::new("outcome", o.label())],
            )
        });
        let statuses = KNOWN_STATUSES.map(|status| {
            (
                status,
                self.counter(
                    HTTP_REQUESTS_TOTAL,
                    vec![label(), Label::new("status", status.to_string())],
                ),
            )
        });
        SourceMetrics {
            source: source.to_owned(),
            events: per_outcome(EVENTS_TOTAL),
            duplicate_hits: self.counter(DUPLICATE_HITS_TOTAL, vec![label()]),
            lease_reclaims: self.counter(LEASE_RECLAIMS_TOTAL, vec![label()]),
            durations,
            statuses,
        }
    }

    /// The gauges of bodies being received and held.
    pub fn body_gauges(&self) -> BodyGauges {
        BodyGauges {
            reading: self.body_reads.clone(),
            memory_bytes: self.body_memory.clone(),
        }
    }

    /// The sampled length of one Redis Stream.
    pub fn stream_length(&self, stream: &str) -> Gauge {
        self.gauge(STREAM_LENGTH, vec![Label::new("stream", stream.to_owned())])
    }

    /// A latency histogram for a store operation (`op` = forward, claim, ping, …).
    pub fn store_op(&self, op: &'static str) -> Histogram {
        self.histogram(STORE_DURATION_SECONDS, vec![Label::new("op", op)])
    }

    /// A latency histogram for forwarding to a sink.
    pub fn forward_to(&self, sink: &'static str) -> Histogram {
        self.histogram(FORWARD_DURATION_SECONDS, vec![Label::new("sink", sink)])
    }
}

fn metadata() -> Metadata<'static> {
    Metadata::new(module_path!(), metrics::Level::INFO, None)
}

/// `hookonce_body_reads_in_flight` and `hookonce_body_memory_bytes`, for the body reader.
#[derive(Clone)]
pub struct BodyGauges {
    pub reading: Gauge,
    pub memory_bytes: Gauge,
}

/// Pre-registered handles for one source (or for `_unknown`).
pub struct SourceMetrics {
    source: String,
    events: [Counter; Outcome::ALL.len()],
    duplicate_hits: Counter,
    lease_reclaims: Counter,
    durations: [Histogram; Outcome::ALL.len()],
    statuses: [(u16, Counter); KNOWN_STATUSES.len()],
}

impl SourceMetrics {
    /// Counts one event's outcome (and the duplicate headline counter).
    pub fn event(&self, outcome: Outcome) {
        self.events[outcome.index()].increment(1);
        if outcome == Outcome::Duplicate {
            self.duplicate_hits.increment(1);
        }
    }

    /// Counts a claim taken over from an expired lease.
    pub fn lease_reclaimed(&self) {
        self.lease_reclaims.increment(1);
    }

    /// Counts one finished request.
    pub fn request(&self, metrics: &Metrics, outcome: Outcome, status: u16, seconds: f64) {
        self.durations[outcome.index()].record(seconds);
        self.status(metrics, status);
    }

    /// Counts one request refused before the webhook handler (by hyper or the router): it has
    /// a status but no outcome and no event, and is not timed.
    pub fn refused(&self, metrics: &Metrics, status: u16) {
        self.status(metrics, status);
    }

    fn status(&self, metrics: &Metrics, status: u16) {
        match self.statuses.iter().find(|(s, _)| *s == status) {
            Some((_, counter)) => counter.increment(1),
            None => metrics
                .counter(
                    HTTP_REQUESTS_TOTAL,
                    vec![
                        Label::new("source", self.source.clone()),
                        Label::new("status", status.to_string()),
                    ],
                )
                .increment(1),
        }
    }
}
