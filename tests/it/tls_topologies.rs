//! TLS to Redis for the other topologies: a Sentinel group whose sentinels, data nodes and
//! replication all speak TLS only (the master the sentinels name is reached with the configured
//! CA and client certificate, before and after a failover), and a Redis Cluster with
//! `tls-cluster yes`.

use std::sync::Arc;

use crate::support::cluster::RedisCluster;
use crate::support::sentinel::SentinelGroup;
use crate::support::tls::TlsFiles;
use crate::support::{eventually, now, stripe_body, Backend, TestApp};
use crate::topology::{cluster_app, sources_on_every_master, Topology};
use hookonce::config::StoreSettings;

/// The CA and client certificate of `tls` in `store`.
fn trust(store: &mut StoreSettings, tls: &TlsFiles) {
    store.tls_ca_file = Some(tls.ca.clone());
    store.tls_cert_file = Some(tls.client_cert.clone());
    store.tls_key_file = Some(tls.client_key.clone());
}

/// Delivers `id` to the Stripe source; the status and whether it was a replay.
async fn deliver(t: &TestApp, id: &str) -> (u16, bool) {
    let response = t.deliver("stripe", &stripe_body(id, 100), &now()).await;
    let replayed = response.headers().get("idempotency-replayed").is_some();
    (response.status().as_u16(), replayed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_group_over_tls_serves_and_is_found_again_after_a_failover() {
    let tls = Arc::new(TlsFiles::generate());
    let group = SentinelGroup::start_tls(Arc::clone(&tls));
    assert!(group.sentinel_urls()[0].starts_with("rediss://"));
    let t = TestApp::builder(Backend::Redis)
        .store(|store| {
            Topology::Sentinel(&group).store(store);
            trust(store, &tls);
        })
        .start()
        .await;
    assert_eq!(deliver(&t, "evt_sentinel_tls").await, (200, false));
    assert_eq!(deliver(&t, "evt_sentinel_tls").await, (200, true));

    let old_master = group.master();
    let replica = group.other_data_node(old_master);
    group.failover();
    group.wait_for_master(replica, 40);
    eventually(
        15,
        "deliveries to reach the new master over TLS",
        || async {
            deliver(&t, &format!("evt_after_{}", rand::random::<u64>())).await == (200, false)
        },
    )
    .await;
    // The record written before the failover was replicated over TLS: still a duplicate.
    assert_eq!(deliver(&t, "evt_sentinel_tls").await, (200, true));
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_cluster_over_tls_takes_events_on_every_master() {
    let tls = Arc::new(TlsFiles::generate());
    let cluster = RedisCluster::start_tls(Arc::clone(&tls));
    assert!(cluster.seeds()[0].starts_with("rediss://"));
    let sources = sources_on_every_master(&cluster);
    let names: Vec<&str> = sources.iter().map(|(name, _)| name.as_str()).collect();
    let t = cluster_app(&cluster, &names, |store| trust(store, &tls)).await;
    for name in &names {
        let body = stripe_body(&format!("evt_{name}"), 100);
        let first = t.deliver(name, &body, &now()).await;
        assert_eq!(first.status(), 200, "{name}");
        let retry = t.deliver(name, &body, &now()).await;
        assert_eq!(retry.status(), 200, "{name}");
        assert_eq!(retry.headers()["idempotency-replayed"], "true", "{name}");
    }
    // Each source's stream holds its one event, read back over TLS from the master it is on.
    let mut client = cluster.client();
    for name in &names {
        let len: usize = redis::cmd("XLEN")
            .arg(format!("hookonce:{{{name}}}:events"))
            .query(&mut client)
            .unwrap();
        assert_eq!(len, 1, "{name}");
    }
    t.stop().await;
}
