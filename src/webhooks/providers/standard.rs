//! Standard Webhooks (and Svix): HMAC-SHA256 over `"<id>.<timestamp>.<raw body>"`, base64.
//!
//! Headers are `webhook-id`, `webhook-timestamp` and `webhook-signature`; Svix sends the same three
//! as `svix-id`, `svix-timestamp` and `svix-signature`. We read the `webhook-*` set when its
//! signature header is present and the `svix-*` set otherwise, never a mix of both.
//!
//! The signature header is a space-separated list of `<version>,<base64>`; only `v1` (HMAC-SHA256)
//! is checked, others (such as the asymmetric `v1a`) are skipped. The secret is `whsec_` followed
//! by base64 (padded or not); the key is the decoded bytes. The timestamp must be within the
//! tolerance (default 5 minutes) on both sides, as the specification requires.
//!
//! The event ID is the `webhook-id` header, which the sender keeps across retries. The type is
//! the body's top-level string `type` when the body is such a JSON object, else empty: the scheme
//! signs any payload, so a body without a type is not malformed.

use std::borrow::Cow;
use std::time::Duration;

use http::HeaderMap;
use serde::Deserialize;

use crate::config::{ConfigError, SourceSettings};

use super::secrets;
use super::signatures::{base64, Candidates};
use super::signing::{parse_unix, random_id, Keyed};
use super::{
    header, json_object, Named, Provider, RawRequest, SignOptions, Verified, VerifiedEvent,
    VerifyError,
};
use crate::signing::{WEBHOOK_ID, WEBHOOK_SIGNATURE, WEBHOOK_TIMESTAMP};

const DEFAULT_TOLERANCE: Duration = Duration::from_secs(5 * 60);

/// One family of header names.
struct HeaderNames {
    id: Named,
    timestamp: Named,
    signature: Named,
}

static WEBHOOK_HEADERS: HeaderNames = HeaderNames {
    id: Named::new(WEBHOOK_ID),
    timestamp: Named::new(WEBHOOK_TIMESTAMP),
    signature: Named::new(WEBHOOK_SIGNATURE),
};

static SVIX_HEADERS: HeaderNames = HeaderNames {
    id: Named::new("svix-id"),
    timestamp: Named::new("svix-timestamp"),
    signature: Named::new("svix-signature"),
};

pub struct Standard {
    keyed: Keyed,
}

impl Standard {
    pub fn from_settings(source: &str, settings: &SourceSettings) -> Result<Self, ConfigError> {
        let keyed =
            Keyed::from_settings(source, settings, secrets::whsec_base64, DEFAULT_TOLERANCE)?;
        Ok(Self { keyed })
    }
}

/// The `type` of a Standard Webhooks payload (`{"type": "...", "timestamp": ..., "data": ...}`).
#[derive(Deserialize)]
struct Payload<'a> {
    #[serde(borrow, rename = "type", default)]
    kind: Option<Cow<'a, str>>,
}

fn header_names(headers: &HeaderMap) -> &'static HeaderNames {
    if !headers.contains_key(WEBHOOK_HEADERS.signature.name())
        && headers.contains_key(SVIX_HEADERS.signature.name())
    {
        &SVIX_HEADERS
    } else {
        &WEBHOOK_HEADERS
    }
}

impl Provider for Standard {
    fn name(&self) -> &'static str {
        "standard"
    }

    fn verify(&self, request: &RawRequest<'_>) -> Result<Verified, VerifyError> {
        let names = header_names(request.headers);
        let signature = header(request.headers, &names.signature)?;
        // The ID is signed as raw bytes; whether it is usable text is decided after the signature.
        let id = request
            .headers
            .get(names.id.name())
            .ok_or(VerifyError::MissingHeader(names.id.text))?
            .as_bytes();
        let timestamp = header(request.headers, &names.timestamp)?;
        let unix = parse_unix(timestamp).ok_or(VerifyError::GarbledHeader(names.timestamp.text))?;

        let garbled = || VerifyError::GarbledHeader(names.signature.text);
        let mut signatures = Candidates::new(32);
        for entry in signature.split(' ').filter(|entry| !entry.is_empty()) {
            let (version, value) = entry.split_once(',').ok_or_else(garbled)?;
            if version == "v1" {
                signatures.push_base64(value).map_err(|_| garbled())?;
            }
        }
        let message: [&[u8]; 5] = [id, b".", timestamp.as_bytes(), b".", request.body];
        let digest =
            self.keyed
                .verify_digesting(&message, &[request.body], &signatures, unix, request)?;

        let id =
            std::str::from_utf8(id).map_err(|_| VerifyError::Malformed("event ID is not UTF-8"))?;
        let kind = json_object::<Payload<'_>>(request.body)
            .and_then(|payload| payload.kind)
            .unwrap_or_default();
        let event =
            VerifiedEvent::new(id, kind, request.body.clone())?.with_payload_digest(&digest);
        Ok(Verified::Events(vec![event]))
    }

    fn sign(&self, body: &[u8], options: &SignOptions) -> Vec<(String, String)> {
        let id = options
            .event_id
            .clone()
            .unwrap_or_else(|| random_id("msg_", 27));
        let timestamp = options.now_unix.to_string();
        let mac = self
            .keyed
            .sign(&[id.as_bytes(), b".", timestamp.as_bytes(), b".", body]);
        vec![
            ("webhook-id".to_owned(), id),
            ("webhook-timestamp".to_owned(), timestamp),
            (
                "webhook-signature".to_owned(),
                format!("v1,{}", base64(&mac)),
            ),
            ("Content-Type".to_owned(), "application/json".to_owned()),
        ]
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::signing::{tag, HmacSha256};
    use super::super::tests::support::{
        config_error, events, headers, one, settings, signed, verify,
    };
    use super::*;
    use crate::signing::StandardSigner;

    // The specification's test vector (standard-webhooks/standard-webhooks, also in the SDKs).
    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const ID: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";
    const TS: i64 = 1_614_265_330;
    const BODY: &str = r#"{"test": 2432232314}"#;
    const SIGNATURE: &str = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";

    fn standard(secrets: &[&str]) -> Standard {
        Standard::from_settings("s", &settings("standard", secrets, json!({}))).unwrap()
    }

    fn request(prefix: &str, id: &[u8], ts: &str, signature: &str) -> HeaderMap {
        headers(&[
            (&format!("{prefix}-id"), id),
            (&format!("{prefix}-timestamp"), ts.as_bytes()),
            (&format!("{prefix}-signature"), signature.as_bytes()),
        ])
    }

    fn check(
        secrets: &[&str],
        map: &HeaderMap,
        body: &str,
        now: i64,
    ) -> Result<Verified, VerifyError> {
        verify(&standard(secrets), map, body.as_bytes(), now)
    }

    fn vector(prefix: &str) -> HeaderMap {
        request(prefix, ID.as_bytes(), &TS.to_string(), SIGNATURE)
    }

    #[test]
    fn accepts_the_specification_vector_under_both_header_names() {
        for prefix in ["webhook", "svix", "Webhook", "SVIX"] {
            let result = check(&[SECRET], &vector(prefix), BODY, TS);
            assert_eq!(events(result), one(ID, ""), "{prefix}");
        }
        // The secret may be given without its prefix.
        let bare = SECRET.trim_start_matches("whsec_");
        assert!(check(&[bare], &vector("webhook"), BODY, TS).is_ok());
    }

    #[test]
    fn rejects_tampered_body_id_and_wrong_secret() {
        assert_eq!(
            check(&[SECRET], &vector("webhook"), r#"{"test": 2432232315}"#, TS),
            Err(VerifyError::BadSignature)
        );
        let other_id = request("webhook", b"msg_other", &TS.to_string(), SIGNATURE);
        assert_eq!(
            check(&[SECRET], &other_id, BODY, TS),
            Err(VerifyError::BadSignature)
        );
        let wrong = "whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
        assert_eq!(
            check(&[wrong], &vector("webhook"), BODY, TS),
            Err(VerifyError::BadSignature)
        );
    }

    #[test]
    fn timestamps_must_be_within_tolerance_on_both_sides() {
        let map = vector("webhook");
        assert!(check(&[SECRET], &map, BODY, TS + 300).is_ok());
        assert!(check(&[SECRET], &map, BODY, TS - 300).is_ok());
        assert_eq!(
            check(&[SECRET], &map, BODY, TS + 301),
            Err(VerifyError::StaleTimestamp)
        );
        assert_eq!(
            check(&[SECRET], &map, BODY, TS - 301),
            Err(VerifyError::StaleTimestamp)
        );
        let wide = settings("standard", &[SECRET], json!({ "tolerance": "10m" }));
        let provider = Standard::from_settings("s", &wide).unwrap();
        assert!(verify(&provider, &map, BODY.as_bytes(), TS + 600).is_ok());
    }

    #[test]
    fn missing_and_garbled_headers_are_named() {
        let ts = TS.to_string();
        let missing = headers(&[
            ("webhook-id", ID.as_bytes()),
            ("webhook-timestamp", ts.as_bytes()),
        ]);
        assert_eq!(
            check(&[SECRET], &missing, BODY, TS),
            Err(VerifyError::MissingHeader("webhook-signature"))
        );
        let no_id = headers(&[
            ("svix-timestamp", ts.as_bytes()),
            ("svix-signature", SIGNATURE.as_bytes()),
        ]);
        assert_eq!(
            check(&[SECRET], &no_id, BODY, TS),
            Err(VerifyError::MissingHeader("svix-id"))
        );
        let bad_ts = request("webhook", ID.as_bytes(), "1614265330.5", SIGNATURE);
        assert_eq!(
            check(&[SECRET], &bad_ts, BODY, TS),
            Err(VerifyError::GarbledHeader("webhook-timestamp"))
        );
        for signature in [
            "v1",
            "v1,not base64!",
            "v1,AAAA",
            "g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
        ] {
            let map = request("webhook", ID.as_bytes(), &ts, signature);
            assert_eq!(
                check(&[SECRET], &map, BODY, TS),
                Err(VerifyError::GarbledHeader("webhook-signature")),
                "{signature:?}"
            );
        }
        // Well formed but only schemes we do not check.
        let v1a = request("webhook", ID.as_bytes(), &ts, "v1a,AAAA v2,BBBB");
        assert_eq!(
            check(&[SECRET], &v1a, BODY, TS),
            Err(VerifyError::BadSignature)
        );
    }

    #[test]
    fn rotation_accepts_any_secret_and_any_signature() {
        let other = "whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
        assert!(check(&[other, SECRET], &vector("webhook"), BODY, TS).is_ok());
        let several = format!("v1a,ignored v1,{} {SIGNATURE}", base64(&[1; 32]));
        let map = request("webhook", ID.as_bytes(), &TS.to_string(), &several);
        assert!(check(&[SECRET], &map, BODY, TS).is_ok());
    }

    #[test]
    fn secrets_must_decode() {
        let error = config_error(super::super::build(
            "sv",
            &settings("standard", &[SECRET, "whsec_not*base64"], json!({})),
        ));
        assert!(error.starts_with("sources.sv.secrets[1]:"), "{error}");
        let error = config_error(super::super::build(
            "sv",
            &settings("standard", &["whsec_"], json!({})),
        ));
        assert!(error.starts_with("sources.sv.secrets[0]:"), "{error}");
        // Unpadded base64 is accepted, as the SDKs do.
        let unpadded = format!("whsec_{}", base64(&[9; 20]).trim_end_matches('='));
        assert!(
            Standard::from_settings("sv", &settings("standard", &[&unpadded], json!({}))).is_ok()
        );
        let error = config_error(super::super::build(
            "sv",
            &settings("standard", &[SECRET], json!({ "id_header": "x-id" })),
        ));
        assert!(error.starts_with("sources.sv.id_header:"), "{error}");
    }

    #[test]
    fn the_relay_signer_gives_the_specification_vector_and_verifies() {
        let signer = StandardSigner::new(SECRET).unwrap();
        let sent = signer.sign(ID, TS as u64, BODY.as_bytes());
        assert_eq!(sent[2], ("webhook-signature", SIGNATURE.to_owned()));
        let sent: Vec<(String, String)> =
            sent.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
        let provider = standard(&[SECRET]);
        let body = br#"{"type":"x"}"#;
        let again = signer.sign(ID, TS as u64, body);
        let again: Vec<(String, String)> =
            again.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
        assert!(verify(&provider, &signed(&again), body, TS).is_ok());
        assert_eq!(sent[0].1, ID);
        assert!(StandardSigner::new("whsec_not*base64").is_err());
    }

    #[test]
    fn sign_then_verify_round_trips_and_reads_the_type() {
        let provider = standard(&[SECRET]);
        let body =
            br#"{"type":"invoice.paid","timestamp":"2024-01-01T00:00:00Z","data":{"n":"\u00e9"}}"#;
        let options = SignOptions {
            event_id: Some(ID.to_owned()),
            event_type: None,
            now_unix: TS,
        };
        let sent = provider.sign(body, &options);
        let result = verify(&provider, &signed(&sent), body, TS);
        assert_eq!(events(result), one(ID, "invoice.paid"));
        // The vector, signed by us, gives the specification's signature.
        let sent = provider.sign(BODY.as_bytes(), &options);
        assert!(sent.contains(&("webhook-signature".to_owned(), SIGNATURE.to_owned())));
        // Without an ID, a realistic one is made up.
        let sent = provider.sign(
            body,
            &SignOptions {
                now_unix: TS,
                ..SignOptions::default()
            },
        );
        assert!(sent[0].1.starts_with("msg_") && sent[0].1.len() == 31);
        assert!(verify(&provider, &signed(&sent), body, TS).is_ok());
    }

    fn signed_with_id(id: &[u8], body: &str) -> Result<Verified, VerifyError> {
        let provider = standard(&[SECRET]);
        let ts = TS.to_string();
        let key = secrets::whsec_base64(SECRET).unwrap();
        let mac = tag(
            &<HmacSha256 as hmac::Mac>::new_from_slice(&key).unwrap(),
            &[id, b".", ts.as_bytes(), b".", body.as_bytes()],
        );
        let map = request("webhook", id, &ts, &format!("v1,{}", base64(&mac)));
        verify(&provider, &map, body.as_bytes(), TS)
    }

    #[test]
    fn unusable_ids_are_malformed_once_signed() {
        for id in ["m".repeat(256).as_bytes(), b"msg\tx", b"msg_\xc3"] {
            assert!(matches!(
                signed_with_id(id, BODY),
                Err(VerifyError::Malformed(_))
            ));
        }
        assert_eq!(
            events(signed_with_id("m".repeat(255).as_bytes(), BODY)),
            one(&"m".repeat(255), "")
        );
    }

    #[test]
    fn type_is_empty_unless_the_body_is_an_object_with_a_string_type() {
        for body in [
            "not json",
            r#"["type"]"#,
            r#"{"type": 5}"#,
            r#"{"kind":"x"}"#,
        ] {
            assert_eq!(
                events(signed_with_id(ID.as_bytes(), body)),
                one(ID, ""),
                "{body}"
            );
        }
        let escaped = r#" {"type":"a\/b\u00e9"}"#;
        assert_eq!(
            events(signed_with_id(ID.as_bytes(), escaped)),
            one(ID, "a/bé")
        );
    }
}
