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

/// Runs a store call under a deadline, which runs from the call's first wait (the first poll
/// sends the command).
///
/// Not an `async fn`: one would keep `call` twice, once as its argument and once inside the
/// timeout it awaits, and every store call's future (boxed, then moved and written on each
/// request) would be twice the size of the call.
pub fn with_timeout<T, F>(timeout: Duration, call: F) -> impl Future<Output = Result<T, StoreError>>
where
    F: Future<Output = Result<T, StoreError>>,
{
    use futures_util::FutureExt as _;
    crate::timer::within_once_waiting(timeout, call)
        .map(move |result| result.unwrap_or(Err(StoreError::Timeout(timeout))))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A store call's deadline holds the call once: as an `async fn` it kept it twice, and
    /// every boxed store call (two per proxied request) was twice its size.
    #[test]
    fn a_deadline_holds_its_call_once() {
        let call = async { Ok::<u8, StoreError>(crate::timer::tests::large_future().await) };
        let alone = std::mem::size_of_val(&call);
        let bounded = with_timeout(Duration::from_secs(1), call);
        let size = std::mem::size_of_val(&bounded);
        assert!(size < alone + 512, "{size} bytes around a call of {alone}");
    }

    /// The deadline runs from the call's first wait, and a call past it is a timeout.
    #[tokio::test(start_paused = true)]
    async fn a_call_past_its_deadline_is_a_timeout() {
        let slow = async {
            tokio::time::sleep(Duration::from_millis(200)).await;
            Ok::<u8, StoreError>(1)
        };
        let clock = tokio::time::Instant::now();
        let result = with_timeout(Duration::from_millis(100), slow).await;
        assert!(matches!(result, Err(StoreError::Timeout(d)) if d == Duration::from_millis(100)));
        assert_eq!(clock.elapsed(), Duration::from_millis(100));
        let quick = async { Ok::<u8, StoreError>(2) };
        assert_eq!(with_timeout(Duration::ZERO, quick).await.ok(), Some(2));
    }
}
