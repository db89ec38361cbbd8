//! GitHub: `X-Hub-Signature-256: sha256=<hex>`, HMAC-SHA256 of the raw body with the UTF-8 secret.
//!
//! GitHub signs no timestamp, so there is no tolerance; replays are caught by deduplication on
//! `X-GitHub-Delivery`, a GUID that GitHub keeps when a delivery is redelivered. The type is
//! `X-GitHub-Event`. The legacy SHA-1 `X-Hub-Signature` is deliberately not accepted: GitHub sends
//! the SHA-256 header alongside it whenever a secret is set, and SHA-1 only weakens the check.
//!
//! Several secrets may be configured (rotation, as octokit's `verifyWithFallback` does); GitHub
//! itself sends one signature per delivery.

use hmac::{Hmac, Mac};
use sha1::Sha1;

use crate::config::{ConfigError, SourceSettings};

use super::secrets;
use super::signatures::{Candidates, Encoding};
use super::signing::{keyed_macs, random_uuid, Sha256Keys};
use super::{
    header, header_or_empty, id_from_header, Named, Provider, RawRequest, SignOptions, Verified,
    VerifiedEvent, VerifyError,
};

static SIGNATURE_HEADER: Named = Named::new("x-hub-signature-256");
static DELIVERY_HEADER: Named = Named::new("x-github-delivery");
static EVENT_HEADER: Named = Named::new("x-github-event");

pub struct GitHub {
    keys: Sha256Keys,
    /// The first secret keyed for SHA-1, only so that `sign` sends `X-Hub-Signature` as GitHub does.
    legacy_sign_key: Hmac<Sha1>,
}

impl GitHub {
    pub fn from_settings(source: &str, settings: &SourceSettings) -> Result<Self, ConfigError> {
        let keys = Sha256Keys::from_settings(source, settings, secrets::raw)?;
        // HMAC takes keys of any length, so keying every secret for SHA-1 as well cannot fail
        // where SHA-256 succeeded; only the first is kept.
        let legacy_sign_key = keyed_macs::<Hmac<Sha1>>(source, settings, secrets::raw)?.remove(0);
        Ok(Self {
            keys,
            legacy_sign_key,
        })
    }
}

impl Provider for GitHub {
    fn name(&self) -> &'static str {
        "github"
    }

    fn verify(&self, request: &RawRequest<'_>) -> Result<Verified, VerifyError> {
        let garbled = || VerifyError::GarbledHeader(SIGNATURE_HEADER.text);
        let value = header(request.headers, &SIGNATURE_HEADER)?;
        let hex = value.strip_prefix("sha256=").ok_or_else(garbled)?;
        let signatures = Candidates::single(Encoding::Hex, hex, 32, SIGNATURE_HEADER.text)?;
        let digest = self
            .keys
            .matches_digesting(&[request.body], &[request.body], &signatures)
            .ok_or(VerifyError::BadSignature)?;

        // GitHub does not sign the delivery ID, so someone who captured a delivery could replay it
        // under a new ID; that is inherent in the scheme (TLS is what keeps deliveries from being
        // captured). GitHub always sends the header: a signed request without it is malformed.
        let id = id_from_header(
            request.headers,
            DELIVERY_HEADER.name(),
            "missing X-GitHub-Delivery header",
        )?;
        let kind = header_or_empty(request.headers, EVENT_HEADER.name());
        let event =
            VerifiedEvent::new(id, kind, request.body.clone())?.with_payload_digest(&digest);
        Ok(Verified::Events(vec![event]))
    }

    fn sign(&self, body: &[u8], options: &SignOptions) -> Vec<(String, String)> {
        let id = options.event_id.clone().unwrap_or_else(random_uuid);
        let kind = options
            .event_type
            .clone()
            .unwrap_or_else(|| "ping".to_owned());
        let sha256 = hex::encode(self.keys.sign(&[body]));
        let mut sha1 = self.legacy_sign_key.clone();
        sha1.update(body);
        let sha1 = hex::encode(sha1.finalize().into_bytes());
        vec![
            ("X-GitHub-Delivery".to_owned(), id),
            ("X-GitHub-Event".to_owned(), kind),
            ("X-Hub-Signature".to_owned(), format!("sha1={sha1}")),
            ("X-Hub-Signature-256".to_owned(), format!("sha256={sha256}")),
            (
                "User-Agent".to_owned(),
                "GitHub-Hookshot/044aadd".to_owned(),
            ),
            ("Content-Type".to_owned(), "application/json".to_owned()),
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

    // GitHub's documentation vector ("Validating webhook deliveries").
    const SECRET: &str = "It's a Secret to Everybody";
    const BODY: &str = "Hello, World!";
    const SIGNATURE: &str =
        "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";
    const DELIVERY: &str = "72d3162e-cc78-11e3-81ab-4c9367dc0958";

    fn github(secrets: &[&str]) -> GitHub {
        GitHub::from_settings("gh", &settings("github", secrets, json!({}))).unwrap()
    }

    fn request(signature: &str, delivery: &[u8]) -> HeaderMap {
        headers(&[
            ("X-Hub-Signature-256", signature.as_bytes()),
            ("X-GitHub-Delivery", delivery),
            ("X-GitHub-Event", b"issues"),
        ])
    }

    fn check(secrets: &[&str], map: &HeaderMap, body: &str) -> Result<Verified, VerifyError> {
        // Any clock will do: GitHub signs no timestamp.
        verify(&github(secrets), map, body.as_bytes(), 0)
    }

    #[test]
    fn accepts_the_documentation_vector() {
        let result = check(&[SECRET], &request(SIGNATURE, DELIVERY.as_bytes()), BODY);
        assert_eq!(events(result), one(DELIVERY, "issues"));
        // Hex digits in upper case decode to the same bytes.
        let upper = format!("sha256={}", SIGNATURE[7..].to_uppercase());
        assert!(check(&[SECRET], &request(&upper, DELIVERY.as_bytes()), BODY).is_ok());
    }

    #[test]
    fn rejects_tampered_body_and_wrong_secret() {
        let map = request(SIGNATURE, DELIVERY.as_bytes());
        assert_eq!(
            check(&[SECRET], &map, "Hello, World?"),
            Err(VerifyError::BadSignature)
        );
        assert_eq!(
            check(&["it's a secret to everybody"], &map, BODY),
            Err(VerifyError::BadSignature)
        );
    }

    #[test]
    fn missing_and_garbled_headers_are_named() {
        let only_sha1 = headers(&[
            (
                "X-Hub-Signature",
                b"sha1=0000000000000000000000000000000000000000",
            ),
            ("X-GitHub-Delivery", DELIVERY.as_bytes()),
        ]);
        assert_eq!(
            check(&[SECRET], &only_sha1, BODY),
            Err(VerifyError::MissingHeader("x-hub-signature-256"))
        );
        for signature in [
            &SIGNATURE[7..],
            "sha1=757107ea",
            "sha256=xyz",
            "SHA256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17",
        ] {
            assert_eq!(
                check(&[SECRET], &request(signature, DELIVERY.as_bytes()), BODY),
                Err(VerifyError::GarbledHeader("x-hub-signature-256")),
                "{signature}"
            );
        }
    }

    #[test]
    fn rotation_accepts_any_configured_secret() {
        let map = request(SIGNATURE, DELIVERY.as_bytes());
        assert!(check(&["new secret", SECRET], &map, BODY).is_ok());
    }

    #[test]
    fn a_signed_request_needs_a_usable_delivery_id() {
        let no_id = headers(&[("X-Hub-Signature-256", SIGNATURE.as_bytes())]);
        assert!(matches!(
            check(&[SECRET], &no_id, BODY),
            Err(VerifyError::Malformed(_))
        ));
        for id in ["d".repeat(256).as_bytes(), b"abc\tdef", b"\xff\xfe"] {
            let result = check(&[SECRET], &request(SIGNATURE, id), BODY);
            assert!(matches!(result, Err(VerifyError::Malformed(_))));
        }
        // A missing event header is an empty type, not an error.
        let no_type = headers(&[
            ("X-Hub-Signature-256", SIGNATURE.as_bytes()),
            ("X-GitHub-Delivery", DELIVERY.as_bytes()),
        ]);
        assert_eq!(events(check(&[SECRET], &no_type, BODY)), one(DELIVERY, ""));
    }

    #[test]
    fn sign_then_verify_round_trips() {
        let provider = github(&[SECRET]);
        let options = SignOptions {
            event_id: Some(DELIVERY.to_owned()),
            event_type: Some("push".to_owned()),
            now_unix: 1_700_000_000,
        };
        let sent = provider.sign(BODY.as_bytes(), &options);
        assert!(sent.contains(&("X-Hub-Signature-256".to_owned(), SIGNATURE.to_owned())));
        assert_eq!(
            events(verify(&provider, &signed(&sent), BODY.as_bytes(), 0)),
            one(DELIVERY, "push")
        );
        // Defaults: a fresh UUID and the `ping` event GitHub sends when a hook is created.
        let sent = provider.sign(b"{}", &SignOptions::default());
        let result = events(verify(&provider, &signed(&sent), b"{}", 0));
        assert_eq!(result[0].0.len(), 36);
        assert_eq!(result[0].1, "ping");
    }

    #[test]
    fn takes_no_provider_specific_keys() {
        let source = settings("github", &[SECRET], json!({ "tolerance": "5m" }));
        let error = config_error(super::super::build("gh", &source));
        assert!(error.starts_with("sources.gh.tolerance:"), "{error}");
    }
}
