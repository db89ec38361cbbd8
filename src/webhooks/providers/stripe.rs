//! Stripe: `Stripe-Signature: t=<unix>,v1=<hex>[,v1=…]`, HMAC-SHA256 over `"<t>." + raw body`.
//!
//! The secret is the whole `whsec_…` string as UTF-8 (it is not base64-decoded, unlike Standard
//! Webhooks). During a secret roll Stripe sends one `v1` per live secret; any match is enough.
//! `v0` and unknown schemes are ignored, as the official SDKs do.
//!
//! Timestamp policy: the SDKs reject only timestamps older than the tolerance (300 s). We also
//! reject timestamps more than the tolerance in the *future*. Stripe signs every attempt with its
//! own clock, so a genuine delivery is never far ahead of ours unless our clock is wrong; but a
//! captured request signed with a future `t` would otherwise stay replayable until that time,
//! possibly long after its dedup record expired. A symmetric window bounds every signed request's
//! useful life to twice the tolerance.
//!
//! The event ID and type are the JSON `id` (`evt_…`) and `type` of the body, read only after the
//! signature matched: an unsigned garbage body is an invalid signature, not a malformed request.

use std::borrow::Cow;
use std::time::Duration;

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::config::{ConfigError, SourceSettings};

use super::params::ParamsShape;
use super::secrets;
use super::signing::Keyed;
use super::splice::ZeroedMember;
use super::{
    json_object, Named, Provider, RawRequest, SignOptions, Verified, VerifiedEvent, VerifyError,
};

/// `Stripe-Signature: t=<unix>,v1=<hex>[,v1=…]` over `"<t>.<raw body>"`.
static SIGNATURE: ParamsShape = ParamsShape {
    header: Named::new("stripe-signature"),
    separator: ',',
    timestamp: "t",
    signature: "v1",
    joiner: b".",
};

/// The SDKs' default tolerance.
const DEFAULT_TOLERANCE: Duration = Duration::from_secs(300);

pub struct Stripe {
    keyed: Keyed,
    /// `pending_webhooks`, which the fingerprint zeroes (see [`ZeroedMember`]).
    pending: ZeroedMember,
}

impl Stripe {
    pub fn from_settings(source: &str, settings: &SourceSettings) -> Result<Self, ConfigError> {
        let keyed = Keyed::from_settings(source, settings, secrets::raw, DEFAULT_TOLERANCE)?;
        Ok(Self {
            keyed,
            pending: ZeroedMember::new("pending_webhooks"),
        })
    }
}

/// The parts of a Stripe event we read; everything else is skipped without being stored.
#[derive(Deserialize)]
struct StripeEvent<'a> {
    #[serde(borrow)]
    id: Cow<'a, str>,
    #[serde(borrow, rename = "type", default)]
    kind: Option<Cow<'a, str>>,
    /// How many endpoints still await this event: Stripe can send a retry with a different count.
    #[serde(borrow, default)]
    pending_webhooks: Option<&'a RawValue>,
}

impl Provider for Stripe {
    fn name(&self) -> &'static str {
        "stripe"
    }

    fn verify(&self, request: &RawRequest<'_>) -> Result<Verified, VerifyError> {
        // `pending_webhooks` describes delivery progress, not the event: a retry may carry another
        // count, and must still be recognised as a duplicate rather than a different payload. So
        // the fingerprint covers the body with that count zeroed, hashed in the signature's pass.
        let guess = self.pending.guess(request.body);
        // A header with only `v0` (or future) schemes is well formed but carries nothing we accept:
        // no signature, so no match.
        let digest = SIGNATURE.verify_digesting(&self.keyed, request, &guess.parts())?;
        let event: StripeEvent<'_> = json_object(request.body).ok_or(VerifyError::Malformed(
            "body is not a Stripe event (a JSON object with a string \"id\")",
        ))?;
        let verified = VerifiedEvent::new(
            event.id,
            event.kind.unwrap_or_default(),
            request.body.clone(),
        )?;
        let verified = guess.settle(verified, event.pending_webhooks, &digest);
        Ok(Verified::Events(vec![verified]))
    }

    fn sign(&self, body: &[u8], options: &SignOptions) -> Vec<(String, String)> {
        vec![
            (
                "Stripe-Signature".to_owned(),
                SIGNATURE.sign(&self.keyed, body, options.now_unix),
            ),
            ("Content-Type".to_owned(), "application/json".to_owned()),
            (
                "User-Agent".to_owned(),
                "Stripe/1.0 (+https://stripe.com/docs/webhooks)".to_owned(),
            ),
        ]
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::tests::support::{
        config_error, events, headers, one, settings, signed, verify,
    };
    use super::*;

    // Produced by the official SDK (PyPI `stripe` 16.1.0):
    // `WebhookSignature.generate_signature_header(BODY, SECRET, timestamp=1700000000)`, and accepted
    // by its `verify_header`; the same case is in tests/fixtures/stripe.json.
    const SECRET: &str = "whsec_hookonceStripeVector0123456789";
    const BODY: &str = "{\n  \"id\": \"evt_1PxHookonceVector\",\n  \"object\": \"event\",\n  \"type\": \"payment_intent.succeeded\"\n}";
    const T: i64 = 1_700_000_000;
    const V1: &str = "0be4b6da6e9f6aee451bbf4057abd9bb640c8af46f808c0cb1fb07309b908ecb";

    fn stripe(secrets: &[&str]) -> Stripe {
        Stripe::from_settings("s", &settings("stripe", secrets, json!({}))).unwrap()
    }

    fn check(
        secrets: &[&str],
        header: &str,
        body: &str,
        now: i64,
    ) -> Result<Verified, VerifyError> {
        let map = headers(&[("Stripe-Signature", header.as_bytes())]);
        verify(&stripe(secrets), &map, body.as_bytes(), now)
    }

    fn vector_header() -> String {
        format!("t={T},v1={V1}")
    }

    #[test]
    fn accepts_the_sdk_vector() {
        let result = check(&[SECRET], &vector_header(), BODY, T + 10);
        assert_eq!(
            events(result),
            one("evt_1PxHookonceVector", "payment_intent.succeeded")
        );
    }

    #[test]
    fn rejects_tampered_body_and_wrong_secret() {
        let tampered = BODY.replace("succeeded", "failed");
        assert_eq!(
            check(&[SECRET], &vector_header(), &tampered, T),
            Err(VerifyError::BadSignature)
        );
        assert_eq!(
            check(&["whsec_other"], &vector_header(), BODY, T),
            Err(VerifyError::BadSignature)
        );
        // The timestamp is signed too: changing it breaks the signature.
        let moved = format!("t={},v1={V1}", T + 1);
        assert_eq!(
            check(&[SECRET], &moved, BODY, T),
            Err(VerifyError::BadSignature)
        );
    }

    #[test]
    fn rejects_stale_and_far_future_timestamps() {
        let header = vector_header();
        assert!(check(&[SECRET], &header, BODY, T + 300).is_ok());
        assert_eq!(
            check(&[SECRET], &header, BODY, T + 301),
            Err(VerifyError::StaleTimestamp)
        );
        assert!(check(&[SECRET], &header, BODY, T - 300).is_ok());
        assert_eq!(
            check(&[SECRET], &header, BODY, T - 301),
            Err(VerifyError::StaleTimestamp)
        );
    }

    #[test]
    fn tolerance_is_configurable() {
        let source = settings("stripe", &[SECRET], json!({ "tolerance": "1h" }));
        let provider = Stripe::from_settings("s", &source).unwrap();
        let map = headers(&[("Stripe-Signature", vector_header().as_bytes())]);
        assert!(verify(&provider, &map, BODY.as_bytes(), T + 3600).is_ok());
        assert_eq!(
            verify(&provider, &map, BODY.as_bytes(), T + 3601),
            Err(VerifyError::StaleTimestamp)
        );
    }

    #[test]
    fn missing_and_garbled_headers_are_named() {
        let none = verify(&stripe(&[SECRET]), &headers(&[]), BODY.as_bytes(), T);
        assert_eq!(none, Err(VerifyError::MissingHeader("stripe-signature")));
        let garbled = Err(VerifyError::GarbledHeader("stripe-signature"));
        for header in [
            "",
            "v1=abc",
            &format!("v1={V1}"),
            &format!("t=soon,v1={V1}"),
            &format!("t=-5,v1={V1}"),
            &format!("t={T},t={T},v1={V1}"),
            &format!("t={T},v1=xyz"),
            &format!("t={T},v1={V1},junk"),
        ] {
            assert_eq!(check(&[SECRET], header, BODY, T), garbled, "{header:?}");
        }
        // Well formed, but no scheme we accept.
        let v0_only = format!("t={T},v0={V1}");
        assert_eq!(
            check(&[SECRET], &v0_only, BODY, T),
            Err(VerifyError::BadSignature)
        );
    }

    #[test]
    fn rotation_accepts_any_secret_and_any_signature() {
        // Two secrets configured, the request signed with the second (older) one.
        assert!(check(&["whsec_new", SECRET], &vector_header(), BODY, T).is_ok());
        // One secret configured, two signatures sent (Stripe during a roll), either order.
        let other = "f".repeat(64);
        for header in [
            format!("t={T},v1={other},v1={V1},v0={other}"),
            format!("t={T}, v1={V1}, v1={other}"),
        ] {
            assert!(check(&[SECRET], &header, BODY, T).is_ok(), "{header}");
        }
    }

    #[test]
    fn sign_then_verify_round_trips() {
        let provider = stripe(&[SECRET, "whsec_old"]);
        let body = br#"{"id":"evt_round","type":"charge.refunded","data":{"object":{}}}"#;
        let options = SignOptions {
            now_unix: T,
            ..SignOptions::default()
        };
        let sent = provider.sign(body, &options);
        let header = &sent
            .iter()
            .find(|(n, _)| n == "Stripe-Signature")
            .unwrap()
            .1;
        assert!(header.starts_with(&format!("t={T},v1=")));
        assert!(sent
            .iter()
            .any(|(n, v)| n == "Content-Type" && v == "application/json"));
        let result = verify(&provider, &signed(&sent), body, T);
        assert_eq!(events(result), one("evt_round", "charge.refunded"));
        // The vector body signed by us gives the SDK's signature.
        let sent = stripe(&[SECRET]).sign(BODY.as_bytes(), &options);
        assert_eq!(sent[0].1, vector_header());
    }

    fn signed_check(body: &str) -> Result<Verified, VerifyError> {
        let provider = stripe(&[SECRET]);
        let options = SignOptions {
            now_unix: T,
            ..SignOptions::default()
        };
        let sent = provider.sign(body.as_bytes(), &options);
        verify(&provider, &signed(&sent), body.as_bytes(), T)
    }

    #[test]
    fn signed_bodies_that_are_not_events_are_malformed() {
        for body in [
            "",
            "not json",
            "[\"evt_1\",\"x\"]",
            "{\"type\":\"x\"}",
            "{\"id\":7}",
        ] {
            assert!(
                matches!(signed_check(body), Err(VerifyError::Malformed(_))),
                "{body:?}"
            );
        }
        // But an unsigned garbage body is a signature problem, checked first.
        assert_eq!(
            check(&[SECRET], &vector_header(), "not json", T),
            Err(VerifyError::BadSignature)
        );
    }

    #[test]
    fn unusable_event_ids_are_malformed() {
        let long = format!("{{\"id\":\"{}\",\"type\":\"x\"}}", "e".repeat(256));
        assert!(matches!(
            signed_check(&long),
            Err(VerifyError::Malformed(_))
        ));
        let control = r#"{"id":"evt_\u0007bell","type":"x"}"#;
        assert!(matches!(
            signed_check(control),
            Err(VerifyError::Malformed(_))
        ));
        // Exactly 255 bytes is fine; a missing type is an empty type.
        let max = format!("{{\"id\":\"{}\"}}", "e".repeat(255));
        assert_eq!(events(signed_check(&max)), one(&"e".repeat(255), ""));
    }

    #[test]
    fn configuration_problems_name_the_key() {
        let with_url = settings(
            "stripe",
            &[SECRET],
            json!({ "notification_url": "https://x" }),
        );
        let error = config_error(super::super::build("pay", &with_url));
        assert!(
            error.starts_with("sources.pay.notification_url:"),
            "{error}"
        );
        let zero = settings("stripe", &[SECRET], json!({ "tolerance": "0s" }));
        let error = config_error(super::super::build("pay", &zero));
        assert!(error.starts_with("sources.pay.tolerance:"), "{error}");
        let error = config_error(super::super::build(
            "pay",
            &settings("stripe", &[], json!({})),
        ));
        assert!(error.starts_with("sources.pay.secrets:"), "{error}");
    }
}
