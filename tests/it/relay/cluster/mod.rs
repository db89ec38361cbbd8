//! The relay on a real Redis Cluster (three masters, three replicas) with a source of four
//! partitions whose streams land on every master (checked with `CLUSTER KEYSLOT`), while the
//! source's dead letters and replay streams live under the source's own hash tag, on a master of
//! their own choosing. Each test starts one cluster and runs several scenarios of the standalone
//! suite on it, ending with an audit of the workers' side: every event sent is delivered to every
//! route that matches it, with its dedup key (`{<source>.<k>}`) as `Idempotency-Key`, and to no
//! other route.
//!
//! - in this process: routing and fan-out, retries with one key, a poison event dead-lettered
//!   across slots while the others flow, `dlq list` / `replay`, `redeliver` (and of a trimmed
//!   entry), trimming that keeps what a team's group needs, a destroyed group recovered;
//! - `hookonce relay` processes: two at once, one SIGKILLed and the other taking over, a worker
//!   down then up, and a master killed mid-run (its replica takes over; nothing lost).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use hookonce::config::{ServiceUrl, SinkTrim, SourceSettings, StoreTopology};

use super::*;
use crate::support::binary::{hookonce, output_text};
use crate::support::cluster::wait_for;
use crate::support::daemon::Daemon;
use crate::support::relay_worker::{Answer, RelayWorker};
use crate::support::settings::{source, STRIPE_SECRET};

mod in_process;
mod processes;

const PARTITIONS: u32 = 4;

/// A source name whose partitions' hash tags (`{name.k}`) land on every master.
fn partitioned_source(cluster: &RedisCluster) -> String {
    let masters = cluster.masters().len();
    (0..)
        .map(|i| format!("hot{i}"))
        .find(|name| {
            let on: BTreeSet<u16> = (0..PARTITIONS)
                .map(|k| cluster.master_of_slot(cluster.keyslot(&format!("{{{name}.{k}}}"))))
                .collect();
            on.len() == masters
        })
        .unwrap()
}

fn partitioned(name: &str) -> (String, SourceSettings) {
    let settings = SourceSettings {
        partitions: Some(PARTITIONS),
        ..source("stripe", STRIPE_SECRET)
    };
    (name.to_owned(), settings)
}

/// The stream of partition `k`.
fn partition_stream(name: &str, k: u32) -> String {
    format!("hookonce:{{{name}.{k}}}:events")
}

/// A daemon in this process on the cluster, with the partitioned source `name`.
async fn cluster_app(
    cluster: &RedisCluster,
    name: &str,
    change: impl FnOnce(hookonce::config::StoreSettings) -> hookonce::config::StoreSettings,
    relay: RelaySettings,
    trim: SinkTrim,
) -> TestApp {
    let seeds = cluster.seeds().into_iter().map(ServiceUrl).collect();
    let (name, settings) = partitioned(name);
    TestApp::builder(crate::support::Backend::Redis)
        .store(|store| {
            store.topology = StoreTopology::Cluster;
            store.cluster_nodes = seeds;
            store.timeout = ms(500);
            *store = change(store.clone());
        })
        .sink(|s| s.trim = trim)
        .source(&name, settings)
        .relay(|r| *r = relay)
        .start()
        .await
}

/// A configuration file for the binary on the cluster: the default sources and `name`.
fn cluster_config(
    dir: &Path,
    cluster: &RedisCluster,
    name: &str,
    relay: &RelaySettings,
) -> PathBuf {
    let seeds: Vec<String> = cluster.seeds().iter().map(|s| format!("{s:?}")).collect();
    let store = format!(
        "[store]\nbackend = \"redis\"\ntopology = \"cluster\"\ncluster_nodes = [{}]\ntimeout = \"500ms\"\n",
        seeds.join(", ")
    );
    let mut sources = default_sources();
    let (name, settings) = partitioned(name);
    sources.insert(name, settings);
    config_file_with(dir, &store, &sources, relay, "")
}

/// Sends one signed event to `source` until it is accepted (a provider retries a 503), for at
/// most 30 s.
async fn send_to(app: &TestApp, source: &str, id: &str, event_type: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let status = app
            .deliver(source, &stripe_event(id, event_type), &now())
            .await
            .status();
        if status == 200 {
            return;
        }
        assert!(status == 503 && Instant::now() < deadline, "{id}: {status}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The partition of an event, from its record key's hash tag.
fn partition_of(app: &TestApp, source: &str, id: &str) -> u32 {
    let key = app.app.ingest.target(source).unwrap().record_key(id);
    let tag = key.split('{').nth(1).unwrap().split('}').next().unwrap();
    tag.rsplit('.').next().unwrap().parse().unwrap()
}

/// The workers' side audited: each route acknowledged exactly the `sent` events it matches
/// (by `event_types` globs), at least once each (exactly once when `once`), every attempt
/// carrying the event's dedup key. Returns the duplicates per route.
fn audit_routes(
    app: &TestApp,
    worker: &RelayWorker,
    source: &str,
    routes: &[(&str, &[&str])],
    sent: &[(String, &str)],
    once: bool,
) -> BTreeMap<String, usize> {
    let target = app.app.ingest.target(source).unwrap();
    let mut duplicates = BTreeMap::new();
    for (route, globs) in routes {
        let matches = |t: &str| {
            globs.is_empty()
                || globs
                    .iter()
                    .any(|g| g.strip_suffix('*').map_or(t == *g, |p| t.starts_with(p)))
        };
        let wanted: BTreeSet<&str> = sent
            .iter()
            .filter(|(_, t)| matches(t))
            .map(|(id, _)| id.as_str())
            .collect();
        let acknowledged = worker.acknowledged(route);
        let got: BTreeSet<&str> = acknowledged.keys().map(String::as_str).collect();
        assert_eq!(got, wanted, "route {route}: {:?}", worker.summary());
        if once {
            assert!(
                acknowledged.values().all(|n| *n == 1),
                "route {route}: {acknowledged:?}"
            );
        }
        for delivery in worker.to(route) {
            assert_eq!(delivery.key(), target.record_key(delivery.event_id()));
        }
        duplicates.insert(
            route.to_string(),
            acknowledged.values().map(|n| n - 1).sum(),
        );
    }
    duplicates
}

/// Waits until every route's group has settled on every partition stream of `name`.
async fn all_settled(cluster: &RedisCluster, name: &str, routes: &[&str], seconds: u64) {
    for k in 0..PARTITIONS {
        settled(cluster, &partition_stream(name, k), routes, seconds).await;
    }
}
