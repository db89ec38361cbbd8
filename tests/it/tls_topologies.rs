//! TLS to Redis for the other topologies: a Sentinel group whose sentinels, data nodes and
//! replication all speak TLS only (the master the sentinels name is reached with the configured
//! CA and client certificate, before and after a failover), and a Redis Cluster with
//! `tls-cluster yes`.

use std::sync::Arc;

use crate::support::sentinel::SentinelGroup;
use crate::support::tls::TlsFiles;
use crate::support::{eventually, now, stripe_body, Backend, TestApp};
use crate::topology::Topology;
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
    group.wait_for_master(replica, 20);
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
