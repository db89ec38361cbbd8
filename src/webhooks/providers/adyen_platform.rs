//! Adyen Balance Platform / Management webhooks: `HmacSignature` header over the raw body.
//!
//! The signature is `base64(HMAC-SHA256(hex_decode(key), raw body))` (Adyen's
//! `util.is_valid_hmac_payload`). These webhooks have no universal event ID, so the source names
//! one with `id_pointer` (a JSON pointer, e.g. `/data/id` or whatever the subscribed topic keeps
//! stable across retries); `type_pointer` defaults to `/type`, where Adyen puts the event type
//! (`balancePlatform.accountHolder.updated`). No timestamp is signed. Each request is one event.

use crate::config::{ConfigError, SourceSettings};

use super::extract::{id_at, parse_body, required, type_at, Pointer};
use super::secrets;
use super::signatures::{base64, Candidates, Encoding};
use super::signing::Sha256Keys;
use super::{
    header, Named, Provider, RawRequest, SignOptions, Verified, VerifiedEvent, VerifyError,
};

static SIGNATURE_HEADER: Named = Named::new("hmacsignature");

pub struct AdyenPlatform {
    keys: Sha256Keys,
    id_pointer: Pointer,
    type_pointer: Pointer,
}

impl AdyenPlatform {
    pub fn from_settings(source: &str, settings: &SourceSettings) -> Result<Self, ConfigError> {
        let id = required(
            source,
            settings,
            "id_pointer",
            &settings.id_pointer,
            "\"/data/id\"",
        )?;
        Ok(Self {
            keys: Sha256Keys::from_settings(source, settings, secrets::hex)?,
            id_pointer: Pointer::parse(source, "id_pointer", id)?,
            type_pointer: Pointer::optional(source, "type_pointer", &settings.type_pointer)?
                .unwrap_or_else(|| Pointer::fixed("/type")),
        })
    }
}

impl Provider for AdyenPlatform {
    fn name(&self) -> &'static str {
        "adyen_platform"
    }

    fn verify(&self, request: &RawRequest<'_>) -> Result<Verified, VerifyError> {
        let value = header(request.headers, &SIGNATURE_HEADER)?;
        let signatures =
            Candidates::single(Encoding::Base64, value.trim(), 32, SIGNATURE_HEADER.text)?;
        let digest = self
            .keys
            .matches_digesting(&[request.body], &[request.body], &signatures)
            .ok_or(VerifyError::BadSignature)?;
        let document = parse_body(request.body)?;
        let id = id_at(&self.id_pointer, &document)?;
        let kind = type_at(Some(&self.type_pointer), &document);
        let event =
            VerifiedEvent::new(id, kind, request.body.clone())?.with_payload_digest(&digest);
        Ok(Verified::Events(vec![event]))
    }

    fn sign(&self, body: &[u8], _options: &SignOptions) -> Vec<(String, String)> {
        vec![
            ("HmacSignature".to_owned(), base64(&self.keys.sign(&[body]))),
            ("Content-Type".to_owned(), "application/json".to_owned()),
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

    // Adyen/adyen-python-api-library test/UtilTest.py `test_is_valid_hmac_payload`, whitespace
    // included (the leading newline and the indentation are part of the signed bytes).
    const KEY: &str = "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056";
    const SIGNATURE: &str = "fX74xUdztFmaXAn3IusMFFUBUSkLmDQUK0tm8xL6ZTU=";
    const BODY: &str = r#"
        {
            "type": "merchant.created",
            "environment": "test",
            "createdAt": "01-01-2024",
            "data": {
                "capabilities": {
                    "sendToTransferInstrument": {
                        "requested": true,
                        "requestedLevel": "notApplicable"
                    }
                },
                "companyId": "YOUR_COMPANY_ID",
                "merchantId": "YOUR_MERCHANT_ACCOUNT",
                "status": "PreActive"
            }
        }
        "#;

    fn platform(keys: &[&str], extra: serde_json::Value) -> AdyenPlatform {
        AdyenPlatform::from_settings("bp", &settings("adyen_platform", keys, extra)).unwrap()
    }

    fn check(
        provider: &AdyenPlatform,
        signature: &str,
        body: &str,
    ) -> Result<Verified, VerifyError> {
        verify(
            provider,
            &headers(&[("HmacSignature", signature.as_bytes())]),
            body.as_bytes(),
            0,
        )
    }

    #[test]
    fn accepts_the_sdk_vector() {
        let provider = platform(&[KEY], json!({ "id_pointer": "/data/merchantId" }));
        assert_eq!(
            events(check(&provider, SIGNATURE, BODY)),
            one("YOUR_MERCHANT_ACCOUNT", "merchant.created")
        );
        let custom_type = platform(
            &[KEY],
            json!({ "id_pointer": "/data/merchantId", "type_pointer": "/environment" }),
        );
        assert_eq!(
            events(check(&custom_type, SIGNATURE, BODY)),
            one("YOUR_MERCHANT_ACCOUNT", "test")
        );
    }

    #[test]
    fn rejects_bad_signatures_and_headers() {
        let provider = platform(&[KEY], json!({ "id_pointer": "/data/merchantId" }));
        let tampered = BODY.replace("PreActive", "Active");
        assert_eq!(
            check(&provider, SIGNATURE, &tampered),
            Err(VerifyError::BadSignature)
        );
        assert_eq!(
            check(&provider, "MismatchingHmacKey=", BODY),
            Err(VerifyError::GarbledHeader("hmacsignature"))
        );
        let other = platform(&["00ff".repeat(16).as_str()], json!({ "id_pointer": "/x" }));
        assert_eq!(
            check(&other, SIGNATURE, BODY),
            Err(VerifyError::BadSignature)
        );
        assert_eq!(
            verify(&provider, &headers(&[]), BODY.as_bytes(), 0),
            Err(VerifyError::MissingHeader("hmacsignature"))
        );
        // Rotation: the old key second.
        let rotated = platform(
            &["00ff".repeat(16).as_str(), KEY],
            json!({ "id_pointer": "/data/merchantId" }),
        );
        assert!(check(&rotated, SIGNATURE, BODY).is_ok());
    }

    #[test]
    fn signed_bodies_without_a_usable_id_are_malformed() {
        let provider = platform(&[KEY], json!({ "id_pointer": "/data/id" }));
        for body in ["not json", r#"{"data":{}}"#, r#"{"data":{"id":{}}}"#] {
            let sent = provider.sign(body.as_bytes(), &SignOptions::default());
            let result = verify(&provider, &signed(&sent), body.as_bytes(), 0);
            assert!(matches!(result, Err(VerifyError::Malformed(_))), "{body}");
        }
        let body = r#"{"type":"balancePlatform.transfer.created","data":{"id":12345}}"#;
        let sent = provider.sign(body.as_bytes(), &SignOptions::default());
        assert_eq!(
            events(verify(&provider, &signed(&sent), body.as_bytes(), 0)),
            one("12345", "balancePlatform.transfer.created")
        );
    }

    #[test]
    fn id_pointer_is_required_and_checked() {
        let error = config_error(super::super::build(
            "bp",
            &settings("adyen_platform", &[KEY], json!({})),
        ));
        assert!(error.starts_with("sources.bp.id_pointer:"), "{error}");
        let error = config_error(super::super::build(
            "bp",
            &settings("adyen_platform", &[KEY], json!({ "id_pointer": "data.id" })),
        ));
        assert!(error.starts_with("sources.bp.id_pointer:"), "{error}");
        let error = config_error(super::super::build(
            "bp",
            &settings(
                "adyen_platform",
                &[KEY],
                json!({ "id_pointer": "/id", "id_header": "x" }),
            ),
        ));
        assert!(error.starts_with("sources.bp.id_header:"), "{error}");
    }
}
