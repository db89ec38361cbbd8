//! `[sources.NAME]`: one webhook source, its provider and the provider's keys.
//!
//! One flat table for every provider keeps unknown keys rejectable by serde; which keys a provider
//! requires or ignores is checked by the provider's own `from_settings`, naming the key.

use serde::{Deserialize, Serialize};

use std::time::Duration;

use super::secret_file::SecretFile;
use super::values::{one_or_many, HumanDuration, Secret, MAX_DEDUP_TTL, MAX_TOLERANCE};
use super::ConfigError;

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SourceSettings {
    /// Signature scheme: stripe | standard | github | … (see `webhooks::providers::REGISTRY`).
    pub provider: String,
    /// Signing secrets; several during a rotation. Each is a literal, `env:NAME` or `file:PATH`.
    #[serde(default, deserialize_with = "one_or_many")]
    pub secrets: Vec<Secret>,
    /// Files of secrets, one per line (as Kubernetes mounts a Secret's key); read at start and
    /// re-read on every reload (`SIGHUP`). Their secrets follow `secrets`.
    #[serde(
        default,
        deserialize_with = "one_or_many",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub secrets_files: Vec<SecretFile>,
    /// Accepted clock skew for schemes that sign a timestamp (provider default when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerance: Option<HumanDuration>,
    /// How long an event ID is remembered (provider default when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dedup_ttl: Option<HumanDuration>,
    /// Redis Stream key for this source (default `<prefix>:{<source>}:events`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<String>,
    /// Also deduplicate on the payload, for schemes whose event ID is not signed (provider
    /// default when absent: on where the ID is unsigned).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_dedup: Option<bool>,
    /// How many partitions (hash tags, and so cluster slots) the source's records and streams
    /// are spread over (1 when absent: the source's own tag).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partitions: Option<u32>,
    /// For one start: accept a `partitions` that differs from the one recorded in Redis, and
    /// record the new one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repartition: Option<bool>,
    /// Adyen: the most items one notification batch may carry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_batch_items: Option<u32>,
    /// Square: the public notification URL, part of the signed string.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notification_url: Option<String>,
    /// JSON pointer to the event ID (adyen_platform, generic).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id_pointer: Option<String>,
    /// JSON pointer to the event type (adyen_platform, generic).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub type_pointer: Option<String>,
    /// Generic: header holding the event ID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id_header: Option<String>,
    /// Generic: header holding the event type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub type_header: Option<String>,
    /// Generic: header holding the signature.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature_header: Option<String>,
    /// Generic: prefix before the signature value, e.g. `sha256=`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature_prefix: Option<String>,
    /// Generic: sha1 | sha256 | sha512.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub algorithm: Option<String>,
    /// Generic: hex | base64.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encoding: Option<String>,
    /// Generic: signed-content template from `{body}`, `{timestamp}`, `{id}` and literal text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signed_content: Option<String>,
    /// Generic: header holding the signed timestamp (unix seconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp_header: Option<String>,
}

impl SourceSettings {
    /// The checks every provider shares; a provider's own keys are checked by the provider.
    pub(super) fn validate(&self, name: &str) -> Result<(), ConfigError> {
        if self.all_secrets().next().is_none() {
            return Err(ConfigError::invalid(
                format!("sources.{name}.secrets"),
                NO_SECRET,
            ));
        }
        let second = Duration::from_secs(1);
        if let Some(ttl) = self.dedup_ttl {
            ttl.check(format!("sources.{name}.dedup_ttl"), second, MAX_DEDUP_TTL)?;
        }
        // Signed timestamps have whole-second resolution.
        if let Some(tolerance) = self.tolerance {
            tolerance.check(format!("sources.{name}.tolerance"), second, MAX_TOLERANCE)?;
        }
        if let Some(stream) = &self.stream {
            check_stream(name, stream)?;
        }
        self.check_partitions(name)
    }

    /// Every signing secret: those of `secrets`, then each file's of `secrets_files`, in order.
    pub fn all_secrets(&self) -> impl Iterator<Item = &Secret> {
        self.secrets
            .iter()
            .chain(self.secrets_files.iter().flat_map(SecretFile::secrets))
    }

    /// The key that names secret `i` of [`Self::all_secrets`] in a message:
    /// `sources.NAME.secrets[i]`, or `sources.NAME.secrets_files[j] line k` for a file's.
    pub fn secret_key(&self, name: &str, i: usize) -> String {
        if i < self.secrets.len() {
            return format!("sources.{name}.secrets[{i}]");
        }
        let mut first = self.secrets.len();
        for (j, file) in self.secrets_files.iter().enumerate() {
            let count = file.secrets().len();
            if i < first + count {
                return format!("sources.{name}.secrets_files[{j}] line {}", i - first + 1);
            }
            first += count;
        }
        format!("sources.{name}.secrets")
    }

    /// The configured partition count (1 when absent).
    pub fn partition_count(&self) -> u32 {
        self.partitions.unwrap_or(1)
    }

    fn check_partitions(&self, name: &str) -> Result<(), ConfigError> {
        let n = self.partition_count();
        if !(1..=MAX_PARTITIONS).contains(&n) {
            return Err(ConfigError::invalid(
                format!("sources.{name}.partitions"),
                format!("must be from 1 to {MAX_PARTITIONS}, got {n}"),
            ));
        }
        // Each partition has a stream of its own under its own hash tag; one custom name
        // cannot be N streams in N slots.
        if n > 1 && self.stream.is_some() {
            return Err(ConfigError::invalid(
                format!("sources.{name}.stream"),
                format!(
                    "cannot be set with partitions = {n}: partition k has its own stream \
                     <prefix>:{{{name}.k}}:events"
                ),
            ));
        }
        Ok(())
    }
}

/// Why a source without any secret is refused.
pub const NO_SECRET: &str = "at least one secret is required (in secrets or secrets_files)";

/// The most partitions one source may have: a cluster has 16384 slots, and every partition
/// costs a stream to read and sample, so far fewer are useful; 1024 bounds a typo.
pub const MAX_PARTITIONS: u32 = 1024;

/// A custom stream must carry the source's hash tag `{NAME}` as its first tag, as Redis Cluster
/// reads it (the text between the first `{` and the next `}`, when not empty): the atomic script
/// touches the record and the stream in one call, and both must live in one slot. The tag also
/// makes the stream the source's own: no other source's stream can carry it.
fn check_stream(name: &str, stream: &str) -> Result<(), ConfigError> {
    let tag = stream
        .find('{')
        .and_then(|open| Some((open, stream[open..].find('}')? + open)))
        .map(|(open, close)| &stream[open + 1..close]);
    if tag != Some(name) {
        return Err(ConfigError::invalid(
            format!("sources.{name}.stream"),
            format!(
                "must contain the source's hash tag {{{name}}} as its first tag (e.g. \"events:{{{name}}}\"), so that its records and its stream share a Redis Cluster slot and no other source writes to it"
            ),
        ));
    }
    Ok(())
}
