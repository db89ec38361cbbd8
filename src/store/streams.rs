//! Consumer-group commands for the relay, as `RedisStore` methods, and the stream entry type.
//!
//! Blocking reads (`XREADGROUP … BLOCK`) hold a connection for as long as they block, so they
//! run on a connection of their own ([`RedisStore::dedicated`]); every other call shares the
//! store's multiplexed connection under the store timeout.

use std::time::Duration;

use bytes::Bytes;
use redis::Value;

use super::connection::Connection;
use super::{with_timeout, RedisStore, StoreError};

/// One entry of a stream: its ID and its fields in order. A value is the reply's own buffer,
/// shared rather than copied: a relay attempt sends the body as it was read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamEntry {
    pub id: String,
    pub fields: Vec<(String, Bytes)>,
}

impl StreamEntry {
    /// The raw value of field `name`.
    pub fn field(&self, name: &str) -> Option<&[u8]> {
        self.fields
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| &v[..])
    }

    /// Field `name`'s value, shared (empty when absent).
    pub fn shared(&self, name: &str) -> Bytes {
        self.fields
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    }

    /// Field `name` as text (lossy), empty when absent.
    pub fn text(&self, name: &str) -> String {
        self.field(name)
            .map(|v| String::from_utf8_lossy(v).into_owned())
            .unwrap_or_default()
    }
}

/// Whether an error says the group or its stream is gone (`NOGROUP`, or a blocked read whose
/// stream was deleted: `UNBLOCKED … no longer exists`), which the relay answers by recreating it.
pub fn is_missing_group(error: &StoreError) -> bool {
    let StoreError::Redis(error) = error else {
        return false;
    };
    let text = error.to_string();
    error.code() == Some("NOGROUP") || text.contains("NOGROUP") || text.contains("no longer exists")
}

fn text(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}

/// `[[id, [field, value, …]], …]`; an entry whose fields are nil (deleted) has none. The
/// values are moved out of the reply, not copied.
pub(super) fn entries(value: Value) -> Result<Vec<StreamEntry>, StoreError> {
    let Value::Array(items) = value else {
        return Ok(Vec::new());
    };
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        let Value::Array(pair) = item else {
            return Err(StoreError::Protocol(format!("stream entry {item:?}")));
        };
        let mut pair = pair.into_iter();
        let id = pair.next().as_ref().and_then(text);
        let Some(id) = id else {
            return Err(StoreError::Protocol(
                "stream entry without an ID".to_owned(),
            ));
        };
        let mut fields = Vec::new();
        if let Some(Value::Array(flat)) = pair.next() {
            fields.reserve(flat.len() / 2);
            let mut flat = flat.into_iter();
            while let (Some(k), Some(v)) = (flat.next(), flat.next()) {
                if let (Value::BulkString(k), Value::BulkString(v)) = (k, v) {
                    let name = String::from_utf8(k)
                        .unwrap_or_else(|k| String::from_utf8_lossy(k.as_bytes()).into_owned());
                    fields.push((name, Bytes::from(v)));
                }
            }
        }
        out.push(StreamEntry { id, fields });
    }
    Ok(out)
}

impl RedisStore {
    /// A store of its own connection to the same topology, for blocking reads of up to `block`:
    /// its calls may take `store.timeout` + `block` before the client gives up on them.
    pub async fn dedicated(&self, block: Duration) -> Result<RedisStore, StoreError> {
        let mut settings = (*self.settings).clone();
        settings.timeout = crate::config::HumanDuration(self.timeout + block);
        let connection = Connection::connect(&settings)
            .await
            .map_err(|error| StoreError::Protocol(crate::util::error_chain(&error)))?;
        Ok(RedisStore {
            connection,
            timeout: self.timeout,
            settings: std::sync::Arc::clone(&self.settings),
        })
    }

    /// `XGROUP CREATE stream group start MKSTREAM`; false when the group already exists.
    pub async fn create_group(
        &self,
        stream: &str,
        group: &str,
        start: &str,
    ) -> Result<bool, StoreError> {
        let mut connection = self.connection.clone();
        let call = async move {
            let reply: redis::RedisResult<Value> = redis::cmd("XGROUP")
                .arg("CREATE")
                .arg(stream)
                .arg(group)
                .arg(start)
                .arg("MKSTREAM")
                .query_async(&mut connection)
                .await;
            match reply {
                Ok(_) => Ok(true),
                Err(e) if e.code() == Some("BUSYGROUP") => Ok(false),
                Err(e) => Err(e.into()),
            }
        };
        with_timeout(self.timeout, call).await
    }

    /// `XREADGROUP GROUP group consumer COUNT count BLOCK block STREAMS stream >`: new entries,
    /// waiting up to `block` for one. Call on a [`RedisStore::dedicated`] store.
    pub async fn read_group(
        &self,
        stream: &str,
        group: &str,
        consumer: &str,
        count: usize,
        block: Duration,
    ) -> Result<Vec<StreamEntry>, StoreError> {
        let mut connection = self.connection.clone();
        let call = async move {
            let reply: Value = redis::cmd("XREADGROUP")
                .arg("GROUP")
                .arg(group)
                .arg(consumer)
                .arg("COUNT")
                .arg(count)
                .arg("BLOCK")
                .arg(block.as_millis() as u64)
                .arg("STREAMS")
                .arg(stream)
                .arg(">")
                .query_async(&mut connection)
                .await?;
            match reply {
                Value::Array(streams) => match streams.into_iter().next() {
                    Some(Value::Array(pair)) => {
                        entries(pair.into_iter().nth(1).unwrap_or(Value::Nil))
                    }
                    _ => Ok(Vec::new()),
                },
                _ => Ok(Vec::new()),
            }
        };
        with_timeout(self.timeout + block, call).await
    }

    /// `XAUTOCLAIM stream group consumer min_idle cursor COUNT count`: entries idle that long
    /// (their relay stopped), now this consumer's; the next cursor; and the IDs of pending
    /// entries whose data was deleted.
    pub async fn autoclaim(
        &self,
        stream: &str,
        group: &str,
        consumer: &str,
        min_idle: Duration,
        cursor: &str,
        count: usize,
    ) -> Result<(String, Vec<StreamEntry>, Vec<String>), StoreError> {
        let mut connection = self.connection.clone();
        let call = async move {
            let reply: Vec<Value> = redis::cmd("XAUTOCLAIM")
                .arg(stream)
                .arg(group)
                .arg(consumer)
                .arg(min_idle.as_millis() as u64)
                .arg(cursor)
                .arg("COUNT")
                .arg(count)
                .query_async(&mut connection)
                .await?;
            let mut reply = reply.into_iter();
            let next = reply.next().as_ref().and_then(text);
            let next = next.unwrap_or_else(|| "0-0".into());
            let claimed = entries(reply.next().unwrap_or(Value::Nil))?;
            let deleted = match reply.next() {
                Some(Value::Array(ids)) => ids.iter().filter_map(text).collect(),
                _ => Vec::new(),
            };
            Ok((next, claimed, deleted))
        };
        with_timeout(self.timeout, call).await
    }

    /// The delivery count of each of `consumer`'s pending entries from `first` to `last`.
    pub async fn delivery_counts(
        &self,
        stream: &str,
        group: &str,
        consumer: &str,
        first: &str,
        last: &str,
        count: usize,
    ) -> Result<Vec<(String, u64)>, StoreError> {
        let mut connection = self.connection.clone();
        let call = async move {
            let reply: Vec<(String, String, u64, u64)> = redis::cmd("XPENDING")
                .arg(stream)
                .arg(group)
                .arg(first)
                .arg(last)
                .arg(count)
                .arg(consumer)
                .query_async(&mut connection)
                .await?;
            Ok(reply.into_iter().map(|(id, _, _, n)| (id, n)).collect())
        };
        with_timeout(self.timeout, call).await
    }

    /// Entries `start..=end` (`-`/`+` for the ends), at most `count`.
    pub async fn range(
        &self,
        stream: &str,
        start: &str,
        end: &str,
        count: usize,
    ) -> Result<Vec<StreamEntry>, StoreError> {
        self.ranged("XRANGE", stream, (start, end), count).await
    }

    /// `XRANGE` or `XREVRANGE` of `stream` between `bounds` (in the command's order), at most
    /// `count` entries.
    pub(super) async fn ranged(
        &self,
        command: &str,
        stream: &str,
        (from, to): (&str, &str),
        count: usize,
    ) -> Result<Vec<StreamEntry>, StoreError> {
        let mut connection = self.connection.clone();
        let call = async move {
            let reply: Value = redis::cmd(command)
                .arg(stream)
                .arg(from)
                .arg(to)
                .arg("COUNT")
                .arg(count)
                .query_async(&mut connection)
                .await?;
            entries(reply)
        };
        with_timeout(self.timeout, call).await
    }

    /// `XADD stream * field value…`: the new entry's ID.
    pub async fn append(
        &self,
        stream: &str,
        fields: &[(String, Bytes)],
    ) -> Result<String, StoreError> {
        let mut connection = self.connection.clone();
        let call = async move {
            let mut command = redis::cmd("XADD");
            command.arg(stream).arg("*");
            for (name, value) in fields {
                command.arg(name).arg(&value[..]);
            }
            Ok(command.query_async::<String>(&mut connection).await?)
        };
        with_timeout(self.timeout, call).await
    }

    /// `XDEL stream id…`: how many were deleted.
    pub async fn delete_entries(&self, stream: &str, ids: &[String]) -> Result<u64, StoreError> {
        let mut connection = self.connection.clone();
        let call = async move {
            Ok(redis::cmd("XDEL")
                .arg(stream)
                .arg(ids)
                .query_async::<u64>(&mut connection)
                .await?)
        };
        with_timeout(self.timeout, call).await
    }

    /// What `group` has not acknowledged on `stream`: unread (`lag`) plus pending; `None` when
    /// the group or stream does not exist or Redis cannot say.
    pub async fn group_backlog(
        &self,
        stream: &str,
        group: &str,
    ) -> Result<Option<u64>, StoreError> {
        let mut connection = self.connection.clone();
        let call = async move {
            let reply: redis::RedisResult<Vec<Value>> = redis::cmd("XINFO")
                .arg("GROUPS")
                .arg(stream)
                .query_async(&mut connection)
                .await;
            let Ok(groups) = reply else {
                return Ok(None);
            };
            for info in groups {
                let Value::Array(flat) = info else { continue };
                let get = |name: &str| {
                    flat.chunks(2)
                        .find(|kv| kv.first().and_then(text).as_deref() == Some(name))
                        .and_then(|kv| kv.get(1).cloned())
                };
                if get("name").as_ref().and_then(text).as_deref() != Some(group) {
                    continue;
                }
                let int = |v: Option<Value>| match v {
                    Some(Value::Int(n)) => u64::try_from(n).ok(),
                    _ => None,
                };
                let pending = int(get("pending")).unwrap_or(0);
                return Ok(int(get("lag")).map(|lag| lag + pending));
            }
            Ok(None)
        };
        with_timeout(self.timeout, call).await
    }
}
