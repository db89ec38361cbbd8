//! Atomic mode (docs/design.md, "Redis layout"): one Lua script deduplicates a request's events
//! and appends the new ones to the Redis Stream.
//!
//! The script runs by SHA through the store, which reloads it on `NOSCRIPT`. Its `#!lua` shebang
//! without flags makes Redis refuse it *before* it runs when Redis is over `maxmemory`, so an
//! out-of-memory Redis can never leave half a delivery behind. It reads every record of the
//! request first and writes only when none is a mismatch, so a request answered 422 writes
//! nothing; then, per new event, `XADD` comes before `SET`: a script torn by a crash can at worst
//! forward an event whose record was lost (a duplicate), never record an event that was not
//! forwarded (a loss). Every key of a source carries the source's hash tag, so the call touches
//! one Redis Cluster slot. A single event is a request of one: the same script, the same three
//! commands as a script written for one event.

use std::time::{Duration, Instant};

use metrics::Histogram;
use redis::Value;

use super::batch::Plan;
use super::{within, Delivery, ForwardError, Forwarded, Forwarder};
use crate::config::{Settings, SinkKind};
use crate::metrics::Metrics;
use crate::store::{RedisStartError, RedisStore, Script, StoreError, WaitReplicas};
use crate::util::BoxFuture;

/// KEYS[1] = stream, then per event its record key and, with body_dedup, its body record key.
/// ARGV = ttl ms, max_len (0 = no trim), source, provider, received_at, keys per event (1 or 2),
/// content_type (the request's, which the relay sends on; empty when absent), confirm (`1` when
/// `WAIT` follows: each duplicate's record is written again, same value and expiry, so that the
/// `WAIT` behind the script covers it; else `0`), then per event: fingerprint, event_id,
/// event_type, body.
/// Returns one verdict per event: `n<entry ID>` new, `d<ack>` duplicate of its record, `b<ack>`
/// duplicate of its body record, `m` mismatch, `w` withheld (new, but the request was refused),
/// `x<record>` a record in neither format.
const FORWARD_SCRIPT: &str = r#"#!lua
local per = tonumber(ARGV[6])
local n = (#KEYS - 1) / per
local verdicts = {}
local found = {}
local refused = false
for i = 1, n do
  local fp = ARGV[5 + 4 * i]
  local key = KEYS[2 + per * (i - 1)]
  local record = redis.call('GET', key)
  if record then
    if string.sub(record, 1, 2) == 'p ' then
      verdicts[i] = 'x' .. record
      refused = true
    elseif string.sub(record, -#fp - 1) == ' ' .. fp then
      verdicts[i] = 'd' .. string.sub(record, 1, -#fp - 2)
      found[i] = {key, record}
    else
      verdicts[i] = 'm'
      refused = true
    end
  elseif per == 2 then
    local seen = redis.call('GET', KEYS[1 + per * i])
    if seen then
      verdicts[i] = 'b' .. string.match(seen, '^%S*')
      found[i] = {KEYS[1 + per * i], seen}
    end
  end
end
for i = 1, n do
  if found[i] and ARGV[8] == '1' and not refused then
    redis.call('SET', found[i][1], found[i][2], 'KEEPTTL')
  end
  if verdicts[i] == nil then
    if refused then
      verdicts[i] = 'w'
    else
      local a = 5 + 4 * i
      local id
      if ARGV[2] == '0' then
        id = redis.call('XADD', KEYS[1], '*',
          'source', ARGV[3], 'provider', ARGV[4], 'event_id', ARGV[a + 1],
          'event_type', ARGV[a + 2], 'received_at', ARGV[5], 'content_type', ARGV[7],
          'body', ARGV[a + 3])
      else
        id = redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[2], '*',
          'source', ARGV[3], 'provider', ARGV[4], 'event_id', ARGV[a + 1],
          'event_type', ARGV[a + 2], 'received_at', ARGV[5], 'content_type', ARGV[7],
          'body', ARGV[a + 3])
      end
      local done = id .. ' ' .. ARGV[a]
      redis.call('SET', KEYS[2 + per * (i - 1)], done, 'PX', ARGV[1])
      if per == 2 then
        redis.call('SET', KEYS[1 + per * i], done, 'PX', ARGV[1])
      end
      verdicts[i] = 'n' .. id
    end
  end
end
return verdicts
"#;

/// Atomic claim-and-append into a Redis Stream.
pub struct RedisForwarder {
    store: RedisStore,
    script: Script,
    max_len: u64,
    store_latency: Histogram,
    wait: Option<WaitReplicas>,
}

impl RedisForwarder {
    /// The forwarder for `sink.kind = "redis_stream"`, with `store.wait_replicas` when set.
    pub async fn build(
        settings: &Settings,
        store: RedisStore,
        metrics: &Metrics,
    ) -> Result<Self, RedisStartError> {
        debug_assert_eq!(settings.sink.kind, SinkKind::RedisStream);
        let wait = store.wait_replicas();
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

    async fn run(&self, deliveries: &[Delivery<'_>]) -> Result<Vec<Forwarded>, ForwardError> {
        let plan = Plan::new(deliveries);
        let Some(first) = plan.unique.first() else {
            return Ok(Vec::new());
        };
        if plan.has_conflict() {
            return Ok(plan.rejected());
        }
        let target = first.delivery.target;
        let Some(partition) = plan.partition() else {
            let spread = "the events of one request span partitions".to_owned();
            return Err(StoreError::Protocol(spread).into());
        };
        let per_event = if target.body_dedup() { 2 } else { 1 };
        let mut call = self
            .store
            .script(&self.script, 1 + per_event * plan.unique.len());
        call.arg(&target.partitions()[partition].stream);
        for planned in &plan.unique {
            call.arg(&planned.key);
            if let Some(body_key) = &planned.body_key {
                call.arg(body_key);
            }
        }
        call.arg(target.dedup_ttl.as_millis() as u64)
            .arg(self.max_len)
            .arg(&target.source)
            .arg(target.provider)
            .arg(first.delivery.received_at_ms)
            .arg(per_event)
            .arg(first.delivery.content_type.unwrap_or_default())
            .arg(if self.wait.is_some() { "1" } else { "0" });
        for planned in &plan.unique {
            let event = planned.delivery.event;
            call.arg(&planned.fingerprint)
                .arg(event.event_id())
                .arg(event.event_type())
                .arg(event.body().as_ref());
        }
        let started = Instant::now();
        // With wait_replicas, WAIT goes in the same pipeline, on the connection the script ran
        // on; it covers the events just appended and, for duplicates, their records rewritten
        // (replication is one ordered stream per master, so everything before them too).
        let waited = call
            .invoke_waiting::<Vec<Value>>(&first.key, self.wait)
            .await?;
        self.store_latency.record(started.elapsed().as_secs_f64());
        let confirmation = waited.confirmation();
        let reply = waited.reply;
        if reply.len() != plan.unique.len() {
            return Err(StoreError::Protocol(format!("{reply:?}")).into());
        }
        let judged = reply.iter().map(verdict).collect::<Result<Vec<_>, _>>()?;
        let accepted = judged
            .iter()
            .all(|f| matches!(f, Forwarded::New { .. } | Forwarded::Duplicate { .. }));
        if accepted {
            // Fewer replicas than wanted: 503, never a 2xx that was not confirmed. A refused
            // request wrote nothing, so its WAIT count does not matter.
            confirmation?;
        }
        Ok(plan.answers(judged))
    }
}

/// Reads one verdict of the script (see [`FORWARD_SCRIPT`]).
fn verdict(value: &Value) -> Result<Forwarded, ForwardError> {
    let Value::BulkString(bytes) = value else {
        return Err(StoreError::Protocol(format!("{value:?}")).into());
    };
    let rest = || String::from_utf8_lossy(&bytes[1..]).into_owned();
    Ok(match bytes.first() {
        Some(b'n') => Forwarded::New {
            entry_id: rest(),
            reclaimed: false,
        },
        Some(b'd' | b'b') => Forwarded::Duplicate { entry_id: rest() },
        Some(b'm') => Forwarded::Mismatch,
        Some(b'w') => Forwarded::Withheld,
        _ => {
            let record = String::from_utf8_lossy(bytes);
            return Err(StoreError::Protocol(format!("unreadable dedup record {record:?}")).into());
        }
    })
}

impl Forwarder for RedisForwarder {
    fn forward_all<'a>(
        &'a self,
        deliveries: &'a [Delivery<'a>],
    ) -> BoxFuture<'a, Result<Vec<Forwarded>, ForwardError>> {
        let timeout = self.store.timeout() + self.wait.map_or(Duration::ZERO, |w| w.timeout);
        Box::pin(within(timeout, self.run(deliveries)))
    }

    fn ready(&self) -> BoxFuture<'_, bool> {
        Box::pin(self.store.ping())
    }

    fn sink_label(&self) -> &'static str {
        "redis_stream"
    }
}
