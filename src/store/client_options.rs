//! What every Redis client of the store is opened with: its retries and their delay, and the
//! data-node credentials. `connection.rs` (standalone, cluster) and `sentinel.rs` (the master it
//! finds) both use it, so this sits below both and neither imports the other for it.

use std::time::Duration;

use redis::aio::ConnectionManagerConfig;

use crate::config::Secret;

/// Retries of one call inside the client: few, because the caller's deadline (`store.timeout`)
/// is what bounds a request, and the provider retries what got 503.
pub(super) const CLIENT_RETRIES: u32 = 2;
pub(super) const MAX_RETRY_WAIT: Duration = Duration::from_millis(200);

/// The reconnect policy of every single-server connection (standalone, sentinel's master).
pub(super) fn manager_config(timeout: Duration) -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(Some(timeout))
        .set_number_of_retries(CLIENT_RETRIES as usize)
        .set_max_delay(MAX_RETRY_WAIT)
}

/// `info` with the data-node credentials of `store.username` / `store.password`, when set.
pub(super) fn with_credentials(
    mut redis: redis::RedisConnectionInfo,
    username: Option<&Secret>,
    password: Option<&Secret>,
) -> redis::RedisConnectionInfo {
    if let Some(username) = username {
        redis = redis.set_username(username.expose());
    }
    if let Some(password) = password {
        redis = redis.set_password(password.expose());
    }
    redis
}
