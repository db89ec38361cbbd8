//! The behavioural suite (docs/design.md, "Outcomes and status codes"), run against a real
//! redis-server and the memory store alike.

use std::time::Duration;

use crate::support::http::{read_head, send_body_slowly, Framing};
use crate::support::metrics::{DUPLICATE_HITS, EVENTS, HTTP_REQUESTS};
use crate::support::settings::{secs, source, ByteSize, SourceSettings};
use crate::support::{
    both_backends, now, now_unix, stripe_body, with_id, Backend, SignOptions, TestApp,
};

async fn forwarded_then_duplicate_replays_the_first_ack(backend: Backend) {
    let t = TestApp::start(backend).await;
    let body = stripe_body("evt_replay_1", 1500);
    let first = t.deliver("stripe", &body, &now()).await;
    assert_eq!(first.status(), 200);
    assert!(first.headers().get("idempotency-replayed").is_none());
    let first_body = first.text().await.unwrap();

    let second = t.deliver("stripe", &body, &now()).await;
    assert_eq!(second.status(), 200);
    assert_eq!(second.headers()["idempotency-replayed"], "true");
    assert_eq!(second.text().await.unwrap(), first_body);

    let entries = t.entries("stripe");
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].0, "evt_replay_1");
    assert_eq!(entries[0].1, body);
    assert_eq!(t.events("stripe", "forwarded").await, 1.0);
    assert_eq!(t.events("stripe", "duplicate").await, 1.0);
    assert_eq!(t.metric(DUPLICATE_HITS, &[("source", "stripe")]).await, 1.0);
    assert_eq!(
        t.metric(HTTP_REQUESTS, &[("source", "stripe"), ("status", "200")])
            .await,
        2.0
    );
}

async fn same_id_with_another_payload_is_a_mismatch(backend: Backend) {
    let t = TestApp::start(backend).await;
    assert_eq!(
        t.deliver("stripe", &stripe_body("evt_mm", 300), &now())
            .await
            .status(),
        200
    );
    let stored = t.stored();
    let response = t
        .deliver("stripe", &stripe_body("evt_mm", 400), &now())
        .await;
    assert_eq!(response.status(), 422);
    assert_eq!(
        response.text().await.unwrap(),
        r#"{"error":"payload_mismatch"}"#
    );
    assert_eq!(t.entries("stripe").len(), 1);
    assert_eq!(t.stored(), stored);
    assert_eq!(t.events("stripe", "payload_mismatch").await, 1.0);
}

/// Stripe reports delivery progress (`pending_webhooks`) inside the event; a retry can carry
/// another count and is still the same event. Any other difference is a mismatch.
async fn a_stripe_retry_with_another_pending_webhooks_count_is_a_duplicate(backend: Backend) {
    let t = TestApp::start(backend).await;
    let body = |pending: u32, amount: u32| {
        format!(
            r#"{{"id":"evt_pending","object":"event","type":"charge.succeeded","pending_webhooks":{pending},"data":{{"object":{{"amount":{amount}}}}}}}"#
        )
    };
    assert_eq!(
        t.deliver("stripe", body(2, 100).as_bytes(), &now())
            .await
            .status(),
        200
    );
    let retry = t.deliver("stripe", body(1, 100).as_bytes(), &now()).await;
    assert_eq!(retry.status(), 200);
    assert_eq!(retry.headers()["idempotency-replayed"], "true");
    assert_eq!(
        t.deliver("stripe", body(1, 999).as_bytes(), &now())
            .await
            .status(),
        422
    );
    let entries = t.entries("stripe");
    assert_eq!(entries.len(), 1);
    assert_eq!(
        entries[0].1,
        body(2, 100).into_bytes(),
        "the first delivery's bytes are kept"
    );
}

/// Every rejection answers its documented status, writes nothing and is counted.
async fn rejections_write_nothing_and_are_counted(backend: Backend) {
    let t = TestApp::builder(backend)
        .server(|s| s.body_limit = ByteSize(4 << 10))
        .start()
        .await;
    let stored = t.stored();
    let body = stripe_body("evt_reject", 500);
    let signed = t.sign("stripe", &body, &now());

    // invalid_signature: tampered body, wrong signature, missing header.
    let mut tampered = body.clone();
    tampered[40] ^= 1;
    let r = t.post("stripe", &tampered, &signed).await;
    assert_eq!(r.status(), 401);
    assert_eq!(r.text().await.unwrap(), r#"{"error":"invalid_signature"}"#);
    let r = t.post("stripe", &body, &[]).await;
    assert_eq!(r.status(), 401);
    let garbled = vec![("Stripe-Signature".to_owned(), "t=abc,v1=zz".to_owned())];
    assert_eq!(t.post("stripe", &body, &garbled).await.status(), 401);

    // stale_timestamp: signed an hour ago.
    let old = SignOptions {
        now_unix: now_unix() - 3600,
        ..SignOptions::default()
    };
    let r = t.deliver("stripe", &body, &old).await;
    assert_eq!(r.status(), 401);
    assert_eq!(r.text().await.unwrap(), r#"{"error":"stale_timestamp"}"#);

    // malformed: correctly signed, but not a Stripe event; IDs too long or with control characters.
    assert_eq!(t.deliver("stripe", b"not json", &now()).await.status(), 400);
    assert_eq!(
        t.deliver("stripe", br#"{"type":"x"}"#, &now())
            .await
            .status(),
        400
    );
    let long_id = "e".repeat(256);
    assert_eq!(
        t.deliver("stripe", &stripe_body(&long_id, 100), &now())
            .await
            .status(),
        400
    );
    assert_eq!(
        t.deliver("stripe", &stripe_body("evt\\u0007bell", 100), &now())
            .await
            .status(),
        400
    );
    assert_eq!(
        t.deliver("github", b"{}", &with_id(&"g".repeat(256)))
            .await
            .status(),
        400
    );

    // too_large: over the 4 KiB limit, declared or streamed.
    let big = stripe_body("evt_big", 5000);
    let r = t.deliver("stripe", &big, &now()).await;
    assert_eq!(r.status(), 413);
    assert_eq!(r.text().await.unwrap(), r#"{"error":"too_large"}"#);

    // unknown_source.
    let r = t.post("nope", &body, &signed).await;
    assert_eq!(r.status(), 404);
    assert_eq!(r.text().await.unwrap(), r#"{"error":"unknown_source"}"#);

    assert_eq!(t.stored(), stored, "a rejected request wrote to the store");
    assert!(t.entries("stripe").is_empty());
    for (source, outcome, count) in [
        ("stripe", "invalid_signature", 3.0),
        ("stripe", "stale_timestamp", 1.0),
        ("stripe", "malformed", 4.0),
        ("github", "malformed", 1.0),
        ("stripe", "too_large", 1.0),
        ("_unknown", "unknown_source", 1.0),
    ] {
        let labels = [("source", source), ("outcome", outcome)];
        assert_eq!(t.metric(EVENTS, &labels).await, count, "{labels:?}");
    }
    for (source, status, count) in [("stripe", "401", 4.0), ("_unknown", "404", 1.0)] {
        let labels = [("source", source), ("status", status)];
        assert_eq!(t.metric(HTTP_REQUESTS, &labels).await, count, "{labels:?}");
    }
}

async fn concurrent_deliveries_of_one_event_forward_once(backend: Backend) {
    // As below: 64 requests at once must all be 200, which a 500 ms store timeout does not
    // promise on a loaded machine.
    let t = TestApp::builder(backend)
        .store(|store| store.timeout = secs(5))
        .start()
        .await;
    let t = std::sync::Arc::new(t);
    let body = stripe_body("evt_race", 1500);
    let mut tasks = Vec::new();
    for _ in 0..64 {
        let t = std::sync::Arc::clone(&t);
        let body = body.clone();
        tasks.push(tokio::spawn(async move {
            t.deliver("stripe", &body, &now()).await.status()
        }));
    }
    for task in tasks {
        assert_eq!(task.await.unwrap(), 200);
    }
    assert_eq!(t.entries("stripe").len(), 1);
    assert_eq!(t.events("stripe", "forwarded").await, 1.0);
    assert_eq!(t.events("stripe", "duplicate").await, 63.0);
}

async fn thousand_events_three_deliveries_each(backend: Backend) {
    // What is tested is deduplication under concurrency, not latency: a store timeout well above
    // a loaded machine's round trip keeps a slow moment from turning into a 503.
    let t = TestApp::builder(backend)
        .store(|store| store.timeout = secs(5))
        .start()
        .await;
    let t = std::sync::Arc::new(t);
    let bodies: Vec<Vec<u8>> = (0..1000)
        .map(|i| stripe_body(&format!("evt_bulk_{i:04}"), 1500))
        .collect();
    let bodies = std::sync::Arc::new(bodies);
    let mut tasks = Vec::new();
    for worker in 0..16 {
        let t = std::sync::Arc::clone(&t);
        let bodies = std::sync::Arc::clone(&bodies);
        tasks.push(tokio::spawn(async move {
            for round in 0..3 {
                for i in (worker..1000).step_by(16) {
                    let status = t
                        .deliver("stripe", &bodies[(i + round * 7) % 1000], &now())
                        .await
                        .status();
                    assert_eq!(status, 200);
                }
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let mut entries = t.entries("stripe");
    assert_eq!(entries.len(), 1000);
    entries.sort();
    for (i, (id, body)) in entries.iter().enumerate() {
        assert_eq!(id, &format!("evt_bulk_{i:04}"));
        assert_eq!(body, &bodies[i], "body of {id} is not byte-identical");
    }
    assert_eq!(
        t.metric(DUPLICATE_HITS, &[("source", "stripe")]).await,
        2000.0
    );
}

async fn header_carried_ids_deduplicate_across_resigned_retries(backend: Backend) {
    let t = TestApp::start(backend).await;
    let body = br#"{"type":"invoice.paid","data":{"n":1}}"#;
    for _ in 0..3 {
        assert_eq!(
            t.deliver("standard", body, &with_id("msg_2abc"))
                .await
                .status(),
            200
        );
        assert_eq!(
            t.deliver("github", body, &with_id("8f1e-delivery"))
                .await
                .status(),
            200
        );
    }
    assert_eq!(t.entries("standard").len(), 1);
    assert_eq!(t.entries("github").len(), 1);
    assert_eq!(t.entries("standard")[0].0, "msg_2abc");
}

async fn records_expire_after_the_dedup_ttl(backend: Backend) {
    let short = SourceSettings {
        dedup_ttl: Some(secs(1)),
        ..source("github", "s")
    };
    let t = TestApp::builder(backend)
        .source("short", short)
        .start()
        .await;
    assert_eq!(
        t.deliver("short", b"{}", &with_id("once")).await.status(),
        200
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    // Await the condition: redeliver until the record has expired and the event is forwarded again.
    loop {
        let response = t.deliver("short", b"{}", &with_id("once")).await;
        assert_eq!(response.status(), 200);
        if response.headers().get("idempotency-replayed").is_none() {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "record never expired");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(t.entries("short").len(), 2);
}

async fn health_and_readiness(backend: Backend) {
    let t = TestApp::start(backend).await;
    let get = |path: &str| t.client.get(t.url(path)).send();
    assert_eq!(get("/healthz").await.unwrap().status(), 200);
    assert_eq!(get("/readyz").await.unwrap().status(), 200);
    let metrics = t.metrics().await;
    assert!(metrics.contains("hookonce_build_info{version=\""));
}

/// A body of many pieces (over 64 KiB) is forwarded exactly as it was sent, with a declared
/// length or chunked, in writes that do not line up with the pieces.
async fn large_bodies_are_forwarded_whole_in_either_framing(backend: Backend) {
    let t = TestApp::start(backend).await;
    let addr = t.addr;
    for (n, framing) in [Framing::Length, Framing::Chunked].into_iter().enumerate() {
        // Every 9 bytes differ from the others, so that a piece out of place would show.
        let mut body = format!(r#"{{"id":"evt_large_{n}","type":"charge.succeeded","data":""#);
        for i in 0..33_000 {
            body.push_str(&format!("{i:08},"));
        }
        body.push_str(r#""}"#);
        let body = body.into_bytes();
        let signed = t.sign("stripe", &body, &now());
        let headers: Vec<(&str, &str)> = signed
            .iter()
            .map(|(name, value)| (name.as_str(), value.as_str()))
            .collect();
        let mut stream = send_body_slowly(
            addr,
            "/webhooks/stripe",
            &headers,
            framing,
            &body,
            7_001,
            Duration::ZERO,
        )
        .await
        .unwrap();
        let head = read_head(&mut stream).await.unwrap();
        assert!(head.starts_with("HTTP/1.1 200 "), "{framing:?}: {head}");
        let entries = t.entries("stripe");
        assert_eq!(entries.len(), n + 1, "{framing:?}");
        assert_eq!(entries[n].0, format!("evt_large_{n}"));
        assert!(
            entries[n].1 == body,
            "{framing:?}: the body forwarded differs"
        );
    }
}

both_backends!(
    forwarded_then_duplicate_replays_the_first_ack,
    a_stripe_retry_with_another_pending_webhooks_count_is_a_duplicate,
    same_id_with_another_payload_is_a_mismatch,
    rejections_write_nothing_and_are_counted,
    concurrent_deliveries_of_one_event_forward_once,
    thousand_events_three_deliveries_each,
    header_carried_ids_deduplicate_across_resigned_retries,
    records_expire_after_the_dedup_ttl,
    health_and_readiness,
    large_bodies_are_forwarded_whole_in_either_framing,
);

mod memory_only {
    use crate::support::{with_id, Backend, TestApp};

    #[tokio::test]
    async fn a_full_memory_store_refuses_new_events_but_still_answers_duplicates() {
        let t = TestApp::builder(Backend::Memory)
            .store(|s| s.memory_max_records = 2)
            .start()
            .await;
        assert_eq!(
            t.deliver("github", b"{}", &with_id("one")).await.status(),
            200
        );
        assert_eq!(
            t.deliver("github", b"{}", &with_id("two")).await.status(),
            200
        );
        let full = t.deliver("github", b"{}", &with_id("three")).await;
        assert_eq!(full.status(), 503);
        assert_eq!(full.headers()["retry-after"], "1");
        let again = t.deliver("github", b"{}", &with_id("one")).await;
        assert_eq!(again.status(), 200);
        assert_eq!(again.headers()["idempotency-replayed"], "true");
        assert_eq!(t.entries("github").len(), 2);
    }
}
