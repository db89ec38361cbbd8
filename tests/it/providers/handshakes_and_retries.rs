//! Provider protocol details beyond signing: Slack's URL-verification handshake, and Linear's
//! retries that carry a fresh signed timestamp.

use super::cases::start;
use crate::support::{now, now_unix, SignOptions};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slack_url_verification_echoes_the_challenge_and_stores_nothing() {
    let t = start().await;
    let challenge = "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P";
    let body = format!(
        r#"{{"token":"Jhj5dZrVaK7ZwHHjRyZWjbDl","challenge":"{challenge}","type":"url_verification"}}"#
    );
    let (response, _) = t.deliver_signed("slack", body.as_bytes(), &now()).await;
    assert_eq!(response.status(), 200);
    let answer: serde_json::Value = serde_json::from_str(&response.text().await.unwrap()).unwrap();
    assert_eq!(answer, serde_json::json!({ "challenge": challenge }));
    assert_eq!(t.stored(), 0);
    assert!(t.stream_entries("slack").is_empty());
    // An unsigned handshake is not answered.
    let forged = t.post("slack", body.as_bytes(), &[]).await;
    assert_eq!(forged.status(), 401);
    assert_eq!(t.stored(), 0);
    t.stop().await;
}

/// Linear stamps every attempt with a fresh `webhookTimestamp`: a retry must be a duplicate,
/// not a payload mismatch. A different payload under the same delivery ID still is one.
#[tokio::test]
async fn a_linear_retry_with_a_fresh_timestamp_is_a_duplicate() {
    let t = start().await;
    let options = SignOptions {
        event_id: Some("linear-retry-1".into()),
        now_unix: now_unix(),
        ..SignOptions::default()
    };
    let body = |stamp_ms: i64, title: &str| {
        format!(
            r#"{{"action":"create","type":"Issue","data":{{"title":"{title}"}},"webhookTimestamp":{stamp_ms}}}"#
        )
    };
    let now_ms = now_unix() * 1000;
    let first = t
        .deliver("linear", body(now_ms - 20_000, "a").as_bytes(), &options)
        .await;
    assert_eq!(first.status(), 200);
    let retry = t
        .deliver("linear", body(now_ms, "a").as_bytes(), &options)
        .await;
    assert_eq!(retry.status(), 200);
    assert_eq!(retry.headers()["idempotency-replayed"], "true");
    let other = t
        .deliver("linear", body(now_ms, "b").as_bytes(), &options)
        .await;
    assert_eq!(other.status(), 422);
    assert_eq!(t.stream_entries("linear").len(), 1);
}
