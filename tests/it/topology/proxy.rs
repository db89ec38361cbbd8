//! The Idempotency-Key proxy on a Redis Cluster (proxies whose `{p:<proxy>}` tags land on every
//! master, keys of several principals each) and behind Sentinel: a key executes once, replays
//! byte for byte, answers 409 while in flight and 422 with another payload, and a claim whose
//! proxy died is taken over after its lease.

use std::time::Duration;

use super::{names_on_every_master, Topology};
use crate::proxy::{Answer, ALICE, ORDERS};
use crate::support::cluster::RedisCluster;
use crate::support::daemon::Daemon;
use crate::support::metrics::PROXY_LEASE_TAKEOVERS;
use crate::support::redis::free_port;
use crate::support::sentinel::SentinelGroup;
use crate::support::settings::ProxySettings;
use crate::support::upstream::{Reply, Upstream};
use crate::support::{eventually, Backend, TestApp};

/// `POST /v1/orders` to proxy `proxy` as `principal` with `Idempotency-Key: key`.
async fn post(t: &TestApp, proxy: &str, principal: &str, key: &str, body: &[u8]) -> Answer {
    let response = t
        .client
        .post(t.proxy_url(proxy, ORDERS))
        .header("idempotency-key", key)
        .header("authorization", principal)
        .body(body.to_vec())
        .send()
        .await
        .expect("the proxy answers");
    Answer {
        status: response.status().as_u16(),
        headers: response.headers().clone(),
        body: response.bytes().await.unwrap(),
    }
}

async fn proxy_app(topology: Topology<'_>, proxies: &[(&str, &Upstream)]) -> TestApp {
    let mut builder = TestApp::builder(Backend::Redis)
        .without_sources()
        .store(|store| topology.store(store));
    for (name, upstream) in proxies {
        let settings = ProxySettings {
            upstream: upstream.url(),
            ..ProxySettings::default()
        };
        builder = builder.proxy(name, settings);
    }
    builder.start().await
}

/// Execute once, replay byte for byte, another principal's key of the same name executes on
/// its own, 422 with another payload, 409 while the first is upstream.
async fn keys_execute_once(t: &TestApp, proxy: &str, upstream: &Upstream) {
    let first = post(t, proxy, ALICE, "k1", b"{}").await;
    assert_eq!(first.status, 201, "{proxy}: {first:?}");
    let replay = post(t, proxy, ALICE, "k1", b"{}").await;
    assert!(replay.replayed(), "{proxy}: {replay:?}");
    assert_eq!(replay.status, first.status);
    assert_eq!(replay.body, first.body, "{proxy}: byte for byte");
    assert_eq!(replay.stored_headers(), first.stored_headers());
    let bob = post(t, proxy, "Bearer bob", "k1", b"{}").await;
    assert!(bob.status == 201 && !bob.replayed(), "{proxy}: {bob:?}");
    assert_eq!(
        upstream.executions("k1", ORDERS),
        2,
        "{proxy}: once per principal"
    );
    post(t, proxy, ALICE, "k1", b"{\"other\":1}")
        .await
        .assert_problem(422, "Idempotency-Key is already used");

    let gate = upstream.hold();
    let held = {
        let (client, url) = (t.client.clone(), t.proxy_url(proxy, ORDERS));
        tokio::spawn(async move {
            let request = client
                .post(url)
                .header("idempotency-key", "k2")
                .header("authorization", ALICE)
                .body("{}");
            request.send().await.unwrap().status().as_u16()
        })
    };
    eventually(10, "the first request to be upstream", || async {
        upstream.executions("k2", ORDERS) == 1
    })
    .await;
    let in_flight = post(t, proxy, ALICE, "k2", b"{}").await;
    in_flight.assert_problem_status(409);
    assert!(in_flight.header("retry-after").is_some());
    gate.add_permits(1000);
    assert_eq!(held.await.unwrap(), 201);
    assert!(post(t, proxy, ALICE, "k2", b"{}").await.replayed());
    assert_eq!(upstream.executions("k2", ORDERS), 1, "{proxy}");
}

/// Long enough that the retry right after the kill still meets the live claim on a loaded machine.
const LEASE_SECS: u64 = 4;

/// A proxy (the real binary) SIGKILLed while its request is upstream leaves its claim; within
/// the lease `t` answers 409, after it `t` takes the claim over and executes again, once.
async fn a_dead_proxys_claim_is_taken_over(t: &TestApp, topology: Topology<'_>, proxy: &str) {
    let upstream = Upstream::start().await;
    upstream.answer_in_turn(
        ORDERS,
        vec![
            Reply::status(201).delay(Duration::from_secs(60)),
            Reply::status(201),
        ],
    );
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let config = format!(
        "{}[proxies.{proxy}]\nlisten = \"127.0.0.1:{port}\"\nupstream = \"{}\"\n\
         lease = \"{LEASE_SECS}s\"\nupstream_timeout = \"{LEASE_SECS}s\"\n",
        topology.store_toml(),
        upstream.url()
    );
    let path = dir.path().join("dying.toml");
    std::fs::write(&path, config).unwrap();
    let mut dying = Daemon::spawn(&path, dir.path(), &[]).await;
    let lost = tokio::spawn(
        reqwest::Client::new()
            .post(format!("http://127.0.0.1:{port}{ORDERS}"))
            .header("idempotency-key", "crash")
            .header("authorization", ALICE)
            .body("{}")
            .send(),
    );
    eventually(10, "the request to reach the upstream", || async {
        upstream.hits(ORDERS) == 1
    })
    .await;
    dying.signal("KILL");
    let _ = dying.child.wait();
    assert!(lost.await.unwrap().is_err(), "the killed proxy answered");

    // `t`'s proxy of that name forwards to its own upstream; the claim is what matters here.
    let retry = post(t, proxy, ALICE, "crash", b"{}").await;
    assert_eq!(retry.status, 409, "{retry:?}");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(LEASE_SECS + 5);
    let answer = loop {
        let answer = post(t, proxy, ALICE, "crash", b"{}").await;
        if answer.status != 409 {
            break answer;
        }
        assert!(tokio::time::Instant::now() < deadline, "never taken over");
        // Pacing while the lease runs out.
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(answer.status == 201 && !answer.replayed(), "{answer:?}");
    assert!(post(t, proxy, ALICE, "crash", b"{}").await.replayed());
    let takeovers = t.metric(PROXY_LEASE_TAKEOVERS, &[("proxy", proxy)]).await;
    assert_eq!(takeovers, 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxies_on_every_master_execute_once() {
    let cluster = RedisCluster::start();
    let proxies = names_on_every_master(&cluster, "api", |name| format!("p:{name}"));
    assert_eq!(proxies.len(), 3, "{proxies:?}");
    let mut upstreams = Vec::new();
    for _ in &proxies {
        upstreams.push(Upstream::start().await);
    }
    let named: Vec<(&str, &Upstream)> = proxies
        .iter()
        .zip(&upstreams)
        .map(|((name, _), upstream)| (name.as_str(), upstream))
        .collect();
    let topology = Topology::Cluster(&cluster);
    let t = proxy_app(topology, &named).await;
    assert_eq!(t.readiness().await, 200);
    for (name, upstream) in &named {
        keys_execute_once(&t, name, upstream).await;
    }
    a_dead_proxys_claim_is_taken_over(&t, topology, named[0].0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_behind_sentinel_executes_once() {
    let group = SentinelGroup::start();
    let upstream = Upstream::start().await;
    let topology = Topology::Sentinel(&group);
    let t = proxy_app(topology, &[("orders", &upstream)]).await;
    assert_eq!(t.readiness().await, 200);
    keys_execute_once(&t, "orders", &upstream).await;
    a_dead_proxys_claim_is_taken_over(&t, topology, "orders").await;
}
