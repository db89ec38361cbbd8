//! What the upstream answers and what becomes of it: 2xx, 4xx and 500 are stored and replayed;
//! `retry_statuses`, timeouts (504), refused or dropped connections (502) release the claim so
//! the retry executes again; oversized answers pass through and replay truncated; hop-by-hop
//! headers stay on their hop, and `X-Forwarded-*` is added. Redis and the memory store alike.

use std::time::Duration;

use super::{order, outcome, send, start, ALICE, ORDERS};
use crate::support::redis::free_port;
use crate::support::settings::{secs, ByteSize};
use crate::support::upstream::{Reply, Upstream};
use crate::support::{both_backends, Backend};

/// The draft: a retry gets the earlier result, success or error. 500 and 501 are stored too:
/// the upstream may have done part of the work (as Stripe treats them).
async fn client_errors_and_500_are_stored_and_replayed(backend: Backend) {
    let upstream = Upstream::start().await;
    let t = start(backend, &upstream, |_| {}).await;
    for (key, status) in [
        ("k400", 400),
        ("k404", 404),
        ("k409", 409),
        ("k500", 500),
        ("k501", 501),
    ] {
        upstream.answer(ORDERS, Reply::status(status).header("x-why", key));
        let first = order(&t, key, b"{}").await;
        assert_eq!(first.status, status);
        assert!(!first.replayed());
        let retry = order(&t, key, b"{}").await;
        assert_eq!(retry.status, status, "{key}");
        assert!(retry.replayed(), "{key}: {retry:?}");
        assert_eq!(retry.body, first.body);
        assert_eq!(retry.header("x-why"), Some(key));
        assert_eq!(upstream.executions(key, ORDERS), 1, "{key}");
    }
    assert_eq!(outcome(&t, "executed").await, 5.0);
    assert_eq!(outcome(&t, "replayed").await, 5.0);
}

/// A `retry_statuses` answer goes to the client as the upstream sent it and is not stored:
/// the retry executes again, with the same key, and its success is what later retries get.
async fn retry_statuses_release_the_claim(backend: Backend) {
    let upstream = Upstream::start().await;
    let t = start(backend, &upstream, |_| {}).await;
    for (key, status) in [("k503", 503), ("k429", 429), ("k408", 408)] {
        upstream.answer_in_turn(
            ORDERS,
            vec![
                Reply::status(status).header("retry-after", "7"),
                Reply::status(201),
            ],
        );
        let first = order(&t, key, b"{}").await;
        assert_eq!(first.status, status);
        assert_eq!(first.header("retry-after"), Some("7"));
        assert!(
            first.text().contains(r#""execution""#),
            "the upstream's own body"
        );
        assert!(!first.replayed());
        let retry = order(&t, key, b"{}").await;
        assert_eq!(retry.status, 201, "{key}: the retry executes again");
        assert!(!retry.replayed());
        let again = order(&t, key, b"{}").await;
        assert!(again.replayed());
        assert_eq!(again.body, retry.body);
        assert_eq!(upstream.executions(key, ORDERS), 2, "{key}");
    }
    assert_eq!(outcome(&t, "released").await, 3.0);
}

/// An upstream slower than `upstream_timeout` gets 504; the claim is released, and the retry
/// executes again.
async fn an_upstream_timeout_answers_504_and_releases(backend: Backend) {
    let upstream = Upstream::start().await;
    upstream.answer_in_turn(
        ORDERS,
        vec![
            Reply::status(201).delay(Duration::from_secs(5)),
            Reply::status(201),
        ],
    );
    let t = start(backend, &upstream, |p| {
        p.upstream_timeout = secs(1);
        p.lease = secs(1);
    })
    .await;
    let first = order(&t, "k1", b"{}").await;
    assert_eq!(first.status, 504, "{first:?}");
    assert!(!first.replayed());
    let retry = order(&t, "k1", b"{}").await;
    assert_eq!(retry.status, 201, "{retry:?}");
    assert!(!retry.replayed());
    assert_eq!(upstream.executions("k1", ORDERS), 2);
    assert_eq!(outcome(&t, "released").await, 1.0);
    assert_eq!(outcome(&t, "executed").await, 1.0);
}

/// A request without a key that the upstream does not answer within `upstream_timeout` gets
/// 504 then, not sooner and not at the upstream's pace; the requests before and after it on
/// the client's connection, whose timer it shares, keep their own deadlines.
async fn a_passed_through_request_gets_504_at_upstream_timeout(backend: Backend) {
    let upstream = Upstream::start().await;
    upstream.answer_in_turn(
        ORDERS,
        vec![
            Reply::status(201),
            Reply::status(201).delay(Duration::from_secs(5)),
            Reply::status(201),
        ],
    );
    let t = start(backend, &upstream, |p| p.upstream_timeout = secs(1)).await;
    let plain = [("authorization", ALICE)];
    assert_eq!(send(&t, "POST", ORDERS, &plain, b"{}").await.status, 201);
    let started = std::time::Instant::now();
    let slow = send(&t, "POST", ORDERS, &plain, b"{}").await;
    let took = started.elapsed();
    assert_eq!(slow.status, 504, "{slow:?}");
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(4),
        "took {took:?}"
    );
    assert_eq!(send(&t, "POST", ORDERS, &plain, b"{}").await.status, 201);
    assert_eq!(upstream.hits(ORDERS), 3);
}

/// Nothing listening upstream, or a connection dropped without an answer: 502, released.
async fn a_refused_or_dropped_upstream_answers_502_and_releases(backend: Backend) {
    let nowhere = Upstream::start().await;
    let t = start(backend, &nowhere, |p| {
        p.upstream = format!("http://127.0.0.1:{}", free_port());
    })
    .await;
    for _ in 0..2 {
        assert_eq!(order(&t, "k1", b"{}").await.status, 502);
    }
    assert_eq!(outcome(&t, "released").await, 2.0);
    if let Some(redis) = &t.redis {
        assert_eq!(redis.dbsize(), 0, "a released claim stays in Redis");
    }

    let upstream = Upstream::start().await;
    upstream.answer_in_turn(ORDERS, vec![Reply::dropped(), Reply::status(201)]);
    let t = start(backend, &upstream, |_| {}).await;
    assert_eq!(order(&t, "k2", b"{}").await.status, 502);
    let retry = order(&t, "k2", b"{}").await;
    assert_eq!(retry.status, 201);
    assert!(!retry.replayed());
    assert_eq!(upstream.executions("k2", ORDERS), 2);
}

/// Above `max_stored_body` the answer passes through whole; its key is completed with status
/// and headers only, and a replay says so with an empty body rather than executing twice.
async fn an_oversized_answer_passes_through_and_replays_truncated(backend: Backend) {
    let upstream = Upstream::start().await;
    let t = start(backend, &upstream, |p| p.max_stored_body = ByteSize(1024)).await;

    upstream.answer(
        ORDERS,
        Reply::status(201).header("x-big", "1").body_size(4096),
    );
    let first = order(&t, "big", b"{}").await;
    assert_eq!(first.status, 201);
    assert_eq!(first.body.len(), 4096);
    let retry = order(&t, "big", b"{}").await;
    assert_eq!(retry.status, 201);
    assert!(retry.replayed());
    assert_eq!(retry.header("idempotency-replay-truncated"), Some("true"));
    assert_eq!(retry.header("x-big"), Some("1"));
    assert_eq!(retry.header("content-length"), Some("0"));
    assert!(retry.body.is_empty());
    assert_eq!(upstream.executions("big", ORDERS), 1);

    // Exactly the limit is stored whole.
    upstream.answer(ORDERS, Reply::status(201).body_size(1024));
    let first = order(&t, "limit", b"{}").await;
    let retry = order(&t, "limit", b"{}").await;
    assert!(retry.replayed());
    assert!(retry.header("idempotency-replay-truncated").is_none());
    assert_eq!(retry.body, first.body);
    assert_eq!(retry.body.len(), 1024);
}

/// Hop-by-hop headers (RFC 9110 §7.6.1: `Connection` and those it names, `Keep-Alive`, `TE`,
/// `Upgrade`, `Proxy-Connection`) stay on their hop in both directions and out of the stored
/// answer; from a peer outside `server.trusted_proxies` (none here), `X-Forwarded-For` is
/// replaced by the peer, `-Proto` and `-Host` set to what hookonce saw.
async fn hop_by_hop_headers_stay_on_their_hop_and_forwarded_headers_are_added(backend: Backend) {
    let upstream = Upstream::start().await;
    upstream.answer(
        ORDERS,
        Reply::status(201)
            .header("connection", "x-upstream-hop")
            .header("x-upstream-hop", "1")
            .header("keep-alive", "timeout=5")
            .header("x-end-to-end", "1"),
    );
    let t = start(backend, &upstream, |_| {}).await;
    let headers = [
        ("idempotency-key", "k1"),
        ("connection", "x-client-hop"),
        ("x-client-hop", "1"),
        ("keep-alive", "timeout=5"),
        ("te", "trailers"),
        ("proxy-connection", "keep-alive"),
        ("x-forwarded-for", "203.0.113.7"),
        ("x-end-to-end", "kept"),
    ];
    let first = send(&t, "POST", ORDERS, &headers, b"{}").await;
    assert_eq!(first.status, 201);
    let seen = upstream.last(ORDERS);
    for hop in ["x-client-hop", "keep-alive", "te", "proxy-connection"] {
        assert!(seen.header(hop).is_none(), "{hop} reached the upstream");
    }
    assert_eq!(seen.header("x-end-to-end"), Some("kept"));
    assert_eq!(seen.header("idempotency-key"), Some("k1"));
    assert_eq!(seen.header("x-forwarded-for"), Some("127.0.0.1"));
    assert_eq!(seen.header("x-forwarded-proto"), Some("http"));
    let host = t.proxy_addrs[super::PROXY].to_string();
    assert_eq!(seen.header("x-forwarded-host"), Some(host.as_str()));

    let retry = send(&t, "POST", ORDERS, &headers, b"{}").await;
    assert!(retry.replayed());
    for answer in [&first, &retry] {
        assert!(answer.header("x-upstream-hop").is_none(), "{answer:?}");
        assert!(answer.header("keep-alive").is_none(), "{answer:?}");
        assert_eq!(answer.header("x-end-to-end"), Some("1"));
    }
}

both_backends!(
    client_errors_and_500_are_stored_and_replayed,
    retry_statuses_release_the_claim,
    an_upstream_timeout_answers_504_and_releases,
    a_passed_through_request_gets_504_at_upstream_timeout,
    a_refused_or_dropped_upstream_answers_502_and_releases,
    an_oversized_answer_passes_through_and_replays_truncated,
    hop_by_hop_headers_stay_on_their_hop_and_forwarded_headers_are_added,
);
