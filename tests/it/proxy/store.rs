//! The store's side: a completed key is replayed for `ttl` and executes again after it; with
//! Redis down the proxy fails closed (503, the upstream not called) while requests that need no
//! store still pass, and it recovers by itself when Redis is back. The memory store holds its
//! stored answers within `store.memory_max_bytes`.

use super::{order, outcome, send, settings, start, ORDERS, PROXY};
use crate::support::settings::{secs, ByteSize};
use crate::support::upstream::{Reply, Upstream};
use crate::support::{both_backends, eventually, Backend, TestApp};

async fn a_retry_after_the_ttl_executes_again(backend: Backend) {
    let upstream = Upstream::start().await;
    // The replays below must come within the ttl: 3 s, not the shortest (1 s), so that a loaded
    // machine's slow moment between two requests does not end it first.
    let t = start(backend, &upstream, |p| {
        p.ttl = secs(3);
        p.lease = secs(1);
        p.upstream_timeout = secs(1);
    })
    .await;
    let first = order(&t, "k1", b"{}").await;
    assert_eq!(first.status, 201);
    // Within the window: the stored answer.
    assert!(order(&t, "k1", b"{}").await.replayed());
    // Each retry until expiry is a replay; the first one after it executes.
    eventually(10, "the stored answer to expire", || async {
        let retry = order(&t, "k1", b"{}").await;
        assert_eq!(retry.status, 201);
        !retry.replayed()
    })
    .await;
    assert_eq!(upstream.executions("k1", ORDERS), 2);
    // The new execution is stored in its turn.
    let again = order(&t, "k1", b"{}").await;
    assert!(again.replayed());
    assert!(again.text().contains(r#""execution":2"#), "{again:?}");
}

both_backends!(a_retry_after_the_ttl_executes_again);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_redis_down_keyed_requests_get_503_and_never_reach_the_upstream() {
    let upstream = Upstream::start().await;
    let mut t = start(Backend::Redis, &upstream, |p| {
        p.routes = vec![ORDERS.into()];
        p.require_key = true;
    })
    .await;
    assert_eq!(order(&t, "before", b"{}").await.status, 201);
    t.redis.as_mut().unwrap().kill();

    let down = order(&t, "k1", b"{}").await;
    down.assert_problem_status(503);
    assert!(down.header("retry-after").is_some(), "{down:?}");
    // A key that was replayed before is not replayed (nor executed) either: no store, no answer.
    assert_eq!(order(&t, "before", b"{}").await.status, 503);
    assert_eq!(
        upstream.hits(ORDERS),
        1,
        "the upstream was called without a claim"
    );
    assert_eq!(outcome(&t, "unavailable").await, 2.0);

    // What needs no store passes: other methods, unrouted paths.
    let get = send(&t, "GET", ORDERS, &[("idempotency-key", "k1")], b"").await;
    assert_eq!(get.status, 201);
    let other = send(&t, "POST", "/v1/other", &[("idempotency-key", "k1")], b"{}").await;
    assert_eq!(other.status, 201);

    // Redis back (empty): the proxy reconnects by itself.
    t.redis.as_mut().unwrap().restart();
    eventually(20, "the proxy to use Redis again", || async {
        order(&t, "after", b"{}").await.status == 201
    })
    .await;
    assert!(order(&t, "after", b"{}").await.replayed());
    assert_eq!(upstream.executions("after", ORDERS), 1);
    assert!(t.redis.as_ref().unwrap().dbsize() > 0);
}

/// `memory_max_bytes = "256KiB"`, answers of 100 KiB: the first is stored whole; those that would
/// pass the budget are still executed once and stored truncated (status and headers), so their
/// retries say `Idempotency-Replay-Truncated` instead of executing again; and the bytes held
/// never pass the budget, however many keys come.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_memory_store_keeps_its_answers_within_memory_max_bytes() {
    const BUDGET: u64 = 256 << 10;
    let upstream = Upstream::start().await;
    upstream.answer(ORDERS, Reply::status(201).body_size(100 << 10));
    let mut proxy = settings(&upstream);
    proxy.max_stored_body = ByteSize(1 << 20);
    let t = TestApp::builder(Backend::Memory)
        .without_sources()
        .proxy(PROXY, proxy)
        .store(|s| s.memory_max_bytes = ByteSize(BUDGET))
        .start()
        .await;
    for n in 0..40 {
        let key = format!("k{n}");
        let first = order(&t, &key, b"{}").await;
        assert_eq!(first.status, 201, "{key}");
        assert_eq!(
            first.body.len(),
            100 << 10,
            "{key}: the client gets the whole answer"
        );
        let held = t.app.ledger.local_bytes().unwrap();
        assert!(held as u64 <= BUDGET, "{key}: {held} bytes held");
    }
    let whole = order(&t, "k0", b"{}").await;
    assert!(whole.replayed());
    assert_eq!(whole.body.len(), 100 << 10, "the first answer fits whole");
    for n in 1..40 {
        let key = format!("k{n}");
        let retry = order(&t, &key, b"{}").await;
        assert_eq!(retry.status, 201, "{key}");
        assert!(retry.replayed(), "{key}");
        assert_eq!(
            retry.header("idempotency-replay-truncated"),
            Some("true"),
            "{key}"
        );
        assert!(retry.body.is_empty());
        assert_eq!(upstream.executions(&key, ORDERS), 1, "{key}");
    }
    assert_eq!(outcome(&t, "executed").await, 40.0);
}
