//! What every provider is: the request it sees ([`RawRequest`]), what it makes of it
//! ([`Verified`], [`Ack`]), how it signs a test request ([`SignOptions`], [`SignError`]), the trait
//! itself ([`Provider`]) and the header and body helpers the providers share. Its own file below
//! the façade, so that the providers can import it without importing the module that lists them.

use bytes::Bytes;
use http::{HeaderMap, HeaderName};

use crate::event::{VerifiedEvent, VerifyError};

/// What a provider sees of one HTTP request.
#[derive(Clone, Copy)]
pub struct RawRequest<'a> {
    pub headers: &'a HeaderMap,
    pub body: &'a Bytes,
    /// Current time as unix seconds, passed in so that providers stay pure.
    pub now_unix: i64,
}

/// The result of verifying a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verified {
    /// One or more events to deduplicate and forward (several for batching providers such as Adyen).
    Events(Vec<VerifiedEvent>),
    /// A handshake the provider expects answered directly (Slack's `url_verification`); nothing is
    /// forwarded. The bytes are the JSON response body.
    Handshake(Bytes),
}

/// Acknowledgement a provider expects for an accepted delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ack {
    pub content_type: &'static str,
    pub body: &'static str,
}

/// The default acknowledgement: a small JSON object.
pub const JSON_ACK: Ack = Ack {
    content_type: "application/json",
    body: "{\"received\":true}",
};

/// Inputs to `sign`, for `hookonce sign` and the load generator.
#[derive(Debug, Clone, Default)]
pub struct SignOptions {
    /// Event ID for schemes that carry it in a header (ignored where the ID lives in the body).
    pub event_id: Option<String>,
    /// Event type for schemes that carry it in a header.
    pub event_type: Option<String>,
    pub now_unix: i64,
}

/// Why `sign_body` cannot sign a body (it is not something the provider would send).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SignError(pub String);

/// One signature scheme, configured for one source.
pub trait Provider: Send + Sync + 'static {
    /// The provider's name as written in `provider = "…"`, and as stored in the stream entry.
    fn name(&self) -> &'static str;

    /// Checks the request and extracts its events. Must not do I/O.
    fn verify(&self, request: &RawRequest<'_>) -> Result<Verified, VerifyError>;

    /// What to answer once every event is forwarded or a duplicate.
    fn ack(&self) -> Ack {
        JSON_ACK
    }

    /// Headers the provider would send with `body`, signed with the first configured secret.
    ///
    /// For schemes that sign inside the body, call [`Provider::sign_body`] first and pass its
    /// result here.
    fn sign(&self, body: &[u8], options: &SignOptions) -> Vec<(String, String)>;

    /// The body the provider would send in place of `body`, for schemes whose signature or signed
    /// timestamp lives inside the body; `None` when `body` is sent as it is (the default).
    ///
    /// Adyen sets every item's `additionalData.hmacSignature`; Linear sets `webhookTimestamp` to
    /// `options.now_unix` unless the body already carries one within the tolerance. Everything else
    /// in the body is kept byte for byte. Like `sign`, this is pure and uses the first secret.
    fn sign_body(
        &self,
        _body: &[u8],
        _options: &SignOptions,
    ) -> Result<Option<Vec<u8>>, SignError> {
        Ok(None)
    }
}

/// Deserializes a body that must be a JSON object, or returns `None`.
///
/// Serde would also build a struct from a JSON array (positionally); requiring `{` first keeps
/// `["evt_1"]` from passing as an event whose ID is `evt_1`.
pub(crate) fn json_object<'a, T: serde::Deserialize<'a>>(body: &'a [u8]) -> Option<T> {
    let first = body.iter().find(|b| !b.is_ascii_whitespace())?;
    if *first != b'{' {
        return None;
    }
    serde_json::from_slice(body).ok()
}

/// The event ID carried in a header of an already verified request.
///
/// Absent or not UTF-8 is `Malformed`, not a signature problem: the signature has matched, so the
/// sender holds the secret and simply sent something we cannot key on.
pub(crate) fn id_from_header<'a>(
    headers: &'a HeaderMap,
    name: impl http::header::AsHeaderName,
    missing: &'static str,
) -> Result<&'a str, VerifyError> {
    let value = headers.get(name).ok_or(VerifyError::Malformed(missing))?;
    std::str::from_utf8(value.as_bytes())
        .map_err(|_| VerifyError::Malformed("event ID header is not UTF-8"))
}

/// A header's text, or `""` when it is absent or not visible ASCII (for informational fields).
pub(crate) fn header_or_empty(headers: &HeaderMap, name: impl http::header::AsHeaderName) -> &str {
    headers
        .get(name)
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default()
}

/// A header a provider reads, named once: a header map parses a name given as text at every
/// lookup (its characters checked and lowered, the standard names tried), not one given as a
/// `HeaderName`. Kept in a `static`, with its text for the messages that name it.
pub(crate) struct Named {
    pub(crate) text: &'static str,
    name: HeaderName,
}

impl Named {
    /// `text` must be a lowercase header name (checked when the program is compiled).
    pub(crate) const fn new(text: &'static str) -> Self {
        Self {
            text,
            name: HeaderName::from_static(text),
        }
    }

    pub(crate) fn name(&self) -> &HeaderName {
        &self.name
    }
}

/// Returns a header's value as text, or the error that names it.
pub(crate) fn header<'a>(headers: &'a HeaderMap, named: &Named) -> Result<&'a str, VerifyError> {
    let value = headers
        .get(&named.name)
        .ok_or(VerifyError::MissingHeader(named.text))?;
    value
        .to_str()
        .map_err(|_| VerifyError::GarbledHeader(named.text))
}
