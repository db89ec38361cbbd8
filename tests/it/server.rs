//! HTTP-level limits: admission control and the header-read timeout.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::metrics::IN_FLIGHT;
use crate::support::settings::{ms, secs, SinkKind, SinkSettings};
use crate::support::worker::Worker;
use crate::support::{eventually, with_id, Backend, TestApp};

/// Admission counts requests whose body is in: one held by a worker that does not answer fills
/// `max_in_flight = 1`. (Bodies still being read hold no permit; see `hostile_http`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn beyond_max_in_flight_new_requests_get_503_with_retry_after() {
    let worker = Worker::start().await;
    let t = Arc::new(
        TestApp::builder(Backend::Memory)
            .server(|s| s.max_in_flight = 1)
            .sink(|s| {
                *s = SinkSettings {
                    kind: SinkKind::Http,
                    url: Some(worker.url()),
                    timeout: Some(secs(10)),
                    ..SinkSettings::default()
                }
            })
            .start()
            .await,
    );
    worker.hold();
    let held = {
        let t = Arc::clone(&t);
        tokio::spawn(async move {
            t.deliver("github", b"{}", &with_id("held-1"))
                .await
                .status()
        })
    };
    eventually(5, "the held request to be in flight", || async {
        t.metric(IN_FLIGHT, &[]).await == 1.0 && worker.received().len() == 1
    })
    .await;

    let rejected = t.deliver("github", b"{}", &with_id("fast-1")).await;
    assert_eq!(rejected.status(), 503);
    assert_eq!(rejected.headers()["retry-after"], "1");

    worker.release();
    assert_eq!(held.await.unwrap(), 200);
    assert_eq!(
        t.deliver("github", b"{}", &with_id("fast-1"))
            .await
            .status(),
        200
    );
    assert_eq!(worker.received().len(), 2);
    assert_eq!(t.events("github", "unavailable").await, 1.0);
}

#[tokio::test]
async fn a_client_that_trickles_its_headers_is_disconnected() {
    let (_t, mut stream) = connected_with_a_300ms_header_timeout().await;
    let partial = b"POST /webhooks/github HTTP/1.1\r\nHost: test\r\n";
    assert_a_stalled_head_is_cut(&mut stream, partial).await;
}

/// Sends `partial`, a head without its end, and checks that the connection is cut at a header
/// timeout of 300 ms: closed (0 bytes or a reset) or answered 408, not sooner, and never a hang.
async fn assert_a_stalled_head_is_cut(stream: &mut tokio::net::TcpStream, partial: &[u8]) {
    stream.write_all(partial).await.unwrap();
    let started = Instant::now();
    let mut buffer = [0u8; 1024];
    let read = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buffer))
        .await
        .expect("connection closed within 5s");
    if let Ok(n) = read {
        let text = String::from_utf8_lossy(&buffer[..n]);
        assert!(n == 0 || text.starts_with("HTTP/1.1 408"), "{text}");
    }
    assert!(started.elapsed() >= Duration::from_millis(250));
}

/// The header-read timer is the connection's, kept from head to head: each head has its own
/// deadline. Heads that come within it are answered however long the connection lives, and a
/// head that stalls later on is still cut off.
#[tokio::test]
async fn a_keep_alive_connection_gives_every_head_its_own_deadline() {
    let (_t, mut stream) = connected_with_a_300ms_header_timeout().await;
    // Five heads, 200 ms apart: 1 s on one connection, each head within its own 300 ms.
    for round in 0..5 {
        if round > 0 {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        assert_healthz_answered(&mut stream, round).await;
    }
    let partial = b"GET /healthz HTTP/1.1\r\nHost: test\r\n";
    assert_a_stalled_head_is_cut(&mut stream, partial).await;
}

/// A keep-alive connection that sends nothing after an answer is waited on for its next head as
/// long as for a head it trickles, and closed then.
#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed_at_the_header_timeout() {
    let (_t, mut stream) = connected_with_a_300ms_header_timeout().await;
    assert_healthz_answered(&mut stream, 0).await;
    assert_a_stalled_head_is_cut(&mut stream, b"").await;
}

/// A daemon whose `server.header_read_timeout` is 300 ms, and a connection to it.
async fn connected_with_a_300ms_header_timeout() -> (TestApp, tokio::net::TcpStream) {
    let t = TestApp::builder(Backend::Memory)
        .server(|s| s.header_read_timeout = ms(300))
        .start()
        .await;
    let stream = tokio::net::TcpStream::connect(t.addr).await.unwrap();
    (t, stream)
}

/// Sends `GET /healthz` whole on `stream` and checks that it is answered 200 within 5 s.
async fn assert_healthz_answered(stream: &mut tokio::net::TcpStream, round: usize) {
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: test\r\n\r\n")
        .await
        .unwrap();
    let mut buffer = [0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buffer))
        .await
        .expect("answered within 5s")
        .unwrap();
    let text = String::from_utf8_lossy(&buffer[..n]);
    assert!(text.starts_with("HTTP/1.1 200"), "head {round}: {text:?}");
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
