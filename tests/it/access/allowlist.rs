//! `sources.NAME.allowed_ips`: an allowed client is served; any other gets 403 `forbidden` from
//! its head alone (a 1 MiB body declared and never sent is answered at once), with nothing
//! written and the outcome counted. The client is the socket's peer unless that peer is in
//! `server.trusted_proxies`: spoofed `X-Forwarded-For` / `Forwarded` from an untrusted peer
//! change nothing, and through a trusted one the rightmost untrusted hop decides.

use std::net::SocketAddr;

use super::{cidrs, client_from, deliver_from, head_only_from};
use crate::support::metrics::{EVENTS, HTTP_REQUESTS};
use crate::support::settings::{secs, source, STRIPE_SECRET};
use crate::support::{Backend, TestApp};

async fn start(allowed: &[&str], trusted: &[&str]) -> TestApp {
    let stripe = source("stripe", STRIPE_SECRET);
    TestApp::builder(Backend::Redis)
        .source(
            "stripe",
            crate::support::settings::SourceSettings {
                allowed_ips: cidrs(allowed),
                ..stripe
            },
        )
        // Long enough that only an answer made before the body can arrive within the test.
        .server(|s| {
            s.body_read_timeout = secs(30);
            s.trusted_proxies = cidrs(trusted);
        })
        .start()
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allowed_client_is_served_and_another_refused_before_its_body() {
    let t = start(&["127.0.0.2"], &[]).await;
    let before = t.stored();
    // A 1 MiB body declared (the whole of server.body_limit) and never sent: the answer comes
    // from the head alone, long before server.body_read_timeout.
    let head = head_only_from(
        "127.0.0.1".parse().unwrap(),
        t.addr,
        "/webhooks/stripe",
        &[],
        1 << 20,
    )
    .await;
    assert!(head.starts_with("HTTP/1.1 403"), "{head}");
    let refused = deliver_from(&t, &t.client, "stripe", "evt_refused", &[]).await;
    assert_eq!(refused.status(), 403);
    assert_eq!(refused.text().await.unwrap(), r#"{"error":"forbidden"}"#);
    assert_eq!(t.stored(), before, "a refused request writes nothing");

    let allowed = deliver_from(&t, &client_from("127.0.0.2"), "stripe", "evt_ok", &[]).await;
    assert_eq!(allowed.status(), 200);
    let ids: Vec<String> = t.entries("stripe").into_iter().map(|e| e.0).collect();
    assert_eq!(ids, ["evt_ok"]);
    let forbidden = [("source", "stripe"), ("outcome", "forbidden")];
    assert_eq!(t.metric(EVENTS, &forbidden).await, 2.0);
    let status = [("source", "stripe"), ("status", "403")];
    assert_eq!(t.metric(HTTP_REQUESTS, &status).await, 2.0);
    // Sources without an allowlist take any client.
    let (body, headers) = super::signed(&t, "github", "d-1");
    assert_eq!(t.post("github", &body, &headers).await.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spoofed_forwarding_headers_from_an_untrusted_peer_grant_nothing() {
    // The peer (127.0.0.1) is not a trusted proxy: its headers are not read.
    let t = start(&["203.0.113.0/24"], &["10.0.0.0/8"]).await;
    for spoof in [
        [("x-forwarded-for", "203.0.113.5"), ("x-spoof", "1")],
        [("forwarded", "for=203.0.113.5"), ("x-spoof", "1")],
        [
            ("x-forwarded-for", "10.0.0.1, 203.0.113.5"),
            ("forwarded", "for=203.0.113.5"),
        ],
    ] {
        let answer = deliver_from(&t, &t.client, "stripe", "evt_spoof", &spoof).await;
        assert_eq!(answer.status(), 403, "{spoof:?}");
    }
    assert!(t.entries("stripe").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_a_trusted_proxy_the_rightmost_untrusted_hop_decides() {
    // The proxies' own network is allowed too (internal callers): an unreadable hop must not
    // pass as the trusted hop that forwarded it.
    let allowed = ["203.0.113.0/24", "2001:db8:1::/48", "10.0.0.0/8"];
    let t = start(&allowed, &["127.0.0.1", "10.0.0.0/8"]).await;
    let cases: &[(&[(&str, &str)], u16)] = &[
        (&[("x-forwarded-for", "203.0.113.5")], 200),
        (&[("x-forwarded-for", "203.0.113.5, 10.1.2.3")], 200),
        (&[("x-forwarded-for", "198.51.100.7, 203.0.113.5")], 200),
        (&[("x-forwarded-for", "203.0.113.5, 198.51.100.7")], 403),
        (
            &[
                ("x-forwarded-for", "203.0.113.5"),
                ("x-forwarded-for", "198.51.100.7"),
            ],
            403,
        ),
        (
            &[("forwarded", "for=\"[2001:db8:1::9]:4711\";proto=https")],
            200,
        ),
        (&[("x-forwarded-for", "2001:db8:1:ffff::1")], 200),
        (&[("x-forwarded-for", "2001:db8:2::1")], 403),
        (&[("x-forwarded-for", "10.9.9.9, 10.1.2.3")], 200),
        (&[("forwarded", "for=unknown")], 403),
        (&[("forwarded", "for=unknown, for=10.1.2.3")], 403),
        (
            &[("x-forwarded-for", "203.0.113.5, garbage, 10.1.2.3")],
            403,
        ),
        // A client's own Forwarded, passed through by a proxy that sets X-Forwarded-For.
        (
            &[
                ("x-forwarded-for", "198.51.100.7"),
                ("forwarded", "for=203.0.113.5"),
            ],
            403,
        ),
        // No header: the trusted peer itself is the client, and it is not allowed.
        (&[], 403),
    ];
    for (i, (headers, status)) in cases.iter().enumerate() {
        let id = format!("evt_hop_{i}");
        let answer = deliver_from(&t, &t.client, "stripe", &id, headers).await;
        assert_eq!(answer.status(), *status, "{headers:?}");
    }
    let allowed = cases.iter().filter(|(_, s)| *s == 200).count();
    assert_eq!(t.entries("stripe").len(), allowed);
    let forbidden = [("source", "stripe"), ("outcome", "forbidden")];
    let refused = (cases.len() - allowed) as f64;
    assert_eq!(t.metric(EVENTS, &forbidden).await, refused);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ipv6_listener_judges_ipv6_peers() {
    let v6: SocketAddr = "[::1]:0".parse().unwrap();
    if std::net::TcpListener::bind(v6).is_err() {
        eprintln!("no IPv6 loopback here: the IPv6 listener is not tested");
        return;
    }
    let stripe = crate::support::settings::SourceSettings {
        allowed_ips: cidrs(&["::1"]),
        ..source("stripe", STRIPE_SECRET)
    };
    let github = crate::support::settings::SourceSettings {
        allowed_ips: cidrs(&["2001:db8::/32", "127.0.0.1"]),
        ..crate::support::settings::default_sources()["github"].clone()
    };
    let t = TestApp::builder(Backend::Redis)
        .source("stripe", stripe)
        .source("github", github)
        .server(|s| s.listen = v6)
        .start()
        .await;
    assert!(t.addr.is_ipv6());
    let allowed = deliver_from(&t, &t.client, "stripe", "evt_v6", &[]).await;
    assert_eq!(allowed.status(), 200);
    let refused = deliver_from(&t, &t.client, "github", "d-v6", &[]).await;
    assert_eq!(refused.status(), 403);
}
