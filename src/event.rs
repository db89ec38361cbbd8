//! A verified event, and why verification fails: what the webhook front hands to forwarding.
//!
//! Only providers (`webhooks::providers`) build a [`VerifiedEvent`], and only after a signature
//! matched: its constructor is crate-private and called nowhere else, so nothing downstream of
//! verification can hold an unverified event. It lives here, below both the webhook front and the
//! forwarders, so that neither imports the other's internals.

use bytes::Bytes;

/// Longest event ID we accept, in bytes: IDs are used verbatim in Redis keys (see "Redis layout"
/// in `docs/design.md`).
pub const MAX_EVENT_ID_LEN: usize = 255;

/// One event whose signature has been checked. Only providers can construct it.
///
/// Two events are equal when their ID, type and body are: what the fingerprint covers is a
/// provider's dedup detail, not part of the event.
#[derive(Debug, Clone)]
pub struct VerifiedEvent {
    event_id: String,
    event_type: String,
    body: Bytes,
    /// What the payload fingerprint covers, when it must not be the whole body.
    fingerprint_input: Option<Bytes>,
    /// The first 128 bits of the SHA-256 of [`VerifiedEvent::fingerprint_input`], when the
    /// signature's check computed it on its way (see [`VerifiedEvent::with_payload_digest`]).
    payload_digest: Option<[u8; 16]>,
}

impl PartialEq for VerifiedEvent {
    fn eq(&self, other: &Self) -> bool {
        (&self.event_id, &self.event_type, &self.body)
            == (&other.event_id, &other.event_type, &other.body)
    }
}

impl Eq for VerifiedEvent {}

impl VerifiedEvent {
    /// Builds an event after its request passed verification; rejects IDs that cannot be keys.
    pub(crate) fn new(
        event_id: impl Into<String>,
        event_type: impl Into<String>,
        body: Bytes,
    ) -> Result<Self, VerifyError> {
        let event_id = event_id.into();
        validate_event_id(&event_id)?;
        let mut event_type = event_type.into();
        // The type is informational; keep it bounded and printable rather than rejecting the event.
        if event_type.len() > MAX_EVENT_ID_LEN || has_control(&event_type) {
            event_type.clear();
        }
        Ok(Self {
            event_id,
            event_type,
            body,
            fingerprint_input: None,
            payload_digest: None,
        })
    }

    /// Fingerprints `input` instead of the body: for schemes whose retries change a field that
    /// is not part of the event (Linear stamps each attempt with a fresh `webhookTimestamp`), so
    /// that a retry is recognised as a duplicate, not rejected as a different payload.
    pub(crate) fn with_fingerprint_input(mut self, input: Vec<u8>) -> Self {
        self.fingerprint_input = Some(Bytes::from(input));
        self.payload_digest = None;
        self
    }

    /// Keeps the SHA-256 of [`VerifiedEvent::fingerprint_input`] that the signature's check
    /// computed in the same pass over the body, so that forwarding does not hash it again. A
    /// provider passes only the digest of exactly those bytes: the providers' property tests
    /// check every event they verify against a fresh SHA-256.
    pub(crate) fn with_payload_digest(mut self, sha256: &[u8; 32]) -> Self {
        let mut first = [0u8; 16];
        first.copy_from_slice(&sha256[..16]);
        self.payload_digest = Some(first);
        self
    }

    /// The first 128 bits of the SHA-256 of [`VerifiedEvent::fingerprint_input`], when already
    /// known.
    pub fn payload_digest(&self) -> Option<&[u8; 16]> {
        self.payload_digest.as_ref()
    }

    /// The bytes the payload fingerprint is computed over (the body, unless a provider says otherwise).
    pub fn fingerprint_input(&self) -> &[u8] {
        self.fingerprint_input.as_ref().unwrap_or(&self.body)
    }

    pub fn event_id(&self) -> &str {
        &self.event_id
    }

    pub fn event_type(&self) -> &str {
        &self.event_type
    }

    /// The bytes that are forwarded: the raw request body, or one item's slice of it for batches.
    pub fn body(&self) -> &Bytes {
        &self.body
    }
}

/// Why a request was rejected. Each variant maps to one outcome (see "Outcomes and status codes"
/// in `docs/design.md`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    #[error("missing header {0}")]
    MissingHeader(&'static str),
    #[error("signature header {0} is not in the expected format")]
    GarbledHeader(&'static str),
    #[error("no signature matches any configured secret")]
    BadSignature,
    #[error("signed timestamp is outside the tolerance")]
    StaleTimestamp,
    #[error("malformed request: {0}")]
    Malformed(&'static str),
}

/// Checks that an event ID can be used verbatim as part of a Redis key.
pub fn validate_event_id(id: &str) -> Result<(), VerifyError> {
    if id.is_empty() {
        return Err(VerifyError::Malformed("event ID is empty"));
    }
    if id.len() > MAX_EVENT_ID_LEN {
        return Err(VerifyError::Malformed("event ID is longer than 255 bytes"));
    }
    if has_control(id) {
        return Err(VerifyError::Malformed(
            "event ID contains control characters",
        ));
    }
    Ok(())
}

/// Whether `text` holds a control character (Unicode's `Cc`, as [`char::is_control`]: U+0000 to
/// U+001F and U+007F to U+009F). Text of printable ASCII alone, nearly every event ID and type, is
/// told in one pass over its bytes that the compiler vectorises; anything else is decided
/// character by character.
fn has_control(text: &str) -> bool {
    let printable_ascii = text
        .as_bytes()
        .iter()
        .fold(true, |all, &byte| all & (0x20..0x7f).contains(&byte));
    !printable_ascii && text.chars().any(char::is_control)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::has_control;

    #[test]
    fn control_characters_are_unicodes_cc_alone() {
        for text in ["", "evt_1", "a b~", "évt_ü_東京", "\u{a0}", "\u{2028}"] {
            assert!(!has_control(text), "{text:?}");
        }
        for text in [
            "\u{0}", "a\nb", "\t", "a\u{1f}", "\u{7f}", "é\u{85}", "\u{9f}x",
        ] {
            assert!(has_control(text), "{text:?}");
        }
    }

    proptest! {
        /// The byte pass and the character rule agree on any text, ASCII or not.
        #[test]
        fn the_fast_path_agrees_with_char_is_control(text in any::<String>(), ascii in "[\\x00-\\x7f]{0,40}") {
            prop_assert_eq!(has_control(&text), text.chars().any(char::is_control));
            prop_assert_eq!(has_control(&ascii), ascii.chars().any(char::is_control));
        }
    }
}
