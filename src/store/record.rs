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
//!
//! A source with `body_dedup` also keeps a *body record* per payload, keyed by a longer digest of
//! the same bytes ([`Fingerprint::body_key`]); its value is a done or processing record too.

use base64::Engine;
use sha2::{Digest, Sha256};

/// A digest of the payload: the first 128 bits of its SHA-256.
///
/// Records store 60 of those bits, as 10 base64 characters ([`Fingerprint::encode`]). That short
/// form tells two payloads under one *verified* event ID apart; a forger, who would have to choose
/// a colliding payload, cannot get a request verified in the first place. 60 bits make an
/// accidental collision negligible while keeping a Stripe dedup record in Redis's 136-byte
/// allocation class instead of the 152-byte one (see bench/history/2026-11-30-hot-path.md).
///
/// The body record's key ([`Fingerprint::body_key`]) uses all 128 bits: there the digest is the
/// identity of an event rather than a tie-breaker between two payloads of one identity, and two
/// different payloads must not meet under one key in any realistic number of events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fingerprint([u8; 16]);

impl Fingerprint {
    pub const ENCODED_LEN: usize = 10;
    /// Characters of [`Fingerprint::body_key`]: 128 bits in unpadded base64url.
    pub const BODY_KEY_LEN: usize = 22;

    pub fn of(body: &[u8]) -> Self {
        let digest = Sha256::digest(body);
        let mut bytes = [0u8; 16];
        bytes.copy_from_slice(&digest[..16]);
        Self(bytes)
    }

    /// The fingerprint whose SHA-256 was computed elsewhere: its first 16 bytes.
    pub fn from_digest(first_16: [u8; 16]) -> Self {
        Self(first_16)
    }

    /// The 10 characters stored in dedup records (the first 60 bits).
    pub fn encode(&self) -> String {
        let mut text = base64::engine::general_purpose::STANDARD_NO_PAD.encode(&self.0[..8]);
        text.truncate(Self::ENCODED_LEN);
        text
    }

    /// The first 8 bytes of the digest as a big-endian number: what picks the partition of a
    /// source with `body_dedup`, so that its event record and its body record meet in one slot.
    pub fn leading_u64(&self) -> u64 {
        let mut first = [0u8; 8];
        first.copy_from_slice(&self.0[..8]);
        u64::from_be_bytes(first)
    }

    /// The 22 characters that end a body record's key: all 128 bits, in base64url so that the
    /// key needs no quoting in `redis-cli`.
    pub fn body_key(&self) -> String {
        let mut text = String::with_capacity(Self::BODY_KEY_LEN);
        self.push_body_key(&mut text);
        text
    }

    /// Appends [`Fingerprint::body_key`]'s 22 characters to `out` (a key's prefix, say).
    pub fn push_body_key(&self, out: &mut String) {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode_string(self.0, out);
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
    let mut record = String::with_capacity(ack.len() + done_room(fingerprint));
    record.push_str(ack);
    done_from(record, fingerprint)
}

/// The done record of an acknowledgement already made as a string of its own, which becomes the
/// record: a stored response, which [`done`] would copy whole. When `ack` was made with
/// [`done_room`] to spare, the record takes no new allocation either.
pub fn done_from(mut ack: String, fingerprint: &str) -> String {
    ack.reserve_exact(done_room(fingerprint));
    ack.push(' ');
    ack.push_str(fingerprint);
    ack
}

/// What a done record adds to its acknowledgement: the space and the fingerprint.
pub fn done_room(fingerprint: &str) -> usize {
    1 + fingerprint.len()
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
        let digest = Fingerprint::of(b"{}");
        let fp = digest.encode();
        assert_eq!(fp.len(), Fingerprint::ENCODED_LEN);
        assert_eq!(digest.body_key().len(), Fingerprint::BODY_KEY_LEN);
        // The short form is a prefix of the same digest: one hash serves both records.
        let standard = base64::engine::general_purpose::STANDARD_NO_PAD.encode(digest.0);
        assert!(standard.starts_with(&fp));
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

    #[test]
    fn an_acknowledgement_made_with_room_becomes_its_record_in_place() {
        let fp = Fingerprint::of(b"{}").encode();
        let mut ack = String::with_capacity(3 + done_room(&fp));
        ack.push_str("r1.");
        let (at, capacity) = (ack.as_ptr(), ack.capacity());
        let record = done_from(ack, &fp);
        assert_eq!(record, done("r1.", &fp));
        assert_eq!((record.as_ptr(), record.capacity()), (at, capacity));
        // Without the room it is the same record, in a string grown for it.
        assert_eq!(done_from("r1.".to_owned(), &fp), done("r1.", &fp));
    }
}

#[cfg(test)]
mod property_tests {
    use proptest::prelude::*;

    use super::*;
    use crate::property::check;

    #[test]
    fn property_records_never_panic_and_round_trip() {
        check(1024, ".{0,60}", |text| {
            let _ = Record::parse(&text).map(|record| record.fingerprint());
            Ok(())
        });
        // Acknowledgements are entry IDs (`1-0`) or sink answers (`http:200`, `nats:…`): never
        // a lone `p`, which would read as the start of a processing record.
        let ack = "[!-~]{1,30}".prop_filter("not p", |ack| ack != "p");
        let fingerprint = "[A-Za-z0-9+/]{10}";
        check(512, (ack, fingerprint), |(ack, fingerprint)| {
            let record = done(&ack, &fingerprint);
            let expected = Record::Done {
                ack: &ack,
                fingerprint: &fingerprint,
            };
            prop_assert_eq!(Record::parse(&record), Some(expected));
            Ok(())
        });
        let strategy = ("[!-~]{1,40}", fingerprint, any::<u64>());
        check(512, strategy, |(token, fingerprint, deadline_ms)| {
            let record = processing(&token, &fingerprint, deadline_ms);
            let expected = Record::Processing {
                token: &token,
                fingerprint: &fingerprint,
                deadline_ms,
            };
            prop_assert_eq!(Record::parse(&record), Some(expected));
            Ok(())
        });
    }
}
