//! Measurements: per-worker HDR histograms merged at the end, live counters for progress.
//!
//! Each worker owns its histogram and status counts, so recording a latency takes no lock and
//! shares no cache line; only the few atomics that the progress line reads are shared.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

/// One worker's measurements.
pub struct Stats {
    /// Latency in microseconds, 1 µs to 10 minutes at 3 significant digits: from when the
    /// request was due in rate mode (coordinated omission corrected), else from its send.
    pub latency: Histogram<u64>,
    /// From the request's first byte written to its answer: the server's service time, without
    /// the generator's own timer slack or queueing for a free connection.
    pub service: Histogram<u64>,
    pub statuses: BTreeMap<u16, u64>,
    pub replayed: u64,
}

impl Stats {
    pub fn new() -> Self {
        Self {
            latency: Histogram::new_with_bounds(1, 600_000_000, 3).expect("valid bounds"),
            service: Histogram::new_with_bounds(1, 600_000_000, 3).expect("valid bounds"),
            statuses: BTreeMap::new(),
            replayed: 0,
        }
    }

    pub fn record(&mut self, latency: Duration, service: Duration, status: u16, replayed: bool) {
        let micros = |d: Duration| (d.as_micros() as u64).clamp(1, 600_000_000);
        self.latency.saturating_record(micros(latency));
        self.service.saturating_record(micros(service));
        *self.statuses.entry(status).or_default() += 1;
        self.replayed += u64::from(replayed);
    }

    pub fn merge(&mut self, other: &Stats) {
        self.latency.add(&other.latency).expect("same bounds");
        self.service.add(&other.service).expect("same bounds");
        for (status, count) in &other.statuses {
            *self.statuses.entry(*status).or_default() += count;
        }
        self.replayed += other.replayed;
    }
}

/// Counters that the progress line reads while the run goes on.
#[derive(Default)]
pub struct Live {
    pub requests: AtomicU64,
    pub ok: AtomicU64,
    pub failed: AtomicU64,
    pub retries: AtomicU64,
}

impl Live {
    pub fn count(&self, status: u16) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        if (200..300).contains(&status) {
            self.ok.fetch_add(1, Ordering::Relaxed);
        } else {
            self.failed.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The summary of a run, printed for people and written as JSON for scripts.
#[derive(Serialize)]
pub struct Summary {
    pub provider: &'static str,
    pub events: u64,
    pub events_per_request: usize,
    pub requests: u64,
    pub seconds: f64,
    pub requests_per_second: f64,
    pub events_per_second: f64,
    pub latency_us: Latency,
    /// Service time (from send to answer); equal to `latency_us` in closed loop.
    pub service_us: Latency,
    /// Status code → answers; `0` counts requests that got no answer (refused, reset, timed out).
    pub statuses: BTreeMap<u16, u64>,
    pub replayed: u64,
    pub retries: u64,
    /// Copies or retries still pending when the run ended (their events may be unacknowledged).
    pub abandoned: u64,
}

#[derive(Serialize)]
pub struct Latency {
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub p999: u64,
    pub max: u64,
    pub mean: f64,
}

impl Latency {
    pub fn of(histogram: &Histogram<u64>) -> Self {
        Self {
            p50: histogram.value_at_quantile(0.50),
            p90: histogram.value_at_quantile(0.90),
            p99: histogram.value_at_quantile(0.99),
            p999: histogram.value_at_quantile(0.999),
            max: histogram.max(),
            mean: histogram.mean(),
        }
    }
}

fn ms(micros: u64) -> String {
    format!("{:.3} ms", micros as f64 / 1000.0)
}

impl Summary {
    pub fn print(&self) {
        let l = &self.latency_us;
        println!(
            "{} requests ({} events, {} per request, provider {}) in {:.2} s",
            self.requests, self.events, self.events_per_request, self.provider, self.seconds
        );
        println!(
            "throughput: {:.0} requests/s, {:.0} events/s",
            self.requests_per_second, self.events_per_second
        );
        println!(
            "latency: p50 {}  p90 {}  p99 {}  p99.9 {}  max {}  mean {}",
            ms(l.p50),
            ms(l.p90),
            ms(l.p99),
            ms(l.p999),
            ms(l.max),
            ms(l.mean as u64)
        );
        let statuses: Vec<String> = self
            .statuses
            .iter()
            .map(|(status, count)| match status {
                0 => format!("no answer: {count}"),
                _ => format!("{status}: {count}"),
            })
            .collect();
        let s = &self.service_us;
        println!(
            "service time: p50 {}  p90 {}  p99 {}  p99.9 {}  max {}",
            ms(s.p50),
            ms(s.p90),
            ms(s.p99),
            ms(s.p999),
            ms(s.max)
        );
        println!("statuses: {}", statuses.join(", "));
        println!(
            "replayed (duplicates recognised): {}, retries: {}, abandoned: {}",
            self.replayed, self.retries, self.abandoned
        );
    }
}
