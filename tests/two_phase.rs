//! Two-phase mode (DESIGN §5): the HTTP and NATS JetStream sinks over the Redis and memory ledgers.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::nats::NatsServer;
use common::worker::Worker;
use common::{eventually, with_id, Backend, Extra, TestApp};

fn http_sink(worker: &Worker, lease: &str) -> Extra {
    std::env::set_var("HOOKONCE_TEST_WORKER_TOKEN", "Bearer worker-token");
    Extra {
        sink: format!(
            "kind = \"http\"\nurl = \"{}\"\ntimeout = \"2s\"\nlease = \"{lease}\"\n[sink.headers]\nAuthorization = \"env:HOOKONCE_TEST_WORKER_TOKEN\"\n",
            worker.url()
        ),
        ..Extra::default()
    }
}

fn nats_sink(nats: &NatsServer) -> Extra {
    Extra {
        sink: format!(
            "kind = \"nats\"\nnats_url = \"{}\"\ntimeout = \"1s\"\nlease = \"2s\"\n",
            nats.url()
        ),
        ..Extra::default()
    }
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

async fn http_worker_gets_one_post_per_event(backend: Backend) {
    let worker = Worker::start().await;
    let t = TestApp::start_with(backend, http_sink(&worker, "30s")).await;
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
    let t = Arc::new(TestApp::start_with(backend, http_sink(&worker, "30s")).await);
    worker.hold();
    let first = {
        let t = Arc::clone(&t);
        tokio::spawn(async move {
            t.deliver("github", b"{}", &with_id("slow-1"))
                .await
                .status()
        })
    };
    eventually(5, "the worker to receive the first POST", || async {
        worker.received().len() == 1
    })
    .await;
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
    assert_eq!(
        t.metric(r#"hookonce_events_total{source="github",outcome="in_flight"}"#)
            .await,
        5.0
    );
    assert_eq!(
        t.metric(r#"hookonce_http_requests_total{source="github",status="409"}"#)
            .await,
        5.0
    );
}

async fn a_failing_worker_releases_the_claim(backend: Backend) {
    let worker = Worker::start().await;
    let t = TestApp::start_with(backend, http_sink(&worker, "30s")).await;
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
    assert_eq!(
        t.metric(r#"hookonce_forward_duration_seconds_count{sink="http"}"#)
            .await,
        3.0
    );
}

async fn an_expired_lease_is_reclaimed_and_counted(backend: Backend) {
    let worker = Worker::start().await;
    let t = Arc::new(TestApp::start_with(backend, http_sink(&worker, "200ms")).await);
    worker.hold();
    let first = {
        let t = Arc::clone(&t);
        tokio::spawn(async move {
            t.deliver("github", b"{}", &with_id("lease-1"))
                .await
                .status()
        })
    };
    eventually(5, "the first POST", || async {
        worker.received().len() == 1
    })
    .await;
    // While the lease lives: in flight. Once it expires: the next delivery reclaims and publishes.
    let second = {
        let t = Arc::clone(&t);
        tokio::spawn(async move {
            deliver_until_accepted(&t, "github", b"{}", "lease-1")
                .await
                .status()
        })
    };
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
    assert_eq!(
        t.metric(r#"hookonce_lease_reclaims_total{source="github"}"#)
            .await,
        1.0
    );
}

async fn nats_forwards_each_event_once_under_concurrency(backend: Backend) {
    let nats = NatsServer::start();
    let t = Arc::new(TestApp::start_with(backend, nats_sink(&nats)).await);
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
    assert_eq!(
        t.metric(r#"hookonce_events_total{source="github",outcome="forwarded"}"#)
            .await,
        20.0
    );
    assert_eq!(
        t.metric(r#"hookonce_events_total{source="github",outcome="duplicate"}"#)
            .await,
        40.0
    );
}

async fn nats_down_answers_503_then_recovers(backend: Backend) {
    let mut nats = NatsServer::start();
    let t = TestApp::start_with(backend, nats_sink(&nats)).await;
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
    let mut extra = http_sink(&worker, "30s");
    extra.server = "request_timeout = \"300ms\"\n".into();
    let t = TestApp::start_with(backend, extra).await;
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

both_backends!(
    a_request_timeout_does_not_strand_or_repeat_a_publish,
    http_worker_gets_one_post_per_event,
    a_slow_worker_makes_concurrent_deliveries_in_flight,
    a_failing_worker_releases_the_claim,
    an_expired_lease_is_reclaimed_and_counted,
    nats_forwards_each_event_once_under_concurrency,
    nats_down_answers_503_then_recovers,
);
