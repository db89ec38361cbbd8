//! Every provider end to end: signed by the provider's own `sign_body`/`sign`, verified by the
//! daemon, deduplicated in a real Redis and counted.
//!
//! Per provider: a signed delivery is forwarded once with the right `event_id`, `event_type` and
//! body; the same delivery again (re-signed a second later where the scheme signs a timestamp)
//! is a duplicate with `Idempotency-Replayed: true`; a bad signature is 401 and writes nothing;
//! every outcome shows in `/metrics`.

use super::cases::{case, options, start, MARKER};
use crate::support::metrics::{DUPLICATE_HITS, EVENTS, HTTP_REQUESTS};
use crate::support::now_unix;

/// The whole per-provider scenario.
async fn forwarded_once_duplicates_absorbed_forgeries_rejected(source: &'static str) {
    let t = start().await;
    let case = case(source);
    let provider = t.provider(source);
    let now = now_unix();

    // 1. A signed delivery: forwarded, one stream entry.
    let (first, sent) = t
        .deliver_signed(source, case.body.as_bytes(), &options(&case, now))
        .await;
    assert_eq!(first.status(), 200, "{source}: {:?}", first.text().await);
    assert!(first.headers().get("idempotency-replayed").is_none());
    let ack = first.text().await.unwrap();
    assert_eq!(ack, provider.ack().body, "{source}");
    let entries = t.stream_entries(source);
    assert_eq!(entries.len(), 1, "{source}");
    let entry = &entries[0];
    assert_eq!(entry.source, source);
    assert_eq!(entry.provider, provider.name());
    assert_eq!(entry.event_id, case.event_id, "{source}");
    assert_eq!(entry.event_type, case.event_type, "{source}");
    assert_eq!(
        String::from_utf8_lossy(&entry.body),
        String::from_utf8_lossy(&sent),
        "{source}: the entry body is the body sent"
    );
    assert!(entry.received_at.abs_diff(now as u64 * 1000) < 60_000);
    let stored = t.stored();

    // 2. The same delivery again, re-signed a second later: a duplicate, nothing new stored.
    let (again, resent) = t
        .deliver_signed(source, &sent, &options(&case, now + 1))
        .await;
    assert_eq!(resent, sent, "{source}: re-signing kept the body");
    assert_eq!(again.status(), 200, "{source}");
    assert_eq!(again.headers()["idempotency-replayed"], "true", "{source}");
    assert_eq!(again.text().await.unwrap(), ack);
    assert_eq!(t.stream_entries(source).len(), 1, "{source}");
    assert_eq!(t.stored(), stored, "{source}");

    // 3. A bad signature: 401, nothing written.
    let mut headers = t.sign(source, &sent, &options(&case, now));
    let mut forged = String::from_utf8(sent.clone()).unwrap();
    if source == "gitlab" {
        // GitLab signs nothing: the token is the whole proof.
        for (name, value) in &mut headers {
            if name == "X-Gitlab-Token" {
                *value = "not-the-token".to_owned();
            }
        }
    } else {
        assert!(forged.contains(MARKER), "{source}");
        forged = forged.replace(MARKER, "e2e-forged");
    }
    let rejected = t.post(source, forged.as_bytes(), &headers).await;
    assert_eq!(rejected.status(), 401, "{source}");
    assert_eq!(
        rejected.text().await.unwrap(),
        r#"{"error":"invalid_signature"}"#
    );
    assert_eq!(t.stored(), stored, "{source}: a rejection writes nothing");
    assert_eq!(t.stream_entries(source).len(), 1, "{source}");

    // 4. Every outcome counted.
    for (outcome, count) in [
        ("forwarded", 1.0),
        ("duplicate", 1.0),
        ("invalid_signature", 1.0),
    ] {
        let labels = [("source", source), ("outcome", outcome)];
        assert_eq!(t.metric(EVENTS, &labels).await, count, "{source} {outcome}");
    }
    assert_eq!(t.metric(DUPLICATE_HITS, &[("source", source)]).await, 1.0);
    for (status, count) in [("200", 2.0), ("401", 1.0)] {
        let labels = [("source", source), ("status", status)];
        assert_eq!(
            t.metric(HTTP_REQUESTS, &labels).await,
            count,
            "{source} {status}"
        );
    }
    t.stop().await;
}

macro_rules! every_provider {
    ($($name:ident),* $(,)?) => {
        mod per_provider {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::forwarded_once_duplicates_absorbed_forgeries_rejected(stringify!($name))
                        .await;
                }
            )*

            #[test]
            fn every_known_provider_has_a_case() {
                let covered = [$(stringify!($name)),*];
                for name in hookonce::webhooks::providers::names() {
                    assert!(covered.contains(&name), "no end-to-end test for {name}");
                }
            }
        }
    };
}

every_provider!(
    stripe,
    standard,
    github,
    adyen,
    adyen_platform,
    shopify,
    slack,
    paddle,
    square,
    linear,
    gitlab,
    generic,
);
