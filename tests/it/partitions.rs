//! `sources.NAME.partitions` on a standalone Redis: events spread over the partitions' streams
//! and are still deduplicated (by ID, and with `body_dedup` by payload); the recorded count
//! refuses a changed one unless `repartition = true`; `inspect` and `forget` find a partitioned
//! event; the relay delivers from every partition.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use hookonce::forward::target::id_hash;

use crate::relay::{relay, route, stripe_event};
use crate::support::binary::{hookonce, output_text, write, BIN};
use crate::support::daemon::Daemon;
use crate::support::relay_worker::RelayWorker;
use crate::support::settings::{source, GITHUB_SECRET, STRIPE_SECRET};
use crate::support::{now, with_id, Backend, RedisServer, TestApp};

fn partitioned(provider: &str, secret: &str, n: u32) -> hookonce::config::SourceSettings {
    hookonce::config::SourceSettings {
        partitions: Some(n),
        ..source(provider, secret)
    }
}

/// Keys matching `pattern`, counted.
fn keys(app: &TestApp, pattern: &str) -> usize {
    let mut redis = app.redis.as_ref().unwrap().connection();
    let found: Vec<String> = ::redis::cmd("KEYS").arg(pattern).query(&mut redis).unwrap();
    found.len()
}

/// How many entries each of the source's streams holds, partition 0 first.
fn stream_lengths(app: &TestApp, source: &str) -> Vec<u64> {
    let mut redis = app.redis.as_ref().unwrap().connection();
    let streams = app.app.ingest.target(source).unwrap().streams();
    streams
        .iter()
        .map(|stream| ::redis::cmd("XLEN").arg(stream).query(&mut redis).unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_source_spreads_its_events_and_still_deduplicates() {
    let t = TestApp::builder(Backend::Redis)
        .source("shop", partitioned("stripe", STRIPE_SECRET, 4))
        .start()
        .await;
    let ids: Vec<String> = (0..24).map(|i| format!("evt_p_{i}")).collect();
    for id in &ids {
        let body = crate::support::stripe_body(id, 100);
        let first = t.deliver("shop", &body, &now()).await;
        assert_eq!(first.status(), 200, "{id}");
        assert!(first.headers().get("idempotency-replayed").is_none());
        let again = t.deliver("shop", &body, &now()).await;
        assert_eq!(again.headers()["idempotency-replayed"], "true", "{id}");
    }
    let lengths = stream_lengths(&t, "shop");
    assert_eq!(lengths.iter().sum::<u64>(), 24, "{lengths:?}");
    assert!(
        lengths.iter().all(|&n| n > 0),
        "every partition used: {lengths:?}"
    );
    // Each entry is in the stream of its documented partition, under the source's name.
    let mut redis = t.redis.as_ref().unwrap().connection();
    for k in 0..4u64 {
        let stream = format!("hookonce:{{shop.{k}}}:events");
        for id in crate::topology::stream_ids(&mut redis, &stream) {
            assert_eq!(id_hash(&id) % 4, k, "{id} in {stream}");
        }
    }
    assert!(t.stream_entries("shop").iter().all(|e| e.source == "shop"));
    assert_eq!(
        keys(&t, "hookonce:{shop}:d:*"),
        0,
        "no record under the bare tag"
    );
    assert_eq!(keys(&t, "hookonce:{shop.*}:d:*"), 24);
    let mut get = |key: &str| -> String { ::redis::cmd("GET").arg(key).query(&mut redis).unwrap() };
    assert_eq!(get("hookonce:{shop}:partitions"), "4");
    assert_eq!(get("hookonce:{stripe}:partitions"), "1", "unpartitioned: 1");
}

/// With `body_dedup` the payload picks the partition: a body replayed under a fresh ID meets
/// its body record and is a duplicate, and each event's two records share one partition.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_body_dedup_source_catches_a_replay_under_a_new_id() {
    let mut github = partitioned("github", GITHUB_SECRET, 4);
    github.body_dedup = Some(true);
    let t = TestApp::builder(Backend::Redis)
        .source("gh", github)
        .start()
        .await;
    for i in 0..12 {
        let body = format!(r#"{{"zen":"event {i}","hook_id":{i}}}"#);
        let first = t
            .deliver("gh", body.as_bytes(), &with_id(&format!("d-{i}")))
            .await;
        assert_eq!(first.status(), 200);
        let replay = t
            .deliver("gh", body.as_bytes(), &with_id(&format!("r-{i}")))
            .await;
        assert_eq!(replay.headers()["idempotency-replayed"], "true", "body {i}");
    }
    let lengths = stream_lengths(&t, "gh");
    assert_eq!(lengths.iter().sum::<u64>(), 12, "{lengths:?}");
    assert!(
        lengths.iter().filter(|&&n| n > 0).count() > 1,
        "{lengths:?}"
    );
    for (k, &length) in lengths.iter().enumerate() {
        let records = keys(&t, &format!("hookonce:{{gh.{k}}}:d:*"));
        let bodies = keys(&t, &format!("hookonce:{{gh.{k}}}:b:*"));
        assert_eq!(
            records, bodies,
            "partition {k}: records and body records together"
        );
        assert_eq!(records as u64, length, "partition {k}");
    }
}

/// The relay reads every partition's stream: each event reaches the worker once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_relay_delivers_from_every_partition() {
    let worker = RelayWorker::start().await;
    let routes = vec![("billing", route(&["stripe"], &worker.url("billing")))];
    let t = TestApp::builder(Backend::Redis)
        .source("stripe", partitioned("stripe", STRIPE_SECRET, 3))
        .relay(|r| *r = relay(true, routes))
        .start()
        .await;
    let ids = crate::relay::ids("part", 15);
    for id in &ids {
        let response = t
            .deliver("stripe", &stripe_event(id, "invoice.paid"), &now())
            .await;
        assert_eq!(response.status(), 200, "{id}");
    }
    assert!(stream_lengths(&t, "stripe").iter().all(|&n| n > 0));
    worker.wait_acknowledged("billing", &ids, 20).await;
    let acknowledged = worker.acknowledged("billing");
    for id in &ids {
        assert_eq!(acknowledged.get(id), Some(&1), "{id}: {acknowledged:?}");
    }
}

/// With `body_dedup` the payload picks an event's partition, which its ID cannot tell: the
/// relay's `Idempotency-Key` is still the key of the event's record, found by the stream it read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_relay_keys_a_body_dedup_partition_by_its_record() {
    let worker = RelayWorker::start().await;
    let mut github = partitioned("github", GITHUB_SECRET, 4);
    github.body_dedup = Some(true);
    let routes = vec![("audit", route(&["gh"], &worker.url("audit")))];
    let t = TestApp::builder(Backend::Redis)
        .source("gh", github)
        .relay(|r| *r = relay(true, routes))
        .start()
        .await;
    let ids = crate::relay::ids("keyed", 12);
    for (i, id) in ids.iter().enumerate() {
        let body = format!(r#"{{"zen":"keyed {i}"}}"#);
        let response = t.deliver("gh", body.as_bytes(), &with_id(id)).await;
        assert_eq!(response.status(), 200, "{id}");
    }
    worker.wait_acknowledged("audit", &ids, 20).await;
    let mut redis = t.redis.as_ref().unwrap().connection();
    for delivery in worker.to("audit") {
        let exists: bool = ::redis::cmd("EXISTS")
            .arg(delivery.key())
            .query(&mut redis)
            .unwrap();
        assert!(
            exists,
            "{}: {} is no record",
            delivery.event_id(),
            delivery.key()
        );
    }
}

fn config(redis: &RedisServer, partitions: u32, repartition: bool) -> String {
    format!(
        "[store]\nbackend = \"redis\"\nredis_url = \"{}\"\n\n[sources.gh]\nprovider = \"github\"\nsecrets = [\"s3\"]\npartitions = {partitions}\nrepartition = {repartition}\n",
        redis.url()
    )
}

/// `hookonce serve` that must refuse to start: its exit status and output. Its exit is polled
/// (the test has no async process API) and a daemon still running after 20 s is killed.
async fn refused_start(config: &Path, dir: &Path) -> (Option<i32>, String) {
    let log = dir.join("refused.log");
    let file = std::fs::File::create(&log).unwrap();
    let mut child = std::process::Command::new(BIN)
        .args(["serve", "--config", config.to_str().unwrap()])
        .env("HOOKONCE__SERVER__LISTEN", "127.0.0.1:0")
        .env("HOOKONCE__SERVER__METRICS_LISTEN", "127.0.0.1:0")
        .env_remove("HOOKONCE_CONFIG")
        .stdout(file.try_clone().unwrap())
        .stderr(file)
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!(
                "the daemon started:\n{}",
                std::fs::read_to_string(&log).unwrap()
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    (status.code(), std::fs::read_to_string(&log).unwrap())
}

/// A changed count is refused naming the key, why and how to migrate; `repartition = true`
/// records the new count; `inspect` and `forget` then find the event in its partition.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_count_refuses_to_start_and_repartition_allows_it() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "hookonce.toml", &config(&redis, 2, false));
    let mut first = Daemon::spawn(&path, dir.path(), &[]).await;
    first.kill();
    let get = |key: &str| -> String {
        ::redis::cmd("GET")
            .arg(key)
            .query(&mut redis.connection())
            .unwrap()
    };
    assert_eq!(get("hookonce:{gh}:partitions"), "2");

    write(dir.path(), "hookonce.toml", &config(&redis, 3, false));
    let (code, text) = refused_start(&path, dir.path()).await;
    assert_ne!(code, Some(0), "{text}");
    for needed in [
        "sources.gh.partitions = 3",
        "records 2",
        "forwarded again",
        "dedup_ttl",
        "sources.gh.repartition = true",
    ] {
        assert!(text.contains(needed), "{needed:?} missing:\n{text}");
    }
    assert_eq!(
        get("hookonce:{gh}:partitions"),
        "2",
        "a refused start wrote"
    );

    write(dir.path(), "hookonce.toml", &config(&redis, 3, true));
    let daemon = Daemon::spawn(&path, dir.path(), &[]).await;
    assert_eq!(get("hookonce:{gh}:partitions"), "3");
    inspect_and_forget(&path, &daemon, &redis, dir.path()).await;
}

/// `inspect` finds a body_dedup (github) event in whichever partition its payload chose, and
/// `forget` removes both its records, so that the next delivery is forwarded again.
async fn inspect_and_forget(path: &Path, daemon: &Daemon, redis: &RedisServer, dir: &Path) {
    let body_file = write(dir, "body.json", r#"{"zen":"partitioned"}"#);
    let cfg = path.to_str().unwrap();
    let output = hookonce(
        &[
            "sign",
            "--config",
            cfg,
            "--source",
            "gh",
            "--body",
            body_file.to_str().unwrap(),
            "--id",
            "part-evt",
        ],
        &[],
    );
    assert!(output.status.success(), "{}", output_text(&output));
    let headers = crate::support::binary::printed_headers(&output.stdout);
    let url = daemon.url("/webhooks/gh");
    let body = br#"{"zen":"partitioned"}"#;
    let client = reqwest::Client::new();
    let post = || crate::support::http::post(&client, &url, body, &headers);
    assert_eq!(post().await.status(), 200);

    let inspect = hookonce(&["inspect", "--config", cfg, "gh", "part-evt"], &[]);
    let shown = output_text(&inspect);
    assert!(inspect.status.success(), "{shown}");
    let partition = (0..3)
        .find(|k| shown.contains(&format!("hookonce:{{gh.{k}}}:d:part-evt")))
        .unwrap_or_else(|| panic!("no partitioned key in:\n{shown}"));
    assert!(
        shown.contains(&format!("stream:      hookonce:{{gh.{partition}}}:events")),
        "{shown}"
    );

    let forget = hookonce(&["forget", "--config", cfg, "gh", "part-evt"], &[]);
    assert!(forget.status.success(), "{}", output_text(&forget));
    let mut connection = redis.connection();
    let left: Vec<String> = ::redis::cmd("KEYS")
        .arg(format!("hookonce:{{gh.{partition}}}:[db]:*"))
        .query(&mut connection)
        .unwrap();
    assert!(left.is_empty(), "forget left {left:?}");
    let again = post().await;
    assert!(again.headers().get("idempotency-replayed").is_none());
    let missing = hookonce(&["inspect", "--config", cfg, "gh", "never-seen"], &[]);
    assert_eq!(missing.status.code(), Some(1));
    let lengths: BTreeMap<u32, u64> = (0..3)
        .map(|k| {
            let stream = format!("hookonce:{{gh.{k}}}:events");
            let n = ::redis::cmd("XLEN")
                .arg(stream)
                .query(&mut connection)
                .unwrap();
            (k, n)
        })
        .collect();
    assert_eq!(lengths[&partition], 2, "{lengths:?}");
}
