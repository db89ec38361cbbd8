//! HTTP-level limits: admission control and the header-read timeout.

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::http::{finish_slow_request, start_slow_request};
use crate::support::metrics::{EVENTS, IN_FLIGHT};
use crate::support::settings::ms;
use crate::support::{eventually, with_id, Backend, TestApp};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn beyond_max_in_flight_new_requests_get_503_with_retry_after() {
    let t = TestApp::builder(Backend::Memory)
        .server(|s| s.max_in_flight = 1)
        .start()
        .await;
    let body = br#"{"slow":true}"#;
    let headers = t.sign("github", body, &with_id("slow-1"));
    let slow = start_slow_request(t.addr, "/webhooks/github", &headers, body).await;
    eventually(5, "the slow request to be in flight", || async {
        t.metric(IN_FLIGHT, &[]).await == 1.0
    })
    .await;

    let rejected = t.deliver("github", b"{}", &with_id("fast-1")).await;
    assert_eq!(rejected.status(), 503);
    assert_eq!(rejected.headers()["retry-after"], "1");

    let response = finish_slow_request(slow, body).await;
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert_eq!(
        t.deliver("github", b"{}", &with_id("fast-1"))
            .await
            .status(),
        200
    );
    assert_eq!(t.entries("github").len(), 2);
    assert_eq!(
        t.metric(EVENTS, &[("source", "github"), ("outcome", "unavailable")])
            .await,
        1.0
    );
}

#[tokio::test]
async fn a_client_that_trickles_its_headers_is_disconnected() {
    let t = TestApp::builder(Backend::Memory)
        .server(|s| s.header_read_timeout = ms(300))
        .start()
        .await;
    let mut stream = tokio::net::TcpStream::connect(t.addr).await.unwrap();
    stream
        .write_all(b"POST /webhooks/github HTTP/1.1\r\nHost: test\r\n")
        .await
        .unwrap();
    let started = Instant::now();
    let mut buffer = [0u8; 1024];
    let read = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buffer))
        .await
        .expect("connection closed within 5s");
    // Closed (0 bytes or a reset), or answered with an error status; never a hang.
    if let Ok(n) = read {
        let text = String::from_utf8_lossy(&buffer[..n]);
        assert!(n == 0 || text.starts_with("HTTP/1.1 408"), "{text}");
    }
    assert!(started.elapsed() >= Duration::from_millis(250));
}

#[tokio::test]
async fn wrong_method_and_unknown_paths_are_not_webhooks() {
    let t = TestApp::start(Backend::Memory).await;
    let get = t
        .client
        .get(t.url("/webhooks/github"))
        .send()
        .await
        .unwrap();
    assert_eq!(get.status(), 405);
    let other = t.client.post(t.url("/elsewhere")).send().await.unwrap();
    assert_eq!(other.status(), 404);
}
