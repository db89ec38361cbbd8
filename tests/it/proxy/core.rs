//! The Idempotency-Key proxy's core path on both stores, against a real upstream over loopback:
//! a keyed POST executes once and its retry is replayed byte for byte; other requests pass
//! through; bad keys and reused keys get their problem answers and are counted.

use hookonce::config::ProxySettings;

use super::ORDERS;
use crate::support::upstream::{Reply, Upstream};
use crate::support::{Backend, TestApp};

/// A proxy named `orders` in front of `upstream` (a base URL), keyed on `/v1/orders`; returns the
/// app and the proxy's base URL.
pub(crate) async fn proxied(backend: Backend, upstream: &str) -> (TestApp, String) {
    let settings = ProxySettings {
        listen: ([127, 0, 0, 1], 0).into(),
        upstream: upstream.to_owned(),
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
    let upstream = Upstream::start().await;
    let (app, base) = proxied(backend, &upstream.url()).await;
    let url = format!("{base}/v1/orders");
    let first = post(&app, &url, Some("k1"), "{}").await;
    assert_eq!(first.status(), 201);
    assert!(first.headers().get("idempotency-replayed").is_none());
    let first_body = first.bytes().await.unwrap();
    assert_eq!(
        &first_body[..],
        br#"{"execution":1,"path":"/v1/orders","key":"k1"}"#
    );
    let executed = upstream.last(ORDERS);
    assert!(executed.header("x-forwarded-for").is_some(), "{executed:?}");
    assert_eq!(&executed.body[..], b"{}");

    // The quoted spelling names the same key.
    let replay = post(&app, &url, Some("\"k1\""), "{}").await;
    assert_eq!(replay.status(), 201);
    assert_eq!(replay.headers()["idempotency-replayed"], "true");
    assert_eq!(replay.bytes().await.unwrap(), first_body);
    assert_eq!(upstream.seen().len(), 1);

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
    assert_eq!(upstream.seen().len(), 4);

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

/// A keyed POST with extra headers.
async fn post_with(
    app: &TestApp,
    url: &str,
    key: &str,
    headers: &[(&str, &str)],
) -> reqwest::Response {
    let mut request = app
        .client
        .post(url)
        .header("Idempotency-Key", key)
        .body("{}");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.send().await.unwrap()
}

#[tokio::test]
async fn retry_statuses_and_failures_release_the_claim() {
    let upstream = Upstream::start().await;
    let (app, base) = proxied(Backend::Redis, &upstream.url()).await;
    let url = format!("{base}/v1/orders");
    upstream.answer_in_turn(ORDERS, vec![Reply::status(503), Reply::status(409)]);
    let busy = post_with(&app, &url, "k", &[]).await;
    assert_eq!(busy.status(), 503);
    assert!(busy.headers().get("idempotency-replayed").is_none());
    // Released: the retry executes again, and a stored 4xx is replayed.
    let rejected = post_with(&app, &url, "k", &[]).await;
    assert_eq!(rejected.status(), 409);
    let rejected_body = rejected.bytes().await.unwrap();
    assert!(
        rejected_body.starts_with(br#"{"execution":2,"#),
        "{rejected_body:?}"
    );
    let replayed = post_with(&app, &url, "k", &[]).await;
    assert_eq!(replayed.status(), 409);
    assert_eq!(replayed.headers()["idempotency-replayed"], "true");
    assert_eq!(upstream.seen().len(), 2);
    let labels = [("proxy", "orders"), ("outcome", "released")];
    assert_eq!(
        app.metric("hookonce_proxy_requests_total", &labels).await,
        1.0
    );
    app.stop().await;
}

#[tokio::test]
async fn an_unreachable_upstream_is_502_and_released() {
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = closed.local_addr().unwrap();
    drop(closed);
    let (app, base) = proxied(Backend::Memory, &format!("http://{addr}")).await;
    let url = format!("{base}/v1/orders");
    for _ in 0..2 {
        let response = post_with(&app, &url, "k", &[]).await;
        assert_eq!(response.status(), 502);
        assert_eq!(
            response.headers()["content-type"],
            "application/problem+json"
        );
    }
    let labels = [("proxy", "orders"), ("outcome", "released")];
    assert_eq!(
        app.metric("hookonce_proxy_requests_total", &labels).await,
        2.0
    );
    app.stop().await;
}

#[tokio::test]
async fn an_oversized_response_is_passed_through_and_replayed_without_its_body() {
    let upstream = Upstream::start().await;
    let (app, base) = proxied(Backend::Redis, &upstream.url()).await;
    let url = format!("{base}/v1/orders");
    upstream.answer(ORDERS, Reply::default().body_size((1 << 20) + 10));
    let first = post_with(&app, &url, "k", &[]).await;
    assert_eq!(first.status(), 201);
    assert_eq!(first.bytes().await.unwrap().len(), (1 << 20) + 10);
    let replay = post_with(&app, &url, "k", &[]).await;
    assert_eq!(replay.status(), 201);
    assert_eq!(replay.headers()["idempotency-replay-truncated"], "true");
    assert_eq!(replay.headers()["content-length"], "0");
    assert!(replay.bytes().await.unwrap().is_empty());
    assert_eq!(upstream.seen().len(), 1);
    app.stop().await;
}

#[tokio::test]
async fn with_the_store_down_keyed_requests_fail_closed_and_others_pass() {
    let upstream = Upstream::start().await;
    let (mut app, base) = proxied(Backend::Redis, &upstream.url()).await;
    app.redis.as_mut().unwrap().kill();
    let url = format!("{base}/v1/orders");
    let refused = post_with(&app, &url, "k", &[]).await;
    assert_eq!(refused.status(), 503);
    assert!(refused.headers().contains_key("retry-after"));
    assert_eq!(upstream.seen().len(), 0);
    assert_eq!(app.client.get(&url).send().await.unwrap().status(), 201);
    assert_eq!(post(&app, &url, None, "{}").await.status(), 201);
    app.redis.as_mut().unwrap().restart();
    crate::support::eventually(10, "the store to recover", || {
        let response = post_with(&app, &url, "k2", &[]);
        async move { response.await.status() == 201 }
    })
    .await;
    app.stop().await;
}

async fn a_duplicate_in_flight_is_409_and_a_changed_payload_422(backend: Backend) {
    let upstream = Upstream::start().await;
    let (app, base) = proxied(backend, &upstream.url()).await;
    let url = format!("{base}/v1/orders");
    let gate = upstream.hold();
    let first = tokio::spawn({
        let request = app.client.post(&url).header("Idempotency-Key", "k");
        async move { request.body("{}").send().await.unwrap() }
    });
    let held = [("proxy", "orders")];
    crate::support::eventually(10, "the first request to hold its claim", || {
        let app = &app;
        async move { app.metric("hookonce_proxy_claims_held", &held).await == 1.0 }
    })
    .await;
    let duplicate = post_with(&app, &url, "k", &[]).await;
    assert_eq!(duplicate.status(), 409);
    assert!(duplicate.headers().contains_key("retry-after"));
    let changed = post(&app, &url, Some("k"), "{\"changed\":1}").await;
    assert_eq!(changed.status(), 422);
    gate.add_permits(1);
    assert_eq!(first.await.unwrap().status(), 201);
    let replay = post_with(&app, &url, "k", &[]).await;
    assert_eq!(replay.headers()["idempotency-replayed"], "true");
    assert_eq!(upstream.seen().len(), 1);
    assert_eq!(app.metric("hookonce_proxy_claims_held", &held).await, 0.0);
    app.stop().await;
}

#[tokio::test]
async fn a_duplicate_in_flight_is_409_and_a_changed_payload_422_redis() {
    a_duplicate_in_flight_is_409_and_a_changed_payload_422(Backend::Redis).await;
}

#[tokio::test]
async fn a_duplicate_in_flight_is_409_and_a_changed_payload_422_memory() {
    a_duplicate_in_flight_is_409_and_a_changed_payload_422(Backend::Memory).await;
}
