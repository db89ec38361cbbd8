//! Square: `x-square-hmacsha256-signature` = base64 HMAC-SHA256 over `notification_url + raw body`.
//!
//! The public URL Square was told to call is part of the signed string, so each source needs
//! `notification_url`, written exactly as registered in Square's dashboard (scheme, host, path,
//! query; a proxy that rewrites the path does not change what Square signed). The key is the
//! subscription's signature key as UTF-8. The legacy SHA-1 `x-square-signature` is not accepted.
//! No timestamp is signed. Event ID: JSON `event_id`, kept across retries; type: JSON `type`.

use std::borrow::Cow;

use serde::Deserialize;

use crate::config::{ConfigError, SourceSettings};

use super::extract::required;
use super::secrets;
use super::signatures::{base64, Candidates, Encoding};
use super::signing::Sha256Keys;
use super::{
    header, json_object, Named, Provider, RawRequest, SignOptions, Verified, VerifiedEvent,
    VerifyError,
};

static SIGNATURE_HEADER: Named = Named::new("x-square-hmacsha256-signature");

pub struct Square {
    keys: Sha256Keys,
    notification_url: String,
}

impl Square {
    pub fn from_settings(source: &str, settings: &SourceSettings) -> Result<Self, ConfigError> {
        let url = required(
            source,
            settings,
            "notification_url",
            &settings.notification_url,
            "\"https://hooks.example.com/webhooks/square\"",
        )?;
        if !(url.starts_with("https://") || url.starts_with("http://")) || url.trim() != url {
            return Err(ConfigError::invalid(
                format!("sources.{source}.notification_url"),
                "must be the absolute http(s) URL registered with Square, without surrounding spaces",
            ));
        }
        Ok(Self {
            keys: Sha256Keys::from_settings(source, settings, secrets::raw)?,
            notification_url: url.to_owned(),
        })
    }
}

#[derive(Deserialize)]
struct Event<'a> {
    #[serde(borrow)]
    event_id: Cow<'a, str>,
    #[serde(borrow, rename = "type", default)]
    kind: Option<Cow<'a, str>>,
}

impl Provider for Square {
    fn name(&self) -> &'static str {
        "square"
    }

    fn verify(&self, request: &RawRequest<'_>) -> Result<Verified, VerifyError> {
        let value = header(request.headers, &SIGNATURE_HEADER)?;
        let signatures =
            Candidates::single(Encoding::Base64, value.trim(), 32, SIGNATURE_HEADER.text)?;
        let message: [&[u8]; 2] = [self.notification_url.as_bytes(), request.body];
        let digest = self
            .keys
            .matches_digesting(&message, &[request.body], &signatures)
            .ok_or(VerifyError::BadSignature)?;
        let event: Event<'_> = json_object(request.body).ok_or(VerifyError::Malformed(
            "body is not a Square event (JSON object with a string \"event_id\")",
        ))?;
        let event = VerifiedEvent::new(
            event.event_id,
            event.kind.unwrap_or_default(),
            request.body.clone(),
        )?
        .with_payload_digest(&digest);
        Ok(Verified::Events(vec![event]))
    }

    fn sign(&self, body: &[u8], _options: &SignOptions) -> Vec<(String, String)> {
        let mac = self.keys.sign(&[self.notification_url.as_bytes(), body]);
        vec![
            ("x-square-hmacsha256-signature".to_owned(), base64(&mac)),
            ("Content-Type".to_owned(), "application/json".to_owned()),
            ("User-Agent".to_owned(), "Square Connect v2".to_owned()),
        ]
    }
}

#[cfg(test)]
mod tests {
    use hmac::Mac;
    use serde_json::json;

    use super::super::signing::{tag, HmacSha256};
    use super::super::tests::support::{
        config_error, events, headers, one, settings, signed, verify,
    };
    use super::*;

    const KEY: &str = "Ux1Gd9dQXk7BvGhookonceSquareKey";
    const URL: &str = "https://hooks.example.com/webhooks/square?src=1";
    const BODY: &str = r#"{"merchant_id":"6SSW7HV8K2ST5","type":"payment.updated","event_id":"13b867cf-db3d-4b1c-90b6-2f32a9d78124","created_at":"2023-11-14T22:13:20Z","data":{"type":"payment","id":"KkAkhdMsgzn59SM8A89WgKwekxLZY"}}"#;

    fn square(keys: &[&str], url: &str) -> Square {
        Square::from_settings(
            "sq",
            &settings("square", keys, json!({ "notification_url": url })),
        )
        .unwrap()
    }

    fn signature(key: &str, url: &str, body: &str) -> String {
        let mac = HmacSha256::new_from_slice(key.as_bytes()).unwrap();
        base64(&tag(&mac, &[format!("{url}{body}").as_bytes()]))
    }

    fn check(provider: &Square, sig: &str, body: &str) -> Result<Verified, VerifyError> {
        let map = headers(&[("X-Square-HmacSha256-Signature", sig.as_bytes())]);
        verify(provider, &map, body.as_bytes(), 0)
    }

    #[test]
    fn the_notification_url_is_signed() {
        let sig = signature(KEY, URL, BODY);
        assert_eq!(
            events(check(&square(&[KEY], URL), &sig, BODY)),
            one("13b867cf-db3d-4b1c-90b6-2f32a9d78124", "payment.updated")
        );
        let other_url = square(&[KEY], "https://hooks.example.com/webhooks/square");
        assert_eq!(
            check(&other_url, &sig, BODY),
            Err(VerifyError::BadSignature)
        );
    }

    #[test]
    fn rejects_tampering_wrong_keys_and_bad_headers() {
        let sig = signature(KEY, URL, BODY);
        let provider = square(&[KEY], URL);
        assert_eq!(
            check(&provider, &sig, &BODY.replace("6SSW", "7SSW")),
            Err(VerifyError::BadSignature)
        );
        assert_eq!(
            check(&square(&["other"], URL), &sig, BODY),
            Err(VerifyError::BadSignature)
        );
        assert!(check(&square(&["other", KEY], URL), &sig, BODY).is_ok());
        assert_eq!(
            check(&provider, "abc", BODY),
            Err(VerifyError::GarbledHeader(SIGNATURE_HEADER.text))
        );
        assert_eq!(
            verify(&provider, &headers(&[]), BODY.as_bytes(), 0),
            Err(VerifyError::MissingHeader(SIGNATURE_HEADER.text))
        );
    }

    #[test]
    fn sign_round_trips_and_bodies_need_an_event_id() {
        let provider = square(&[KEY], URL);
        let sent = provider.sign(BODY.as_bytes(), &SignOptions::default());
        assert_eq!(sent[0].1, signature(KEY, URL, BODY));
        assert!(verify(&provider, &signed(&sent), BODY.as_bytes(), 0).is_ok());
        let body = r#"{"type":"payment.updated"}"#;
        let sent = provider.sign(body.as_bytes(), &SignOptions::default());
        let result = verify(&provider, &signed(&sent), body.as_bytes(), 0);
        assert!(matches!(result, Err(VerifyError::Malformed(_))));
    }

    #[test]
    fn notification_url_is_required_and_checked() {
        for extra in [
            json!({}),
            json!({ "notification_url": "" }),
            json!({ "notification_url": "hooks.example.com/x" }),
        ] {
            let error = config_error(super::super::build(
                "sq",
                &settings("square", &[KEY], extra),
            ));
            assert!(error.starts_with("sources.sq.notification_url:"), "{error}");
        }
    }
}
