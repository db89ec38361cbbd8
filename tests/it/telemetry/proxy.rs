//! The proxy's trace: its server span beneath the client's `traceparent`, the upstream exchange
//! beneath it, and the upstream handed the exchange's context; the Idempotency-Key is never an
//! attribute. A client's trace that is not sampled reaches the upstream as it came, unrecorded.

use super::*;
use crate::proxy::{send, settings, ALICE, ORDERS, PROXY};
use crate::support::otlp::{CLIENT, SERVER};
use crate::support::upstream::Upstream;

const TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
const PARENT: &str = "b7ad6b7169203331";

/// A collector, an upstream, and the proxy in front of it tracing every request to the collector.
async fn traced_proxy() -> (Collector, Upstream, TestApp) {
    let collector = Collector::start().await;
    let upstream = Upstream::start().await;
    let t = TestApp::builder(crate::support::Backend::Redis)
        .without_sources()
        .proxy(PROXY, settings(&upstream))
        .telemetry(telemetry_to(collector.endpoint(), 1.0))
        .start()
        .await;
    (collector, upstream, t)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxied_request_s_upstream_sees_the_proxy_span_as_parent() {
    let (collector, upstream, t) = traced_proxy().await;
    let inbound = format!("00-{TRACE}-{PARENT}-01");
    let key = "secret-looking-key-1";
    let answer = send(
        &t,
        "POST",
        ORDERS,
        &[
            ("idempotency-key", key),
            ("authorization", ALICE),
            ("traceparent", &inbound),
        ],
        b"{}",
    )
    .await;
    assert_eq!(answer.status, 201);
    let request = span_of(&collector, "proxy", TRACE).await;
    assert_eq!(request.parent_span_id, PARENT);
    assert_eq!(request.kind, SERVER);
    assert_eq!(request.attribute("hookonce.proxy"), Some(PROXY));
    assert_eq!(request.attribute("hookonce.outcome"), Some("executed"));
    let exchange = span_of(&collector, "proxy upstream", TRACE).await;
    assert_eq!(exchange.parent_span_id, request.span_id);
    assert_eq!(exchange.kind, CLIENT);
    let seen = upstream.seen();
    assert_eq!(
        seen[0].header("traceparent"),
        Some(format!("00-{TRACE}-{}-01", exchange.span_id).as_str())
    );
    for span in collector.spans() {
        for (name, value) in &span.attributes {
            assert!(
                !value.contains(key) && !value.contains("alice"),
                "{name}={value}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_trace_not_sampled_reaches_the_upstream_unrecorded() {
    let (collector, upstream, t) = traced_proxy().await;
    let inbound = format!("00-{TRACE}-{PARENT}-00");
    let answer = send(
        &t,
        "POST",
        ORDERS,
        &[
            ("idempotency-key", "unsampled-1"),
            ("authorization", ALICE),
            ("traceparent", &inbound),
        ],
        b"{}",
    )
    .await;
    assert_eq!(answer.status, 201);
    // The upstream hears the client's decision not to sample, under the client's trace.
    let seen = upstream.seen();
    let traceparent = seen[0].header("traceparent").unwrap_or_default();
    assert!(
        traceparent.starts_with(&format!("00-{TRACE}-")) && traceparent.ends_with("-00"),
        "{traceparent:?}"
    );
    tokio::task::spawn_blocking(hookonce::telemetry::shutdown)
        .await
        .unwrap();
    assert!(collector.spans().is_empty(), "{:?}", collector.spans());
}
