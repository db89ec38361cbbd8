//! The store: Redis connections and script calls, the record formats, and the error of every
//! store call.
//!
//! Only this module holds a Redis connection. The parts that keep state in Redis — atomic
//! forwarding (`forward::atomic`) and the claim/complete/release ledger (`ledger::redis`) — hand
//! it scripts and arguments and get replies back, so how Redis is reached (`store.topology`: one
//! server, a Redis Cluster, or Sentinel's master) is decided in one place. The in-process
//! alternative is the memory ledger (`ledger::memory`).
//!
//! - [`redis`]: [`RedisStore`], a self-reconnecting connection with the store timeout on every
//!   call, script invocation by SHA (with `WAIT` pipelined behind it when replicas must
//!   confirm), the start-up safety checks and the operator reads.
//! - `connection`: the one connection type over the three topologies, on redis-rs's own
//!   clients; `sentinel`: the master found, and found again after a failover, via Sentinel.
//! - [`record`]: the dedup record formats and the payload [`Fingerprint`].
//! - [`relay_scripts`]: the relay's scripts (refresh, retry, acknowledge, dead-letter, copy, trim); and
//!   `streams.rs`, the consumer-group commands as `RedisStore` methods and [`StreamEntry`].

mod client_options;
mod connection;
pub mod record;
pub mod redis;
pub mod relay_scripts;
mod sentinel;
mod streams;

use std::future::Future;
use std::time::Duration;

use crate::config::{StoreBackend, StoreSettings};

pub use self::record::{Fingerprint, Record};
pub use self::redis::{RedisStore, Script, ScriptCall, WaitReplicas, Waited};
pub use self::relay_scripts::RelayScripts;
pub use self::streams::{is_missing_group, StreamEntry};

/// Why a store call did not succeed. Every variant answers 503, so the sender retries.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("store did not answer within {0:?}")]
    Timeout(Duration),
    #[error("redis call failed")]
    Redis(#[source] ::redis::RedisError),
    #[error("store answered something unexpected: {0}")]
    Protocol(String),
    #[error("only {confirmed} of {wanted} replicas confirmed the write within the wait timeout")]
    Replication { confirmed: i64, wanted: i64 },
    #[error("memory store is full ({0} records)")]
    Full(usize),
    /// The memory store's records would pass `store.memory_max_bytes`.
    #[error("memory store is full ({0} bytes of records)")]
    FullBytes(usize),
}

/// Why the daemon refuses to start against a Redis. Beside `StoreError`, so that the files
/// that connect (`connection.rs`, `redis.rs`) share it without importing each other.
#[derive(Debug, thiserror::Error)]
pub enum RedisStartError {
    #[error("cannot connect to Redis at {url}")]
    Connect {
        url: String,
        #[source]
        source: ::redis::RedisError,
    },
    #[error("cannot load the scripts into Redis")]
    Script(#[source] ::redis::RedisError),
    #[error(
        "Redis maxmemory-policy is {policy:?} (on {node}), which can evict dedup records and let \
         duplicates through; set it to noeviction, or set store.allow_eviction = true to accept \
         the risk"
    )]
    EvictionPolicy { policy: String, node: String },
}

/// Connects to the configured Redis and runs the start-up safety checks; `None` for the memory
/// store, whose records live in the ledger of this process.
pub async fn connect(settings: &StoreSettings) -> Result<Option<RedisStore>, RedisStartError> {
    match settings.backend {
        StoreBackend::Memory => Ok(None),
        StoreBackend::Redis => {
            if settings.tls_insecure {
                // check-config lets it through only when set explicitly; it still says so at
                // every start, since anyone on the network path can then pose as Redis.
                tracing::warn!(
                    message = "TLS to Redis checks no certificate (store.tls_insecure = true).",
                );
            }
            let store = RedisStore::connect(settings).await?;
            store.check_eviction_policy(settings.allow_eviction).await?;
            Ok(Some(store))
        }
    }
}

/// Runs a store call under a deadline.
pub async fn with_timeout<T>(
    timeout: Duration,
    call: impl Future<Output = Result<T, StoreError>>,
) -> Result<T, StoreError> {
    tokio::time::timeout(timeout, call)
        .await
        .unwrap_or(Err(StoreError::Timeout(timeout)))
}
