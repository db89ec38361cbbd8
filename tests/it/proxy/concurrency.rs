//! Duplicates while the first request is in flight: they never execute (409 + Retry-After, or
//! with `wait` the first one's answer), 422 beats 409, a response lost on its way back is
//! replayed to the retry, and a live claim is not taken over. Redis and the memory store alike.

use std::time::Duration;

use super::{order, outcome, start, Answer, ORDERS, PROXY};
use crate::support::metrics::{PROXY_CLAIMS_HELD, PROXY_LEASE_TAKEOVERS, PROXY_OLDEST_CLAIM};
use crate::support::settings::{ms, secs};
use crate::support::upstream::{Reply, Upstream};
use crate::support::{both_backends, eventually, Backend, TestApp};

fn spawn_order(
    t: &TestApp,
    key: &'static str,
    body: &'static [u8],
) -> tokio::task::JoinHandle<Answer> {
    let client = t.client.clone();
    let url = t.proxy_url(PROXY, ORDERS);
    tokio::spawn(async move {
        let response = client
            .post(url)
            .header("idempotency-key", key)
            .header("authorization", super::ALICE)
            .body(body)
            .send()
            .await
            .expect("the proxy answers");
        Answer {
            status: response.status().as_u16(),
            headers: response.headers().clone(),
            body: response.bytes().await.unwrap(),
        }
    })
}

async fn upstream_reached(upstream: &Upstream, n: usize) {
    eventually(10, "the upstream to receive the request", || async {
        upstream.hits(ORDERS) >= n
    })
    .await;
}

async fn a_duplicate_in_flight_gets_409_and_then_the_replay(backend: Backend) {
    let upstream = Upstream::start().await;
    let gate = upstream.hold();
    let t = start(backend, &upstream, |_| {}).await;
    let first = spawn_order(&t, "k1", b"{}");
    upstream_reached(&upstream, 1).await;

    let duplicate = order(&t, "k1", b"{}").await;
    duplicate.assert_problem(409, "A request is outstanding for this Idempotency-Key");
    assert!(duplicate.header("retry-after").is_some(), "{duplicate:?}");
    assert_eq!(outcome(&t, "in_flight").await, 1.0);
    // The claim is visible while it is held.
    let labels = [("proxy", PROXY)];
    assert_eq!(t.metric(PROXY_CLAIMS_HELD, &labels).await, 1.0);
    // The age gauge is refreshed by the metrics upkeep task (every few seconds).
    eventually(15, "the oldest claim's age to grow", || async {
        t.metric(PROXY_OLDEST_CLAIM, &labels).await > 0.0
    })
    .await;

    gate.add_permits(1);
    let first = first.await.unwrap();
    assert_eq!(first.status, 201);
    let retry = order(&t, "k1", b"{}").await;
    assert!(retry.replayed());
    assert_eq!(retry.body, first.body);
    assert_eq!(upstream.executions("k1", ORDERS), 1);
    eventually(15, "the claim gauges to fall back", || async {
        t.metric(PROXY_CLAIMS_HELD, &labels).await == 0.0
            && t.metric(PROXY_OLDEST_CLAIM, &labels).await == 0.0
    })
    .await;
}

/// Fifty truly simultaneous requests with one key: one executes, forty-nine get 409.
async fn fifty_concurrent_requests_execute_once(backend: Backend) {
    let upstream = Upstream::start().await;
    let gate = upstream.hold();
    let t = start(backend, &upstream, |_| {}).await;
    let requests: Vec<_> = (0..50).map(|_| spawn_order(&t, "k50", b"{}")).collect();
    upstream_reached(&upstream, 1).await;
    eventually(20, "49 duplicates to be answered", || async {
        requests.iter().filter(|r| r.is_finished()).count() == 49
    })
    .await;
    gate.add_permits(50);
    let mut statuses = Vec::new();
    for request in requests {
        statuses.push(request.await.unwrap().status);
    }
    assert_eq!(
        statuses.iter().filter(|s| **s == 201).count(),
        1,
        "{statuses:?}"
    );
    assert_eq!(
        statuses.iter().filter(|s| **s == 409).count(),
        49,
        "{statuses:?}"
    );
    assert_eq!(upstream.executions("k50", ORDERS), 1);
    assert_eq!(outcome(&t, "in_flight").await, 49.0);
}

/// With `wait`, duplicates wait for the first and get its answer, marked as a replay.
async fn with_wait_concurrent_duplicates_get_the_first_answer(backend: Backend) {
    let upstream = Upstream::start().await;
    let gate = upstream.hold();
    let t = start(backend, &upstream, |p| p.wait = secs(10)).await;
    let two: Vec<_> = (0..2).map(|_| spawn_order(&t, "k2", b"{}")).collect();
    let fifty: Vec<_> = (0..50).map(|_| spawn_order(&t, "k50", b"{}")).collect();
    upstream_reached(&upstream, 2).await;
    gate.add_permits(100);
    for (key, requests) in [("k2", two), ("k50", fifty)] {
        let mut answers = Vec::new();
        for request in requests {
            answers.push(request.await.unwrap());
        }
        assert!(
            answers.iter().all(|a| a.status == 201),
            "{key}: {answers:?}"
        );
        assert!(answers.iter().all(|a| a.body == answers[0].body), "{key}");
        let replayed = answers.iter().filter(|a| a.replayed()).count();
        assert_eq!(replayed, answers.len() - 1, "{key}");
        assert_eq!(upstream.executions(key, ORDERS), 1, "{key}");
    }
    assert_eq!(outcome(&t, "replayed").await, 50.0);
    assert_eq!(outcome(&t, "in_flight").await, 0.0);
}

/// A duplicate with another payload is a reused key whether or not the first is still in flight.
async fn a_changed_payload_in_flight_gets_422_not_409(backend: Backend) {
    let upstream = Upstream::start().await;
    let gate = upstream.hold();
    let t = start(backend, &upstream, |p| p.wait = ms(500)).await;
    let first = spawn_order(&t, "k1", br#"{"sku":1}"#);
    upstream_reached(&upstream, 1).await;
    let changed = order(&t, "k1", br#"{"sku":2}"#).await;
    changed.assert_problem(422, "Idempotency-Key is already used");
    gate.add_permits(1);
    assert_eq!(first.await.unwrap().status, 201);
    assert_eq!(upstream.hits(ORDERS), 1);
}

/// The client sends its request and goes away before the answer (a timeout, a dropped
/// connection): the upstream's answer is still stored, and the retry gets it.
async fn a_lost_response_is_replayed_to_the_retry(backend: Backend) {
    use tokio::io::AsyncWriteExt;
    let upstream = Upstream::start().await;
    let gate = upstream.hold();
    let t = start(backend, &upstream, |_| {}).await;
    let mut client = tokio::net::TcpStream::connect(t.proxy_addrs[PROXY])
        .await
        .unwrap();
    client
        .write_all(b"POST /v1/orders HTTP/1.1\r\nHost: t\r\nIdempotency-Key: lost\r\nAuthorization: Bearer alice\r\nContent-Length: 2\r\n\r\n{}")
        .await
        .unwrap();
    upstream_reached(&upstream, 1).await;
    drop(client);
    gate.add_permits(1);
    // Until the upstream's answer is stored the retry is in flight (409); a claim stranded by the
    // disconnect would keep it there for the whole lease (30 s) and fail this wait.
    let mut retry = order(&t, "lost", b"{}").await;
    while retry.status == 409 {
        tokio::time::sleep(Duration::from_millis(20)).await; // pacing the retries
        retry = order(&t, "lost", b"{}").await;
    }
    assert_eq!(retry.status, 201);
    assert!(retry.replayed(), "{retry:?}");
    assert!(retry.text().contains(r#""execution":1"#));
    assert_eq!(upstream.executions("lost", ORDERS), 1);
    // The execution counts although nobody received its answer. It is counted when the first
    // request's task finishes, after its answer was stored: the retry can be answered from the
    // store first, so the count is awaited, not read once.
    eventually(10, "the execution to be counted", || async {
        outcome(&t, "executed").await >= 1.0
    })
    .await;
    assert_eq!(outcome(&t, "executed").await, 1.0);
}

/// `lease` may not be shorter than `upstream_timeout` (check-config refuses it), so the closest
/// a request gets to outliving its claim is a lease equal to the timeout and an upstream that
/// answers shortly before it (a second before: with 300 ms, a stalled moment of a loaded machine
/// could end the request first): every duplicate meanwhile is refused, none takes the claim over.
async fn a_live_claim_is_never_taken_over(backend: Backend) {
    let upstream = Upstream::start().await;
    upstream.answer(ORDERS, Reply::status(201).delay(Duration::from_secs(4)));
    let t = start(backend, &upstream, |p| {
        p.lease = secs(5);
        p.upstream_timeout = secs(5);
    })
    .await;
    let first = spawn_order(&t, "slow", b"{}");
    upstream_reached(&upstream, 1).await;
    let mut refused = 0;
    while !first.is_finished() {
        let duplicate = order(&t, "slow", b"{}").await;
        if duplicate.status == 409 {
            refused += 1;
            // Pacing, not a wait for a condition: a duplicate every 20 ms for the request's life.
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        }
        // The first answer landed between the check above and this duplicate.
        assert!(duplicate.replayed(), "{duplicate:?}");
        break;
    }
    assert!(
        refused > 0,
        "no duplicate arrived while the first was in flight"
    );
    let first = first.await.unwrap();
    assert_eq!(first.status, 201);
    assert!(!first.replayed());
    assert!(order(&t, "slow", b"{}").await.replayed());
    assert_eq!(upstream.executions("slow", ORDERS), 1);
    let takeovers = t.metric(PROXY_LEASE_TAKEOVERS, &[("proxy", PROXY)]).await;
    assert_eq!(takeovers, 0.0);
}

both_backends!(
    a_duplicate_in_flight_gets_409_and_then_the_replay,
    fifty_concurrent_requests_execute_once,
    with_wait_concurrent_duplicates_get_the_first_answer,
    a_changed_payload_in_flight_gets_422_not_409,
    a_lost_response_is_replayed_to_the_retry,
    a_live_claim_is_never_taken_over,
);
