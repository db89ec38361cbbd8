//! Two-phase mode (the Redis ledger with an HTTP sink) on a Redis Cluster, with sources on
//! every master, and behind Sentinel through a failover: claims, completions, duplicates,
//! mismatches and deliveries in flight, each record on the master of its source's slot.

use std::sync::Arc;

use super::{audit_sink, confirmed_writes, deliver, sources_on_every_master, Load, Topology};
use crate::support::cluster::RedisCluster;
use crate::support::sentinel::SentinelGroup;
use crate::support::settings::{self, secs, SinkKind, SinkSettings, STRIPE_SECRET};
use crate::support::worker::Worker;
use crate::support::{eventually, now, stripe_body, Backend, TestApp};

/// The HTTP sink to `worker`.
fn http_sink(worker: &Worker) -> SinkSettings {
    SinkSettings {
        kind: SinkKind::Http,
        url: Some(worker.url()),
        timeout: Some(secs(2)),
        lease: Some(secs(10)),
        ..SinkSettings::default()
    }
}

async fn two_phase_app(topology: Topology<'_>, worker: &Worker, sources: &[&str]) -> TestApp {
    let mut builder = TestApp::builder(Backend::Redis)
        .store(|store| {
            topology.store(store);
            confirmed_writes(store);
        })
        .sink(|sink| *sink = http_sink(worker));
    for name in sources {
        builder = builder.source(name, settings::source("stripe", STRIPE_SECRET));
    }
    builder.start().await
}

/// How many POSTs the worker received for this event ID.
fn posts(worker: &Worker, id: &str) -> usize {
    worker
        .received()
        .iter()
        .filter(|r| r.headers["x-hookonce-event-id"] == id)
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_phase_mode_on_every_master_claims_completes_and_refuses() {
    let cluster = RedisCluster::start();
    let sources = sources_on_every_master(&cluster);
    assert_eq!(sources.len(), 3, "{sources:?}");
    let names: Vec<&str> = sources.iter().map(|(name, _)| name.as_str()).collect();
    let worker = Worker::start().await;
    let app = Arc::new(two_phase_app(Topology::Cluster(&cluster), &worker, &names).await);
    assert_eq!(app.readiness().await, 200);
    let mut client = cluster.client();

    for (name, master) in &sources {
        let id = format!("evt_{name}_done");
        assert_eq!(deliver(&app, name, &id).await, 200, "{id}");
        let replay = app.deliver(name, &stripe_body(&id, 200), &now()).await;
        assert_eq!(replay.status(), 200);
        assert_eq!(replay.headers()["idempotency-replayed"], "true");
        // The same ID with another payload writes nothing and publishes nothing.
        let other = app.deliver(name, &stripe_body(&id, 300), &now()).await;
        assert_eq!(other.status(), 422, "{id} with another payload");
        assert_eq!(posts(&worker, &id), 1, "{id}");
        // The done record lives on the master of the source's slot.
        let key = format!("hookonce:{{{name}}}:d:{id}");
        assert_eq!(cluster.master_of_slot(cluster.keyslot(&key)), *master);
        let record: String = redis::cmd("GET").arg(&key).query(&mut client).unwrap();
        assert!(record.starts_with("http:200 "), "{record}");

        // A delivery in flight: the worker holds the first; the provider's retry gets 409.
        let id = format!("evt_{name}_held");
        let _ = worker.hold();
        let first = {
            let (app, name, id) = (Arc::clone(&app), name.clone(), id.clone());
            tokio::spawn(async move { deliver(&app, &name, &id).await })
        };
        eventually(10, "the worker to hold the first delivery", || async {
            posts(&worker, &id) == 1
        })
        .await;
        let key = format!("hookonce:{{{name}}}:d:{id}");
        let claim: String = redis::cmd("GET").arg(&key).query(&mut client).unwrap();
        assert!(claim.starts_with("p "), "a processing record: {claim}");
        assert_eq!(deliver(&app, name, &id).await, 409, "{id} in flight");
        worker.release();
        assert_eq!(first.await.unwrap(), 200);
        assert_eq!(deliver(&app, name, &id).await, 200, "{id} replayed");
        assert_eq!(posts(&worker, &id), 1, "{id}");
    }
}

/// With `wait_replicas = 1`, a Sentinel failover under load loses no acknowledged done record:
/// every event that got a 2xx is a duplicate after the failover (the worker got it once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_phase_mode_behind_sentinel_keeps_every_acknowledged_record_in_a_failover() {
    let mut group = SentinelGroup::start();
    let worker = Worker::start().await;
    let app = Arc::new(two_phase_app(Topology::Sentinel(&group), &worker, &["shop"]).await);
    assert_eq!(app.readiness().await, 200);
    let old_master = group.master();
    let replica = group.other_data_node(old_master);

    let load = Load::start(&app, &["shop".to_owned()]);
    eventually(10, "events to flow", || async {
        deliver(&app, "shop", "evt_warmup").await == 200
    })
    .await;
    group.kill(old_master);
    group.wait_for_master(replica, 40);
    group.restart_as_replica(old_master, replica);
    eventually(15, "events to be acknowledged again", || async {
        let id = format!("evt_after_{}", rand::random::<u64>());
        deliver(&app, "shop", &id).await == 200
    })
    .await;
    let attempts = load.stop().await;

    let published = || {
        let mut counts = std::collections::BTreeMap::new();
        for received in worker.received() {
            let id = received.headers["x-hookonce-event-id"].to_str().unwrap();
            *counts.entry(id.to_owned()).or_default() += 1;
        }
        counts
    };
    let (acknowledged, refused) = audit_sink(&app, &attempts, published).await;
    assert!(acknowledged > 0, "{acknowledged} 2xx, {refused} 503");
    eprintln!("two-phase sentinel failover: {acknowledged} acknowledged, {refused} refused");
}
