//! The relay's metric handles: per route, its outcomes and latencies; per route and source, the
//! lag and the dead letters. Names are `super`'s, with the others.

use metrics::{Counter, Gauge, Histogram, Label, Unit};

use crate::outcome::RelayOutcome;

use super::{
    Metrics, DEAD_LETTERS, RELAY_ATTEMPT_DURATION_SECONDS, RELAY_DELIVERIES_TOTAL,
    RELAY_END_TO_END_SECONDS, RELAY_LAG,
};

pub(super) const GAUGES: [&str; 2] = [RELAY_LAG, DEAD_LETTERS];

pub(super) const HELP: [(&str, Unit, &str); 5] = [
    (
        RELAY_DELIVERIES_TOTAL,
        Unit::Count,
        "Relay results by route: delivered, failed (attempts that did not succeed), dead_lettered, skipped (not matched).",
    ),
    (
        RELAY_ATTEMPT_DURATION_SECONDS,
        Unit::Seconds,
        "Latency of one delivery attempt to a route's worker.",
    ),
    (
        RELAY_END_TO_END_SECONDS,
        Unit::Seconds,
        "From receiving the webhook to the worker's 2xx.",
    ),
    (
        RELAY_LAG,
        Unit::Count,
        "Entries of a source's stream the route has not acknowledged, unread or pending (sampled).",
    ),
    (
        DEAD_LETTERS,
        Unit::Count,
        "Entries in a route's dead-letter stream for a source (sampled).",
    ),
];

/// Pre-registered handles for one route.
pub struct RelayMetrics {
    outcomes: [Counter; RelayOutcome::ALL.len()],
    /// One attempt's exchange with the worker.
    pub attempt: Histogram,
    /// `received_at` → the worker's 2xx.
    pub end_to_end: Histogram,
    /// Per source: (source, lag, dead letters).
    pub per_source: Vec<(String, Gauge, Gauge)>,
}

impl RelayMetrics {
    pub fn count(&self, outcome: RelayOutcome) {
        self.outcomes[outcome as usize].increment(1);
    }
}

impl Metrics {
    /// Handles for the route `route`, which reads `sources`.
    pub fn relay_route(&self, route: &str, sources: &[String]) -> RelayMetrics {
        let label = || Label::new("route", route.to_owned());
        let per_source = sources
            .iter()
            .map(|source| {
                let labels = || vec![label(), Label::new("source", source.clone())];
                (
                    source.clone(),
                    self.gauge(RELAY_LAG, labels()),
                    self.gauge(DEAD_LETTERS, labels()),
                )
            })
            .collect();
        RelayMetrics {
            outcomes: RelayOutcome::ALL.map(|o| {
                self.counter(
                    RELAY_DELIVERIES_TOTAL,
                    vec![label(), Label::new("outcome", o.label())],
                )
            }),
            attempt: self.histogram(RELAY_ATTEMPT_DURATION_SECONDS, vec![label()]),
            end_to_end: self.histogram(RELAY_END_TO_END_SECONDS, vec![label()]),
            per_source,
        }
    }
}
