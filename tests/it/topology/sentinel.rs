//! `store.topology = "sentinel"` against a real Sentinel group whose sentinels and data nodes
//! have different passwords: events go to the master the sentinels name, a killed master is
//! replaced and found again without a restart, and no credential is printed.

use std::sync::Arc;

use super::{audit, confirmed_writes, deliver, Load, Topology};
use crate::support::binary::{hookonce, output_text, write};
use crate::support::eventually;
use crate::support::sentinel::{SentinelGroup, MASTER_NAME, MASTER_PASSWORD, SENTINEL_PASSWORD};
use crate::support::settings::{self, STRIPE_SECRET};
use crate::support::{Backend, TestApp};

/// With `wait_replicas = 1`, a Sentinel failover under load loses nothing acknowledged; the
/// daemon asks the sentinels again and serves the new master without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_failover_under_load_recovers_without_a_restart() {
    let mut group = SentinelGroup::start();
    let app = TestApp::builder(Backend::Redis)
        .store(|store| {
            Topology::Sentinel(&group).store(store);
            confirmed_writes(store);
        })
        .source("shop", settings::source("stripe", STRIPE_SECRET))
        .start()
        .await;
    let app = Arc::new(app);
    assert_eq!(app.readiness().await, 200);
    let old_master = group.master();
    let replica = group.other_data_node(old_master);
    assert_eq!(deliver(&app, "shop", "evt_first").await, 200);

    let load = Load::start(&app, &["shop".to_owned()]);
    eventually(10, "events to flow", || async {
        deliver(&app, "shop", "evt_warmup").await == 200
    })
    .await;
    group.kill(old_master);
    eventually(10, "/readyz to say 503", || async {
        app.readiness().await == 503
    })
    .await;
    group.wait_for_master(replica, 40);
    // The new master has no replica until the old one is back as its replica: WAIT refuses.
    group.restart_as_replica(old_master, replica);
    eventually(15, "events to be acknowledged again", || async {
        deliver(
            &app,
            "shop",
            &format!("evt_after_{}", rand::random::<u64>()),
        )
        .await
            == 200
    })
    .await;
    eventually(10, "/readyz to say 200 again", || async {
        app.readiness().await == 200
    })
    .await;
    let attempts = load.stop().await;

    let mut master = group.data_connection(replica);
    let (acknowledged, refused) = audit(&app, &attempts, &mut master);
    assert!(
        acknowledged > 0 && refused > 0,
        "{acknowledged} 2xx, {refused} 503"
    );
    let stream = &app.app.ingest.target("shop").unwrap().streams()[0];
    let ids = super::stream_ids(&mut master, stream);
    assert!(
        ids.contains(&"evt_first".to_owned()),
        "the event before the failover survived"
    );
    eprintln!("sentinel failover: {acknowledged} acknowledged, {refused} refused");
}

/// A failover the sentinels run while the old master stays up (`SENTINEL FAILOVER`): the old
/// address still answers, as a replica (the sentinels drop its clients; a write reaching it gets
/// `READONLY`), and the daemon must go back to the sentinels for the new master — no restart,
/// nothing acknowledged lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_demoted_master_answering_readonly_is_left_for_the_new_one() {
    let group = SentinelGroup::start();
    let app = TestApp::builder(Backend::Redis)
        .store(|store| {
            Topology::Sentinel(&group).store(store);
            confirmed_writes(store);
        })
        .source("shop", settings::source("stripe", STRIPE_SECRET))
        .start()
        .await;
    let app = Arc::new(app);
    let old_master = group.master();
    let replica = group.other_data_node(old_master);
    assert_eq!(deliver(&app, "shop", "evt_first").await, 200);

    let load = Load::start(&app, &["shop".to_owned()]);
    eventually(10, "events to flow", || async {
        deliver(&app, "shop", "evt_warmup").await == 200
    })
    .await;
    group.failover();
    group.wait_for_master(replica, 40);
    group.wait_for_replica_of(old_master, replica);
    eventually(
        15,
        "events to be acknowledged by the new master",
        || async {
            let id = format!("evt_after_{}", rand::random::<u64>());
            deliver(&app, "shop", &id).await == 200
        },
    )
    .await;
    let attempts = load.stop().await;

    let mut master = group.data_connection(replica);
    let (acknowledged, refused) = audit(&app, &attempts, &mut master);
    assert!(acknowledged > 0, "{acknowledged} 2xx, {refused} 503");
    let stream = &app.app.ingest.target("shop").unwrap().streams()[0];
    let ids = super::stream_ids(&mut master, stream);
    assert!(ids.contains(&"evt_first".to_owned()));
    eprintln!("sentinel manual failover: {acknowledged} acknowledged, {refused} refused");
}

/// `check-config` and a failed start print neither the sentinels' nor the master's password.
#[test]
fn sentinel_credentials_are_redacted() {
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "[store]\ntopology = \"sentinel\"\n\
         sentinels = [\"redis://admin:url-pw-55@127.0.0.1:1\"]\n\
         sentinel_master = \"{MASTER_NAME}\"\n\
         sentinel_username = \"watcher\"\n\
         sentinel_password = \"{SENTINEL_PASSWORD}\"\n\
         password = \"{MASTER_PASSWORD}\"\ntimeout = \"200ms\"\n\
         [sources.shop]\nprovider = \"stripe\"\nsecrets = [\"{STRIPE_SECRET}\"]\n"
    );
    let path = write(dir.path(), "hookonce.toml", &config);
    let path = path.to_str().unwrap();
    let checked = hookonce(&["check-config", "--config", path], &[]);
    let text = output_text(&checked);
    assert!(checked.status.success(), "{text}");
    assert!(text.contains("127.0.0.1:1"), "{text}");
    let served = hookonce(&["serve", "--config", path], &[]);
    let failed = output_text(&served);
    assert!(!served.status.success(), "{failed}");
    for secret in [SENTINEL_PASSWORD, MASTER_PASSWORD, "url-pw-55", "watcher"] {
        assert!(
            !text.contains(secret),
            "check-config shows {secret}: {text}"
        );
        assert!(!failed.contains(secret), "serve shows {secret}: {failed}");
    }
}
