//! Two-phase mode: claim in the ledger, publish to the sink, then complete.
//!
//! claim → publish with the dedup key as the sink-side idempotency ID → complete (done, with the
//! sink's acknowledgement, for `dedup_ttl`) → 200. A failed publish releases the claim → 503.
//! A concurrent delivery meanwhile gets `in_flight` (409), except with a local line sink, where it
//! waits for the first (the write takes microseconds, and this keeps the embedded default's answers
//! identical to atomic mode's).
//!
//! Publishing and settling run in a task of their own: a request that is cancelled (its timeout,
//! a client gone) can neither strand a claim nor release one whose event did reach the sink.
//! The crash window: if the process dies between publish and complete, the claim's lease expires
//! and the next delivery publishes again; the sink's idempotency ID (JetStream's duplicate window,
//! the worker's `Idempotency-Key`) is what absorbs that second publish.

use std::sync::Arc;
use std::time::Duration;

use super::{Delivery, ForwardError, Forwarded, Forwarder};
use crate::ledger::{Claim, Ledger};
use crate::sinks::{Message, Sink};
use crate::store::record;
use crate::util::BoxFuture;

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

    async fn run(&self, delivery: Delivery<'_>) -> Result<Forwarded, ForwardError> {
        let target = delivery.target;
        let event = delivery.event;
        let key = target.record_key(event.event_id());
        let fingerprint = delivery.fingerprint().encode();
        let (token, reclaimed) = match self.claim(&key, &fingerprint, target.dedup_ttl).await? {
            Ok(claimed) => claimed,
            Err(answer) => return Ok(answer),
        };
        let message = Message {
            dedup_key: key.clone(),
            source: target.source.clone(),
            provider: target.provider,
            event_id: event.event_id().to_owned(),
            event_type: event.event_type().to_owned(),
            received_at_ms: delivery.received_at_ms,
            body: event.body().clone(),
            content_type: delivery.content_type.map(str::to_owned),
        };
        let ledger = Arc::clone(&self.ledger);
        let sink = Arc::clone(&self.sink);
        let ttl = target.dedup_ttl;
        let settle = tokio::spawn(async move {
            match sink.publish(&message).await {
                Ok(ack) => {
                    let done = record::done(&ack, &fingerprint);
                    if !ledger.complete(&key, &token, &done, ttl).await? {
                        tracing::warn!(
                            message = "Lease was reclaimed before completion; the sink's idempotency ID absorbs the second publish.",
                            source = %message.source,
                            event_id = %message.event_id,
                        );
                    }
                    Ok(Forwarded::New {
                        entry_id: ack,
                        reclaimed,
                    })
                }
                Err(error) => {
                    if let Err(release) = ledger.release(&key, &token).await {
                        tracing::warn!(message = "Could not release a claim; it expires with its lease.", error = %release);
                    }
                    Err(ForwardError::Sink(error))
                }
            }
        });
        settle
            .await
            .unwrap_or_else(|join| Err(ForwardError::Task(join.to_string())))
    }
}

impl Forwarder for TwoPhaseForwarder {
    fn forward<'a>(
        &'a self,
        delivery: Delivery<'a>,
    ) -> BoxFuture<'a, Result<Forwarded, ForwardError>> {
        Box::pin(self.run(delivery))
    }

    fn ready(&self) -> BoxFuture<'_, bool> {
        Box::pin(async move { self.sink.ready() && self.ledger.ready().await })
    }

    fn sink_label(&self) -> &'static str {
        self.sink.label()
    }
}
