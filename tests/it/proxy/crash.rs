//! A proxy SIGKILLed while its request is upstream, with the real binary over a real Redis: its
//! claim outlives it. Within the lease a retry (to another proxy process) gets 409; after the
//! lease the claim is taken over by compare-and-set and the request executes again, with the
//! same `Idempotency-Key`, so an upstream that deduplicates on the key can absorb it.

use std::path::Path;
use std::time::Duration;

use super::{ORDERS, PROXY};
use crate::support::daemon::Daemon;
use crate::support::metrics::{PROXY_LEASE_TAKEOVERS, PROXY_REQUESTS};
use crate::support::redis::free_port;
use crate::support::upstream::{Reply, Upstream};
use crate::support::{eventually, RedisServer};

const LEASE_SECS: u64 = 5;

fn config(
    dir: &Path,
    name: &str,
    redis: &RedisServer,
    upstream: &Upstream,
) -> (std::path::PathBuf, u16) {
    let port = free_port();
    let text = format!(
        "[store]\nbackend = \"redis\"\nredis_url = \"{}\"\n\
         [proxies.{PROXY}]\nlisten = \"127.0.0.1:{port}\"\nupstream = \"{}\"\n\
         lease = \"{LEASE_SECS}s\"\nupstream_timeout = \"{LEASE_SECS}s\"\n",
        redis.url(),
        upstream.url()
    );
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    (path, port)
}

async fn post(port: u16, key: &str) -> reqwest::Result<reqwest::Response> {
    reqwest::Client::new()
        .post(format!("http://127.0.0.1:{port}{ORDERS}"))
        .header("idempotency-key", key)
        .header("authorization", super::ALICE)
        .body("{}")
        .send()
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_killed_mid_request_leaves_a_claim_that_is_taken_over_after_its_lease() {
    let redis = RedisServer::start();
    let upstream = Upstream::start().await;
    // The first execution hangs past the kill; the next one answers at once.
    upstream.answer_in_turn(
        ORDERS,
        vec![
            Reply::status(201).delay(Duration::from_secs(60)),
            Reply::status(201),
        ],
    );
    let dir = tempfile::tempdir().unwrap();
    let (first_config, first_port) = config(dir.path(), "first.toml", &redis, &upstream);
    let (second_config, second_port) = config(dir.path(), "second.toml", &redis, &upstream);

    let mut first = Daemon::spawn(&first_config, dir.path(), &[]).await;
    let lost = tokio::spawn(post(first_port, "crash-1"));
    eventually(10, "the request to reach the upstream", || async {
        upstream.hits(ORDERS) == 1
    })
    .await;
    first.signal("KILL");
    let _ = first.child.wait();
    assert!(lost.await.unwrap().is_err(), "the killed proxy answered");

    let second = Daemon::spawn(&second_config, dir.path(), &[]).await;
    // Within the lease the dead proxy's claim still stands.
    let retry = post(second_port, "crash-1").await.unwrap();
    assert_eq!(retry.status(), 409, "a retry within the lease executed");
    assert!(retry.headers().get("retry-after").is_some());
    assert_eq!(upstream.hits(ORDERS), 1);

    // After it, the claim is taken over and the request executes again.
    let answer = loop {
        let answer = post(second_port, "crash-1").await.unwrap();
        if answer.status() != 409 {
            break answer;
        }
        // Pacing while the lease runs out; the loop ends within LEASE_SECS.
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(answer.status(), 201);
    assert!(answer.headers().get("idempotency-replayed").is_none());
    assert_eq!(
        upstream.executions("crash-1", ORDERS),
        2,
        "same key, twice upstream"
    );
    let replay = post(second_port, "crash-1").await.unwrap();
    assert_eq!(replay.headers()["idempotency-replayed"], "true");
    assert_eq!(upstream.hits(ORDERS), 2);

    let labels = [("proxy", PROXY)];
    assert_eq!(second.metric(PROXY_LEASE_TAKEOVERS, &labels).await, 1.0);
    let executed = [("proxy", PROXY), ("outcome", "executed")];
    assert_eq!(second.metric(PROXY_REQUESTS, &executed).await, 1.0);
}
