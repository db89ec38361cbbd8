//! What the Idempotency-Key proxy tells its upstream about the client: from a peer in
//! `server.trusted_proxies`, the `X-Forwarded-*` and `Forwarded` it sent go on with the peer
//! appended (an upstream behind an HTTPS front learns `https`); from any other peer they are
//! dropped and replaced by what hookonce saw. Keyed and passed-through requests alike. `Host` is
//! the upstream's own.

use super::{cidrs, client_from};
use crate::support::settings::ProxySettings;
use crate::support::upstream::Upstream;
use crate::support::{Backend, TestApp};

const PROXY: &str = "orders";
const ORDERS: &str = "/v1/orders";

/// What a front load balancer sends on.
const FRONT: [(&str, &str); 5] = [
    ("x-forwarded-for", "203.0.113.7"),
    ("x-forwarded-proto", "https"),
    ("x-forwarded-host", "shop.example.com"),
    (
        "forwarded",
        "for=203.0.113.7;proto=https;host=shop.example.com",
    ),
    ("x-real-ip", "203.0.113.7"),
];

async fn start(upstream: &Upstream) -> TestApp {
    TestApp::builder(Backend::Redis)
        .without_sources()
        .proxy(
            PROXY,
            ProxySettings {
                upstream: upstream.url(),
                ..ProxySettings::default()
            },
        )
        .server(|s| s.trusted_proxies = cidrs(&["127.0.0.2"]))
        .start()
        .await
}

/// Sends `method ORDERS` with the front's headers from `client` (keyed with `key` when given).
async fn send(t: &TestApp, client: &reqwest::Client, method: &str, key: Option<&str>) -> u16 {
    let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let mut request = client
        .request(method, t.proxy_url(PROXY, ORDERS))
        .body("{}");
    for (name, value) in FRONT {
        request = request.header(name, value);
    }
    if let Some(key) = key {
        request = request.header("idempotency-key", key);
    }
    request.send().await.unwrap().status().as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trusted_front_is_believed_and_the_peer_appended() {
    let upstream = Upstream::start().await;
    let t = start(&upstream).await;
    let front = client_from("127.0.0.2");
    for (method, key) in [("POST", Some("k-trusted")), ("GET", None)] {
        assert_eq!(send(&t, &front, method, key).await, 201, "{method}");
        let seen = upstream.last(ORDERS);
        assert_eq!(seen.method.as_str(), method);
        assert_eq!(
            seen.header("x-forwarded-for"),
            Some("203.0.113.7, 127.0.0.2")
        );
        assert_eq!(seen.header("x-forwarded-proto"), Some("https"));
        assert_eq!(seen.header("x-forwarded-host"), Some("shop.example.com"));
        assert_eq!(
            seen.header("forwarded"),
            Some("for=203.0.113.7;proto=https;host=shop.example.com, for=127.0.0.2")
        );
        assert_eq!(seen.header("x-real-ip"), Some("203.0.113.7"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_peer_is_told_as_hookonce_saw_it() {
    let upstream = Upstream::start().await;
    let t = start(&upstream).await;
    let host = t.proxy_addrs[PROXY].to_string();
    for (method, key) in [("POST", Some("k-untrusted")), ("GET", None)] {
        assert_eq!(send(&t, &t.client, method, key).await, 201, "{method}");
        let seen = upstream.last(ORDERS);
        assert_eq!(seen.method.as_str(), method);
        assert_eq!(seen.header("x-forwarded-for"), Some("127.0.0.1"));
        assert_eq!(seen.header("x-forwarded-proto"), Some("http"));
        assert_eq!(seen.header("x-forwarded-host"), Some(host.as_str()));
        // The upstream is addressed as itself: `Host` is its own authority, with its port.
        let upstream_host = upstream.url().replace("http://", "");
        assert_eq!(seen.header("host"), Some(upstream_host.as_str()));
        assert!(seen.header("forwarded").is_none(), "{seen:?}");
        assert!(seen.header("x-real-ip").is_none(), "{seen:?}");
    }
}
