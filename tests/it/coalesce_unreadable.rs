//! One dedup record the atomic script cannot judge (a two-phase *processing* record) answers only
//! its own request, coalesced or not: every other request of the call keeps its own answer, and
//! no request whose events were written is answered 503.
//!
//! The calls are made to meet as in `coalesce.rs`: Redis holds its writers while a leader's call
//! is in it, so the requests sent meanwhile wait in the coalescer and go together in the next
//! call. The request that meets the unreadable record is sent right after the leader, and the
//! others only once it is in the daemon, so that it is queued long before the call is made.

use std::collections::BTreeSet;

use crate::coalesce::Request;
use crate::coalesce::{all_in, answers, evalsha_calls, pause_writers, start_all, stripe, unpause};
use crate::providers::cases::{adyen_batch, adyen_item, ADYEN_KEY};
use crate::support::settings::{secs, source};
use crate::support::{now, now_unix, Backend, TestApp};

/// How many other requests share the call with the one that meets the unreadable record.
const OTHERS: usize = 40;

/// A daemon over a fresh Redis with an Adyen source beside the defaults; one coalesced call of a
/// stream in flight, carrying up to 64 events and 64 requests, so that everything sent while the
/// leader's call is held goes in one call (with the default two calls in flight, the request sent
/// right after the leader would run alone in the second).
async fn app(coalesce: bool) -> TestApp {
    TestApp::builder(Backend::Redis)
        .store(|store| store.timeout = secs(10))
        .sink(|sink| {
            sink.coalesce = coalesce;
            sink.coalesce_in_flight = Some(1);
            sink.coalesce_max_events = Some(64);
            sink.coalesce_max_requests = Some(64);
        })
        .source("adyen", source("adyen", ADYEN_KEY))
        .start()
        .await
}

/// Writes a two-phase processing record (`p <token> <fingerprint> <lease deadline>`) at `key`,
/// which the atomic script reads but cannot judge; returns its value.
fn poison(conn: &mut redis::Connection, key: &str) -> String {
    let deadline_ms = (now_unix() + 600) * 1000;
    let value = format!("p 0123456789abcdef AAAAAAAAAA {deadline_ms}");
    let _: () = redis::cmd("SET")
        .arg(key)
        .arg(&value)
        .arg("PX")
        .arg(600_000)
        .query(conn)
        .unwrap();
    value
}

fn get(conn: &mut redis::Connection, key: &str) -> Option<String> {
    redis::cmd("GET").arg(key).query(conn).unwrap()
}

/// One signed Adyen batch of `items` (signed by the daemon's own Adyen code).
fn adyen(t: &TestApp, items: &[String]) -> Request {
    let body = t.sign_body("adyen", adyen_batch(items).as_bytes(), &now());
    let headers = t.sign("adyen", &body, &now());
    Request {
        source: "adyen".to_owned(),
        body,
        headers,
    }
}

fn adyen_key(psp: &str) -> String {
    format!("hookonce:{{adyen}}:d:TestMerchant:{psp}:CAPTURE:true")
}

/// The event IDs in a source's stream, each once (asserted).
fn stream_ids(t: &TestApp, source: &str) -> BTreeSet<String> {
    let ids: Vec<String> = t.entries(source).into_iter().map(|(id, _)| id).collect();
    let distinct: BTreeSet<String> = ids.iter().cloned().collect();
    assert_eq!(ids.len(), distinct.len(), "each event once: {ids:?}");
    distinct
}

/// Sends `leader` while Redis holds writers, then `unreadable` once the leader's call is out,
/// then `others`; lets Redis go once all are in the daemon. Answers leader, unreadable, others.
async fn send_in_one_call(
    t: &TestApp,
    control: &mut redis::Connection,
    leader: Request,
    unreadable: Request,
    others: Vec<Request>,
) -> ((u16, bool), (u16, bool), Vec<(u16, bool)>) {
    let total = 2 + others.len();
    pause_writers(control);
    let leader = start_all(t, &[leader]);
    all_in(t, 1).await;
    let unreadable = start_all(t, &[unreadable]);
    all_in(t, 2).await;
    let others = start_all(t, &others);
    all_in(t, total).await;
    unpause(control);
    let leader = answers(leader).await[0];
    let unreadable = answers(unreadable).await[0];
    (leader, unreadable, answers(others).await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_record_refuses_only_its_own_request_in_a_coalesced_call() {
    let t = app(true).await;
    let mut control = t.redis.as_ref().unwrap().connection();
    let key = "hookonce:{stripe}:d:evt_poisoned";
    let record = poison(&mut control, key);
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(&mut control)
        .unwrap();

    let others: Vec<Request> = (0..OTHERS)
        .map(|n| stripe(&t, "stripe", &format!("evt_{n}"), 300))
        .collect();
    let (leader, unreadable, rest) = send_in_one_call(
        &t,
        &mut control,
        stripe(&t, "stripe", "evt_leader", 300),
        stripe(&t, "stripe", "evt_poisoned", 300),
        others,
    )
    .await;

    assert_eq!(leader, (200, false));
    assert_eq!(
        unreadable.0, 503,
        "the request that met the unreadable record"
    );
    for (n, answer) in rest.iter().enumerate() {
        assert_eq!(*answer, (200, false), "evt_{n}: {rest:?}");
    }
    // The requests did share calls: the leader's, then at most a straggler's beside the rest.
    let calls = evalsha_calls(&mut control);
    assert!((2..=3).contains(&calls), "{calls} script calls");
    let mut expected: BTreeSet<String> = (0..OTHERS).map(|n| format!("evt_{n}")).collect();
    expected.insert("evt_leader".to_owned());
    assert_eq!(stream_ids(&t, "stripe"), expected);
    // The record the script could not judge is left as it was.
    assert_eq!(get(&mut control, key), Some(record));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_with_one_unreadable_record_writes_nothing_and_its_call_mates_are_forwarded() {
    let t = app(true).await;
    let mut control = t.redis.as_ref().unwrap().connection();
    poison(&mut control, &adyen_key("9002"));

    let batch = adyen(
        &t,
        &[adyen_item("9001", "CAPTURE"), adyen_item("9002", "CAPTURE")],
    );
    let others: Vec<Request> = (0..OTHERS)
        .map(|n| adyen(&t, &[adyen_item(&format!("8{n:03}"), "CAPTURE")]))
        .collect();
    let leader = adyen(&t, &[adyen_item("7000", "CAPTURE")]);
    let retry = Request {
        source: batch.source.clone(),
        body: batch.body.clone(),
        headers: batch.headers.clone(),
    };
    let (leader, unreadable, rest) =
        send_in_one_call(&t, &mut control, leader, batch, others).await;

    assert_eq!(leader, (200, false));
    assert_eq!(
        unreadable.0, 503,
        "the batch that met the unreadable record"
    );
    assert!(rest.iter().all(|a| *a == (200, false)), "{rest:?}");
    // All or nothing for that request only: its new item is not written, the others are.
    let ids = stream_ids(&t, "adyen");
    assert_eq!(ids.len(), OTHERS + 1, "{ids:?}");
    assert!(
        ids.iter().all(|id| !id.contains(":9001:")),
        "the refused batch's new item was withheld: {ids:?}"
    );
    assert_eq!(get(&mut control, &adyen_key("9001")), None);

    // Once the record is gone, the provider's retry forwards both of its items.
    let _: () = redis::cmd("DEL")
        .arg(adyen_key("9002"))
        .query(&mut control)
        .unwrap();
    let retried = answers(start_all(&t, &[retry])).await;
    assert_eq!(retried, vec![(200, false)]);
    assert_eq!(stream_ids(&t, "adyen").len(), OTHERS + 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_coalescing_an_unreadable_record_refuses_only_its_own_request() {
    let t = app(false).await;
    let mut control = t.redis.as_ref().unwrap().connection();
    poison(&mut control, "hookonce:{stripe}:d:evt_poisoned");
    poison(&mut control, &adyen_key("9002"));

    let mut requests: Vec<Request> = (0..8)
        .map(|n| stripe(&t, "stripe", &format!("evt_{n}"), 300))
        .collect();
    requests.push(stripe(&t, "stripe", "evt_poisoned", 300));
    requests.push(adyen(
        &t,
        &[adyen_item("9001", "CAPTURE"), adyen_item("9002", "CAPTURE")],
    ));
    requests.push(adyen(&t, &[adyen_item("9003", "CAPTURE")]));
    let got = answers(start_all(&t, &requests)).await;

    assert!(got[..8].iter().all(|a| *a == (200, false)), "{got:?}");
    assert_eq!(got[8].0, 503, "{got:?}");
    assert_eq!(got[9].0, 503, "{got:?}");
    assert_eq!(got[10], (200, false), "{got:?}");
    assert_eq!(stream_ids(&t, "stripe").len(), 8);
    let adyen_ids = stream_ids(&t, "adyen");
    assert_eq!(adyen_ids.len(), 1, "{adyen_ids:?}");
}
