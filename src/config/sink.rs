//! `[sink]`: where events go, and the keys of each sink kind.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::sink_kafka::KafkaSecurity;
use super::{ByteSize, ConfigError, HumanDuration, Secret, ServiceUrl};

/// `sink.coalesce` when not configured.
pub const COALESCE_DEFAULT: bool = true;
/// Bounds and defaults of the coalescing keys (atomic mode).
pub const COALESCE_MAX_EVENTS: (u32, u32, u32) = (1, 24, 10_000);
pub const COALESCE_MAX_REQUESTS: (u32, u32, u32) = (1, 12, 10_000);
pub const COALESCE_MAX_BYTES: (u64, u64, u64) = (1024, 1 << 20, 64 << 20);
pub const COALESCE_IN_FLIGHT: (u32, u32, u32) = (1, 2, 16);
pub const MAX_COALESCE_WINDOW: std::time::Duration = std::time::Duration::from_millis(100);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SinkKind {
    RedisStream,
    Stdout,
    File,
    Nats,
    Http,
    Rabbitmq,
    Kafka,
}

impl SinkKind {
    pub fn label(self) -> &'static str {
        match self {
            SinkKind::RedisStream => "redis_stream",
            SinkKind::Stdout => "stdout",
            SinkKind::File => "file",
            SinkKind::Nats => "nats",
            SinkKind::Http => "http",
            SinkKind::Rabbitmq => "rabbitmq",
            SinkKind::Kafka => "kafka",
        }
    }

    /// The sink's own keys; any other configured key is an error.
    fn keys(self) -> &'static [&'static str] {
        match self {
            SinkKind::RedisStream => &[
                "max_len",
                "trim",
                "sample_interval",
                "coalesce",
                "coalesce_max_events",
                "coalesce_max_requests",
                "coalesce_max_bytes",
                "coalesce_window",
                "coalesce_in_flight",
            ],
            SinkKind::Stdout => &["lease"],
            SinkKind::File => &["lease", "path"],
            SinkKind::Nats => &[
                "lease",
                "nats_url",
                "subject",
                "stream",
                "duplicate_window",
                "timeout",
            ],
            SinkKind::Http => &["lease", "url", "timeout", "headers"],
            SinkKind::Rabbitmq => &["lease", "url", "exchange", "routing_key", "timeout"],
            SinkKind::Kafka => &[
                "lease",
                "brokers",
                "topic",
                "timeout",
                "tls",
                "tls_ca_file",
                "tls_cert_file",
                "tls_key_file",
                "sasl_mechanism",
                "sasl_username",
                "sasl_password",
            ],
        }
    }
}

/// How hookonce itself trims the sources' streams (`sink.trim`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SinkTrim {
    /// Never (only `max_len`, if set).
    #[default]
    None,
    /// `XTRIM MINID` to the oldest entry some consumer group still needs, at least every 10 s.
    Acknowledged,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct SinkSettings {
    pub kind: SinkKind,
    /// redis_stream: 0 = never trim; N = `XADD MAXLEN ~ N`, which can drop unread entries.
    pub max_len: u64,
    /// redis_stream: `acknowledged` trims each stream to what its consumer groups still need.
    pub trim: SinkTrim,
    /// redis_stream: how often `hookonce_stream_length` is sampled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sample_interval: Option<HumanDuration>,
    /// redis_stream: run the script calls of concurrent requests for one stream as one call.
    pub coalesce: bool,
    /// redis_stream: the most events one coalesced call carries (a larger request goes alone).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub coalesce_max_events: Option<u32>,
    /// redis_stream: the most requests one coalesced call carries.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub coalesce_max_requests: Option<u32>,
    /// redis_stream: the most bytes of bodies one coalesced call carries.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub coalesce_max_bytes: Option<ByteSize>,
    /// redis_stream: how long a call waits for more requests before it goes; 0 = not at all.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub coalesce_window: Option<HumanDuration>,
    /// redis_stream: coalesced calls of one stream in flight at once.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub coalesce_in_flight: Option<u32>,
    /// Two-phase sinks: how long a claim holds an event before another delivery may reclaim it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease: Option<HumanDuration>,
    /// file: the JSON-lines file events are appended to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<PathBuf>,
    /// nats: server URL, e.g. `nats://127.0.0.1:4222`. May carry credentials; shown redacted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nats_url: Option<ServiceUrl>,
    /// nats: subject template; `{source}` is replaced by the source name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    /// nats: the JetStream stream, created with subjects `hookonce.>` when missing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream: Option<String>,
    /// nats: duplicate window of a stream hookonce creates.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duplicate_window: Option<HumanDuration>,
    /// http: the worker endpoint events are POSTed to; rabbitmq: the broker (`amqp://` or
    /// `amqps://`, with the vhost as its path). May carry credentials (userinfo, a `?token=`);
    /// shown redacted.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "serialize_redacted"
    )]
    pub url: Option<String>,
    /// rabbitmq: the exchange messages are published to (it must exist; `""` is the default
    /// exchange, which routes by queue name).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exchange: Option<String>,
    /// rabbitmq: routing-key template; `{source}` and `{event_type}` are replaced.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub routing_key: Option<String>,
    /// kafka: the bootstrap brokers, `host:port` each.
    #[serde(
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "super::values::one_or_many"
    )]
    pub brokers: Vec<String>,
    /// kafka: topic template; `{source}` is replaced by the source name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub topic: Option<String>,
    /// kafka: TLS to the brokers (implied by any `tls_*` file).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<bool>,
    /// kafka: the CAs that sign the brokers' certificates (PEM); the system's when unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_ca_file: Option<PathBuf>,
    /// kafka: a client certificate (PEM), with `tls_key_file`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_cert_file: Option<PathBuf>,
    /// kafka: the client certificate's private key (PEM).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_key_file: Option<PathBuf>,
    /// kafka: `PLAIN`, `SCRAM-SHA-256` or `SCRAM-SHA-512`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sasl_mechanism: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sasl_username: Option<String>,
    /// kafka: a literal, `env:NAME` or `file:PATH`; shown redacted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sasl_password: Option<Secret>,
    /// nats, http, rabbitmq, kafka: how long the sink may take to acknowledge.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout: Option<HumanDuration>,
    /// http: static headers added to every POST; values may be `env:NAME` or `file:PATH`.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, Secret>,
}

impl Default for SinkSettings {
    fn default() -> Self {
        Self {
            kind: SinkKind::RedisStream,
            max_len: 0,
            trim: SinkTrim::None,
            sample_interval: None,
            coalesce: COALESCE_DEFAULT,
            coalesce_max_events: None,
            coalesce_max_requests: None,
            coalesce_max_bytes: None,
            coalesce_window: None,
            coalesce_in_flight: None,
            lease: None,
            path: None,
            nats_url: None,
            subject: None,
            stream: None,
            duplicate_window: None,
            url: None,
            exchange: None,
            routing_key: None,
            brokers: Vec::new(),
            topic: None,
            tls: None,
            tls_ca_file: None,
            tls_cert_file: None,
            tls_key_file: None,
            sasl_mechanism: None,
            sasl_username: None,
            sasl_password: None,
            timeout: None,
            headers: BTreeMap::new(),
        }
    }
}

/// Serializes a URL as `redact_url` shows it, so that `check-config` never prints a credential.
fn serialize_redacted<S: serde::Serializer>(
    url: &Option<String>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match url {
        Some(url) => serializer.serialize_str(&super::redact_url(url)),
        None => serializer.serialize_none(),
    }
}

impl SinkSettings {
    pub fn lease(&self) -> std::time::Duration {
        self.lease
            .map_or(std::time::Duration::from_secs(30), |d| d.0)
    }

    pub fn timeout(&self) -> std::time::Duration {
        self.timeout
            .map_or(std::time::Duration::from_secs(5), |d| d.0)
    }

    pub fn sample_interval(&self) -> std::time::Duration {
        self.sample_interval
            .map_or(std::time::Duration::from_secs(10), |d| d.0)
    }

    pub fn coalesce_max_events(&self) -> u32 {
        self.coalesce_max_events.unwrap_or(COALESCE_MAX_EVENTS.1)
    }

    pub fn coalesce_max_requests(&self) -> u32 {
        self.coalesce_max_requests
            .unwrap_or(COALESCE_MAX_REQUESTS.1)
    }

    pub fn coalesce_max_bytes(&self) -> u64 {
        self.coalesce_max_bytes
            .map_or(COALESCE_MAX_BYTES.1, |b| b.0)
    }

    pub fn coalesce_window(&self) -> std::time::Duration {
        self.coalesce_window
            .map_or(std::time::Duration::ZERO, |d| d.0)
    }

    pub fn coalesce_in_flight(&self) -> u32 {
        self.coalesce_in_flight.unwrap_or(COALESCE_IN_FLIGHT.1)
    }

    pub fn subject(&self) -> &str {
        self.subject.as_deref().unwrap_or("hookonce.{source}")
    }

    pub fn routing_key(&self) -> &str {
        self.routing_key.as_deref().unwrap_or("{source}")
    }

    pub fn topic(&self) -> &str {
        self.topic.as_deref().unwrap_or("hookonce.{source}")
    }

    /// The Kafka sink's TLS and SASL keys.
    pub fn kafka_security(&self) -> KafkaSecurity<'_> {
        KafkaSecurity {
            tls: self.tls,
            tls_ca_file: self.tls_ca_file.as_ref(),
            tls_cert_file: self.tls_cert_file.as_ref(),
            tls_key_file: self.tls_key_file.as_ref(),
            sasl_mechanism: self.sasl_mechanism.as_deref(),
            sasl_username: self.sasl_username.as_deref(),
            sasl_password: self.sasl_password.as_ref(),
        }
    }

    pub fn nats_stream(&self) -> &str {
        self.stream.as_deref().unwrap_or("HOOKONCE")
    }

    /// Rejects keys that the selected sink does not use, and checks the ones it requires.
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        let configured = serde_json::to_value(self).unwrap_or_default();
        let used = self.kind.keys();
        if let Some(map) = configured.as_object() {
            for key in map.keys() {
                let defaulted = (key == "max_len" && self.max_len == 0)
                    || (key == "trim" && self.trim == SinkTrim::None)
                    || (key == "coalesce" && self.coalesce == COALESCE_DEFAULT);
                if key != "kind" && !defaulted && !used.contains(&key.as_str()) {
                    return Err(ConfigError::invalid(
                        format!("sink.{key}"),
                        format!(
                            "is not used by sink.kind = {:?} (its keys: {})",
                            self.kind.label(),
                            used.join(", ")
                        ),
                    ));
                }
            }
        }
        let required = match self.kind {
            SinkKind::File => self.path.is_none().then_some("path"),
            SinkKind::Nats => self.nats_url.is_none().then_some("nats_url"),
            SinkKind::Http => self.url.is_none().then_some("url"),
            SinkKind::Rabbitmq => (self.url.is_none().then_some("url"))
                .or_else(|| self.exchange.is_none().then_some("exchange")),
            SinkKind::Kafka => self.brokers.is_empty().then_some("brokers"),
            SinkKind::RedisStream | SinkKind::Stdout => None,
        };
        if let Some(key) = required {
            return Err(ConfigError::invalid(
                format!("sink.{key}"),
                format!("required when sink.kind = {:?}", self.kind.label()),
            ));
        }
        self.validate_values()
    }
}

#[cfg(test)]
#[path = "sink_tests.rs"]
mod tests;
