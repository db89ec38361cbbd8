//! The proxy's edges against hostile clients: a stalled keyed body holds no admission permit (the
//! pool is shared with the webhooks), another spelling of a routed path is refused instead of
//! passed through unkeyed, and broken chunked framing is a client error, not a store failure.

use super::{outcome, send, start, ALICE, ORDERS, PROXY};
use crate::support::http::{exchange_raw, start_request};
use crate::support::metrics::{BODY_READS, IN_FLIGHT, PROXY_REQUESTS};
use crate::support::settings::{secs, ProxySettings};
use crate::support::upstream::Upstream;
use crate::support::{both_backends, eventually, now, stripe_body, Backend, TestApp};

both_backends!(
    other_spellings_of_a_routed_path_are_refused_not_passed_through,
    broken_chunked_framing_is_malformed,
);

/// Keyed bodies stalled on more sockets than there are permits: webhooks and keyed requests
/// that arrive whole still get their answers, and the stalled ones end at `body_read_timeout`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_keyed_bodies_hold_no_permit_and_starve_nothing() {
    const MAX_IN_FLIGHT: usize = 4;
    const STALLED: usize = 3 * MAX_IN_FLIGHT;
    let upstream = Upstream::start().await;
    let t = TestApp::builder(Backend::Memory)
        .server(|s| {
            s.max_in_flight = MAX_IN_FLIGHT;
            s.body_read_timeout = secs(3);
        })
        .proxy(
            PROXY,
            ProxySettings {
                upstream: upstream.url(),
                ..ProxySettings::default()
            },
        )
        .start()
        .await;
    let addr = t.proxy_addrs[PROXY];
    let mut stalled = Vec::new();
    for n in 0..STALLED {
        let key = format!("stalled-{n}");
        let headers = [("Idempotency-Key".to_owned(), key)];
        stalled.push(start_request(addr, ORDERS, &headers, 100, b"0123456789").await);
    }
    eventually(10, "every stalled body to be read", || async {
        t.metric(BODY_READS, &[]).await == STALLED as f64
    })
    .await;
    assert_eq!(
        t.metric(IN_FLIGHT, &[]).await,
        0.0,
        "a stalled body holds a permit"
    );

    for n in 0..2 * MAX_IN_FLIGHT {
        let body = stripe_body(&format!("evt_beside_stalled_{n}"), 200);
        let delivery = t.deliver("stripe", &body, &now()).await;
        assert_eq!(delivery.status(), 200, "signed delivery {n}");
        let key = format!("whole-{n}");
        let keyed = send(&t, "POST", ORDERS, &[("idempotency-key", &key)], b"{}").await;
        assert_eq!(keyed.status, 201, "keyed request {n}: {keyed:?}");
    }

    // Each stalled request is cut at its deadline with 408, and none reached the upstream.
    for mut stream in stalled {
        let answer = crate::support::http::read_to_close(&mut stream).await;
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
        assert!(answer.contains("Request body timed out"), "{answer}");
    }
    assert_eq!(outcome(&t, "body_timeout").await, STALLED as f64);
    assert_eq!(outcome(&t, "unavailable").await, 0.0);
    assert_eq!(upstream.seen().len(), 2 * MAX_IN_FLIGHT);
}

/// With `require_key`, every other spelling of `/v1/orders` is 400 with or without a key: the
/// upstream may route it to the same handler, so passing it through would skip the key, and
/// keying it would let a retry under another spelling execute again.
async fn other_spellings_of_a_routed_path_are_refused_not_passed_through(backend: Backend) {
    let upstream = Upstream::start().await;
    let t = start(backend, &upstream, |p| {
        p.routes = vec!["/v1/orders".into(), "/v1/orders/*/refunds".into()];
        p.require_key = true;
    })
    .await;
    let spellings = [
        "/v1/orders/",
        "/V1/orders",
        "/v1/%6Frders",
        "//v1/orders",
        "/v1/./orders",
        "/v1/orders;x",
        "/v1/x/../orders",
        "/v1/orders/./refunds",
        "/v1/orders/7;x/refunds",
    ];
    // Raw requests: an HTTP client's URL parser would resolve `.` and `..` before sending.
    let addr = t.proxy_addrs[PROXY];
    let raw = |method: &str, path: &str, key: bool| {
        let key = if key {
            format!("Idempotency-Key: k1\r\nAuthorization: {ALICE}\r\n")
        } else {
            String::new()
        };
        format!(
            "{method} {path} HTTP/1.1\r\nHost: test\r\n{key}Content-Length: 2\r\n\
             Connection: close\r\n\r\n{{}}"
        )
    };
    for path in spellings {
        for key in [false, true] {
            let answer = exchange_raw(addr, raw("POST", path, key).as_bytes()).await;
            assert!(answer.starts_with("HTTP/1.1 400"), "{path}: {answer}");
            assert!(answer.contains("Request path is not canonical"), "{answer}");
        }
        // A method without idempotency is the upstream's business, whatever the spelling.
        let answer = exchange_raw(addr, raw("PUT", path, false).as_bytes()).await;
        assert!(answer.starts_with("HTTP/1.1 201"), "{path}: {answer}");
    }
    assert_eq!(
        outcome(&t, "non_canonical_path").await,
        2.0 * spellings.len() as f64
    );
    assert!(
        upstream.seen().iter().all(|s| s.method == "PUT"),
        "a refused spelling reached the upstream"
    );
    if let Some(redis) = &t.redis {
        assert_eq!(redis.dbsize(), 0, "a refused spelling left a record");
    }
    // The canonical spelling is keyed as before.
    let first = send(&t, "POST", ORDERS, &[("idempotency-key", "k1")], b"{}").await;
    let retry = send(&t, "POST", ORDERS, &[("idempotency-key", "k1")], b"{}").await;
    assert!(!first.replayed() && retry.replayed());
}

/// Broken chunked framing on a keyed request is the client's error (400 `malformed`), not the
/// store's (503 `unavailable`, which pages people), and nothing is executed or stored.
async fn broken_chunked_framing_is_malformed(backend: Backend) {
    let upstream = Upstream::start().await;
    let t = start(backend, &upstream, |_| {}).await;
    let addr = t.proxy_addrs[PROXY];
    for broken in ["zz\r\nabc\r\n0\r\n\r\n", "3\r\nabcdef\r\n0\r\n\r\n"] {
        let request = format!(
            "POST {ORDERS} HTTP/1.1\r\nHost: test\r\nIdempotency-Key: k1\r\n\
             Transfer-Encoding: chunked\r\n\r\n{broken}"
        );
        let answer = exchange_raw(addr, request.as_bytes()).await;
        assert!(answer.starts_with("HTTP/1.1 400"), "{broken:?}: {answer}");
        assert!(answer.contains("Malformed request body"), "{answer}");
    }
    assert_eq!(outcome(&t, "malformed").await, 2.0);
    assert_eq!(outcome(&t, "unavailable").await, 0.0);
    assert!(upstream.seen().is_empty());
    if let Some(redis) = &t.redis {
        assert_eq!(redis.dbsize(), 0);
    }
    let labels = [("proxy", PROXY), ("outcome", "malformed")];
    assert_eq!(t.metric(PROXY_REQUESTS, &labels).await, 2.0);
}
