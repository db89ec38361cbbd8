//! `sink.trim = "acknowledged"` (stub).

use tokio::sync::watch;

use crate::config::{Settings, SinkTrim};
use crate::store::RedisStore;

/// Starts trimming every source's streams when `sink.trim = "acknowledged"`, until `stopped`.
pub fn spawn(settings: &Settings, _store: RedisStore, _stopped: watch::Receiver<bool>) {
    if settings.sink.trim != SinkTrim::Acknowledged {
        return;
    }
}
