//! `sources.NAME.rate_limit`: verified deliveries take a token; past the burst they get 429
//! `rate_limited` with a `Retry-After` of at least 1, nothing is written, and once a token is
//! back the delivery is accepted. Forged deliveries are refused before the bucket (401) and
//! never spend it.

use super::{deliver_from, rate, signed};
use crate::support::metrics::{EVENTS, HTTP_REQUESTS};
use crate::support::settings::{default_sources, source, SourceSettings, STRIPE_SECRET};
use crate::support::{eventually, Backend, TestApp};

async fn start() -> TestApp {
    // Slow enough that no token comes back during the test.
    let stripe = SourceSettings {
        rate_limit: Some(rate("1/m")),
        rate_limit_burst: Some(2),
        ..source("stripe", STRIPE_SECRET)
    };
    // Fast enough that a token comes back within the test.
    let github = SourceSettings {
        rate_limit: Some(rate("4/s")),
        rate_limit_burst: Some(3),
        ..default_sources()["github"].clone()
    };
    TestApp::builder(Backend::Redis)
        .source("stripe", stripe)
        .source("github", github)
        .start()
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_its_burst_a_source_answers_429_writes_nothing_and_forged_deliveries_spend_nothing() {
    let t = start().await;
    // Forged deliveries first: 401 each, and the bucket stays full.
    for i in 0..5 {
        let (body, _) = signed(&t, "stripe", &format!("evt_forged_{i}"));
        let forged = [("stripe-signature".to_owned(), "t=1,v1=00".to_owned())];
        assert_eq!(t.post("stripe", &body, &forged).await.status(), 401);
    }
    for id in ["evt_1", "evt_2"] {
        let answer = deliver_from(&t, &t.client, "stripe", id, &[]).await;
        assert_eq!(answer.status(), 200, "{id}");
    }
    let stored = t.stored();
    let limited = deliver_from(&t, &t.client, "stripe", "evt_3", &[]).await;
    assert_eq!(limited.status(), 429);
    let wait: u64 = limited.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=60).contains(&wait), "Retry-After {wait}");
    assert_eq!(limited.text().await.unwrap(), r#"{"error":"rate_limited"}"#);
    // A duplicate is a verified delivery too: it waits like the others.
    let again = deliver_from(&t, &t.client, "stripe", "evt_1", &[]).await;
    assert_eq!(again.status(), 429);
    assert_eq!(t.stored(), stored, "a rate-limited delivery writes nothing");
    assert_eq!(t.entries("stripe").len(), 2);
    let outcome = [("source", "stripe"), ("outcome", "rate_limited")];
    assert_eq!(t.metric(EVENTS, &outcome).await, 2.0);
    let status = [("source", "stripe"), ("status", "429")];
    assert_eq!(t.metric(HTTP_REQUESTS, &status).await, 2.0);
    // Another source's bucket is its own.
    let (body, headers) = signed(&t, "standard", "msg_other");
    assert_eq!(t.post("standard", &body, &headers).await.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limited_delivery_is_accepted_once_a_token_is_back() {
    let t = start().await;
    let mut limited = None;
    for i in 0..20 {
        let answer = deliver_from(&t, &t.client, "github", &format!("d-{i}"), &[]).await;
        if answer.status() == 429 {
            limited = Some((i, answer));
            break;
        }
        assert_eq!(answer.status(), 200);
    }
    let (i, answer) = limited.expect("the burst ran out");
    assert!(i >= 3, "the burst of 3 is admitted first (limited at {i})");
    assert_eq!(answer.headers()["retry-after"], "1");
    eventually(5, "the limited delivery to be accepted", || async {
        let retry = deliver_from(&t, &t.client, "github", &format!("d-{i}"), &[]).await;
        retry.status() == 200
    })
    .await;
    let ids: Vec<String> = t.entries("github").into_iter().map(|e| e.0).collect();
    assert_eq!(
        ids.last().map(String::as_str),
        Some(format!("d-{i}").as_str())
    );
    assert_eq!(ids.len(), i + 1, "each delivery once");
}
