//! `sources.NAME.body_dedup`: a captured body replayed under a fresh, unsigned event ID is a
//! duplicate, in both modes (docs/design.md, "Redis layout").

use std::collections::BTreeMap;
use std::time::Duration;

use crate::support::app::Builder;
use crate::support::metrics::{DUPLICATE_HITS, EVENTS};
use crate::support::settings::{secs, source, SinkKind, SinkSettings, GITHUB_SECRET};
use crate::support::worker::Worker;
use crate::support::{both_backends, with_id, Backend, TestApp};

const BODY: &[u8] = br#"{"zen":"Captured once, replayed forever.","hook_id":7}"#;

/// A daemon whose `github` source has the provider's defaults (the harness turns body_dedup off).
fn github_defaults(backend: Backend) -> Builder {
    TestApp::builder(backend).source("github", source("github", GITHUB_SECRET))
}

/// GitHub's delivery ID is not signed: the same signed body under a new `X-GitHub-Delivery` is
/// answered as a replay and forwards nothing; another body under that new ID is a new event.
async fn a_body_replayed_under_a_fresh_id_is_a_duplicate(backend: Backend) {
    let t = github_defaults(backend).start().await;
    let first = t.deliver("github", BODY, &with_id("delivery-1")).await;
    assert_eq!(first.status(), 200);
    let stored = t.stored();

    let replay = t.deliver("github", BODY, &with_id("delivery-2")).await;
    assert_eq!(replay.status(), 200);
    assert_eq!(replay.headers()["idempotency-replayed"], "true");
    assert_eq!(t.stored(), stored, "a replayed body wrote something");
    assert_eq!(t.entries("github").len(), 1);

    let other = br#"{"zen":"Another event.","hook_id":7}"#;
    let new = t.deliver("github", other, &with_id("delivery-2")).await;
    assert_eq!(new.status(), 200);
    assert!(new.headers().get("idempotency-replayed").is_none());
    let ids: Vec<String> = t.entries("github").into_iter().map(|(id, _)| id).collect();
    assert_eq!(ids, ["delivery-1", "delivery-2"]);

    let count = |outcome| [("source", "github"), ("outcome", outcome)];
    assert_eq!(t.metric(EVENTS, &count("forwarded")).await, 2.0);
    assert_eq!(t.metric(EVENTS, &count("duplicate")).await, 1.0);
    assert_eq!(t.metric(DUPLICATE_HITS, &[("source", "github")]).await, 1.0);
}

/// With `body_dedup = false` the unsigned ID alone decides, as the provider intends.
async fn body_dedup_can_be_turned_off(backend: Backend) {
    let mut github = source("github", GITHUB_SECRET);
    github.body_dedup = Some(false);
    let t = TestApp::builder(backend)
        .source("github", github)
        .start()
        .await;
    for id in ["delivery-1", "delivery-2"] {
        let response = t.deliver("github", BODY, &with_id(id)).await;
        assert!(response.headers().get("idempotency-replayed").is_none());
    }
    assert_eq!(t.entries("github").len(), 2);
}

both_backends!(
    a_body_replayed_under_a_fresh_id_is_a_duplicate,
    body_dedup_can_be_turned_off,
);

/// The body record: `<prefix>:{<source>}:b:<22 characters>`, expiring with the dedup window,
/// next to the event's record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_body_record_shares_the_source_hash_tag_and_window() {
    let t = github_defaults(Backend::Redis).start().await;
    assert_eq!(
        t.deliver("github", BODY, &with_id("delivery-1"))
            .await
            .status(),
        200
    );
    let mut redis = t.redis.as_ref().unwrap().connection();
    let keys: Vec<String> = ::redis::cmd("KEYS")
        .arg("hookonce:{github}:b:*")
        .query(&mut redis)
        .unwrap();
    assert_eq!(keys.len(), 1, "{keys:?}");
    let digest = keys[0].strip_prefix("hookonce:{github}:b:").unwrap();
    assert_eq!(digest.len(), 22);
    assert!(digest
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
    let ttl: i64 = ::redis::cmd("PTTL")
        .arg(&keys[0])
        .query(&mut redis)
        .unwrap();
    let window = Duration::from_secs(4 * 24 * 3600).as_millis() as i64;
    assert!(ttl > window - 60_000 && ttl <= window, "{ttl}");
    // Both records are done records of the same entry; the event's carries the whole digest,
    // so that `hookonce forget` finds the body record.
    let mut get = |key: &str| -> String { ::redis::cmd("GET").arg(key).query(&mut redis).unwrap() };
    let record = get("hookonce:{github}:d:delivery-1");
    assert_eq!(record, get(&keys[0]));
    assert!(record.ends_with(&format!(" {digest}")), "{record}");
}

/// Two-phase mode over the Redis ledger: the replay is answered from the body's claim and the
/// worker receives the event once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_body_reaches_an_http_worker_once() {
    let worker = Worker::start().await;
    let sink = SinkSettings {
        kind: SinkKind::Http,
        url: Some(worker.url()),
        timeout: Some(secs(2)),
        headers: BTreeMap::new(),
        ..SinkSettings::default()
    };
    let t = github_defaults(Backend::Redis)
        .sink(|s| *s = sink)
        .start()
        .await;
    for id in ["delivery-1", "delivery-2", "delivery-3"] {
        let response = t.deliver("github", BODY, &with_id(id)).await;
        assert_eq!(response.status(), 200, "{id}");
    }
    assert_eq!(worker.received().len(), 1);
    let duplicates = [("source", "github"), ("outcome", "duplicate")];
    assert_eq!(t.metric(EVENTS, &duplicates).await, 2.0);
}
