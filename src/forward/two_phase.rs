//! Two-phase mode: claim in the ledger, publish to the sink, then complete.
//!
//! claim → publish with the dedup key as the sink-side idempotency ID → complete (done, with the
//! sink's acknowledgement, for `dedup_ttl`) → 200. A failed publish releases the claim → 503.
//! A request's events are claimed together (each event's record and, with `body_dedup`, its body
//! record): when any claim finds a mismatch or a delivery in flight, every claim this request
//! took is released and nothing is published, so a request answered 422 or 409 writes nothing.
//! A concurrent delivery meanwhile gets `in_flight` (409), except with a local line sink, where it
//! waits for the first (the write takes microseconds, and this keeps the embedded default's answers
//! identical to atomic mode's).
//!
//! Publishing and settling run in a task of their own: a request that is cancelled (its timeout,
//! a client gone) can neither strand a claim nor release one whose event did reach the sink.
//! A publish whose outcome is unknown (the sink may hold the event: a Kafka message timed out in
//! flight) keeps its claims until the lease ends instead of releasing them, so that the retry
//! meanwhile is 409 rather than a second copy at once.
//! The crash window: if the process dies between publish and complete, the claim's lease expires
//! and the next delivery publishes again; the sink's idempotency ID (JetStream's duplicate window,
//! the worker's `Idempotency-Key`) is what absorbs that second publish.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;

use super::batch::{Plan, Planned};
use super::{Delivery, ForwardError, Forwarded, Forwarder};
use crate::ledger::{Claim, Ledger};
use crate::sinks::{Message, Sink};
use crate::store::record;
use crate::util::{finish_even_if_dropped, BoxFuture};

/// The claims one event of a request holds: its record's and, with `body_dedup`, its body
/// record's (key, token).
struct Held {
    key: String,
    token: String,
    body: Option<(String, String)>,
    reclaimed: bool,
}

/// What claiming one event came to: held for publishing, or settled without a publish.
enum EventClaim {
    Held(Held),
    Settled(Forwarded),
}

/// One event to publish, with the claims to complete or release after.
struct Job {
    index: usize,
    held: Held,
    message: Message,
    fingerprint: String,
    ttl: Duration,
}

pub struct TwoPhaseForwarder {
    ledger: Arc<dyn Ledger>,
    sink: Arc<dyn Sink>,
    lease: Duration,
    /// Wait for an in-flight delivery in this process instead of answering 409.
    wait_in_flight: bool,
}

impl TwoPhaseForwarder {
    pub fn new(
        ledger: Arc<dyn Ledger>,
        sink: Arc<dyn Sink>,
        lease: Duration,
        wait_in_flight: bool,
    ) -> Self {
        Self {
            ledger,
            sink,
            lease,
            wait_in_flight,
        }
    }

    /// Claims the event, waiting for a holder in this process where allowed. `Err(answer)` when
    /// the claim settles the delivery without a publish (duplicate, mismatch, in flight).
    async fn claim(
        &self,
        key: &str,
        fingerprint: &str,
        hold: Duration,
    ) -> Result<Result<(String, bool), Forwarded>, ForwardError> {
        loop {
            match self
                .ledger
                .claim(key, fingerprint, self.lease, hold)
                .await?
            {
                Claim::Claimed { token, reclaimed } => return Ok(Ok((token, reclaimed))),
                Claim::Done { ack } => return Ok(Err(Forwarded::Duplicate { entry_id: ack })),
                Claim::Mismatch => return Ok(Err(Forwarded::Mismatch)),
                Claim::InFlight {
                    wait: Some(mut wait),
                } if self.wait_in_flight => {
                    // Woken when the holder completes or releases; bounded by the lease.
                    let _ = tokio::time::timeout(self.lease, wait.changed()).await;
                }
                Claim::InFlight { .. } => return Ok(Err(Forwarded::InFlight)),
            }
        }
    }

    /// Claims one event's record and, with `body_dedup`, its body record, at once. A body
    /// record already done or held means the payload came under another ID: the event's own
    /// claim is given back and the event is answered as the body's.
    async fn claim_event(&self, planned: &Planned<'_>) -> Result<EventClaim, ForwardError> {
        let hold = planned.delivery.target.dedup_ttl;
        let fingerprint = planned.fingerprint.as_str();
        let (record, body) = match &planned.body_key {
            None => (self.claim(&planned.key, fingerprint, hold).await, None),
            Some(body_key) => {
                let (record, body) = tokio::join!(
                    self.claim(&planned.key, fingerprint, hold),
                    self.claim(body_key, fingerprint, hold)
                );
                (record, Some((body_key, body)))
            }
        };
        let mut taken = Vec::new();
        if let Ok(Ok((token, _))) = &record {
            taken.push((planned.key.clone(), token.clone()));
        }
        if let Some((key, Ok(Ok((token, _))))) = &body {
            taken.push(((*key).clone(), token.clone()));
        }
        let answer = match (record, body) {
            (Err(error), _) | (_, Some((_, Err(error)))) => Err(error),
            (Ok(Err(answer)), _) | (_, Some((_, Ok(Err(answer))))) => {
                Ok(EventClaim::Settled(answer))
            }
            (Ok(Ok((token, record_reclaimed))), body) => {
                // Either claim may be the reclaim: the two leases end a moment apart, and a
                // delivery between the two ends gives back the one it reclaimed (deleting it),
                // so that the next delivery claims that key afresh and reclaims only the other.
                let body = body.and_then(|(key, claim)| Some((key.clone(), claim.ok()?.ok()?)));
                let body_reclaimed = body.as_ref().is_some_and(|(_, (_, reclaimed))| *reclaimed);
                return Ok(EventClaim::Held(Held {
                    key: planned.key.clone(),
                    token,
                    body: body.map(|(key, (token, _))| (key, token)),
                    reclaimed: record_reclaimed || body_reclaimed,
                }));
            }
        };
        release(&*self.ledger, &taken).await;
        answer
    }

    async fn run(&self, deliveries: &[Delivery<'_>]) -> Result<Vec<Forwarded>, ForwardError> {
        let plan = Plan::new(deliveries);
        if plan.has_conflict() {
            return Ok(plan.rejected());
        }
        let claims = join_all(plan.unique.iter().map(|p| self.claim_event(p))).await;
        let mut judged = Vec::with_capacity(claims.len());
        let mut held = Vec::new();
        let mut failure = None;
        let mut refused = false;
        for (index, claim) in claims.into_iter().enumerate() {
            judged.push(match claim {
                Ok(EventClaim::Held(claim)) => {
                    held.push((index, claim));
                    Forwarded::Withheld
                }
                Ok(EventClaim::Settled(answer)) => {
                    refused |= matches!(answer, Forwarded::Mismatch | Forwarded::InFlight);
                    answer
                }
                Err(error) => {
                    failure.get_or_insert(error);
                    Forwarded::Withheld
                }
            });
        }
        if failure.is_some() || refused {
            let taken: Vec<(String, String)> =
                held.into_iter().flat_map(|(_, h)| h.keys()).collect();
            release(&*self.ledger, &taken).await;
            return failure.map_or_else(|| Ok(plan.answers(judged)), Err);
        }
        let jobs = held
            .into_iter()
            .map(|(index, held)| job(&plan.unique[index], index, held))
            .collect();
        for (index, answer) in self.publish(jobs).await? {
            judged[index] = answer;
        }
        Ok(plan.answers(judged))
    }

    /// Publishes every held event and settles its claims, to the end even if the request is
    /// cancelled meanwhile, so that a cancelled request can neither strand a claim nor release
    /// an event the sink took.
    async fn publish(&self, jobs: Vec<Job>) -> Result<Vec<(usize, Forwarded)>, ForwardError> {
        let ledger = Arc::clone(&self.ledger);
        let sink = Arc::clone(&self.sink);
        finish_even_if_dropped(crate::telemetry::in_current(async move {
            let settled = join_all(jobs.into_iter().map(|job| settle(&*ledger, &*sink, job))).await;
            settled.into_iter().collect::<Result<Vec<_>, _>>()
        }))
        .await
        .unwrap_or_else(|panic| Err(ForwardError::Task(panic)))
    }
}

impl Held {
    /// Every (key, token) this event holds.
    fn keys(self) -> impl Iterator<Item = (String, String)> {
        std::iter::once((self.key, self.token)).chain(self.body)
    }
}

fn job(planned: &Planned<'_>, index: usize, held: Held) -> Job {
    let delivery = planned.delivery;
    let (target, event) = (delivery.target, delivery.event);
    Job {
        index,
        held,
        message: Message {
            dedup_key: planned.key.clone(),
            source: target.source.clone(),
            provider: target.provider,
            event_id: event.event_id().to_owned(),
            event_type: event.event_type().to_owned(),
            received_at_ms: delivery.received_at_ms,
            body: event.body().clone(),
            content_type: delivery.content_type.map(str::to_owned),
        },
        fingerprint: planned.fingerprint.clone(),
        ttl: target.dedup_ttl,
    }
}

/// Publishes one event, then completes its claims, or releases them when the sink failed.
async fn settle(
    ledger: &dyn Ledger,
    sink: &dyn Sink,
    job: Job,
) -> Result<(usize, Forwarded), ForwardError> {
    let Job {
        index,
        held,
        message,
        fingerprint,
        ttl,
    } = job;
    // A client span; the sink sends its context with the message.
    let span =
        crate::telemetry::Span::child("sink publish", crate::telemetry::Kind::Client, Vec::new);
    let published = crate::telemetry::within(&span, sink.publish(&message)).await;
    if let Err(error) = &published {
        span.fail(|| error.to_string());
    }
    span.end();
    let ack = match published {
        Ok(ack) => ack,
        Err(error) if error.holds_claim() => {
            // Releasing would let the provider's retry publish at once a second copy of an
            // event the broker may hold; the lease bounds how long the retries get 409.
            tracing::warn!(
                message = "Sink outcome unknown; the claim is held until its lease ends.",
                source = %message.source,
                event_id = %message.event_id,
                error = %error,
            );
            return Err(ForwardError::Sink(error));
        }
        Err(error) => {
            release(ledger, &held.keys().collect::<Vec<_>>()).await;
            return Err(ForwardError::Sink(error));
        }
    };
    let done = record::done(&ack, &fingerprint);
    let reclaimed = held.reclaimed;
    let claims: Vec<(String, String)> = held.keys().collect();
    let completions = claims
        .iter()
        .map(|(key, token)| ledger.complete(key, token, &done, ttl));
    let completed = futures_util::future::try_join_all(completions).await?;
    if !completed.iter().all(|kept| *kept) {
        tracing::warn!(
            message = "Lease was reclaimed before completion; the sink's idempotency ID absorbs the second publish.",
            source = %message.source,
            event_id = %message.event_id,
        );
    }
    Ok((
        index,
        Forwarded::New {
            entry_id: ack,
            reclaimed,
        },
    ))
}

/// Gives back claims; a claim that cannot be released expires with its lease.
async fn release(ledger: &dyn Ledger, taken: &[(String, String)]) {
    let releases = taken.iter().map(|(key, token)| ledger.release(key, token));
    for result in join_all(releases).await {
        if let Err(error) = result {
            tracing::warn!(message = "Could not release a claim; it expires with its lease.", error = %error);
        }
    }
}

impl Forwarder for TwoPhaseForwarder {
    fn forward_all<'a>(
        &'a self,
        deliveries: &'a [Delivery<'a>],
    ) -> BoxFuture<'a, Result<Vec<Forwarded>, ForwardError>> {
        Box::pin(self.run(deliveries))
    }

    fn ready(&self) -> BoxFuture<'_, bool> {
        Box::pin(async move { self.sink.ready() && self.ledger.ready().await })
    }

    fn sink_label(&self) -> &'static str {
        self.sink.label()
    }
}
