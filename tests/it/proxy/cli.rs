//! `hookonce inspect` / `forget` on a proxy's idempotency keys, and `check-config` on its keys.

use super::core::proxied;
use crate::support::binary::{hookonce, output_text, write};
use crate::support::upstream::Upstream;
use crate::support::Backend;

#[tokio::test]
async fn inspect_and_forget_a_proxy_key_without_printing_the_principal() {
    let upstream = Upstream::start().await;
    let (app, base) = proxied(Backend::Redis, &upstream.url()).await;
    let url = format!("{base}/v1/orders");
    let send = || {
        app.client
            .post(&url)
            .header("Authorization", "Bearer alice-secret")
            .header("Idempotency-Key", "order-1")
            .body("{}")
            .send()
    };
    assert_eq!(send().await.unwrap().status(), 201);

    let dir = tempfile::tempdir().unwrap();
    let redis_url = app.redis.as_ref().unwrap().url();
    let config = format!(
        "[store]\nbackend = \"redis\"\nredis_url = \"{redis_url}\"\n\
         [proxies.orders]\nlisten = \"127.0.0.1:1\"\nupstream = \"http://{}\"\n",
        upstream.addr
    );
    let config = write(dir.path(), "hookonce.toml", &config);
    let cfg = config.to_str().unwrap();
    let lookup = |command: &str, principal: &str, key: &str| {
        let principal = format!("Authorization={principal}");
        let args = [
            command,
            "--config",
            cfg,
            "--proxy",
            "orders",
            "--path",
            "/v1/orders",
            "--principal",
            &principal,
            key,
        ];
        hookonce(&args, &[])
    };

    // The quoted spelling names the same key.
    let inspect = lookup("inspect", "Bearer alice-secret", "\"order-1\"");
    let shown = output_text(&inspect);
    assert!(inspect.status.success(), "{shown}");
    for line in [
        "hookonce:{p:orders}:k:",
        "state:       completed",
        "status:      201",
    ] {
        assert!(shown.contains(line), "{line}: {shown}");
    }
    assert!(
        shown.contains("stored_body: ") && shown.contains("expires_in:"),
        "{shown}"
    );
    assert!(!shown.contains("alice-secret"), "{shown}");

    let other = lookup("inspect", "Bearer bob", "order-1");
    assert_eq!(other.status.code(), Some(1), "{}", output_text(&other));
    let invalid = lookup("inspect", "Bearer alice-secret", "bad key");
    assert!(!invalid.status.success());

    let forget = lookup("forget", "Bearer alice-secret", "order-1");
    assert!(forget.status.success(), "{}", output_text(&forget));
    let again = send().await.unwrap();
    assert_eq!(again.status(), 201);
    assert!(again.headers().get("idempotency-replayed").is_none());
    assert_eq!(upstream.seen().len(), 2);

    // Today's form still works next to the proxy's.
    let event = hookonce(&["inspect", "--config", cfg, "orders", "x"], &[]);
    assert!(!event.status.success());
    app.stop().await;
}

#[test]
fn check_config_names_each_bad_proxy_key() {
    let dir = tempfile::tempdir().unwrap();
    let proxy =
        "[proxies.orders]\nlisten = \"127.0.0.1:18081\"\nupstream = \"http://orders:3000\"\n";
    let only = write(dir.path(), "only.toml", proxy);
    let ok = hookonce(&["check-config", "--config", only.to_str().unwrap()], &[]);
    assert!(
        ok.status.success(),
        "a proxies-only configuration: {}",
        output_text(&ok)
    );
    for (extra, key) in [
        ("lease = \"5s\"\n", "proxies.orders.lease"),
        ("ttl = \"100ms\"\n", "proxies.orders.ttl"),
        ("methods = [\"post\"]\n", "proxies.orders.methods"),
        ("routes = [\"v1\"]\n", "proxies.orders.routes"),
        ("retry_statuses = [1000]\n", "proxies.orders.retry_statuses"),
        ("colour = \"blue\"\n", "proxies.orders"),
        (
            "upstream_timeout = \"soon\"\n",
            "proxies.orders.upstream_timeout",
        ),
    ] {
        let file = write(dir.path(), "bad.toml", &format!("{proxy}{extra}"));
        let output = hookonce(&["check-config", "--config", file.to_str().unwrap()], &[]);
        let text = output_text(&output);
        assert!(!output.status.success(), "{extra}: {text}");
        assert!(text.contains(key), "{extra} should name {key}: {text}");
    }
    let empty = write(dir.path(), "empty.toml", "[server]\n");
    let output = hookonce(&["check-config", "--config", empty.to_str().unwrap()], &[]);
    assert!(output_text(&output).contains("neither sources nor proxies"));
}
