//! Requests that hyper or the router refuse before the webhook handler (a broken request line,
//! a head too large, a wrong method, a path without a route): answered with their status and
//! counted in `hookonce_http_requests_total`, under the path's source when it is a configured one
//! and `_unknown` otherwise; never as an event.

use crate::support::http::exchange_raw;
use crate::support::metrics::{EVENTS, HTTP_REQUESTS};
use crate::support::{eventually, Backend, TestApp};

/// Waits for `hookonce_http_requests_total{source, status}` to reach `count`: hyper's refusals
/// are counted once their connection has closed, which may be just after the client read them.
async fn await_requests(t: &TestApp, source: &str, status: &str, count: f64) {
    let what = format!("{count} requests counted with source={source} status={status}");
    eventually(5, &what, || async {
        t.metric(HTTP_REQUESTS, &[("source", source), ("status", status)])
            .await
            == count
    })
    .await;
}

/// No event of any outcome was counted, for a configured source or `_unknown`.
async fn assert_no_events(t: &TestApp) {
    let page = t.metrics().await;
    let events: Vec<&str> = page
        .lines()
        .filter(|line| line.starts_with(EVENTS) && !line.ends_with(" 0"))
        .collect();
    assert!(events.is_empty(), "{events:?}");
}

#[tokio::test]
async fn a_wrong_method_is_405_and_counted_under_its_source() {
    let t = TestApp::start(Backend::Memory).await;
    let get = t
        .client
        .get(t.url("/webhooks/stripe"))
        .send()
        .await
        .unwrap();
    assert_eq!(get.status(), 405);
    assert_eq!(get.headers()["allow"], "POST");
    let put = t.client.put(t.url("/webhooks/nope")).send().await.unwrap();
    assert_eq!(put.status(), 405);
    await_requests(&t, "stripe", "405", 1.0).await;
    await_requests(&t, "_unknown", "405", 1.0).await;
    assert_no_events(&t).await;
    assert_eq!(t.stored(), 0);
}

#[tokio::test]
async fn a_path_without_a_route_is_404_and_counted_as_unknown() {
    let t = TestApp::start(Backend::Memory).await;
    for path in ["/elsewhere", "/webhooks/stripe/extra", "/webhooks/"] {
        let response = t.client.post(t.url(path)).send().await.unwrap();
        assert_eq!(response.status(), 404, "{path}");
    }
    await_requests(&t, "_unknown", "404", 3.0).await;
    assert_no_events(&t).await;
    // Health and readiness are not webhook requests, and are not counted.
    assert_eq!(t.readiness().await, 200);
    await_requests(&t, "_unknown", "200", 0.0).await;
}

#[tokio::test]
async fn a_source_name_that_does_not_decode_is_an_unknown_source() {
    let t = TestApp::start(Backend::Memory).await;
    let response = t.client.post(t.url("/webhooks/%FF")).send().await.unwrap();
    assert_eq!(response.status(), 404);
    assert_eq!(t.events("_unknown", "unknown_source").await, 1.0);
}

#[tokio::test]
async fn a_malformed_request_line_is_400_and_counted_as_unknown() {
    let t = TestApp::start(Backend::Memory).await;
    let answer = exchange_raw(t.addr, b"GARBAGE\r\n\r\n").await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    let answer = exchange_raw(t.addr, b"POST /webhooks/stripe HTTP/9.9\r\n\r\n").await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    await_requests(&t, "_unknown", "400", 2.0).await;
    await_requests(&t, "stripe", "400", 0.0).await;
    assert_no_events(&t).await;
    assert_eq!(t.stored(), 0);
}

#[tokio::test]
async fn a_head_too_large_is_431_and_a_uri_too_long_414() {
    let t = TestApp::start(Backend::Memory).await;
    let mut head = String::from("POST /webhooks/stripe HTTP/1.1\r\nHost: test\r\n");
    for n in 0..200 {
        head.push_str(&format!("X-Pad-{n}: v\r\n"));
    }
    head.push_str("Content-Length: 0\r\n\r\n");
    let answer = exchange_raw(t.addr, head.as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer}");

    let long = format!(
        "POST /webhooks/{} HTTP/1.1\r\nHost: test\r\nContent-Length: 0\r\n\r\n",
        "a".repeat(70_000)
    );
    let answer = exchange_raw(t.addr, long.as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 414"), "{answer}");
    await_requests(&t, "_unknown", "431", 1.0).await;
    await_requests(&t, "_unknown", "414", 1.0).await;
    assert_no_events(&t).await;
    assert_eq!(t.stored(), 0);
}

#[tokio::test]
async fn a_broken_chunked_body_is_malformed_not_aborted() {
    let t = TestApp::start(Backend::Memory).await;
    let request = b"POST /webhooks/stripe HTTP/1.1\r\nHost: test\r\n\
        Transfer-Encoding: chunked\r\n\r\nZZ\r\n{}\r\n0\r\n\r\n";
    let answer = exchange_raw(t.addr, request).await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains(r#"{"error":"malformed"}"#), "{answer}");
    let stripe = |outcome| [("source", "stripe"), ("outcome", outcome)];
    assert_eq!(t.metric(EVENTS, &stripe("malformed")).await, 1.0);
    assert_eq!(t.metric(EVENTS, &stripe("aborted")).await, 0.0);
    assert_eq!(t.stored(), 0);
}
