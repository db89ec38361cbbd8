//! The application's recorder ([`Metrics`]) with the handles registered up front: the
//! webhook front's per source ([`SourceMetrics`]) and the body reader's ([`BodyGauges`]). Its own
//! file below the façade, so that `proxy.rs` and `relay.rs` can add their handles to it without
//! importing the module that declares them.

use std::sync::Arc;

use metrics::{
    Counter, Gauge, Histogram, Key, KeyName, Label, Metadata, Recorder, SharedString, Unit,
};
use metrics_exporter_prometheus::{
    Matcher, PrometheusBuilder, PrometheusHandle, PrometheusRecorder,
};

use super::help::{GAUGES, HELP, RELAY_GAUGES, RELAY_HELP};
use super::names::*;
use crate::outcome::Outcome;

/// Status codes the daemon answers on webhook routes, and those hyper and the router answer
/// before the handler (405, 431); others (414) are registered on first use.
const KNOWN_STATUSES: [u16; 12] = [200, 400, 401, 404, 405, 408, 409, 413, 422, 431, 500, 503];

/// Requests or events per coalesced script call.
const BATCH_BUCKETS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 1024.0];

const LATENCY_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
    10.0,
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
        for (name, unit, text) in HELP.into_iter().chain(RELAY_HELP) {
            let name = KeyName::from_const_str(name);
            let text = SharedString::const_str(text);
            match unit {
                _ if GAUGES.contains(&name.as_str()) || RELAY_GAUGES.contains(&name.as_str()) => {
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

    /// The handles of configuration reloads (`SIGHUP`).
    pub fn reloads(&self) -> ReloadMetrics {
        let result = |value| self.counter(CONFIG_RELOADS_TOTAL, vec![Label::new("result", value)]);
        let last = self.gauge(CONFIG_LAST_RELOAD_SUCCESSFUL, Vec::new());
        last.set(1.0);
        ReloadMetrics {
            applied: result("applied"),
            refused: result("refused"),
            last_successful: last,
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
    // The target every handle was registered with before this file was split from metrics.rs.
    Metadata::new("hookonce::metrics", metrics::Level::INFO, None)
}

/// `hookonce_body_reads_in_flight` and `hookonce_body_memory_bytes`, for the body reader.
#[derive(Clone)]
pub struct BodyGauges {
    pub reading: Gauge,
    pub memory_bytes: Gauge,
}

/// `hookonce_config_reloads_total{result}` and `hookonce_config_last_reload_successful`.
#[derive(Clone)]
pub struct ReloadMetrics {
    applied: Counter,
    refused: Counter,
    last_successful: Gauge,
}

impl ReloadMetrics {
    /// Counts one reload: applied (`true`) or refused.
    pub fn record(&self, applied: bool) {
        let counter = if applied {
            &self.applied
        } else {
            &self.refused
        };
        counter.increment(1);
        self.last_successful.set(if applied { 1.0 } else { 0.0 });
    }
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
