//! The errors of the store: why a store call did not succeed ([`StoreError`]), why the daemon
//! refuses to start against a Redis ([`RedisStartError`]), and the deadline that turns a slow
//! call into [`StoreError::Timeout`]. Its own file below the façade, so that the files that talk
//! to Redis can share them without importing the module that declares them.

use std::future::Future;
use std::time::Duration;

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

/// Runs a store call under a deadline.
pub async fn with_timeout<T>(
    timeout: Duration,
    call: impl Future<Output = Result<T, StoreError>>,
) -> Result<T, StoreError> {
    tokio::time::timeout(timeout, call)
        .await
        .unwrap_or(Err(StoreError::Timeout(timeout)))
}
