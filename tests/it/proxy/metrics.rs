//! Metrics: every outcome is counted once per request, with its latency, and the upstream's
//! exchanges are timed; the outcome list is the one of docs/design.md.

use super::{order, outcome, send, start, ORDERS, PROXY};
use crate::support::metrics::{series, PROXY_DURATIONS, PROXY_REQUESTS, PROXY_UPSTREAM_CALLS};
use crate::support::upstream::{Reply, Upstream};
use crate::support::{both_backends, Backend};

async fn each_outcome_is_counted_with_its_latency(backend: Backend) {
    let upstream = Upstream::start().await;
    upstream.answer("/v1/busy", Reply::status(503));
    let t = start(backend, &upstream, |p| {
        p.routes = vec![ORDERS.into(), "/v1/busy".into()];
        p.require_key = true;
    })
    .await;
    let too_large = vec![b'x'; t.app.settings.server.body_limit.0 as usize + 1];

    assert_eq!(order(&t, "k1", b"{}").await.status, 201); // executed
    assert!(order(&t, "k1", b"{}").await.replayed()); // replayed
    assert_eq!(order(&t, "k1", b"{\"other\":1}").await.status, 422); // key_reused
    assert_eq!(send(&t, "POST", ORDERS, &[], b"{}").await.status, 400); // missing_key
    assert_eq!(order(&t, "", b"{}").await.status, 400); // invalid_key
    assert_eq!(send(&t, "GET", ORDERS, &[], b"").await.status, 201); // passed_through
    let busy = send(&t, "POST", "/v1/busy", &[("idempotency-key", "k2")], b"{}").await;
    assert_eq!(busy.status, 503); // released
    assert_eq!(order(&t, "k3", &too_large).await.status, 413); // too_large

    let expected = [
        ("executed", 1.0),
        ("replayed", 1.0),
        ("in_flight", 0.0),
        ("key_reused", 1.0),
        ("missing_key", 1.0),
        ("invalid_key", 1.0),
        ("passed_through", 1.0),
        ("released", 1.0),
        ("unavailable", 0.0),
        ("too_large", 1.0),
    ];
    let page = t.metrics().await;
    for (name, count) in expected {
        assert_eq!(outcome(&t, name).await, count, "{name}\n{page}");
        let labels = [("proxy", PROXY), ("outcome", name)];
        assert_eq!(
            t.metric(PROXY_DURATIONS, &labels).await,
            count,
            "{name} latency"
        );
        // Every outcome is exported from the start, so a rate over it is never "no data".
        let series = series(PROXY_REQUESTS, &labels);
        assert!(page.contains(&series), "{series} missing\n{page}");
    }
    // executed, passed_through and released went upstream; nothing else did.
    let upstream_calls = t.metric(PROXY_UPSTREAM_CALLS, &[("proxy", PROXY)]).await;
    assert_eq!(upstream_calls, 3.0);
    assert_eq!(upstream.seen().len(), 3);
}

both_backends!(each_outcome_is_counted_with_its_latency);
