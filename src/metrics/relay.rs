//! The relay's metric handles: per route, its outcomes and latencies; per route and source, the
//! lag and the dead letters. Names are in `names.rs`, help texts in `help.rs`, with the others.

use metrics::{Counter, Gauge, Histogram, Label};

use crate::outcome::RelayOutcome;

use super::names::{DEAD_LETTERS, RELAY_END_TO_END_SECONDS, RELAY_LAG};
use super::names::{RELAY_ATTEMPT_DURATION_SECONDS, RELAY_DELIVERIES_TOTAL};
use super::registry::Metrics;

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
