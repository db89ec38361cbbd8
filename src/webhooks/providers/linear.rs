//! Linear: `Linear-Signature` = hex HMAC-SHA256 of the raw body with the webhook's signing secret.
//!
//! Linear signs no timestamp header; the body's `webhookTimestamp` (unix **milliseconds**) is
//! covered by the signature and must be within the tolerance, 60 s by default as in Linear's SDK,
//! on either side. Our clock has whole-second resolution, so the check is accurate to a second.
//! So `sign_body` sets `webhookTimestamp` when the body lacks a fresh one.
//!
//! Event ID: the `Linear-Delivery` header, which Linear keeps across retries (it is not signed,
//! like GitHub's delivery ID). Type: the body's `type` (`Issue`, `Comment`, …).

use std::borrow::Cow;
use std::time::Duration;

use serde::Deserialize;

use serde_json::value::RawValue;

use crate::config::{ConfigError, SourceSettings};

use super::secrets;
use super::signatures::{Candidates, Encoding};
use super::signing::{parse_unix, random_uuid, Keyed};
use super::splice::{Edits, Members, ZeroedMember};
use super::{
    header, id_from_header, json_object, Named, Provider, RawRequest, SignError, SignOptions,
    Verified, VerifiedEvent, VerifyError,
};

static SIGNATURE_HEADER: Named = Named::new("linear-signature");
static DELIVERY_HEADER: Named = Named::new("linear-delivery");
const DEFAULT_TOLERANCE: Duration = Duration::from_secs(60);

pub struct Linear {
    keyed: Keyed,
    /// `webhookTimestamp`, which the fingerprint zeroes (see [`ZeroedMember`]).
    timestamp: ZeroedMember,
}

impl Linear {
    pub fn from_settings(source: &str, settings: &SourceSettings) -> Result<Self, ConfigError> {
        let keyed = Keyed::from_settings(source, settings, secrets::raw, DEFAULT_TOLERANCE)?;
        Ok(Self {
            keyed,
            timestamp: ZeroedMember::new("webhookTimestamp"),
        })
    }

    /// The tolerance in milliseconds, the unit of `webhookTimestamp`.
    fn tolerance_ms(&self) -> u64 {
        self.keyed.tolerance().saturating_mul(1000)
    }
}

#[derive(Deserialize)]
struct Payload<'a> {
    #[serde(borrow, rename = "webhookTimestamp")]
    timestamp: &'a RawValue,
    #[serde(borrow, rename = "type", default)]
    kind: Option<Cow<'a, str>>,
}

impl Provider for Linear {
    fn name(&self) -> &'static str {
        "linear"
    }

    fn verify(&self, request: &RawRequest<'_>) -> Result<Verified, VerifyError> {
        let value = header(request.headers, &SIGNATURE_HEADER)?;
        let signatures =
            Candidates::single(Encoding::Hex, value.trim(), 32, SIGNATURE_HEADER.text)?;
        // Every attempt carries a fresh webhookTimestamp: the fingerprint leaves it out (or a
        // retry of a forwarded event would look like a different payload), hashed in the
        // signature's pass.
        let guess = self.timestamp.guess(request.body);
        let digest = self
            .keyed
            .matches_digesting(&[request.body], &guess.parts(), &signatures)
            .ok_or(VerifyError::BadSignature)?;
        let payload: Payload<'_> = json_object(request.body).ok_or(VerifyError::Malformed(
            "body is not a Linear payload (JSON object with a numeric \"webhookTimestamp\")",
        ))?;
        let timestamp_ms = parse_unix(payload.timestamp.get()).ok_or(VerifyError::Malformed(
            "webhookTimestamp is not a whole number of milliseconds",
        ))?;
        let now_ms = request.now_unix.saturating_mul(1000);
        if now_ms.abs_diff(timestamp_ms) > self.tolerance_ms() {
            return Err(VerifyError::StaleTimestamp);
        }
        let id = id_from_header(
            request.headers,
            DELIVERY_HEADER.name(),
            "missing Linear-Delivery header",
        )?;
        let event = VerifiedEvent::new(id, payload.kind.unwrap_or_default(), request.body.clone())?;
        let event = guess.settle(event, Some(payload.timestamp), &digest);
        Ok(Verified::Events(vec![event]))
    }

    /// Signs the body as it is: it must carry a fresh `webhookTimestamp` (see `sign_body`).
    fn sign(&self, body: &[u8], options: &SignOptions) -> Vec<(String, String)> {
        let kind = options
            .event_type
            .clone()
            .unwrap_or_else(|| "Issue".to_owned());
        vec![
            (
                "Linear-Signature".to_owned(),
                hex::encode(self.keyed.sign(&[body])),
            ),
            (
                "Linear-Delivery".to_owned(),
                options.event_id.clone().unwrap_or_else(random_uuid),
            ),
            ("Linear-Event".to_owned(), kind),
            (
                "Content-Type".to_owned(),
                "application/json; charset=utf-8".to_owned(),
            ),
            ("User-Agent".to_owned(), "Linear-Webhook".to_owned()),
        ]
    }

    /// Sets `webhookTimestamp` to `options.now_unix` (in milliseconds) unless the body already
    /// carries one within the tolerance; every other byte is kept.
    fn sign_body(&self, body: &[u8], options: &SignOptions) -> Result<Option<Vec<u8>>, SignError> {
        let not_an_object = |e: &dyn std::fmt::Display| {
            SignError(format!(
                "the body is not a Linear payload (a JSON object): {e}"
            ))
        };
        let text = std::str::from_utf8(body).map_err(|e| not_an_object(&e))?;
        let object: &RawValue = serde_json::from_str(text).map_err(|e| not_an_object(&e))?;
        let now_ms = options.now_unix.saturating_mul(1000);
        let current = Members::of(object).map_err(|e| not_an_object(&e))?;
        let fresh = current
            .get("webhookTimestamp")?
            .and_then(|value| value.get().parse::<i64>().ok())
            .is_some_and(|ms| now_ms.abs_diff(ms) <= self.tolerance_ms());
        if fresh {
            return Ok(None);
        }
        let mut edits = Edits::new(text);
        edits.set(object, "webhookTimestamp", now_ms.to_string())?;
        Ok(Some(edits.apply()))
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

    const SECRET: &str = "lin_wh_hookonce0123456789abcdef";
    const NOW: i64 = 1_700_000_000;
    const DELIVERY: &str = "234d1a4e-b617-4388-90fe-adc3633d6b72";

    fn body(timestamp_ms: i64) -> String {
        format!(
            r#"{{"action":"create","type":"Issue","data":{{"id":"2174add1","title":"Zoë's bug"}},"url":"https://linear.app/x","webhookTimestamp":{timestamp_ms},"webhookId":"000042e3"}}"#
        )
    }

    fn linear(secrets: &[&str]) -> Linear {
        Linear::from_settings("lin", &settings("linear", secrets, json!({}))).unwrap()
    }

    fn request(sig: &str) -> HeaderMap {
        headers(&[
            ("Linear-Signature", sig.as_bytes()),
            ("Linear-Delivery", DELIVERY.as_bytes()),
        ])
    }

    fn sig(secret: &str, body: &str) -> String {
        use hmac::Mac;
        hex::encode(tag(
            &HmacSha256::new_from_slice(secret.as_bytes()).unwrap(),
            &[body.as_bytes()],
        ))
    }

    #[test]
    fn verifies_signature_then_the_signed_timestamp() {
        let provider = linear(&[SECRET]);
        let fresh = body(NOW * 1000 - 500);
        let result = verify(
            &provider,
            &request(&sig(SECRET, &fresh)),
            fresh.as_bytes(),
            NOW,
        );
        assert_eq!(events(result), one(DELIVERY, "Issue"));
        for ms in [(NOW - 61) * 1000, (NOW + 61) * 1000] {
            let stale = body(ms);
            let result = verify(
                &provider,
                &request(&sig(SECRET, &stale)),
                stale.as_bytes(),
                NOW,
            );
            assert_eq!(result, Err(VerifyError::StaleTimestamp));
        }
        let wide = Linear::from_settings(
            "lin",
            &settings("linear", &[SECRET], json!({ "tolerance": "2m" })),
        )
        .unwrap();
        let old = body((NOW - 100) * 1000);
        assert!(verify(&wide, &request(&sig(SECRET, &old)), old.as_bytes(), NOW).is_ok());
    }

    #[test]
    fn rejects_tampering_wrong_secret_and_bad_headers() {
        let fresh = body(NOW * 1000);
        let good = sig(SECRET, &fresh);
        let provider = linear(&[SECRET]);
        let tampered = fresh.replace("Zoë", "Eve");
        assert_eq!(
            verify(&provider, &request(&good), tampered.as_bytes(), NOW),
            Err(VerifyError::BadSignature)
        );
        assert_eq!(
            verify(&linear(&["x"]), &request(&good), fresh.as_bytes(), NOW),
            Err(VerifyError::BadSignature)
        );
        assert!(verify(
            &linear(&["x", SECRET]),
            &request(&good),
            fresh.as_bytes(),
            NOW
        )
        .is_ok());
        assert_eq!(
            verify(&provider, &request("sha256=abc"), fresh.as_bytes(), NOW),
            Err(VerifyError::GarbledHeader(SIGNATURE_HEADER.text))
        );
        assert_eq!(
            verify(&provider, &headers(&[]), fresh.as_bytes(), NOW),
            Err(VerifyError::MissingHeader(SIGNATURE_HEADER.text))
        );
    }

    #[test]
    fn signed_requests_need_a_timestamp_and_a_delivery_id() {
        let provider = linear(&[SECRET]);
        for payload in [
            r#"{"type":"Issue"}"#,
            r#"{"webhookTimestamp":"soon"}"#,
            "[]",
        ] {
            let result = verify(
                &provider,
                &request(&sig(SECRET, payload)),
                payload.as_bytes(),
                NOW,
            );
            assert!(
                matches!(result, Err(VerifyError::Malformed(_))),
                "{payload}"
            );
        }
        let fresh = body(NOW * 1000);
        let no_id = headers(&[("Linear-Signature", sig(SECRET, &fresh).as_bytes())]);
        assert!(matches!(
            verify(&provider, &no_id, fresh.as_bytes(), NOW),
            Err(VerifyError::Malformed(_))
        ));
    }

    #[test]
    fn sign_round_trips() {
        let provider = linear(&[SECRET]);
        let fresh = body(NOW * 1000);
        let options = SignOptions {
            event_id: Some(DELIVERY.to_owned()),
            event_type: None,
            now_unix: NOW,
        };
        let sent = provider.sign(fresh.as_bytes(), &options);
        assert_eq!(
            events(verify(&provider, &signed(&sent), fresh.as_bytes(), NOW)),
            one(DELIVERY, "Issue")
        );
        let error = config_error(super::super::build(
            "lin",
            &settings("linear", &[SECRET], json!({ "id_header": "x" })),
        ));
        assert!(error.starts_with("sources.lin.id_header:"), "{error}");
    }

    #[test]
    fn sign_body_sets_a_missing_or_stale_timestamp_and_keeps_a_fresh_one() {
        let provider = linear(&[SECRET]);
        let options = SignOptions {
            event_id: Some(DELIVERY.to_owned()),
            event_type: None,
            now_unix: NOW,
        };
        let fresh = body(NOW * 1000 - 30_000);
        assert_eq!(provider.sign_body(fresh.as_bytes(), &options), Ok(None));
        let stale = body((NOW - 3600) * 1000);
        let without = "{\n  \"type\": \"Comment\",\n  \"data\": {\"webhookTimestamp\": 1}\n}\n";
        for (input, expected) in [
            (stale.as_str(), body(NOW * 1000)),
            (
                without,
                format!("{{\n  \"type\": \"Comment\",\n  \"data\": {{\"webhookTimestamp\": 1}},\"webhookTimestamp\":{}\n}}\n", NOW * 1000),
            ),
        ] {
            let new_body = provider
                .sign_body(input.as_bytes(), &options)
                .unwrap()
                .expect("rewritten");
            assert_eq!(String::from_utf8(new_body.clone()).unwrap(), expected);
            let sent = provider.sign(&new_body, &options);
            assert!(verify(&provider, &signed(&sent), &new_body, NOW).is_ok());
        }
        assert!(provider.sign_body(b"[1]", &options).is_err());
        assert!(provider.sign_body(b"not json", &options).is_err());
    }
}
