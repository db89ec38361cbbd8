//! A Redis Cluster under faults while signed requests flow: a master SIGKILLed (its replica
//! takes over) and a slot resharded to another master. Each run ends with the audit.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{audit, cluster_app, confirmed_writes, deliver, sources_on_every_master, Load};
use crate::support::cluster::{connection, wait_for, RedisCluster};
use crate::support::eventually;
use crate::support::settings::ms;

/// With `wait_replicas = 1`, killing a master loses nothing that was acknowledged: its slots
/// answer 503 until the replica is promoted, then the same daemon serves them again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_master_answers_503_then_recovers_without_a_restart() {
    let mut cluster = RedisCluster::start();
    let sources = sources_on_every_master(&cluster);
    let names: Vec<String> = sources.iter().map(|(name, _)| name.clone()).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let app = Arc::new(
        // The end asserts 2xx answers (each acknowledged event's retry) that WAIT must confirm.
        cluster_app(&cluster, &refs, confirmed_writes).await,
    );
    let (victim_source, victim) = sources[0].clone();
    let load = Load::start(&app, &names);
    eventually(10, "a first acknowledged event", || async {
        deliver(&app, &victim_source, "evt_warmup").await == 200
    })
    .await;

    let killed_at = Instant::now();
    cluster.kill(victim);
    eventually(10, "the victim's slots to answer 503", || async {
        deliver(&app, &victim_source, &format!("evt_probe_{}", rand_id())).await == 503
    })
    .await;
    eventually(10, "/readyz to say 503", || async {
        app.readiness().await == 503
    })
    .await;
    // The replica takes over, but has no replica of its own: WAIT refuses until the old master
    // is back as its replica.
    wait_for(15, "a replica to take the victim's slots", || {
        !cluster.masters().contains(&victim) && cluster.masters().len() == 3
    });
    cluster.restart(victim);
    eventually(15, "the victim's source to be served again", || async {
        deliver(&app, &victim_source, &format!("evt_probe_{}", rand_id())).await == 200
    })
    .await;
    let recovered_in = killed_at.elapsed();
    eventually(10, "/readyz to say 200 again", || async {
        app.readiness().await == 200
    })
    .await;
    let attempts = load.stop().await;

    let (acknowledged, refused) = audit(&app, &attempts, &mut cluster.client());
    assert!(
        acknowledged > 0 && refused > 0,
        "{acknowledged} 2xx, {refused} 503"
    );
    // Every acknowledged event is still known: its retry is a duplicate, not a new append.
    for attempt in attempts.iter().filter(|a| a.status < 300).take(50) {
        assert_eq!(deliver(&app, &attempt.source, &attempt.id).await, 200);
    }
    audit(&app, &attempts, &mut cluster.client());
    eprintln!(
        "failover: {acknowledged} acknowledged, {refused} refused, recovered in {recovered_in:?}"
    );
}

/// A slot moved to another master (`CLUSTER SETSLOT … MIGRATING/IMPORTING`, `MIGRATE`, then
/// `SETSLOT … NODE`) while requests flow: the client follows `ASK` and `MOVED`, and no
/// acknowledged event is lost. With `wait_replicas`, so that each script and its `WAIT` are
/// redirected together, as one pipeline, to the slot's new master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_resharded_under_load_loses_nothing() {
    let cluster = RedisCluster::start();
    let sources = sources_on_every_master(&cluster);
    let names: Vec<String> = sources.iter().map(|(name, _)| name.clone()).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let app = Arc::new(
        cluster_app(&cluster, &refs, |store| {
            store.wait_replicas = 1;
            store.wait_timeout = ms(200);
        })
        .await,
    );
    let (moved_source, from) = sources[0].clone();
    let to = sources[1].1;
    let slot = cluster.keyslot(&format!("{{{moved_source}}}"));
    let load = Load::start(&app, &names);
    eventually(10, "events to flow", || async {
        deliver(&app, &moved_source, "evt_warmup").await == 200
    })
    .await;

    migrate_slot(&cluster, slot, from, to);
    assert_eq!(cluster.master_of_slot(slot), to);
    eventually(10, "an event after the move", || async {
        deliver(&app, &moved_source, &format!("evt_after_{}", rand_id())).await == 200
    })
    .await;
    let attempts = load.stop().await;
    let (acknowledged, _) = audit(&app, &attempts, &mut cluster.client());
    assert!(acknowledged > 0);
    assert_eq!(app.readiness().await, 200);
}

/// Moves `slot` from the master on `from` to the one on `to`, key batch by key batch, as
/// `redis-cli --cluster reshard` does.
fn migrate_slot(cluster: &RedisCluster, slot: u16, from: u16, to: u16) {
    let (from_id, to_id) = (cluster.node_id(from), cluster.node_id(to));
    let mut source = connection(from).unwrap();
    let mut target = connection(to).unwrap();
    let setslot = |conn: &mut redis::Connection, state: &str, id: &str| {
        redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(slot)
            .arg(state)
            .arg(id)
            .exec(conn)
            .unwrap();
    };
    setslot(&mut target, "IMPORTING", &from_id);
    setslot(&mut source, "MIGRATING", &to_id);
    loop {
        let keys: Vec<String> = redis::cmd("CLUSTER")
            .arg("GETKEYSINSLOT")
            .arg(slot)
            .arg(10)
            .query(&mut source)
            .unwrap();
        if keys.is_empty() {
            break;
        }
        redis::cmd("MIGRATE")
            .arg("127.0.0.1")
            .arg(to)
            .arg("")
            .arg(0)
            .arg(5000)
            .arg("KEYS")
            .arg(&keys)
            .exec(&mut source)
            .unwrap();
        // Let requests meet the slot half moved (ASK, TRYAGAIN) for a while.
        std::thread::sleep(Duration::from_millis(20));
    }
    for port in cluster.masters() {
        setslot(&mut connection(port).unwrap(), "NODE", &to_id);
    }
    wait_for(10, "every node to agree on the slot's owner", || {
        cluster.master_of_slot(slot) == to
    });
}

fn rand_id() -> u64 {
    rand::random()
}
