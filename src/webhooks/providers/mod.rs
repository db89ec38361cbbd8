//! Providers turn one raw webhook request into verified events, or say why they cannot.
//!
//! A provider is a pure function of (headers, raw body, secrets, current time): it performs no I/O and
//! reads no clock, so every scheme is unit-testable against the official vectors. The only way to
//! obtain a [`VerifiedEvent`] is through a provider's `verify`, because its constructor is private to
//! this module tree: nothing downstream of `providers/` can ever see an unverified request.
//!
//! Every scheme runs in the same order: read the signature, compare it in constant time with the
//! MAC of the raw bytes under every configured secret (rotation), check the signed timestamp, and
//! only then parse the body for the event ID. So an unsigned garbage body is an invalid signature
//! (401), never `Malformed` (400), which is kept for senders that hold the secret.
//!
//! - `registry`: the one list of providers (name, constructor, default dedup window, own keys);
//!   `build` and `default_dedup_ttl` read it.
//! - `stripe`, `standard` (and Svix), `github`, `shopify`, `slack`, `paddle`, `square`, `linear`,
//!   `gitlab`: one scheme each, described in each module's documentation.
//! - `adyen` (classic: a signature per batch item, one event per item) and `adyen_platform`.
//! - `generic`: a configurable HMAC shape for providers without a module of their own, and
//!   `generic_template`, its `signed_content` template.
//! - `signing`: keyed MACs (`Keyed` for the schemes that sign a timestamp), timestamps and
//!   made-up IDs for `sign`; `signatures`: the signatures of a request, decoded; `params`:
//!   `key=value` signature headers (Stripe, Paddle); `secrets`: every secret encoding; `extract`:
//!   JSON pointers; `splice`: byte-preserving JSON edits for `sign_body`.
//! - `tests` (test builds only): the tests that span more than one file, in one place. `fixtures`
//!   replays tests/fixtures/*.json, made with the providers' own SDKs by `scripts/gen-fixtures`;
//!   `property` is the fuzzing of this boundary, as property tests seeded from those fixtures;
//!   `adyen`, `generic`, `generic_template` and `registry` are those modules' longer test sets;
//!   `support` holds the helpers that every provider's own unit tests use.

mod adyen;
mod adyen_platform;
mod extract;
mod generic;
mod generic_template;
mod github;
mod gitlab;
mod linear;
mod paddle;
mod params;
mod registry;
mod secrets;
mod shopify;
mod signatures;
mod signing;
mod slack;
mod splice;
mod square;
mod standard;
mod stripe;
#[cfg(test)]
mod tests;

use bytes::Bytes;
use http::HeaderMap;

pub use crate::signing::StandardSigner;
pub use registry::{
    body_dedup, build, default_dedup_ttl, lookup, names, BodyDedup, ProviderSpec, REGISTRY,
};
pub use secrets::decode_secrets;

pub use crate::event::{validate_event_id, VerifiedEvent, VerifyError, MAX_EVENT_ID_LEN};

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

/// Returns a header's value as text, or the error that names it.
pub(crate) fn header<'a>(
    headers: &'a HeaderMap,
    name: &'static str,
) -> Result<&'a str, VerifyError> {
    let value = headers.get(name).ok_or(VerifyError::MissingHeader(name))?;
    value.to_str().map_err(|_| VerifyError::GarbledHeader(name))
}
