//! `[server]` and `[store]`: listeners, limits and timeouts; the dedup store and its safety knobs.

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::access::{check_limit, Limit};
use super::values::one_or_many;
use super::{ByteSize, Cidr, ConfigError, HumanDuration, Rate, Secret, ABOVE_ZERO, MAX_TIMEOUT};

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerSettings {
    /// Webhooks, `/healthz` and `/readyz`.
    pub listen: SocketAddr,
    /// `GET /metrics`.
    pub metrics_listen: SocketAddr,
    pub body_limit: ByteSize,
    /// Upper bound on receiving a request's body, from its headers on; a body still incomplete
    /// then is answered 408. It is short and separate from `request_timeout` so that a client
    /// that trickles its body cannot hold a connection, or the daemon's attention, for long.
    pub body_read_timeout: HumanDuration,
    /// Bytes of request bodies held in memory at once, over all connections; a body that would
    /// go over it gets 503. Capacity is taken by the bytes a client has sent, not by the bytes it
    /// declared, so stalled bodies hold next to nothing.
    pub body_memory_limit: ByteSize,
    /// Upper bound on handling one request, from its headers to the response.
    pub request_timeout: HumanDuration,
    /// Upper bound on receiving a request's headers; a slow client is disconnected after it.
    pub header_read_timeout: HumanDuration,
    /// Requests handled at once once their body is in; beyond it new requests get 503 +
    /// `Retry-After`.
    pub max_in_flight: usize,
    /// How long SIGTERM waits for in-flight requests before exiting.
    pub shutdown_timeout: HumanDuration,
    /// Seconds sent in `Retry-After` with 503 and 409 answers.
    pub retry_after_secs: u32,
    /// Peers (load balancers, ingress controllers) whose `X-Forwarded-For` and `Forwarded`
    /// headers say who the client is; every other peer's are ignored.
    #[serde(deserialize_with = "one_or_many")]
    pub trusted_proxies: Vec<Cidr>,
    /// Rejected webhook requests one client may send (a token bucket per client address);
    /// beyond it, 429 before the body is read. Off when absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rejected_limit: Option<Rate>,
    /// The bucket size of `rejected_limit` (a second's worth when absent).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rejected_limit_burst: Option<u32>,
}

impl Default for ServerSettings {
    fn default() -> Self {
        Self {
            listen: ([0, 0, 0, 0], 8080).into(),
            metrics_listen: ([0, 0, 0, 0], 9090).into(),
            body_limit: ByteSize(1 << 20),
            body_read_timeout: secs(5),
            body_memory_limit: ByteSize(256 << 20),
            request_timeout: secs(10),
            header_read_timeout: secs(5),
            max_in_flight: 1024,
            shutdown_timeout: secs(20),
            retry_after_secs: 1,
            trusted_proxies: Vec::new(),
            rejected_limit: None,
            rejected_limit_burst: None,
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
    /// How Redis is reached: one server (`redis_url`), a Redis Cluster (`cluster_nodes`) or a
    /// master found through Sentinel (`sentinels`, `sentinel_master`).
    pub topology: StoreTopology,
    /// Standalone: the one server. May carry a password; shown redacted.
    pub redis_url: ServiceUrl,
    /// Cluster: seed nodes; the client learns every other node (and the slot map) from them.
    pub cluster_nodes: Vec<ServiceUrl>,
    /// Sentinel: the sentinels asked for the master's address.
    pub sentinels: Vec<ServiceUrl>,
    /// Sentinel: the name the sentinels monitor the master under.
    pub sentinel_master: Option<String>,
    /// Sentinel: credentials for the sentinels themselves (not for the master).
    pub sentinel_username: Option<Secret>,
    pub sentinel_password: Option<Secret>,
    /// Credentials for the data nodes (the server, every cluster node, the sentinel's master);
    /// they take precedence over credentials in the URLs.
    pub username: Option<Secret>,
    pub password: Option<Secret>,
    pub key_prefix: String,
    /// Upper bound on one Redis call; past it the request answers 503.
    pub timeout: HumanDuration,
    /// Start even when Redis's `maxmemory-policy` may evict dedup records.
    pub allow_eviction: bool,
    /// Memory backend: most dedup records held at once; when full, new events get 503.
    pub memory_max_records: usize,
    /// Memory backend: most bytes of records (keys and values: a proxy's stored answers) held at
    /// once; a claim past it gets 503, an answer that would pass it is stored truncated.
    pub memory_max_bytes: ByteSize,
    /// Redis store: replicas that must confirm each acknowledging write (`WAIT`: the atomic
    /// script, a ledger's complete) before it is acknowledged; 0 = do not wait.
    pub wait_replicas: u32,
    /// How long `WAIT` may take; fewer confirmations by then answer 503.
    pub wait_timeout: HumanDuration,
    /// TLS (`rediss://`): the CA certificates (PEM) the servers' certificates must chain to,
    /// instead of the public CAs built in.
    pub tls_ca_file: Option<PathBuf>,
    /// TLS: a client certificate chain (PEM) for servers that require one; with `tls_key_file`.
    pub tls_cert_file: Option<PathBuf>,
    /// TLS: the private key (PEM) of `tls_cert_file`.
    pub tls_key_file: Option<PathBuf>,
    /// TLS: accept any server certificate (no verification at all). Off unless set explicitly;
    /// a `rediss://…/#insecure` URL is refused without it.
    pub tls_insecure: bool,
}

impl Default for StoreSettings {
    fn default() -> Self {
        Self {
            backend: StoreBackend::Redis,
            topology: StoreTopology::Standalone,
            redis_url: ServiceUrl("redis://127.0.0.1:6379".to_owned()),
            cluster_nodes: Vec::new(),
            sentinels: Vec::new(),
            sentinel_master: None,
            sentinel_username: None,
            sentinel_password: None,
            username: None,
            password: None,
            key_prefix: "hookonce".to_owned(),
            timeout: HumanDuration(std::time::Duration::from_millis(500)),
            allow_eviction: false,
            memory_max_records: 1_000_000,
            memory_max_bytes: ByteSize(256 << 20),
            wait_replicas: 0,
            wait_timeout: HumanDuration(std::time::Duration::from_millis(100)),
            tls_ca_file: None,
            tls_cert_file: None,
            tls_key_file: None,
            tls_insecure: false,
        }
    }
}

/// A Redis or NATS URL whose credentials are never printed (see [`super::redact_url`]).
#[derive(Clone, Deserialize)]
#[serde(transparent)]
pub struct ServiceUrl(pub String);

impl ServiceUrl {
    /// The URL with its userinfo and credential parameters replaced by `[redacted]`.
    pub fn redacted(&self) -> String {
        super::redact_url(&self.0)
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

fn secs(n: u64) -> HumanDuration {
    HumanDuration(std::time::Duration::from_secs(n))
}

impl ServerSettings {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if self.body_limit.0 == 0 {
            return Err(ConfigError::invalid(
                "server.body_limit",
                "must be above zero",
            ));
        }
        if self.body_memory_limit.0 < self.body_limit.0 {
            return Err(ConfigError::invalid(
                "server.body_memory_limit",
                "must be at least server.body_limit, or a body of the largest allowed size could \
                 never be read",
            ));
        }
        if self.max_in_flight == 0 {
            return Err(ConfigError::invalid(
                "server.max_in_flight",
                "must be above zero",
            ));
        }
        // A timeout beyond an hour protects nothing, and a huge one overflows the deadline
        // arithmetic of the timers that enforce it.
        for (key, value) in [
            ("server.request_timeout", self.request_timeout),
            ("server.header_read_timeout", self.header_read_timeout),
            ("server.body_read_timeout", self.body_read_timeout),
        ] {
            value.check(key, ABOVE_ZERO, MAX_TIMEOUT)?;
        }
        self.shutdown_timeout.check(
            "server.shutdown_timeout",
            std::time::Duration::ZERO,
            MAX_TIMEOUT,
        )?;
        self.rejected_requests_limit()?;
        Ok(())
    }

    /// `rejected_limit` with its burst, checked: the per-client bucket of rejected requests.
    pub fn rejected_requests_limit(&self) -> Result<Option<Limit>, ConfigError> {
        check_limit(
            "server.rejected_limit",
            self.rejected_limit.as_ref(),
            self.rejected_limit_burst,
        )
    }
}

impl StoreSettings {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        // The connection is given four times store.timeout to come up: a bound keeps that
        // product, and every deadline built from it, from overflowing.
        self.timeout
            .check("store.timeout", ABOVE_ZERO, MAX_TIMEOUT)?;
        if self.key_prefix.is_empty() || self.key_prefix.contains(['{', '}']) {
            return Err(ConfigError::invalid(
                "store.key_prefix",
                "must be non-empty and contain no braces (they would change the hash slot)",
            ));
        }
        if self.backend == StoreBackend::Memory && self.memory_max_records == 0 {
            return Err(ConfigError::invalid(
                "store.memory_max_records",
                "must be above zero",
            ));
        }
        if self.backend == StoreBackend::Memory && self.memory_max_bytes.0 == 0 {
            return Err(ConfigError::invalid(
                "store.memory_max_bytes",
                "must be above zero",
            ));
        }
        self.validate_topology()?;
        self.validate_tls()?;
        if self.wait_replicas > 0 {
            let wait = self.wait_timeout.0;
            // WAIT 0 blocks forever, and WAIT runs on a connection whose every call is cut off at
            // store.timeout: a longer wait would be answered 503 by the timeout, not by WAIT.
            if wait.is_zero() || wait >= self.timeout.0 {
                return Err(ConfigError::invalid(
                    "store.wait_timeout",
                    "must be above zero and below store.timeout when store.wait_replicas is set",
                ));
            }
        }
        Ok(())
    }
}

/// `store.topology`: how Redis is reached. It lives beside `StoreSettings`, which holds it;
/// the checks on the keys each topology reads are in `topology.rs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StoreTopology {
    /// One server at `store.redis_url`.
    #[default]
    Standalone,
    /// A Redis Cluster reached through the seed nodes in `store.cluster_nodes`.
    Cluster,
    /// The master named `store.sentinel_master`, asked of `store.sentinels`.
    Sentinel,
}

impl StoreTopology {
    pub fn label(self) -> &'static str {
        match self {
            StoreTopology::Standalone => "standalone",
            StoreTopology::Cluster => "cluster",
            StoreTopology::Sentinel => "sentinel",
        }
    }
}
