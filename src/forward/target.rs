//! [`Target`]: where one source's events go — its record keys, its stream(s), its dedup window —
//! and, for a source with `partitions = N`, which partition an event belongs to.
//!
//! A partition is one hash tag. With N = 1 the source's keys carry `{<source>}`, exactly as before
//! partitions existed; with N > 1, partition k carries `{<source>.<k>}`, so that a cluster spreads
//! one hot source's records and streams over N slots (and so over several masters) while every
//! script still touches one slot. The partition of an event is
//! `u64::from_be_bytes(first 8 bytes of SHA-256(event_id)) % N`, stable across processes and
//! versions, so every delivery of one event meets the same record. A source with `body_dedup`
//! hashes the payload fingerprint instead: its event record and its body record must meet in one
//! script, so both follow the payload, and a replay under a fresh ID lands where the original's
//! body record is.

use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::config::{ConfigError, Settings};
use crate::provider_defaults;
use crate::store::Fingerprint;

/// Where one source's events go and how long they are remembered. Built once per source.
#[derive(Debug, Clone)]
pub struct Target {
    pub source: String,
    pub provider: &'static str,
    pub dedup_ttl: Duration,
    /// One entry per partition, at least one; partition k is `partitions[k]`.
    partitions: Vec<Partition>,
    key_prefix: String,
    /// `sources.NAME.stream`, allowed only for an unpartitioned source.
    custom_stream: Option<String>,
    body_dedup: bool,
}

/// The keys of one partition: everything under one hash tag.
#[derive(Debug, Clone)]
pub struct Partition {
    /// Key prefix of dedup records: `<prefix>:{<tag>}:d:` (the event ID follows verbatim).
    pub record_prefix: String,
    /// Redis Stream key: `<prefix>:{<tag>}:events` unless overridden.
    pub stream: String,
    /// Key prefix of body records, `<prefix>:{<tag>}:b:`, when the source has `body_dedup`.
    pub body_prefix: Option<String>,
}

impl Partition {
    fn new(key_prefix: &str, tag: &str, stream: Option<&str>, body_dedup: bool) -> Self {
        Self {
            record_prefix: format!("{key_prefix}:{{{tag}}}:d:"),
            stream: stream
                .map(str::to_owned)
                .unwrap_or_else(|| format!("{key_prefix}:{{{tag}}}:events")),
            body_prefix: body_dedup.then(|| format!("{key_prefix}:{{{tag}}}:b:")),
        }
    }

    /// The dedup record's key for one event ID.
    pub fn record_key(&self, event_id: &str) -> String {
        let mut key = String::with_capacity(self.record_prefix.len() + event_id.len());
        key.push_str(&self.record_prefix);
        key.push_str(event_id);
        key
    }

    /// The body record's key for one payload, when the source deduplicates on payloads.
    pub fn body_key(&self, fingerprint: &Fingerprint) -> Option<String> {
        self.body_prefix.as_ref().map(|prefix| {
            let mut key = String::with_capacity(prefix.len() + Fingerprint::BODY_KEY_LEN);
            key.push_str(prefix);
            fingerprint.push_body_key(&mut key);
            key
        })
    }

    /// The body record's key named by a stored record's fingerprint (with `body_dedup`, records
    /// carry the whole digest), for the commands that act on one event's records.
    pub fn body_key_of_record(&self, fingerprint: &str) -> Option<String> {
        let prefix = self.body_prefix.as_ref()?;
        (fingerprint.len() == Fingerprint::BODY_KEY_LEN).then(|| format!("{prefix}{fingerprint}"))
    }
}

impl Target {
    /// The target of the configured source `name`: the one place that turns a source's settings
    /// and its provider's defaults into its keys, streams and window. It builds no provider, so
    /// the relay and the commands that act on one source learn a source's keys without the
    /// webhook front.
    pub fn of_source(settings: &Settings, name: &str) -> Result<Self, ConfigError> {
        let Some(source) = settings.sources.get(name) else {
            return Err(ConfigError::invalid(
                format!("sources.{name}"),
                "no source of this name is configured",
            ));
        };
        let Some(defaults) = provider_defaults::lookup(&source.provider) else {
            let known: Vec<&str> = provider_defaults::PROVIDER_DEFAULTS
                .iter()
                .map(|d| d.name)
                .collect();
            return Err(ConfigError::invalid(
                format!("sources.{name}.provider"),
                format!(
                    "unknown provider {:?} (known: {})",
                    source.provider,
                    known.join(", ")
                ),
            ));
        };
        let dedup_ttl = source.dedup_ttl.map_or(defaults.dedup_ttl, |d| d.0);
        Ok(Target::new(
            &settings.store.key_prefix,
            name,
            defaults.name,
            source.stream.as_deref(),
            dedup_ttl,
        )
        .with_body_dedup(provider_defaults::body_dedup(source))
        .with_partitions(source.partition_count()))
    }

    /// An unpartitioned source: its keys carry the hash tag `{<source>}`.
    pub fn new(
        key_prefix: &str,
        source: &str,
        provider: &'static str,
        stream: Option<&str>,
        dedup_ttl: Duration,
    ) -> Self {
        Self {
            source: source.to_owned(),
            provider,
            dedup_ttl,
            partitions: vec![Partition::new(key_prefix, source, stream, false)],
            key_prefix: key_prefix.to_owned(),
            custom_stream: stream.map(str::to_owned),
            body_dedup: false,
        }
        .rebuilt(1)
    }

    /// Spreads the source over `n` partitions (`sources.NAME.partitions`); 1 keeps the source's
    /// own tag. Configuration refuses a custom `stream` with n > 1, so it is used only for n = 1.
    pub fn with_partitions(self, n: u32) -> Self {
        self.rebuilt(n.max(1))
    }

    /// Also deduplicates on the payload (`sources.NAME.body_dedup`): for schemes whose event ID
    /// is not signed, so that a captured body replayed under a fresh ID is a duplicate.
    pub fn with_body_dedup(mut self, on: bool) -> Self {
        self.body_dedup = on;
        let n = self.partitions.len() as u32;
        self.rebuilt(n)
    }

    fn rebuilt(mut self, n: u32) -> Self {
        self.partitions = if n == 1 {
            let stream = self.custom_stream.as_deref();
            vec![Partition::new(
                &self.key_prefix,
                &self.source,
                stream,
                self.body_dedup,
            )]
        } else {
            (0..n)
                .map(|k| {
                    let tag = format!("{}.{k}", self.source);
                    Partition::new(&self.key_prefix, &tag, None, self.body_dedup)
                })
                .collect()
        };
        self
    }

    /// How many partitions the source has (1 when unpartitioned).
    pub fn partition_count(&self) -> u32 {
        self.partitions.len() as u32
    }

    /// Every partition, partition k at index k.
    pub fn partitions(&self) -> &[Partition] {
        &self.partitions
    }

    /// Whether the source also deduplicates on payloads.
    pub fn body_dedup(&self) -> bool {
        self.body_dedup
    }

    /// Every stream of the source, partition 0 first.
    pub fn streams(&self) -> Vec<String> {
        self.partitions.iter().map(|p| p.stream.clone()).collect()
    }

    /// The partition index of one event: by its payload with `body_dedup`, else by its ID.
    pub fn partition_index(&self, event_id: &str, fingerprint: &Fingerprint) -> usize {
        let n = self.partitions.len() as u64;
        if n == 1 {
            return 0;
        }
        let hash = if self.body_dedup {
            fingerprint.leading_u64()
        } else {
            id_hash(event_id)
        };
        (hash % n) as usize
    }

    /// The partition of one event.
    pub fn partition_of(&self, event_id: &str, fingerprint: &Fingerprint) -> &Partition {
        &self.partitions[self.partition_index(event_id, fingerprint)]
    }

    /// The partitions that may hold the record of `event_id`: exactly one where the ID picks the
    /// partition; every one for a partitioned source with `body_dedup`, whose payload picks it
    /// (the operator commands look in each).
    pub fn partitions_for_id(&self, event_id: &str) -> Vec<&Partition> {
        if self.body_dedup && self.partitions.len() > 1 {
            return self.partitions.iter().collect();
        }
        let n = self.partitions.len() as u64;
        vec![&self.partitions[(id_hash(event_id) % n) as usize]]
    }

    /// A dedup record key for one event ID: its record's, unless the source is partitioned with
    /// `body_dedup`, where the payload picks the partition and this is the ID's partition — a
    /// stable per-event key all the same (the relay's `Idempotency-Key`).
    pub fn record_key(&self, event_id: &str) -> String {
        let n = self.partitions.len() as u64;
        let k = if n == 1 { 0 } else { id_hash(event_id) % n };
        self.partitions[k as usize].record_key(event_id)
    }

    /// The dedup record key of an event read from `stream`: the record lives in the partition
    /// whose stream it is (for a `body_dedup` source the payload chose it, which the ID alone
    /// cannot tell). An entry read elsewhere (a route's replay stream) falls back to
    /// [`Target::record_key`].
    pub fn record_key_in(&self, stream: &str, event_id: &str) -> String {
        match self.partitions.iter().find(|p| p.stream == stream) {
            Some(partition) => partition.record_key(event_id),
            None => self.record_key(event_id),
        }
    }

    /// The key at which the daemon records the source's partition count:
    /// `<prefix>:{<source>}:partitions`, under the source's own tag whatever N is.
    pub fn partitions_key(&self) -> String {
        format!("{}:{{{}}}:partitions", self.key_prefix, self.source)
    }
}

/// The documented partition hash of an event ID: the first 8 bytes of its SHA-256, big-endian.
pub fn id_hash(event_id: &str) -> u64 {
    let digest = Sha256::digest(event_id.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(first)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target() -> Target {
        Target::new("hookonce", "stripe", "stripe", None, Duration::from_secs(1))
    }

    #[test]
    fn keys_put_the_hash_tag_before_the_event_id() {
        let target = target();
        assert_eq!(target.record_key("evt_{x}"), "hookonce:{stripe}:d:evt_{x}");
        assert_eq!(target.streams(), ["hookonce:{stripe}:events"]);
        let fingerprint = Fingerprint::of(b"{}");
        let only = target.partition_of("evt", &fingerprint);
        assert_eq!(only.body_key(&fingerprint), None);
        let target = target.with_body_dedup(true);
        let body_key = target
            .partition_of("e", &fingerprint)
            .body_key(&fingerprint);
        assert_eq!(
            body_key.unwrap(),
            format!("hookonce:{{stripe}}:b:{}", fingerprint.body_key())
        );
    }

    #[test]
    fn one_partition_keeps_the_unpartitioned_keys() {
        let one = target().with_partitions(1);
        assert_eq!(one.streams(), ["hookonce:{stripe}:events"]);
        assert_eq!(one.record_key("e"), "hookonce:{stripe}:d:e");
        assert_eq!(one.partitions_key(), "hookonce:{stripe}:partitions");
    }

    #[test]
    fn the_partition_is_the_documented_hash_of_the_id() {
        let four = target().with_partitions(4);
        // SHA-256("evt_1") begins 7d4e5a76eae6d8c1, which is 1 mod 4 (checked with Python's
        // hashlib): the value any reimplementation of the formula must agree with.
        assert_eq!(id_hash("evt_1"), 0x7d4e_5a76_eae6_d8c1);
        let expected = 1;
        let fingerprint = Fingerprint::of(b"{}");
        assert_eq!(four.partition_index("evt_1", &fingerprint), expected);
        let key = four.record_key("evt_1");
        assert_eq!(key, format!("hookonce:{{stripe.{expected}}}:d:evt_1"));
        assert_eq!(four.streams()[3], "hookonce:{stripe.3}:events");
        assert_eq!(four.partitions_key(), "hookonce:{stripe}:partitions");
        let used: std::collections::HashSet<usize> = (0..64)
            .map(|i| four.partition_index(&format!("evt_{i}"), &fingerprint))
            .collect();
        assert_eq!(used.len(), 4, "64 IDs reach every partition");
    }

    #[test]
    fn with_body_dedup_the_payload_picks_the_partition() {
        let four = target().with_partitions(4).with_body_dedup(true);
        let fingerprint = Fingerprint::of(b"payload");
        let k = four.partition_index("a", &fingerprint);
        assert_eq!(four.partition_index("b", &fingerprint), k);
        let partition = four.partition_of("a", &fingerprint);
        let body_key = partition.body_key(&fingerprint).unwrap();
        assert!(body_key.starts_with(&format!("hookonce:{{stripe.{k}}}:b:")));
        assert_eq!(four.partitions_for_id("a").len(), 4);
    }
}
