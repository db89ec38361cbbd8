//! Answers made before the body is read (413 for a declared length over the limit, 404, a proxy's
//! 400) reach a client that writes its whole body first, as providers' senders and most HTTP
//! clients do: the daemon keeps reading and discarding the body for a bounded time and amount
//! (lingering close) instead of closing on unread bytes, which the kernel turns into a reset.

use std::time::Duration;

use crate::support::http::{read_head, send_slowly, Framing};
use crate::support::metrics::{EVENTS, PROXY_REQUESTS};
use crate::support::settings::{ByteSize, ProxySettings};
use crate::support::upstream::Upstream;
use crate::support::{Backend, TestApp};

/// A small limit, so that "several times the limit" stays quick to send.
const LIMIT: usize = 64 * 1024;
/// Six times the limit (the daemon drains up to eight), in 8 KiB writes a few milliseconds apart:
/// the answer is long written before the client is done.
const TOTAL: usize = 6 * LIMIT;
const CHUNK: usize = 8 * 1024;
const PAUSE: Duration = Duration::from_millis(4);

async fn app() -> (TestApp, Upstream) {
    let upstream = Upstream::start().await;
    let proxy = ProxySettings {
        upstream: upstream.url(),
        routes: vec!["/v1/orders".to_owned()],
        require_key: true,
        ..ProxySettings::default()
    };
    let t = TestApp::builder(Backend::Memory)
        .server(|s| s.body_limit = ByteSize(LIMIT as u64))
        .proxy("orders", proxy)
        .start()
        .await;
    (t, upstream)
}

/// Sends the whole body slowly and returns the answer's head; panics on a broken pipe.
async fn answer_to(
    addr: std::net::SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
    framing: Framing,
) -> (String, tokio::net::TcpStream) {
    let mut stream = send_slowly(addr, path, headers, framing, TOTAL, CHUNK, PAUSE)
        .await
        .unwrap_or_else(|e| panic!("the whole body of {path} is written ({framing:?}): {e}"));
    let head = read_head(&mut stream)
        .await
        .unwrap_or_else(|e| panic!("the answer to {path} is read ({framing:?}): {e}"));
    (head, stream)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_answers_made_before_the_body_reach_the_client() {
    let (t, _upstream) = app().await;
    for framing in [Framing::Length, Framing::Chunked] {
        let (head, mut stream) = answer_to(t.addr, "/webhooks/stripe", &[], framing).await;
        assert!(head.starts_with("HTTP/1.1 413"), "{framing:?}: {head}");
        // The body was drained whole: the connection carries the next request.
        use tokio::io::AsyncWriteExt;
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: test\r\n\r\n")
            .await
            .unwrap();
        let next = read_head(&mut stream).await.unwrap();
        assert!(next.starts_with("HTTP/1.1 200"), "{framing:?}: {next}");

        let (head, _) = answer_to(t.addr, "/webhooks/nosuchsource", &[], framing).await;
        assert!(head.starts_with("HTTP/1.1 404"), "{framing:?}: {head}");
    }
    let too_large = [("source", "stripe"), ("outcome", "too_large")];
    assert_eq!(t.metric(EVENTS, &too_large).await, 2.0);
    assert!(t.entries("stripe").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_answers_made_before_the_body_reach_the_client() {
    let (t, upstream) = app().await;
    let addr = t.proxy_addrs["orders"];
    let keyed = [("Idempotency-Key", "k1"), ("Authorization", "Bearer a")];
    for framing in [Framing::Length, Framing::Chunked] {
        let (head, _) = answer_to(addr, "/v1/orders", &keyed, framing).await;
        assert!(head.starts_with("HTTP/1.1 413"), "{framing:?}: {head}");
        let (head, _) = answer_to(addr, "/v1/orders", &[], framing).await;
        assert!(head.starts_with("HTTP/1.1 400"), "{framing:?}: {head}");
        let (head, _) = answer_to(addr, "/v1/orders/", &keyed, framing).await;
        assert!(head.starts_with("HTTP/1.1 400"), "{framing:?}: {head}");
    }
    let t = &t;
    let count = |outcome| async move {
        t.metric(PROXY_REQUESTS, &[("proxy", "orders"), ("outcome", outcome)])
            .await
    };
    assert_eq!(count("too_large").await, 2.0);
    assert_eq!(count("missing_key").await, 2.0);
    assert_eq!(count("non_canonical_path").await, 2.0);
    assert!(upstream.seen().is_empty(), "nothing reached the upstream");
    assert_eq!(t.app.memory_records(), Some(0), "nothing was stored");
}
