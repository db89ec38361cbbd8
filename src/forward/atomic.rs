//! Atomic mode (docs/design.md, "Redis layout"): one Lua script deduplicates and appends to the
//! Redis Stream.
//!
//! The script runs by SHA through the store, which reloads it on `NOSCRIPT`. Its `#!lua` shebang without flags makes Redis refuse it *before* it runs when
//! Redis is over `maxmemory`, so an out-of-memory Redis can never leave half a delivery behind.
//! Inside, `XADD` comes before `SET`: a script torn by a crash can at worst forward an event whose
//! record was lost (a duplicate), never record an event that was not forwarded (a loss).

use std::time::{Duration, Instant};

use metrics::Histogram;
use redis::Value;

use super::{judge_record, within, Delivery, ForwardError, Forwarded, Forwarder};
use crate::config::{Settings, SinkKind};
use crate::metrics::Metrics;
use crate::store::{RedisStartError, RedisStore, Script, StoreError};
use crate::util::BoxFuture;

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
    /// The forwarder for `sink.kind = "redis_stream"`, with `store.wait_replicas` when set.
    pub async fn build(
        settings: &Settings,
        store: RedisStore,
        metrics: &Metrics,
    ) -> Result<Self, RedisStartError> {
        debug_assert_eq!(settings.sink.kind, SinkKind::RedisStream);
        let wait = (settings.store.wait_replicas > 0).then(|| WaitReplicas {
            replicas: i64::from(settings.store.wait_replicas),
            timeout: settings.store.wait_timeout.0,
        });
        let script = Script::new(FORWARD_SCRIPT);
        store.load(&[&script]).await?;
        Ok(Self {
            store,
            script,
            max_len: settings.sink.max_len,
            store_latency: metrics.store_op("forward"),
            wait,
        })
    }

    async fn run(&self, delivery: Delivery<'_>) -> Result<Forwarded, ForwardError> {
        let target = delivery.target;
        let event = delivery.event;
        let fingerprint = delivery.fingerprint().encode();
        let ttl_ms = target.dedup_ttl.as_millis() as u64;
        let key = target.record_key(event.event_id());
        let started = Instant::now();
        let mut call = self.store.script(&self.script, 2);
        call.arg(&key)
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
        let reply: Value = call.invoke().await?;
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
                other => return Err(StoreError::Protocol(format!("{other:?}")).into()),
            },
            other => return Err(StoreError::Protocol(format!("{other:?}")).into()),
        };
        if let (Some(wait), Forwarded::New { .. } | Forwarded::Duplicate { .. }) =
            (self.wait, &forwarded)
        {
            // WAIT covers the event just appended or, for a duplicate, the original append:
            // replication is one ordered stream per server. It narrows the window in which a
            // failover loses an acknowledged event to a failover onto an unconfirmed replica.
            self.store
                .wait_for_replicas(&key, wait.replicas, wait.timeout)
                .await?;
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
        Box::pin(within(timeout, self.run(delivery)))
    }

    fn ready(&self) -> BoxFuture<'_, bool> {
        Box::pin(self.store.ping())
    }

    fn sink_label(&self) -> &'static str {
        "redis_stream"
    }
}
