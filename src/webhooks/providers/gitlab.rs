//! GitLab: `X-Gitlab-Token` carries the configured secret token itself; there is no HMAC.
//!
//! The token is compared in constant time and independently of its length: both the configured
//! tokens and the received one are reduced to HMAC-SHA256 tags under a fixed key, and the tags are
//! compared with `verify_slice`. GitLab signs nothing, so the body is authenticated only by TLS and
//! the token's secrecy.
//!
//! Event ID: the `Idempotency-Key` header, which GitLab keeps across the retries of one event. Not
//! `X-Gitlab-Webhook-UUID` or `X-Gitlab-Event-UUID`: the former is new on every attempt and would
//! let every retry through. Type: `X-Gitlab-Event` (`Push Hook`, `Merge Request Hook`, …).

use hmac::Mac;

use crate::config::{ConfigError, SourceSettings};

use super::secrets;
use super::signing::{random_uuid, tag, HmacSha256};
use super::{
    header_or_empty, id_from_header, Named, Provider, RawRequest, SignOptions, Verified,
    VerifiedEvent, VerifyError,
};

static TOKEN_HEADER: Named = Named::new("x-gitlab-token");
static IDEMPOTENCY_HEADER: Named = Named::new("idempotency-key");
static EVENT_HEADER: Named = Named::new("x-gitlab-event");

/// Key of the tags tokens are compared through; it needs no secrecy, only to be fixed.
const COMPARISON_KEY: &[u8] = b"hookonce gitlab token comparison";

pub struct GitLab {
    comparison: HmacSha256,
    /// Tags of the configured tokens under `COMPARISON_KEY`.
    token_tags: Vec<Vec<u8>>,
    /// The first token, which `sign` sends as GitLab would.
    first_token: String,
}

impl GitLab {
    pub fn from_settings(source: &str, settings: &SourceSettings) -> Result<Self, ConfigError> {
        let tokens = secrets::decode(source, settings, secrets::raw)?;
        let comparison = <HmacSha256 as Mac>::new_from_slice(COMPARISON_KEY).map_err(|e| {
            ConfigError::invalid(format!("sources.{source}.secrets"), e.to_string())
        })?;
        let token_tags = tokens
            .iter()
            .map(|token| tag(&comparison, &[token]))
            .collect();
        Ok(Self {
            comparison,
            token_tags,
            first_token: settings
                .all_secrets()
                .next()
                .map(|token| token.expose().to_owned())
                .unwrap_or_default(),
        })
    }
}

impl Provider for GitLab {
    fn name(&self) -> &'static str {
        "gitlab"
    }

    fn verify(&self, request: &RawRequest<'_>) -> Result<Verified, VerifyError> {
        let token = request
            .headers
            .get(TOKEN_HEADER.name())
            .ok_or(VerifyError::MissingHeader(TOKEN_HEADER.text))?;
        let mut mac = self.comparison.clone();
        mac.update(token.as_bytes());
        let matched = self
            .token_tags
            .iter()
            .any(|expected| mac.clone().verify_slice(expected).is_ok());
        if !matched {
            return Err(VerifyError::BadSignature);
        }
        let id = id_from_header(
            request.headers,
            IDEMPOTENCY_HEADER.name(),
            "missing Idempotency-Key header",
        )?;
        let kind = header_or_empty(request.headers, EVENT_HEADER.name());
        let event = VerifiedEvent::new(id, kind, request.body.clone())?;
        Ok(Verified::Events(vec![event]))
    }

    fn sign(&self, _body: &[u8], options: &SignOptions) -> Vec<(String, String)> {
        let kind = options
            .event_type
            .clone()
            .unwrap_or_else(|| "Push Hook".to_owned());
        let id = options.event_id.clone().unwrap_or_else(random_uuid);
        vec![
            ("X-Gitlab-Token".to_owned(), self.first_token.clone()),
            ("X-Gitlab-Event".to_owned(), kind),
            ("X-Gitlab-Event-UUID".to_owned(), random_uuid()),
            ("X-Gitlab-Webhook-UUID".to_owned(), random_uuid()),
            ("Idempotency-Key".to_owned(), id),
            (
                "X-Gitlab-Instance".to_owned(),
                "https://gitlab.com".to_owned(),
            ),
            ("User-Agent".to_owned(), "GitLab/17.6.0".to_owned()),
            ("Content-Type".to_owned(), "application/json".to_owned()),
        ]
    }
}

#[cfg(test)]
mod tests {
    use http::HeaderMap;
    use serde_json::json;

    use super::super::header;
    use super::super::tests::support::{
        config_error, events, headers, one, settings, signed, verify,
    };
    use super::*;

    const TOKEN: &str = "glpat-hookonce-webhook-token";
    const KEY: &str = "b4a1c0de-0000-4000-8000-00000000cafe";
    const BODY: &[u8] = br#"{"object_kind":"push","ref":"refs/heads/main"}"#;

    fn gitlab(tokens: &[&str]) -> GitLab {
        GitLab::from_settings("gl", &settings("gitlab", tokens, json!({}))).unwrap()
    }

    fn request(token: &str, uuid: &str) -> HeaderMap {
        headers(&[
            ("X-Gitlab-Token", token.as_bytes()),
            ("X-Gitlab-Event", b"Push Hook"),
            ("X-Gitlab-Webhook-UUID", uuid.as_bytes()),
            ("Idempotency-Key", KEY.as_bytes()),
        ])
    }

    #[test]
    fn the_idempotency_key_is_the_id_not_the_per_attempt_uuid() {
        let provider = gitlab(&[TOKEN]);
        let first = verify(&provider, &request(TOKEN, "attempt-1"), BODY, 0);
        let retry = verify(&provider, &request(TOKEN, "attempt-2"), BODY, 0);
        assert_eq!(events(first), one(KEY, "Push Hook"));
        assert_eq!(events(retry), one(KEY, "Push Hook"));
    }

    #[test]
    fn tokens_must_match_exactly() {
        let provider = gitlab(&[TOKEN]);
        for wrong in [
            "",
            "glpat-hookonce-webhook-toke",
            "glpat-hookonce-webhook-tokenX",
            "GLPAT-hookonce-webhook-token",
        ] {
            assert_eq!(
                verify(&provider, &request(wrong, "u"), BODY, 0),
                Err(VerifyError::BadSignature),
                "{wrong:?}"
            );
        }
        assert_eq!(
            verify(
                &provider,
                &headers(&[("Idempotency-Key", KEY.as_bytes())]),
                BODY,
                0
            ),
            Err(VerifyError::MissingHeader("x-gitlab-token"))
        );
        // Rotation: either configured token.
        assert!(verify(
            &gitlab(&["old-token", TOKEN]),
            &request(TOKEN, "u"),
            BODY,
            0
        )
        .is_ok());
    }

    #[test]
    fn authenticated_requests_need_an_idempotency_key() {
        let provider = gitlab(&[TOKEN]);
        let no_key = headers(&[("X-Gitlab-Token", TOKEN.as_bytes())]);
        assert!(matches!(
            verify(&provider, &no_key, BODY, 0),
            Err(VerifyError::Malformed(_))
        ));
        let long = "k".repeat(256);
        let long_key = headers(&[
            ("X-Gitlab-Token", TOKEN.as_bytes()),
            ("Idempotency-Key", long.as_bytes()),
        ]);
        assert!(matches!(
            verify(&provider, &long_key, BODY, 0),
            Err(VerifyError::Malformed(_))
        ));
    }

    #[test]
    fn sign_round_trips() {
        let provider = gitlab(&[TOKEN]);
        let options = SignOptions {
            event_id: Some(KEY.to_owned()),
            event_type: Some("Tag Push Hook".to_owned()),
            now_unix: 0,
        };
        let sent = signed(&provider.sign(BODY, &options));
        assert_eq!(header(&sent, &TOKEN_HEADER), Ok(TOKEN));
        assert_eq!(
            events(verify(&provider, &sent, BODY, 0)),
            one(KEY, "Tag Push Hook")
        );
        let error = config_error(super::super::build(
            "gl",
            &settings("gitlab", &[], json!({})),
        ));
        assert!(error.starts_with("sources.gl.secrets:"), "{error}");
    }
}
