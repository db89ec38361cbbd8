//! Slack (signing secret, `v0`): HMAC-SHA256 over `"v0:<timestamp>:<raw body>"`, hex.
//!
//! Headers: `X-Slack-Signature: v0=<hex>` and `X-Slack-Request-Timestamp` (unix seconds), checked
//! within the tolerance (default 5 minutes, as Slack's SDKs do) on both sides.
//!
//! Events API only: the event ID is the JSON `event_id`, which Slack keeps when it retries
//! (immediately, after 1 minute and after 5 minutes). The type is the inner `event.type`
//! (`app_mention`) when present, else the envelope's `type`. Slash commands and interactivity
//! payloads carry no stable ID and are malformed here. Slack's `url_verification` request is a
//! signed handshake: it is answered with `{"challenge":"…"}` and nothing is forwarded.

use std::borrow::Cow;
use std::time::Duration;

use bytes::Bytes;
use serde::Deserialize;

use crate::config::{ConfigError, SourceSettings};

use super::secrets;
use super::signatures::{Candidates, Encoding};
use super::signing::{parse_unix, Keyed};
use super::{
    header, json_object, Named, Provider, RawRequest, SignOptions, Verified, VerifiedEvent,
    VerifyError,
};

static SIGNATURE_HEADER: Named = Named::new("x-slack-signature");
static TIMESTAMP_HEADER: Named = Named::new("x-slack-request-timestamp");
const DEFAULT_TOLERANCE: Duration = Duration::from_secs(5 * 60);

pub struct Slack {
    keyed: Keyed,
}

impl Slack {
    pub fn from_settings(source: &str, settings: &SourceSettings) -> Result<Self, ConfigError> {
        let keyed = Keyed::from_settings(source, settings, secrets::raw, DEFAULT_TOLERANCE)?;
        Ok(Self { keyed })
    }
}

#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(borrow, rename = "type", default)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    event_id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    challenge: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    event: Option<Inner<'a>>,
}

#[derive(Deserialize)]
struct Inner<'a> {
    #[serde(borrow, rename = "type", default)]
    kind: Option<Cow<'a, str>>,
}

impl Provider for Slack {
    fn name(&self) -> &'static str {
        "slack"
    }

    fn verify(&self, request: &RawRequest<'_>) -> Result<Verified, VerifyError> {
        let value = header(request.headers, &SIGNATURE_HEADER)?;
        let timestamp = header(request.headers, &TIMESTAMP_HEADER)?;
        let unix =
            parse_unix(timestamp).ok_or(VerifyError::GarbledHeader(TIMESTAMP_HEADER.text))?;
        let hex = value
            .strip_prefix("v0=")
            .ok_or(VerifyError::GarbledHeader(SIGNATURE_HEADER.text))?;
        let signatures = Candidates::single(Encoding::Hex, hex, 32, SIGNATURE_HEADER.text)?;
        let message: [&[u8]; 4] = [b"v0:", timestamp.as_bytes(), b":", request.body];
        let digest =
            self.keyed
                .verify_digesting(&message, &[request.body], &signatures, unix, request)?;

        let envelope: Envelope<'_> = json_object(request.body).ok_or(VerifyError::Malformed(
            "body is not a Slack Events API payload (JSON object)",
        ))?;
        if envelope.kind.as_deref() == Some("url_verification") {
            let challenge = envelope.challenge.ok_or(VerifyError::Malformed(
                "url_verification without a challenge",
            ))?;
            let answer = serde_json::json!({ "challenge": challenge }).to_string();
            return Ok(Verified::Handshake(Bytes::from(answer)));
        }
        let id = envelope
            .event_id
            .ok_or(VerifyError::Malformed("Slack payload without event_id"))?;
        let kind = envelope
            .event
            .and_then(|event| event.kind)
            .or(envelope.kind)
            .unwrap_or_default();
        let event =
            VerifiedEvent::new(id, kind, request.body.clone())?.with_payload_digest(&digest);
        Ok(Verified::Events(vec![event]))
    }

    fn sign(&self, body: &[u8], options: &SignOptions) -> Vec<(String, String)> {
        let timestamp = options.now_unix.to_string();
        let mac = self.keyed.sign(&[b"v0:", timestamp.as_bytes(), b":", body]);
        vec![
            (
                "X-Slack-Signature".to_owned(),
                format!("v0={}", hex::encode(mac)),
            ),
            ("X-Slack-Request-Timestamp".to_owned(), timestamp),
            ("Content-Type".to_owned(), "application/json".to_owned()),
            (
                "User-Agent".to_owned(),
                "Slackbot 1.0 (+https://api.slack.com/robots)".to_owned(),
            ),
        ]
    }
}

#[cfg(test)]
mod tests {
    use http::HeaderMap;
    use serde_json::json;

    use super::super::tests::support::{
        config_error, events, headers, one, settings, signed, verify,
    };
    use super::*;

    // slackapi/python-slack-sdk tests/slack_sdk/signature/test_signature_verifier.py (a slash
    // command, so it verifies but is not an Events API payload).
    const SECRET: &str = "8f742231b10e8888abcd99yyyzzz85a5";
    const TS: i64 = 1_531_420_618;
    const SIGNATURE: &str = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503";
    const FORM_BODY: &str = "token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";

    fn slack(secrets: &[&str]) -> Slack {
        Slack::from_settings("sl", &settings("slack", secrets, json!({}))).unwrap()
    }

    fn request(signature: &str, ts: &str) -> HeaderMap {
        headers(&[
            ("X-Slack-Signature", signature.as_bytes()),
            ("X-Slack-Request-Timestamp", ts.as_bytes()),
        ])
    }

    fn sign_and_check(body: &str) -> Result<Verified, VerifyError> {
        let provider = slack(&[SECRET]);
        let sent = provider.sign(
            body.as_bytes(),
            &SignOptions {
                now_unix: TS,
                ..SignOptions::default()
            },
        );
        verify(&provider, &signed(&sent), body.as_bytes(), TS)
    }

    #[test]
    fn the_sdk_vector_passes_the_signature_check() {
        let map = request(SIGNATURE, &TS.to_string());
        // Signature and timestamp are fine; a slash command simply has no event_id.
        let result = verify(&slack(&[SECRET]), &map, FORM_BODY.as_bytes(), TS);
        assert!(
            matches!(result, Err(VerifyError::Malformed(_))),
            "{result:?}"
        );
        let tampered = format!("{FORM_BODY}------");
        let result = verify(&slack(&[SECRET]), &map, tampered.as_bytes(), TS);
        assert_eq!(result, Err(VerifyError::BadSignature));
        let result = verify(
            &slack(&["other", SECRET]),
            &map,
            FORM_BODY.as_bytes(),
            TS + 300,
        );
        assert!(matches!(result, Err(VerifyError::Malformed(_))));
        let result = verify(&slack(&[SECRET]), &map, FORM_BODY.as_bytes(), TS + 301);
        assert_eq!(result, Err(VerifyError::StaleTimestamp));
        let result = verify(&slack(&[SECRET]), &map, FORM_BODY.as_bytes(), TS - 301);
        assert_eq!(result, Err(VerifyError::StaleTimestamp));
    }

    #[test]
    fn events_carry_their_id_and_inner_type() {
        let body = r#"{"token":"x","team_id":"T1","type":"event_callback","event_id":"Ev08MFMKH6","event_time":1531420618,"event":{"type":"app_mention","text":"héllo"}}"#;
        assert_eq!(
            events(sign_and_check(body)),
            one("Ev08MFMKH6", "app_mention")
        );
        let body = r#"{"type":"app_rate_limited","event_id":"Ev1"}"#;
        assert_eq!(events(sign_and_check(body)), one("Ev1", "app_rate_limited"));
        let body = format!(
            r#"{{"type":"event_callback","event_id":"{}"}}"#,
            "E".repeat(256)
        );
        assert!(matches!(
            sign_and_check(&body),
            Err(VerifyError::Malformed(_))
        ));
    }

    #[test]
    fn url_verification_is_a_handshake() {
        let body = r#"{"token":"Jhj5dZrVaK7ZwHHjRyZWjbDl","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P","type":"url_verification"}"#;
        let expected = r#"{"challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"}"#;
        assert_eq!(
            sign_and_check(body),
            Ok(Verified::Handshake(Bytes::from(expected)))
        );
        let missing = r#"{"type":"url_verification"}"#;
        assert!(matches!(
            sign_and_check(missing),
            Err(VerifyError::Malformed(_))
        ));
    }

    #[test]
    fn missing_and_garbled_headers_are_named() {
        let provider = slack(&[SECRET]);
        let only_ts = headers(&[("X-Slack-Request-Timestamp", b"1531420618")]);
        assert_eq!(
            verify(&provider, &only_ts, b"{}", TS),
            Err(VerifyError::MissingHeader("x-slack-signature"))
        );
        let only_sig = headers(&[("X-Slack-Signature", SIGNATURE.as_bytes())]);
        assert_eq!(
            verify(&provider, &only_sig, b"{}", TS),
            Err(VerifyError::MissingHeader("x-slack-request-timestamp"))
        );
        assert_eq!(
            verify(&provider, &request(SIGNATURE, "now"), b"{}", TS),
            Err(VerifyError::GarbledHeader("x-slack-request-timestamp"))
        );
        assert_eq!(
            verify(
                &provider,
                &request(&SIGNATURE[3..], "1531420618"),
                b"{}",
                TS
            ),
            Err(VerifyError::GarbledHeader("x-slack-signature"))
        );
        let error = config_error(super::super::build(
            "sl",
            &settings("slack", &[SECRET], json!({ "id_pointer": "/event_id" })),
        ));
        assert!(error.starts_with("sources.sl.id_pointer:"), "{error}");
    }
}
