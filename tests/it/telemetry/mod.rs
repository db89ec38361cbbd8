//! Telemetry against real parts: the daemon in this process with a real redis-server, the relay
//! delivering to a real HTTP worker, and a collector that decodes the OTLP protobuf it is sent
//! (`support::otlp`). Each test runs in its own process (nextest), so each installs its own
//! tracer. Spans arrive in batches: the export interval is 50 ms and every check awaits.

mod coalesced;
mod logs;
mod proxy;
mod sinks;
mod webhook;

use std::time::Duration;

use hookonce::config::TelemetrySettings;

use crate::relay::{relay, route, stripe_event};
use crate::support::otlp::{Collector, ReceivedSpan};
use crate::support::relay_worker::RelayWorker;
use crate::support::{eventually, TestApp};

/// `[telemetry]` pointing at `endpoint`, exporting every 50 ms.
fn telemetry_to(endpoint: String, sample_ratio: f64) -> impl FnOnce(&mut TelemetrySettings) {
    move |t| {
        t.otlp_endpoint = Some(endpoint);
        t.sample_ratio = sample_ratio;
        t.export_interval_ms = Some(50);
    }
}

/// The daemon with a relay route `orders` from stripe to `worker`, tracing to `endpoint`.
async fn traced_app(worker: &RelayWorker, endpoint: String, sample_ratio: f64) -> TestApp {
    TestApp::builder(crate::support::Backend::Redis)
        .relay(|r| {
            *r = relay(
                true,
                vec![("orders", route(&["stripe"], &worker.url("orders")))],
            )
        })
        .telemetry(telemetry_to(endpoint, sample_ratio))
        .start()
        .await
}

/// Awaits the span named `name` of trace `trace_id`, whose attribute keys are unique (OTLP: a
/// key appears once in a span's attributes).
async fn span_of(collector: &Collector, name: &str, trace_id: &str) -> ReceivedSpan {
    let find = || {
        collector
            .named(name)
            .into_iter()
            .find(|s| s.trace_id == trace_id)
    };
    eventually(10, &format!("the {name} span of {trace_id}"), || {
        let found = find().is_some();
        async move { found }
    })
    .await;
    let span = find().unwrap();
    let mut keys: Vec<&str> = span.attributes.iter().map(|(k, _)| k.as_str()).collect();
    keys.sort_unstable();
    let count = keys.len();
    keys.dedup();
    assert_eq!(keys.len(), count, "a key set twice: {span:?}");
    span
}

/// Signs and posts a stripe event with `extra` headers.
async fn post_event(app: &TestApp, id: &str, extra: &[(&str, &str)]) -> reqwest::Response {
    let body = stripe_event(id, "invoice.paid");
    let mut headers = app.sign("stripe", &body, &crate::support::now());
    headers.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    app.post("stripe", &body, &headers).await
}

/// The `traceparent` field of the stream entries of stripe, in order ("" when absent).
fn entry_traceparents(app: &TestApp) -> Vec<String> {
    let redis = app.redis.as_ref().unwrap();
    let reply: ::redis::streams::StreamRangeReply = ::redis::cmd("XRANGE")
        .arg(crate::relay::stream("stripe"))
        .arg("-")
        .arg("+")
        .query(&mut redis.connection())
        .unwrap();
    reply
        .ids
        .iter()
        .map(|e| e.get::<String>("traceparent").unwrap_or_default())
        .collect()
}

const WAIT: Duration = Duration::from_secs(10);
