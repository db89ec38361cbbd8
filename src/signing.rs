//! The keyed-MAC pieces that both the webhook front and the relay use, below both: the MAC of a
//! message in parts, the `whsec_…` secret encoding, and `StandardSigner`, which signs what the
//! relay sends as a Standard Webhooks sender would. A leaf: it imports nothing of the crate, so
//! that the relay signs without depending on the webhook front (`webhooks::providers` re-uses
//! these for its own schemes).

use base64::Engine as _;
use hmac::Mac;

/// Standard alphabet that accepts padded and unpadded input alike (senders differ).
pub const BASE64_LENIENT: base64::engine::GeneralPurpose = base64::engine::GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    base64::engine::GeneralPurposeConfig::new()
        .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
);

/// The headers of a Standard Webhooks message: its ID, its timestamp and its signatures.
pub const WEBHOOK_ID: &str = "webhook-id";
pub const WEBHOOK_TIMESTAMP: &str = "webhook-timestamp";
pub const WEBHOOK_SIGNATURE: &str = "webhook-signature";

/// The MAC of `message` (its parts concatenated) under `key`.
pub fn tag<M: Mac + Clone>(key: &M, message: &[&[u8]]) -> Vec<u8> {
    let mut mac = key.clone();
    for part in message {
        mac.update(part);
    }
    mac.finalize().into_bytes().to_vec()
}

/// `whsec_<base64>` → key bytes. The prefix is optional and padding too, as in the official
/// Standard Webhooks libraries. The error says what is wrong, never a character of the secret.
pub fn whsec_base64(secret: &str) -> Result<Vec<u8>, String> {
    let encoded = secret.strip_prefix("whsec_").unwrap_or(secret);
    let key = BASE64_LENIENT.decode(encoded).map_err(|e| {
        let problem = match e {
            base64::DecodeError::InvalidByte(at, _) => format!("a non-base64 character at {at}"),
            base64::DecodeError::InvalidLastSymbol(at, _) => {
                format!("a last character at {at} that leaves bits over")
            }
            base64::DecodeError::InvalidLength(_) => "a length no base64 text has".to_owned(),
            base64::DecodeError::InvalidPadding => "misplaced padding".to_owned(),
        };
        format!("is not \"whsec_\" followed by base64 (it has {problem})")
    })?;
    if key.is_empty() {
        return Err("decodes to an empty key".to_owned());
    }
    Ok(key)
}

/// Signs what the relay sends, as a Standard Webhooks sender would, so that a worker verifies
/// hookonce with the scheme's own libraries. Built from a route's `signing_secret`.
pub struct StandardSigner {
    key: hmac::Hmac<sha2::Sha256>,
}

impl StandardSigner {
    /// A signer for a `whsec_…` secret; the error says what is wrong, never a character of it.
    pub fn new(secret: &str) -> Result<Self, String> {
        let key = whsec_base64(secret)?;
        let key = hmac::Hmac::<sha2::Sha256>::new_from_slice(&key).map_err(|e| e.to_string())?;
        Ok(Self { key })
    }

    /// `webhook-id`, `webhook-timestamp` and `webhook-signature` for one message.
    pub fn sign(&self, id: &str, unix: u64, body: &[u8]) -> [(&'static str, String); 3] {
        let timestamp = unix.to_string();
        let mac = tag(
            &self.key,
            &[id.as_bytes(), b".", timestamp.as_bytes(), b".", body],
        );
        [
            (WEBHOOK_ID, id.to_owned()),
            (WEBHOOK_TIMESTAMP, timestamp),
            (
                WEBHOOK_SIGNATURE,
                format!(
                    "v1,{}",
                    base64::engine::general_purpose::STANDARD.encode(&mac)
                ),
            ),
        ]
    }
}
