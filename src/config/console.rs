//! `[console]`: the web console's listener, who may read and who may write, and its own limits.
//!
//! The keys are a public interface (docs/design.md, "Console"). A console on an address other
//! than loopback must authenticate its users: tokens, or an authenticating proxy's identity
//! header honoured only from that proxy's addresses. Its listener is checked against the others
//! by `Settings::validate_listeners`.

use std::net::SocketAddr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::values::one_or_many;
use super::{Cidr, ConfigError, HumanDuration, Secret};

/// `[console]`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ConsoleSettings {
    /// The console's own listener; no console when absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listen: Option<SocketAddr>,
    /// Tokens that may read (exchanged at `/login`, or sent as `Authorization: Bearer`).
    #[serde(
        deserialize_with = "one_or_many",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub viewer_tokens: Vec<Secret>,
    /// Tokens that may read and write.
    #[serde(
        deserialize_with = "one_or_many",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub operator_tokens: Vec<Secret>,
    /// A header naming the user, set by an authenticating proxy in front of the console.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub identity_header: Option<String>,
    /// The peers whose `identity_header` is believed: the proxy's addresses or address ranges
    /// (a proxy in a cluster moves between pod addresses), written as `server.trusted_proxies`.
    #[serde(
        deserialize_with = "one_or_many",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub trusted_proxies: Vec<Cidr>,
    /// The identities (as the header names them) that may write; every other one reads.
    #[serde(
        deserialize_with = "one_or_many",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub operators: Vec<String>,
    /// Console requests served at once; the rest are answered 503 at once, so that the console
    /// never holds what ingest needs.
    pub max_in_flight: usize,
    /// How long a login's session lasts.
    pub session_ttl: HumanDuration,
    /// Entries the audit log keeps (the oldest go first).
    pub audit_max_entries: u64,
}

impl Default for ConsoleSettings {
    fn default() -> Self {
        Self {
            listen: None,
            viewer_tokens: Vec::new(),
            operator_tokens: Vec::new(),
            identity_header: None,
            trusted_proxies: Vec::new(),
            operators: Vec::new(),
            max_in_flight: 8,
            session_ttl: HumanDuration(Duration::from_secs(8 * 3600)),
            audit_max_entries: 10_000,
        }
    }
}

impl ConsoleSettings {
    /// Whether anything authenticates the console's users (otherwise everyone on loopback is an
    /// operator).
    pub fn authenticates(&self) -> bool {
        !self.viewer_tokens.is_empty()
            || !self.operator_tokens.is_empty()
            || self.identity_header.is_some()
    }

    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if let Some(listen) = self.listen {
            if !listen.ip().is_loopback() && !self.authenticates() {
                return Err(ConfigError::invalid(
                    "console.listen",
                    format!(
                        "{listen} is not a loopback address, and neither console.viewer_tokens, \
                         console.operator_tokens nor console.identity_header is set: anyone who \
                         reaches it could replay and delete dead letters"
                    ),
                ));
            }
        }
        if let Some(header) = &self.identity_header {
            if http::HeaderName::from_bytes(header.as_bytes()).is_err() {
                return Err(ConfigError::invalid(
                    "console.identity_header",
                    format!("{header:?} is not a header name"),
                ));
            }
            if self.trusted_proxies.is_empty() {
                return Err(ConfigError::invalid(
                    "console.trusted_proxies",
                    "is empty, so console.identity_header would be believed from nobody: name \
                     the authenticating proxy's addresses",
                ));
            }
        }
        if self.max_in_flight == 0 {
            return Err(ConfigError::invalid(
                "console.max_in_flight",
                "must be at least 1",
            ));
        }
        if self.audit_max_entries == 0 {
            return Err(ConfigError::invalid(
                "console.audit_max_entries",
                "must be at least 1",
            ));
        }
        self.session_ttl.check(
            "console.session_ttl",
            Duration::from_secs(60),
            Duration::from_secs(30 * 86_400),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::super::from_toml;

    const SOURCE: &str = "[sources.demo]\nprovider = \"github\"\nsecrets = [\"s\"]\n";

    #[test]
    fn a_public_console_without_authentication_is_refused() {
        let text = format!("[console]\nlisten = \"0.0.0.0:9091\"\n{SOURCE}");
        let error = from_toml(&text).unwrap_err().to_string();
        assert!(error.starts_with("console.listen: "), "{error}");
        let text = format!(
            "[console]\nlisten = \"0.0.0.0:9091\"\nviewer_tokens = [\"v-secret-1\"]\n{SOURCE}"
        );
        let settings = from_toml(&text).unwrap();
        let shown = format!("{settings:?}{}", settings.to_redacted_toml());
        assert!(!shown.contains("v-secret-1"), "{shown}");
        from_toml(&format!("[console]\nlisten = \"127.0.0.1:9091\"\n{SOURCE}")).unwrap();
    }

    #[test]
    fn an_identity_header_needs_trusted_proxies_and_the_listener_must_not_collide() {
        let text =
            format!("[console]\nlisten = \"0.0.0.0:9091\"\nidentity_header = \"X-User\"\n{SOURCE}");
        let error = from_toml(&text).unwrap_err().to_string();
        assert!(error.starts_with("console.trusted_proxies: "), "{error}");
        let text = format!("[console]\nlisten = \"127.0.0.1:9090\"\n{SOURCE}");
        let error = from_toml(&text).unwrap_err().to_string();
        assert!(error.starts_with("console.listen: "), "{error}");
        assert!(error.contains("server.metrics_listen"), "{error}");
    }
}
