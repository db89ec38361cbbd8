//! Building blocks shared by the HMAC schemes: keyed MACs, signature candidates, clocks and IDs.
//!
//! Verification runs for every request, so nothing here allocates on that path: secrets are turned
//! into keyed MAC states once at construction (cloning one is two SHA block states, cheaper than
//! re-deriving the key pads), and signatures from a header are decoded into a fixed stack buffer.

use std::time::Duration;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use hmac::digest::KeyInit;
use hmac::{Hmac, Mac};
use rand::Rng;
use sha1::Sha1;
use sha2::{Sha256, Sha512};

use crate::config::{ConfigError, SourceSettings};

use super::secrets::{self, Decoder};
use super::VerifyError;

pub(crate) type HmacSha256 = Hmac<Sha256>;

/// Most signatures of an accepted scheme we look at in one header. Real senders put one per live
/// secret (two or three during a rotation); the cap keeps a forged header with thousands of
/// entries from costing thousands of MAC computations.
pub(crate) const MAX_SIGNATURES: usize = 16;

/// Longest tag any supported algorithm produces (SHA-512).
const MAX_TAG_LEN: usize = 64;

/// Longest base64 text that can hold `MAX_TAG_LEN` bytes (88 characters, padded).
const MAX_BASE64_LEN: usize = MAX_TAG_LEN.div_ceil(3) * 4;

/// Signatures taken from a request, decoded, waiting to be compared with the expected tags.
pub(crate) struct Candidates {
    tags: [[u8; MAX_TAG_LEN]; MAX_SIGNATURES],
    count: usize,
    tag_len: usize,
}

/// How a scheme writes its MACs as text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Encoding {
    /// Hex digits; either case is read, lowercase is written.
    Hex,
    /// Standard-alphabet base64; padded or not is read, padded is written.
    Base64,
}

impl Encoding {
    /// `tag` as this encoding writes it, for `sign`.
    pub(crate) fn encode(self, tag: &[u8]) -> String {
        match self {
            Encoding::Hex => hex::encode(tag),
            Encoding::Base64 => base64(tag),
        }
    }
}

/// Why a signature could not be taken: the header it came from is then garbled.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Unusable;

impl Candidates {
    /// An empty set for tags of `tag_len` bytes (32 for SHA-256).
    pub(crate) fn new(tag_len: usize) -> Self {
        debug_assert!(tag_len <= MAX_TAG_LEN);
        Self {
            tags: [[0; MAX_TAG_LEN]; MAX_SIGNATURES],
            count: 0,
            tag_len,
        }
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Adds a hex signature (either case). Wrong length, bad digits or too many: `Unusable`.
    pub(crate) fn push_hex(&mut self, text: &str) -> Result<(), Unusable> {
        let slot = self.next_slot()?;
        // decode_to_slice checks that the text is exactly twice the slot length.
        hex::decode_to_slice(text, slot).map_err(|_| Unusable)?;
        self.count += 1;
        Ok(())
    }

    /// Adds a standard-alphabet base64 signature, padded or not.
    pub(crate) fn push_base64(&mut self, text: &str) -> Result<(), Unusable> {
        let tag_len = self.tag_len;
        let slot = self.next_slot()?;
        if text.len() > MAX_BASE64_LEN {
            return Err(Unusable);
        }
        let mut buffer = [0u8; MAX_TAG_LEN + 3];
        let len = BASE64_LENIENT
            .decode_slice(text, &mut buffer)
            .map_err(|_| Unusable)?;
        if len != tag_len {
            return Err(Unusable);
        }
        slot.copy_from_slice(&buffer[..len]);
        self.count += 1;
        Ok(())
    }

    /// Adds a signature written in `encoding`.
    pub(crate) fn push(&mut self, encoding: Encoding, text: &str) -> Result<(), Unusable> {
        match encoding {
            Encoding::Hex => self.push_hex(text),
            Encoding::Base64 => self.push_base64(text),
        }
    }

    /// The one signature of a scheme that sends a single MAC of `tag_len` bytes, read from
    /// `header` (named in the error when the text is not such a MAC).
    pub(crate) fn single(
        encoding: Encoding,
        text: &str,
        tag_len: usize,
        header: &'static str,
    ) -> Result<Self, VerifyError> {
        let mut candidates = Self::new(tag_len);
        candidates
            .push(encoding, text)
            .map_err(|_| VerifyError::GarbledHeader(header))?;
        Ok(candidates)
    }

    fn next_slot(&mut self) -> Result<&mut [u8], Unusable> {
        let tag_len = self.tag_len;
        self.tags
            .get_mut(self.count)
            .map(|tag| &mut tag[..tag_len])
            .ok_or(Unusable)
    }

    fn iter(&self) -> impl Iterator<Item = &[u8]> {
        self.tags[..self.count]
            .iter()
            .map(|tag| &tag[..self.tag_len])
    }
}

/// Standard alphabet that accepts padded and unpadded input alike (senders differ).
pub(crate) const BASE64_LENIENT: base64::engine::GeneralPurpose =
    base64::engine::GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        base64::engine::GeneralPurposeConfig::new()
            .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
    );

/// True when any key's MAC over the concatenated `message` parts equals any candidate.
///
/// Each key hashes the message once; its state is then cloned per candidate so that the
/// comparison itself is `verify_slice`, which is constant-time. Returning at the first match only
/// reveals which secret matched to someone who already holds a valid signature.
pub(crate) fn any_key_matches<M: Mac + Clone>(
    keys: &[M],
    message: &[&[u8]],
    candidates: &Candidates,
) -> bool {
    keys.iter().any(|key| {
        let mut mac = key.clone();
        for part in message {
            mac.update(part);
        }
        candidates
            .iter()
            .any(|tag| mac.clone().verify_slice(tag).is_ok())
    })
}

/// The MAC of `message` under `key`, for `sign`.
pub(crate) fn tag<M: Mac + Clone>(key: &M, message: &[&[u8]]) -> Vec<u8> {
    let mut mac = key.clone();
    for part in message {
        mac.update(part);
    }
    mac.finalize().into_bytes().to_vec()
}

/// Decodes a source's secrets with `decode` and keys one MAC state per secret.
pub(crate) fn keyed_macs<M: Mac + KeyInit>(
    source: &str,
    settings: &SourceSettings,
    decode: Decoder,
) -> Result<Vec<M>, ConfigError> {
    let keys = secrets::decode(source, settings, decode)?;
    keys.iter()
        .enumerate()
        .map(|(i, key)| {
            <M as KeyInit>::new_from_slice(key).map_err(|_| {
                ConfigError::invalid(
                    format!("sources.{source}.secrets[{i}]"),
                    "is not a valid key length for this algorithm",
                )
            })
        })
        .collect()
}

/// HMAC-SHA256 keys and a timestamp tolerance: what every scheme that signs a timestamp holds.
///
/// `verify` runs the common order of those schemes: any key's MAC must equal any signature, and
/// only then is the signed timestamp checked, so that an unsigned request with a stale timestamp
/// is a bad signature, not a stale one.
pub(crate) struct Keyed {
    keys: Vec<HmacSha256>,
    /// In whole seconds, at least one.
    tolerance: u64,
}

impl Keyed {
    /// Keys from the source's secrets (decoded with `decode`) and its `tolerance`, or `default`.
    pub(crate) fn from_settings(
        source: &str,
        settings: &SourceSettings,
        decode: Decoder,
        default_tolerance: Duration,
    ) -> Result<Self, ConfigError> {
        Ok(Self {
            keys: keyed_macs(source, settings, decode)?,
            tolerance: tolerance_secs(source, settings, default_tolerance)?,
        })
    }

    /// The tolerance in whole seconds.
    pub(crate) fn tolerance(&self) -> u64 {
        self.tolerance
    }

    /// True when any key's MAC over `message` equals any of `signatures` (none never matches).
    pub(crate) fn matches(&self, message: &[&[u8]], signatures: &Candidates) -> bool {
        any_key_matches(&self.keys, message, signatures)
    }

    /// Checks the signatures over `message`, then that `signed_unix` is within the tolerance of
    /// `now_unix`.
    pub(crate) fn verify(
        &self,
        message: &[&[u8]],
        signatures: &Candidates,
        signed_unix: i64,
        now_unix: i64,
    ) -> Result<(), VerifyError> {
        if !self.matches(message, signatures) {
            return Err(VerifyError::BadSignature);
        }
        check_timestamp(signed_unix, now_unix, self.tolerance)
    }

    /// The MAC of `message` under the first secret, for `sign`.
    pub(crate) fn sign(&self, message: &[&[u8]]) -> Vec<u8> {
        tag(&self.keys[0], message)
    }
}

/// The source's `tolerance` in whole seconds, or `default`.
pub(crate) fn tolerance_secs(
    source: &str,
    settings: &SourceSettings,
    default: Duration,
) -> Result<u64, ConfigError> {
    let tolerance = settings.tolerance.map_or(default, |t| t.0);
    if tolerance.as_secs() == 0 {
        return Err(ConfigError::invalid(
            format!("sources.{source}.tolerance"),
            "must be at least 1s (signed timestamps have whole-second resolution)",
        ));
    }
    Ok(tolerance.as_secs())
}

/// Accepts a signed timestamp within `tolerance` seconds of `now`, on either side.
///
/// `abs_diff` cannot overflow, so a forged `t=-9223372036854775808` is simply stale.
pub(crate) fn check_timestamp(
    signed_unix: i64,
    now_unix: i64,
    tolerance: u64,
) -> Result<(), VerifyError> {
    if now_unix.abs_diff(signed_unix) > tolerance {
        Err(VerifyError::StaleTimestamp)
    } else {
        Ok(())
    }
}

/// Parses unix seconds written as plain ASCII digits (no sign, no spaces, at most 18 digits).
pub(crate) fn parse_unix(text: &str) -> Option<i64> {
    if text.is_empty() || text.len() > 18 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// A random identifier: `prefix` followed by `len` base62 characters (like Svix's `msg_…`).
pub(crate) fn random_id(prefix: &str, len: usize) -> String {
    const ALPHABET: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    let mut rng = rand::rng();
    let mut id = String::with_capacity(prefix.len() + len);
    id.push_str(prefix);
    id.extend((0..len).map(|_| char::from(ALPHABET[rng.random_range(0..ALPHABET.len())])));
    id
}

/// A random version-4 UUID in its usual lowercase hyphenated form (GitHub's delivery IDs).
pub(crate) fn random_uuid() -> String {
    let mut bytes: [u8; 16] = rand::rng().random();
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let hex = hex::encode(bytes);
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// Base64 (standard alphabet, padded) of a tag, for `sign`.
pub(crate) fn base64(bytes: &[u8]) -> String {
    STANDARD.encode(bytes)
}

/// Keyed MACs of one configured algorithm (the generic provider's `algorithm`).
pub(crate) enum AnyHmac {
    Sha1(Vec<Hmac<Sha1>>),
    Sha256(Vec<HmacSha256>),
    Sha512(Vec<Hmac<Sha512>>),
}

impl AnyHmac {
    pub(crate) fn tag_len(&self) -> usize {
        match self {
            AnyHmac::Sha1(_) => 20,
            AnyHmac::Sha256(_) => 32,
            AnyHmac::Sha512(_) => 64,
        }
    }

    pub(crate) fn matches(&self, message: &[&[u8]], candidates: &Candidates) -> bool {
        match self {
            AnyHmac::Sha1(keys) => any_key_matches(keys, message, candidates),
            AnyHmac::Sha256(keys) => any_key_matches(keys, message, candidates),
            AnyHmac::Sha512(keys) => any_key_matches(keys, message, candidates),
        }
    }

    pub(crate) fn sign(&self, message: &[&[u8]]) -> Vec<u8> {
        match self {
            AnyHmac::Sha1(keys) => tag(&keys[0], message),
            AnyHmac::Sha256(keys) => tag(&keys[0], message),
            AnyHmac::Sha512(keys) => tag(&keys[0], message),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidates_reject_wrong_lengths_and_cap_the_count() {
        let mut c = Candidates::new(32);
        assert_eq!(c.push_hex("abcd"), Err(Unusable));
        assert_eq!(c.push_hex(&"zz".repeat(32)), Err(Unusable));
        assert_eq!(c.push_base64("AAAA"), Err(Unusable));
        assert!(c.is_empty());
        for _ in 0..MAX_SIGNATURES {
            c.push_hex(&"AB".repeat(32)).unwrap();
        }
        assert_eq!(c.push_hex(&"ab".repeat(32)), Err(Unusable));
        assert_eq!(c.push_base64(&base64(&[0; 32])), Err(Unusable));
    }

    #[test]
    fn base64_signatures_decode_padded_or_not() {
        let mut c = Candidates::new(32);
        let padded = base64(&[7; 32]);
        c.push_base64(&padded).unwrap();
        c.push_base64(padded.trim_end_matches('=')).unwrap();
        assert!(c.iter().all(|tag| tag == [7; 32]));
        assert_eq!(c.push_base64(&"A".repeat(200)), Err(Unusable));
    }

    #[test]
    fn a_single_signature_round_trips_through_its_encoding_or_names_the_header() {
        for encoding in [Encoding::Hex, Encoding::Base64] {
            let text = encoding.encode(&[5; 32]);
            let c = Candidates::single(encoding, &text, 32, "x-sig").unwrap();
            assert!(c.iter().eq([&[5u8; 32][..]]), "{encoding:?}");
            assert_eq!(
                Candidates::single(encoding, &text, 20, "x-sig").err(),
                Some(VerifyError::GarbledHeader("x-sig"))
            );
        }
        assert_eq!(Encoding::Hex.encode(&[0xab]), "ab");
    }

    #[test]
    fn timestamps_are_checked_on_both_sides_without_overflow() {
        assert!(check_timestamp(1000, 1300, 300).is_ok());
        assert!(check_timestamp(1600, 1300, 300).is_ok());
        assert!(check_timestamp(999, 1300, 300).is_err());
        assert!(check_timestamp(1601, 1300, 300).is_err());
        assert!(check_timestamp(i64::MIN, i64::MAX, 300).is_err());
        assert_eq!(parse_unix("1614265330"), Some(1_614_265_330));
        for bad in ["", "-1", "+1", " 1", "1.5", "1e9", "9999999999999999999"] {
            assert_eq!(parse_unix(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn random_ids_look_like_the_real_ones() {
        let id = random_id("msg_", 27);
        assert!(id.starts_with("msg_") && id.len() == 31);
        let uuid = random_uuid();
        assert_eq!(uuid.len(), 36);
        assert_eq!(&uuid[14..15], "4");
        assert_ne!(random_uuid(), uuid);
    }
}
