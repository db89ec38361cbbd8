//! `server.rejected_limit`: one address floods a source with bad signatures while another's
//! signed deliveries keep getting 200. The flooder gets 401 for its burst and then 429
//! `rate_limited` with `Retry-After`, answered from the head (a declared body never sent), so
//! its guesses stop costing an HMAC; an IPv6 flooder rotating addresses inside one /64 through a
//! trusted proxy is one client.

use std::time::Instant;

use futures_util::future::join_all;

use super::{client_from, deliver_from, head_only_from, rate, retry_after, signed};
use crate::support::metrics::EVENTS;
use crate::support::settings::secs;
use crate::support::{Backend, TestApp};

/// Every client's bucket of rejected requests: slow enough that no token comes back during a
/// test, so what a client may still do after the flood does not depend on the machine's speed.
const RATE: &str = "1/m";
const RATE_PER_SECOND: f64 = 1.0 / 60.0;
const BURST: u32 = 10;
/// The flooder's requests in flight at once.
const PARALLEL: usize = 8;

async fn start(trusted: &[&str]) -> TestApp {
    // The honest deliveries must all be 200 beside the flood: a store timeout far above a loaded
    // machine's slowest call (what is tested is the limit on rejected requests).
    TestApp::builder(Backend::Redis)
        .store(|s| s.timeout = secs(5))
        .server(|s| {
            s.rejected_limit = Some(rate(RATE));
            s.rejected_limit_burst = Some(BURST);
            s.trusted_proxies = super::cidrs(trusted);
            s.body_read_timeout = secs(30);
        })
        .start()
        .await
}

/// A delivery to `stripe` whose signature is wrong, with `extra` headers, from `client`: the
/// status and `Retry-After`.
async fn forged(t: &TestApp, client: &reqwest::Client, extra: &[(&str, &str)]) -> (u16, bool) {
    let (body, _) = signed(t, "stripe", "evt_forged");
    let mut request = client
        .post(t.url("/webhooks/stripe"))
        .header(
            "stripe-signature",
            format!("t={},v1=00", crate::support::now_unix()),
        )
        .body(body);
    for (name, value) in extra {
        request = request.header(*name, *value);
    }
    let answer = request.send().await.unwrap();
    let status = answer.status().as_u16();
    (status, answer.headers().contains_key("retry-after"))
}

/// Floods from `flooder` (`PARALLEL` at a time, `total` in all) while `deliveries` signed ones go
/// from `honest`; returns the flood's statuses and how long it took, after checking that every
/// signed delivery got 200.
async fn flood(
    t: &TestApp,
    flooder: (&reqwest::Client, Vec<Vec<(&str, String)>>),
    honest: (&reqwest::Client, Vec<(&str, String)>),
    deliveries: usize,
) -> (Vec<(u16, bool)>, f64) {
    let started = Instant::now();
    let (client, headers_per_request) = flooder;
    let lanes = headers_per_request.chunks(headers_per_request.len().div_ceil(PARALLEL));
    let flooding = join_all(lanes.map(|lane| async move {
        let mut seen = Vec::new();
        for headers in lane {
            let extra: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
            seen.push(forged(t, client, &extra).await);
        }
        seen
    }));
    let (honest_client, honest_headers) = honest;
    let honest_extra: Vec<(&str, &str)> = honest_headers
        .iter()
        .map(|(n, v)| (*n, v.as_str()))
        .collect();
    let delivering = async {
        let mut statuses = Vec::new();
        for i in 0..deliveries {
            let id = format!("evt_honest_{i}");
            let answer = deliver_from(t, honest_client, "stripe", &id, &honest_extra).await;
            statuses.push(answer.status().as_u16());
        }
        statuses
    };
    let (flooded, delivered) = tokio::join!(flooding, delivering);
    let elapsed = started.elapsed().as_secs_f64();
    assert!(
        delivered.iter().all(|s| *s == 200),
        "signed deliveries: {delivered:?}"
    );
    assert_eq!(
        t.entries("stripe").len(),
        deliveries,
        "each signed delivery, nothing else"
    );
    (flooded.into_iter().flatten().collect(), elapsed)
}

/// The flood's 401s were at most the burst, what refilled meanwhile, and what was in flight when
/// the bucket ran out; the rest were 429 with `Retry-After`.
fn assert_throttled(statuses: &[(u16, bool)], elapsed: f64) {
    let unauthorized = statuses.iter().filter(|(s, _)| *s == 401).count();
    let limited = statuses.iter().filter(|(s, _)| *s == 429).count();
    assert_eq!(unauthorized + limited, statuses.len(), "{statuses:?}");
    let allowance = f64::from(BURST) + RATE_PER_SECOND * elapsed + PARALLEL as f64;
    assert!(
        unauthorized >= BURST as usize,
        "the burst is answered as usual"
    );
    assert!(
        (unauthorized as f64) <= allowance,
        "{unauthorized} forged requests were verified in {elapsed:.1}s (allowance {allowance:.0})"
    );
    assert!(
        statuses.iter().all(|(s, retry)| *s != 429 || *retry),
        "429 carries Retry-After"
    );
    assert!(limited > 0, "none of {} throttled", statuses.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_bad_signatures_throttles_its_address_and_not_another() {
    let t = start(&[]).await;
    let a = client_from("127.0.0.2");
    let b = client_from("127.0.0.3");
    let (statuses, elapsed) = flood(&t, (&a, vec![Vec::new(); 300]), (&b, Vec::new()), 40).await;
    assert_throttled(&statuses, elapsed);
    // Throttled from its head alone: a declared body that never comes is not waited for.
    let head = head_only_from(
        "127.0.0.2".parse().unwrap(),
        t.addr,
        "/webhooks/stripe",
        &[],
        1000,
    )
    .await;
    assert!(head.starts_with("HTTP/1.1 429"), "{head}");
    assert!(
        retry_after(&head).is_some_and(|s| (1..=60).contains(&s)),
        "{head}"
    );
    // The honest address's own mistakes are its own: its bucket is full.
    let (status, _) = forged(&t, &b, &[]).await;
    assert_eq!(status, 401);
    // Every 429 counted, the one from the head alone included.
    let limited = statuses.iter().filter(|(s, _)| *s == 429).count() + 1;
    let outcome = [("source", "stripe"), ("outcome", "rate_limited")];
    assert_eq!(t.metric(EVENTS, &outcome).await, limited as f64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_a_trusted_proxy_a_flooding_64_is_one_client() {
    let t = start(&["127.0.0.1"]).await;
    // The flooder rotates its address within 2001:db8:a:b::/64 on every request.
    let rotating: Vec<Vec<(&str, String)>> = (0..300)
        .map(|i| vec![("x-forwarded-for", format!("2001:db8:a:b::{:x}", i + 1))])
        .collect();
    let honest = vec![("x-forwarded-for", "2001:db8:a:c::1".to_owned())];
    let (statuses, elapsed) = flood(&t, (&t.client, rotating), (&t.client, honest), 40).await;
    assert_throttled(&statuses, elapsed);
    // Another address of that /64, and the proxy's own requests, as themselves.
    let (status, _) = forged(
        &t,
        &t.client,
        &[("x-forwarded-for", "2001:db8:a:b:ffff::1")],
    )
    .await;
    assert_eq!(status, 429);
    let (status, _) = forged(&t, &t.client, &[]).await;
    assert_eq!(status, 401, "the proxy's own bucket is not the flooder's");
}
