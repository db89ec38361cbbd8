//! `hookonce relay` processes: one SIGKILLed mid-delivery is taken over by another after
//! `claim_idle` (at least once, the same `Idempotency-Key`, the attempt counted on); two relays
//! at once share the work without loss, and the workers' side is audited by
//! `hookonce-loadgen audit-relay`; route headers with `env:` secrets reach the worker and never
//! the logs.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::*;
use crate::support::binary::BIN;
use crate::support::daemon::Daemon;
use crate::support::relay_worker::RelayWorker;

const TOKEN: &str = "Bearer relay-token-never-logged-5c1e";

/// A daemon that only ingests (no relay), and a configuration file for relays on its Redis.
async fn ingest_and_config(
    relay: RelaySettings,
    extra: &str,
) -> (TestApp, tempfile::TempDir, PathBuf) {
    let app = TestApp::start(crate::support::Backend::Redis).await;
    let dir = tempfile::tempdir().unwrap();
    let url = app.redis.as_ref().unwrap().url();
    let config = config_file(dir.path(), &url, &relay, extra);
    (app, dir, config)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_relay_is_taken_over_after_claim_idle_with_the_same_key() {
    let worker = RelayWorker::start().await;
    let headers = "headers = { Authorization = \"env:RELAY_TEST_TOKEN\" }\n";
    let (app, dir, config) = ingest_and_config(
        relay(
            false,
            vec![("billing", route(&["stripe"], &worker.url("billing")))],
        ),
        headers,
    )
    .await;
    let env = [("RELAY_TEST_TOKEN", TOKEN), ("RUST_LOG", "debug")];
    let mut first = Daemon::relay(&config, dir.path(), &env).await;
    worker.hold();
    send(&app, "evt_held", "invoice.paid").await;
    worker.wait_deliveries(1, 10).await;
    first.kill();
    let killed = Instant::now();
    // The worker answers 200 into a closed connection: the relay never learnt of it.
    worker.release();
    let second = Daemon::relay(&config, dir.path(), &env).await;
    send(&app, "evt_after", "invoice.paid").await;
    worker
        .wait_acknowledged("billing", &["evt_after".to_owned()], 10)
        .await;
    let deadline = Instant::now() + Duration::from_secs(15);
    while worker.of("billing", "evt_held").len() < 2 {
        assert!(
            Instant::now() < deadline,
            "evt_held was not delivered again: {:?}\nsecond relay's log:\n{}",
            worker.summary(),
            second.logs()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let held = worker.of("billing", "evt_held");
    assert_eq!(held.len(), 2, "{:?}", worker.summary());
    assert_eq!(held[0].key(), held[1].key());
    assert_eq!(held[0].key(), dedup_key("stripe", "evt_held"));
    assert_eq!((held[0].attempt(), held[1].attempt()), (1, 2));
    let waited = held[1].at.duration_since(killed);
    assert!(
        waited >= Duration::from_millis(900),
        "taken over after {waited:?}"
    );
    let redis = app.redis.as_ref().unwrap();
    settled(redis, &stream("stripe"), &["billing"], 10).await;
    // The route's header reached the worker; its value is in no log line.
    assert!(held.iter().all(|d| d.header("authorization") == TOKEN));
    let logs = first.logs() + &second.logs();
    assert!(!logs.contains("relay-token-never-logged"), "{logs}");
    assert!(!logs.is_empty());
    let page = second.metrics().await;
    assert!(
        metric(
            &page,
            DELIVERIES,
            &[("route", "billing"), ("outcome", "delivered")]
        ) >= 2.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_relays_share_the_work_and_the_audit_finds_no_loss() {
    let worker = RelayWorker::start().await;
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("deliveries.jsonl");
    worker.record_to(&record);
    let routes = vec![
        (
            "billing",
            typed(route(&["stripe"], &worker.url("billing")), &["invoice.*"]),
        ),
        ("audit", route(&["stripe"], &worker.url("audit"))),
    ];
    // Each relay refreshes what it holds every claim_idle / 4: with 1 s, a process stalled for
    // 750 ms on a loaded machine could see the other take over a live delivery, and the
    // exactly-once check before the crash would fail. 3 s leaves it more than 2.
    let relays = RelaySettings {
        claim_idle: secs(3),
        ..relay(false, routes)
    };
    let (app, _config_dir, config) = ingest_and_config(relays, "").await;
    let mut a = Daemon::relay(&config, dir.path(), &[]).await;
    let b = Daemon::relay(&config, dir.path(), &[]).await;
    let first = ids("evt_two", 40);
    for (i, id) in first.iter().enumerate() {
        let event_type = if i % 4 == 0 {
            "charge.refunded"
        } else {
            "invoice.paid"
        };
        send(&app, id, event_type).await;
    }
    worker.wait_acknowledged("audit", &first, 20).await;
    // Both relays took part.
    let delivered = |page: &str| metric(page, DELIVERIES, &[("outcome", "delivered")]);
    let (by_a, by_b) = (delivered(&a.metrics().await), delivered(&b.metrics().await));
    assert!(by_a > 0.0 && by_b > 0.0, "a {by_a}, b {by_b}");
    // A crash while events flow: at least once, never lost.
    let second = ids("evt_crash", 40);
    for (i, id) in second.iter().enumerate() {
        if i == 10 {
            a.kill();
        }
        send(&app, id, "invoice.paid").await;
    }
    let redis = app.redis.as_ref().unwrap();
    settled(redis, &stream("stripe"), &["billing", "audit"], 20).await;
    let billing: Vec<String> = first
        .iter()
        .enumerate()
        .filter(|(i, _)| i % 4 != 0)
        .map(|(_, id)| id.clone())
        .chain(second.iter().cloned())
        .collect();
    let acknowledged = worker.acknowledged("billing");
    assert_eq!(
        acknowledged.keys().cloned().collect::<Vec<_>>().len(),
        billing.len()
    );
    assert!(billing.iter().all(|id| acknowledged.contains_key(id)));
    // Before the crash, every event exactly once on each route.
    for id in &first {
        assert_eq!(worker.acknowledged("audit")[id], 1, "{id}");
    }

    let loadgen = PathBuf::from(BIN).with_file_name("hookonce-loadgen");
    assert!(
        loadgen.exists(),
        "build it first: cargo build -p hookonce-loadgen"
    );
    let output = std::process::Command::new(&loadgen)
        .args(["audit-relay", "--config", config.to_str().unwrap()])
        .arg("--deliveries")
        .arg(&record)
        .output()
        .unwrap();
    let text = crate::support::binary::output_text(&output);
    assert!(output.status.success(), "audit-relay failed:\n{text}");
    assert!(text.contains("lost 0"), "{text}");
    assert!(text.contains("unexplained 0"), "{text}");
    assert!(text.contains("route billing: 70 expected"), "{text}");
    assert!(text.contains("route audit: 80 expected"), "{text}");
}
