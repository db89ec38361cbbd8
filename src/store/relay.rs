//! The relay's scripts: each changes a consumer group and its streams in one atomic step.
//!
//! Every key a call touches carries one source's hash tag, so a call lives in one Cluster slot.
//! Ownership is checked inside the scripts (`XPENDING` for the ID names this consumer), so a
//! relay whose entry was taken over never refreshes, retries or dead-letters it.

use redis::Value;

use super::{with_timeout, RedisStore, Script, StoreError};

/// Resets the idle time of the entries this consumer still owns; returns those IDs.
/// KEYS[1] = stream; ARGV = group, consumer, id…
const REFRESH: &str = r#"
local held = {}
for i = 3, #ARGV do
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1)
  if #p == 1 and p[1][2] == ARGV[2] then
    redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[i], 'JUSTID')
    held[#held + 1] = ARGV[i]
  end
end
return held
"#;

/// Records that attempt ARGV[4] of an owned entry begins (its delivery count, which survives a
/// restart and a takeover); 0 when the entry is no longer this consumer's.
/// KEYS[1] = stream; ARGV = group, consumer, id, attempt.
const BEGIN: &str = r#"
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[3], ARGV[3], 1)
if #p == 0 or p[1][2] ~= ARGV[2] then
  return 0
end
redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[3], 'RETRYCOUNT', ARGV[4], 'JUSTID')
return 1
"#;

/// Acknowledges an entry; on a replay stream (ARGV[3] = '1') also deletes it, as only one
/// group reads it. KEYS[1] = stream; ARGV = group, id, delete.
const ACK: &str = r#"
local n = redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
if ARGV[3] == '1' then
  redis.call('XDEL', KEYS[1], ARGV[2])
end
return n
"#;

/// The fields a dead letter adds; a copy back to a route leaves them out (but `entry_id`).
const COPY_HELPERS: &str = r#"
local meta = {route = true, attempts = true, last_status = true, last_error = true,
  dead_lettered_at = true, entry_id = true}
local function original(id, fields)
  local out, entry_id = {}, id
  for i = 1, #fields, 2 do
    if fields[i] == 'entry_id' then
      entry_id = fields[i + 1]
    elseif not meta[fields[i]] then
      out[#out + 1] = fields[i]
      out[#out + 1] = fields[i + 1]
    end
  end
  return out, entry_id
end
"#;

/// Copies an owned entry to the dead-letter stream with why, and acknowledges it; 0 when the
/// entry is no longer this consumer's. KEYS[1] = stream, KEYS[2] = dead letters;
/// ARGV = group, consumer, id, route, attempts, last_status, last_error, now ms, delete.
const DEAD_LETTER: &str = r#"
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[3], ARGV[3], 1)
if #p == 0 or p[1][2] ~= ARGV[2] then
  return 0
end
local e = redis.call('XRANGE', KEYS[1], ARGV[3], ARGV[3])
local fields, entry_id = {}, ARGV[3]
if #e == 1 then
  fields, entry_id = original(ARGV[3], e[1][2])
end
for _, kv in ipairs({{'route', ARGV[4]}, {'entry_id', entry_id}, {'attempts', ARGV[5]},
    {'last_status', ARGV[6]}, {'last_error', ARGV[7]}, {'dead_lettered_at', ARGV[8]}}) do
  fields[#fields + 1] = kv[1]
  fields[#fields + 1] = kv[2]
end
redis.call('XADD', KEYS[2], '*', unpack(fields))
redis.call('XACK', KEYS[1], ARGV[1], ARGV[3])
if ARGV[9] == '1' then
  redis.call('XDEL', KEYS[1], ARGV[3])
end
return 1
"#;

/// Copies entries to a route's replay stream (their original fields and `entry_id`), deleting
/// each from its stream when ARGV[1] = '1'; returns the IDs copied (a missing one is skipped).
/// KEYS[1] = from, KEYS[2] = replay stream; ARGV = delete, id…
const COPY: &str = r#"
local copied = {}
for i = 2, #ARGV do
  local e = redis.call('XRANGE', KEYS[1], ARGV[i], ARGV[i])
  if #e == 1 then
    local fields, entry_id = original(ARGV[i], e[1][2])
    fields[#fields + 1] = 'entry_id'
    fields[#fields + 1] = entry_id
    redis.call('XADD', KEYS[2], '*', unpack(fields))
    if ARGV[1] == '1' then
      redis.call('XDEL', KEYS[1], ARGV[i])
    end
    copied[#copied + 1] = ARGV[i]
  end
end
return copied
"#;

/// Trims a stream to the oldest entry some group still needs: pending, or after its
/// last-delivered ID. A stream without groups is left alone (nothing says what is needed).
/// KEYS[1] = stream; returns the number of entries removed.
const TRIM: &str = r#"
local groups = redis.pcall('XINFO', 'GROUPS', KEYS[1])
if type(groups) ~= 'table' or groups.err or #groups == 0 then
  return 0
end
local function parse(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return tonumber(ms), tonumber(seq)
end
local best_ms, best_seq
local function consider(ms, seq)
  if best_ms == nil or ms < best_ms or (ms == best_ms and seq < best_seq) then
    best_ms, best_seq = ms, seq
  end
end
for _, g in ipairs(groups) do
  local info = {}
  for i = 1, #g, 2 do
    info[g[i]] = g[i + 1]
  end
  local ms, seq = parse(info['last-delivered-id'])
  consider(ms, seq + 1)
  if tonumber(info['pending']) > 0 then
    local first = redis.call('XPENDING', KEYS[1], info['name'])[2]
    local pms, pseq = parse(first)
    consider(pms, pseq)
  end
end
return redis.call('XTRIM', KEYS[1], 'MINID', string.format('%d-%d', best_ms, best_seq))
"#;

/// The relay's scripts, loaded once per process.
pub struct RelayScripts {
    refresh: Script,
    begin: Script,
    ack: Script,
    dead_letter: Script,
    copy: Script,
    trim: Script,
}

/// Why an entry goes to the dead-letter stream.
pub struct DeadLetter<'a> {
    pub route: &'a str,
    pub attempts: u32,
    pub last_status: Option<u16>,
    pub last_error: &'a str,
    pub now_ms: u64,
}

impl Default for RelayScripts {
    fn default() -> Self {
        Self::new()
    }
}

impl RelayScripts {
    pub fn new() -> Self {
        Self {
            refresh: Script::new(REFRESH),
            begin: Script::new(BEGIN),
            ack: Script::new(ACK),
            dead_letter: Script::new(&format!("{COPY_HELPERS}{DEAD_LETTER}")),
            copy: Script::new(&format!("{COPY_HELPERS}{COPY}")),
            trim: Script::new(TRIM),
        }
    }

    pub fn all(&self) -> [&Script; 6] {
        [
            &self.refresh,
            &self.begin,
            &self.ack,
            &self.dead_letter,
            &self.copy,
            &self.trim,
        ]
    }

    /// Keeps `ids` fresh for `consumer`; returns those it still owns.
    pub async fn refresh(
        &self,
        store: &RedisStore,
        stream: &str,
        group: &str,
        consumer: &str,
        ids: &[String],
    ) -> Result<Vec<String>, StoreError> {
        let mut call = store.script(&self.refresh, 1);
        call.arg(stream).arg(group).arg(consumer).arg(ids);
        with_timeout(store.timeout(), call.invoke()).await
    }

    /// Records the start of `attempt`; false when the entry is no longer `consumer`'s.
    pub async fn begin(
        &self,
        store: &RedisStore,
        stream: &str,
        group: &str,
        consumer: &str,
        id: &str,
        attempt: u32,
    ) -> Result<bool, StoreError> {
        let mut call = store.script(&self.begin, 1);
        call.arg(stream)
            .arg(group)
            .arg(consumer)
            .arg(id)
            .arg(attempt);
        with_timeout(store.timeout(), call.invoke::<i64>())
            .await
            .map(|n| n == 1)
    }

    /// Acknowledges `id` (and deletes it when `delete`, for replay streams).
    pub async fn ack(
        &self,
        store: &RedisStore,
        stream: &str,
        group: &str,
        id: &str,
        delete: bool,
    ) -> Result<(), StoreError> {
        let mut call = store.script(&self.ack, 1);
        call.arg(stream)
            .arg(group)
            .arg(id)
            .arg(if delete { "1" } else { "0" });
        with_timeout(store.timeout(), call.invoke::<Value>())
            .await
            .map(drop)
    }

    /// Dead-letters an owned entry and acknowledges it, atomically; false when not owned.
    #[allow(clippy::too_many_arguments)]
    pub async fn dead_letter(
        &self,
        store: &RedisStore,
        stream: &str,
        dead_letters: &str,
        group: &str,
        consumer: &str,
        id: &str,
        why: &DeadLetter<'_>,
        delete: bool,
    ) -> Result<bool, StoreError> {
        let mut call = store.script(&self.dead_letter, 2);
        call.arg(stream)
            .arg(dead_letters)
            .arg(group)
            .arg(consumer)
            .arg(id)
            .arg(why.route)
            .arg(why.attempts)
            .arg(why.last_status.map(|s| s.to_string()).unwrap_or_default())
            .arg(why.last_error)
            .arg(why.now_ms)
            .arg(if delete { "1" } else { "0" });
        with_timeout(store.timeout(), call.invoke::<i64>())
            .await
            .map(|n| n == 1)
    }

    /// Copies `ids` from `from` to a route's replay stream; deletes them from `from` when
    /// `delete`. Returns the IDs found and copied.
    pub async fn copy(
        &self,
        store: &RedisStore,
        from: &str,
        replays: &str,
        ids: &[String],
        delete: bool,
    ) -> Result<Vec<String>, StoreError> {
        let mut call = store.script(&self.copy, 2);
        call.arg(from)
            .arg(replays)
            .arg(if delete { "1" } else { "0" })
            .arg(ids);
        with_timeout(store.timeout(), call.invoke()).await
    }

    /// Trims `stream` to what its groups still need; the number of entries removed.
    pub async fn trim(&self, store: &RedisStore, stream: &str) -> Result<u64, StoreError> {
        let mut call = store.script(&self.trim, 1);
        call.arg(stream);
        with_timeout(store.timeout(), call.invoke()).await
    }
}
