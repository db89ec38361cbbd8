//! The ledger of two-phase mode (DESIGN §5): claim an event, then complete or release the claim.
//!
//! A record is either *processing* — `"p <token> <fingerprint> <lease deadline ms>"`, written by
//! the claim — or *done* — `"<sink acknowledgement> <fingerprint>"`, the same shape as atomic
//! mode's records. A processing record outlives its lease (it is kept for `dedup_ttl`) so that a
//! later delivery can tell a lease that expired, which it reclaims and counts, from an event never
//! seen. Complete and release check the token: a delivery whose lease was reclaimed by another
//! cannot overwrite or delete the newer claim.

use std::time::Duration;

use super::{judge_record, BoxFuture, ForwardError, Forwarded};

/// What a claim found.
#[derive(Debug)]
pub enum Claim {
    /// This delivery owns the event until the lease ends.
    Claimed { token: String, reclaimed: bool },
    /// Already forwarded (a duplicate), or forwarded with another payload (a mismatch).
    Settled(Forwarded),
    /// Another delivery holds a live lease. In-process ledgers offer a way to wait for it.
    InFlight {
        wait: Option<tokio::sync::watch::Receiver<()>>,
    },
}

/// Claim, complete and release, against Redis or in process.
pub trait Ledger: Send + Sync + 'static {
    /// Claims `key` for `lease`, unless it is done or held by a live lease.
    fn claim<'a>(
        &'a self,
        key: &'a str,
        fingerprint: &'a str,
        lease: Duration,
        hold: Duration,
    ) -> BoxFuture<'a, Result<Claim, ForwardError>>;

    /// Marks the claim done with the sink's acknowledgement; false when the token no longer holds it.
    fn complete<'a>(
        &'a self,
        key: &'a str,
        token: &'a str,
        done: &'a str,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<bool, ForwardError>>;

    /// Gives the claim up (the sink failed), so that the next delivery can forward the event.
    fn release<'a>(
        &'a self,
        key: &'a str,
        token: &'a str,
    ) -> BoxFuture<'a, Result<(), ForwardError>>;

    /// Whether the ledger can serve requests now (`/readyz`).
    fn ready(&self) -> BoxFuture<'_, bool>;
}

/// A processing record's parts: token, fingerprint, lease deadline (unix ms).
pub fn parse_processing(record: &str) -> Option<(&str, &str, u64)> {
    let rest = record.strip_prefix("p ")?;
    let mut parts = rest.split(' ');
    let token = parts.next()?;
    let fingerprint = parts.next()?;
    let deadline = parts.next()?.parse().ok()?;
    Some((token, fingerprint, deadline))
}

/// The processing record a claim writes.
pub fn processing_record(token: &str, fingerprint: &str, deadline_ms: u64) -> String {
    format!("p {token} {fingerprint} {deadline_ms}")
}

/// The done record a completion writes.
pub fn done_record(ack: &str, fingerprint: &str) -> String {
    format!("{ack} {fingerprint}")
}

/// Decides a claim against an existing record at `now_ms`; `None` means the claim may proceed
/// (as a reclaim of an expired lease). Shared by the ledgers so they cannot disagree.
pub fn judge_existing(
    record: &str,
    fingerprint: &str,
    now_ms: u64,
) -> Option<Result<Claim, ForwardError>> {
    match parse_processing(record) {
        Some((_, held, _)) if held != fingerprint => Some(Ok(Claim::Settled(Forwarded::Mismatch))),
        Some((_, _, deadline)) if deadline > now_ms => Some(Ok(Claim::InFlight { wait: None })),
        Some(_) => None,
        None => Some(judge_record(record, fingerprint).map(Claim::Settled)),
    }
}

/// A random claim token.
pub fn new_token() -> String {
    format!("{:016x}", rand::random::<u64>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_are_judged_alike() {
        let record = processing_record("abc", "fp", 1000);
        assert_eq!(parse_processing(&record), Some(("abc", "fp", 1000)));
        assert!(parse_processing("1-0 fp").is_none());
        assert!(matches!(
            judge_existing(&record, "fp", 999),
            Some(Ok(Claim::InFlight { .. }))
        ));
        assert!(judge_existing(&record, "fp", 1000).is_none());
        assert!(matches!(
            judge_existing(&record, "other", 999),
            Some(Ok(Claim::Settled(Forwarded::Mismatch)))
        ));
        assert!(matches!(
            judge_existing(&done_record("HOOKONCE:7", "fp"), "fp", 0),
            Some(Ok(Claim::Settled(Forwarded::Duplicate { .. })))
        ));
    }
}
