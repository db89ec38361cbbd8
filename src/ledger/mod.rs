//! The claim / complete / release ledger: who is forwarding an event right now, and what came of it.
//!
//! Two-phase forwarding uses it for sinks outside Redis (docs/design.md, "Two-phase mode"); it
//! knows nothing of webhooks, so any front that must run a side effect once per key can use it:
//! the Idempotency-Key proxy (`proxy::execute`) does, with the stored response as its done record.
//! A claim writes a *processing* record with a random token and a lease; completing replaces it by
//! a *done* record carrying the sink's acknowledgement; releasing deletes it (the side effect
//! failed, so the next attempt may run it). Both formats are in [`crate::store::record`].
//!
//! A processing record outlives its lease (it is kept for the hold time, the dedup window) so
//! that a later attempt can tell a lease that expired, which it reclaims and counts, from a key
//! never seen. Complete and release check the token: an attempt whose lease was reclaimed by
//! another cannot overwrite or delete the newer claim.
//!
//! - [`redis::RedisLedger`]: each operation is one token-checked script call.
//! - [`memory::MemoryLedger`]: the memory store's records, in this process.

mod claim;
pub mod memory;
pub mod redis;

pub use claim::{judge_existing, new_token, Claim, Ledger};

use std::sync::Arc;

use crate::metrics::Metrics;
use crate::store::{RedisStartError, RedisStore};

/// Builds the ledger of the configured store: in Redis when there is one, else in this process.
pub async fn build(
    redis: Option<&RedisStore>,
    memory_max_records: usize,
    memory_max_bytes: usize,
    metrics: &Metrics,
) -> Result<Arc<dyn Ledger>, RedisStartError> {
    Ok(match redis {
        Some(store) => {
            Arc::new(redis::RedisLedger::new(store.clone(), |op| metrics.store_op(op)).await?)
        }
        None => Arc::new(memory::MemoryLedger::new(
            memory_max_records,
            memory_max_bytes,
        )),
    })
}
