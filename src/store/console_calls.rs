//! The store calls the console makes, as `RedisStore` methods: streams read newest first, one
//! entry's pending state in a consumer group, the cluster-wide per-minute counts and the bounded
//! audit stream. Each is one command or one pipeline on one slot, under the store timeout, so a
//! page costs a bounded number of round trips whatever the size of the stream.

use redis::Value;

use super::{with_timeout, RedisStore, StoreError, StreamEntry};

/// What a consumer group says of one pending entry (`XPENDING … IDLE`-less extended form).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingEntry {
    pub consumer: String,
    pub idle_ms: u64,
    pub deliveries: u64,
}

impl RedisStore {
    /// `XREVRANGE stream end start COUNT count`: newest first.
    pub async fn rev_range(
        &self,
        stream: &str,
        end: &str,
        start: &str,
        count: usize,
    ) -> Result<Vec<StreamEntry>, StoreError> {
        self.ranged("XREVRANGE", stream, (end, start), count).await
    }

    /// The one entry `id` of `stream`, if the stream still holds it.
    pub async fn entry(&self, stream: &str, id: &str) -> Result<Option<StreamEntry>, StoreError> {
        Ok(self.range(stream, id, id, 1).await?.into_iter().next())
    }

    /// Whether `group` has delivered entry `id` of `stream` (its last-delivered ID is at or past
    /// it), and the entry's pending state if it is pending; `None` when the group does not exist.
    pub async fn group_state(
        &self,
        stream: &str,
        group: &str,
        id: &str,
    ) -> Result<Option<(String, Option<PendingEntry>)>, StoreError> {
        let mut connection = self.connection.clone();
        let call = async move {
            // A stream or group that does not exist yet is an error reply: read per command.
            let replies: Vec<redis::RedisResult<Value>> = redis::pipe()
                .ignore_errors()
                .cmd("XINFO")
                .arg("GROUPS")
                .arg(stream)
                .cmd("XPENDING")
                .arg(stream)
                .arg(group)
                .arg(id)
                .arg(id)
                .arg(1)
                .query_async(&mut connection)
                .await?;
            let mut replies = replies.into_iter().map(|r| r.unwrap_or(Value::Nil));
            let groups = replies.next().unwrap_or(Value::Nil);
            let pending = replies.next().unwrap_or(Value::Nil);
            let Some(last) = last_delivered(&groups, group) else {
                return Ok(None);
            };
            let pending = match pending {
                Value::Array(items) => items.first().and_then(pending_entry),
                _ => None,
            };
            Ok(Some((last, pending)))
        };
        with_timeout(self.timeout, call).await
    }

    /// One event's dedup record, its time to live (ms) and its duplicate-arrival hash, in one
    /// pipeline (the keys share the record's hash tag).
    pub async fn event_record(
        &self,
        record_key: &str,
        duplicates_key: &str,
    ) -> Result<(Option<String>, i64, Vec<(String, String)>), StoreError> {
        let mut connection = self.connection.clone();
        let call = async move {
            Ok(redis::pipe()
                .get(record_key)
                .pttl(record_key)
                .hgetall(duplicates_key)
                .query_async(&mut connection)
                .await?)
        };
        with_timeout(self.timeout, call).await
    }

    /// What `group` holds pending on `stream` (`XPENDING` summary: the count and the oldest
    /// pending entry's ID); zero and `None` when the group or stream does not exist.
    pub async fn pending_summary(
        &self,
        stream: &str,
        group: &str,
    ) -> Result<(u64, Option<String>), StoreError> {
        let mut connection = self.connection.clone();
        let call = async move {
            let reply: redis::RedisResult<Value> = redis::cmd("XPENDING")
                .arg(stream)
                .arg(group)
                .query_async(&mut connection)
                .await;
            let Ok(Value::Array(fields)) = reply else {
                return Ok((0, None));
            };
            let count = match fields.first() {
                Some(Value::Int(n)) => u64::try_from(*n).unwrap_or(0),
                _ => 0,
            };
            Ok((count, fields.get(1).and_then(text)))
        };
        with_timeout(self.timeout, call).await
    }

    /// Adds `counts` (field, amount) into the hash at `key` and keeps it `ttl_s` seconds: one
    /// pipeline, the one write a daemon makes per count interval.
    pub async fn add_counts(
        &self,
        key: &str,
        counts: &[(String, u64)],
        ttl_s: u64,
    ) -> Result<(), StoreError> {
        let mut connection = self.connection.clone();
        let call = async move {
            let mut pipe = redis::pipe();
            for (field, amount) in counts {
                pipe.cmd("HINCRBY")
                    .arg(key)
                    .arg(field)
                    .arg(*amount)
                    .ignore();
            }
            pipe.cmd("EXPIRE").arg(key).arg(ttl_s).ignore();
            pipe.query_async::<()>(&mut connection).await?;
            Ok(())
        };
        with_timeout(self.timeout, call).await
    }

    /// `HGETALL` of each key, in one pipeline (the keys share a hash tag, so one slot).
    pub async fn read_counts(
        &self,
        keys: &[String],
    ) -> Result<Vec<Vec<(String, u64)>>, StoreError> {
        let mut connection = self.connection.clone();
        let call = async move {
            let mut pipe = redis::pipe();
            for key in keys {
                pipe.cmd("HGETALL").arg(key);
            }
            let reply: Vec<Vec<(String, u64)>> = pipe.query_async(&mut connection).await?;
            Ok(reply)
        };
        with_timeout(self.timeout, call).await
    }

    /// `XADD stream MAXLEN ~ max * field value…`: appends to a bounded stream.
    pub async fn append_capped(
        &self,
        stream: &str,
        max: u64,
        fields: &[(&str, String)],
    ) -> Result<String, StoreError> {
        let mut connection = self.connection.clone();
        let call = async move {
            let mut command = redis::cmd("XADD");
            command.arg(stream).arg("MAXLEN").arg("~").arg(max).arg("*");
            for (name, value) in fields {
                command.arg(*name).arg(value.as_str());
            }
            Ok(command.query_async::<String>(&mut connection).await?)
        };
        with_timeout(self.timeout, call).await
    }

    /// `SET key 1 NX PX ttl_ms`: true the first time within `ttl_ms` (a write done once).
    pub async fn set_once(&self, key: &str, ttl_ms: u64) -> Result<bool, StoreError> {
        let mut connection = self.connection.clone();
        let call = async move {
            let reply: Option<String> = redis::cmd("SET")
                .arg(key)
                .arg(1)
                .arg("NX")
                .arg("PX")
                .arg(ttl_ms)
                .query_async(&mut connection)
                .await?;
            Ok(reply.is_some())
        };
        with_timeout(self.timeout, call).await
    }
}

fn text(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::Int(n) => Some(n.to_string()),
        _ => None,
    }
}

/// The `last-delivered-id` of `group` in an `XINFO GROUPS` reply.
fn last_delivered(groups: &Value, group: &str) -> Option<String> {
    let Value::Array(groups) = groups else {
        return None;
    };
    groups.iter().find_map(|info| {
        let get = |name: &str| match info {
            Value::Array(flat) => flat
                .chunks(2)
                .find(|kv| kv.first().and_then(text).as_deref() == Some(name))
                .and_then(|kv| kv.get(1).and_then(text)),
            Value::Map(pairs) => pairs
                .iter()
                .find(|(k, _)| text(k).as_deref() == Some(name))
                .and_then(|(_, v)| text(v)),
            _ => None,
        };
        (get("name").as_deref() == Some(group))
            .then(|| get("last-delivered-id"))
            .flatten()
    })
}

/// One `[id, consumer, idle, deliveries]` of an extended `XPENDING` reply.
fn pending_entry(item: &Value) -> Option<PendingEntry> {
    let Value::Array(fields) = item else {
        return None;
    };
    let int = |i: usize| match fields.get(i) {
        Some(Value::Int(n)) => u64::try_from(*n).ok(),
        _ => None,
    };
    Some(PendingEntry {
        consumer: fields.get(1).and_then(text)?,
        idle_ms: int(2)?,
        deliveries: int(3)?,
    })
}
