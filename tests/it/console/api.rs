//! The JSON API: 401 without a valid bearer token, 403 for a viewer's write (audited), the
//! fields of an event (its duplicates and relay state), a replay delivered once however often
//! it is asked for.

use serde_json::Value;

use super::*;
use crate::relay::{dead_letters, send, stripe_event, xlen};
use crate::support::now;
use crate::support::relay_worker::Answer;

async fn get(app: &TestApp, token: Option<&str>, path: &str) -> (u16, Value) {
    let mut request = client().get(url(app, path));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (
        status,
        serde_json::from_str(&response.text().await.unwrap()).unwrap_or(Value::Null),
    )
}

async fn post(app: &TestApp, token: &str, path: &str) -> (u16, Value) {
    let response = client()
        .post(url(app, path))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (
        status,
        serde_json::from_str(&response.text().await.unwrap()).unwrap_or(Value::Null),
    )
}

/// GETs `path` as the viewer until `done` holds of its JSON, for at most 15 s.
async fn poll(app: &TestApp, path: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    loop {
        let (_, value) = get(app, Some(VIEWER), path).await;
        if done(&value) {
            return value;
        }
        assert!(std::time::Instant::now() < deadline, "{path}: {value}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_needs_a_token_and_a_viewer_cannot_write() {
    let worker = RelayWorker::start().await;
    let app = start(&worker).await;
    for path in [
        "/api/v1/overview",
        "/api/v1/events?source=stripe",
        "/api/v1/dead-letters",
        "/api/v1/audit",
    ] {
        assert_eq!(get(&app, None, path).await.0, 401, "{path}");
        assert_eq!(get(&app, Some("not-a-token"), path).await.0, 401, "{path}");
        assert_eq!(get(&app, Some(VIEWER), path).await.0, 200, "{path}");
    }
    let letter = dead_letter(&app, &worker, "evt_api_dead").await;
    let (status, listed) = get(&app, Some(VIEWER), "/api/v1/dead-letters?route=billing").await;
    assert_eq!(status, 200);
    let listed = listed["dead_letters"].as_array().unwrap().clone();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["id"], letter.as_str());
    assert_eq!(listed[0]["event_id"], "evt_api_dead");

    let replay = format!("/api/v1/dead-letters/billing/{letter}/replay");
    let (status, body) = post(&app, VIEWER, &replay).await;
    assert_eq!(status, 403, "{body}");
    let unauthenticated = client().post(url(&app, &replay)).send().await.unwrap();
    assert_eq!(unauthenticated.status(), 401);
    let (_, audit) = get(&app, Some(VIEWER), "/api/v1/audit").await;
    let first = &audit["entries"][0];
    assert_eq!(first["who"], "viewer-token-1", "{audit}");
    assert_eq!(first["action"], "dead_letter.replay");
    assert!(
        first["result"].as_str().unwrap().starts_with("refused"),
        "{audit}"
    );
    assert!(
        !audit.to_string().contains(VIEWER),
        "a token in the audit log: {audit}"
    );

    worker.heal("billing", "evt_api_dead");
    let (status, body) = post(&app, OPERATOR, &replay).await;
    assert_eq!(
        (status, body["replayed"].as_u64()),
        (200, Some(1)),
        "{body}"
    );
    // A second click finds nothing to replay: the event is delivered once.
    let (status, body) = post(&app, OPERATOR, &replay).await;
    assert_eq!(
        (status, body["replayed"].as_u64()),
        (200, Some(0)),
        "{body}"
    );
    worker
        .wait_acknowledged("billing", &["evt_api_dead".to_owned()], 10)
        .await;
    let (_, audit) = get(&app, Some(VIEWER), "/api/v1/audit").await;
    let entries = audit["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 3, "{audit}");
    assert_eq!(entries[1]["who"], "operator-token-1");
    assert!(entries[1]["result"].as_str().unwrap().contains("replayed"));

    let delete = client()
        .delete(url(&app, &format!("/api/v1/dead-letters/billing/{letter}")))
        .bearer_auth(VIEWER)
        .send()
        .await
        .unwrap();
    assert_eq!(delete.status(), 403);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_shows_its_fields_duplicates_and_relay_state() {
    let worker = RelayWorker::start().await;
    let app = start(&worker).await;
    let body = stripe_event("evt_fields", "invoice.paid");
    for _ in 0..3 {
        assert_eq!(app.deliver("stripe", &body, &now()).await.status(), 200);
    }
    worker
        .wait_acknowledged("billing", &["evt_fields".to_owned()], 10)
        .await;
    let (status, page) = get(&app, Some(VIEWER), "/api/v1/events?source=stripe").await;
    assert_eq!(status, 200);
    assert_eq!(page["events"][0]["event_id"], "evt_fields", "{page}");
    let (_, found) = get(
        &app,
        Some(VIEWER),
        "/api/v1/events?source=stripe&id=evt_fields",
    )
    .await;
    assert_eq!(found["events"].as_array().unwrap().len(), 1, "{found}");
    let (_, none) = get(
        &app,
        Some(VIEWER),
        "/api/v1/events?source=stripe&id=evt_nope",
    )
    .await;
    assert_eq!(none["events"].as_array().unwrap().len(), 0, "{none}");

    let event = poll(&app, "/api/v1/events/stripe/evt_fields", |event| {
        event["relay"][0]["state"] == "delivered"
    })
    .await;
    assert_eq!(event["source"], "stripe");
    assert_eq!(event["event_id"], "evt_fields");
    assert_eq!(event["event_type"], "invoice.paid");
    assert!(
        event["received_at"].as_u64().unwrap() > 1_700_000_000_000,
        "{event}"
    );
    assert_eq!(event["body"], String::from_utf8(body).unwrap());
    assert_eq!(event["duplicates"]["count"], 2, "{event}");
    assert!(event["duplicates"]["last_at"].as_u64().is_some(), "{event}");
    assert_eq!(event["record"]["state"], "done");
    assert!(event["record"]["window_left_ms"].as_u64().unwrap() > 0);
    assert_eq!(event["relay"][0]["route"], "billing");
    let (status, _) = get(&app, Some(VIEWER), "/api/v1/events/stripe/evt_nope").await;
    assert_eq!(status, 404);
    let (status, _) = get(&app, Some(VIEWER), "/api/v1/events/nosuch/evt_fields").await;
    assert_eq!(status, 404);

    // The dead-lettered event reads as such, with its attempts and last error.
    dead_letter(&app, &worker, "evt_fields_dead").await;
    let (_, dead) = get(&app, Some(VIEWER), "/api/v1/events/stripe/evt_fields_dead").await;
    let relay = &dead["relay"][0];
    assert_eq!(relay["state"], "dead_lettered", "{dead}");
    assert_eq!(relay["attempts"], 2, "{dead}");
    assert!(
        relay["last_error"].as_str().unwrap().contains("500"),
        "{dead}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_overview_counts_what_was_sent_across_the_cluster() {
    let worker = RelayWorker::start().await;
    let app = start(&worker).await;
    for id in ["evt_o1", "evt_o2", "evt_o1"] {
        send(&app, id, "invoice.paid").await;
    }
    let bad = app
        .post(
            "stripe",
            b"{}",
            &[("stripe-signature".into(), "t=1,v1=00".into())],
        )
        .await;
    assert_eq!(bad.status(), 401);
    let overview = poll(&app, "/api/v1/overview", |overview| {
        overview["sources"]
            .as_array()
            .and_then(|s| s.iter().find(|s| s["source"] == "stripe"))
            .is_some_and(|s| s["last_hour"]["rejected"] == 1 && s["last_hour"]["forwarded"] == 2)
    })
    .await;
    let stripe = overview["sources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["source"] == "stripe")
        .unwrap();
    assert_eq!(stripe["last_hour"]["duplicates"], 1, "{overview}");
    assert_eq!(
        stripe["last_hour"]["rejected_by_outcome"]["invalid_signature"],
        1
    );
    assert_eq!(stripe["per_minute"].as_array().unwrap().len(), 60);
    assert_eq!(overview["routes"][0]["route"], "billing");
    assert_eq!(overview["store"]["healthy"], true);
    // The counts are in Redis, where every daemon adds its own.
    let mut redis = app.redis.as_ref().unwrap().connection();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("hookonce:{console}:counts:*")
        .query(&mut redis)
        .unwrap();
    assert!(!keys.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filtered_replay_counts_first_and_replays_only_what_matches() {
    let worker = RelayWorker::start().await;
    let app = start(&worker).await;
    let sent = [
        ("evt_f1", "invoice.paid"),
        ("evt_f2", "invoice.voided"),
        ("evt_f3", "charge.failed"),
    ];
    for (id, event_type) in sent {
        worker.poison("billing", id, Answer::status(500));
        send(&app, id, event_type).await;
    }
    let redis = app.redis.as_ref().unwrap();
    let dlq = dead_letters("stripe", "billing");
    eventually(10, "three dead letters", || {
        let len = xlen(redis, &dlq);
        async move { len == 3 }
    })
    .await;
    let path = "/api/v1/dead-letters/billing/replay-matching?event_type=invoice.*";
    let (status, preview) = get(&app, Some(VIEWER), path).await;
    assert_eq!(
        (status, preview["count"].as_u64()),
        (200, Some(2)),
        "{preview}"
    );
    let (status, _) = post(&app, VIEWER, path).await;
    assert_eq!(status, 403);
    assert_eq!(xlen(redis, &dlq), 3);
    for (id, _) in sent {
        worker.heal("billing", id);
    }
    let (status, body) = post(&app, OPERATOR, &format!("{path}&previewed=2")).await;
    assert_eq!(
        (status, body["replayed"].as_u64()),
        (200, Some(2)),
        "{body}"
    );
    worker
        .wait_acknowledged("billing", &["evt_f1".to_owned(), "evt_f2".to_owned()], 10)
        .await;
    let left = crate::relay::xrange(redis, &dlq);
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].1["event_id"], "evt_f3");
    let (_, audit) = get(&app, Some(VIEWER), "/api/v1/audit").await;
    let newest = &audit["entries"][0];
    assert_eq!(newest["action"], "dead_letter.replay_matching");
    assert_eq!(newest["target"], "billing (source=* event_type=invoice.*)");
    assert_eq!(
        newest["result"],
        "Replayed 2 dead letters (the preview counted 2)."
    );
}
