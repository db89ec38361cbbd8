//! Adyen batches as an attacker shapes them: re-framed items, all-or-nothing batches, outcomes
//! of mixed batches, and the memory one hostile batch may cost the real binary.

use super::cases::{adyen_batch, ADYEN_KEY, MARKER};
use crate::support::app::provider;
use crate::support::binary::write;
use crate::support::daemon::Daemon;
use crate::support::metrics::{EVENTS, HTTP_REQUESTS};
use crate::support::settings::source;
use crate::support::{both_backends, now, Backend, RedisServer, TestApp};

/// `hookonce_request_duration_seconds_count{source,outcome}`: requests by the outcome that
/// speaks for them.
const REQUESTS_BY_OUTCOME: &str = "hookonce_request_duration_seconds_count";

/// An unsigned item with the given PSP reference and merchantReference.
fn item(psp: &str, reference: &str) -> String {
    format!(
        r#"{{"amount":{{"currency":"EUR","value":1130}},"eventCode":"CAPTURE","merchantAccountCode":"TestMerchant","merchantReference":"{reference}","pspReference":"{psp}","success":"true"}}"#
    )
}

/// The item with its `hmacSignature`, signed by the daemon's own Adyen code.
fn signed(unsigned: &str) -> String {
    let adyen = provider("adyen", &source("adyen", ADYEN_KEY));
    let body = adyen_batch(&[unsigned.to_owned()]);
    let signed = adyen.sign_body(body.as_bytes(), &now()).unwrap().unwrap();
    let signed = String::from_utf8(signed).unwrap();
    let start = signed.find(r#"{"NotificationRequestItem":"#).unwrap() + 27;
    signed[start..signed.len() - "}]}".len()].to_owned()
}

async fn post(t: &TestApp, items: &[String]) -> reqwest::Response {
    let body = adyen_batch(items);
    t.post(
        "adyen",
        body.as_bytes(),
        &t.sign("adyen", body.as_bytes(), &now()),
    )
    .await
}

async fn adyen_app(backend: Backend) -> TestApp {
    TestApp::builder(backend)
        .source("adyen", source("adyen", ADYEN_KEY))
        .start()
        .await
}

/// A captured item whose merchantReference holds a colon, re-split at that colon into another
/// merchantAccountCode: the signed string and its signature are unchanged, the event ID is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reframed_item_is_rejected_and_nothing_is_forwarded_again() {
    let t = adyen_app(Backend::Redis).await;
    let captured = signed(&item("9101", &format!("{MARKER}:77")));
    assert_eq!(
        post(&t, std::slice::from_ref(&captured)).await.status(),
        200
    );
    let stored = t.stored();

    let reframed = captured
        .replace(
            r#""merchantAccountCode":"TestMerchant""#,
            &format!(r#""merchantAccountCode":"TestMerchant:{MARKER}""#),
        )
        .replace(
            &format!(r#""merchantReference":"{MARKER}:77""#),
            r#""merchantReference":"77""#,
        );
    assert_ne!(reframed, captured);
    let response = post(&t, &[reframed]).await;
    assert_eq!(response.status(), 400);
    assert_eq!(t.entries("adyen").len(), 1);
    assert_eq!(t.stored(), stored);
    let malformed = [("source", "adyen"), ("outcome", "malformed")];
    assert_eq!(t.metric(EVENTS, &malformed).await, 1.0);
}

/// A batch answered 422 writes none of its items, new ones included; the provider's retry
/// without the offending item forwards them.
async fn a_batch_with_a_mismatching_item_writes_nothing(backend: Backend) {
    let t = adyen_app(backend).await;
    let first = signed(&item("9201", "order-1"));
    assert_eq!(post(&t, &[first]).await.status(), 200);
    let stored = t.stored();

    let changed = signed(&item("9201", "order-1-changed"));
    let (new_a, new_b) = (
        signed(&item("9202", "order-2")),
        signed(&item("9203", "order-3")),
    );
    let batch = [new_a.clone(), changed, new_b.clone()];
    let response = post(&t, &batch).await;
    assert_eq!(response.status(), 422);
    assert_eq!(t.stored(), stored, "a rejected batch wrote something");
    assert_eq!(t.entries("adyen").len(), 1);

    assert_eq!(post(&t, &[new_a, new_b]).await.status(), 200);
    let ids: Vec<String> = t.entries("adyen").into_iter().map(|(id, _)| id).collect();
    assert_eq!(
        ids,
        ["9201", "9202", "9203"].map(|psp| format!("TestMerchant:{psp}:CAPTURE:true"))
    );
    // The mismatching item, and the two new items withheld with it.
    let mismatch = [("source", "adyen"), ("outcome", "payload_mismatch")];
    assert_eq!(t.metric(EVENTS, &mismatch).await, 3.0);
    let unprocessable = [("source", "adyen"), ("status", "422")];
    assert_eq!(t.metric(HTTP_REQUESTS, &unprocessable).await, 1.0);
}

/// A batch with one new item among duplicates counts each event under its own outcome, and the
/// request as `forwarded`: something reached the queue. The same item twice in one batch is one
/// entry.
async fn a_mixed_batch_is_a_forwarded_request(backend: Backend) {
    let t = adyen_app(backend).await;
    let seen = [
        signed(&item("9301", "order-1")),
        signed(&item("9302", "order-2")),
    ];
    assert_eq!(post(&t, &seen).await.status(), 200);
    let new = signed(&item("9303", "order-3"));
    let batch = [seen[0].clone(), new.clone(), seen[1].clone(), new];
    let response = post(&t, &batch).await;
    assert_eq!(response.status(), 200);
    assert!(response.headers().get("idempotency-replayed").is_none());
    assert_eq!(t.entries("adyen").len(), 3);

    let count = |outcome| [("source", "adyen"), ("outcome", outcome)];
    assert_eq!(t.metric(EVENTS, &count("forwarded")).await, 3.0);
    assert_eq!(t.metric(EVENTS, &count("duplicate")).await, 3.0);
    assert_eq!(
        t.metric(REQUESTS_BY_OUTCOME, &count("forwarded")).await,
        2.0
    );
    assert_eq!(
        t.metric(REQUESTS_BY_OUTCOME, &count("duplicate")).await,
        0.0
    );

    // Every item seen before: a replay, and a duplicate request.
    let again = post(&t, &seen).await;
    assert_eq!(again.headers()["idempotency-replayed"], "true");
    assert_eq!(
        t.metric(REQUESTS_BY_OUTCOME, &count("duplicate")).await,
        1.0
    );
}

both_backends!(
    a_batch_with_a_mismatching_item_writes_nothing,
    a_mixed_batch_is_a_forwarded_request,
);

/// One captured item copied 1000 times under a 256 KiB batch-level `live` (a 530 KiB request),
/// then the same copies with a valid `live`: each is refused with nothing written, and neither
/// may grow the daemon by more than a small multiple of its size. A batch at the cap is taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_batch_neither_amplifies_memory_nor_writes() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "[store]\nbackend = \"redis\"\nredis_url = \"{}\"\n[sources.adyen]\nprovider = \"adyen\"\nsecrets = [\"{ADYEN_KEY}\"]\n",
        redis.url()
    );
    let config = write(dir.path(), "hookonce.toml", &config);
    let daemon = Daemon::spawn(&config, dir.path(), &[("RUST_LOG", "warn")]).await;
    let client = reqwest::Client::new();
    let captured = signed(&item("9401", "order-1"));
    let send = |live: String, copies: usize| {
        let wrapped = vec![format!(r#"{{"NotificationRequestItem":{captured}}}"#); copies];
        let body = format!(
            r#"{{"live":{live},"notificationItems":[{}]}}"#,
            wrapped.join(",")
        );
        let request = client
            .post(daemon.url("/webhooks/adyen"))
            .header("content-type", "application/json")
            .body(body);
        async move { request.send().await.unwrap().status().as_u16() }
    };
    let peak_before = daemon.resident().peak;
    let huge_live = format!("\"{}\"", "t".repeat(256 * 1024));
    let hostile = send(huge_live, 1000).await;
    let over_cap = send("\"false\"".to_owned(), 1000).await;
    let at_cap = send("\"false\"".to_owned(), 100).await;
    let after = daemon.resident();
    let growth_mib = (after.peak - peak_before) >> 20;
    assert!(
        growth_mib < 64,
        "peak RSS grew by {growth_mib} MiB (now {} KiB resident)",
        after.now >> 10
    );
    assert_eq!((hostile, over_cap, at_cap), (400, 400, 200));
    assert_eq!(redis.dbsize(), 2, "one record and one stream");
    let malformed = [("source", "adyen"), ("outcome", "malformed")];
    assert_eq!(daemon.metric(EVENTS, &malformed).await, 2.0);
}
