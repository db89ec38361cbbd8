//! One trace from the provider to the worker: the webhook's server span beneath the inbound
//! `traceparent`, its verification and store call beneath it, the context in the stream entry,
//! the relay's attempt beneath that, and the worker handed the attempt's context. Then: a new
//! root without an inbound header, nothing exported at ratio 0, an inbound trace not sampled
//! followed at ratio 1, the ratio's share of new roots kept (with every kept span whole), a
//! collector that is down, one that refuses a batch and one that never answers.

use std::time::Instant;

use super::*;
use crate::support::otlp::{closed_endpoint, refusing_endpoint, silent_endpoint, CLIENT, SERVER};

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT: &str = "00f067aa0ba902b7";

/// Awaits `deliveries` deliveries at `worker`, then shuts telemetry down, which exports whatever
/// is queued: after it, every span that was kept has arrived.
async fn delivered_and_exported(worker: &RelayWorker, deliveries: usize) {
    eventually(10, "the deliveries", || {
        let done = worker.deliveries().len() == deliveries;
        async move { done }
    })
    .await;
    tokio::task::spawn_blocking(hookonce::telemetry::shutdown)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trace_runs_from_the_inbound_traceparent_through_the_stream_to_the_worker() {
    let collector = Collector::start().await;
    let worker = RelayWorker::start().await;
    let app = traced_app(&worker, collector.endpoint(), 1.0).await;
    let inbound = format!("00-{TRACE}-{PARENT}-01");
    let response = post_event(
        &app,
        "evt_traced",
        &[("traceparent", &inbound), ("tracestate", "vendor=1")],
    )
    .await;
    assert_eq!(response.status(), 200);

    let request = span_of(&collector, "webhook", TRACE).await;
    assert_eq!(request.parent_span_id, PARENT, "{request:?}");
    assert_eq!(request.kind, SERVER);
    assert_eq!(request.service, "hookonce");
    assert_eq!(request.attribute("hookonce.source"), Some("stripe"));
    assert_eq!(request.attribute("hookonce.event_id"), Some("evt_traced"));
    assert_eq!(request.attribute("hookonce.outcome"), Some("forwarded"));
    assert_eq!(request.attribute("http.response.status_code"), Some("200"));

    let verify = span_of(&collector, "verify", TRACE).await;
    assert_eq!(verify.parent_span_id, request.span_id);
    let store = span_of(&collector, "redis forward", TRACE).await;
    assert_eq!(store.parent_span_id, request.span_id, "{store:?}");
    assert_eq!(store.kind, CLIENT);
    assert_eq!(
        store.links,
        vec![(TRACE.to_owned(), request.span_id.clone())]
    );

    // The entry carries the request span's context; the relay's attempt is its child.
    assert_eq!(
        entry_traceparents(&app),
        vec![format!("00-{TRACE}-{}-01", request.span_id)]
    );
    let attempt = span_of(&collector, "relay attempt", TRACE).await;
    assert_eq!(attempt.parent_span_id, request.span_id, "{attempt:?}");
    assert_eq!(attempt.kind, CLIENT);
    assert_eq!(attempt.attribute("hookonce.route"), Some("orders"));
    assert_eq!(attempt.attribute("hookonce.attempt"), Some("1"));
    let deliveries = worker.deliveries();
    assert_eq!(deliveries.len(), 1);
    assert_eq!(
        deliveries[0].header("traceparent"),
        format!("00-{TRACE}-{}-01", attempt.span_id)
    );
    // Nothing of the request's Idempotency-Key or body is exported.
    for span in collector.spans() {
        for (key, value) in &span.attributes {
            assert!(!value.contains("hookonce:{stripe}:d:"), "{key}={value}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_without_traceparent_is_a_new_root() {
    let collector = Collector::start().await;
    let worker = RelayWorker::start().await;
    let app = traced_app(&worker, collector.endpoint(), 1.0).await;
    assert_eq!(post_event(&app, "evt_root", &[]).await.status(), 200);
    eventually(10, "the webhook span", || {
        let found = !collector.named("webhook").is_empty();
        async move { found }
    })
    .await;
    let request = collector.named("webhook").remove(0);
    assert_eq!(request.parent_span_id, "", "{request:?}");
    assert_ne!(request.trace_id, TRACE);
    let attempt = span_of(&collector, "relay attempt", &request.trace_id).await;
    assert_eq!(attempt.parent_span_id, request.span_id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sampling_at_zero_exports_nothing_and_stores_no_context() {
    let collector = Collector::start().await;
    let worker = RelayWorker::start().await;
    let app = traced_app(&worker, collector.endpoint(), 0.0).await;
    for i in 0..5 {
        assert_eq!(
            post_event(&app, &format!("evt_{i}"), &[]).await.status(),
            200
        );
    }
    delivered_and_exported(&worker, 5).await;
    assert!(collector.spans().is_empty(), "{:?}", collector.spans());
    assert_eq!(entry_traceparents(&app), vec![String::new(); 5]);
    // A worker hears the decision not to sample (flags 00), so that it does not sample either.
    for delivery in worker.deliveries() {
        let traceparent = delivery.header("traceparent");
        assert!(traceparent.ends_with("-00"), "{traceparent:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inbound_trace_not_sampled_is_followed_at_ratio_one() {
    let collector = Collector::start().await;
    let worker = RelayWorker::start().await;
    let app = traced_app(&worker, collector.endpoint(), 1.0).await;
    let inbound = format!("00-{TRACE}-{PARENT}-00");
    let response = post_event(&app, "evt_unsampled", &[("traceparent", &inbound)]).await;
    assert_eq!(response.status(), 200);
    delivered_and_exported(&worker, 1).await;
    let of_trace: Vec<_> = collector
        .spans()
        .into_iter()
        .filter(|s| s.trace_id == TRACE)
        .collect();
    assert!(of_trace.is_empty(), "{of_trace:?}");
    assert_eq!(entry_traceparents(&app), vec![String::new()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ratio_keeps_its_share_of_new_traces_and_each_kept_trace_whole() {
    const REQUESTS: usize = 200;
    let collector = Collector::start().await;
    let worker = RelayWorker::start().await;
    let app = traced_app(&worker, collector.endpoint(), 0.5).await;
    for i in 0..REQUESTS {
        let response = post_event(&app, &format!("evt_share_{i}"), &[]).await;
        assert_eq!(response.status(), 200);
    }
    delivered_and_exported(&worker, REQUESTS).await;
    let requests = collector.named("webhook");
    // Binomial(200, 0.5): outside 60..=140 with a probability below 10^-8.
    assert!(
        (60..=140).contains(&requests.len()),
        "{} of {REQUESTS} requests kept at ratio 0.5",
        requests.len()
    );
    // A kept request has its verification beneath it; a dropped one has no span at all, not even
    // an orphan child of its own.
    let verifications = collector.named("verify");
    assert_eq!(verifications.len(), requests.len());
    for verify in &verifications {
        assert!(
            requests
                .iter()
                .any(|r| r.trace_id == verify.trace_id && r.span_id == verify.parent_span_id),
            "{verify:?} has no request span above it"
        );
    }
    // The stream carries the context of the kept requests only.
    let stored = entry_traceparents(&app);
    let carried = stored.iter().filter(|t| !t.is_empty()).count();
    assert_eq!(carried, requests.len(), "{stored:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_that_is_down_neither_fails_nor_slows_requests_and_is_counted() {
    let worker = RelayWorker::start().await;
    let app = traced_app(&worker, closed_endpoint().await, 1.0).await;
    for i in 0..20 {
        let started = Instant::now();
        let response = post_event(&app, &format!("evt_down_{i}"), &[]).await;
        assert_eq!(response.status(), 200);
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "{:?}",
            started.elapsed()
        );
    }
    an_export_failure_is_counted(&app).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_that_refuses_a_batch_is_counted_as_a_failure() {
    let worker = RelayWorker::start().await;
    let app = traced_app(&worker, refusing_endpoint().await, 1.0).await;
    assert_eq!(post_event(&app, "evt_refused", &[]).await.status(), 200);
    an_export_failure_is_counted(&app).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_that_never_answers_is_counted_once_the_export_bound_passes() {
    let worker = RelayWorker::start().await;
    let app = traced_app(&worker, silent_endpoint().await, 1.0).await;
    let started = Instant::now();
    assert_eq!(post_event(&app, "evt_hung", &[]).await.status(), 200);
    assert!(started.elapsed() < Duration::from_secs(1));
    // The export gives up after its 5 s bound; WAIT (10 s) leaves room for the batch interval.
    an_export_failure_is_counted(&app).await;
    assert!(
        started.elapsed() >= Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
}

/// Awaits a failed export in `hookonce_telemetry_export_failures_total`.
async fn an_export_failure_is_counted(app: &TestApp) {
    let failures = "hookonce_telemetry_export_failures_total";
    let deadline = Instant::now() + WAIT;
    while app.metric(failures, &[]).await < 1.0 {
        assert!(Instant::now() < deadline, "no export failure counted");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
