//! The run: a dispatcher makes events and paces them, one worker per connection sends them.
//!
//! A job is one delivery of one event. The dispatcher creates events in order, paced by
//! `--rate` (open loop) or by back-pressure from the workers (closed loop, `--concurrency`).
//! Duplicates follow their first copy according to the spacing:
//! - `immediate`: the same worker sends the next copy as soon as the previous one is answered
//!   (a provider that retries after a timeout whose first attempt did land);
//! - `delayed`: the next copy is queued again `--dup-delay` after the previous answer, with other
//!   events flowing in between (a redelivery);
//! - `concurrent`: every copy is handed to a different worker and they start together behind a
//!   barrier (parallel sends, the race the dedup script must win).
//!
//! With `--retry`, a delivery that is not answered 2xx is queued again after an exponential
//! backoff, without holding its connection, until it succeeds or the retry bound is reached.
//!
//! In rate mode latency is measured from when a request was *due*, not when a worker got to it,
//! so a stalled server shows up in the percentiles instead of silently slowing the generator
//! down (coordinated omission).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::ValueEnum;
use tokio::sync::{mpsc, watch, Barrier, Mutex};

use crate::http::Connection;
use crate::record::Recorder;
use crate::report::{Latency, Live, Stats, Summary};
use crate::workload::{Event, Workload};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Spacing {
    Immediate,
    Delayed,
    Concurrent,
}

/// Exponential backoff like a provider's: `base`, doubling, capped, for at most `give_up_after`.
#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    pub base: Duration,
    pub max_delay: Duration,
    pub give_up_after: Duration,
}

impl RetryPolicy {
    /// The delay before attempt `attempt + 1`, with ±20% jitter so retries do not synchronise.
    fn delay(&self, attempt: u32) -> Duration {
        let exponential = self
            .base
            .saturating_mul(1 << attempt.min(20).saturating_sub(1));
        let capped = exponential.min(self.max_delay);
        capped.mul_f64(rand::random_range(0.8..1.2))
    }
}

pub struct Plan {
    /// One server, or several replicas: copy `k` of event `i` goes to `addrs[(i + k) % n]`, so
    /// the copies of one event are split between replicas.
    pub addrs: Vec<SocketAddr>,
    pub events: Option<u64>,
    pub duration: Option<Duration>,
    pub concurrency: usize,
    pub rate: Option<f64>,
    pub dup_factor: f64,
    pub spacing: Spacing,
    pub dup_delay: Duration,
    pub retry: Option<RetryPolicy>,
    pub timeout: Duration,
    pub drain: Duration,
    pub progress: Option<Duration>,
}

struct Job {
    event: Arc<Event>,
    copy: u32,
    copies: u32,
    attempt: u32,
    /// When this copy was first sent, to bound its retries.
    first_sent: Option<Instant>,
    /// When it should be sent (rate mode measures latency from here).
    due: Instant,
    barrier: Option<Arc<Barrier>>,
}

struct Shared {
    workload: Workload,
    plan: Plan,
    recorder: Recorder,
    live: Live,
    /// Copies not yet finished for good; what remains at the end is reported as abandoned.
    outstanding: AtomicU64,
}

/// How many deliveries event `index` gets, spreading the fractional part evenly over the run.
fn copies_for(index: u64, factor: f64) -> u32 {
    let base = factor.floor();
    let fraction = factor - base;
    let extra = ((index + 1) as f64 * fraction).floor() - (index as f64 * fraction).floor();
    (base + extra) as u32
}

pub async fn run(workload: Workload, plan: Plan, recorder: Recorder) -> Summary {
    let shared = Arc::new(Shared {
        workload,
        plan,
        recorder,
        live: Live::default(),
        outstanding: AtomicU64::new(0),
    });
    let plan = &shared.plan;
    let (tx, rx) = mpsc::channel::<Job>(plan.concurrency * 2);
    let rx = Arc::new(Mutex::new(rx));
    let (stop_tx, stop_rx) = watch::channel(false);
    let start = Instant::now();
    let workers: Vec<_> = (0..plan.concurrency)
        .map(|_| {
            let worker = worker(
                Arc::clone(&shared),
                Arc::clone(&rx),
                tx.clone(),
                stop_rx.clone(),
            );
            tokio::spawn(worker)
        })
        .collect();
    let progress = plan
        .progress
        .map(|every| tokio::spawn(progress(Arc::clone(&shared), every, start)));

    let events = dispatch(&shared, &tx, start).await;
    // Wait for duplicates and retries still on their way, within the drain bound.
    let drain_until = Instant::now() + plan.drain;
    while shared.outstanding.load(Ordering::Acquire) > 0 && Instant::now() < drain_until {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let _ = stop_tx.send(true);
    drop(tx);
    let mut total = Stats::new();
    let mut last = start;
    for worker in workers {
        let (stats, finished) = worker.await.expect("worker panicked");
        total.merge(&stats);
        last = last.max(finished);
    }
    if let Some(progress) = progress {
        progress.abort();
    }
    let _ = shared.recorder.flush();
    let seconds = (last - start).as_secs_f64().max(1e-9);
    let requests = total.latency.len();
    let per_request = shared.workload.events_per_request();
    let events = events * per_request as u64;
    let ok: u64 = total
        .statuses
        .iter()
        .filter(|(s, _)| (200..300).contains(*s))
        .map(|(_, n)| n)
        .sum();
    Summary {
        provider: shared.workload.provider_name(),
        events,
        events_per_request: per_request,
        requests,
        seconds,
        requests_per_second: requests as f64 / seconds,
        events_per_second: (ok * per_request as u64) as f64 / seconds,
        latency_us: Latency::of(&total.latency),
        service_us: Latency::of(&total.service),
        statuses: total.statuses.clone(),
        replayed: total.replayed,
        retries: shared.live.retries.load(Ordering::Relaxed),
        abandoned: shared.outstanding.load(Ordering::Acquire),
    }
}

/// Creates and queues every event; returns how many were made.
async fn dispatch(shared: &Arc<Shared>, tx: &mpsc::Sender<Job>, start: Instant) -> u64 {
    let plan = &shared.plan;
    let deadline = plan.duration.map(|d| start + d);
    let mut paced = 0u64;
    let mut index = 0u64;
    loop {
        if plan.events.is_some_and(|n| index >= n) || deadline.is_some_and(|d| Instant::now() >= d)
        {
            return index;
        }
        let copies = copies_for(index, plan.dup_factor);
        let event = Arc::new(shared.workload.event(index));
        index += 1;
        shared
            .outstanding
            .fetch_add(u64::from(copies), Ordering::AcqRel);
        let together = plan.spacing == Spacing::Concurrent && copies > 1;
        let barrier = together.then(|| Arc::new(Barrier::new(copies as usize)));
        for copy in 1..=(if together { copies } else { 1 }) {
            let due = match plan.rate {
                Some(rate) => {
                    let due = start + Duration::from_secs_f64(paced as f64 / rate);
                    paced += 1;
                    tokio::time::sleep_until(due.into()).await;
                    due
                }
                None => Instant::now(),
            };
            let job = Job {
                event: Arc::clone(&event),
                copy,
                copies,
                attempt: 1,
                first_sent: None,
                due,
                barrier: barrier.clone(),
            };
            if tx.send(job).await.is_err() {
                return index;
            }
        }
    }
}

/// Queues `job` again after `after`, without holding a connection meanwhile.
fn requeue(tx: &mpsc::Sender<Job>, mut job: Job, after: Duration) {
    let tx = tx.clone();
    tokio::spawn(async move {
        tokio::time::sleep(after).await;
        job.due = Instant::now();
        // A closed channel means the run is over: the job stays outstanding (abandoned).
        let _ = tx.send(job).await;
    });
}

async fn worker(
    shared: Arc<Shared>,
    rx: Arc<Mutex<mpsc::Receiver<Job>>>,
    tx: mpsc::Sender<Job>,
    mut stop: watch::Receiver<bool>,
) -> (Stats, Instant) {
    let plan = &shared.plan;
    let mut connections: Vec<Connection> = plan.addrs.iter().map(|a| Connection::new(*a)).collect();
    let mut scratch = Vec::with_capacity(4096);
    let mut stats = Stats::new();
    let mut last = Instant::now();
    'jobs: loop {
        let next = tokio::select! {
            biased;
            _ = stop.changed() => None,
            job = async { rx.lock().await.recv().await } => job,
        };
        let Some(mut job) = next else { break };
        loop {
            if let Some(barrier) = job.barrier.take() {
                // A copy whose siblings will never come (the run stopped) must not hang here.
                tokio::select! {
                    _ = barrier.wait() => {}
                    _ = stop.changed() => break 'jobs,
                }
            }
            let sent = Instant::now();
            let since = if plan.rate.is_some() {
                job.due.min(sent)
            } else {
                sent
            };
            let request = shared.workload.request(&job.event, &mut scratch);
            let server = (job.event.index + u64::from(job.copy)) as usize % connections.len();
            let (status, replayed) = match connections[server].send(request, plan.timeout).await {
                Ok(answer) => (answer.status, answer.replayed),
                Err(_) => (0, false),
            };
            last = Instant::now();
            stats.record(last - since, last - sent, status, replayed);
            shared.live.count(status);
            shared
                .recorder
                .attempt(&job.event.ids, status, job.attempt, job.copy);
            let first_sent = *job.first_sent.get_or_insert(sent);
            if !(200..300).contains(&status) {
                if let Some(retry) = plan.retry {
                    let delay = retry.delay(job.attempt);
                    if first_sent.elapsed() + delay <= retry.give_up_after {
                        shared.live.retries.fetch_add(1, Ordering::Relaxed);
                        job.attempt += 1;
                        requeue(&tx, job, delay);
                        break;
                    }
                }
            }
            // This copy is finished for good; send the next one as the spacing says.
            shared.outstanding.fetch_sub(1, Ordering::AcqRel);
            if job.copy >= job.copies || plan.spacing == Spacing::Concurrent {
                break;
            }
            let next = Job {
                event: Arc::clone(&job.event),
                copy: job.copy + 1,
                copies: job.copies,
                attempt: 1,
                first_sent: None,
                due: Instant::now(),
                barrier: None,
            };
            if plan.spacing == Spacing::Delayed {
                requeue(&tx, next, plan.dup_delay);
                break;
            }
            job = next;
        }
    }
    (stats, last)
}

/// Prints a progress line to stderr every `every`, until aborted.
async fn progress(shared: Arc<Shared>, every: Duration, start: Instant) {
    let mut ticker = tokio::time::interval_at((start + every).into(), every);
    let mut before = 0;
    loop {
        ticker.tick().await;
        let live = &shared.live;
        let requests = live.requests.load(Ordering::Relaxed);
        eprintln!(
            "[{:>7.1}s] {requests} requests, {:.0}/s now, 2xx {}, other {}, retries {}, pending {}",
            start.elapsed().as_secs_f64(),
            (requests - before) as f64 / every.as_secs_f64(),
            live.ok.load(Ordering::Relaxed),
            live.failed.load(Ordering::Relaxed),
            live.retries.load(Ordering::Relaxed),
            shared.outstanding.load(Ordering::Relaxed),
        );
        before = requests;
        let _ = shared.recorder.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplicate_factor_spreads_copies_evenly() {
        let total: u32 = (0..1000).map(|i| copies_for(i, 1.25)).sum();
        assert_eq!(total, 1250);
        assert!((0..1000).all(|i| (1..=2).contains(&copies_for(i, 1.25))));
        assert_eq!(copies_for(7, 3.0), 3);
    }

    #[test]
    fn backoff_doubles_and_is_capped() {
        let policy = RetryPolicy {
            base: Duration::from_millis(100),
            max_delay: Duration::from_secs(1),
            give_up_after: Duration::from_secs(60),
        };
        assert!(policy.delay(1) <= Duration::from_millis(120));
        assert!(policy.delay(3) >= Duration::from_millis(320));
        assert!(policy.delay(30) <= Duration::from_millis(1200));
    }
}
