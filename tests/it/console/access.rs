//! Who may reach the console, through the binary and a daemon: the embedded default listens on
//! loopback; `check-config` refuses a public console without credentials, naming the key, and
//! never prints a token; an identity header is believed from the trusted proxy only; the memory
//! store's console counts this process's events.

use std::net::SocketAddr;

use super::*;
use crate::support::binary::{hookonce, output_text, write};

#[test]
fn the_default_listens_on_loopback_and_a_public_console_needs_credentials() {
    let output = hookonce(&["check-config"], &[]);
    let shown = output_text(&output);
    assert!(output.status.success(), "{shown}");
    assert!(
        shown.contains("[console]\nlisten = \"127.0.0.1:9091\""),
        "{shown}"
    );

    let dir = tempfile::tempdir().unwrap();
    let base = "[store]\nbackend = \"memory\"\n[sink]\nkind = \"stdout\"\n\
                [sources.demo]\nprovider = \"github\"\nsecrets = [\"s\"]\n";
    let public = write(
        dir.path(),
        "public.toml",
        &format!("{base}[console]\nlisten = \"0.0.0.0:9091\"\n"),
    );
    let output = hookonce(&["check-config", "--config", public.to_str().unwrap()], &[]);
    let shown = output_text(&output);
    assert!(!output.status.success(), "{shown}");
    assert!(
        shown.contains("invalid configuration: console.listen: 0.0.0.0:9091 is not a loopback"),
        "{shown}"
    );
    let with_token = write(
        dir.path(),
        "token.toml",
        &format!(
            "{base}[console]\nlisten = \"0.0.0.0:9091\"\n\
             operator_tokens = [\"env:HOOKONCE_TEST_CONSOLE\", \"literal-console-token\"]\n"
        ),
    );
    let output = hookonce(
        &["check-config", "--config", with_token.to_str().unwrap()],
        &[("HOOKONCE_TEST_CONSOLE", "console-token-from-env")],
    );
    let shown = output_text(&output);
    assert!(output.status.success(), "{shown}");
    assert!(!shown.contains("literal-console-token"), "{shown}");
    assert!(!shown.contains("console-token-from-env"), "{shown}");
}

async fn status(app: &TestApp, path: &str, user: Option<&str>) -> u16 {
    let mut request = client().get(url(app, path));
    if let Some(user) = user {
        request = request.header("x-user", user);
    }
    request.send().await.unwrap().status().as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_identity_header_is_believed_from_the_trusted_proxy_only() {
    let trusted = TestApp::builder(Backend::Redis)
        .console(|c| {
            c.identity_header = Some("X-User".to_owned());
            // A range, as a proxy moving between pod addresses is named.
            c.trusted_proxies = vec!["127.0.0.0/8".parse().unwrap()];
            c.operators = vec!["alice".to_owned()];
        })
        .start()
        .await;
    assert_eq!(status(&trusted, "/api/v1/overview", Some("bob")).await, 200);
    assert_eq!(status(&trusted, "/api/v1/overview", None).await, 401);
    assert_eq!(status(&trusted, "/", None).await, 303);
    let page = client()
        .get(url(&trusted, "/"))
        .header("x-user", "alice")
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.headers().contains_key("set-cookie"));
    assert!(page.text().await.unwrap().contains("alice (operator)"));
    // A viewer named by the proxy cannot write; an operator's write from a browser needs a token.
    let write = |user: &'static str, origin: bool| {
        let mut request = client()
            .post(url(&trusted, "/api/v1/dead-letters/none/1-0/replay"))
            .header("x-user", user);
        if origin {
            request = request.header("origin", "http://elsewhere.example");
        }
        async move { request.send().await.unwrap().status().as_u16() }
    };
    assert_eq!(write("bob", false).await, 403);
    assert_eq!(write("alice", true).await, 403);
    // Without an Origin, the operator's write is tried (and fails on the unknown route).
    assert_eq!(write("alice", false).await, 400);

    // The same header from a peer that is not the proxy is nobody's.
    let untrusted = TestApp::builder(Backend::Redis)
        .console(|c| {
            c.identity_header = Some("X-User".to_owned());
            c.trusted_proxies = vec!["10.9.9.9".parse().unwrap()];
        })
        .start()
        .await;
    assert_eq!(
        status(&untrusted, "/api/v1/overview", Some("alice")).await,
        401
    );
    assert_eq!(status(&untrusted, "/", Some("alice")).await, 303);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_the_memory_store_the_console_counts_this_process() {
    let app = TestApp::builder(Backend::Memory)
        .console(|_| {})
        .start()
        .await;
    let body = crate::relay::stripe_event("evt_memory", "invoice.paid");
    for _ in 0..2 {
        let sent = app.deliver("stripe", &body, &crate::support::now()).await;
        assert_eq!(sent.status(), 200);
    }
    // An open loopback console: no credentials asked.
    let addr: SocketAddr = app.console_addr.unwrap();
    assert!(addr.ip().is_loopback());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    loop {
        let text = client()
            .get(url(&app, "/api/v1/overview"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let overview: serde_json::Value = serde_json::from_str(&text).unwrap();
        let stripe = overview["sources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["source"] == "stripe")
            .cloned()
            .unwrap();
        if stripe["last_hour"]["forwarded"] == 1 && stripe["last_hour"]["duplicates"] == 1 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{overview}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let events = client()
        .get(url(&app, "/api/v1/events?source=stripe"))
        .send()
        .await
        .unwrap();
    assert_eq!(events.status(), 409, "no stream on the memory store");
}
