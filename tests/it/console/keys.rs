//! Proxy keys in the console: a key looked up as the proxy derives it (the API with the
//! principal in `X-Hookonce-Scope-Authorization`, the page with a form), another principal's
//! lookup finding nothing, a viewer's forget refused, an operator's forget making the next
//! request execute again.

use serde_json::Value;

use super::*;
use crate::proxy::{order, settings, ALICE, ORDERS, PROXY};
use crate::support::upstream::Upstream;

async fn api(app: &TestApp, method: reqwest::Method, token: &str, principal: &str) -> (u16, Value) {
    let path = format!("/api/v1/keys?proxy={PROXY}&method=POST&path={ORDERS}&key=%22k-console%22");
    let response = client()
        .request(method, url(app, &path))
        .bearer_auth(token)
        .header("x-hookonce-scope-authorization", principal)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_key_is_looked_up_and_forgotten() {
    let upstream = Upstream::start().await;
    let app = TestApp::builder(Backend::Redis)
        .without_sources()
        .proxy(PROXY, settings(&upstream))
        .console(|c| {
            c.viewer_tokens = vec![Secret::literal(VIEWER).unwrap()];
            c.operator_tokens = vec![Secret::literal(OPERATOR).unwrap()];
        })
        .start()
        .await;
    assert_eq!(order(&app, "\"k-console\"", b"{}").await.status, 201);
    let (status, key) = api(&app, reqwest::Method::GET, VIEWER, ALICE).await;
    assert_eq!(status, 200, "{key}");
    assert_eq!(key["state"], "completed");
    assert_eq!(key["status"], 201);
    assert!(key["stored_body_bytes"].as_u64().is_some(), "{key}");
    assert!(
        !key.to_string().contains("alice"),
        "the principal shown: {key}"
    );
    let (status, _) = api(&app, reqwest::Method::GET, VIEWER, "Bearer mallory").await;
    assert_eq!(status, 404, "another principal's key");

    let (status, _) = api(&app, reqwest::Method::DELETE, VIEWER, ALICE).await;
    assert_eq!(status, 403);
    let (status, forgot) = api(&app, reqwest::Method::DELETE, OPERATOR, ALICE).await;
    assert_eq!(
        (status, forgot["forgotten"].as_u64()),
        (200, Some(1)),
        "{forgot}"
    );
    let (status, _) = api(&app, reqwest::Method::GET, VIEWER, ALICE).await;
    assert_eq!(status, 404);
    let before = upstream.hits(ORDERS);
    assert_eq!(order(&app, "\"k-console\"", b"{}").await.status, 201);
    assert_eq!(upstream.hits(ORDERS), before + 1, "executed again");

    // The page finds it with a form (a POST: the principal never travels in a URL).
    let login = client()
        .post(url(&app, "/login"))
        .form(&[("token", VIEWER)])
        .send()
        .await
        .unwrap();
    let cookie = login.headers()["set-cookie"].to_str().unwrap();
    let cookie = cookie.split(';').next().unwrap().to_owned();
    let page = client()
        .post(url(&app, "/keys"))
        .header("cookie", &cookie)
        .form(&[
            ("proxy", PROXY),
            ("method", "POST"),
            ("path", ORDERS),
            ("key", "\"k-console\""),
            ("principal", &format!("Authorization: {ALICE}")),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    let html = page.text().await.unwrap();
    assert!(
        html.contains("id=\"key-record-state\">completed<"),
        "{html}"
    );
}
