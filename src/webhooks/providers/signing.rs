//! Building blocks shared by the HMAC schemes: keyed MACs, clocks and made-up IDs.
//!
//! Verification runs for every request, so nothing here allocates on that path: secrets are turned
//! into keyed MAC states once at construction (cloning one is two SHA block states, cheaper than
//! re-deriving the key pads), and the signatures a request carries are compared as `Candidates`
//! (see `signatures`), decoded into a fixed stack buffer.

use std::time::Duration;

use hmac::digest::KeyInit;
use hmac::{Hmac, Mac};
use rand::Rng;
use sha1::Sha1;
use sha2::{Sha256, Sha512};

use crate::config::{ConfigError, SourceSettings};

use super::secrets::{self, Decoder};
use super::sha256;
use super::signatures::Candidates;
use super::{RawRequest, VerifyError};

pub(crate) type HmacSha256 = Hmac<Sha256>;

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

/// The MAC of `message` under `key`, for `sign` (shared with the relay's signer).
pub(crate) use crate::signing::tag;

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
                    settings.secret_key(source, i),
                    "is not a valid key length for this algorithm",
                )
            })
        })
        .collect()
}

/// HMAC-SHA256 keys, one per configured secret (rotation), whose check can also digest the
/// payload in the same pass over the bytes (see `sha256`): what the schemes that sign the body
/// with HMAC-SHA256 hold.
pub(crate) struct Sha256Keys(Vec<sha256::Key>);

impl Sha256Keys {
    /// Keys from the source's secrets, decoded with `decode`.
    pub(crate) fn from_settings(
        source: &str,
        settings: &SourceSettings,
        decode: Decoder,
    ) -> Result<Self, ConfigError> {
        let secrets = secrets::decode(source, settings, decode)?;
        Ok(Self(secrets.iter().map(|s| sha256::Key::new(s)).collect()))
    }

    /// True when any key's MAC over the concatenated `message` parts equals any candidate, in
    /// constant time (as [`any_key_matches`]).
    pub(crate) fn matches(&self, message: &[&[u8]], candidates: &Candidates) -> bool {
        self.0
            .iter()
            .any(|key| equals_any(&key.mac(message), candidates))
    }

    /// As [`Sha256Keys::matches`], and the SHA-256 of the concatenated `payload` parts when a
    /// key matched: the first key's MAC and the digest come from one pass over both (the
    /// payload's fingerprint is then not hashed again downstream).
    pub(crate) fn matches_digesting(
        &self,
        message: &[&[u8]],
        payload: &[&[u8]],
        candidates: &Candidates,
    ) -> Option<[u8; 32]> {
        let (first, others) = self.0.split_first()?;
        let (mac, digest) = first.mac_and_digest(message, payload);
        let matched = equals_any(&mac, candidates)
            || others
                .iter()
                .any(|key| equals_any(&key.mac(message), candidates));
        matched.then_some(digest)
    }

    /// The MAC of `message` under the first secret, for `sign`.
    pub(crate) fn sign(&self, message: &[&[u8]]) -> Vec<u8> {
        self.0[0].mac(message).to_vec()
    }
}

/// Whether `mac` equals any candidate, each compared in constant time.
fn equals_any(mac: &[u8; 32], candidates: &Candidates) -> bool {
    use subtle::ConstantTimeEq as _;
    candidates
        .iter()
        .any(|tag| bool::from(mac.as_slice().ct_eq(tag)))
}

/// HMAC-SHA256 keys and a timestamp tolerance: what every scheme that signs a timestamp holds.
///
/// `verify` runs the common order of those schemes: any key's MAC must equal any signature, and
/// only then is the signed timestamp checked, so that an unsigned request with a stale timestamp
/// is a bad signature, not a stale one.
pub(crate) struct Keyed {
    keys: Sha256Keys,
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
            keys: Sha256Keys::from_settings(source, settings, decode)?,
            tolerance: tolerance_secs(source, settings, default_tolerance)?,
        })
    }

    /// The tolerance in whole seconds.
    pub(crate) fn tolerance(&self) -> u64 {
        self.tolerance
    }

    /// Whether any key's MAC over `message` equals any of `signatures` (none never matches), and
    /// then the SHA-256 of the concatenated `payload` parts from the same pass (see
    /// [`Sha256Keys::matches_digesting`]).
    pub(crate) fn matches_digesting(
        &self,
        message: &[&[u8]],
        payload: &[&[u8]],
        signatures: &Candidates,
    ) -> Option<[u8; 32]> {
        self.keys.matches_digesting(message, payload, signatures)
    }

    /// Checks the signatures over `message`, then that `signed_unix` is within the tolerance of
    /// the request's time; and gives the SHA-256 of the concatenated `payload` parts (what the
    /// payload's fingerprint covers: the body, or the body with a field zeroed) from the same
    /// pass (see [`Sha256Keys::matches_digesting`]).
    pub(crate) fn verify_digesting(
        &self,
        message: &[&[u8]],
        payload: &[&[u8]],
        signatures: &Candidates,
        signed_unix: i64,
        request: &RawRequest<'_>,
    ) -> Result<[u8; 32], VerifyError> {
        let digest = self
            .matches_digesting(message, payload, signatures)
            .ok_or(VerifyError::BadSignature)?;
        check_timestamp(signed_unix, request.now_unix, self.tolerance)?;
        Ok(digest)
    }

    /// The MAC of `message` under the first secret, for `sign`.
    pub(crate) fn sign(&self, message: &[&[u8]]) -> Vec<u8> {
        self.keys.sign(message)
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

/// Parses a signed timestamp (unix seconds, or Linear's milliseconds) in canonical decimal form:
/// ASCII digits only, no sign, no spaces, no leading zero (but `0` itself), at most 18 digits.
///
/// Every scheme that signs a timestamp parses it here. Only one spelling of each instant is
/// accepted, so that a signed string cannot be re-read with a timestamp that borrows or lends
/// characters (`0017…` is not `17…`), and a provider's exact bytes are what was signed.
pub(crate) fn parse_unix(text: &str) -> Option<i64> {
    let canonical = !text.is_empty()
        && text.len() <= 18
        && text.bytes().all(|b| b.is_ascii_digit())
        && (text == "0" || !text.starts_with('0'));
    canonical.then(|| text.parse().ok()).flatten()
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

/// Keyed MACs of one configured algorithm (the generic provider's `algorithm`).
pub(crate) enum AnyHmac {
    Sha1(Vec<Hmac<Sha1>>),
    Sha256(Sha256Keys),
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
            AnyHmac::Sha256(keys) => keys.matches(message, candidates),
            AnyHmac::Sha512(keys) => any_key_matches(keys, message, candidates),
        }
    }

    /// As [`AnyHmac::matches`] (a bad signature when none does), and with SHA-256 keys the
    /// SHA-256 of the concatenated `payload` parts from the same pass
    /// ([`Sha256Keys::matches_digesting`]).
    pub(crate) fn verify_digesting(
        &self,
        message: &[&[u8]],
        payload: &[&[u8]],
        candidates: &Candidates,
    ) -> Result<Option<[u8; 32]>, VerifyError> {
        match self {
            AnyHmac::Sha256(keys) => keys
                .matches_digesting(message, payload, candidates)
                .map(Some)
                .ok_or(VerifyError::BadSignature),
            other if other.matches(message, candidates) => Ok(None),
            _ => Err(VerifyError::BadSignature),
        }
    }

    pub(crate) fn sign(&self, message: &[&[u8]]) -> Vec<u8> {
        match self {
            AnyHmac::Sha1(keys) => tag(&keys[0], message),
            AnyHmac::Sha256(keys) => keys.sign(message),
            AnyHmac::Sha512(keys) => tag(&keys[0], message),
        }
    }
}

#[cfg(test)]
mod tests {
    use sha2::Digest as _;

    use super::super::signatures::Encoding;
    use super::*;

    #[test]
    fn a_later_secret_that_matches_still_hands_on_the_payload_s_digest() {
        // Rotation: the first key's MAC is the one computed beside the digest; the request is
        // signed with the second.
        let keys = Sha256Keys(vec![sha256::Key::new(b"old"), sha256::Key::new(b"new")]);
        let body = br#"{"id":"evt_1"}"#;
        let signed = hex::encode(sha256::Key::new(b"new").mac(&[body]));
        let candidates = Candidates::single(Encoding::Hex, &signed, 32, "x-sig").unwrap();
        let expected: [u8; 32] = Sha256::digest(body).into();
        assert_eq!(
            keys.matches_digesting(&[body], &[body], &candidates),
            Some(expected)
        );
        let forged = Candidates::single(Encoding::Hex, &"0".repeat(64), 32, "x-sig").unwrap();
        assert_eq!(keys.matches_digesting(&[body], &[body], &forged), None);
        assert!(!keys.matches(&[body], &forged));
    }

    #[test]
    fn timestamps_are_checked_on_both_sides_without_overflow() {
        assert!(check_timestamp(1000, 1300, 300).is_ok());
        assert!(check_timestamp(1600, 1300, 300).is_ok());
        assert!(check_timestamp(999, 1300, 300).is_err());
        assert!(check_timestamp(1601, 1300, 300).is_err());
        assert!(check_timestamp(i64::MIN, i64::MAX, 300).is_err());
        assert_eq!(parse_unix("1614265330"), Some(1_614_265_330));
        assert_eq!(parse_unix("0"), Some(0));
        for bad in [
            "",
            "-1",
            "+1",
            " 1",
            "1 ",
            "1.5",
            "1e9",
            "01614265330",
            "00",
            "９",
            "9999999999999999999",
        ] {
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
