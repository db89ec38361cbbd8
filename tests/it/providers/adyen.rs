//! Adyen's notification batches: verified as a whole, deduplicated per item.

use super::cases::{adyen_batch, adyen_item, start, ADYEN_KEY, ADYEN_PREFIX, MARKER};
use crate::support::metrics::{DUPLICATE_HITS, EVENTS};
use crate::support::settings::{source, ByteSize, SourceSettings};
use crate::support::{now, Backend, TestApp};

/// Signs each item as a one-item batch; returns the signed items' bytes and those one-item
/// notifications, which are what the stream entries hold.
fn signed_adyen_items(t: &TestApp, psps: &[&str]) -> (Vec<String>, Vec<String>) {
    let now = now();
    psps.iter()
        .map(|psp| {
            let single = adyen_batch(&[adyen_item(psp, "CAPTURE")]);
            let signed = String::from_utf8(t.sign_body("adyen", single.as_bytes(), &now)).unwrap();
            let item = signed[ADYEN_PREFIX.len() + r#"{"NotificationRequestItem":"#.len()
                ..signed.len() - "}]}".len()]
                .to_owned();
            (item, signed)
        })
        .unzip()
}

/// Posts a batch of signed items (Adyen has no signature header; `sign` gives the content type).
async fn post_batch(t: &TestApp, items: &[String]) -> reqwest::Response {
    let body = adyen_batch(items);
    let headers = t.sign("adyen", body.as_bytes(), &now());
    t.post("adyen", body.as_bytes(), &headers).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adyen_batches_are_deduplicated_per_item_and_verified_whole() {
    let t = start().await;
    let ids = |psps: &[&str]| -> Vec<String> {
        psps.iter()
            .map(|psp| format!("TestMerchant:{psp}:CAPTURE:true"))
            .collect()
    };
    let entry_ids = |t: &TestApp| -> Vec<String> {
        t.stream_entries("adyen")
            .into_iter()
            .map(|e| e.event_id)
            .collect()
    };

    // A batch of three new items: 200 [accepted], three entries, each its own item.
    let (items, singles) = signed_adyen_items(&t, &["9001", "9002", "9003"]);
    // Signing the whole batch gives the same bytes as signing its items one by one.
    let unsigned = adyen_batch(&["9001", "9002", "9003"].map(|psp| adyen_item(psp, "CAPTURE")));
    assert_eq!(
        t.sign_body("adyen", unsigned.as_bytes(), &now()),
        adyen_batch(&items).into_bytes()
    );
    let first = post_batch(&t, &items).await;
    assert_eq!(first.status(), 200);
    assert!(first.headers().get("idempotency-replayed").is_none());
    assert_eq!(first.text().await.unwrap(), "[accepted]");
    let entries = t.stream_entries("adyen");
    assert_eq!(entry_ids(&t), ids(&["9001", "9002", "9003"]));
    for (entry, single) in entries.iter().zip(&singles) {
        assert_eq!(entry.event_type, "CAPTURE");
        assert_eq!(String::from_utf8_lossy(&entry.body), *single);
    }
    let stored = t.stored();

    // One bad item among new ones: 401 and nothing stored, not even the good items.
    let (mut fresh, _) = signed_adyen_items(&t, &["9004", "9005", "9006"]);
    fresh[2] = fresh[2].replace(MARKER, "e2e-forged");
    let rejected = post_batch(&t, &fresh).await;
    assert_eq!(rejected.status(), 401);
    assert_eq!(t.stored(), stored);
    assert_eq!(entry_ids(&t).len(), 3);

    // The first batch again: every item a duplicate, the same answer, replayed.
    let again = post_batch(&t, &items).await;
    assert_eq!(again.status(), 200);
    assert_eq!(again.headers()["idempotency-replayed"], "true");
    assert_eq!(again.text().await.unwrap(), "[accepted]");
    assert_eq!(t.stored(), stored);

    // One new item between two seen ones: 200, one new entry, not a replay.
    let (new, new_single) = signed_adyen_items(&t, &["9007"]);
    let mixed = [items[1].clone(), new[0].clone(), items[2].clone()];
    let response = post_batch(&t, &mixed).await;
    assert_eq!(response.status(), 200);
    assert!(response.headers().get("idempotency-replayed").is_none());
    assert_eq!(response.text().await.unwrap(), "[accepted]");
    assert_eq!(entry_ids(&t), ids(&["9001", "9002", "9003", "9007"]));
    let last = t.stream_entries("adyen").pop().unwrap();
    assert_eq!(String::from_utf8_lossy(&last.body), new_single[0]);

    for (outcome, count) in [
        ("forwarded", 4.0),
        ("duplicate", 5.0),
        ("invalid_signature", 1.0),
    ] {
        let labels = [("source", "adyen"), ("outcome", outcome)];
        assert_eq!(t.metric(EVENTS, &labels).await, count, "{outcome}");
    }
    assert_eq!(t.metric(DUPLICATE_HITS, &[("source", "adyen")]).await, 5.0);
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_of_more_records_than_one_exists_takes_finds_a_record_in_its_last_part() {
    // 2 100 items with body records: 4 200 record keys, more than the script asks Redis about
    // in one EXISTS (4 000). The one item already forwarded comes last, so only the second
    // EXISTS can see its records; the batch must forward every other item and that one not again.
    let t = TestApp::builder(Backend::Redis)
        .server(|server| server.body_limit = ByteSize(8 << 20))
        .source(
            "adyen",
            SourceSettings {
                body_dedup: Some(true),
                max_batch_items: Some(2_100),
                ..source("adyen", ADYEN_KEY)
            },
        )
        .start()
        .await;
    let psps: Vec<String> = (0..2_100).map(|n| format!("{}", 20_000 + n)).collect();
    let psps: Vec<&str> = psps.iter().map(String::as_str).collect();
    let (items, _) = signed_adyen_items(&t, &psps);
    let seen = post_batch(&t, &items[2_099..]).await;
    assert_eq!(seen.status(), 200);
    assert_eq!(t.stream_entries("adyen").len(), 1);

    let batch = post_batch(&t, &items).await;
    assert_eq!(batch.status(), 200);
    assert!(batch.headers().get("idempotency-replayed").is_none());
    let entries = t.stream_entries("adyen");
    assert_eq!(entries.len(), 2_100, "each item once");
    let last = format!("TestMerchant:{}:CAPTURE:true", psps[2_099]);
    assert_eq!(entries.iter().filter(|e| e.event_id == last).count(), 1);
    assert_eq!(t.events("adyen", "duplicate").await, 1.0);
}
