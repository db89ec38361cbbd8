//! `store.topology = "cluster"` and `"sentinel"` against a real local Redis Cluster (three
//! masters, three replicas) and a real Sentinel group, through the daemon's HTTP front.
//!
//! Each test starts its own nodes (the harness kills them on drop) and ends with an audit of the
//! streams read back from Redis: every event that got a 2xx is there exactly once, and no event
//! is there twice.

mod cli;
mod cluster;
mod cluster_faults;
mod partitions;
mod proxy;
mod replicas;
mod sentinel;
mod two_phase;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::support::cluster::RedisCluster;
use crate::support::sentinel::{SentinelGroup, MASTER_NAME, MASTER_PASSWORD, SENTINEL_PASSWORD};
use crate::support::settings::{self, ms, Secret, STRIPE_SECRET};
use crate::support::{now, stripe_body, Backend, TestApp};
use hookonce::config::{ServiceUrl, StoreSettings, StoreTopology};

/// `store.timeout` of the topology tests: a call of a loaded machine stays within it. A killed
/// node or a demoted master answers at once (a refused connection, `READONLY`), so no test here
/// needs it short to see a fault; the tests of a stalled node set their own.
pub const STORE_TIMEOUT_MS: u64 = 2000;

/// `store.wait_replicas = 1` for a test that asserts 2xx answers which a live replica must
/// confirm: `WAIT` gets what a loaded machine may need (with 200 ms, and 500 ms for the call, a
/// cluster's first two-phase delivery answered 503 under the whole suite on a fresh clone); the
/// call has [`STORE_TIMEOUT_MS`] from [`Topology::store`] or [`cluster_app`]. Tests that only
/// wait for a 2xx "eventually" keep a shorter `WAIT`, so that a master without a replica
/// refuses quickly while their load runs.
pub fn confirmed_writes(store: &mut StoreSettings) {
    store.wait_replicas = 1;
    store.wait_timeout = ms(1000);
}

/// How a test's daemons reach its Redis: a cluster or a Sentinel group.
#[derive(Clone, Copy)]
pub enum Topology<'a> {
    Cluster(&'a RedisCluster),
    Sentinel(&'a SentinelGroup),
}

impl Topology<'_> {
    /// Points `store` at the cluster's seed nodes or the sentinels (with their own password
    /// and the data nodes').
    pub fn store(self, store: &mut StoreSettings) {
        store.timeout = ms(STORE_TIMEOUT_MS);
        match self {
            Self::Cluster(cluster) => {
                store.topology = StoreTopology::Cluster;
                store.cluster_nodes = cluster.seeds().into_iter().map(ServiceUrl).collect();
            }
            Self::Sentinel(group) => {
                store.topology = StoreTopology::Sentinel;
                store.sentinels = group.sentinel_urls().into_iter().map(ServiceUrl).collect();
                store.sentinel_master = Some(MASTER_NAME.to_owned());
                store.sentinel_password = Some(Secret::literal(SENTINEL_PASSWORD).unwrap());
                store.password = Some(Secret::literal(MASTER_PASSWORD).unwrap());
            }
        }
    }

    /// The same as a `[store]` table, for the `hookonce` binary.
    pub fn store_toml(self) -> String {
        let list = |urls: Vec<String>| {
            urls.iter()
                .map(|url| format!("{url:?}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        match self {
            Self::Cluster(cluster) => format!(
                "[store]\nbackend = \"redis\"\ntopology = \"cluster\"\ntimeout = \"{STORE_TIMEOUT_MS}ms\"\n\
                 cluster_nodes = [{}]\n",
                list(cluster.seeds())
            ),
            Self::Sentinel(group) => format!(
                "[store]\nbackend = \"redis\"\ntopology = \"sentinel\"\ntimeout = \"{STORE_TIMEOUT_MS}ms\"\n\
                 sentinels = [{}]\nsentinel_master = \"{MASTER_NAME}\"\n\
                 sentinel_password = \"{SENTINEL_PASSWORD}\"\npassword = \"{MASTER_PASSWORD}\"\n",
                list(group.sentinel_urls())
            ),
        }
    }
}

/// Names `{prefix}0`, `{prefix}1`, … whose hash tag `{<tag_of(name)>}` lands on each master, one
/// per master, found by asking the cluster (`CLUSTER KEYSLOT`).
pub fn names_on_every_master(
    cluster: &RedisCluster,
    prefix: &str,
    tag_of: impl Fn(&str) -> String,
) -> Vec<(String, u16)> {
    let masters = cluster.masters();
    let mut chosen: BTreeMap<u16, String> = BTreeMap::new();
    for i in 0.. {
        let name = format!("{prefix}{i}");
        let master = cluster.master_of_slot(cluster.keyslot(&format!("{{{}}}", tag_of(&name))));
        chosen.entry(master).or_insert(name);
        if chosen.len() == masters.len() {
            break;
        }
    }
    chosen
        .into_iter()
        .map(|(port, name)| (name, port))
        .collect()
}

/// One source per master: names whose hash tag `{name}` lands on each master's slots, found by
/// asking the cluster (`CLUSTER KEYSLOT`) rather than assuming a slot layout.
pub fn sources_on_every_master(cluster: &RedisCluster) -> Vec<(String, u16)> {
    names_on_every_master(cluster, "shop", str::to_owned)
}

/// A daemon in this process on the cluster, with one Stripe source per name.
pub async fn cluster_app(
    cluster: &RedisCluster,
    sources: &[&str],
    change: impl FnOnce(&mut hookonce::config::StoreSettings),
) -> TestApp {
    let seeds = cluster.seeds().into_iter().map(ServiceUrl).collect();
    let mut builder = TestApp::builder(Backend::Redis).store(|store| {
        store.topology = StoreTopology::Cluster;
        store.cluster_nodes = seeds;
        store.timeout = ms(STORE_TIMEOUT_MS);
        change(store);
    });
    for name in sources {
        builder = builder.source(name, settings::source("stripe", STRIPE_SECRET));
    }
    builder.start().await
}

/// Delivers one Stripe event with this ID; returns the status.
pub async fn deliver(app: &TestApp, source: &str, id: &str) -> u16 {
    app.deliver(source, &stripe_body(id, 200), &now())
        .await
        .status()
        .as_u16()
}

/// One request of a load run.
#[derive(Debug, Clone)]
pub struct Attempt {
    pub source: String,
    pub id: String,
    pub status: u16,
}

/// Signed requests in a loop, one sequential sender per source, until stopped.
pub struct Load {
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<Vec<Attempt>>>,
}

impl Load {
    pub fn start(app: &Arc<TestApp>, sources: &[String]) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let tasks = sources
            .iter()
            .map(|source| {
                let (app, stop, source) = (Arc::clone(app), Arc::clone(&stop), source.clone());
                tokio::spawn(async move {
                    let mut attempts = Vec::new();
                    for n in 0.. {
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                        let id = format!("evt_{source}_{n}");
                        let status = deliver(&app, &source, &id).await;
                        attempts.push(Attempt {
                            source: source.clone(),
                            id,
                            status,
                        });
                    }
                    attempts
                })
            })
            .collect();
        Self { stop, tasks }
    }

    pub async fn stop(self) -> Vec<Attempt> {
        self.stop.store(true, Ordering::Relaxed);
        let mut all = Vec::new();
        for task in self.tasks {
            all.extend(task.await.unwrap());
        }
        all
    }
}

/// The event IDs of a stream, in order, read with `XRANGE` over `connection`.
pub fn stream_ids(connection: &mut impl redis::ConnectionLike, stream: &str) -> Vec<String> {
    let reply: redis::streams::StreamRangeReply = redis::cmd("XRANGE")
        .arg(stream)
        .arg("-")
        .arg("+")
        .query(connection)
        .unwrap();
    reply
        .ids
        .into_iter()
        .map(|entry| entry.get("event_id").unwrap())
        .collect()
}

/// The exactly-once audit of a run: every 2xx event is in its source's streams once, and no
/// event is there twice. Returns (acknowledged, refused) counts.
pub fn audit(
    app: &TestApp,
    attempts: &[Attempt],
    connection: &mut impl redis::ConnectionLike,
) -> (usize, usize) {
    let mut sources: Vec<&str> = attempts.iter().map(|a| a.source.as_str()).collect();
    sources.sort_unstable();
    sources.dedup();
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for source in sources {
        for stream in app.app.ingest.target(source).unwrap().streams() {
            for id in stream_ids(connection, &stream) {
                *counts.entry(id).or_default() += 1;
            }
        }
    }
    for (id, count) in &counts {
        assert_eq!(*count, 1, "{id} is in its stream {count} times");
    }
    let acknowledged: Vec<&Attempt> = attempts.iter().filter(|a| a.status < 300).collect();
    for attempt in &acknowledged {
        assert!(
            counts.contains_key(&attempt.id),
            "{} got {} but is not in the stream",
            attempt.id,
            attempt.status
        );
    }
    for attempt in attempts {
        assert!(
            attempt.status < 300 || attempt.status == 503,
            "{attempt:?}: only 2xx or 503 are expected"
        );
    }
    (acknowledged.len(), attempts.len() - acknowledged.len())
}

/// The exactly-once audit of a two-phase run: every event that got a 2xx reached the sink once
/// (`published()` counts the sink's events by ID) and its done record is still in Redis, so its
/// redelivery now is a duplicate that publishes nothing. Returns (acknowledged, refused) counts.
pub async fn audit_sink(
    app: &TestApp,
    attempts: &[Attempt],
    published: impl Fn() -> BTreeMap<String, usize>,
) -> (usize, usize) {
    let before = published();
    let mut acknowledged = Vec::new();
    for attempt in attempts {
        assert!(
            attempt.status < 300 || attempt.status == 503,
            "{attempt:?}: only 2xx or 503 are expected"
        );
        if attempt.status < 300 {
            assert_eq!(before.get(&attempt.id), Some(&1), "{attempt:?} in the sink");
            acknowledged.push(attempt);
        }
    }
    for attempt in &acknowledged {
        let again = app
            .deliver(&attempt.source, &stripe_body(&attempt.id, 200), &now())
            .await;
        assert_eq!(again.status(), 200, "{attempt:?} redelivered");
        assert_eq!(
            again.headers()["idempotency-replayed"],
            "true",
            "{attempt:?}: its done record was lost"
        );
    }
    let after = published();
    for attempt in &acknowledged {
        assert_eq!(
            after.get(&attempt.id),
            Some(&1),
            "{attempt:?} published again"
        );
    }
    (acknowledged.len(), attempts.len() - acknowledged.len())
}
