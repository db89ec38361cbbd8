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
mod delivery;
pub mod target;
pub mod two_phase;

pub(crate) use delivery::within;
pub use delivery::{Delivery, ForwardError, Forwarded, Forwarder};
pub use target::{Partition, Target};

use std::sync::Arc;

use crate::config::{Settings, SinkKind};
use crate::ledger::Ledger;
use crate::metrics::Metrics;
use crate::store::{RedisStartError, RedisStore};

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
