//! A lane's keeper: keeps the idle time of every entry this relay holds fresh (so no other
//! relay takes a live relay's entries, backoff included), and takes over the entries of relays
//! that stopped for `claim_idle` (`XAUTOCLAIM`), at the attempt their delivery count says.
//! Also the route's sampler of lag and dead letters.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use super::job::{start as launch, Job};
use super::route_state::{claim, until_stopped, RouteStream, Shared, BATCH};
use crate::store::{is_missing_group, StoreError, StreamEntry};
use crate::util::error_chain;

/// Refreshes are sent in chunks of this many IDs (one script call each).
const CHUNK: usize = 256;
/// How often lag and dead letters are sampled.
const SAMPLE_EVERY: Duration = Duration::from_secs(5);

/// Every `claim_idle / 4`: refresh, then take over. Runs until aborted by the route.
pub(super) async fn keep(shared: Arc<Shared>, lane: Arc<RouteStream>, jobs: mpsc::Sender<Job>) {
    let every = (shared.claim_idle / 4).max(Duration::from_millis(100));
    let mut ticker = tokio::time::interval(every);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        if let Err(error) = refresh(&shared, &lane).await {
            log(&lane, "refresh", &error);
        }
        if *shared.stopped.borrow() {
            continue;
        }
        if let Err(error) = take_over(&shared, &lane, &jobs).await {
            log(&lane, "take over", &error);
        }
    }
}

fn log(lane: &RouteStream, what: &str, error: &StoreError) {
    if !is_missing_group(error) {
        tracing::warn!(message = "Relay keeper's Redis call failed.", what, stream = %lane.stream, error = %error_chain(error));
    }
}

async fn refresh(shared: &Shared, lane: &RouteStream) -> Result<(), StoreError> {
    let ids = lane.ids();
    for chunk in ids.chunks(CHUNK) {
        let (group, consumer) = (&shared.route.group, &shared.consumer);
        let owned = match shared
            .scripts
            .refresh(&shared.store, &lane.stream, group, consumer, chunk)
            .await
        {
            Ok(owned) => owned,
            // The group is gone, and with it every claim: the reader recreates it.
            Err(error) if is_missing_group(&error) => Vec::new(),
            Err(error) => return Err(error),
        };
        lane.keep_only(chunk, &owned);
    }
    Ok(())
}

/// One pass of `XAUTOCLAIM` over the lane, as many entries as there are free slots.
async fn take_over(
    shared: &Arc<Shared>,
    lane: &Arc<RouteStream>,
    jobs: &mpsc::Sender<Job>,
) -> Result<(), StoreError> {
    let (store, group, consumer) = (&shared.store, &shared.route.group, &shared.consumer);
    let mut cursor = "0-0".to_owned();
    loop {
        let free = shared.slots.available_permits().min(BATCH);
        if free == 0 {
            return Ok(());
        }
        let (next, claimed, deleted) = store
            .autoclaim(
                &lane.stream,
                group,
                consumer,
                shared.claim_idle,
                &cursor,
                free,
            )
            .await?;
        for id in &deleted {
            // Trimmed away while pending (max_len): nothing left to deliver.
            shared
                .scripts
                .ack(store, &lane.stream, group, id, lane.replay)
                .await?;
        }
        if !claimed.is_empty() {
            tracing::info!(message = "Took over entries of a stopped relay.", stream = %lane.stream, count = claimed.len());
            start(shared, lane, claimed, jobs).await?;
        }
        if next == "0-0" || *shared.stopped.borrow() {
            return Ok(());
        }
        cursor = next;
    }
}

/// Starts jobs for taken-over entries at the attempt their delivery count says.
async fn start(
    shared: &Arc<Shared>,
    lane: &Arc<RouteStream>,
    claimed: Vec<StreamEntry>,
    jobs: &mpsc::Sender<Job>,
) -> Result<(), StoreError> {
    let (Some(first), Some(last)) = (claimed.first(), claimed.last()) else {
        return Ok(());
    };
    let counts = shared
        .store
        .delivery_counts(
            &lane.stream,
            &shared.route.group,
            &shared.consumer,
            &first.id,
            &last.id,
            claimed.len() * 2 + 16,
        )
        .await?;
    for entry in claimed {
        let attempt = counts
            .iter()
            .find(|(id, _)| *id == entry.id)
            .map_or(1, |(_, n)| *n);
        // Never waited for: the keeper must go on refreshing what this relay holds.
        let Ok(slot) = Arc::clone(&shared.slots).try_acquire_owned() else {
            // Ours but not worked on: it goes idle and is taken over again.
            continue;
        };
        if claim(shared, lane, &entry).await {
            let attempt = u32::try_from(attempt).unwrap_or(u32::MAX).max(1);
            launch(shared, lane, entry, attempt, slot, jobs).await;
        }
    }
    Ok(())
}

/// Samples `hookonce_relay_lag` and `hookonce_dead_letters` for each source of the route.
pub(super) async fn sample(shared: Arc<Shared>) {
    let mut ticker = tokio::time::interval(SAMPLE_EVERY);
    let mut stopped = shared.stopped.clone();
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            () = until_stopped(&mut stopped) => return,
        }
        for (source, (_, lag, dead)) in shared
            .route
            .per_source
            .iter()
            .zip(&shared.metrics.per_source)
        {
            let mut total = 0;
            for stream in source.streams.iter().chain([&source.replays]) {
                if let Ok(Some(n)) = shared
                    .store
                    .group_backlog(stream, &shared.route.group)
                    .await
                {
                    total += n;
                }
            }
            lag.set(total as f64);
            if let Ok(n) = shared.store.stream_length(&source.dead_letters).await {
                dead.set(n as f64);
            }
        }
    }
}
