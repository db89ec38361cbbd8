//! The exactly-once seam: deduplicate one verified event and put it in the queue.
//!
//! Two implementations sit behind [`Forwarder`]:
//! - [`redis::RedisForwarder`] (atomic mode, DESIGN §4): one Lua script checks the dedup record,
//!   appends to the Redis Stream and writes the record, so a delivery is forwarded or recognised as
//!   a duplicate in a single round trip, with no in-flight state.
//! - [`two_phase::TwoPhaseForwarder`] (DESIGN §5): for sinks outside Redis (stdout, file, NATS
//!   JetStream, HTTP). A [`ledger::Ledger`] — in Redis ([`redis_ledger`]) or in this process
//!   ([`memory`]) — claims the event, the sink publishes it, the ledger completes the claim.

pub mod ledger;
pub mod memory;
pub mod redis;
pub mod redis_ledger;
pub mod two_phase;

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use base64::Engine;
use sha2::{Digest, Sha256};

use crate::providers::VerifiedEvent;

/// A boxed future, so that forwarders can be used as `Arc<dyn Forwarder>`.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Where one source's events go and how long they are remembered. Built once per source.
#[derive(Debug, Clone)]
pub struct Target {
    pub source: String,
    pub provider: &'static str,
    /// Key prefix of dedup records: `<prefix>:{<source>}:d:` (the event ID follows verbatim).
    pub record_prefix: String,
    /// Redis Stream key: `<prefix>:{<source>}:events` unless overridden.
    pub stream: String,
    pub dedup_ttl: Duration,
}

impl Target {
    pub fn new(
        key_prefix: &str,
        source: &str,
        provider: &'static str,
        stream: Option<&str>,
        dedup_ttl: Duration,
    ) -> Self {
        Self {
            source: source.to_owned(),
            provider,
            record_prefix: format!("{key_prefix}:{{{source}}}:d:"),
            stream: stream
                .map(str::to_owned)
                .unwrap_or_else(|| format!("{key_prefix}:{{{source}}}:events")),
            dedup_ttl,
        }
    }

    /// The dedup record's key for one event ID.
    pub fn record_key(&self, event_id: &str) -> String {
        let mut key = String::with_capacity(self.record_prefix.len() + event_id.len());
        key.push_str(&self.record_prefix);
        key.push_str(event_id);
        key
    }
}

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

/// What forwarding one event came to.
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
}

/// Why an event could not be forwarded; every variant answers 503 so the provider retries.
#[derive(Debug, thiserror::Error)]
pub enum ForwardError {
    #[error("store did not answer within {0:?}")]
    Timeout(Duration),
    #[error("redis call failed")]
    Redis(#[source] ::redis::RedisError),
    #[error("store answered something unexpected: {0}")]
    Protocol(String),
    #[error("sink did not take the event")]
    Sink(#[source] crate::sinks::SinkError),
    #[error("only {confirmed} of {wanted} replicas confirmed the write within the wait timeout")]
    Replication { confirmed: i64, wanted: i64 },
    #[error("memory store is full ({0} records)")]
    Full(usize),
}

/// The exactly-once seam (DESIGN §4, §5).
pub trait Forwarder: Send + Sync + 'static {
    /// Deduplicates one event and puts it in the queue unless it is a duplicate.
    fn forward<'a>(
        &'a self,
        delivery: Delivery<'a>,
    ) -> BoxFuture<'a, Result<Forwarded, ForwardError>>;

    /// Whether the store can serve requests now (`/readyz`).
    fn ready(&self) -> BoxFuture<'_, bool>;

    /// The `sink` label of `hookonce_forward_duration_seconds`.
    fn sink_label(&self) -> &'static str;
}

/// A short digest of the payload: 60 bits of SHA-256, written as 10 base64 characters.
///
/// It tells two payloads under one *verified* event ID apart; a forger, who would have to choose
/// a colliding payload, cannot get a request verified in the first place. 60 bits make an
/// accidental collision negligible while keeping a Stripe dedup record in Redis's 136-byte
/// allocation class instead of the 152-byte one (see BENCHMARKS.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fingerprint([u8; 8]);

impl Fingerprint {
    pub const ENCODED_LEN: usize = 10;

    pub fn of(body: &[u8]) -> Self {
        let digest = Sha256::digest(body);
        let mut bytes = [0u8; 8];
        bytes.copy_from_slice(&digest[..8]);
        Self(bytes)
    }

    /// The 10 characters stored in dedup records (the first 60 of the 64 bits).
    pub fn encode(&self) -> String {
        let mut text = base64::engine::general_purpose::STANDARD_NO_PAD.encode(self.0);
        text.truncate(Self::ENCODED_LEN);
        text
    }
}

/// A stored dedup record: `"<entry id> <fingerprint>"`.
pub fn parse_record(record: &str) -> Option<(&str, &str)> {
    record.split_once(' ')
}

/// Compares a stored record with a new delivery's fingerprint.
pub fn judge_record(record: &str, fingerprint: &str) -> Result<Forwarded, ForwardError> {
    let (entry_id, stored) = parse_record(record)
        .ok_or_else(|| ForwardError::Protocol(format!("unreadable dedup record {record:?}")))?;
    Ok(if stored == fingerprint {
        Forwarded::Duplicate {
            entry_id: entry_id.to_owned(),
        }
    } else {
        Forwarded::Mismatch
    })
}

/// The wall clock as unix milliseconds (0 if the clock is before 1970).
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Runs a store call under the store timeout.
pub async fn with_timeout<T>(
    timeout: Duration,
    call: impl Future<Output = Result<T, ForwardError>>,
) -> Result<T, ForwardError> {
    tokio::time::timeout(timeout, call)
        .await
        .unwrap_or(Err(ForwardError::Timeout(timeout)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_put_the_hash_tag_before_the_event_id() {
        let target = Target::new("hookonce", "stripe", "stripe", None, Duration::from_secs(1));
        assert_eq!(target.record_key("evt_{x}"), "hookonce:{stripe}:d:evt_{x}");
        assert_eq!(target.stream, "hookonce:{stripe}:events");
    }

    #[test]
    fn records_tell_duplicates_from_mismatches() {
        let fp = Fingerprint::of(b"{}").encode();
        assert_eq!(fp.len(), Fingerprint::ENCODED_LEN);
        let record = format!("1-0 {fp}");
        assert_eq!(
            judge_record(&record, &fp).unwrap(),
            Forwarded::Duplicate {
                entry_id: "1-0".into()
            }
        );
        assert_eq!(judge_record(&record, "other").unwrap(), Forwarded::Mismatch);
        assert!(judge_record("garbage", &fp).is_err());
    }
}
