//! Atomic mode (DESIGN §4): one Lua script deduplicates and appends to the Redis Stream.
//!
//! The script runs by SHA (`EVALSHA`); redis-rs reloads it transparently on `NOSCRIPT`, e.g. after
//! Redis restarted. Its `#!lua` shebang without flags makes Redis refuse it *before* it runs when
//! Redis is over `maxmemory`, so an out-of-memory Redis can never leave half a delivery behind.
//! Inside, `XADD` comes before `SET`: a script torn by a crash can at worst forward an event whose
//! record was lost (a duplicate), never record an event that was not forwarded (a loss).

use std::time::{Duration, Instant};

use metrics::Histogram;
use redis::aio::ConnectionManager;
use redis::{Client, Script, Value};

use super::{judge_record, with_timeout, BoxFuture, Delivery, ForwardError, Forwarded, Forwarder};
use crate::config::StoreSettings;

/// KEYS[1] = dedup record, KEYS[2] = stream.
/// ARGV = fingerprint, ttl ms, max_len (0 = no trim), then the stream entry's field values.
const FORWARD_SCRIPT: &str = r#"#!lua
local record = redis.call('GET', KEYS[1])
if record then
  return record
end
local id
if ARGV[3] == '0' then
  id = redis.call('XADD', KEYS[2], '*',
    'source', ARGV[4], 'provider', ARGV[5], 'event_id', ARGV[6],
    'event_type', ARGV[7], 'received_at', ARGV[8], 'body', ARGV[9])
else
  id = redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[3], '*',
    'source', ARGV[4], 'provider', ARGV[5], 'event_id', ARGV[6],
    'event_type', ARGV[7], 'received_at', ARGV[8], 'body', ARGV[9])
end
redis.call('SET', KEYS[1], id .. ' ' .. ARGV[1], 'PX', ARGV[2])
return {id}
"#;

/// Starts an `EVALSHA` of `script` with `keys` keys; keys and arguments follow.
///
/// Built as one command rather than through `Script::key(..).arg(..)`, which copies every
/// argument (the body among them) into a vector of its own before building the command.
pub(crate) fn evalsha(script: &Script, keys: usize) -> redis::Cmd {
    let mut command = redis::cmd("EVALSHA");
    command.arg(script.get_hash()).arg(keys);
    command
}

/// Runs an `EVALSHA` built by [`evalsha`]; when Redis has lost the script (`NOSCRIPT`, e.g. after
/// a restart or `SCRIPT FLUSH`), loads it and runs the command once more.
pub(crate) async fn run_script<T: redis::FromRedisValue>(
    connection: &mut ConnectionManager,
    script: &Script,
    command: &redis::Cmd,
) -> redis::RedisResult<T> {
    match command.query_async(connection).await {
        Err(error)
            if error.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) =>
        {
            script.prepare_invoke().load_async(connection).await?;
            command.query_async(connection).await
        }
        result => result,
    }
}

/// A Redis connection that recovers by itself, with the store timeout applied to every call.
#[derive(Clone)]
pub struct RedisStore {
    connection: ConnectionManager,
    timeout: Duration,
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
    #[error(
        "Redis maxmemory-policy is {policy:?}, which can evict dedup records and let duplicates \
         through; set it to noeviction, or set store.allow_eviction = true to accept the risk"
    )]
    EvictionPolicy { policy: String },
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
            ConnectionManager::new_with_config(client, config),
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
        })
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

    pub fn connection(&self) -> ConnectionManager {
        self.connection.clone()
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    pub async fn ping(&self) -> bool {
        let mut connection = self.connection.clone();
        let call = async move {
            redis::cmd("PING")
                .query_async::<String>(&mut connection)
                .await
                .map_err(ForwardError::Redis)
        };
        with_timeout(self.timeout, call).await.is_ok()
    }

    /// `XLEN` of a stream, for the `hookonce_stream_length` gauge.
    pub async fn stream_length(&self, stream: &str) -> Result<u64, ForwardError> {
        let mut connection = self.connection.clone();
        let call = async move {
            redis::cmd("XLEN")
                .arg(stream)
                .query_async::<u64>(&mut connection)
                .await
                .map_err(ForwardError::Redis)
        };
        with_timeout(self.timeout, call).await
    }

    /// The raw dedup record of one key, for `hookonce inspect`.
    pub async fn get_record(&self, key: &str) -> Result<Option<(String, i64)>, ForwardError> {
        let mut connection = self.connection.clone();
        let (record, ttl): (Option<String>, i64) = redis::pipe()
            .get(key)
            .pttl(key)
            .query_async(&mut connection)
            .await
            .map_err(ForwardError::Redis)?;
        Ok(record.map(|r| (r, ttl)))
    }

    /// Deletes one dedup record, for `hookonce forget`. Returns whether it existed.
    pub async fn delete_record(&self, key: &str) -> Result<bool, ForwardError> {
        let mut connection = self.connection.clone();
        let deleted: i64 = redis::cmd("DEL")
            .arg(key)
            .query_async(&mut connection)
            .await
            .map_err(ForwardError::Redis)?;
        Ok(deleted == 1)
    }
}

/// Atomic claim-and-append into a Redis Stream.
pub struct RedisForwarder {
    store: RedisStore,
    script: Script,
    max_len: u64,
    store_latency: Histogram,
    wait: Option<WaitReplicas>,
}

/// `WAIT` for replicas before acknowledging (`store.wait_replicas`, `store.wait_timeout`).
#[derive(Debug, Clone, Copy)]
pub struct WaitReplicas {
    pub replicas: i64,
    pub timeout: Duration,
}

impl RedisForwarder {
    pub async fn new(
        store: RedisStore,
        max_len: u64,
        store_latency: Histogram,
        wait: Option<WaitReplicas>,
    ) -> Result<Self, redis::RedisError> {
        let script = Script::new(FORWARD_SCRIPT);
        // Load once up front so the first request already runs by SHA.
        let mut connection = store.connection();
        script.prepare_invoke().load_async(&mut connection).await?;
        Ok(Self {
            store,
            script,
            max_len,
            store_latency,
            wait,
        })
    }

    /// Waits until enough replicas have every write this connection made, including the event
    /// just appended (or, for a duplicate, the original append). This narrows the window in
    /// which a failover can lose an acknowledged event; it does not close it.
    async fn wait_for_replicas(&self, wait: WaitReplicas) -> Result<(), ForwardError> {
        let mut connection = self.store.connection();
        let confirmed: i64 = redis::cmd("WAIT")
            .arg(wait.replicas)
            .arg(wait.timeout.as_millis() as u64)
            .query_async(&mut connection)
            .await
            .map_err(ForwardError::Redis)?;
        if confirmed < wait.replicas {
            return Err(ForwardError::Replication {
                confirmed,
                wanted: wait.replicas,
            });
        }
        Ok(())
    }

    async fn run(&self, delivery: Delivery<'_>) -> Result<Forwarded, ForwardError> {
        let target = delivery.target;
        let event = delivery.event;
        let fingerprint = delivery.fingerprint().encode();
        let ttl_ms = target.dedup_ttl.as_millis() as u64;
        let mut connection = self.store.connection();
        let started = Instant::now();
        let mut command = evalsha(&self.script, 2);
        command
            .arg(target.record_key(event.event_id()))
            .arg(&target.stream)
            .arg(&fingerprint)
            .arg(ttl_ms)
            .arg(self.max_len)
            .arg(&target.source)
            .arg(target.provider)
            .arg(event.event_id())
            .arg(event.event_type())
            .arg(delivery.received_at_ms)
            .arg(event.body().as_ref());
        let reply: Value = run_script(&mut connection, &self.script, &command)
            .await
            .map_err(ForwardError::Redis)?;
        self.store_latency.record(started.elapsed().as_secs_f64());
        let forwarded = match reply {
            Value::BulkString(record) => {
                judge_record(&String::from_utf8_lossy(&record), &fingerprint)?
            }
            Value::Array(mut items) if items.len() == 1 => match items.pop() {
                Some(Value::BulkString(id)) => Forwarded::New {
                    entry_id: String::from_utf8_lossy(&id).into_owned(),
                    reclaimed: false,
                },
                other => return Err(ForwardError::Protocol(format!("{other:?}"))),
            },
            other => return Err(ForwardError::Protocol(format!("{other:?}"))),
        };
        if let (Some(wait), Forwarded::New { .. } | Forwarded::Duplicate { .. }) =
            (self.wait, &forwarded)
        {
            self.wait_for_replicas(wait).await?;
        }
        Ok(forwarded)
    }
}

impl Forwarder for RedisForwarder {
    fn forward<'a>(
        &'a self,
        delivery: Delivery<'a>,
    ) -> BoxFuture<'a, Result<Forwarded, ForwardError>> {
        let timeout = self.store.timeout() + self.wait.map_or(Duration::ZERO, |w| w.timeout);
        Box::pin(with_timeout(timeout, self.run(delivery)))
    }

    fn ready(&self) -> BoxFuture<'_, bool> {
        Box::pin(self.store.ping())
    }

    fn sink_label(&self) -> &'static str {
        "redis_stream"
    }
}
