//! `sink.kind = "kafka"` against librdkafka's mock cluster (`support::kafka`; the Kafka wire
//! protocol and the idempotent producer, not an Apache Kafka broker): each event once in the
//! topic under concurrent duplicates, keyed by its event ID with the `hookonce-*` headers; a
//! mismatch answered 422; every broker down answered 503, and after they are back every event
//! that was answered 200 is in the topic, once unless it is in the documented window; and the
//! window itself (Redis failing after the delivery report) counted: one republish under one key.

use std::sync::Arc;

use super::{
    deliver_range, deliver_until_accepted, publish_through_a_lost_completion,
    retry_after_the_lease, start, Accepted,
};
use crate::support::kafka::{count_by_key, read_all, KafkaMock};
use crate::support::settings::{secs, SinkKind, SinkSettings};
use crate::support::with_id;

/// The topic `sink.topic`'s default names for the `github` source.
const TOPIC: &str = "hookonce.github";

fn kafka_sink(mock: &KafkaMock) -> SinkSettings {
    SinkSettings {
        kind: SinkKind::Kafka,
        brokers: mock.brokers(),
        timeout: Some(secs(2)),
        // Longer than the timeout and the grace after it (sink.lease's rule).
        lease: Some(secs(6)),
        ..SinkSettings::default()
    }
}

/// A mock cluster of three brokers with the `github` topic in three partitions.
fn cluster() -> KafkaMock {
    let mock = KafkaMock::start(3);
    mock.create_topic(TOPIC, 3);
    mock
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_forwards_each_event_once_with_its_key_and_headers() {
    let mock = cluster();
    let t = Arc::new(start(kafka_sink(&mock)).await);
    // 20 events × 3 deliveries, dealt round-robin to 16 concurrent clients.
    let mut clients = Vec::new();
    for client in 0..16 {
        let t = Arc::clone(&t);
        clients.push(tokio::spawn(async move {
            for delivery in (client..60).step_by(16) {
                let event = delivery % 20;
                let body = format!("{{\"n\":{event}}}");
                deliver_until_accepted(&t, body.as_bytes(), &format!("kafka-{event}")).await;
            }
        }));
    }
    for client in clients {
        client.await.unwrap();
    }
    let records = read_all(mock.bootstrap(), TOPIC).await;
    let counts = count_by_key(&records);
    assert_eq!(records.len(), 20, "one message per event: {counts:?}");
    assert_eq!(counts.len(), 20, "keys are not distinct: {counts:?}");
    let seven = records
        .iter()
        .find(|r| r.key == "kafka-7")
        .expect("event kafka-7 in the topic");
    assert_eq!(seven.value, br#"{"n":7}"#);
    assert_eq!(seven.headers["hookonce-event-id"], "kafka-7");
    assert_eq!(seven.headers["hookonce-source"], "github");
    assert_eq!(seven.headers["hookonce-provider"], "github");
    assert!(!seven.headers["hookonce-event-type"].is_empty());
    assert!(
        !seven.headers.contains_key("traceparent"),
        "telemetry is off"
    );
    let received_at: i64 = seven.headers["hookonce-received-at"].parse().unwrap();
    assert!(received_at > 1_700_000_000_000, "Unix ms: {received_at}");
    assert_eq!(seven.timestamp, Some(received_at), "the record's timestamp");
    let partitions: std::collections::BTreeSet<i32> = records.iter().map(|r| r.partition).collect();
    assert!(partitions.len() > 1, "keys spread over the partitions");
    assert_eq!(t.events("github", "forwarded").await, 20.0);
    assert_eq!(t.events("github", "duplicate").await, 40.0);
    // The same ID with another body is a mismatch: 422, and nothing published.
    let other = t
        .deliver("github", br#"{"n":"other"}"#, &with_id("kafka-7"))
        .await;
    assert_eq!(other.status(), 422);
    assert_eq!(read_all(mock.bootstrap(), TOPIC).await.len(), 20);
}

/// The exactly-once audit across an outage of every broker: clients keep delivering while the
/// brokers go down and come back. Every event answered 200 is in the topic; an event is there
/// twice only if a publish of it ended with its outcome unknown (the claim held until its lease
/// ended, then published again), which is the documented window; none is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_brokers_down_answer_503_then_every_accepted_event_is_there() {
    let mock = cluster();
    let t = Arc::new(start(kafka_sink(&mock)).await);
    // Per event: the 503s its deliveries saw.
    let accepted = Accepted::default();
    let deliver_range = |range| deliver_range(&t, &accepted, range);
    for n in 0..5 {
        deliver_range(n * 10..n * 10 + 5).await.unwrap();
    }
    // Every broker goes away: an event now is 503 (its message times out, outcome unknown).
    mock.all_down();
    let down = t
        .deliver("github", b"{\"n\":-1}", &with_id("outage-down"))
        .await;
    assert_eq!(down.status(), 503);
    // Its message timed out with its outcome unknown: the claim is held, not released, so the
    // provider's retry meanwhile is 409 rather than a second publish at once.
    let held = t
        .deliver("github", b"{\"n\":-1}", &with_id("outage-down"))
        .await;
    assert_eq!(
        held.status(),
        409,
        "the claim of an unknown outcome is held"
    );
    crate::support::eventually(30, "readiness to drop", || async {
        t.readiness().await == 503
    })
    .await;
    // Clients keep retrying through the outage and after it.
    let during: Vec<_> = (0..4)
        .map(|n| deliver_range(100 + n * 10..103 + n * 10))
        .collect();
    // Let the clients meet the outage before the brokers return.
    crate::support::eventually(60, "a client to see a 503", || async {
        t.events("github", "unavailable").await >= 3.0
    })
    .await;
    mock.all_up();
    for client in during {
        client.await.unwrap();
    }
    let down_retries = deliver_until_accepted(&t, b"{\"n\":-1}", "outage-down").await;
    accepted
        .lock()
        .unwrap()
        .insert("outage-down".to_owned(), down_retries + 1);
    crate::support::eventually(30, "readiness to return", || async {
        t.readiness().await == 200
    })
    .await;
    let records = read_all(mock.bootstrap(), TOPIC).await;
    let seen = count_by_key(&records);
    let accepted = accepted.lock().unwrap();
    let unavailable: u32 = accepted.values().sum();
    let twice: Vec<&String> = seen
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(k, _)| k)
        .collect();
    eprintln!(
        "audit: {} events accepted, {} messages in the topic, {unavailable} answers 503 on the \
         way, {} events twice (the window): {twice:?}",
        accepted.len(),
        records.len(),
        twice.len()
    );
    assert!(unavailable > 0, "the outage was never seen by a client");
    for (id, refused) in accepted.iter() {
        let copies = seen.get(id).copied().unwrap_or(0);
        assert!(copies >= 1, "{id} was answered 200 and is not in the topic");
        assert!(
            copies == 1 || *refused > 0,
            "{id} is there {copies} times without a publish whose outcome was unknown"
        );
        assert!(copies <= 2, "{id} is there {copies} times");
    }
    assert_eq!(
        seen.len(),
        accepted.len(),
        "no message beyond the accepted events"
    );
}

/// The window: Redis stops answering between the delivery report and the completion. The
/// request answers 503 (the claim stays until its lease ends); the provider's retry, here to a
/// second daemon on the same Redis, reclaims it and publishes again. The topic then holds the
/// event twice under one key, which is what a consumer drops; nothing is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_a_redis_failure_after_the_delivery_report_publishes_again_under_one_key() {
    let mock = cluster();
    let window = publish_through_a_lost_completion(kafka_sink(&mock)).await;
    let copies = || async { count_by_key(&read_all(mock.bootstrap(), TOPIC).await) };
    assert_eq!(copies().await["window-1"], 1, "the broker has it");
    // Until the lease ends the claim holds; then the retry publishes again and is answered 200.
    retry_after_the_lease(&window.retry).await;
    let seen = copies().await;
    eprintln!("window: {seen:?}");
    assert_eq!(
        seen["window-1"], 2,
        "the second copy, under the same key, for the consumer to drop"
    );
    let replay = window
        .retry
        .deliver("github", b"{}", &with_id("window-1"))
        .await;
    assert_eq!(replay.headers()["idempotency-replayed"], "true");
    assert_eq!(copies().await["window-1"], 2, "a replay publishes nothing");
}
