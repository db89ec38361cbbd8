//! The Idempotency-Key proxy's core path on both stores, against a real upstream over loopback:
//! a keyed POST executes once and its retry is replayed byte for byte; other requests pass
//! through; bad keys and reused keys get their problem answers and are counted.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::Router;
use hookonce::config::ProxySettings;

use crate::support::{Backend, TestApp};

/// An upstream that numbers each request it executes and echoes what it saw.
struct Upstream {
    addr: SocketAddr,
    executed: Arc<AtomicUsize>,
}

async fn upstream() -> Upstream {
    let executed = Arc::new(AtomicUsize::new(0));
    let app = Router::new()
        .fallback(
            |State(n): State<Arc<AtomicUsize>>, headers: HeaderMap, body: Bytes| async move {
                let n = n.fetch_add(1, Ordering::SeqCst) + 1;
                let key = headers
                    .get("idempotency-key")
                    .map(|v| v.to_str().unwrap().to_owned());
                let forwarded = headers.contains_key("x-forwarded-for");
                let text = format!("run {n} key {key:?} fwd {forwarded} body {}", body.len());
                (StatusCode::CREATED, [("x-run", n.to_string())], text)
            },
        )
        .with_state(Arc::clone(&executed));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    Upstream { addr, executed }
}

async fn proxied(backend: Backend, upstream: &Upstream) -> (TestApp, String) {
    let settings = ProxySettings {
        listen: ([127, 0, 0, 1], 0).into(),
        upstream: format!("http://{}", upstream.addr),
        routes: vec!["/v1/orders".to_owned()],
        ..ProxySettings::default()
    };
    let app = TestApp::builder(backend)
        .proxy("orders", settings)
        .start()
        .await;
    let base = format!("http://{}", app.proxy_addrs["orders"]);
    (app, base)
}

async fn post(app: &TestApp, url: &str, key: Option<&str>, body: &str) -> reqwest::Response {
    let mut request = app.client.post(url).body(body.to_owned());
    if let Some(key) = key {
        request = request.header("Idempotency-Key", key);
    }
    request.send().await.unwrap()
}

async fn executes_once_and_replays(backend: Backend) {
    let upstream = upstream().await;
    let (app, base) = proxied(backend, &upstream).await;
    let url = format!("{base}/v1/orders");
    let first = post(&app, &url, Some("k1"), "{}").await;
    assert_eq!(first.status(), 201);
    assert!(first.headers().get("idempotency-replayed").is_none());
    let first_body = first.bytes().await.unwrap();
    assert_eq!(&first_body[..], br#"run 1 key Some("k1") fwd true body 2"#);

    // The quoted spelling names the same key.
    let replay = post(&app, &url, Some("\"k1\""), "{}").await;
    assert_eq!(replay.status(), 201);
    assert_eq!(replay.headers()["idempotency-replayed"], "true");
    assert_eq!(replay.headers()["x-run"], "1");
    assert_eq!(replay.bytes().await.unwrap(), first_body);
    assert_eq!(upstream.executed.load(Ordering::SeqCst), 1);

    let reused = post(&app, &url, Some("k1"), "{\"other\":1}").await;
    assert_eq!(reused.status(), 422);
    assert_eq!(reused.headers()["content-type"], "application/problem+json");
    let invalid = post(&app, &url, Some("bad key"), "{}").await;
    assert_eq!(invalid.status(), 400);

    // No key on a proxy that does not require one, another path, another method: untouched.
    for response in [
        post(&app, &url, None, "{}").await,
        post(&app, &format!("{base}/v1/other"), Some("k1"), "{}").await,
        app.client.get(&url).send().await.unwrap(),
    ] {
        assert_eq!(response.status(), 201);
        assert!(response.headers().get("idempotency-replayed").is_none());
    }
    assert_eq!(upstream.executed.load(Ordering::SeqCst), 4);

    let count = |outcome| {
        let app = &app;
        async move {
            let labels = [("proxy", "orders"), ("outcome", outcome)];
            app.metric("hookonce_proxy_requests_total", &labels).await
        }
    };
    assert_eq!(count("executed").await, 1.0);
    assert_eq!(count("replayed").await, 1.0);
    assert_eq!(count("key_reused").await, 1.0);
    assert_eq!(count("invalid_key").await, 1.0);
    assert_eq!(count("passed_through").await, 3.0);
    app.stop().await;
}

#[tokio::test]
async fn executes_once_and_replays_redis() {
    executes_once_and_replays(Backend::Redis).await;
}

#[tokio::test]
async fn executes_once_and_replays_memory() {
    executes_once_and_replays(Backend::Memory).await;
}
