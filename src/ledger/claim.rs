//! What the ledgers share: the outcome of a claim ([`Claim`]), the trait each implements
//! ([`Ledger`]) and how a claim is judged against an existing record. Its own file below the
//! façade, so that the ledgers can import it without importing the module that builds them.

use std::time::Duration;

use crate::store::{Record, StoreError};
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
    // 16 lowercase hex digits, without `format!`'s machinery: one per keyed request.
    hex::encode(rand::random::<u64>().to_be_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::record::{done, processing};

    #[test]
    fn tokens_are_sixteen_hex_digits_and_differ() {
        let (a, b) = (new_token(), new_token());
        for token in [&a, &b] {
            assert_eq!(token.len(), 16, "{token}");
            assert!(token
                .bytes()
                .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c)));
        }
        assert_ne!(a, b);
        // Every digit place is used: the value's high nibble is the first digit.
        let mut seen_first = std::collections::HashSet::new();
        for _ in 0..200 {
            seen_first.insert(new_token().as_bytes()[0]);
        }
        assert!(seen_first.len() > 8, "{seen_first:?}");
    }

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
