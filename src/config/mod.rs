//! Typed configuration: built-in defaults → TOML file → `HOOKONCE__SECTION__KEY` environment.
//!
//! Loading and validation happen once at startup; every error names the key it is about, so a
//! bad deployment fails fast with a message an operator can act on. This module is a leaf: it
//! imports nothing else of the crate. Checks that need another part (a provider's own keys) are
//! that part's, run by `app::validate`.

mod access;
mod console;
mod endpoints;
mod error;
mod live;
mod names;
#[cfg(test)]
mod property_tests;
mod proxy;
mod redact;
mod relay;
mod secret_file;
mod sections;
mod sink;
mod sink_amqp;
mod sink_kafka;
mod sink_values;
mod source;
mod store_tls;
mod telemetry;
mod topology;
mod values;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use access::{Cidr, Limit, Rate, MAX_BURST};
pub use console::ConsoleSettings;
pub use endpoints::{FRAMING_HEADERS, REDIS_TLS};
pub use error::ConfigError;
pub use live::{changes, Changes, LIVE_KEYS};
use names::validate_name;
pub use proxy::ProxySettings;
pub use redact::{is_credential_name, redact_url, REDACTED};
pub use relay::{
    RelaySettings, RouteSettings, RouteStart, RESERVED_HEADERS, RESERVED_PREFIX, SIGNING_HEADERS,
};
pub use secret_file::SecretFile;
pub use sections::{ServerSettings, ServiceUrl, StoreBackend, StoreSettings, StoreTopology};
pub use sink::{SinkKind, SinkSettings, SinkTrim};
pub use sink_amqp::{expand_routing_key, parse_amqp_url, AMQP_SHORT_MAX};
pub use sink_kafka::{
    expand_topic, KafkaSecurity, KAFKA_REPORT_GRACE, KAFKA_TOPIC_MAX, SASL_MECHANISMS,
};
pub use source::{SourceSettings, NO_SECRET};
pub use telemetry::TelemetrySettings;
pub use values::{
    ByteSize, HumanDuration, Secret, ABOVE_ZERO, MAX_DEDUP_TTL, MAX_LEASE, MAX_TIMEOUT,
    MAX_TOLERANCE,
};

/// The complete configuration of one daemon.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
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
    /// Idempotency-Key proxies, each on its own listener.
    #[serde(default)]
    pub proxies: BTreeMap<String, ProxySettings>,
    /// Delivery of the streams' events to internal HTTP workers.
    #[serde(default)]
    pub relay: RelaySettings,
    /// The web console (`[console] listen`), off when absent.
    #[serde(default)]
    pub console: ConsoleSettings,
    /// Spans exported over OTLP (off without `telemetry.otlp_endpoint`).
    #[serde(default)]
    pub telemetry: TelemetrySettings,
}

/// Where a daemon's configuration comes from, kept so that a reload (`SIGHUP`) reads the same.
#[derive(Debug, Clone)]
pub enum Origin {
    /// A TOML file, then the environment.
    File(PathBuf),
    /// The embedded default configuration, then the environment.
    Embedded(&'static str),
}

impl Origin {
    /// Loads (or, on a reload, loads again) the settings and their layered tree.
    pub fn load(&self) -> Result<Loaded, ConfigError> {
        match self {
            Origin::File(path) => load_layered(Some(path)),
            Origin::Embedded(text) => {
                let builder = config::Config::builder()
                    .add_source(config::File::from_str(text, config::FileFormat::Toml));
                finish(builder, Some(environment()), None)
            }
        }
    }
}

/// Loaded settings with the layered tree they were read from: what a reload compares key by key
/// ([`changes`]), values included, without ever showing them.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub settings: Settings,
    pub tree: serde_json::Value,
}

/// Loads the layered configuration: defaults, then `file` (if any), then the environment.
pub fn load(file: Option<&Path>) -> Result<Settings, ConfigError> {
    load_layered(file).map(|loaded| loaded.settings)
}

fn load_layered(file: Option<&Path>) -> Result<Loaded, ConfigError> {
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
    finish(builder, Some(environment()), file)
}

/// Loads `text` (the embedded default) in place of a file, then the environment.
pub fn load_with_base(text: &'static str) -> Result<Settings, ConfigError> {
    Origin::Embedded(text).load().map(|loaded| loaded.settings)
}

/// Loads configuration from TOML text alone, without the environment (tests).
pub fn from_toml(text: &str) -> Result<Settings, ConfigError> {
    let builder = config::Config::builder()
        .add_source(config::File::from_str(text, config::FileFormat::Toml));
    finish(builder, None, None).map(|loaded| loaded.settings)
}

/// Loads TOML text and then `variables` in place of the process environment (tests).
#[cfg(test)]
pub(crate) fn from_toml_and_env(
    text: &str,
    variables: std::collections::HashMap<String, String>,
) -> Result<Settings, ConfigError> {
    let builder = config::Config::builder()
        .add_source(config::File::from_str(text, config::FileFormat::Toml));
    finish(builder, Some(environment().source(Some(variables))), None).map(|l| l.settings)
}

/// `HOOKONCE__SECTION__KEY` variables, values parsed as numbers or booleans where they can be.
fn environment() -> config::Environment {
    config::Environment::with_prefix("HOOKONCE")
        .prefix_separator("__")
        .separator("__")
        .try_parsing(true)
}

fn finish(
    mut builder: config::ConfigBuilder<config::builder::DefaultState>,
    environment: Option<config::Environment>,
    file: Option<&Path>,
) -> Result<Loaded, ConfigError> {
    if let Some(environment) = environment {
        builder = builder.add_source(environment);
    }
    let layered = builder.build().map_err(|e| match file {
        Some(path) => ConfigError::File {
            path: path.to_owned(),
            problem: e.to_string(),
        },
        None => ConfigError::invalid("(configuration)", e.to_string()),
    })?;
    let tree = layered
        .clone()
        .try_deserialize::<serde_json::Value>()
        .map_err(|e| ConfigError::invalid("(configuration)", e.to_string()))?;
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
    Ok(Loaded { settings, tree })
}

impl Settings {
    /// Checks that serde cannot express: each section's own, then those across sections.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.server.validate()?;
        self.store.validate()?;
        self.sink.validate()?;
        self.console.validate()?;
        self.telemetry.validate()?;
        let atomic = self.sink.kind == SinkKind::RedisStream;
        if atomic && self.store.backend == StoreBackend::Memory {
            return Err(ConfigError::invalid(
                "sink.kind",
                "redis_stream needs store.backend = \"redis\" (the memory store has no stream)",
            ));
        }
        if self.store.wait_replicas > 0 && self.store.backend == StoreBackend::Memory {
            return Err(ConfigError::invalid(
                "store.wait_replicas",
                "needs store.backend = \"redis\" (the memory store has no replicas)",
            ));
        }
        if self.sources.is_empty() && self.proxies.is_empty() {
            return Err(ConfigError::invalid(
                "sources",
                "neither sources nor proxies are configured",
            ));
        }
        for (name, source) in &self.sources {
            validate_name("sources", name)?;
            source.validate(name)?;
            // Within the source's slot, a stream named like a dedup record (`:d:`), a body
            // record (`:b:`) or an event's duplicate count (`:n:`) would be overwritten by such a
            // key (or refuse it with WRONGTYPE).
            for kind in ["d", "b", "n"] {
                let records = format!("{}:{{{name}}}:{kind}:", self.store.key_prefix);
                if source
                    .stream
                    .as_ref()
                    .is_some_and(|s| s.starts_with(&records))
                {
                    return Err(ConfigError::invalid(
                        format!("sources.{name}.stream"),
                        format!("must not start with {records:?}, where the source's records live"),
                    ));
                }
            }
        }
        self.validate_proxies()?;
        self.validate_listeners()?;
        self.validate_relay()
    }

    /// The relay reads the sources' Redis Streams through consumer groups: it needs the Redis
    /// store, streams to read (atomic mode), and routes naming configured sources.
    fn validate_relay(&self) -> Result<(), ConfigError> {
        self.relay.validate()?;
        let wanted = self.relay.enabled || !self.relay.routes.is_empty();
        let key = if self.relay.enabled {
            "relay.enabled"
        } else {
            "relay.routes"
        };
        let missing = if self.store.backend == StoreBackend::Memory {
            Some("store.backend = \"redis\"")
        } else if self.sink.kind != SinkKind::RedisStream {
            Some("sink.kind = \"redis_stream\"")
        } else {
            None
        };
        if let (true, Some(missing)) = (wanted, missing) {
            return Err(ConfigError::invalid(
                key,
                format!("the relay needs {missing} (it reads the Redis Streams)"),
            ));
        }
        for (name, route) in &self.relay.routes {
            for source in &route.sources {
                if !self.sources.contains_key(source) {
                    return Err(ConfigError::invalid(
                        format!("relay.routes.{name}.sources"),
                        format!("{source:?} is not a configured source"),
                    ));
                }
            }
        }
        Ok(())
    }

    fn validate_proxies(&self) -> Result<(), ConfigError> {
        for (name, proxy) in &self.proxies {
            validate_name("proxies", name)?;
            proxy.validate(name)?;
        }
        Ok(())
    }

    /// Every listener of the daemon: `serve` binds them all, so no two may collide.
    fn validate_listeners(&self) -> Result<(), ConfigError> {
        let mut listeners = vec![
            ("server.listen".to_owned(), self.server.listen),
            (
                "server.metrics_listen".to_owned(),
                self.server.metrics_listen,
            ),
        ];
        for (name, proxy) in &self.proxies {
            listeners.push((format!("proxies.{name}.listen"), proxy.listen));
        }
        if let Some(listen) = self.console.listen {
            listeners.push(("console.listen".to_owned(), listen));
        }
        endpoints::check_listeners(&listeners)
    }

    /// The effective configuration as TOML, secrets redacted.
    pub fn to_redacted_toml(&self) -> String {
        toml::to_string_pretty(self).unwrap_or_else(|e| format!("# cannot render: {e}\n"))
    }
}
