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

pub mod memory;
pub mod redis;

use std::sync::Arc;
use std::time::Duration;

use crate::metrics::Metrics;
use crate::store::{Record, RedisStartError, RedisStore, StoreError};
use crate::util::BoxFuture;

/// What a claim found.
#[derive(Debug)]
pub enum Claim {
    /// This attempt owns the key until the lease ends.
    Claimed { token: String, reclaimed: bool },
    /// Already done with the same fingerprint: the acknowledgement stored then.
    Done { ack: String },
    /// Done or being done with another fingerprint: the key was used for another payload.
    Mismatch,
    /// Another attempt holds a live lease. In-process ledgers offer a way to wait for it.
    InFlight {
        wait: Option<tokio::sync::watch::Receiver<()>>,
    },
}

/// Claim, complete and release, against Redis or in process.
pub trait Ledger: Send + Sync + 'static {
    /// Claims `key` for `lease` (the record is kept for `hold`), unless it is done or held by a
    /// live lease.
    fn claim<'a>(
        &'a self,
        key: &'a str,
        fingerprint: &'a str,
        lease: Duration,
        hold: Duration,
    ) -> BoxFuture<'a, Result<Claim, StoreError>>;

    /// Marks the claim done with `done` (a record from `store::record::done`) for `ttl`; false
    /// when the token no longer holds it.
    fn complete<'a>(
        &'a self,
        key: &'a str,
        token: &'a str,
        done: &'a str,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;

    /// Gives the claim up (the side effect failed), so that the next attempt can run it.
    fn release<'a>(&'a self, key: &'a str, token: &'a str)
        -> BoxFuture<'a, Result<(), StoreError>>;

    /// Whether the ledger can serve requests now (`/readyz`).
    fn ready(&self) -> BoxFuture<'_, bool>;

    /// Live records held in this process, for ledgers that hold them here (tests, diagnostics).
    fn local_records(&self) -> Option<usize> {
        None
    }

    /// Bytes of the live records held in this process (keys and values), for ledgers that hold
    /// them here (tests, diagnostics).
    fn local_bytes(&self) -> Option<usize> {
        None
    }
}

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

/// Decides a claim against an existing record at `now_ms`; `None` means the claim may proceed
/// (as a reclaim of an expired lease). Shared by the ledgers so they cannot disagree.
pub fn judge_existing(
    record: &str,
    fingerprint: &str,
    now_ms: u64,
) -> Option<Result<Claim, StoreError>> {
    let Some(parsed) = Record::parse(record) else {
        return Some(Err(StoreError::Protocol(format!(
            "unreadable dedup record {record:?}"
        ))));
    };
    if parsed.fingerprint() != fingerprint {
        return Some(Ok(Claim::Mismatch));
    }
    match parsed {
        Record::Done { ack, .. } => Some(Ok(Claim::Done {
            ack: ack.to_owned(),
        })),
        Record::Processing { deadline_ms, .. } if deadline_ms > now_ms => {
            Some(Ok(Claim::InFlight { wait: None }))
        }
        Record::Processing { .. } => None,
    }
}

/// A random claim token.
pub fn new_token() -> String {
    format!("{:016x}", rand::random::<u64>())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::record::{done, processing};

    #[test]
    fn records_are_judged_alike() {
        let record = processing("abc", "fp", 1000);
        assert!(matches!(
            judge_existing(&record, "fp", 999),
            Some(Ok(Claim::InFlight { .. }))
        ));
        assert!(judge_existing(&record, "fp", 1000).is_none());
        assert!(matches!(
            judge_existing(&record, "other", 999),
            Some(Ok(Claim::Mismatch))
        ));
        assert!(matches!(
            judge_existing(&done("HOOKONCE:7", "fp"), "fp", 0),
            Some(Ok(Claim::Done { ack })) if ack == "HOOKONCE:7"
        ));
        assert!(matches!(
            judge_existing(&done("HOOKONCE:7", "fp"), "other", 0),
            Some(Ok(Claim::Mismatch))
        ));
        assert!(matches!(judge_existing("garbage", "fp", 0), Some(Err(_))));
    }
}
