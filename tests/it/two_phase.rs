//! Two-phase mode (docs/design.md, "Guarantees and their limits"): the HTTP and NATS JetStream
//! sinks over the Redis and memory ledgers.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;

use crate::support::metrics::{FORWARDS, HTTP_REQUESTS, LEASE_RECLAIMS};
use crate::support::nats::NatsServer;
use crate::support::settings::{
    ms, secs, source, HumanDuration, Secret, ServiceUrl, SinkKind, SinkSettings, GITHUB_SECRET,
};
use crate::support::worker::Worker;
use crate::support::{both_backends, eventually, with_id, Backend, TestApp};

/// The HTTP sink to `worker`, its `Authorization` header read from the environment.
fn http_sink(worker: &Worker, lease: HumanDuration) -> SinkSettings {
    std::env::set_var("HOOKONCE_TEST_WORKER_TOKEN", "Bearer worker-token");
    let token = Secret::resolve("env:HOOKONCE_TEST_WORKER_TOKEN").unwrap();
    SinkSettings {
        kind: SinkKind::Http,
        url: Some(worker.url()),
        timeout: Some(secs(2)),
        lease: Some(lease),
        headers: BTreeMap::from([("Authorization".to_owned(), token)]),
        ..SinkSettings::default()
    }
}

fn nats_sink(nats: &NatsServer) -> SinkSettings {
    SinkSettings {
        kind: SinkKind::Nats,
        nats_url: Some(ServiceUrl(nats.url())),
        timeout: Some(secs(1)),
        lease: Some(secs(2)),
        ..SinkSettings::default()
    }
}

/// A daemon on `backend` forwarding to `sink`.
async fn start(backend: Backend, sink: SinkSettings) -> TestApp {
    TestApp::builder(backend).sink(|s| *s = sink).start().await
}

/// Delivers like a provider: retries 409 and 503 until a 2xx, then returns that response.
async fn deliver_until_accepted(
    t: &TestApp,
    source: &str,
    body: &[u8],
    id: &str,
) -> reqwest::Response {
    for _ in 0..500 {
        let response = t.deliver(source, body, &with_id(id)).await;
        match response.status().as_u16() {
            200 => return response,
            409 | 503 => tokio::time::sleep(Duration::from_millis(10)).await,
            other => panic!("unexpected status {other}"),
        }
    }
    panic!("{id} was never accepted");
}

/// Holds `worker` and sends one delivery of `id`, in a task, once the worker has it: that
/// delivery's claim is then held for as long as the worker is.
async fn first_delivery_held(
    t: &Arc<TestApp>,
    worker: &Worker,
    id: &'static str,
) -> JoinHandle<u16> {
    worker.hold();
    let first = {
        let t = Arc::clone(t);
        tokio::spawn(async move {
            t.deliver("github", b"{}", &with_id(id))
                .await
                .status()
                .as_u16()
        })
    };
    eventually(5, "the worker to receive the first POST", || async {
        worker.received().len() == 1
    })
    .await;
    first
}

/// [`deliver_until_accepted`] in a task; its status.
fn retried_until_accepted(t: &Arc<TestApp>, id: &'static str) -> JoinHandle<u16> {
    let t = Arc::clone(t);
    tokio::spawn(async move {
        deliver_until_accepted(&t, "github", b"{}", id)
            .await
            .status()
            .as_u16()
    })
}

async fn http_worker_gets_one_post_per_event(backend: Backend) {
    let worker = Worker::start().await;
    let t = start(backend, http_sink(&worker, secs(30))).await;
    let body = br#"{"type":"invoice.paid"}"#;
    let first = t.deliver("github", body, &with_id("http-1")).await;
    assert_eq!(first.status(), 200);
    let replay = t.deliver("github", body, &with_id("http-1")).await;
    assert_eq!(replay.headers()["idempotency-replayed"], "true");
    let received = worker.received();
    assert_eq!(received.len(), 1);
    let headers = &received[0].headers;
    assert_eq!(headers["idempotency-key"], "hookonce:{github}:d:http-1");
    assert_eq!(headers["x-hookonce-source"], "github");
    assert_eq!(headers["x-hookonce-provider"], "github");
    assert_eq!(headers["x-hookonce-event-id"], "http-1");
    assert_eq!(headers["content-type"], "application/json");
    assert_eq!(headers["authorization"], "Bearer worker-token");
    assert_eq!(received[0].body.as_ref(), body);
}

async fn a_slow_worker_makes_concurrent_deliveries_in_flight(backend: Backend) {
    let worker = Worker::start().await;
    let t = Arc::new(start(backend, http_sink(&worker, secs(30))).await);
    let first = first_delivery_held(&t, &worker, "slow-1").await;
    for _ in 0..5 {
        let response = t.deliver("github", b"{}", &with_id("slow-1")).await;
        assert_eq!(response.status(), 409);
        assert_eq!(response.headers()["retry-after"], "1");
        assert_eq!(response.text().await.unwrap(), r#"{"error":"in_flight"}"#);
    }
    worker.release();
    assert_eq!(first.await.unwrap(), 200);
    assert_eq!(
        t.deliver("github", b"{}", &with_id("slow-1"))
            .await
            .headers()["idempotency-replayed"],
        "true"
    );
    assert_eq!(worker.received().len(), 1);
    assert_eq!(t.events("github", "in_flight").await, 5.0);
    assert_eq!(
        t.metric(HTTP_REQUESTS, &[("source", "github"), ("status", "409")])
            .await,
        5.0
    );
}

async fn a_failing_worker_releases_the_claim(backend: Backend) {
    let worker = Worker::start().await;
    let t = start(backend, http_sink(&worker, secs(30))).await;
    worker.answer(500);
    let failed = t.deliver("github", b"{}", &with_id("fail-1")).await;
    assert_eq!(failed.status(), 503);
    assert_eq!(failed.headers()["retry-after"], "1");
    assert_eq!(t.stored(), 0, "the claim was not released");
    worker.answer(202);
    assert_eq!(
        t.deliver("github", b"{}", &with_id("fail-1"))
            .await
            .status(),
        200
    );
    assert_eq!(
        t.deliver("github", b"{}", &with_id("fail-1"))
            .await
            .status(),
        200
    );
    // One failed POST, one that completed; the duplicate never reached the worker.
    assert_eq!(worker.received().len(), 2);
    assert_eq!(t.metric(FORWARDS, &[("sink", "http")]).await, 3.0);
}

async fn an_expired_lease_is_reclaimed_and_counted(backend: Backend) {
    let worker = Worker::start().await;
    let t = Arc::new(start(backend, http_sink(&worker, ms(200))).await);
    let first = first_delivery_held(&t, &worker, "lease-1").await;
    // While the lease lives: in flight. Once it expires: the next delivery reclaims and publishes.
    let second = retried_until_accepted(&t, "lease-1");
    eventually(5, "the reclaiming POST", || async {
        worker.received().len() == 2
    })
    .await;
    worker.release();
    assert_eq!(second.await.unwrap(), 200);
    assert_eq!(first.await.unwrap(), 200);
    let received = worker.received();
    assert_eq!(
        received[0].headers["idempotency-key"],
        received[1].headers["idempotency-key"]
    );
    assert_eq!(t.metric(LEASE_RECLAIMS, &[("source", "github")]).await, 1.0);
}

/// With `body_dedup`, an event holds two claims whose leases end a moment apart. A delivery
/// between the two ends reclaims the first, finds the second in flight and gives the first back;
/// the next delivery claims that key afresh and reclaims the other. Still one reclaim, counted.
#[tokio::test]
async fn a_reclaim_split_across_the_two_claims_is_counted_once() {
    let worker = Worker::start().await;
    // The tests' default `github` source turns `body_dedup` off; the product's default is on.
    let t = TestApp::builder(Backend::Redis)
        .source("github", source("github", GITHUB_SECRET))
        .sink(|s| {
            // A timeout past the held worker's time, so that the first POST never releases.
            *s = http_sink(&worker, ms(300));
            s.timeout = Some(secs(30));
        })
        .start()
        .await;
    let t = Arc::new(t);
    let first = first_delivery_held(&t, &worker, "split-1").await;
    // Move the body claim's lease end 2 s past the event record's.
    let record = "hookonce:{github}:d:split-1";
    let mut redis = t.redis.as_ref().unwrap().connection();
    let body_keys: Vec<String> = redis::cmd("KEYS")
        .arg("hookonce:{github}:b:*")
        .query(&mut redis)
        .unwrap();
    let [body_key] = &body_keys[..] else {
        panic!("one body record expected: {body_keys:?}");
    };
    let held: String = redis::cmd("GET").arg(body_key).query(&mut redis).unwrap();
    assert!(
        held.starts_with("p "),
        "the body claim should be held: {held}"
    );
    let (head, deadline) = held.rsplit_once(' ').unwrap();
    let later = format!("{head} {}", deadline.parse::<u64>().unwrap() + 2_000);
    let _: () = redis::cmd("SET")
        .arg(body_key)
        .arg(later)
        .arg("KEEPTTL")
        .query(&mut redis)
        .unwrap();

    let second = retried_until_accepted(&t, "split-1");
    // Between the two ends the event record is reclaimed and given back: the key is gone.
    eventually(5, "the event record given back", || {
        let mut redis = t.redis.as_ref().unwrap().connection();
        async move {
            let value: Option<String> = redis::cmd("GET").arg(record).query(&mut redis).unwrap();
            value.is_none()
        }
    })
    .await;
    eventually(10, "the reclaiming POST", || async {
        worker.received().len() == 2
    })
    .await;
    worker.release();
    assert_eq!(second.await.unwrap(), 200);
    assert_eq!(first.await.unwrap(), 200);
    assert_eq!(t.metric(LEASE_RECLAIMS, &[("source", "github")]).await, 1.0);
}

async fn nats_forwards_each_event_once_under_concurrency(backend: Backend) {
    let nats = NatsServer::start();
    let t = Arc::new(start(backend, nats_sink(&nats)).await);
    // 20 events × 3 deliveries, dealt round-robin to 16 concurrent clients.
    let mut clients = Vec::new();
    for client in 0..16 {
        let t = Arc::clone(&t);
        clients.push(tokio::spawn(async move {
            for delivery in (client..60).step_by(16) {
                let event = delivery % 20;
                let body = format!("{{\"n\":{event}}}");
                deliver_until_accepted(&t, "github", body.as_bytes(), &format!("nats-{event}"))
                    .await;
            }
        }));
    }
    for client in clients {
        client.await.unwrap();
    }
    let messages = nats.messages("HOOKONCE").await;
    assert_eq!(messages.len(), 20);
    let mut ids: Vec<&str> = messages.iter().map(|(id, _)| id.as_str()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 20, "Nats-Msg-Id values are not distinct");
    assert!(ids.contains(&"hookonce:{github}:d:nats-7"));
    assert_eq!(t.events("github", "forwarded").await, 20.0);
    assert_eq!(t.events("github", "duplicate").await, 40.0);
}

async fn nats_down_answers_503_then_recovers(backend: Backend) {
    let mut nats = NatsServer::start();
    let t = start(backend, nats_sink(&nats)).await;
    assert_eq!(
        t.deliver("github", b"{}", &with_id("up-1")).await.status(),
        200
    );
    nats.stop();
    let down = t.deliver("github", b"{}", &with_id("down-1")).await;
    assert_eq!(down.status(), 503);
    eventually(5, "readiness to drop", || async {
        t.readiness().await == 503
    })
    .await;
    nats.restart();
    deliver_until_accepted(&t, "github", b"{}", "down-1").await;
    assert_eq!(t.readiness().await, 200);
    let messages = nats.messages("HOOKONCE").await;
    let ids: Vec<&str> = messages.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(
        ids,
        ["hookonce:{github}:d:up-1", "hookonce:{github}:d:down-1"]
    );
}

/// A request that times out answers 503, but the publish it started still settles the claim:
/// the provider's retry then finds the event done instead of publishing it again.
async fn a_request_timeout_does_not_strand_or_repeat_a_publish(backend: Backend) {
    let worker = Worker::start().await;
    let t = TestApp::builder(backend)
        .sink(|s| *s = http_sink(&worker, secs(30)))
        .server(|s| s.request_timeout = ms(300))
        .start()
        .await;
    worker.hold();
    let started = std::time::Instant::now();
    let timed_out = t.deliver("github", b"{}", &with_id("timeout-1")).await;
    assert_eq!(timed_out.status(), 503);
    assert!(started.elapsed() < Duration::from_secs(2));
    worker.release();
    let retry = deliver_until_accepted(&t, "github", b"{}", "timeout-1").await;
    assert_eq!(retry.headers()["idempotency-replayed"], "true");
    assert_eq!(worker.received().len(), 1);
}

/// A worker that does not answer within `sink.timeout` is a failed publish: 503, the claim
/// released, and the provider's retry delivers again.
async fn a_worker_silent_past_the_sink_timeout_releases_the_claim(backend: Backend) {
    let worker = Worker::start().await;
    let mut sink = http_sink(&worker, secs(30));
    sink.timeout = Some(secs(1));
    let t = TestApp::builder(backend)
        .sink(|s| *s = sink)
        .server(|s| s.request_timeout = secs(20))
        .start()
        .await;
    worker.hold();
    let started = std::time::Instant::now();
    let timed_out = t.deliver("github", b"{}", &with_id("silent-1")).await;
    assert_eq!(timed_out.status(), 503);
    let waited = started.elapsed();
    assert!(
        (Duration::from_millis(900)..Duration::from_secs(5)).contains(&waited),
        "{waited:?}"
    );
    assert_eq!(t.stored(), 0, "the claim was not released");
    worker.release();
    let retry = deliver_until_accepted(&t, "github", b"{}", "silent-1").await;
    assert_ne!(
        retry
            .headers()
            .get("idempotency-replayed")
            .map(|v| v.as_bytes()),
        Some(&b"true"[..])
    );
    assert_eq!(worker.received().len(), 2);
}

/// A user and password in `sink.url` go as `Authorization: Basic`, unless `sink.headers` sets
/// an `Authorization` of its own.
async fn the_sink_urls_user_and_password_go_as_basic_auth(backend: Backend) {
    let worker = Worker::start().await;
    let mut sink = http_sink(&worker, secs(30));
    sink.headers.clear();
    sink.url = Some(
        worker
            .url()
            .replacen("http://", "http://us%40er:p%3Ass@", 1),
    );
    let t = start(backend, sink).await;
    assert_eq!(
        t.deliver("github", b"{}", &with_id("basic-1"))
            .await
            .status(),
        200
    );
    // RFC 7617: base64 of "us@er:p:ss", the URL's parts percent-decoded.
    assert_eq!(
        worker.received()[0].headers["authorization"],
        "Basic dXNAZXI6cDpzcw=="
    );
}

both_backends!(
    a_worker_silent_past_the_sink_timeout_releases_the_claim,
    the_sink_urls_user_and_password_go_as_basic_auth,
    a_request_timeout_does_not_strand_or_repeat_a_publish,
    http_worker_gets_one_post_per_event,
    a_slow_worker_makes_concurrent_deliveries_in_flight,
    a_failing_worker_releases_the_claim,
    an_expired_lease_is_reclaimed_and_counted,
    nats_forwards_each_event_once_under_concurrency,
    nats_down_answers_503_then_recovers,
);
