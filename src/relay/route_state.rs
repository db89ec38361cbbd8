//! What every task of one route shares — the route, its store and scripts, the concurrency and
//! the places for held entries — and its lanes, one per stream it reads, with the entries of it
//! this relay holds. It sits below the reader (`route_runner.rs`), the jobs (`job.rs`) and the keeper
//! (`keeper.rs`), which all use it, so that none of them imports another for it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{watch, Semaphore};
use tokio::task::AbortHandle;

use super::route::Route;
use crate::metrics::RelayMetrics;
use crate::outcome::RelayOutcome;
use crate::store::{RedisStore, RelayScripts, StreamEntry};
use crate::util::error_chain;

/// Entries one read or one takeover asks for at most.
pub(super) const BATCH: usize = 64;

/// Resolves once `stopped` turns true (or its sender is gone).
pub(super) async fn until_stopped(stopped: &mut watch::Receiver<bool>) {
    let _ = stopped.wait_for(|stop| *stop).await;
}

/// What every task of a route shares.
pub(super) struct Shared {
    pub route: Arc<Route>,
    pub metrics: Arc<RelayMetrics>,
    pub store: RedisStore,
    pub scripts: Arc<RelayScripts>,
    pub client: crate::http_client::Pooled,
    pub consumer: String,
    pub claim_idle: Duration,
    /// Attempts in flight (`concurrency`).
    pub concurrency: Semaphore,
    /// Entries held (in flight or waiting out a backoff), a multiple of `concurrency`. A reader
    /// takes a place per entry only once its read returns, so it may briefly hold up to a batch
    /// more per lane (held, and kept fresh, while they wait).
    pub slots: Arc<Semaphore>,
    pub stopped: watch::Receiver<bool>,
}

/// One stream a route reads, and the entries of it this relay holds.
pub(super) struct RouteStream {
    /// Index into `route.per_source`.
    pub source: usize,
    pub stream: String,
    /// A replay stream: read only by this route, so entries are deleted once done.
    pub replay: bool,
    held: Mutex<HashMap<String, Option<AbortHandle>>>,
}

impl RouteStream {
    /// Marks `id` held; false when it already is (a takeover of an entry we still work on).
    pub(super) fn hold(&self, id: &str) -> bool {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        if held.contains_key(id) {
            return false;
        }
        held.insert(id.to_owned(), None);
        true
    }

    /// Records the job of a held entry, so that losing the entry can stop it.
    pub(super) fn attach(&self, id: &str, job: AbortHandle) {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(slot) = held.get_mut(id) {
            *slot = Some(job);
        }
    }

    pub(super) fn release(&self, id: &str) {
        self.held
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(id);
    }

    pub(super) fn ids(&self) -> Vec<String> {
        let held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        held.keys().cloned().collect()
    }

    /// Stops the jobs of entries no longer ours (taken over, or the group was recreated).
    pub(super) fn keep_only(&self, ids: &[String], owned: &[String]) {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        for id in ids.iter().filter(|id| !owned.contains(id)) {
            if let Some(Some(job)) = held.remove(id) {
                job.abort();
            }
        }
    }
}

/// The lanes of a route: each source's streams, then its replay stream.
pub(super) fn lanes(route: &Route) -> Vec<RouteStream> {
    let mut lanes = Vec::new();
    for (index, source) in route.per_source.iter().enumerate() {
        let streams = source.streams.iter().map(|s| (s, false));
        for (stream, replay) in streams.chain([(&source.replays, true)]) {
            lanes.push(RouteStream {
                source: index,
                stream: stream.clone(),
                replay,
                held: Mutex::new(HashMap::new()),
            });
        }
    }
    lanes
}

/// Whether this relay is to work on `entry`: false when its type does not match (then it is
/// acknowledged for this route) or when it is held already (a takeover of an entry we still
/// work on). True marks it held.
pub(super) async fn claim(shared: &Shared, lane: &RouteStream, entry: &StreamEntry) -> bool {
    if !shared.route.matches(&entry.text("event_type")) {
        let (s, group) = (&shared.scripts, &shared.route.group);
        match s
            .ack(&shared.store, &lane.stream, group, &entry.id, lane.replay)
            .await
        {
            Ok(()) => shared.metrics.count(RelayOutcome::Skipped),
            // Left pending: it is taken over (and skipped) once idle.
            Err(error) => {
                tracing::warn!(message = "Cannot acknowledge a skipped entry.", stream = %lane.stream, error = %error_chain(&error))
            }
        }
        return false;
    }
    lane.hold(&entry.id)
}
