//! One route's work in one relay process: a lane per stream it reads (each source's streams and
//! its replay stream), each with a reader (`XREADGROUP`) and a keeper that refreshes what this
//! relay holds and takes over what a stopped relay left (`XAUTOCLAIM` after `claim_idle`).
//! Every entry read becomes a [`Job`] task.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch, Semaphore};
use tokio::task::JoinSet;

use super::job::{start, Job};
use super::keeper::{keep, sample};
use super::route::Route;
use super::route_state::{claim, lanes, until_stopped, RouteStream, Shared, BATCH};
use crate::config::RouteStart;
use crate::metrics::RelayMetrics;
use crate::store::{is_missing_group, RedisStore, RelayScripts, StoreError, StreamEntry};
use crate::util::error_chain;

/// How long one read blocks; also how soon a stopped relay's reader notices.
const BLOCK: Duration = Duration::from_secs(1);

/// One route of one relay process, as `Relay::build` made it.
pub struct RouteRunner {
    pub route: Arc<Route>,
    pub metrics: Arc<RelayMetrics>,
    pub store: RedisStore,
    pub scripts: Arc<RelayScripts>,
    pub client: crate::http_client::Pooled,
    pub consumer: String,
    pub claim_idle: Duration,
}

impl RouteRunner {
    /// Runs until `stopped`, then waits for the jobs in flight; dropping it stops everything.
    pub async fn run(self, stopped: watch::Receiver<bool>) {
        let route = Arc::clone(&self.route);
        let held = (route.concurrency * 4).max(BATCH);
        let shared = Arc::new(Shared {
            concurrency: Semaphore::new(route.concurrency),
            slots: Arc::new(Semaphore::new(held)),
            route: self.route,
            metrics: self.metrics,
            store: self.store,
            scripts: self.scripts,
            client: self.client,
            consumer: self.consumer,
            claim_idle: self.claim_idle,
            stopped: stopped.clone(),
        });
        let (tx, mut rx) = mpsc::channel::<Job>(BATCH);
        let mut background = JoinSet::new();
        for lane in lanes(&route) {
            let lane = Arc::new(lane);
            background.spawn(read(Arc::clone(&shared), Arc::clone(&lane), tx.clone()));
            background.spawn(keep(Arc::clone(&shared), lane, tx.clone()));
        }
        background.spawn(sample(Arc::clone(&shared)));
        drop(tx);
        let mut jobs = JoinSet::new();
        let mut stop = stopped.clone();
        loop {
            tokio::select! {
                Some(job) = rx.recv() => {
                    let (lane, id) = (Arc::clone(&job.lane), job.entry.id.clone());
                    let handle = jobs.spawn(job.run());
                    lane.attach(&id, handle);
                }
                Some(_) = jobs.join_next(), if !jobs.is_empty() => {}
                () = until_stopped(&mut stop) => break,
            }
        }
        // Jobs waiting for a permit or a backoff end at once; attempts in flight finish. The
        // keepers go on refreshing meanwhile, so nothing of ours is taken over mid-attempt.
        drop(rx);
        while jobs.join_next().await.is_some() {}
        background.abort_all();
    }
}

/// Creates the lane's group where the route starts (`0` or `$`); a replay stream from `0`.
async fn create_group(
    shared: &Shared,
    lane: &RouteStream,
    start: RouteStart,
) -> Result<(), StoreError> {
    let start = match (start, lane.replay) {
        (RouteStart::New, false) => "$",
        _ => "0",
    };
    if shared
        .store
        .create_group(&lane.stream, &shared.route.group, start)
        .await?
    {
        tracing::info!(message = "Consumer group created.", stream = %lane.stream, group = %shared.route.group, start);
    }
    Ok(())
}

/// The lane's reader: new entries, about as many as there are free slots.
async fn read(shared: Arc<Shared>, lane: Arc<RouteStream>, jobs: mpsc::Sender<Job>) {
    let mut stopped = shared.stopped.clone();
    let mut pause = Outage::default();
    let reader = loop {
        let connected = match create_group(&shared, &lane, shared.route.start).await {
            Ok(()) => shared.store.dedicated(BLOCK).await,
            Err(error) => Err(error),
        };
        match connected {
            Ok(reader) => break reader,
            Err(error) => pause.wait(&shared, &lane, &error).await,
        }
        if *stopped.borrow() {
            return;
        }
    };
    loop {
        // Room for at least one more entry sizes the read, but no place is kept while the read
        // blocks: a reader blocked on a quiet stream (the replay stream, mostly) would otherwise
        // keep its places from the route's other lanes and from takeover for the whole block.
        let count = tokio::select! {
            room = shared.slots.acquire() => match room {
                Ok(room) => {
                    drop(room);
                    shared.slots.available_permits().clamp(1, BATCH)
                }
                Err(_) => return,
            },
            () = until_stopped(&mut stopped) => return,
        };
        let (route, consumer) = (&shared.route, &shared.consumer);
        let read = reader.read_group(&lane.stream, &route.group, consumer, count, BLOCK);
        let read = tokio::select! {
            read = read => read,
            () = until_stopped(&mut stopped) => return,
        };
        match read {
            Ok(entries) => {
                pause.clear(&lane);
                if !hand_over(&shared, &lane, entries, &jobs).await {
                    return;
                }
            }
            Err(error) if is_missing_group(&error) => {
                tracing::warn!(message = "Consumer group or stream vanished; recreating it at 0.", stream = %lane.stream, group = %route.group);
                if let Err(error) = create_group(&shared, &lane, RouteStart::Beginning).await {
                    pause.wait(&shared, &lane, &error).await;
                }
            }
            Err(error) => pause.wait(&shared, &lane, &error).await,
        }
    }
}

/// Starts a job for each entry just read, waiting for a place for each; false once the relay
/// stops (the entries not started stay pending, for this relay's successor).
async fn hand_over(
    shared: &Arc<Shared>,
    lane: &Arc<RouteStream>,
    entries: Vec<StreamEntry>,
    jobs: &mpsc::Sender<Job>,
) -> bool {
    let mut stopped = shared.stopped.clone();
    for entry in entries {
        if !claim(shared, lane, &entry).await {
            continue;
        }
        // Held already, so the keeper keeps it fresh while it waits for a place (other lanes
        // may have filled them since the read was sized).
        let slot = tokio::select! {
            slot = Arc::clone(&shared.slots).acquire_owned() => slot.ok(),
            () = until_stopped(&mut stopped) => None,
        };
        let Some(slot) = slot else {
            lane.release(&entry.id);
            return false;
        };
        start(shared, lane, entry, 1, slot, jobs).await;
    }
    true
}

/// Paces retries of a failing Redis call (an outage is ridden out) and logs its start once.
#[derive(Default)]
struct Outage {
    pause: Option<Duration>,
}

impl Outage {
    async fn wait(&mut self, shared: &Shared, lane: &RouteStream, error: &StoreError) {
        let pause = match self.pause {
            None => {
                tracing::warn!(message = "Relay cannot read from Redis; retrying.", stream = %lane.stream, error = %error_chain(error));
                Duration::from_millis(100)
            }
            Some(pause) => (pause * 2).min(Duration::from_secs(2)),
        };
        self.pause = Some(pause);
        let mut stopped = shared.stopped.clone();
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            () = until_stopped(&mut stopped) => {}
        }
    }

    fn clear(&mut self, lane: &RouteStream) {
        if self.pause.take().is_some() {
            tracing::info!(message = "Relay reads from Redis again.", stream = %lane.stream);
        }
    }
}
