//! The exactly-once seam for webhooks: deduplicate one request's verified events and put them in
//! the queue, all or nothing.
//!
//! Two implementations sit behind [`Forwarder`], chosen by [`build`] from `sink.kind`:
//! - [`atomic::RedisForwarder`] (atomic mode, `sink.kind = "redis_stream"`): one Lua script checks
//!   every dedup record of the request, then appends to the Redis Stream and writes the records,
//!   so a request is forwarded or recognised as a duplicate in a single round trip, with no
//!   in-flight state.
//! - [`two_phase::TwoPhaseForwarder`] (every other sink): a [`Ledger`] claims the events, the sink
//!   publishes them, the ledger completes the claims (docs/design.md, "Two-phase mode").
//!
//! [`batch::Plan`] is what both share: the keys of each event and the repeats within a request.
//! [`coalesce`] groups the script calls of concurrent requests for one stream (atomic mode).

pub mod atomic;
pub mod batch;
pub mod coalesce;
pub mod target;
pub mod two_phase;

pub use target::{Partition, Target};

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::config::{Settings, SinkKind};
use crate::event::VerifiedEvent;
use crate::ledger::Ledger;
use crate::metrics::Metrics;
use crate::sinks::SinkError;
use crate::store::{Fingerprint, RedisStartError, RedisStore, StoreError};
use crate::util::BoxFuture;

/// Everything a forwarder needs of one event.
pub struct Delivery<'a> {
    pub target: &'a Target,
    pub event: &'a VerifiedEvent,
    /// Unix milliseconds at which the daemon received the request.
    pub received_at_ms: u64,
    /// The request's Content-Type, for sinks that pass it on.
    pub content_type: Option<&'a str>,
}

impl Delivery<'_> {
    pub fn fingerprint(&self) -> Fingerprint {
        Fingerprint::of(self.event.fingerprint_input())
    }
}

/// What forwarding one event came to (one per event of a request, in order).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Forwarded {
    /// New event, now in the queue under this entry ID (or sink acknowledgement). `reclaimed`:
    /// an earlier delivery's lease had expired without completing (two-phase mode).
    New { entry_id: String, reclaimed: bool },
    /// Already forwarded within the window, under this entry ID.
    Duplicate { entry_id: String },
    /// Same event ID, different payload: nothing forwarded.
    Mismatch,
    /// Another delivery of the same event is being forwarded right now.
    InFlight,
    /// New, but another event of the same request was a mismatch or in flight, so nothing of
    /// the request was written; the provider's retry forwards it.
    Withheld,
}

/// Why an event could not be forwarded; every variant answers 503 so the provider retries.
#[derive(Debug, thiserror::Error)]
pub enum ForwardError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("sink did not take the event")]
    Sink(#[source] SinkError),
    #[error("publish task failed: {0}")]
    Task(String),
    /// The error of a store call that carried several requests, shared by each of them.
    #[error(transparent)]
    Shared(Arc<ForwardError>),
}

/// The exactly-once seam.
pub trait Forwarder: Send + Sync + 'static {
    /// Deduplicates the events of one request (all of one source) and puts the new ones in the
    /// queue: one answer per event, in order. All or nothing: when any event is a mismatch or in
    /// flight, no event is written and the new ones are [`Forwarded::Withheld`].
    fn forward_all<'a>(
        &'a self,
        deliveries: &'a [Delivery<'a>],
    ) -> BoxFuture<'a, Result<Vec<Forwarded>, ForwardError>>;

    /// Deduplicates one event and puts it in the queue unless it is a duplicate.
    fn forward<'a>(
        &'a self,
        delivery: Delivery<'a>,
    ) -> BoxFuture<'a, Result<Forwarded, ForwardError>> {
        Box::pin(async move {
            let one = [delivery];
            let mut answers = self.forward_all(&one).await?;
            answers
                .pop()
                .ok_or_else(|| StoreError::Protocol("no answer for the event".to_owned()).into())
        })
    }

    /// Whether the store can serve requests now (`/readyz`).
    fn ready(&self) -> BoxFuture<'_, bool>;

    /// The `sink` label of `hookonce_forward_duration_seconds`.
    fn sink_label(&self) -> &'static str;
}

/// Runs a forward under a deadline; running out of time is a store timeout (503).
pub(crate) async fn within<T>(
    timeout: Duration,
    call: impl Future<Output = Result<T, ForwardError>>,
) -> Result<T, ForwardError> {
    tokio::time::timeout(timeout, call)
        .await
        .unwrap_or(Err(StoreError::Timeout(timeout).into()))
}

/// Builds the forwarder that `sink.kind` calls for: atomic into the Redis Stream, or two-phase
/// through `ledger` into the configured sink.
pub async fn build(
    settings: &Settings,
    redis: Option<&RedisStore>,
    ledger: Arc<dyn Ledger>,
    metrics: &Metrics,
) -> Result<Arc<dyn Forwarder>, BuildError> {
    if settings.sink.kind == SinkKind::RedisStream {
        let store = redis.cloned().ok_or(BuildError::NeedsRedis)?;
        let forwarder = atomic::RedisForwarder::build(settings, store, metrics).await?;
        return Ok(Arc::new(forwarder));
    }
    let sink = crate::sinks::build(&settings.sink).await?;
    // Waiting for an in-flight delivery only makes sense within one process, where the write of
    // a local line sink takes microseconds (answers then match atomic mode's).
    let local = matches!(settings.sink.kind, SinkKind::Stdout | SinkKind::File);
    let wait_in_flight = local && redis.is_none();
    Ok(Arc::new(two_phase::TwoPhaseForwarder::new(
        ledger,
        sink,
        settings.sink.lease(),
        wait_in_flight,
    )))
}

/// Why the forwarder cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error(transparent)]
    Redis(#[from] RedisStartError),
    #[error(transparent)]
    Sink(#[from] crate::sinks::SinkStartError),
    #[error("sink.kind = \"redis_stream\" needs store.backend = \"redis\"")]
    NeedsRedis,
}
