//! Reading `/metrics`: every series a test asserts on is formatted here, from a name and labels.

use std::net::SocketAddr;

/// `hookonce_events_total{source,outcome}`: one count per outcome of each event.
pub const EVENTS: &str = "hookonce_events_total";
/// `hookonce_http_requests_total{source,status}`.
pub const HTTP_REQUESTS: &str = "hookonce_http_requests_total";
/// `hookonce_duplicate_hits_total{source}`.
pub const DUPLICATE_HITS: &str = "hookonce_duplicate_hits_total";
/// `hookonce_lease_reclaims_total{source}`.
pub const LEASE_RECLAIMS: &str = "hookonce_lease_reclaims_total";
/// `hookonce_forward_duration_seconds_count{sink}`: forwards attempted, answered or not.
pub const FORWARDS: &str = "hookonce_forward_duration_seconds_count";
/// `hookonce_requests_in_flight` (gauge).
pub const IN_FLIGHT: &str = "hookonce_requests_in_flight";
/// `hookonce_body_reads_in_flight` (gauge): bodies being received, before admission.
pub const BODY_READS: &str = "hookonce_body_reads_in_flight";
/// `hookonce_body_memory_bytes` (gauge): bytes of bodies held in memory.
pub const BODY_MEMORY: &str = "hookonce_body_memory_bytes";
/// `hookonce_ready` (gauge): 1 while `/readyz` answers 200.
pub const READY: &str = "hookonce_ready";
/// `hookonce_stream_length{stream}` (gauge).
pub const STREAM_LENGTH: &str = "hookonce_stream_length";

/// `hookonce_proxy_requests_total{proxy,outcome}`: one count per proxied request and outcome.
pub const PROXY_REQUESTS: &str = "hookonce_proxy_requests_total";
/// `hookonce_proxy_duration_seconds_count{proxy,outcome}`.
pub const PROXY_DURATIONS: &str = "hookonce_proxy_duration_seconds_count";
/// `hookonce_proxy_upstream_duration_seconds_count{proxy}`: exchanges with the upstream.
pub const PROXY_UPSTREAM_CALLS: &str = "hookonce_proxy_upstream_duration_seconds_count";
/// `hookonce_proxy_claims_held{proxy}` (gauge).
pub const PROXY_CLAIMS_HELD: &str = "hookonce_proxy_claims_held";
/// `hookonce_proxy_oldest_claim_seconds{proxy}` (gauge).
pub const PROXY_OLDEST_CLAIM: &str = "hookonce_proxy_oldest_claim_seconds";
/// `hookonce_proxy_lease_takeovers_total{proxy}`.
pub const PROXY_LEASE_TAKEOVERS: &str = "hookonce_proxy_lease_takeovers_total";
/// `hookonce_proxy_completion_failures_total{proxy, reason}`.
pub const PROXY_COMPLETION_FAILURES: &str = "hookonce_proxy_completion_failures_total";

/// The `/metrics` page served on `addr`.
pub async fn scrape(client: &reqwest::Client, addr: SocketAddr) -> String {
    client
        .get(format!("http://{addr}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// A series as the exposition format writes it: `name{a="1",b="2"}`, labels in the given order.
pub fn series(name: &str, labels: &[(&str, &str)]) -> String {
    if labels.is_empty() {
        return name.to_owned();
    }
    let labels: Vec<String> = labels
        .iter()
        .map(|(label, value)| format!("{label}=\"{value}\""))
        .collect();
    format!("{name}{{{}}}", labels.join(","))
}

/// The value of one series in a `/metrics` page, 0 when absent.
pub fn value(page: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    let series = series(name, labels);
    page.lines()
        .find_map(|line| {
            line.strip_prefix(series.as_str())
                .and_then(|rest| rest.strip_prefix(' '))
                .map(|v| v.trim().parse::<f64>().unwrap())
        })
        .unwrap_or(0.0)
}

#[test]
fn series_are_written_as_the_exposition_format_does() {
    assert_eq!(series(IN_FLIGHT, &[]), "hookonce_requests_in_flight");
    let events = series(EVENTS, &[("source", "stripe"), ("outcome", "forwarded")]);
    assert_eq!(
        events,
        r#"hookonce_events_total{source="stripe",outcome="forwarded"}"#
    );
    let page = format!("# TYPE {EVENTS} counter\n{events} 3\n{EVENTS}{{source=\"stripe\",outcome=\"forwarded_x\"}} 9\n");
    assert_eq!(
        value(
            &page,
            EVENTS,
            &[("source", "stripe"), ("outcome", "forwarded")]
        ),
        3.0
    );
    assert_eq!(
        value(
            &page,
            EVENTS,
            &[("source", "github"), ("outcome", "forwarded")]
        ),
        0.0
    );
}
