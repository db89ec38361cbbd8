//! The relay's scripts: each changes a consumer group and its streams in one atomic step.
//!
//! A script's keys share one hash tag, so a script lives in one Cluster slot. The keys of one
//! call may not: a partitioned source's streams carry the partition's tag (`{<source>.<k>}`)
//! while its dead letters and replay streams carry the source's (`{<source>}`). Such a call
//! runs in steps, each on one slot ([`same_slot`] decides): dead-lettering checks ownership and
//! reads the entry, appends the dead letter, then acknowledges if still owned — a relay that
//! dies between the last two leaves the entry pending, and its successor may dead-letter it a
//! second time (a duplicate dead letter, never a lost entry).
//! Ownership is checked inside the scripts (`XPENDING` for the ID names this consumer), so a
//! relay whose entry was taken over never refreshes, retries or dead-letters it.

use bytes::Bytes;
use redis::Value;

use super::{with_timeout, RedisStore, Script, StoreError};

/// Resets the idle time of the entries this consumer still owns; returns those IDs.
/// KEYS[1] = stream; ARGV = group, consumer, id…
const REFRESH: &str = include_str!("relay_scripts/refresh.lua");

/// Records that attempt ARGV[4] of an owned entry begins (its delivery count, which survives a
/// restart and a takeover); 0 when the entry is no longer this consumer's.
/// KEYS[1] = stream; ARGV = group, consumer, id, attempt.
const BEGIN: &str = include_str!("relay_scripts/begin.lua");

/// Acknowledges an entry; on a replay stream (ARGV[3] = '1') also deletes it, as only one
/// group reads it. KEYS[1] = stream; ARGV = group, id, delete.
const ACK: &str = include_str!("relay_scripts/ack.lua");

/// The fields a dead letter adds; a copy back to a route leaves them out (but `entry_id`).
const COPY_HELPERS: &str = include_str!("relay_scripts/copy_helpers.lua");

/// Copies an owned entry to the dead-letter stream with why, and acknowledges it; 0 when the
/// entry is no longer this consumer's. KEYS[1] = stream, KEYS[2] = dead letters;
/// ARGV = group, consumer, id, route, attempts, last_status, last_error, now ms, delete.
const DEAD_LETTER: &str = include_str!("relay_scripts/dead_letter.lua");

/// The entry's fields if it is still this consumer's (an empty reply when it is not, `{id}`
/// alone when its data was deleted): the first step of a dead letter across slots.
/// KEYS[1] = stream; ARGV = group, consumer, id.
const OWNED_ENTRY: &str = include_str!("relay_scripts/owned_entry.lua");

/// Acknowledges an entry if it is still this consumer's (and deletes it when ARGV[4] = '1');
/// 1 when it was. KEYS[1] = stream; ARGV = group, consumer, id, delete.
const ACK_OWNED: &str = include_str!("relay_scripts/ack_owned.lua");

/// The fields a dead letter adds (and a copy leaves out, but `entry_id`), as `COPY_HELPERS`.
const META: [&str; 6] = [
    "route",
    "attempts",
    "last_status",
    "last_error",
    "dead_lettered_at",
    "entry_id",
];

/// An entry's own fields without the dead-letter ones, and the ID of the original stream entry
/// (its `entry_id` field when it has one, else `id`): the Rust twin of `COPY_HELPERS`.
fn original(id: &str, fields: &[(String, Bytes)]) -> (Vec<(String, Bytes)>, String) {
    let mut entry_id = id.to_owned();
    let mut out = Vec::with_capacity(fields.len());
    for (name, value) in fields {
        if name == "entry_id" {
            entry_id = String::from_utf8_lossy(value).into_owned();
        } else if !META.contains(&name.as_str()) {
            out.push((name.clone(), value.clone()));
        }
    }
    (out, entry_id)
}

/// A key's hash tag as Redis Cluster computes it: the text between the first `{` and the next
/// `}` when not empty, else the whole key.
fn hash_tag(key: &str) -> &str {
    if let Some(open) = key.find('{') {
        if let Some(len) = key[open + 1..].find('}') {
            if len > 0 {
                return &key[open + 1..open + 1 + len];
            }
        }
    }
    key
}

/// Whether two keys are in one Cluster slot by construction (the same hash tag), so that one
/// script may touch both on every topology.
pub fn same_slot(a: &str, b: &str) -> bool {
    hash_tag(a) == hash_tag(b)
}

/// Copies entries to a route's replay stream (their original fields and `entry_id`), deleting
/// each from its stream when ARGV[1] = '1'; returns the IDs copied (a missing one is skipped).
/// KEYS[1] = from, KEYS[2] = replay stream; ARGV = delete, id…
const COPY: &str = include_str!("relay_scripts/copy.lua");

/// Trims a stream to the oldest entry some group still needs: pending, or after its
/// last-delivered ID. A stream without groups is left alone (nothing says what is needed).
/// KEYS[1] = stream; returns the number of entries removed.
const TRIM: &str = include_str!("relay_scripts/trim.lua");

/// The relay's scripts, loaded once per process.
pub struct RelayScripts {
    refresh: Script,
    begin: Script,
    ack: Script,
    dead_letter: Script,
    copy: Script,
    trim: Script,
    owned_entry: Script,
    ack_owned: Script,
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
            owned_entry: Script::new(OWNED_ENTRY),
            ack_owned: Script::new(ACK_OWNED),
        }
    }

    pub fn all(&self) -> [&Script; 8] {
        [
            &self.refresh,
            &self.begin,
            &self.ack,
            &self.dead_letter,
            &self.copy,
            &self.trim,
            &self.owned_entry,
            &self.ack_owned,
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

    /// Dead-letters an owned entry and acknowledges it; false when not owned. Atomic when the
    /// stream and the dead letters share a slot, else in three steps (see the module's doc).
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
        if same_slot(stream, dead_letters) {
            return self
                .dead_letter_in_one_slot(
                    store,
                    stream,
                    dead_letters,
                    group,
                    consumer,
                    id,
                    why,
                    delete,
                )
                .await;
        }
        let mut call = store.script(&self.owned_entry, 1);
        call.arg(stream).arg(group).arg(consumer).arg(id);
        let reply: Value = with_timeout(store.timeout(), call.invoke()).await?;
        let Value::Array(reply) = reply else {
            return Err(StoreError::Protocol(format!("owned entry {reply:?}")));
        };
        if reply.is_empty() {
            return Ok(false);
        }
        let entry = super::streams::entries(Value::Array(vec![Value::Array(reply)]))?;
        let fields = entry.first().map(|e| e.fields.as_slice()).unwrap_or(&[]);
        let (mut fields, entry_id) = original(id, fields);
        let status = why.last_status.map(|s| s.to_string()).unwrap_or_default();
        for (name, value) in [
            ("route", why.route.to_owned()),
            ("entry_id", entry_id),
            ("attempts", why.attempts.to_string()),
            ("last_status", status),
            ("last_error", why.last_error.to_owned()),
            ("dead_lettered_at", why.now_ms.to_string()),
        ] {
            fields.push((name.to_owned(), Bytes::from(value)));
        }
        store.append(dead_letters, &fields).await?;
        let mut call = store.script(&self.ack_owned, 1);
        call.arg(stream)
            .arg(group)
            .arg(consumer)
            .arg(id)
            .arg(if delete { "1" } else { "0" });
        // Not owned any more: another relay took the entry over since the first step, and the
        // dead letter just written is a duplicate of what it may write (at least once).
        with_timeout(store.timeout(), call.invoke::<i64>())
            .await
            .map(|n| n == 1)
    }

    #[allow(clippy::too_many_arguments)]
    async fn dead_letter_in_one_slot(
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
    /// `delete`. Returns the IDs found and copied. Atomic when both keys share a slot; else
    /// each entry is read, then appended, then (when `delete`) deleted, so a crash midway can
    /// copy an entry twice but never lose one.
    pub async fn copy(
        &self,
        store: &RedisStore,
        from: &str,
        replays: &str,
        ids: &[String],
        delete: bool,
    ) -> Result<Vec<String>, StoreError> {
        if !same_slot(from, replays) {
            let mut copied = Vec::new();
            for id in ids {
                let Some(entry) = store.range(from, id, id, 1).await?.into_iter().next() else {
                    continue;
                };
                let (mut fields, entry_id) = original(id, &entry.fields);
                fields.push(("entry_id".to_owned(), Bytes::from(entry_id)));
                store.append(replays, &fields).await?;
                if delete {
                    store.delete_entries(from, std::slice::from_ref(id)).await?;
                }
                copied.push(id.clone());
            }
            return Ok(copied);
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_tags_follow_the_cluster_rule() {
        assert_eq!(hash_tag("hookonce:{stripe.2}:events"), "stripe.2");
        assert_eq!(hash_tag("hookonce:{stripe}:dlq:billing"), "stripe");
        assert_eq!(hash_tag("a{}b{c}"), "a{}b{c}");
        assert_eq!(hash_tag("plain"), "plain");
        assert!(same_slot(
            "hookonce:{stripe}:events",
            "hookonce:{stripe}:dlq:b"
        ));
        assert!(!same_slot(
            "hookonce:{stripe.0}:events",
            "hookonce:{stripe}:dlq:b"
        ));
    }

    #[test]
    fn a_copy_keeps_the_entry_fields_and_the_first_entry_id() {
        let text = |pairs: &[(&str, &str)]| -> Vec<(String, Bytes)> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), Bytes::copy_from_slice(v.as_bytes())))
                .collect()
        };
        let letter = text(&[
            ("event_id", "evt_1"),
            ("body", "{}"),
            ("route", "billing"),
            ("entry_id", "5-0"),
            ("attempts", "3"),
        ]);
        let (fields, entry_id) = original("9-0", &letter);
        assert_eq!(fields, text(&[("event_id", "evt_1"), ("body", "{}")]));
        assert_eq!(entry_id, "5-0");
        assert_eq!(original("7-1", &text(&[("a", "b")])).1, "7-1");
    }
}
