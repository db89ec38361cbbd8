//! The Redis connection: one self-reconnecting connection, with the store timeout on every call.
//!
//! Scripts run by SHA (`EVALSHA`) and are reloaded transparently on `NOSCRIPT`, e.g. after Redis
//! restarted. Callers build a [`ScriptCall`] from a [`Script`] and its keys and arguments; they
//! never see the connection, so how Redis is reached is this file's business alone.

use std::time::Duration;

use redis::aio::ConnectionManager;
use redis::{Client, FromRedisValue, ToRedisArgs};

use super::{with_timeout, StoreError};
use crate::config::StoreSettings;

/// A Lua script, loaded once and then called by its SHA.
pub struct Script(redis::Script);

impl Script {
    pub fn new(source: &str) -> Self {
        Self(redis::Script::new(source))
    }
}

/// A Redis connection that recovers by itself, with the store timeout applied to every call.
#[derive(Clone)]
pub struct RedisStore {
    pub(super) connection: ConnectionManager,
    pub(super) timeout: Duration,
    /// Kept to open the relay's dedicated connections for blocking reads.
    pub(super) client: Client,
}

/// Why the daemon refuses to start against a Redis.
#[derive(Debug, thiserror::Error)]
pub enum RedisStartError {
    #[error("cannot connect to Redis at {url}")]
    Connect {
        url: String,
        #[source]
        source: redis::RedisError,
    },
    #[error("cannot load the scripts into Redis")]
    Script(#[source] redis::RedisError),
    #[error(
        "Redis maxmemory-policy is {policy:?}, which can evict dedup records and let duplicates \
         through; set it to noeviction, or set store.allow_eviction = true to accept the risk"
    )]
    EvictionPolicy { policy: String },
}

/// One `EVALSHA` being built: the script, then its keys and arguments in order.
///
/// Built as one command rather than through `redis::Script::key(..).arg(..)`, which copies every
/// argument (the body among them) into a vector of its own before building the command.
pub struct ScriptCall<'a> {
    store: &'a RedisStore,
    script: &'a Script,
    command: redis::Cmd,
}

impl ScriptCall<'_> {
    /// Appends a key or an argument (keys first, as many as the call was started with).
    pub fn arg(&mut self, value: impl ToRedisArgs) -> &mut Self {
        self.command.arg(value);
        self
    }

    /// Runs the script; when Redis has lost it (`NOSCRIPT`), loads it and runs the call once more.
    /// No deadline of its own: callers bound it with [`super::with_timeout`] as their call needs.
    pub async fn invoke<T: FromRedisValue>(&self) -> Result<T, StoreError> {
        let mut connection = self.store.connection.clone();
        let script = &self.script.0;
        let result = match self.command.query_async(&mut connection).await {
            Err(error)
                if error.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) =>
            {
                script.prepare_invoke().load_async(&mut connection).await?;
                self.command.query_async(&mut connection).await
            }
            result => result,
        };
        result.map_err(StoreError::Redis)
    }
}

impl From<redis::RedisError> for StoreError {
    fn from(error: redis::RedisError) -> Self {
        StoreError::Redis(error)
    }
}

impl RedisStore {
    pub async fn connect(settings: &StoreSettings) -> Result<Self, RedisStartError> {
        let url = settings.redis_url.redacted();
        let fail = |source| RedisStartError::Connect {
            url: url.clone(),
            source,
        };
        let client = Client::open(settings.redis_url.0.as_str()).map_err(fail)?;
        let config = redis::aio::ConnectionManagerConfig::new()
            .set_connection_timeout(Some(settings.timeout.0))
            .set_response_timeout(Some(settings.timeout.0))
            .set_number_of_retries(2)
            .set_max_delay(Duration::from_millis(200));
        let connection = tokio::time::timeout(
            settings.timeout.0 * 4,
            ConnectionManager::new_with_config(client.clone(), config),
        )
        .await
        .map_err(|_| {
            fail(redis::RedisError::from((
                redis::ErrorKind::Io,
                "timed out connecting",
            )))
        })?
        .map_err(fail)?;
        Ok(Self {
            connection,
            timeout: settings.timeout.0,
            client,
        })
    }

    /// The deadline of one store call (`store.timeout`).
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Loads scripts up front, so that the first request already runs them by SHA.
    pub async fn load(&self, scripts: &[&Script]) -> Result<(), RedisStartError> {
        let mut connection = self.connection.clone();
        for script in scripts {
            script
                .0
                .prepare_invoke()
                .load_async(&mut connection)
                .await
                .map_err(RedisStartError::Script)?;
        }
        Ok(())
    }

    /// Starts an `EVALSHA` of `script` with `keys` keys; push the keys, then the arguments.
    pub fn script<'a>(&'a self, script: &'a Script, keys: usize) -> ScriptCall<'a> {
        let mut command = redis::cmd("EVALSHA");
        command.arg(script.0.get_hash()).arg(keys);
        ScriptCall {
            store: self,
            script,
            command,
        }
    }

    /// `WAIT replicas timeout`: waits until `replicas` replicas hold every write this connection
    /// made, on the server that owns `_key` (one server today). Fewer in time is an error, so a
    /// caller never acknowledges what was not confirmed.
    pub async fn wait_for_replicas(
        &self,
        _key: &str,
        replicas: i64,
        timeout: Duration,
    ) -> Result<(), StoreError> {
        let mut connection = self.connection.clone();
        let confirmed: i64 = redis::cmd("WAIT")
            .arg(replicas)
            .arg(timeout.as_millis() as u64)
            .query_async(&mut connection)
            .await?;
        if confirmed < replicas {
            return Err(StoreError::Replication {
                confirmed,
                wanted: replicas,
            });
        }
        Ok(())
    }

    /// Refuses a Redis that may evict keys, unless allowed; warns when `CONFIG` is not permitted.
    pub async fn check_eviction_policy(&self, allow_eviction: bool) -> Result<(), RedisStartError> {
        let mut connection = self.connection.clone();
        let reply: redis::RedisResult<Vec<String>> = redis::cmd("CONFIG")
            .arg("GET")
            .arg("maxmemory-policy")
            .query_async(&mut connection)
            .await;
        match reply {
            Ok(pair) if pair.len() == 2 => {
                let policy = pair[1].clone();
                if policy == "noeviction" {
                    Ok(())
                } else if allow_eviction {
                    tracing::warn!(
                        message = "Redis may evict dedup records; duplicates can get through.",
                        policy
                    );
                    Ok(())
                } else {
                    Err(RedisStartError::EvictionPolicy { policy })
                }
            }
            other => {
                tracing::warn!(
                    message = "Cannot read Redis maxmemory-policy (CONFIG not permitted?); make sure it is noeviction.",
                    reply = ?other.map(|_| ()).err()
                );
                Ok(())
            }
        }
    }

    /// Whether Redis answers `PING` within the store timeout (`/readyz`, `hookonce_ready`).
    pub async fn ping(&self) -> bool {
        let mut connection = self.connection.clone();
        let call = async move {
            Ok(redis::cmd("PING")
                .query_async::<String>(&mut connection)
                .await?)
        };
        with_timeout(self.timeout, call).await.is_ok()
    }

    /// `XLEN` of a stream, for the `hookonce_stream_length` gauge.
    pub async fn stream_length(&self, stream: &str) -> Result<u64, StoreError> {
        let mut connection = self.connection.clone();
        let call = async move {
            Ok(redis::cmd("XLEN")
                .arg(stream)
                .query_async::<u64>(&mut connection)
                .await?)
        };
        with_timeout(self.timeout, call).await
    }

    /// The raw dedup record at `key` and its remaining time to live in ms, for `hookonce inspect`.
    pub async fn get_record(&self, key: &str) -> Result<Option<(String, i64)>, StoreError> {
        let mut connection = self.connection.clone();
        let call = async move {
            let (record, ttl): (Option<String>, i64) = redis::pipe()
                .get(key)
                .pttl(key)
                .query_async(&mut connection)
                .await?;
            Ok(record.map(|r| (r, ttl)))
        };
        with_timeout(self.timeout, call).await
    }

    /// Deletes one dedup record, for `hookonce forget`. Returns whether it existed.
    pub async fn delete_record(&self, key: &str) -> Result<bool, StoreError> {
        let mut connection = self.connection.clone();
        let call = async move {
            let deleted: i64 = redis::cmd("DEL")
                .arg(key)
                .query_async(&mut connection)
                .await?;
            Ok(deleted == 1)
        };
        with_timeout(self.timeout, call).await
    }
}
