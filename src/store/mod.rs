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
mod console_calls;
mod error;
pub mod record;
pub mod redis;
pub mod relay_scripts;
mod sentinel;
mod streams;

use crate::config::{StoreBackend, StoreSettings};

pub use self::console_calls::PendingEntry;
pub use self::error::{with_timeout, RedisStartError, StoreError};
pub use self::record::{Fingerprint, Record};
pub use self::redis::{RedisStore, Script, ScriptCall, WaitReplicas, Waited};
pub use self::relay_scripts::RelayScripts;
pub use self::streams::{is_missing_group, StreamEntry};

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
