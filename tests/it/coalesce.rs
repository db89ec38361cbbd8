//! Coalescing in atomic mode (`sink.coalesce`): concurrent requests for one stream go to Redis in
//! one script call, and each still gets the answer it would get alone.
//!
//! To make requests meet deterministically, Redis holds its writers (`CLIENT PAUSE … WRITE`)
//! until every request is in the daemon (`hookonce_requests_in_flight`): the first request's call
//! is then in Redis, the others wait in the coalescer, and `CLIENT UNPAUSE` lets them go. The
//! script calls are counted in Redis (`INFO commandstats`).

use std::collections::{BTreeMap, BTreeSet};

use crate::support::cluster::{self, RedisCluster};
use crate::support::metrics::IN_FLIGHT;
use crate::support::replica::Replica;
use crate::support::settings::{self, secs, STRIPE_SECRET};
use crate::support::{eventually, now, stripe_body, Backend, RedisServer, TestApp};
use hookonce::config::{ServiceUrl, SourceSettings, StoreTopology};

/// `EVALSHA` calls Redis ran since its statistics were last reset.
pub(crate) fn evalsha_calls(conn: &mut redis::Connection) -> u64 {
    let info: String = redis::cmd("INFO").arg("commandstats").query(conn).unwrap();
    info.lines()
        .find_map(|line| line.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |calls| calls.parse().unwrap())
}

pub(crate) fn pause_writers(conn: &mut redis::Connection) {
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(30_000)
        .arg("WRITE")
        .query(conn)
        .unwrap();
}

pub(crate) fn unpause(conn: &mut redis::Connection) {
    let _: () = redis::cmd("CLIENT").arg("UNPAUSE").query(conn).unwrap();
}

/// Waits until `n` webhook requests are in the daemon (admitted, so past their bodies).
pub(crate) async fn all_in(app: &TestApp, n: usize) {
    eventually(10, &format!("{n} requests in flight"), || async {
        app.metric(IN_FLIGHT, &[]).await >= n as f64
    })
    .await;
}

/// One signed request, ready to send: the source, its body and its headers.
pub(crate) struct Request {
    pub source: String,
    pub body: Vec<u8>,
    pub headers: Vec<(String, String)>,
}

pub(crate) fn stripe(app: &TestApp, source: &str, id: &str, size: usize) -> Request {
    let body = stripe_body(id, size);
    let headers = app.sign(source, &body, &now());
    Request {
        source: source.to_owned(),
        body,
        headers,
    }
}

/// Starts every request at once, each in a task of its own.
pub(crate) fn start_all(
    app: &TestApp,
    requests: &[Request],
) -> Vec<tokio::task::JoinHandle<(u16, bool)>> {
    let client = reqwest::Client::new();
    requests
        .iter()
        .map(|r| {
            let (client, url) = (client.clone(), app.url(&format!("/webhooks/{}", r.source)));
            let (body, headers) = (r.body.clone(), r.headers.clone());
            tokio::spawn(async move {
                let response = crate::support::http::post(&client, &url, &body, &headers).await;
                let replayed = response.headers().contains_key("idempotency-replayed");
                (response.status().as_u16(), replayed)
            })
        })
        .collect()
}

/// The answers (status, `Idempotency-Replayed` set), in order.
pub(crate) async fn answers(
    started: Vec<tokio::task::JoinHandle<(u16, bool)>>,
) -> Vec<(u16, bool)> {
    let mut answers = Vec::new();
    for handle in started {
        answers.push(handle.await.unwrap());
    }
    answers
}

async fn send_all(app: &TestApp, requests: &[Request]) -> Vec<(u16, bool)> {
    answers(start_all(app, requests)).await
}

/// Sends `requests` while Redis holds writes, lets go once all are in the daemon.
async fn send_held(
    app: &TestApp,
    control: &mut redis::Connection,
    requests: &[Request],
) -> Vec<(u16, bool)> {
    pause_writers(control);
    let started = start_all(app, requests);
    all_in(app, requests.len()).await;
    unpause(control);
    answers(started).await
}

async fn coalescing_app(redis: Option<RedisServer>) -> TestApp {
    let mut builder = TestApp::builder(Backend::Redis)
        .store(|store| store.timeout = secs(10))
        .sink(|sink| sink.coalesce = true)
        .source(
            "hub",
            SourceSettings {
                body_dedup: Some(true),
                ..settings::source("github", settings::GITHUB_SECRET)
            },
        );
    if let Some(redis) = redis {
        builder = builder.redis(redis);
    }
    builder.start().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_requests_share_script_calls_and_each_gets_its_own_answer() {
    let t = coalescing_app(None).await;
    let redis = t.redis.as_ref().unwrap();
    let mut control = redis.connection();
    // An event already forwarded, which one request of the batch will contradict.
    assert_eq!(
        t.deliver("stripe", &stripe_body("evt_m", 300), &now())
            .await
            .status(),
        200
    );
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(&mut control)
        .unwrap();

    let mut requests: Vec<Request> = (0..16)
        .map(|n| stripe(&t, "stripe", &format!("evt_{n}"), 400))
        .collect();
    // Two deliveries of one event in one batch: one forwarded, the other its duplicate.
    requests.push(stripe(&t, "stripe", "evt_twice", 400));
    requests.push(stripe(&t, "stripe", "evt_twice", 400));
    // The forwarded event under another payload: a mismatch, withholding only itself.
    requests.push(stripe(&t, "stripe", "evt_m", 500));
    // body_dedup: one payload under two delivery IDs, two keys per event.
    let payload = br#"{"action":"opened","n":1}"#.to_vec();
    for id in ["d-1", "d-2"] {
        let headers = t.sign("hub", &payload, &crate::support::with_id(id));
        requests.push(Request {
            source: "hub".to_owned(),
            body: payload.clone(),
            headers,
        });
    }
    let answers = send_held(&t, &mut control, &requests).await;

    for (n, answer) in answers[..16].iter().enumerate() {
        assert_eq!(*answer, (200, false), "evt_{n}");
    }
    let twice: BTreeSet<_> = answers[16..18].iter().copied().collect();
    assert_eq!(twice, BTreeSet::from([(200, false), (200, true)]));
    assert_eq!(answers[18].0, 422);
    let hub: BTreeSet<_> = answers[19..21].iter().copied().collect();
    assert_eq!(hub, BTreeSet::from([(200, false), (200, true)]));

    // 21 requests over two streams: far fewer script calls than requests.
    let calls = evalsha_calls(&mut control);
    assert!(
        (2..=6).contains(&calls),
        "{calls} script calls for 21 requests"
    );
    let page = t.metrics().await;
    let sum = crate::support::metrics::value(&page, "hookonce_store_batch_requests_sum", &[]);
    let count = crate::support::metrics::value(&page, "hookonce_store_batch_requests_count", &[]);
    assert_eq!(sum, 22.0, "every request went through a call: {page}");
    assert_eq!(count, calls as f64 + 1.0);

    // Each event is in the stream once, evt_m with its first payload only.
    let ids: Vec<String> = t.entries("stripe").into_iter().map(|(id, _)| id).collect();
    let distinct: BTreeSet<&String> = ids.iter().collect();
    assert_eq!(ids.len(), distinct.len(), "{ids:?}");
    assert_eq!(ids.len(), 18, "{ids:?}");
    assert_eq!(t.entries("hub").len(), 1);
    assert_eq!(t.events("stripe", "payload_mismatch").await, 1.0);
}

/// A request of `source` whose delivery ID is `id` and whose body is `body` (GitHub-signed).
fn delivery(app: &TestApp, source: &str, id: &str, body: &[u8]) -> Request {
    Request {
        source: source.to_owned(),
        body: body.to_vec(),
        headers: app.sign(source, body, &crate::support::with_id(id)),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_call_of_new_events_a_request_finds_what_an_earlier_one_wrote() {
    // One call out at a time: a first request holds the lane while Redis holds writes, and
    // everything sent after it waits, then goes as one call. None of its records exists before
    // that call, so the script reads none from Redis (one EXISTS answers for all): a request
    // can only find the records an earlier request of the same call wrote.
    let t = TestApp::builder(Backend::Redis)
        .store(|store| store.timeout = secs(10))
        .sink(|sink| {
            sink.coalesce = true;
            sink.coalesce_in_flight = Some(1);
        })
        .source(
            "hub",
            SourceSettings {
                body_dedup: Some(true),
                ..settings::source("github", settings::GITHUB_SECRET)
            },
        )
        .start()
        .await;
    let mut control = t.redis.as_ref().unwrap().connection();
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(&mut control)
        .unwrap();
    pause_writers(&mut control);
    let first = start_all(&t, &[delivery(&t, "hub", "first", br#"{"n":0}"#)]);
    all_in(&t, 1).await;
    let requests = [
        // One delivery twice: its event record, written by whichever came first.
        delivery(&t, "hub", "twice", br#"{"n":1}"#),
        delivery(&t, "hub", "twice", br#"{"n":1}"#),
        // One payload under two delivery IDs: its body record.
        delivery(&t, "hub", "body-1", br#"{"n":2}"#),
        delivery(&t, "hub", "body-2", br#"{"n":2}"#),
        delivery(&t, "hub", "alone", br#"{"n":3}"#),
    ];
    let started = start_all(&t, &requests);
    all_in(&t, requests.len() + 1).await;
    unpause(&mut control);
    assert_eq!(answers(first).await, [(200, false)]);
    let answers = answers(started).await;

    assert_eq!(
        evalsha_calls(&mut control),
        2,
        "the first request's call, then one"
    );
    let pair = |at: usize| answers[at..at + 2].iter().copied().collect::<BTreeSet<_>>();
    assert_eq!(pair(0), BTreeSet::from([(200, false), (200, true)]));
    assert_eq!(pair(2), BTreeSet::from([(200, false), (200, true)]));
    assert_eq!(answers[4], (200, false));
    assert_eq!(
        t.entries("hub").len(),
        4,
        "first, twice, one of body-*, alone"
    );
    assert_eq!(t.events("hub", "duplicate").await, 2.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_call_answers_503_to_every_request_in_it_and_the_retries_forward_once() {
    let mut t = coalescing_app(None).await;
    let mut control = t.redis.as_ref().unwrap().connection();
    let requests: Vec<Request> = (0..12)
        .map(|n| stripe(&t, "stripe", &format!("evt_{n}"), 400))
        .collect();

    // Redis dies while the first call is in it and the others wait for the next.
    pause_writers(&mut control);
    let started = start_all(&t, &requests);
    all_in(&t, requests.len()).await;
    t.redis.as_mut().unwrap().kill();
    let answers = answers(started).await;
    assert!(answers.iter().all(|a| *a == (503, false)), "{answers:?}");

    t.redis.as_mut().unwrap().restart();
    assert_eq!(t.redis.as_ref().unwrap().dbsize(), 0);
    eventually(20, "the daemon reconnected", || async {
        t.readiness().await == 200
    })
    .await;
    // The provider's retries, again all at once: each forwarded once.
    let answers = send_all(&t, &requests).await;
    assert!(answers.iter().all(|a| *a == (200, false)), "{answers:?}");
    let ids: Vec<String> = t.entries("stripe").into_iter().map(|(id, _)| id).collect();
    let distinct: BTreeSet<&String> = ids.iter().collect();
    assert_eq!((ids.len(), distinct.len()), (12, 12), "{ids:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_each_stream_coalesces_on_its_own_master_partitions_included() {
    let cluster = RedisCluster::start();
    let sources = crate::topology::sources_on_every_master(&cluster);
    let seeds = cluster.seeds().into_iter().map(ServiceUrl).collect();
    let mut builder = TestApp::builder(Backend::Redis)
        .store(|store| {
            store.topology = StoreTopology::Cluster;
            store.cluster_nodes = seeds;
            store.timeout = secs(10);
        })
        .sink(|sink| {
            sink.coalesce = true;
            sink.max_len = 1000;
        })
        .source(
            "hot",
            SourceSettings {
                partitions: Some(4),
                ..settings::source("stripe", STRIPE_SECRET)
            },
        );
    for (name, _) in &sources {
        builder = builder.source(name, settings::source("stripe", STRIPE_SECRET));
    }
    let app = builder.start().await;

    let mut requests = Vec::new();
    for (name, _) in &sources {
        for n in 0..8 {
            requests.push(stripe(&app, name, &format!("evt_{name}_{n}"), 300));
        }
    }
    for n in 0..24 {
        requests.push(stripe(&app, "hot", &format!("evt_hot_{n}"), 300));
    }
    let mut controls: Vec<redis::Connection> = cluster
        .masters()
        .into_iter()
        .map(|port| cluster::connection(port).unwrap())
        .collect();
    for control in &mut controls {
        let _: () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query(control)
            .unwrap();
        pause_writers(control);
    }
    let started = start_all(&app, &requests);
    all_in(&app, requests.len()).await;
    for control in &mut controls {
        unpause(control);
    }
    let answers = answers(started).await;
    assert!(answers.iter().all(|a| *a == (200, false)), "{answers:?}");

    // 3 + 4 streams; each call stays in its stream's slot.
    let calls: u64 = controls.iter_mut().map(evalsha_calls).sum();
    assert!(
        calls < requests.len() as u64 / 2,
        "{calls} calls for {} requests",
        requests.len()
    );

    let mut client = cluster.client();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let names = sources.iter().map(|(n, _)| n.as_str()).chain(["hot"]);
    for name in names {
        let target = app.app.ingest.target(name).unwrap();
        for stream in target.streams() {
            for id in crate::topology::stream_ids(&mut client, &stream) {
                *seen.entry(id).or_default() += 1;
            }
        }
    }
    let expected: BTreeSet<String> = requests
        .iter()
        .map(|r| {
            let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
            v["id"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(seen.keys().cloned().collect::<BTreeSet<_>>(), expected);
    assert!(seen.values().all(|&n| n == 1), "{seen:?}");
}

/// `WAIT` calls Redis ran since its statistics were last reset.
fn wait_calls(conn: &mut redis::Connection) -> u64 {
    let info: String = redis::cmd("INFO").arg("commandstats").query(conn).unwrap();
    info.lines()
        .find_map(|line| line.strip_prefix("cmdstat_wait:calls="))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |calls| calls.parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_wait_replicas_one_wait_covers_a_call_and_an_unconfirmed_call_answers_503() {
    let primary = RedisServer::start();
    let mut replica = Replica::of(&primary);
    let t = TestApp::builder(Backend::Redis)
        .redis(primary)
        .store(|store| {
            store.timeout = secs(5);
            store.wait_replicas = 1;
            store.wait_timeout = secs(1);
        })
        .sink(|sink| sink.coalesce = true)
        .start()
        .await;
    let mut control = t.redis.as_ref().unwrap().connection();
    assert_eq!(
        t.deliver("stripe", &stripe_body("evt_m", 300), &now())
            .await
            .status(),
        200
    );
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(&mut control)
        .unwrap();

    let requests: Vec<Request> = (0..12)
        .map(|n| stripe(&t, "stripe", &format!("evt_{n}"), 300))
        .collect();
    let answers = send_held(&t, &mut control, &requests).await;
    assert!(answers.iter().all(|a| *a == (200, false)), "{answers:?}");
    let (calls, waits) = (evalsha_calls(&mut control), wait_calls(&mut control));
    assert_eq!(calls, waits, "one WAIT per call");
    assert!(calls <= 4, "{calls} calls for 12 requests");
    // Every acknowledged event is on the replica.
    let on_replica: u64 = redis::cmd("XLEN")
        .arg("hookonce:{stripe}:events")
        .query(&mut replica.connection())
        .unwrap();
    assert_eq!(on_replica, 13);

    // No replica confirms: every accepted request of the call answers 503; the one refused as a
    // mismatch wrote nothing and is answered 422 whatever the count.
    replica.kill();
    let mut requests: Vec<Request> = (12..20)
        .map(|n| stripe(&t, "stripe", &format!("evt_{n}"), 300))
        .collect();
    requests.push(stripe(&t, "stripe", "evt_m", 500));
    let answers = send_held(&t, &mut control, &requests).await;
    assert!(
        answers[..8].iter().all(|a| *a == (503, false)),
        "{answers:?}"
    );
    assert_eq!(answers[8].0, 422);
}
