//! Typed configuration: built-in defaults → TOML file → `HOOKONCE__SECTION__KEY` environment.
//!
//! Loading and validation happen once at startup; every error names the key it is about, so a
//! bad deployment fails fast with a message an operator can act on.

mod source;
mod values;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use source::SourceSettings;
pub use values::{ByteSize, HumanDuration, Secret};

/// The complete configuration of one daemon.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    #[serde(default)]
    pub server: ServerSettings,
    #[serde(default)]
    pub store: StoreSettings,
    #[serde(default)]
    pub sink: SinkSettings,
    #[serde(default)]
    pub sources: BTreeMap<String, SourceSettings>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerSettings {
    /// Webhooks, `/healthz` and `/readyz`.
    pub listen: SocketAddr,
    /// `GET /metrics`.
    pub metrics_listen: SocketAddr,
    pub body_limit: ByteSize,
    /// Upper bound on handling one request, from its headers to the response.
    pub request_timeout: HumanDuration,
    /// Upper bound on receiving a request's headers; a slow client is disconnected after it.
    pub header_read_timeout: HumanDuration,
    /// Requests handled at once; beyond it new requests get 503 + `Retry-After`.
    pub max_in_flight: usize,
    /// How long SIGTERM waits for in-flight requests before exiting.
    pub shutdown_timeout: HumanDuration,
    /// Seconds sent in `Retry-After` with 503 and 409 answers.
    pub retry_after_secs: u32,
}

impl Default for ServerSettings {
    fn default() -> Self {
        Self {
            listen: ([0, 0, 0, 0], 8080).into(),
            metrics_listen: ([0, 0, 0, 0], 9090).into(),
            body_limit: ByteSize(1 << 20),
            request_timeout: secs(10),
            header_read_timeout: secs(5),
            max_in_flight: 1024,
            shutdown_timeout: secs(20),
            retry_after_secs: 1,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StoreBackend {
    Redis,
    Memory,
}

impl StoreBackend {
    pub fn label(self) -> &'static str {
        match self {
            StoreBackend::Redis => "redis",
            StoreBackend::Memory => "memory",
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct StoreSettings {
    pub backend: StoreBackend,
    /// May carry a password; shown redacted.
    pub redis_url: ServiceUrl,
    pub key_prefix: String,
    /// Upper bound on one Redis call; past it the request answers 503.
    pub timeout: HumanDuration,
    /// Start even when Redis's `maxmemory-policy` may evict dedup records.
    pub allow_eviction: bool,
    /// Memory backend: most dedup records held at once; when full, new events get 503.
    pub memory_max_records: usize,
    /// Atomic mode: replicas that must confirm each write (`WAIT`) before the provider gets 2xx;
    /// 0 = do not wait.
    pub wait_replicas: u32,
    /// Atomic mode: how long `WAIT` may take; fewer confirmations by then answer 503.
    pub wait_timeout: HumanDuration,
}

impl Default for StoreSettings {
    fn default() -> Self {
        Self {
            backend: StoreBackend::Redis,
            redis_url: ServiceUrl("redis://127.0.0.1:6379".to_owned()),
            key_prefix: "hookonce".to_owned(),
            timeout: HumanDuration(std::time::Duration::from_millis(500)),
            allow_eviction: false,
            memory_max_records: 1_000_000,
            wait_replicas: 0,
            wait_timeout: HumanDuration(std::time::Duration::from_millis(100)),
        }
    }
}

/// A Redis or NATS URL whose password is never printed.
#[derive(Clone, Deserialize)]
#[serde(transparent)]
pub struct ServiceUrl(pub String);

impl ServiceUrl {
    /// The URL with any password replaced by `[redacted]`.
    pub fn redacted(&self) -> String {
        let url = &self.0;
        match (url.find("://"), url.rfind('@')) {
            (Some(scheme_end), Some(at)) if at > scheme_end => {
                let userinfo = &url[scheme_end + 3..at];
                let user = userinfo.split(':').next().unwrap_or("");
                let shown = if userinfo.contains(':') {
                    format!("{user}:[redacted]")
                } else {
                    "[redacted]".to_owned()
                };
                format!("{}{}{}", &url[..scheme_end + 3], shown, &url[at..])
            }
            _ => url.clone(),
        }
    }
}

impl std::fmt::Debug for ServiceUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.redacted())
    }
}

impl Serialize for ServiceUrl {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.redacted())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SinkKind {
    RedisStream,
    Stdout,
    File,
    Nats,
    Http,
}

impl SinkKind {
    pub fn label(self) -> &'static str {
        match self {
            SinkKind::RedisStream => "redis_stream",
            SinkKind::Stdout => "stdout",
            SinkKind::File => "file",
            SinkKind::Nats => "nats",
            SinkKind::Http => "http",
        }
    }

    /// The sink's own keys; any other configured key is an error.
    fn keys(self) -> &'static [&'static str] {
        match self {
            SinkKind::RedisStream => &["max_len", "sample_interval"],
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
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct SinkSettings {
    pub kind: SinkKind,
    /// redis_stream: 0 = never trim; N = `XADD MAXLEN ~ N`, which can drop unread entries.
    pub max_len: u64,
    /// redis_stream: how often `hookonce_stream_length` is sampled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sample_interval: Option<HumanDuration>,
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
    /// http: the worker endpoint events are POSTed to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// nats, http: how long the sink may take to acknowledge.
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
            sample_interval: None,
            lease: None,
            path: None,
            nats_url: None,
            subject: None,
            stream: None,
            duplicate_window: None,
            url: None,
            timeout: None,
            headers: BTreeMap::new(),
        }
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

    pub fn subject(&self) -> &str {
        self.subject.as_deref().unwrap_or("hookonce.{source}")
    }

    pub fn nats_stream(&self) -> &str {
        self.stream.as_deref().unwrap_or("HOOKONCE")
    }

    /// Rejects keys that the selected sink does not use, and checks the ones it requires.
    fn validate(&self) -> Result<(), ConfigError> {
        let configured = serde_json::to_value(self).unwrap_or_default();
        let used = self.kind.keys();
        if let Some(map) = configured.as_object() {
            for key in map.keys() {
                let defaulted = key == "max_len" && self.max_len == 0;
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
            SinkKind::RedisStream | SinkKind::Stdout => None,
        };
        if let Some(key) = required {
            return Err(ConfigError::invalid(
                format!("sink.{key}"),
                format!("required when sink.kind = {:?}", self.kind.label()),
            ));
        }
        for (key, value) in [
            ("lease", self.lease),
            ("timeout", self.timeout),
            ("sample_interval", self.sample_interval),
        ] {
            if value.is_some_and(|d| d.0.is_zero()) {
                return Err(ConfigError::invalid(
                    format!("sink.{key}"),
                    "must be above zero",
                ));
            }
        }
        if let Some(url) = &self.url {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(ConfigError::invalid(
                    "sink.url",
                    "must start with http:// or https://",
                ));
            }
        }
        if let Some(url) = &self.nats_url {
            if !(url.0.starts_with("nats://") || url.0.starts_with("tls://")) {
                return Err(ConfigError::invalid(
                    "sink.nats_url",
                    "must start with nats:// or tls://",
                ));
            }
        }
        if self.subject().is_empty() || self.subject().contains([' ', '*', '>']) {
            return Err(ConfigError::invalid(
                "sink.subject",
                "must be a literal subject (no spaces or wildcards)",
            ));
        }
        for name in self.headers.keys() {
            if axum::http::HeaderName::from_bytes(name.as_bytes()).is_err() {
                return Err(ConfigError::invalid(
                    format!("sink.headers.{name}"),
                    "is not a valid header name",
                ));
            }
        }
        Ok(())
    }
}

fn secs(n: u64) -> HumanDuration {
    HumanDuration(std::time::Duration::from_secs(n))
}

/// A configuration problem, always naming the key it concerns.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{key}: {problem}")]
    Invalid { key: String, problem: String },
    #[error("cannot read configuration file {path}: {problem}")]
    File { path: PathBuf, problem: String },
}

impl ConfigError {
    pub fn invalid(key: impl Into<String>, problem: impl Into<String>) -> Self {
        ConfigError::Invalid {
            key: key.into(),
            problem: problem.into(),
        }
    }
}

/// Loads the layered configuration: defaults, then `file` (if any), then the environment.
pub fn load(file: Option<&Path>) -> Result<Settings, ConfigError> {
    let mut builder = config::Config::builder();
    if let Some(path) = file {
        if !path.is_file() {
            return Err(ConfigError::File {
                path: path.to_owned(),
                problem: "no such file".to_owned(),
            });
        }
        builder = builder.add_source(
            config::File::from(path)
                .format(config::FileFormat::Toml)
                .required(true),
        );
    }
    finish(builder, true, file)
}

/// Loads `text` (the embedded default) in place of a file, then the environment.
pub fn load_with_base(text: &str) -> Result<Settings, ConfigError> {
    let builder = config::Config::builder()
        .add_source(config::File::from_str(text, config::FileFormat::Toml));
    finish(builder, true, None)
}

/// Loads configuration from TOML text alone, without the environment (tests).
pub fn from_toml(text: &str) -> Result<Settings, ConfigError> {
    let builder = config::Config::builder()
        .add_source(config::File::from_str(text, config::FileFormat::Toml));
    finish(builder, false, None)
}

fn finish(
    mut builder: config::ConfigBuilder<config::builder::DefaultState>,
    environment: bool,
    file: Option<&Path>,
) -> Result<Settings, ConfigError> {
    if environment {
        builder = builder.add_source(
            config::Environment::with_prefix("HOOKONCE")
                .prefix_separator("__")
                .separator("__")
                .try_parsing(true),
        );
    }
    let layered = builder.build().map_err(|e| match file {
        Some(path) => ConfigError::File {
            path: path.to_owned(),
            problem: e.to_string(),
        },
        None => ConfigError::invalid("(configuration)", e.to_string()),
    })?;
    let settings: Settings = serde_path_to_error::deserialize(layered).map_err(|e| {
        let key = e.path().to_string();
        let key = if key == "." {
            "(top level)".to_owned()
        } else {
            key
        };
        let problem = e.into_inner().to_string();
        // The config crate appends where it found the key; the key already leads the message.
        let problem = match problem.find(" for key `") {
            Some(at) => problem[..at].to_owned(),
            None => problem,
        };
        ConfigError::invalid(key, problem)
    })?;
    settings.validate()?;
    Ok(settings)
}

impl Settings {
    /// Cross-key checks that serde cannot express.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let server = &self.server;
        if server.body_limit.0 == 0 {
            return Err(ConfigError::invalid(
                "server.body_limit",
                "must be above zero",
            ));
        }
        if server.max_in_flight == 0 {
            return Err(ConfigError::invalid(
                "server.max_in_flight",
                "must be above zero",
            ));
        }
        for (key, value) in [
            ("server.request_timeout", server.request_timeout),
            ("server.header_read_timeout", server.header_read_timeout),
            ("store.timeout", self.store.timeout),
        ] {
            if value.0.is_zero() {
                return Err(ConfigError::invalid(key, "must be above zero"));
            }
        }
        if self.store.key_prefix.is_empty() || self.store.key_prefix.contains(['{', '}']) {
            return Err(ConfigError::invalid(
                "store.key_prefix",
                "must be non-empty and contain no braces (they would change the hash slot)",
            ));
        }
        if self.store.backend == StoreBackend::Memory && self.store.memory_max_records == 0 {
            return Err(ConfigError::invalid(
                "store.memory_max_records",
                "must be above zero",
            ));
        }
        if self.store.backend == StoreBackend::Redis
            && !(self.store.redis_url.0.starts_with("redis://")
                || self.store.redis_url.0.starts_with("rediss://")
                || self.store.redis_url.0.starts_with("redis+unix://")
                || self.store.redis_url.0.starts_with("unix://"))
        {
            return Err(ConfigError::invalid(
                "store.redis_url",
                "must start with redis://, rediss:// or unix://",
            ));
        }
        if self.sink.kind == SinkKind::RedisStream && self.store.backend == StoreBackend::Memory {
            return Err(ConfigError::invalid(
                "sink.kind",
                "redis_stream needs store.backend = \"redis\" (the memory store has no stream)",
            ));
        }
        let atomic = self.sink.kind == SinkKind::RedisStream;
        if self.store.wait_replicas > 0 && !atomic {
            return Err(ConfigError::invalid(
                "store.wait_replicas",
                "applies to sink.kind = \"redis_stream\" only",
            ));
        }
        self.sink.validate()?;
        if self.sources.is_empty() {
            return Err(ConfigError::invalid("sources", "no source is configured"));
        }
        for (name, source) in &self.sources {
            validate_source_name(name)?;
            if source.secrets.is_empty() {
                return Err(ConfigError::invalid(
                    format!("sources.{name}.secrets"),
                    "at least one secret is required",
                ));
            }
            if let Some(ttl) = source.dedup_ttl {
                if ttl.0.as_millis() < 1000 {
                    return Err(ConfigError::invalid(
                        format!("sources.{name}.dedup_ttl"),
                        "must be at least 1s",
                    ));
                }
            }
            crate::providers::build(name, source)?;
        }
        Ok(())
    }

    /// The effective configuration as TOML, secrets redacted.
    pub fn to_redacted_toml(&self) -> String {
        toml::to_string_pretty(self).unwrap_or_else(|e| format!("# cannot render: {e}\n"))
    }
}

/// Source names become URL path segments, metric labels and Redis hash tags.
fn validate_source_name(name: &str) -> Result<(), ConfigError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
        && name != "_unknown";
    if ok {
        Ok(())
    } else {
        Err(ConfigError::invalid(
            format!("sources.{name}"),
            "source names use 1-64 of a-z, 0-9, '_' and '-'",
        ))
    }
}
