//! Paddle Billing: `Paddle-Signature: ts=<unix>;h1=<hex>[;h1=…]` over `"<ts>:<raw body>"`.
//!
//! The key is the whole secret string (`pdl_ntf_…`) as UTF-8. Several `h1` values may be sent
//! during a secret rotation; any match is enough. Unknown keys in the header are ignored so that
//! a future scheme added alongside `h1` does not break verification.
//!
//! Tolerance: Paddle's SDK allows only 5 s of drift, which rejects genuine deliveries whenever a
//! load balancer queues a request, a retry waits for a connection or the two clocks disagree by a
//! few seconds; a rejected delivery is retried and rejected again. Replays inside the window are
//! already absorbed by deduplication on `event_id`, so the window only has to be much shorter
//! than the dedup TTL. We default to 5 minutes, like Stripe and Standard Webhooks, in both
//! directions; `tolerance` overrides it.
//!
//! Event ID: JSON `event_id` (`evt_…`), kept across Paddle's retries; type: JSON `event_type`.

use std::borrow::Cow;
use std::time::Duration;

use serde::Deserialize;

use crate::config::{ConfigError, SourceSettings};

use super::params::ParamsShape;
use super::secrets;
use super::signing::Keyed;
use super::{
    json_object, Named, Provider, RawRequest, SignOptions, Verified, VerifiedEvent, VerifyError,
};

/// `Paddle-Signature: ts=<unix>;h1=<hex>[;h1=…]` over `"<ts>:<raw body>"`.
static SIGNATURE: ParamsShape = ParamsShape {
    header: Named::new("paddle-signature"),
    separator: ';',
    timestamp: "ts",
    signature: "h1",
    joiner: b":",
};
const DEFAULT_TOLERANCE: Duration = Duration::from_secs(5 * 60);

pub struct Paddle {
    keyed: Keyed,
}

impl Paddle {
    pub fn from_settings(source: &str, settings: &SourceSettings) -> Result<Self, ConfigError> {
        let keyed = Keyed::from_settings(source, settings, secrets::raw, DEFAULT_TOLERANCE)?;
        Ok(Self { keyed })
    }
}

#[derive(Deserialize)]
struct Notification<'a> {
    #[serde(borrow)]
    event_id: Cow<'a, str>,
    #[serde(borrow, default)]
    event_type: Option<Cow<'a, str>>,
}

impl Provider for Paddle {
    fn name(&self) -> &'static str {
        "paddle"
    }

    fn verify(&self, request: &RawRequest<'_>) -> Result<Verified, VerifyError> {
        let digest = SIGNATURE.verify_digesting(&self.keyed, request, &[request.body])?;
        let notification: Notification<'_> = json_object(request.body).ok_or(
            VerifyError::Malformed("body is not a Paddle notification (JSON with \"event_id\")"),
        )?;
        let event = VerifiedEvent::new(
            notification.event_id,
            notification.event_type.unwrap_or_default(),
            request.body.clone(),
        )?
        .with_payload_digest(&digest);
        Ok(Verified::Events(vec![event]))
    }

    fn sign(&self, body: &[u8], options: &SignOptions) -> Vec<(String, String)> {
        vec![
            (
                "Paddle-Signature".to_owned(),
                SIGNATURE.sign(&self.keyed, body, options.now_unix),
            ),
            ("Content-Type".to_owned(), "application/json".to_owned()),
        ]
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::signing::{tag, HmacSha256};
    use super::super::tests::support::{config_error, events, headers, one, settings, verify};
    use super::*;

    const SECRET: &str = "pdl_ntfset_01hookonce_0123456789abcdefghijklmnop";
    const T: i64 = 1_700_000_000;
    const BODY: &str = r#"{"event_id":"evt_01hv8x2acma2gz9s4mwrkp8fgm","event_type":"transaction.completed","occurred_at":"2023-11-14T22:13:20Z","data":{"id":"txn_01"}}"#;

    fn paddle(secrets: &[&str]) -> Paddle {
        Paddle::from_settings("pd", &settings("paddle", secrets, json!({}))).unwrap()
    }

    fn header_for(secret: &str, body: &str, t: i64) -> String {
        let sent = paddle(&[secret]).sign(
            body.as_bytes(),
            &SignOptions {
                now_unix: t,
                ..SignOptions::default()
            },
        );
        sent[0].1.clone()
    }

    fn check(
        secrets: &[&str],
        header: &str,
        body: &str,
        now: i64,
    ) -> Result<Verified, VerifyError> {
        let map = headers(&[("Paddle-Signature", header.as_bytes())]);
        verify(&paddle(secrets), &map, body.as_bytes(), now)
    }

    #[test]
    fn signs_the_way_paddle_documents() {
        // "ts:body" keyed with the whole secret string, as paddle_billing's PaddleSignature does.
        use hmac::Mac;
        let mac = HmacSha256::new_from_slice(SECRET.as_bytes()).unwrap();
        let expected = hex::encode(tag(&mac, &[format!("{T}:{BODY}").as_bytes()]));
        assert_eq!(header_for(SECRET, BODY, T), format!("ts={T};h1={expected}"));
        assert_eq!(
            events(check(&[SECRET], &header_for(SECRET, BODY, T), BODY, T + 1)),
            one("evt_01hv8x2acma2gz9s4mwrkp8fgm", "transaction.completed")
        );
    }

    #[test]
    fn rejects_tampering_wrong_secret_and_stale_or_future_timestamps() {
        let header = header_for(SECRET, BODY, T);
        let tampered = BODY.replace("txn_01", "txn_02");
        assert_eq!(
            check(&[SECRET], &header, &tampered, T),
            Err(VerifyError::BadSignature)
        );
        assert_eq!(
            check(&["pdl_other"], &header, BODY, T),
            Err(VerifyError::BadSignature)
        );
        assert_eq!(
            check(&[SECRET], &header, BODY, T + 301),
            Err(VerifyError::StaleTimestamp)
        );
        assert_eq!(
            check(&[SECRET], &header, BODY, T - 301),
            Err(VerifyError::StaleTimestamp)
        );
        assert!(check(&[SECRET], &header, BODY, T + 300).is_ok());
        let strict = settings("paddle", &[SECRET], json!({ "tolerance": "5s" }));
        let strict = Paddle::from_settings("pd", &strict).unwrap();
        let map = headers(&[("Paddle-Signature", header.as_bytes())]);
        assert_eq!(
            verify(&strict, &map, BODY.as_bytes(), T + 6),
            Err(VerifyError::StaleTimestamp)
        );
    }

    #[test]
    fn rotation_accepts_any_secret_and_any_h1() {
        let old = header_for("pdl_old", BODY, T);
        let new = header_for(SECRET, BODY, T);
        let both = format!("{new};h1={}", old.split("h1=").nth(1).unwrap());
        assert!(check(&["pdl_old"], &both, BODY, T).is_ok());
        assert!(check(&[SECRET, "pdl_old"], &old, BODY, T).is_ok());
    }

    #[test]
    fn missing_and_garbled_headers_are_named() {
        let none = verify(&paddle(&[SECRET]), &headers(&[]), BODY.as_bytes(), T);
        assert_eq!(none, Err(VerifyError::MissingHeader("paddle-signature")));
        let h1 = "a".repeat(64);
        for header in [
            format!("h1={h1}"),
            format!("ts=x;h1={h1}"),
            format!("ts={T};h1=zz"),
            format!("ts={T};ts={T};h1={h1}"),
            "nonsense".to_owned(),
        ] {
            assert_eq!(
                check(&[SECRET], &header, BODY, T),
                Err(VerifyError::GarbledHeader("paddle-signature")),
                "{header}"
            );
        }
        assert_eq!(
            check(&[SECRET], &format!("ts={T};h2={h1}"), BODY, T),
            Err(VerifyError::BadSignature)
        );
    }

    #[test]
    fn signed_bodies_without_an_event_id_are_malformed() {
        for body in [
            "[]",
            r#"{"event_type":"x"}"#,
            &format!(r#"{{"event_id":"{}"}}"#, "e".repeat(256)),
        ] {
            let header = header_for(SECRET, body, T);
            assert!(
                matches!(
                    check(&[SECRET], &header, body, T),
                    Err(VerifyError::Malformed(_))
                ),
                "{body}"
            );
        }
        let error = config_error(super::super::build(
            "pd",
            &settings(
                "paddle",
                &[SECRET],
                json!({ "notification_url": "https://x" }),
            ),
        ));
        assert!(error.starts_with("sources.pd.notification_url:"), "{error}");
    }
}
