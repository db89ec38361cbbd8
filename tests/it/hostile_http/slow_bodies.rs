//! Bodies that trickle, stall or stop: they are cut by their own deadline, charged to the body
//! memory budget by what they sent, and never hold an admission permit, so signed deliveries
//! keep getting through while hundreds of them are open.

use std::time::{Duration, Instant};

use tokio::net::TcpStream;

use crate::support::binary::{hookonce, output_text, write};
use crate::support::http::{finish_slow_request, read_to_close, start_request, start_slow_request};
use crate::support::metrics::{BODY_MEMORY, BODY_READS, EVENTS, HTTP_REQUESTS, IN_FLIGHT};
use crate::support::settings::{ms, secs, ByteSize};
use crate::support::{eventually, now, stripe_body, Backend, TestApp};

/// More stalled bodies than admission permits: before bodies were read ahead of admission, 64 of
/// them held every permit and the rest were answered 503, and so were signed deliveries.
const STALLED: usize = 300;
const MAX_IN_FLIGHT: usize = 64;

/// Opens `count` connections that each send a POST's head and one byte of a 1000-byte body.
async fn stall(t: &TestApp, count: usize) -> Vec<TcpStream> {
    let mut stalled = Vec::with_capacity(count);
    for _ in 0..count {
        stalled.push(start_request(t.addr, "/webhooks/stripe", &[], 1000, b"{").await);
    }
    stalled
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_bodies_do_not_lock_out_signed_deliveries() {
    // The signed deliveries must all be 200 beside the stalled ones: a store timeout far above a
    // loaded machine's slowest call.
    let t = TestApp::builder(Backend::Redis)
        .store(|s| s.timeout = secs(5))
        .server(|s| {
            s.max_in_flight = MAX_IN_FLIGHT;
            s.body_read_timeout = secs(60);
            s.request_timeout = secs(60);
        })
        .start()
        .await;
    let stalled = stall(&t, STALLED).await;
    // Every stalled request has reached the daemon once it is either reading its body or was
    // turned away; only the first may happen with admission after the body.
    eventually(20, "every stalled request to reach the daemon", || async {
        let page = t.metrics().await;
        let reading = crate::support::metrics::value(&page, BODY_READS, &[]);
        let refused = crate::support::metrics::value(
            &page,
            EVENTS,
            &[("source", "stripe"), ("outcome", "unavailable")],
        );
        reading + refused == STALLED as f64
    })
    .await;

    for n in 0..20 {
        let body = stripe_body(&format!("evt_stalled_{n}"), 400);
        let response = t.deliver("stripe", &body, &now()).await;
        assert_eq!(response.status(), 200, "signed delivery {n}");
    }
    assert_eq!(t.metric(BODY_READS, &[]).await, STALLED as f64);
    assert_eq!(t.entries("stripe").len(), 20);

    // The stalled clients give up: each is counted as aborted, not as malformed, and nothing
    // of theirs was written (20 records and one stream).
    drop(stalled);
    eventually(
        20,
        "every stalled request to be counted as aborted",
        || async { t.events("stripe", "aborted").await == STALLED as f64 },
    )
    .await;
    let stripe = |outcome| [("source", "stripe"), ("outcome", outcome)];
    assert_eq!(t.metric(EVENTS, &stripe("malformed")).await, 0.0);
    assert_eq!(t.metric(EVENTS, &stripe("unavailable")).await, 0.0);
    assert_eq!(t.metric(EVENTS, &stripe("forwarded")).await, 20.0);
    assert_eq!(
        t.metric(HTTP_REQUESTS, &[("source", "stripe"), ("status", "400")])
            .await,
        STALLED as f64
    );
    assert_eq!(t.metric(BODY_READS, &[]).await, 0.0);
    assert_eq!(t.metric(BODY_MEMORY, &[]).await, 0.0);
    assert_eq!(t.stored(), 21);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_body_is_answered_408_at_its_deadline_and_writes_nothing() {
    let t = TestApp::builder(Backend::Redis)
        .server(|s| s.body_read_timeout = ms(300))
        .start()
        .await;
    let body = stripe_body("evt_stalls", 400);
    let headers = t.sign("stripe", &body, &now());
    let started = Instant::now();
    let mut stalled = Vec::new();
    for _ in 0..5 {
        stalled.push(start_slow_request(t.addr, "/webhooks/stripe", &headers, &body).await);
    }
    for stream in &mut stalled {
        // Answered, then closed: the rest of the body is never read.
        let answer = read_to_close(stream).await;
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
        assert!(answer.ends_with(r#"{"error":"body_timeout"}"#), "{answer}");
    }
    // Cut by the body's deadline, well before `server.request_timeout` (10 s).
    let elapsed = started.elapsed();
    assert!(elapsed >= Duration::from_millis(300), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(5), "{elapsed:?}");
    assert_eq!(t.events("stripe", "body_timeout").await, 5.0);
    assert_eq!(
        t.metric(HTTP_REQUESTS, &[("source", "stripe"), ("status", "408")])
            .await,
        5.0
    );
    assert_eq!(t.metric(BODY_READS, &[]).await, 0.0);
    assert_eq!(t.stored(), 0);
    // The same delivery sent at once goes through.
    assert_eq!(t.deliver("stripe", &body, &now()).await.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_leaves_mid_body_is_counted_as_aborted() {
    let t = TestApp::start(Backend::Memory).await;
    let body = stripe_body("evt_leaves", 400);
    let headers = t.sign("stripe", &body, &now());
    let slow = start_slow_request(t.addr, "/webhooks/stripe", &headers, &body).await;
    eventually(5, "the body to be read", || async {
        t.metric(BODY_READS, &[]).await == 1.0
    })
    .await;
    drop(slow);
    eventually(5, "the request to be counted", || async {
        t.events("stripe", "aborted").await == 1.0
    })
    .await;
    assert_eq!(t.events("stripe", "malformed").await, 0.0);
    assert_eq!(
        t.metric(HTTP_REQUESTS, &[("source", "stripe"), ("status", "400")])
            .await,
        1.0
    );
    assert_eq!(t.stored(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_share_one_memory_budget_charged_by_what_was_sent() {
    let t = TestApp::builder(Backend::Memory)
        .server(|s| {
            s.body_limit = ByteSize(4000);
            s.body_memory_limit = ByteSize(6000);
        })
        .start()
        .await;
    // Two signed 4000-byte bodies, half sent: 4000 bytes of the 6000 held. Declared sizes are
    // not charged, or the second would not have fit.
    let mut slow = Vec::new();
    for n in 0..2 {
        let body = stripe_body(&format!("evt_budget_{n}"), 4000);
        let headers = t.sign("stripe", &body, &now());
        let stream = start_slow_request(t.addr, "/webhooks/stripe", &headers, &body).await;
        slow.push((stream, body));
    }
    eventually(5, "both halves to be held", || async {
        t.metric(BODY_MEMORY, &[]).await == 4000.0
    })
    .await;

    let over = t
        .deliver("stripe", &stripe_body("evt_over", 3000), &now())
        .await;
    assert_eq!(over.status(), 503);
    assert_eq!(over.headers()["retry-after"], "1");
    for (stream, body) in slow {
        let answer = finish_slow_request(stream, &body).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    }
    eventually(5, "the budget to be given back", || async {
        t.metric(BODY_MEMORY, &[]).await == 0.0
    })
    .await;
    let again = t
        .deliver("stripe", &stripe_body("evt_over", 3000), &now())
        .await;
    assert_eq!(again.status(), 200);
    assert_eq!(t.entries("stripe").len(), 3);
    assert_eq!(t.metric(IN_FLIGHT, &[]).await, 0.0);
}

#[test]
fn body_limits_that_cannot_work_are_refused_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("body_read_timeout = \"0s\"", "server.body_read_timeout"),
        ("body_read_timeout = \"soon\"", "server.body_read_timeout"),
        ("body_read_timeout = \"2h\"", "server.body_read_timeout"),
        (
            "body_limit = \"2MiB\"\nbody_memory_limit = \"1MiB\"",
            "server.body_memory_limit",
        ),
        ("body_memory_limit = \"lots\"", "server.body_memory_limit"),
    ];
    for (server, key) in cases {
        let config = format!(
            "[server]\n{server}\n[store]\nbackend = \"memory\"\n[sink]\nkind = \"stdout\"\n\
             [sources.demo]\nprovider = \"github\"\nsecrets = [\"s\"]\n"
        );
        let path = write(dir.path(), "bad.toml", &config);
        let output = hookonce(&["check-config", "--config", path.to_str().unwrap()], &[]);
        let shown = output_text(&output);
        assert!(!output.status.success(), "accepted: {server}\n{shown}");
        assert!(shown.contains(key), "message does not name {key}: {shown}");
    }
}
