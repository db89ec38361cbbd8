//! Shopify: `X-Shopify-Hmac-Sha256` = base64 HMAC-SHA256 of the raw body with the client secret.
//!
//! Shopify has two header families: classic webhooks (`X-Shopify-Hmac-Sha256`, `X-Shopify-Topic`,
//! `X-Shopify-Event-Id`, `X-Shopify-Webhook-Id`) and the newer Events deliveries
//! (`shopify-hmac-sha256`, `shopify-topic`, `shopify-event-id`, `shopify-webhook-id`). As in
//! `@shopify/shopify-api`, the newer family is used when its signature header is present.
//!
//! Event ID: `X-Shopify-Event-Id` / `shopify-event-id`, which Shopify tells receivers to dedupe
//! on. Deliveries that lack it (Events in developer preview, older API versions) fall back to the
//! webhook ID, which Shopify keeps across the retries of one delivery and documents for the same
//! purpose. Shopify sends one delivery per subscription, so the dedup scope is the source. The type
//! is the topic (`orders/create`). No timestamp is signed.

use crate::config::{ConfigError, SourceSettings};

use super::secrets;
use super::signatures::{base64, Candidates, Encoding};
use super::signing::{random_uuid, Sha256Keys};
use super::{
    header, header_or_empty, Named, Provider, RawRequest, SignOptions, Verified, VerifiedEvent,
    VerifyError,
};

struct HeaderNames {
    hmac: Named,
    event_id: Named,
    webhook_id: Named,
    topic: Named,
}

static CLASSIC: HeaderNames = HeaderNames {
    hmac: Named::new("x-shopify-hmac-sha256"),
    event_id: Named::new("x-shopify-event-id"),
    webhook_id: Named::new("x-shopify-webhook-id"),
    topic: Named::new("x-shopify-topic"),
};

static EVENTS: HeaderNames = HeaderNames {
    hmac: Named::new("shopify-hmac-sha256"),
    event_id: Named::new("shopify-event-id"),
    webhook_id: Named::new("shopify-webhook-id"),
    topic: Named::new("shopify-topic"),
};

pub struct Shopify {
    keys: Sha256Keys,
}

impl Shopify {
    pub fn from_settings(source: &str, settings: &SourceSettings) -> Result<Self, ConfigError> {
        Ok(Self {
            keys: Sha256Keys::from_settings(source, settings, secrets::raw)?,
        })
    }
}

impl Provider for Shopify {
    fn name(&self) -> &'static str {
        "shopify"
    }

    fn verify(&self, request: &RawRequest<'_>) -> Result<Verified, VerifyError> {
        let names = if request.headers.contains_key(EVENTS.hmac.name()) {
            &EVENTS
        } else {
            &CLASSIC
        };
        let value = header(request.headers, &names.hmac)?;
        let signatures = Candidates::single(Encoding::Base64, value.trim(), 32, names.hmac.text)?;
        let digest = self
            .keys
            .matches_digesting(&[request.body], &[request.body], &signatures)
            .ok_or(VerifyError::BadSignature)?;
        let id = request
            .headers
            .get(names.event_id.name())
            .or_else(|| request.headers.get(names.webhook_id.name()))
            .ok_or(VerifyError::Malformed(
                "missing X-Shopify-Event-Id (and X-Shopify-Webhook-Id) header",
            ))?;
        let id = std::str::from_utf8(id.as_bytes())
            .map_err(|_| VerifyError::Malformed("event ID header is not UTF-8"))?;
        let topic = header_or_empty(request.headers, names.topic.name());
        let event =
            VerifiedEvent::new(id, topic, request.body.clone())?.with_payload_digest(&digest);
        Ok(Verified::Events(vec![event]))
    }

    fn sign(&self, body: &[u8], options: &SignOptions) -> Vec<(String, String)> {
        let event_id = options.event_id.clone().unwrap_or_else(random_uuid);
        let topic = options
            .event_type
            .clone()
            .unwrap_or_else(|| "orders/create".to_owned());
        let triggered_at = u64::try_from(options.now_unix).unwrap_or_default();
        let triggered_at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(triggered_at);
        vec![
            ("X-Shopify-Topic".to_owned(), topic),
            (
                "X-Shopify-Hmac-Sha256".to_owned(),
                base64(&self.keys.sign(&[body])),
            ),
            (
                "X-Shopify-Shop-Domain".to_owned(),
                "hookonce-test.myshopify.com".to_owned(),
            ),
            ("X-Shopify-API-Version".to_owned(), "2025-07".to_owned()),
            ("X-Shopify-Webhook-Id".to_owned(), random_uuid()),
            ("X-Shopify-Event-Id".to_owned(), event_id),
            (
                "X-Shopify-Triggered-At".to_owned(),
                humantime::format_rfc3339(triggered_at).to_string(),
            ),
            ("Content-Type".to_owned(), "application/json".to_owned()),
        ]
    }
}

#[cfg(test)]
mod tests {
    use http::HeaderMap;
    use serde_json::json;

    use super::super::signing::{tag, HmacSha256};
    use super::super::tests::support::{
        config_error, events, headers, one, settings, signed, verify,
    };
    use super::*;

    const SECRET: &str = "shpss_hookonce0123456789abcdef";
    const BODY: &str = r#"{"id":820982911946154508,"email":"jon@example.com","note":"Grüße"}"#;
    const EVENT_ID: &str = "5e7a3c1d-8f7e-4a5b-9c3d-2e1f0a9b8c7d";

    fn shopify(secrets: &[&str]) -> Shopify {
        Shopify::from_settings("shop", &settings("shopify", secrets, json!({}))).unwrap()
    }

    fn signature(secret: &str, body: &str) -> String {
        use hmac::Mac;
        base64(&tag(
            &HmacSha256::new_from_slice(secret.as_bytes()).unwrap(),
            &[body.as_bytes()],
        ))
    }

    fn classic(sig: &str) -> HeaderMap {
        headers(&[
            ("X-Shopify-Hmac-Sha256", sig.as_bytes()),
            ("X-Shopify-Topic", b"orders/create"),
            ("X-Shopify-Event-Id", EVENT_ID.as_bytes()),
            (
                "X-Shopify-Webhook-Id",
                b"b54557e4-bdd9-4b37-8a5f-bf7d70bcd043",
            ),
        ])
    }

    #[test]
    fn verifies_classic_and_events_header_families() {
        let sig = signature(SECRET, BODY);
        let result = verify(&shopify(&[SECRET]), &classic(&sig), BODY.as_bytes(), 0);
        assert_eq!(events(result), one(EVENT_ID, "orders/create"));
        let newer = headers(&[
            ("shopify-hmac-sha256", sig.as_bytes()),
            ("shopify-topic", b"orders/updated"),
            ("shopify-webhook-id", b"wh-1"),
        ]);
        let result = verify(&shopify(&[SECRET]), &newer, BODY.as_bytes(), 0);
        assert_eq!(events(result), one("wh-1", "orders/updated"));
    }

    #[test]
    fn rejects_tampering_wrong_secrets_and_bad_headers() {
        let sig = signature(SECRET, BODY);
        let provider = shopify(&[SECRET]);
        let tampered = BODY.replace("jon", "eve");
        assert_eq!(
            verify(&provider, &classic(&sig), tampered.as_bytes(), 0),
            Err(VerifyError::BadSignature)
        );
        assert_eq!(
            verify(
                &shopify(&["shpss_other"]),
                &classic(&sig),
                BODY.as_bytes(),
                0
            ),
            Err(VerifyError::BadSignature)
        );
        assert_eq!(
            verify(&provider, &headers(&[]), BODY.as_bytes(), 0),
            Err(VerifyError::MissingHeader("x-shopify-hmac-sha256"))
        );
        let hex = hex::encode([0u8; 32]);
        assert_eq!(
            verify(&provider, &classic(&hex), BODY.as_bytes(), 0),
            Err(VerifyError::GarbledHeader("x-shopify-hmac-sha256"))
        );
        // Rotation.
        assert!(verify(
            &shopify(&["new", SECRET]),
            &classic(&sig),
            BODY.as_bytes(),
            0
        )
        .is_ok());
    }

    #[test]
    fn signed_requests_need_a_usable_id() {
        let sig = signature(SECRET, BODY);
        let no_id = headers(&[("X-Shopify-Hmac-Sha256", sig.as_bytes())]);
        let result = verify(&shopify(&[SECRET]), &no_id, BODY.as_bytes(), 0);
        assert!(matches!(result, Err(VerifyError::Malformed(_))));
        let long = "e".repeat(256);
        let long_id = headers(&[
            ("X-Shopify-Hmac-Sha256", sig.as_bytes()),
            ("X-Shopify-Event-Id", long.as_bytes()),
        ]);
        let result = verify(&shopify(&[SECRET]), &long_id, BODY.as_bytes(), 0);
        assert!(matches!(result, Err(VerifyError::Malformed(_))));
    }

    #[test]
    fn sign_then_verify_round_trips() {
        let provider = shopify(&[SECRET]);
        let options = SignOptions {
            event_id: Some(EVENT_ID.to_owned()),
            event_type: None,
            now_unix: 1_700_000_000,
        };
        let sent = provider.sign(BODY.as_bytes(), &options);
        assert!(sent.contains(&(
            "X-Shopify-Triggered-At".to_owned(),
            "2023-11-14T22:13:20Z".to_owned()
        )));
        let result = verify(&provider, &signed(&sent), BODY.as_bytes(), 0);
        assert_eq!(events(result), one(EVENT_ID, "orders/create"));
        let error = config_error(super::super::build(
            "shop",
            &settings("shopify", &[SECRET], json!({ "tolerance": "1m" })),
        ));
        assert!(error.starts_with("sources.shop.tolerance:"), "{error}");
    }
}
