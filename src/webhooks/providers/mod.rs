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
//! - `signing`: keyed MACs (`Sha256Keys` for the schemes that sign with HMAC-SHA256, `Keyed` for
//!   those that also sign a timestamp), timestamps and made-up IDs for `sign`; `sha256`: the
//!   HMAC-SHA256 whose check digests the payload in the same pass (the fingerprint, handed on
//!   with `VerifiedEvent::with_payload_digest`); `signatures`: the signatures of a request, decoded; `params`:
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
mod provider;
mod registry;
mod secrets;
mod sha256;
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

pub use crate::signing::StandardSigner;
pub(crate) use provider::{header, header_or_empty, id_from_header, json_object, Named};
pub use provider::{Ack, Provider, RawRequest, SignError, SignOptions, Verified, JSON_ACK};
pub use registry::{
    body_dedup, build, default_dedup_ttl, lookup, names, BodyDedup, ProviderSpec, REGISTRY,
};

pub use crate::event::{validate_event_id, VerifiedEvent, VerifyError, MAX_EVENT_ID_LEN};
