//! `sink.kind = "rabbitmq"` against a real broker: each event once in the queue under concurrent
//! duplicates, with its `message_id` and headers; a mismatch answered 422; an unroutable message
//! answered 503 and its claim released; a broker outage answered 503, and after the restart
//! every event that was answered 200 is in the queue exactly once; and the confirm window (Redis
//! failing after the confirm) counted: one republish under the same `message_id`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use super::{
    deliver_range, deliver_until_accepted, publish_through_a_lost_completion,
    retry_after_the_lease, start, Accepted,
};
use crate::support::binary::{hookonce, output_text, write};
use crate::support::rabbitmq::{declare, delete_exchange, drain, RabbitBroker};
use crate::support::settings::{secs, SinkKind, SinkSettings};
use crate::support::with_id;

/// Names unique to one test of one process, on a broker other tests may share.
fn names(test: &str) -> (String, String) {
    let tag = format!("{test}-{}", std::process::id());
    (format!("hk-ex-{tag}"), format!("hk-q-{tag}"))
}

fn rabbit_sink(url: String, exchange: &str, routing_key: Option<&str>) -> SinkSettings {
    SinkSettings {
        kind: SinkKind::Rabbitmq,
        url: Some(url),
        exchange: Some(exchange.to_owned()),
        routing_key: routing_key.map(str::to_owned),
        timeout: Some(secs(2)),
        lease: Some(secs(5)),
        ..SinkSettings::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmq_forwards_each_event_once_with_its_id_and_headers() {
    let broker = RabbitBroker::shared();
    let (exchange, queue) = names("once");
    declare(&broker.url(), &exchange, &queue, Some("github")).await;
    let t = Arc::new(start(rabbit_sink(broker.url(), &exchange, None)).await);
    // 20 events × 3 deliveries, dealt round-robin to 16 concurrent clients.
    let mut clients = Vec::new();
    for client in 0..16 {
        let t = Arc::clone(&t);
        clients.push(tokio::spawn(async move {
            for delivery in (client..60).step_by(16) {
                let event = delivery % 20;
                let body = format!("{{\"n\":{event}}}");
                deliver_until_accepted(&t, body.as_bytes(), &format!("amqp-{event}")).await;
            }
        }));
    }
    for client in clients {
        client.await.unwrap();
    }
    let messages = drain(&broker.url(), &queue).await;
    assert_eq!(messages.len(), 20, "one message per event");
    let ids: BTreeSet<String> = messages
        .iter()
        .map(|m| m.properties.message_id().as_ref().unwrap().to_string())
        .collect();
    assert_eq!(ids.len(), 20, "message_id values are not distinct");
    let seven = messages
        .iter()
        .find(|m| m.header("hookonce-event-id").as_deref() == Some("amqp-7"))
        .expect("event amqp-7 in the queue");
    assert_eq!(
        seven.properties.message_id().as_ref().unwrap().as_str(),
        "amqp-7"
    );
    assert_eq!(*seven.properties.delivery_mode(), Some(2), "persistent");
    assert_eq!(seven.routing_key, "github");
    assert_eq!(seven.body, br#"{"n":7}"#);
    assert_eq!(seven.header("hookonce-source").as_deref(), Some("github"));
    assert_eq!(seven.header("hookonce-provider").as_deref(), Some("github"));
    assert!(seven
        .header("hookonce-event-type")
        .is_some_and(|t| !t.is_empty()));
    let received_at: u64 = seven
        .header("hookonce-received-at")
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        received_at > 1_700_000_000_000,
        "Unix milliseconds: {received_at}"
    );
    assert_eq!(
        seven.properties.content_type().as_ref().map(|c| c.as_str()),
        Some("application/json")
    );
    assert_eq!(t.events("github", "forwarded").await, 20.0);
    assert_eq!(t.events("github", "duplicate").await, 40.0);
    // The same ID with another body is a mismatch: 422, and nothing published.
    let other = t
        .deliver("github", br#"{"n":"other"}"#, &with_id("amqp-7"))
        .await;
    assert_eq!(other.status(), 422);
    assert!(drain(&broker.url(), &queue).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmq_unroutable_is_503_and_releases_the_claim() {
    let broker = RabbitBroker::shared();
    let (exchange, queue) = names("unroutable");
    // The queue is bound to another key: the exchange takes the message and routes it nowhere.
    declare(&broker.url(), &exchange, &queue, Some("elsewhere")).await;
    let sink = rabbit_sink(broker.url(), &exchange, Some("hooks.{source}.{event_type}"));
    let t = start(sink).await;
    let refused = t.deliver("github", b"{}", &with_id("route-1")).await;
    assert_eq!(
        refused.status(),
        503,
        "an unroutable message is never acknowledged"
    );
    assert!(drain(&broker.url(), &queue).await.is_empty());
    assert_eq!(t.events("github", "forwarded").await, 0.0);
    // The claim was released: once a binding exists, the provider's retry is forwarded.
    let key = "hooks.github.ping";
    declare(&broker.url(), &exchange, &queue, Some(key)).await;
    let accepted = t.deliver("github", b"{}", &with_id("route-1")).await;
    assert_eq!(
        accepted.status(),
        200,
        "the retry after the binding is forwarded"
    );
    let messages = drain(&broker.url(), &queue).await;
    assert_eq!(messages.len(), 1);
    assert_eq!(messages[0].routing_key, key);
    assert_eq!(
        messages[0].header("hookonce-event-id").as_deref(),
        Some("route-1")
    );
    // An exchange deleted under the daemon closes its channel (404): 503, and once the exchange
    // is back, a new channel takes the next event.
    delete_exchange(&broker.url(), &exchange).await;
    let gone = t.deliver("github", b"{}", &with_id("route-2")).await;
    assert_eq!(
        gone.status(),
        503,
        "a deleted exchange is never acknowledged"
    );
    declare(&broker.url(), &exchange, &queue, Some(key)).await;
    assert!(deliver_until_accepted(&t, b"{}", "route-2").await <= 1);
    let messages = drain(&broker.url(), &queue).await;
    assert_eq!(messages.len(), 1);
    assert_eq!(
        messages[0].header("hookonce-event-id").as_deref(),
        Some("route-2")
    );
}

/// `serve` stops at start, naming `sink.exchange`, when the exchange does not exist; the URL's
/// password is never printed.
#[test]
fn rabbitmq_missing_exchange_stops_the_start_naming_the_key() {
    let broker = RabbitBroker::shared();
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nmetrics_listen = \"127.0.0.1:0\"\n[store]\nbackend = \"memory\"\n[sink]\nkind = \"rabbitmq\"\nurl = \"{}\"\nexchange = \"no-such-exchange\"\n[sources.demo]\nprovider = \"github\"\nsecrets = [\"s\"]\n",
        broker.url()
    );
    let path = write(dir.path(), "hookonce.toml", &config);
    let output = hookonce(&["serve", "--config", path.to_str().unwrap()], &[]);
    let text = output_text(&output);
    assert!(!output.status.success(), "{text}");
    assert!(
        text.contains("sink.exchange \"no-such-exchange\""),
        "{text}"
    );
    assert!(text.contains("NOT_FOUND"), "{text}");
    assert!(!text.contains("guest:guest"), "credential printed: {text}");
}

/// The exactly-once audit across an outage: clients keep delivering while the broker stops and
/// starts again; every event answered 200 is in the queue exactly once, none is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmq_down_answers_503_then_every_accepted_event_is_there_once() {
    let broker = Arc::new(Mutex::new(RabbitBroker::start()));
    let url = broker.lock().unwrap().url();
    let (exchange, queue) = names("outage");
    declare(&url, &exchange, &queue, Some("github")).await;
    let t = Arc::new(start(rabbit_sink(url.clone(), &exchange, None)).await);
    let accepted = Accepted::default();
    let deliver_range = |range| deliver_range(&t, &accepted, range);
    for n in 0..10 {
        deliver_range(n * 10..n * 10 + 5).await.unwrap();
    }
    // The broker goes away: an event now is 503, its claim released.
    let stopper = Arc::clone(&broker);
    tokio::task::spawn_blocking(move || stopper.lock().unwrap().stop())
        .await
        .unwrap();
    let down = t
        .deliver("github", b"{\"n\":-1}", &with_id("outage-down"))
        .await;
    assert_eq!(down.status(), 503);
    crate::support::eventually(10, "readiness to drop", || async {
        t.readiness().await == 503
    })
    .await;
    // Clients keep retrying through the restart.
    let during: Vec<_> = (0..4)
        .map(|n| deliver_range(100 + n * 10..105 + n * 10))
        .collect();
    let starter = Arc::clone(&broker);
    tokio::task::spawn_blocking(move || starter.lock().unwrap().start_again())
        .await
        .unwrap();
    for client in during {
        client.await.unwrap();
    }
    assert_eq!(
        deliver_until_accepted(&t, b"{\"n\":-1}", "outage-down").await,
        0
    );
    crate::support::eventually(10, "readiness to return", || async {
        t.readiness().await == 200
    })
    .await;
    let messages = drain(&url, &queue).await;
    let mut seen = BTreeMap::<String, u32>::new();
    for message in &messages {
        *seen
            .entry(
                message
                    .properties
                    .message_id()
                    .as_ref()
                    .unwrap()
                    .to_string(),
            )
            .or_default() += 1;
    }
    let accepted = accepted.lock().unwrap();
    let unavailable: u32 = accepted.values().sum();
    eprintln!(
        "audit: {} events accepted, {} messages in the queue, {unavailable} answers 503 on the way",
        accepted.len() + 1,
        messages.len()
    );
    assert!(unavailable > 0, "the outage was never seen by a client");
    for id in accepted.keys().chain(["outage-down".to_owned()].iter()) {
        assert_eq!(
            seen.get(id),
            Some(&1),
            "{id} must be in the queue exactly once"
        );
    }
    assert_eq!(
        seen.len(),
        accepted.len() + 1,
        "no message beyond the accepted events"
    );
    assert_eq!(messages.len(), seen.len(), "no event twice");
}

/// The confirm window: Redis stops answering between the broker's confirm and the completion.
/// The request answers 503 (the claim stays until its lease ends); the provider's retry, here to
/// a second daemon on the same Redis, reclaims it and publishes again. The queue then holds the
/// event twice under one `message_id`, which is what a consumer drops; nothing is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmq_a_redis_failure_after_the_confirm_publishes_again_under_one_message_id() {
    let broker = RabbitBroker::shared();
    let (exchange, queue) = names("window");
    declare(&broker.url(), &exchange, &queue, Some("github")).await;
    // rabbit_sink's lease: the retry's 409 must come before it ends, after the frozen daemon's
    // own store timeout and a drain of the queue (2 s left a loaded machine about one).
    let sink = rabbit_sink(broker.url(), &exchange, None);
    let window = publish_through_a_lost_completion(sink).await;
    assert_eq!(
        drain_count(&broker, &queue, "window-1").await,
        1,
        "the broker has it"
    );
    // Until the lease ends the claim holds; then the retry publishes again and is answered 200.
    retry_after_the_lease(&window.retry).await;
    assert_eq!(
        drain_count(&broker, &queue, "window-1").await,
        1,
        "the second copy, with the same message_id, for the consumer to drop"
    );
    let replay = window
        .retry
        .deliver("github", b"{}", &with_id("window-1"))
        .await;
    assert_eq!(replay.headers()["idempotency-replayed"], "true");
    assert_eq!(drain_count(&broker, &queue, "window-1").await, 0);
}

/// Drains `queue` and counts the messages whose `message_id` is `id` (every message must be).
async fn drain_count(broker: &RabbitBroker, queue: &str, id: &str) -> usize {
    let messages = drain(&broker.url(), queue).await;
    for message in &messages {
        assert_eq!(
            message.properties.message_id().as_ref().unwrap().as_str(),
            id
        );
    }
    messages.len()
}
