//! The real binary: a traced request's JSON log line names its trace and span, and spans reach
//! the collector from `hookonce serve` (the process's own tracer and exporter).

use super::*;
use crate::support::binary::write;
use crate::support::daemon::Daemon;

const TRACE: &str = "6bf92f3577b34da6a3ce929d0e0e4738";
const PARENT: &str = "20f067aa0ba902b9";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_traced_request_s_log_line_carries_its_trace_and_span_ids() {
    let collector = Collector::start().await;
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "[store]\nbackend = \"memory\"\n[sink]\nkind = \"file\"\npath = {:?}\n\
         [sources.gh]\nprovider = \"github\"\nsecrets = [\"s3cret\"]\n\
         [telemetry]\notlp_endpoint = {:?}\nexport_interval_ms = 50\nservice_name = \"edge-hookonce\"\n",
        dir.path().join("events.jsonl"),
        collector.endpoint()
    );
    let settings = hookonce::config::from_toml(&text).unwrap();
    let path = write(dir.path(), "hookonce.toml", &text);
    let daemon = Daemon::spawn(&path, dir.path(), &[("RUST_LOG", "info")]).await;
    let body = br#"{"zen":"traced"}"#;
    let provider = crate::support::app::provider("gh", &settings.sources["gh"]);
    let mut request = reqwest::Client::new()
        .post(daemon.url("/webhooks/gh"))
        .header("traceparent", format!("00-{TRACE}-{PARENT}-01"))
        .body(body.to_vec());
    for (name, value) in provider.sign(body, &crate::support::with_id("delivery-logs-1")) {
        request = request.header(name, value);
    }
    assert_eq!(request.send().await.unwrap().status(), 200);
    let span = span_of(&collector, "webhook", TRACE).await;
    assert_eq!(span.service, "edge-hookonce");
    let wanted = format!("\"trace_id\":\"{TRACE}\",\"span_id\":\"{}\"", span.span_id);
    eventually(10, "the request's log line with its trace", || {
        let found = daemon.logs().lines().any(|line| line.contains(&wanted));
        async move { found }
    })
    .await;
    // Lines outside a request (the start-up ones) carry no trace.
    let first = daemon.logs().lines().next().unwrap_or_default().to_owned();
    assert!(!first.contains("trace_id"), "{first}");
}
