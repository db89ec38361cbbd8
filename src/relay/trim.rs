//! `sink.trim = "acknowledged"`: every few seconds, each source stream is trimmed
//! (`XTRIM MINID`, in one script with the reads it depends on) to the oldest entry that some
//! consumer group — hookonce's routes or a team's own — still needs: pending, or not yet read
//! (after the group's last-delivered ID). A stream without groups is left alone. `max_len`
//! still applies on append and may drop what a group has not read.

use std::time::Duration;

use tokio::sync::watch;

use super::stream_keys;
use crate::config::{Settings, SinkTrim};
use crate::store::{RedisStore, RelayScripts};
use crate::util::error_chain;

/// How often each stream is trimmed (at least every 10 s, as documented).
pub const TRIM_EVERY: Duration = Duration::from_secs(5);

/// Starts trimming every source's streams when `sink.trim = "acknowledged"`, until `stopped`.
pub fn spawn(settings: &Settings, store: RedisStore, mut stopped: watch::Receiver<bool>) {
    if settings.sink.trim != SinkTrim::Acknowledged {
        return;
    }
    let streams: Vec<String> = settings
        .sources
        .keys()
        .filter_map(|source| stream_keys::of_source(settings, source).ok())
        .flatten()
        .collect();
    let scripts = RelayScripts::new();
    tokio::spawn(async move {
        let mut ticker = tokio::time::interval(TRIM_EVERY);
        loop {
            tokio::select! {
                _ = ticker.tick() => {}
                _ = stopped.wait_for(|stop| *stop) => return,
            }
            for stream in &streams {
                match scripts.trim(&store, stream).await {
                    Ok(0) => {}
                    Ok(trimmed) => {
                        tracing::debug!(message = "Trimmed acknowledged entries.", stream, trimmed)
                    }
                    Err(error) => {
                        tracing::warn!(message = "Cannot trim a stream.", stream, error = %error_chain(&error))
                    }
                }
            }
        }
    });
}
