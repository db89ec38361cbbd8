//! The recorded partition count of each source: checked at start, so that a changed
//! `sources.NAME.partitions` cannot silently let duplicates through.
//!
//! An event's partition is its hash modulo N, so with another N the redelivery of an event
//! forwarded a minute ago looks in another partition, finds no record and is forwarded again.
//! Each source's N is therefore recorded at `<prefix>:{<source>}:partitions` (1 for an
//! unpartitioned source too, so that partitioning it later is caught as well), and a start with
//! another N is refused unless `sources.NAME.repartition = true` says the operator has drained
//! the source or waited out its window.

use crate::config::Settings;
use crate::store::{RedisStore, StoreError};

/// Why a source's partition count stops the daemon from starting.
#[derive(Debug, thiserror::Error)]
pub enum PartitionsError {
    #[error(
        "sources.{source_name}.partitions = {configured}, but Redis records {recorded} for this \
         source ({key}): with another count, redeliveries of events forwarded within dedup_ttl \
         look in another partition and would be forwarded again. To change it: stop the \
         providers' traffic and let the relay drain, or wait dedup_ttl ({ttl}) after the last \
         event; then start once with sources.{source_name}.repartition = true, which records the \
         new count (remove it afterwards), or put partitions back to {recorded}"
    )]
    Changed {
        source_name: String,
        configured: u32,
        recorded: String,
        key: String,
        ttl: String,
    },
    #[error("cannot record sources.{source_name}.partitions in Redis")]
    Store {
        source_name: String,
        #[source]
        source: StoreError,
    },
}

/// Records every source's partition count, refusing one that differs from the recorded count
/// unless the source sets `repartition = true` (which records the new count instead).
pub async fn check(settings: &Settings, store: &RedisStore) -> Result<(), PartitionsError> {
    for (name, source) in &settings.sources {
        let (_, target) = super::source(settings, name).map_err(|error| {
            let source = StoreError::Protocol(error.to_string());
            let source_name = name.clone();
            PartitionsError::Store {
                source_name,
                source,
            }
        })?;
        let configured = target.partition_count();
        let key = target.partitions_key();
        let overwrite = source.repartition.unwrap_or(false);
        let before = store
            .record_partitions(&key, configured, overwrite)
            .await
            .map_err(|source| PartitionsError::Store {
                source_name: name.clone(),
                source,
            })?;
        match before {
            Some(recorded) if recorded != configured.to_string() && !overwrite => {
                return Err(PartitionsError::Changed {
                    source_name: name.clone(),
                    configured,
                    recorded,
                    key,
                    ttl: humantime::format_duration(target.dedup_ttl).to_string(),
                });
            }
            Some(recorded) if recorded != configured.to_string() => {
                tracing::warn!(message = "Recorded a new partition count (repartition = true); remove repartition from the configuration.", source = %name, from = %recorded, to = configured);
            }
            _ => {}
        }
    }
    Ok(())
}
