//! The dedup record formats, and the payload fingerprint they carry.
//!
//! A record is either *done* — `"<acknowledgement> <fingerprint>"`, where the acknowledgement is
//! the stream entry ID (atomic mode) or the sink's answer (two-phase mode) — or *processing* —
//! `"p <token> <fingerprint> <lease deadline, unix ms>"`, written by a two-phase or proxy claim.
//! An Idempotency-Key proxy's acknowledgement is its stored response, `r1.<base64>` (encoded by
//! `proxy::response`), and its fingerprint 22 base64url characters. Both
//! formats are part of the Redis layout operators read with `redis-cli` and `hookonce inspect`
//! (docs/design.md, "Redis layout"); the Lua scripts in `forward::atomic` and `ledger::redis`
//! write and match the same shapes.

use base64::Engine;
use sha2::{Digest, Sha256};

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

/// One stored record, parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Record<'a> {
    /// Forwarded: the acknowledgement (entry ID or sink answer) and the payload fingerprint.
    Done { ack: &'a str, fingerprint: &'a str },
    /// Claimed by a two-phase delivery that has not completed: its token, the payload
    /// fingerprint and the unix ms at which its lease ends.
    Processing {
        token: &'a str,
        fingerprint: &'a str,
        deadline_ms: u64,
    },
}

impl<'a> Record<'a> {
    /// Reads a stored record; `None` when it is in neither format.
    pub fn parse(text: &'a str) -> Option<Self> {
        if let Some(rest) = text.strip_prefix("p ") {
            let mut parts = rest.split(' ');
            let token = parts.next()?;
            let fingerprint = parts.next()?;
            let deadline_ms = parts.next()?.parse().ok()?;
            return Some(Record::Processing {
                token,
                fingerprint,
                deadline_ms,
            });
        }
        let (ack, fingerprint) = text.split_once(' ')?;
        Some(Record::Done { ack, fingerprint })
    }

    pub fn fingerprint(&self) -> &'a str {
        match self {
            Record::Done { fingerprint, .. } | Record::Processing { fingerprint, .. } => {
                fingerprint
            }
        }
    }
}

/// The done record a forward or a completion writes.
pub fn done(ack: &str, fingerprint: &str) -> String {
    format!("{ack} {fingerprint}")
}

/// The processing record a claim writes.
pub fn processing(token: &str, fingerprint: &str, deadline_ms: u64) -> String {
    format!("p {token} {fingerprint} {deadline_ms}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip() {
        let fp = Fingerprint::of(b"{}").encode();
        assert_eq!(fp.len(), Fingerprint::ENCODED_LEN);
        assert_eq!(
            Record::parse(&done("1-0", &fp)),
            Some(Record::Done {
                ack: "1-0",
                fingerprint: &fp
            })
        );
        assert_eq!(
            Record::parse(&processing("abc", "fp", 1000)),
            Some(Record::Processing {
                token: "abc",
                fingerprint: "fp",
                deadline_ms: 1000
            })
        );
        assert_eq!(Record::parse("garbage"), None);
        assert_eq!(Record::parse("p abc fp soon"), None);
    }
}
