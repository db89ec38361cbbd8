//! `store.wait_replicas` on a standalone master with one replica: every write that acknowledges
//! something — the atomic script (new events and duplicates), a two-phase complete, a proxy's
//! done record — carries `WAIT` in the same pipeline, and a replica that confirms nothing turns
//! the 2xx into 503 within `store.wait_timeout` (a proxy's executed answer still goes back, once
//! the wait is over).
//!
//! The replica is paused with SIGSTOP: its link stays open, so the master cannot tell, but it
//! acknowledges no offset. What a 2xx promises is read back from the replica itself.

use std::time::{Duration, Instant};

use crate::proxy::{self as proxy_suite, order};
use crate::support::metrics::PROXY_COMPLETION_FAILURES;
use crate::support::replica::Replica;
use crate::support::settings::{ms, secs, SinkKind, SinkSettings};
use crate::support::upstream::Upstream;
use crate::support::worker::Worker;
use crate::support::{with_id, Backend, RedisServer, TestApp};
use hookonce::config::StoreSettings;

/// Long enough for a live replica's acknowledgement on a loaded machine (300 ms was not).
const WAIT: Duration = Duration::from_millis(1000);
/// Far above `WAIT` plus a loaded machine's scheduling, far below a hung request.
const BOUND: Duration = Duration::from_secs(5);

fn waiting(store: &mut StoreSettings) {
    store.wait_replicas = 1;
    store.wait_timeout = ms(WAIT.as_millis() as u64);
    store.timeout = ms(2000);
}

fn get(connection: &mut redis::Connection, key: &str) -> Option<String> {
    redis::cmd("GET").arg(key).query(connection).unwrap()
}

fn pttl(connection: &mut redis::Connection, key: &str) -> i64 {
    redis::cmd("PTTL").arg(key).query(connection).unwrap()
}

/// Delivers a `github` event and times it.
async fn timed(t: &TestApp, id: &str, body: &[u8]) -> (u16, Duration, bool) {
    let started = Instant::now();
    let response = t.deliver("github", body, &with_id(id)).await;
    let replayed = response
        .headers()
        .get("idempotency-replayed")
        .is_some_and(|v| v == "true");
    (response.status().as_u16(), started.elapsed(), replayed)
}

fn assert_refused_in_time(what: &str, (status, took, _): (u16, Duration, bool)) {
    assert_eq!(status, 503, "{what}");
    // WAIT waited its whole timeout for the paused replica, and no longer than the bound.
    assert!(took >= WAIT && took < BOUND, "{what} took {took:?}");
}

/// Atomic mode: a 2xx only once the replica holds the entry and the record; a new event and a
/// duplicate both answer 503 while the replica confirms nothing — the duplicate also when its
/// original was written by another daemon over another connection, which the duplicate's own
/// rewrite of the record is there for. A mismatch stays 422 and writes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn atomic_mode_acknowledges_only_what_the_replica_holds() {
    let master = RedisServer::start();
    let url = master.url();
    let mut replica = Replica::of(&master);
    let t = TestApp::builder(Backend::Redis)
        .redis(master)
        .store(waiting)
        .start()
        .await;
    // Another daemon on the same Redis, which does not wait.
    let other = TestApp::builder(Backend::Redis)
        .shared_redis(url.clone())
        .start()
        .await;
    let record = |id: &str| format!("hookonce:{{github}}:d:{id}");
    let stream = "hookonce:{github}:events";

    let (status, _, _) = timed(&t, "confirmed", b"{}").await;
    assert_eq!(status, 200);
    // The 200 came after the replica held the entry and its record.
    let mut on_replica = replica.connection();
    assert!(get(&mut on_replica, &record("confirmed")).is_some());
    let length: u64 = redis::cmd("XLEN")
        .arg(stream)
        .query(&mut on_replica)
        .unwrap();
    assert_eq!(length, 1);
    let (status, _, replayed) = timed(&t, "confirmed", b"{}").await;
    assert!(status == 200 && replayed, "a confirmed duplicate");

    replica.pause();
    // The other daemon forwards an event; a waiting daemon started now, whose connection has
    // written nothing, must not answer its duplicate 2xx: the replica holds neither the record
    // nor the entry. (The duplicate's rewrite of the record, checked below, is what gives that
    // connection something for WAIT to confirm.)
    assert_eq!(
        other
            .deliver("github", b"{}", &with_id("elsewhere"))
            .await
            .status(),
        200
    );
    let fresh = TestApp::builder(Backend::Redis)
        .shared_redis(url)
        .store(waiting)
        .start()
        .await;
    assert_refused_in_time(
        "a duplicate written elsewhere",
        timed(&fresh, "elsewhere", b"{}").await,
    );
    assert_refused_in_time("a new event", timed(&t, "unconfirmed", b"{}").await);
    let mut on_master = t.redis.as_ref().unwrap().connection();
    let before = get(&mut on_master, &record("confirmed")).unwrap();
    let ttl_before = pttl(&mut on_master, &record("confirmed"));
    assert_refused_in_time("a duplicate", timed(&t, "confirmed", b"{}").await);
    // The rewrite keeps the record as it was: same value, its expiry running on.
    assert_eq!(get(&mut on_master, &record("confirmed")).unwrap(), before);
    let ttl = pttl(&mut on_master, &record("confirmed"));
    assert!(
        ttl > 0 && ttl <= ttl_before,
        "the record keeps its expiry: {ttl}"
    );
    // A mismatch is judged before anything is written, and answered as such.
    let keys_before: i64 = redis::cmd("DBSIZE").query(&mut on_master).unwrap();
    let (status, took, _) = timed(&t, "confirmed", b"{\"other\":1}").await;
    assert_eq!(status, 422);
    assert!(took < BOUND);
    let keys_after: i64 = redis::cmd("DBSIZE").query(&mut on_master).unwrap();
    assert_eq!(keys_before, keys_after);

    replica.resume();
    // The provider's retries: the events are in the stream once, now confirmed.
    for id in ["elsewhere", "unconfirmed", "confirmed"] {
        let (status, _, replayed) = timed(&t, id, b"{}").await;
        assert!(status == 200 && replayed, "{id} after the replica is back");
    }
    let ids: Vec<String> = super::stream_ids(&mut on_master, stream);
    assert_eq!(ids, ["confirmed", "elsewhere", "unconfirmed"]);
    let refused = t.events("github", "unavailable").await;
    assert_eq!(refused, 2.0);

    // What confirms a duplicate whatever the connection wrote before: its record is written
    // again (one SET) when waiting is on, and only then.
    let before = set_calls(&mut on_master);
    let (status, _, replayed) = timed(&other, "confirmed", b"{}").await;
    assert!(status == 200 && replayed);
    assert_eq!(
        set_calls(&mut on_master),
        before,
        "no rewrite without waiting"
    );
    let (status, _, replayed) = timed(&t, "confirmed", b"{}").await;
    assert!(status == 200 && replayed);
    assert_eq!(set_calls(&mut on_master), before + 1, "one rewrite");

    // Redis lost the script (a restart, a failover): the pipeline is sent again after loading it.
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query(&mut on_master)
        .unwrap();
    let (status, _, replayed) = timed(&t, "after-flush", b"{}").await;
    assert!(status == 200 && !replayed, "a new event after SCRIPT FLUSH");
}

/// `SET` calls the server ran so far, scripts' included (`INFO commandstats`).
fn set_calls(connection: &mut redis::Connection) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(connection)
        .unwrap();
    info.lines()
        .find_map(|line| line.strip_prefix("cmdstat_set:calls="))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |calls| calls.parse().unwrap())
}

/// Two-phase mode on the Redis ledger: the complete waits for the replica, so a 200 means the
/// done record is on the replica; unconfirmed, the request answers 503 and the retry is a
/// duplicate (the worker got the event once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_two_phase_complete_is_confirmed_before_the_2xx() {
    let master = RedisServer::start();
    let mut replica = Replica::of(&master);
    let worker = Worker::start().await;
    let t = TestApp::builder(Backend::Redis)
        .redis(master)
        .store(waiting)
        .sink(|sink| {
            *sink = SinkSettings {
                kind: SinkKind::Http,
                url: Some(worker.url()),
                timeout: Some(secs(2)),
                lease: Some(secs(10)),
                ..SinkSettings::default()
            }
        })
        .start()
        .await;
    let record = |id: &str| format!("hookonce:{{github}}:d:{id}");

    let (status, _, _) = timed(&t, "tp-confirmed", b"{}").await;
    assert_eq!(status, 200);
    let done = get(&mut replica.connection(), &record("tp-confirmed")).unwrap();
    assert!(done.starts_with("http:200 "), "{done}");

    replica.pause();
    assert_refused_in_time("a completion", timed(&t, "tp-unconfirmed", b"{}").await);
    replica.resume();
    let (status, _, replayed) = timed(&t, "tp-unconfirmed", b"{}").await;
    assert!(status == 200 && replayed, "the retry is a duplicate");
    let posts = worker
        .received()
        .iter()
        .filter(|r| r.headers["x-hookonce-event-id"] == "tp-unconfirmed")
        .count();
    assert_eq!(posts, 1, "published once");
}

/// The proxy: the upstream's answer goes back only once the replica holds its stored response
/// (or `wait_timeout` is over: the request was executed, so the client still gets its answer,
/// and the key replays it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_answer_waits_for_the_replica_to_hold_its_record() {
    let master = RedisServer::start();
    let mut replica = Replica::of(&master);
    let upstream = Upstream::start().await;
    let t = TestApp::builder(Backend::Redis)
        .redis(master)
        .store(waiting)
        .without_sources()
        .proxy(proxy_suite::PROXY, proxy_suite::settings(&upstream))
        .start()
        .await;

    let first = order(&t, "k-confirmed", b"{}").await;
    assert_eq!(first.status, 201);
    let unconfirmed = [("proxy", proxy_suite::PROXY), ("reason", "unconfirmed")];
    assert_eq!(t.metric(PROXY_COMPLETION_FAILURES, &unconfirmed).await, 0.0);
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("hookonce:{p:orders}:k:*")
        .query(&mut replica.connection())
        .unwrap();
    assert_eq!(keys.len(), 1);
    let stored = get(&mut replica.connection(), &keys[0]).unwrap();
    assert!(stored.starts_with("r1."), "the replica holds the response");

    replica.pause();
    let started = Instant::now();
    let executed = order(&t, "k-unconfirmed", b"{}").await;
    let took = started.elapsed();
    assert_eq!(executed.status, 201, "an executed request gets its answer");
    assert!(took >= WAIT && took < BOUND, "took {took:?}");
    // Counted, so that an operator sees responses a failover could lose.
    assert_eq!(t.metric(PROXY_COMPLETION_FAILURES, &unconfirmed).await, 1.0);
    replica.resume();
    let again = order(&t, "k-unconfirmed", b"{}").await;
    assert!(again.replayed(), "{again:?}");
    assert_eq!(again.body, executed.body);
    assert_eq!(upstream.executions("k-unconfirmed", proxy_suite::ORDERS), 1);
}
