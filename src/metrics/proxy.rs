//! The Idempotency-Key proxy's metric handles, registered once per `[proxies.NAME]` by
//! `Metrics::proxy`, as `relay.rs` does for the relay's; the names are in `names.rs`.

use metrics::{Counter, Gauge, Histogram, Label};

use super::names::{
    PROXY_CLAIMS_HELD, PROXY_COMPLETION_FAILURES_TOTAL, PROXY_DURATION_SECONDS,
    PROXY_LEASE_TAKEOVERS_TOTAL, PROXY_OLDEST_CLAIM_SECONDS, PROXY_REQUESTS_TOTAL,
    PROXY_UPSTREAM_DURATION_SECONDS,
};
use super::registry::Metrics;
use crate::outcome::ProxyOutcome;

impl Metrics {
    /// Handles for one Idempotency-Key proxy.
    pub fn proxy(&self, proxy: &str) -> ProxyMetrics {
        let label = || Label::new("proxy", proxy.to_owned());
        let with_outcome = |o: ProxyOutcome| vec![label(), Label::new("outcome", o.label())];
        ProxyMetrics {
            requests: ProxyOutcome::ALL
                .map(|o| self.counter(PROXY_REQUESTS_TOTAL, with_outcome(o))),
            durations: ProxyOutcome::ALL
                .map(|o| self.histogram(PROXY_DURATION_SECONDS, with_outcome(o))),
            upstream: self.histogram(PROXY_UPSTREAM_DURATION_SECONDS, vec![label()]),
            claims_held: self.gauge(PROXY_CLAIMS_HELD, vec![label()]),
            oldest_claim: self.gauge(PROXY_OLDEST_CLAIM_SECONDS, vec![label()]),
            lease_takeovers: self.counter(PROXY_LEASE_TAKEOVERS_TOTAL, vec![label()]),
            completion_failures: CompletionFailure::ALL.map(|f| {
                let reason = Label::new("reason", f.label());
                self.counter(PROXY_COMPLETION_FAILURES_TOTAL, vec![label(), reason])
            }),
        }
    }
}

/// Pre-registered handles for one Idempotency-Key proxy.
pub struct ProxyMetrics {
    requests: [Counter; ProxyOutcome::ALL.len()],
    durations: [Histogram; ProxyOutcome::ALL.len()],
    /// The upstream exchange of every proxied request, matched or passed through.
    pub upstream: Histogram,
    /// Claims this process holds now.
    pub claims_held: Gauge,
    /// Age in seconds of the oldest claim this process holds (0 when none).
    pub oldest_claim: Gauge,
    lease_takeovers: Counter,
    completion_failures: [Counter; CompletionFailure::ALL.len()],
}

/// Why an executed request's response may not answer its retries
/// (`hookonce_proxy_completion_failures_total{reason}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompletionFailure {
    /// Its claim was taken over before completion: the response was not stored.
    TakenOver,
    /// Stored on the master, not confirmed by `store.wait_replicas` replicas in time.
    Unconfirmed,
    /// The store refused or failed the write: not stored.
    StoreError,
}

impl CompletionFailure {
    pub const ALL: [Self; 3] = [Self::TakenOver, Self::Unconfirmed, Self::StoreError];

    pub fn label(self) -> &'static str {
        match self {
            Self::TakenOver => "taken_over",
            Self::Unconfirmed => "unconfirmed",
            Self::StoreError => "store_error",
        }
    }
}

impl ProxyMetrics {
    /// Counts one finished request.
    pub fn request(&self, outcome: ProxyOutcome, seconds: f64) {
        self.requests[outcome.index()].increment(1);
        self.durations[outcome.index()].record(seconds);
    }

    /// Counts a claim taken over after its lease expired.
    pub fn lease_taken_over(&self) {
        self.lease_takeovers.increment(1);
    }

    /// Counts an executed request whose response may not answer its retries.
    pub fn completion_failed(&self, why: CompletionFailure) {
        self.completion_failures[why as usize].increment(1);
    }
}
