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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_a_partitioned_source_fans_out_retries_dead_letters_and_is_trimmed_safely() {
    let cluster = RedisCluster::start();
    let name = partitioned_source(&cluster);
    // A team's own group on partition 0, created by hand and never read until the end: trimming
    // must keep every entry of that stream for it.
    let p0 = partition_stream(&name, 0);
    let _: () = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(&p0)
        .arg("team")
        .arg("0")
        .arg("MKSTREAM")
        .query(&mut *cluster.connect())
        .unwrap();
    let worker = RelayWorker::start().await;
    let billing = RouteSettings {
        max_attempts: 3,
        ..typed(route(&[&name], &worker.url("billing")), &["invoice.*"])
    };
    let relay_settings = relay(
        true,
        vec![
            ("billing", billing),
            ("audit", route(&[&name], &worker.url("audit"))),
        ],
    );
    let app = cluster_app(
        &cluster,
        &name,
        |s| s,
        relay_settings.clone(),
        SinkTrim::Acknowledged,
    )
    .await;
    worker.script(
        "billing",
        "evt_retry",
        &[Answer::status(500), Answer::status(502)],
    );
    worker.poison("billing", "evt_poison", Answer::status(500));
    let mut sent: Vec<(String, &str)> = vec![
        ("evt_retry".to_owned(), "invoice.paid"),
        ("evt_poison".to_owned(), "invoice.paid"),
    ];
    for (i, id) in ids("evt_c", 24).into_iter().enumerate() {
        sent.push((
            id,
            if i.is_multiple_of(3) {
                "charge.refunded"
            } else {
                "invoice.paid"
            },
        ));
    }
    for (id, event_type) in &sent {
        send_to(&app, &name, id, event_type).await;
    }
    // A duplicate of a webhook reaches no worker.
    send_to(&app, &name, "evt_c-1", "invoice.paid").await;

    let dlq = format!("hookonce:{{{name}}}:dlq:billing");
    crate::support::eventually(15, "the poison event in the dead letters", || {
        let n = xlen(&cluster, &dlq);
        async move { n == 1 }
    })
    .await;
    all_settled(&cluster, &name, &["billing", "audit"], 15).await;
    let delivered: Vec<(String, &str)> = sent
        .iter()
        .filter(|(id, _)| id != "evt_poison")
        .cloned()
        .collect();
    audit_routes(
        &app,
        &worker,
        &name,
        &[("billing", &["invoice.*"][..])],
        &delivered,
        true,
    );
    audit_routes(&app, &worker, &name, &[("audit", &[][..])], &sent, true);
    // The events used every partition, and so every master.
    let used: BTreeSet<u32> = sent
        .iter()
        .map(|(id, _)| partition_of(&app, &name, id))
        .collect();
    let masters: BTreeSet<u16> = used
        .iter()
        .map(|k| cluster.master_of_slot(cluster.keyslot(&partition_stream(&name, *k))))
        .collect();
    assert_eq!(
        masters.len(),
        cluster.masters().len(),
        "partitions {used:?}"
    );
    // Retries: one key, attempts rising.
    let retried = worker.of("billing", "evt_retry");
    let seen: Vec<(u32, u16)> = retried.iter().map(|d| (d.attempt(), d.status)).collect();
    assert_eq!(seen, [(1, 500), (2, 502), (3, 200)]);
    // The dead letter, written across slots: the entry's fields, why, and its original ID
    // (the ack of the event's dedup record).
    let poison = worker.of("billing", "evt_poison");
    assert_eq!(
        poison.iter().map(|d| d.attempt()).collect::<Vec<_>>(),
        [1, 2, 3]
    );
    let record: String = redis::cmd("GET")
        .arg(
            app.app
                .ingest
                .target(&name)
                .unwrap()
                .record_key("evt_poison"),
        )
        .query(&mut *cluster.connect())
        .unwrap();
    let entry_id = record.split(' ').next().unwrap().to_owned();
    let (_, letter) = xrange(&cluster, &dlq).remove(0);
    assert_eq!(letter["event_id"], "evt_poison");
    assert_eq!(letter["source"], name);
    assert_eq!(letter["entry_id"], entry_id);
    assert_eq!(
        (letter["attempts"].as_str(), letter["last_status"].as_str()),
        ("3", "500")
    );
    assert!(!letter["body"].is_empty());

    // Trimming: every partition stream but the team's is emptied; the team's keeps it all.
    let in_p0: Vec<&str> = sent
        .iter()
        .filter(|(id, _)| partition_of(&app, &name, id) == 0)
        .map(|(id, _)| id.as_str())
        .collect();
    crate::support::eventually(20, "the acknowledged partitions trimmed", || {
        let left: u64 = (1..PARTITIONS)
            .map(|k| xlen(&cluster, &partition_stream(&name, k)))
            .sum();
        async move { left == 0 }
    })
    .await;
    let kept: BTreeSet<String> = xrange(&cluster, &p0)
        .into_iter()
        .map(|(_, f)| f["event_id"].clone())
        .collect();
    assert_eq!(
        kept,
        in_p0.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>()
    );

    // The operator's commands on the cluster.
    let dir = tempfile::tempdir().unwrap();
    let config = cluster_config(dir.path(), &cluster, &name, &relay_settings);
    let listed = cli_ok(&config, &["dlq", "list", "--route", "billing", "--json"]);
    assert!(
        listed.contains("\"evt_poison\"") && listed.lines().count() == 1,
        "{listed}"
    );
    worker.heal("billing", "evt_poison");
    cli_ok(&config, &["dlq", "replay", "--all", "--route", "billing"]);
    worker
        .wait_acknowledged("billing", &["evt_poison".to_owned()], 10)
        .await;
    let last = worker.of("billing", "evt_poison").pop().unwrap();
    assert_eq!((last.attempt(), last.status), (1, 200));
    assert_eq!(xlen(&cluster, &dlq), 0);
    // redeliver copies from a partition stream to the route's replay stream (another slot).
    let again = in_p0
        .iter()
        .find(|id| {
            sent.iter()
                .any(|(s, t)| s == *id && t.starts_with("invoice"))
        })
        .expect("an invoice event in partition 0")
        .to_string();
    cli_ok(&config, &["redeliver", &name, &again, "--route", "billing"]);
    crate::support::eventually(10, "the redelivered event", || {
        let n = worker.acknowledged("billing")[&again];
        async move { n == 2 }
    })
    .await;
    // An event of a trimmed partition cannot be redelivered, and says so.
    let trimmed = sent
        .iter()
        .map(|(id, _)| id)
        .find(|id| partition_of(&app, &name, id) != 0)
        .unwrap();
    let mut args = vec!["redeliver", &name, trimmed, "--route", "audit"];
    args.extend(["--config", config.to_str().unwrap()]);
    let output = hookonce(&args, &[]);
    assert!(!output.status.success());
    assert!(
        output_text(&output).contains("trimmed"),
        "{}",
        output_text(&output)
    );

    // A destroyed group on partition 0 is recreated at 0: what the stream retains is delivered
    // again (at least once, the same key), and new events flow.
    let before = worker.acknowledged("audit");
    let _: i64 = redis::cmd("XGROUP")
        .arg("DESTROY")
        .arg(&p0)
        .arg(group("audit"))
        .query(&mut *cluster.connect())
        .unwrap();
    crate::support::eventually(15, "partition 0 delivered again to audit", || {
        let now = worker.acknowledged("audit");
        let done = in_p0.iter().all(|id| now[*id] > before[*id]);
        async move { done }
    })
    .await;
    settled(&cluster, &p0, &["billing", "audit"], 10).await;
    // The team's group lost nothing.
    let read: redis::streams::StreamReadReply = redis::cmd("XREADGROUP")
        .arg("GROUP")
        .arg("team")
        .arg("c1")
        .arg("COUNT")
        .arg(100)
        .arg("STREAMS")
        .arg(&p0)
        .arg(">")
        .query(&mut *cluster.connect())
        .unwrap();
    assert_eq!(read.keys[0].ids.len(), in_p0.len());
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_relay_processes_share_the_work_survive_a_kill_a_worker_outage_and_a_failover()
{
    let mut cluster = RedisCluster::start();
    let name = partitioned_source(&cluster);
    let worker = RelayWorker::start().await;
    let routes = vec![
        (
            "billing",
            RouteSettings {
                max_attempts: 1000,
                ..typed(route(&[&name], &worker.url("billing")), &["invoice.*"])
            },
        ),
        (
            "audit",
            RouteSettings {
                max_attempts: 1000,
                ..route(&[&name], &worker.url("audit"))
            },
        ),
    ];
    let relay_settings = relay(false, routes);
    // Ingest confirms every append on a replica, so a failover loses no accepted event.
    let app = cluster_app(
        &cluster,
        &name,
        |store| hookonce::config::StoreSettings {
            wait_replicas: 1,
            wait_timeout: ms(200),
            ..store
        },
        relay_settings.clone(),
        SinkTrim::None,
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let config = cluster_config(dir.path(), &cluster, &name, &relay_settings);
    let kind = |i: usize| {
        if i.is_multiple_of(4) {
            "charge.refunded"
        } else {
            "invoice.paid"
        }
    };
    // One relay alone first; it is SIGKILLed while the worker holds its deliveries of one event.
    let mut a = Daemon::relay(&config, dir.path(), &[]).await;
    let mut sent: Vec<(String, &str)> = Vec::new();
    for (i, id) in ids("evt_one", 10).into_iter().enumerate() {
        send_to(&app, &name, &id, kind(i)).await;
        sent.push((id, kind(i)));
    }
    let so_far: Vec<String> = sent.iter().map(|(id, _)| id.clone()).collect();
    worker.wait_acknowledged("audit", &so_far, 10).await;
    let invoices: Vec<String> = sent
        .iter()
        .filter(|(_, t)| t.starts_with("invoice"))
        .map(|(id, _)| id.clone())
        .collect();
    worker.wait_acknowledged("billing", &invoices, 10).await;
    worker.hold();
    send_to(&app, &name, "evt_held", "invoice.paid").await;
    sent.push(("evt_held".to_owned(), "invoice.paid"));
    // Both routes' deliveries of it reached the worker (and wait there) before the kill.
    crate::support::eventually(10, "evt_held to reach the worker on both routes", || {
        let both = ["billing", "audit"]
            .iter()
            .all(|route| !worker.of(route, "evt_held").is_empty());
        async move { both }
    })
    .await;
    a.kill();
    let killed = Instant::now();
    // The worker answers 200 into closed connections: the killed relay never learnt of it.
    worker.release();
    // Two relays at once from here on; one of them takes the held entries over.
    let b = Daemon::relay(&config, dir.path(), &[]).await;
    let c = Daemon::relay(&config, dir.path(), &[]).await;
    for (i, id) in ids("evt_two", 20).into_iter().enumerate() {
        send_to(&app, &name, &id, kind(i)).await;
        sent.push((id, kind(i)));
    }
    for route in ["billing", "audit"] {
        crate::support::eventually(10, &format!("evt_held taken over on {route}"), || {
            let n = worker.of(route, "evt_held").len();
            async move { n >= 2 }
        })
        .await;
        let held = worker.of(route, "evt_held");
        assert_eq!(held[0].key(), held[1].key());
        assert_eq!((held[0].attempt(), held[1].attempt()), (1, 2));
        let waited = held[1].at.duration_since(killed);
        assert!(
            waited >= Duration::from_millis(900),
            "taken over after {waited:?}"
        );
    }
    let wanted: Vec<String> = sent.iter().map(|(id, _)| id.clone()).collect();
    worker.wait_acknowledged("audit", &wanted, 20).await;
    let delivered = |page: &str| metric(page, DELIVERIES, &[("outcome", "delivered")]);
    let (by_b, by_c) = (delivered(&b.metrics().await), delivered(&c.metrics().await));
    assert!(by_b > 0.0 && by_c > 0.0, "b {by_b}, c {by_c}");

    // The worker down (connection refused), then up: nothing lost.
    worker.stop().await;
    for (i, id) in ids("evt_down", 8).into_iter().enumerate() {
        send_to(&app, &name, &id, kind(i)).await;
        sent.push((id, kind(i)));
    }
    crate::support::eventually(10, "attempts to fail while the worker is down", || async {
        let failed = [("route", "audit"), ("outcome", "failed")];
        b.metric(DELIVERIES, &failed).await + c.metric(DELIVERIES, &failed).await >= 8.0
    })
    .await;
    worker.restart().await;

    // A master of one partition killed while events flow: its replica takes over; the relay
    // rides it out. Ingest answers 503 for that partition until the old master is back as the
    // new one's replica (WAIT), and the sender retries as a provider would.
    let victim = cluster.master_of_slot(cluster.keyslot(&partition_stream(&name, 1)));
    cluster.kill(victim);
    let flow = {
        let app = std::sync::Arc::new(app);
        let sender = std::sync::Arc::clone(&app);
        let name = name.clone();
        let task = tokio::spawn(async move {
            let mut sent = Vec::new();
            for (i, id) in ids("evt_failover", 20).into_iter().enumerate() {
                send_to(&sender, &name, &id, kind(i)).await;
                sent.push((id, kind(i)));
            }
            sent
        });
        (app, task)
    };
    wait_for(15, "a replica to take the victim's slots", || {
        !cluster.masters().contains(&victim) && cluster.masters().len() == 3
    });
    cluster.restart(victim);
    let (app, task) = flow;
    sent.extend(task.await.unwrap());

    let wanted: Vec<String> = sent.iter().map(|(id, _)| id.clone()).collect();
    worker.wait_acknowledged("audit", &wanted, 30).await;
    let billing: Vec<String> = sent
        .iter()
        .filter(|(_, t)| t.starts_with("invoice"))
        .map(|(id, _)| id.clone())
        .collect();
    worker.wait_acknowledged("billing", &billing, 30).await;
    all_settled(&cluster, &name, &["billing", "audit"], 20).await;
    // At least once, never lost; duplicates only from the crash and the failover.
    let duplicates = audit_routes(
        &app,
        &worker,
        &name,
        &[("billing", &["invoice.*"][..]), ("audit", &[][..])],
        &sent,
        false,
    );
    // The failover reached the relays mid-run (their reads failed, then went on), and the
    // duplicates it may cause are counted.
    let logs = b.logs() + &c.logs();
    assert!(
        logs.contains("Relay cannot read from Redis; retrying."),
        "{logs}"
    );
    assert!(logs.contains("Relay reads from Redis again."), "{logs}");
    eprintln!(
        "relay on a cluster: {} events, duplicates {duplicates:?}",
        sent.len()
    );
    // The held event was delivered twice to each route (the takeover); the events before the
    // crash once.
    for route in ["billing", "audit"] {
        assert!(duplicates[route] >= 1, "{duplicates:?}");
    }
    for (id, _) in sent.iter().take(10) {
        assert_eq!(worker.acknowledged("audit")[id], 1, "{id}");
    }
    for relay in [&b, &c] {
        let page = relay.metrics().await;
        assert_eq!(
            metric(&page, DELIVERIES, &[("outcome", "dead_lettered")]),
            0.0
        );
    }
    drop(a);
}
