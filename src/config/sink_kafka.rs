//! The Kafka sink's keys: `sink.brokers` as `host:port` addresses, the `sink.topic` template, and
//! the TLS and SASL settings, checked once here so that `check-config` refuses what the producer
//! would fail on at its first connection. No error quotes `sink.sasl_password`.

use std::path::PathBuf;

use super::{ConfigError, Secret};

/// The placeholder a topic template may use.
pub const TOPIC_FIELDS: &[&str] = &["{source}"];

/// How long past `sink.timeout` (librdkafka's `message.timeout.ms`) the sink waits for a
/// delivery report before it gives the outcome up as unknown: librdkafka times messages out on
/// its own clock, and an idempotent producer that is recovering from a timeout reports late.
pub const KAFKA_REPORT_GRACE: std::time::Duration = std::time::Duration::from_secs(3);

/// Kafka's longest topic name.
pub const KAFKA_TOPIC_MAX: usize = 249;

/// The longest source name (`names::validate_name`), which `{source}` may expand to.
const SOURCE_NAME_MAX: usize = 64;

/// The SASL mechanisms offered: librdkafka's own, without Cyrus SASL (GSSAPI is not built in).
pub const SASL_MECHANISMS: &[&str] = &["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"];

/// The Kafka sink's TLS and SASL keys, as `SinkSettings` holds them.
pub struct KafkaSecurity<'a> {
    pub tls: Option<bool>,
    pub tls_ca_file: Option<&'a PathBuf>,
    pub tls_cert_file: Option<&'a PathBuf>,
    pub tls_key_file: Option<&'a PathBuf>,
    pub sasl_mechanism: Option<&'a str>,
    pub sasl_username: Option<&'a str>,
    pub sasl_password: Option<&'a Secret>,
}

impl KafkaSecurity<'_> {
    /// Whether the brokers are reached over TLS: `sink.tls = true`, or any `sink.tls_*` file.
    pub fn uses_tls(&self) -> bool {
        self.tls.unwrap_or(false)
            || self.tls_ca_file.is_some()
            || self.tls_cert_file.is_some()
            || self.tls_key_file.is_some()
    }

    /// librdkafka's `security.protocol` for these settings.
    pub fn protocol(&self) -> &'static str {
        match (self.uses_tls(), self.sasl_mechanism.is_some()) {
            (false, false) => "plaintext",
            (true, false) => "ssl",
            (false, true) => "sasl_plaintext",
            (true, true) => "sasl_ssl",
        }
    }
}

/// One broker address: `host:port` or `[v6]:port`, with a port in 1-65535 and nothing else.
pub(super) fn check_broker(key: &str, address: &str) -> Result<(), ConfigError> {
    let invalid = |problem: &str| ConfigError::invalid(key, format!("{address:?} {problem}"));
    if address.contains("://") {
        return Err(invalid(
            "must be host:port, without a scheme (TLS is sink.tls)",
        ));
    }
    let Some((host, port)) = address.rsplit_once(':') else {
        return Err(invalid("must be host:port (the port is missing)"));
    };
    let bracketed = host.starts_with('[') && host.ends_with(']') && host.len() > 2;
    let plain = !host.is_empty()
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-' || b == b'_');
    if !(bracketed || plain) {
        return Err(invalid(
            "must be host:port, with a host name, an IPv4 address or a bracketed IPv6 address",
        ));
    }
    match port.parse::<u16>() {
        Ok(port) if port != 0 => Ok(()),
        _ => Err(invalid("has a port outside 1-65535")),
    }
}

/// A template holds literal topic characters and `{source}`, and expands to at most
/// [`KAFKA_TOPIC_MAX`] characters for any source name.
pub(super) fn check_topic(template: &str) -> Result<(), ConfigError> {
    let mut literal = template.to_owned();
    for field in TOPIC_FIELDS {
        literal = literal.replace(field, "");
    }
    if template.is_empty() {
        return Err(ConfigError::invalid("sink.topic", "must not be empty"));
    }
    if literal.contains(['{', '}']) {
        return Err(ConfigError::invalid(
            "sink.topic",
            format!(
                "may use only the placeholder {} (a brace stands alone)",
                TOPIC_FIELDS.join(" and ")
            ),
        ));
    }
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if !literal.chars().all(allowed) {
        return Err(ConfigError::invalid(
            "sink.topic",
            "may hold only letters, digits, '.', '_' and '-' besides {source} (Kafka's topic rule)",
        ));
    }
    let longest = literal.len() + SOURCE_NAME_MAX * template.matches("{source}").count();
    if longest > KAFKA_TOPIC_MAX || template == "." || template == ".." {
        return Err(ConfigError::invalid(
            "sink.topic",
            format!("can expand to {longest} characters, more than Kafka's {KAFKA_TOPIC_MAX}"),
        ));
    }
    Ok(())
}

/// The topic of one event.
pub fn expand_topic(template: &str, source: &str) -> String {
    template.replace("{source}", source)
}

/// The TLS files must exist and parse, a client certificate comes with its key, and SASL names a
/// mechanism librdkafka has, with a username and a password.
pub(super) fn check_security(security: &KafkaSecurity<'_>) -> Result<(), ConfigError> {
    if security.tls == Some(false)
        && (security.tls_ca_file.is_some()
            || security.tls_cert_file.is_some()
            || security.tls_key_file.is_some())
    {
        return Err(ConfigError::invalid(
            "sink.tls",
            "is false while a sink.tls_* file is set; remove one of them",
        ));
    }
    if let Some(path) = security.tls_ca_file {
        if super::store_tls::read_certificates("sink.tls_ca_file", path)? == 0 {
            return Err(ConfigError::invalid(
                "sink.tls_ca_file",
                format!("{} holds no PEM certificate", path.display()),
            ));
        }
    }
    super::store_tls::check_client_pair(
        "sink",
        security.tls_cert_file.map(PathBuf::as_path),
        security.tls_key_file.map(PathBuf::as_path),
    )?;
    match security.sasl_mechanism {
        None => {
            for (key, set) in [
                ("sink.sasl_username", security.sasl_username.is_some()),
                ("sink.sasl_password", security.sasl_password.is_some()),
            ] {
                if set {
                    return Err(ConfigError::invalid(
                        key,
                        "needs sink.sasl_mechanism (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)",
                    ));
                }
            }
        }
        Some(mechanism) => {
            if !SASL_MECHANISMS.contains(&mechanism) {
                return Err(ConfigError::invalid(
                    "sink.sasl_mechanism",
                    format!(
                        "{mechanism:?} is not one of {} (GSSAPI is not built in; OAUTHBEARER is not offered)",
                        SASL_MECHANISMS.join(", ")
                    ),
                ));
            }
            if security.sasl_username.is_none_or(str::is_empty) {
                return Err(ConfigError::invalid(
                    "sink.sasl_username",
                    format!("required with sink.sasl_mechanism = {mechanism:?}"),
                ));
            }
            if security.sasl_password.is_none() {
                return Err(ConfigError::invalid(
                    "sink.sasl_password",
                    format!("required with sink.sasl_mechanism = {mechanism:?}"),
                ));
            }
        }
    }
    Ok(())
}
