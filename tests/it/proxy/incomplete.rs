//! Answers that break after a storable head: the upstream executed the request, so the key is
//! never released; it is stored as *executed, answer incomplete*, the first request and every
//! retry get the 502 problem "Upstream answer incomplete", and only `hookonce forget` executes it
//! again. No client waits past `upstream_timeout` for the whole exchange, an endless body
//! streamed past `max_stored_body` included. Redis and the memory store alike.

use std::time::{Duration, Instant};

use super::{order, outcome, start, ALICE, ORDERS};
use crate::support::binary::{hookonce, output_text, write};
use crate::support::settings::{secs, ByteSize};
use crate::support::upstream::{AfterHead, Reply, Upstream};
use crate::support::{both_backends, Backend};

const INCOMPLETE: &str = "Upstream answer incomplete";

/// `200`, `Content-Length: 100`, 10 bytes, then a reset: 502 incomplete, and so is the retry,
/// which does not reach the upstream.
async fn a_body_reset_after_a_storable_head_is_stored_incomplete(backend: Backend) {
    let upstream = Upstream::start().await;
    let reset = AfterHead::ShortThenReset {
        declared: 100,
        sent: 10,
    };
    upstream.answer(ORDERS, Reply::status(200).then(reset));
    let t = start(backend, &upstream, |_| {}).await;
    let first = order(&t, "k1", b"{}").await;
    let problem = first.assert_problem(502, INCOMPLETE);
    assert!(problem["detail"].as_str().unwrap().contains("executed"));
    assert!(!first.replayed());
    for _ in 0..2 {
        let retry = order(&t, "k1", b"{}").await;
        retry.assert_problem(502, INCOMPLETE);
    }
    assert_eq!(upstream.executions("k1", ORDERS), 1, "executed once only");
    assert_eq!(outcome(&t, "incomplete").await, 3.0);
    assert_eq!(outcome(&t, "released").await, 0.0);
    // Another payload under the key is still told apart: the record keeps its fingerprint.
    assert_eq!(order(&t, "k1", b"{\"other\":1}").await.status, 422);
}

/// A `201` head and then nothing: 502 incomplete by `upstream_timeout`, and the retry at once.
async fn a_head_then_a_stall_is_incomplete_within_upstream_timeout(backend: Backend) {
    let upstream = Upstream::start().await;
    upstream.answer(ORDERS, Reply::status(201).then(AfterHead::Stall));
    let t = start(backend, &upstream, |p| {
        p.upstream_timeout = secs(1);
        p.lease = secs(2);
    })
    .await;
    let started = Instant::now();
    let first = order(&t, "k1", b"{}").await;
    let took = started.elapsed();
    first.assert_problem(502, INCOMPLETE);
    assert!(took < Duration::from_secs(3), "answered after {took:?}");
    let started = Instant::now();
    order(&t, "k1", b"{}").await.assert_problem(502, INCOMPLETE);
    assert!(
        started.elapsed() < Duration::from_millis(900),
        "the retry waits for nothing"
    );
    assert_eq!(upstream.executions("k1", ORDERS), 1);
    assert_eq!(outcome(&t, "incomplete").await, 2.0);
}

/// Past `max_stored_body` the head goes to the client and the rest streams; an upstream whose
/// body never ends is cut at `upstream_timeout`, and the key stays completed truncated.
async fn an_endless_body_past_max_stored_body_is_cut_at_upstream_timeout(backend: Backend) {
    let upstream = Upstream::start().await;
    upstream.answer(ORDERS, Reply::status(201).then(AfterHead::Endless));
    let t = start(backend, &upstream, |p| {
        p.upstream_timeout = secs(1);
        p.lease = secs(1);
        p.max_stored_body = ByteSize(1024);
    })
    .await;
    let started = Instant::now();
    let response = t
        .client
        .post(t.proxy_url(super::PROXY, ORDERS))
        .header("idempotency-key", "k1")
        .header("authorization", ALICE)
        .body("{}")
        .send()
        .await
        .expect("the head arrives");
    assert_eq!(response.status(), 201);
    // Without the deadline this read never ends; the outer timeout only keeps the test finite.
    let read = tokio::time::timeout(Duration::from_secs(10), response.bytes()).await;
    let took = started.elapsed();
    let read = read.expect("the client's body read ends");
    assert!(read.is_err(), "a cut body must not look complete");
    assert!(
        took < Duration::from_secs(4),
        "the body ended after {took:?}"
    );
    let retry = order(&t, "k1", b"{}").await;
    assert_eq!(retry.status, 201);
    assert!(retry.replayed());
    assert_eq!(retry.header("idempotency-replay-truncated"), Some("true"));
    assert_eq!(upstream.executions("k1", ORDERS), 1);
}

both_backends!(
    a_body_reset_after_a_storable_head_is_stored_incomplete,
    a_head_then_a_stall_is_incomplete_within_upstream_timeout,
    an_endless_body_past_max_stored_body_is_cut_at_upstream_timeout,
);

/// `hookonce inspect` shows an incomplete key as such; `hookonce forget` deletes it, and the next
/// request with the key executes again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forget_executes_an_incomplete_key_again() {
    let upstream = Upstream::start().await;
    let reset = AfterHead::ShortThenReset {
        declared: 100,
        sent: 10,
    };
    upstream.answer_in_turn(
        ORDERS,
        vec![Reply::status(200).then(reset), Reply::status(201)],
    );
    let t = start(Backend::Redis, &upstream, |_| {}).await;
    order(&t, "k1", b"{}").await.assert_problem(502, INCOMPLETE);

    let dir = tempfile::tempdir().unwrap();
    let redis_url = t.redis.as_ref().unwrap().url();
    let config = format!(
        "[store]\nbackend = \"redis\"\nredis_url = \"{redis_url}\"\n\
         [proxies.orders]\nlisten = \"127.0.0.1:1\"\nupstream = \"{}\"\n",
        upstream.url()
    );
    let config = write(dir.path(), "hookonce.toml", &config);
    let principal = format!("Authorization={ALICE}");
    let lookup = |command: &str| {
        let args = [
            command,
            "--config",
            config.to_str().unwrap(),
            "--proxy",
            "orders",
            "--path",
            ORDERS,
            "--principal",
            &principal,
            "k1",
        ];
        hookonce(&args, &[])
    };
    let inspect = lookup("inspect");
    let shown = output_text(&inspect);
    assert!(inspect.status.success(), "{shown}");
    assert!(shown.contains("answer incomplete"), "{shown}");
    assert!(shown.contains("status:      200"), "{shown}");

    let forget = lookup("forget");
    assert!(forget.status.success(), "{}", output_text(&forget));
    let again = order(&t, "k1", b"{}").await;
    assert_eq!(again.status, 201, "{again:?}");
    assert!(!again.replayed());
    assert_eq!(upstream.executions("k1", ORDERS), 2);
    assert!(order(&t, "k1", b"{}").await.replayed());
}
