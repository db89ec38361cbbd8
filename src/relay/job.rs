//! One entry's life in one relay: attempts with backoff until the worker answers 2xx, then
//! `XACK`; or the dead-letter stream. It runs as its own task, so a poison event waits out its
//! backoff while the route's other entries flow (no head-of-line blocking); it holds a
//! concurrency permit only while an attempt is in flight.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, OwnedSemaphorePermit};

use super::deliver::{self, Failure};
use super::route_state::{until_stopped, RouteStream, Shared};
use crate::outcome::RelayOutcome;
use crate::store::relay_scripts::DeadLetter;
use crate::store::StreamEntry;
use crate::telemetry;
use crate::util::{error_chain, unix_ms};
use opentelemetry::KeyValue;

/// An entry this relay holds, and the attempt it is at (its delivery count in Redis).
pub(super) struct Job {
    pub shared: Arc<Shared>,
    pub lane: Arc<RouteStream>,
    pub entry: StreamEntry,
    pub attempt: u32,
    /// A place among the entries this relay may hold at once; returned when the job ends.
    pub slot: OwnedSemaphorePermit,
}

impl Job {
    pub async fn run(self) {
        let route = &self.shared.route;
        let first = self.attempt;
        let mut attempt = first;
        let mut last: Option<Failure> = None;
        loop {
            if attempt > route.max_attempts {
                // Attempt `attempt - 1` was interrupted (its relay stopped): its outcome is
                // unknown, and the attempts are spent.
                let failure = last.take().unwrap_or(Failure {
                    status: None,
                    error: format!(
                        "attempt {} was interrupted (its relay stopped)",
                        attempt - 1
                    ),
                    retry_after: None,
                });
                self.dead_letter(attempt - 1, &failure).await;
                break;
            }
            if attempt > first && !self.begin(attempt).await {
                break;
            }
            let failure = match self.attempt(attempt).await {
                None => break,
                Some(Ok(())) => {
                    self.delivered().await;
                    break;
                }
                Some(Err(failure)) => failure,
            };
            let at_once = failure
                .status
                .is_some_and(|s| route.dead_letter_statuses.contains(&s));
            if at_once || attempt >= route.max_attempts {
                self.dead_letter(attempt, &failure).await;
                break;
            }
            let delay = route
                .backoff
                .after(attempt, failure.status, failure.retry_after);
            let mut stopped = self.shared.stopped.clone();
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                () = until_stopped(&mut stopped) => break,
            }
            attempt += 1;
            last = Some(failure);
        }
        self.lane.release(&self.entry.id);
        drop(self.slot);
    }

    /// One attempt under a concurrency permit; `None` when the relay stopped before it began.
    async fn attempt(&self, attempt: u32) -> Option<Result<(), Failure>> {
        let shared = &self.shared;
        let mut stopped = shared.stopped.clone();
        let _permit = tokio::select! {
            permit = shared.concurrency.acquire() => permit.ok()?,
            () = until_stopped(&mut stopped) => return None,
        };
        let source = &shared.route.per_source[self.lane.source];
        let mut headers = deliver::headers(
            &shared.route,
            source,
            (&self.lane.stream, &self.entry),
            attempt,
            unix_ms() / 1000,
        );
        // A client span, the child of the context stored with the entry; the worker continues
        // the trace from the `traceparent` it receives.
        let span = telemetry::Span::from_traceparent(
            "relay attempt",
            telemetry::Kind::Client,
            self.entry.field(telemetry::TRACEPARENT),
            || {
                [
                    KeyValue::new("hookonce.route", shared.route.name.to_string()),
                    KeyValue::new("hookonce.source", source.name.to_string()),
                    KeyValue::new("hookonce.event_id", self.entry.text("event_id").to_string()),
                    KeyValue::new("hookonce.attempt", i64::from(attempt)),
                ]
            },
        );
        span.inject(&mut headers);
        let body = self.entry.shared("body");
        let started = Instant::now();
        let result = deliver::attempt(&shared.client, &shared.route, headers, body).await;
        if let Err(failure) = &result {
            span.fail(|| failure.error.clone());
        }
        span.set(|| match &result {
            Ok(()) => vec![KeyValue::new("hookonce.delivered", true)],
            Err(failure) => match failure.status {
                Some(status) => vec![KeyValue::new(
                    "http.response.status_code",
                    i64::from(status),
                )],
                None => Vec::new(),
            },
        });
        span.end();
        shared
            .metrics
            .attempt
            .record(started.elapsed().as_secs_f64());
        if let Err(failure) = &result {
            shared.metrics.count(RelayOutcome::Failed);
            tracing::warn!(
                message = "Delivery attempt failed.",
                route = %shared.route.name,
                source = %source.name,
                event_id = %self.entry.text("event_id"),
                attempt,
                status = failure.status,
                error = %failure.error,
            );
        }
        Some(result)
    }

    /// Records in Redis that `attempt` begins; false when the entry is no longer ours.
    async fn begin(&self, attempt: u32) -> bool {
        let s = &self.shared;
        let (stream, group, id) = (&self.lane.stream, &s.route.group, &self.entry.id);
        // Redis is away: attempt anyway (at least once); the count catches up next time.
        s.scripts
            .begin(&s.store, stream, group, &s.consumer, id, attempt)
            .await
            .unwrap_or(true)
    }

    async fn delivered(&self) {
        let s = &self.shared;
        s.metrics.count(RelayOutcome::Delivered);
        let received: u64 = self.entry.text("received_at").parse().unwrap_or(0);
        if received > 0 {
            let seconds = unix_ms().saturating_sub(received) as f64 / 1000.0;
            s.metrics.end_to_end.record(seconds);
        }
        self.persist("acknowledge", || {
            s.scripts.ack(
                &s.store,
                &self.lane.stream,
                &s.route.group,
                &self.entry.id,
                self.lane.replay,
            )
        })
        .await;
    }

    async fn dead_letter(&self, attempts: u32, failure: &Failure) {
        let s = &self.shared;
        let source = &s.route.per_source[self.lane.source];
        let why = DeadLetter {
            route: &s.route.name,
            attempts,
            last_status: failure.status,
            last_error: &failure.error,
            now_ms: unix_ms(),
        };
        let owned = self
            .persist("dead-letter", || {
                s.scripts.dead_letter(
                    &s.store,
                    &self.lane.stream,
                    &source.dead_letters,
                    &s.route.group,
                    &s.consumer,
                    &self.entry.id,
                    &why,
                    self.lane.replay,
                )
            })
            .await;
        if owned == Some(true) {
            s.metrics.count(RelayOutcome::DeadLettered);
            tracing::warn!(
                message = "Dead-lettered.",
                route = %s.route.name,
                source = %source.name,
                event_id = %self.entry.text("event_id"),
                attempts,
                status = failure.status,
                error = %failure.error,
            );
        }
    }

    /// Runs a store call until it succeeds, rides out an outage with growing pauses, and gives
    /// up when the relay stops (the entry stays pending and is delivered again: at least once).
    async fn persist<T, F, Fut>(&self, what: &str, call: F) -> Option<T>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<T, crate::store::StoreError>>,
    {
        let mut pause = Duration::from_millis(100);
        let mut stopped = self.shared.stopped.clone();
        loop {
            match call().await {
                Ok(value) => return Some(value),
                Err(error) => tracing::warn!(
                    message = "Relay cannot record an outcome in Redis; retrying.",
                    what,
                    route = %self.shared.route.name,
                    error = %error_chain(&error),
                ),
            }
            tokio::select! {
                () = tokio::time::sleep(pause) => {}
                () = until_stopped(&mut stopped) => return None,
            }
            pause = (pause * 2).min(Duration::from_secs(2));
        }
    }
}

/// Hands a held entry to a job.
pub(super) async fn start(
    shared: &Arc<Shared>,
    lane: &Arc<RouteStream>,
    entry: StreamEntry,
    attempt: u32,
    slot: OwnedSemaphorePermit,
    jobs: &mpsc::Sender<Job>,
) {
    let job = Job {
        shared: Arc::clone(shared),
        lane: Arc::clone(lane),
        entry,
        attempt,
        slot,
    };
    if let Err(mpsc::error::SendError(job)) = jobs.send(job).await {
        lane.release(&job.entry.id);
    }
}
