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
//! - `stripe`, `standard` (and Svix), `github`, `shopify`, `slack`, `paddle`, `square`, `linear`,
//!   `gitlab`: one scheme each, as described in PROVIDERS.md and each module's documentation.
//! - `adyen` (classic: a signature per batch item, one event per item) and `adyen_platform`.
//! - `generic`: a configurable HMAC shape for providers without a module of their own.
//! - `signing`: keyed MACs, decoded signatures, timestamps and made-up IDs for `sign`;
//!   `extract`: JSON pointers; `secrets`: per-provider secret decoding; `splice`: byte-preserving
//!   JSON edits for `sign_body`.
//! - `fixture_tests`: replays tests/fixtures/*.json, made with the providers' own SDKs by
//!   `scripts/gen-fixtures`.

mod adyen;
mod adyen_platform;
mod extract;
#[cfg(test)]
mod fixture_tests;
mod generic;
mod github;
mod gitlab;
mod linear;
mod paddle;
mod secrets;
mod shopify;
mod signing;
mod slack;
mod splice;
mod square;
mod standard;
mod stripe;
#[cfg(test)]
mod testing;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::HeaderMap;

use crate::config::{ConfigError, SourceSettings};

pub use secrets::decode_secrets;

/// Longest event ID we accept, in bytes (DESIGN §4: IDs are used verbatim in Redis keys).
pub const MAX_EVENT_ID_LEN: usize = 255;

/// What a provider sees of one HTTP request.
#[derive(Clone, Copy)]
pub struct RawRequest<'a> {
    pub headers: &'a HeaderMap,
    pub body: &'a Bytes,
    /// Current time as unix seconds, passed in so that providers stay pure.
    pub now_unix: i64,
}

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
        if event_type.len() > MAX_EVENT_ID_LEN || event_type.chars().any(char::is_control) {
            event_type.clear();
        }
        Ok(Self {
            event_id,
            event_type,
            body,
            fingerprint_input: None,
        })
    }

    /// Fingerprints `input` instead of the body: for schemes whose retries change a field that
    /// is not part of the event (Linear stamps each attempt with a fresh `webhookTimestamp`), so
    /// that a retry is recognised as a duplicate, not rejected as a different payload.
    pub(crate) fn with_fingerprint_input(mut self, input: Vec<u8>) -> Self {
        self.fingerprint_input = Some(Bytes::from(input));
        self
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

/// The result of verifying a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verified {
    /// One or more events to deduplicate and forward (several for batching providers such as Adyen).
    Events(Vec<VerifiedEvent>),
    /// A handshake the provider expects answered directly (Slack's `url_verification`); nothing is
    /// forwarded. The bytes are the JSON response body.
    Handshake(Bytes),
}

/// Why a request was rejected. Each variant maps to one outcome of DESIGN §2.
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

/// Builds the provider for one configured source, validating its provider-specific keys.
pub fn build(source: &str, settings: &SourceSettings) -> Result<Arc<dyn Provider>, ConfigError> {
    let key = |k: &str| format!("sources.{source}.{k}");
    match settings.provider.as_str() {
        "stripe" => Ok(Arc::new(stripe::Stripe::from_settings(source, settings)?)),
        "standard" => Ok(Arc::new(standard::Standard::from_settings(
            source, settings,
        )?)),
        "github" => Ok(Arc::new(github::GitHub::from_settings(source, settings)?)),
        "adyen" => Ok(Arc::new(adyen::Adyen::from_settings(source, settings)?)),
        "adyen_platform" => Ok(Arc::new(adyen_platform::AdyenPlatform::from_settings(
            source, settings,
        )?)),
        "shopify" => Ok(Arc::new(shopify::Shopify::from_settings(source, settings)?)),
        "slack" => Ok(Arc::new(slack::Slack::from_settings(source, settings)?)),
        "paddle" => Ok(Arc::new(paddle::Paddle::from_settings(source, settings)?)),
        "square" => Ok(Arc::new(square::Square::from_settings(source, settings)?)),
        "linear" => Ok(Arc::new(linear::Linear::from_settings(source, settings)?)),
        "gitlab" => Ok(Arc::new(gitlab::GitLab::from_settings(source, settings)?)),
        "generic" => Ok(Arc::new(generic::Generic::from_settings(source, settings)?)),
        other => Err(ConfigError::invalid(
            key("provider"),
            format!(
                "unknown provider {other:?} (known: {})",
                KNOWN_PROVIDERS.join(", ")
            ),
        )),
    }
}

/// Every provider name `build` accepts.
pub const KNOWN_PROVIDERS: &[&str] = &[
    "stripe",
    "standard",
    "github",
    "adyen",
    "adyen_platform",
    "shopify",
    "slack",
    "paddle",
    "square",
    "linear",
    "gitlab",
    "generic",
];

/// Default dedup window for a provider: its retry horizon plus a margin.
///
/// A window shorter than the horizon lets a late retry through as a new event; a longer one only
/// costs Redis memory (one small record per event), so the margins are generous.
pub fn default_dedup_ttl(provider: &str) -> Duration {
    const HOUR: u64 = 3600;
    const DAY: u64 = 24 * HOUR;
    let secs = match provider {
        // Stripe retries live events for up to 3 days; one day of margin.
        "stripe" => 4 * DAY,
        // GitHub lets operators redeliver for 3 days; one day of margin.
        "github" => 4 * DAY,
        // Svix's schedule ends about 28 hours after the first attempt; the rest is margin.
        "standard" => 3 * DAY,
        // Adyen's retry queue keeps trying for up to 30 days (both webhook families).
        "adyen" | "adyen_platform" => 31 * DAY,
        // Shopify retries 8 times over 4 hours; a day covers late manual re-sends too.
        "shopify" => DAY,
        // Slack retries 3 times within about 6 minutes; an hour is ample.
        "slack" => HOUR,
        // Paddle retries for up to 3 days; Square for up to 72 hours.
        "paddle" | "square" => 4 * DAY,
        // Linear retries after 1 minute, 1 hour and 6 hours.
        "linear" => DAY,
        // GitLab keeps hook logs (and their "Resend request" button) for 2 days.
        "gitlab" => 3 * DAY,
        // Unknown schedules (generic): a week.
        _ => 7 * DAY,
    };
    Duration::from_secs(secs)
}

/// Checks that an event ID can be used verbatim as part of a Redis key.
pub fn validate_event_id(id: &str) -> Result<(), VerifyError> {
    if id.is_empty() {
        return Err(VerifyError::Malformed("event ID is empty"));
    }
    if id.len() > MAX_EVENT_ID_LEN {
        return Err(VerifyError::Malformed("event ID is longer than 255 bytes"));
    }
    if id.chars().any(char::is_control) {
        return Err(VerifyError::Malformed(
            "event ID contains control characters",
        ));
    }
    Ok(())
}

/// Keys of `[sources.NAME]` that every provider understands.
const COMMON_KEYS: &[&str] = &["provider", "secrets", "dedup_ttl", "stream"];

/// Rejects any configured provider-specific key that is not in `used`, naming it.
///
/// A key that a provider silently ignores is a misconfiguration waiting to surprise someone (a
/// `notification_url` on a Stripe source suggests the operator meant another provider), so every
/// provider's `from_settings` calls this first.
pub(crate) fn reject_unused_keys(
    source: &str,
    settings: &SourceSettings,
    used: &[&str],
) -> Result<(), ConfigError> {
    // Unset options are skipped when serializing, so the object's keys are exactly the keys that
    // were configured, and a key added to `SourceSettings` later is covered without touching this.
    let configured = serde_json::to_value(settings)
        .map_err(|e| ConfigError::invalid(format!("sources.{source}"), e.to_string()))?;
    let Some(configured) = configured.as_object() else {
        return Ok(());
    };
    for key in configured.keys() {
        if !COMMON_KEYS.contains(&key.as_str()) && !used.contains(&key.as_str()) {
            let uses = if used.is_empty() {
                "none".to_owned()
            } else {
                used.join(", ")
            };
            return Err(ConfigError::invalid(
                format!("sources.{source}.{key}"),
                format!(
                    "is not used by provider {:?} (its own keys: {uses})",
                    settings.provider
                ),
            ));
        }
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::testing::settings;
    use super::*;

    /// The smallest valid settings of each provider, with the common keys every provider takes.
    fn minimal(provider: &str) -> SourceSettings {
        let (secret, extra) = match provider {
            "adyen" => ("44782DEF547AAA06C910C43932B1EB0C", json!({})),
            "adyen_platform" => (
                "44782DEF547AAA06C910C43932B1EB0C",
                json!({ "id_pointer": "/id" }),
            ),
            "square" => (
                "key",
                json!({ "notification_url": "https://hooks.example.com/sq" }),
            ),
            "generic" => (
                "key",
                json!({ "signature_header": "X-Sig", "algorithm": "sha256", "encoding": "hex", "id_header": "X-Id" }),
            ),
            "standard" => ("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", json!({})),
            _ => ("secret", json!({})),
        };
        let mut extra = extra;
        extra["dedup_ttl"] = json!("2h");
        extra["stream"] = json!("custom:stream");
        settings(provider, &[secret], extra)
    }

    #[test]
    fn every_known_provider_builds_signs_and_has_a_dedup_window() {
        for name in KNOWN_PROVIDERS {
            let provider = build("src", &minimal(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(provider.name(), *name);
            let headers = provider.sign(b"{}", &SignOptions::default());
            assert!(headers.iter().any(|(n, _)| n == "Content-Type"), "{name}");
            assert!(
                default_dedup_ttl(name) >= Duration::from_secs(3600),
                "{name}"
            );
        }
    }

    #[test]
    fn unknown_providers_and_foreign_keys_are_named() {
        let error = build("src", &settings("stripey", &["s"], json!({})))
            .err()
            .unwrap();
        assert!(
            error.to_string().starts_with("sources.src.provider:"),
            "{error}"
        );
        for name in KNOWN_PROVIDERS {
            let mut source = minimal(name);
            // Every provider but square rejects notification_url; square rejects id_header.
            let key = if *name == "square" {
                "id_header"
            } else {
                "notification_url"
            };
            let mut value = serde_json::to_value(&source).unwrap();
            value[key] = json!("x");
            value["secrets"] = json!(source
                .secrets
                .iter()
                .map(|s| s.expose())
                .collect::<Vec<_>>());
            source = serde_json::from_value(value).unwrap();
            let error = build("src", &source)
                .err()
                .unwrap_or_else(|| panic!("{name} took {key}"));
            assert!(
                error
                    .to_string()
                    .starts_with(&format!("sources.src.{key}:")),
                "{name}: {error}"
            );
        }
    }

    #[test]
    fn event_ids_are_checked_for_length_and_control_characters() {
        assert!(validate_event_id(&"a".repeat(255)).is_ok());
        assert!(validate_event_id(&"a".repeat(256)).is_err());
        assert!(validate_event_id("").is_err());
        assert!(validate_event_id("a\u{7f}b").is_err());
        assert!(validate_event_id("évt_ü_東京").is_ok());
    }
}
