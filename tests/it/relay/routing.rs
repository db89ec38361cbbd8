//! Routing and fan-out: each event is delivered once to every route whose sources and globs match
//! it, acknowledged without a delivery (`skipped`) for the others; a webhook's duplicates are not
//! delivered again; what a worker receives (body, headers, the route's own headers); signed
//! deliveries checked by the Standard Webhooks rules.

use std::collections::BTreeMap;

use hookonce::config::Secret;

use super::*;
use crate::support::relay_worker::{verify_standard_webhook, RelayWorker};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_event_goes_once_to_every_matching_route_and_the_others_skip_it() {
    let worker = RelayWorker::start().await;
    let app = serve(vec![
        (
            "billing",
            typed(
                route(&["stripe"], &worker.url("billing")),
                &["invoice.*", "payment_intent.succeeded"],
            ),
        ),
        ("audit", route(&["stripe", "github"], &worker.url("audit"))),
        (
            "charges",
            typed(route(&["stripe"], &worker.url("charges")), &["charge.?"]),
        ),
    ])
    .await;
    let events = [
        ("evt_inv1", "invoice.paid"),
        // `*` runs over dots too.
        ("evt_inv2", "invoice.payment.failed"),
        ("evt_pi", "payment_intent.succeeded"),
        // `?` is one character: neither billing nor charges.
        ("evt_ch", "charge.refunded"),
        ("evt_c1", "charge.x"),
    ];
    for (id, event_type) in events {
        send(&app, id, event_type).await;
    }
    // Duplicates of a webhook are answered 200 and never reach the stream, nor any worker.
    send(&app, "evt_inv1", "invoice.paid").await;
    send(&app, "evt_pi", "payment_intent.succeeded").await;
    let redis = app.redis.as_ref().unwrap();
    settled(
        redis,
        &stream("stripe"),
        &["billing", "audit", "charges"],
        15,
    )
    .await;
    let once = |ids: &[&str]| -> BTreeMap<String, usize> {
        ids.iter().map(|id| (id.to_string(), 1)).collect()
    };
    assert_eq!(
        worker.acknowledged("billing"),
        once(&["evt_inv1", "evt_inv2", "evt_pi"])
    );
    assert_eq!(
        worker.acknowledged("audit"),
        once(&["evt_c1", "evt_ch", "evt_inv1", "evt_inv2", "evt_pi"])
    );
    assert_eq!(worker.acknowledged("charges"), once(&["evt_c1"]));
    assert_eq!(worker.deliveries().len(), 9, "{:?}", worker.summary());

    let page = app.metrics().await;
    let count = |route: &str, outcome: &str| {
        metric(&page, DELIVERIES, &[("route", route), ("outcome", outcome)])
    };
    assert_eq!(
        (count("billing", "delivered"), count("billing", "skipped")),
        (3.0, 2.0)
    );
    assert_eq!(
        (count("audit", "delivered"), count("audit", "skipped")),
        (5.0, 0.0)
    );
    assert_eq!(
        (count("charges", "delivered"), count("charges", "skipped")),
        (1.0, 4.0)
    );
    assert_eq!(
        count("billing", "failed") + count("billing", "dead_lettered"),
        0.0
    );
    assert_eq!(metric(&page, ATTEMPT_SECONDS, &[("route", "audit")]), 5.0);
    assert_eq!(
        metric(&page, END_TO_END_SECONDS, &[("route", "billing")]),
        3.0
    );
    // The lag gauge is sampled: it shows up, then reads 0 for every route and source.
    crate::support::eventually(15, "the lag gauges to read 0", || async {
        let page = app.metrics().await;
        let lag = |route| metric(&page, LAG, &[("route", route), ("source", "stripe")]);
        page.contains(LAG) && lag("billing") + lag("audit") + lag("charges") == 0.0
    })
    .await;
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_receives_the_raw_body_and_the_hookonce_headers() {
    let worker = RelayWorker::start().await;
    let mut billing = route(&["stripe"], &worker.url("billing"));
    billing.headers = BTreeMap::from([
        (
            "Authorization".to_owned(),
            Secret::literal("Bearer t0k").unwrap(),
        ),
        ("X-Team".to_owned(), Secret::literal("payments").unwrap()),
    ]);
    let app = serve(vec![("billing", billing)]).await;
    send(&app, "evt_hdr", "invoice.paid").await;
    worker
        .wait_acknowledged("billing", &["evt_hdr".to_owned()], 10)
        .await;
    let redis = app.redis.as_ref().unwrap();
    let (_, entry) = xrange(redis, &stream("stripe")).remove(0);
    let delivery = worker.to("billing").remove(0);
    assert_eq!(
        delivery.body.as_ref(),
        stripe_event("evt_hdr", "invoice.paid")
    );
    assert_eq!(delivery.key(), dedup_key("stripe", "evt_hdr"));
    assert_eq!(delivery.header("x-hookonce-source"), "stripe");
    assert_eq!(delivery.header("x-hookonce-provider"), "stripe");
    assert_eq!(delivery.header("x-hookonce-event-id"), "evt_hdr");
    assert_eq!(delivery.header("x-hookonce-event-type"), "invoice.paid");
    assert_eq!(delivery.header("x-hookonce-attempt"), "1");
    assert_eq!(
        delivery.header("x-hookonce-received-at"),
        entry["received_at"]
    );
    let received_at: u64 = entry["received_at"].parse().unwrap();
    assert!(received_at <= delivery.at_ms && delivery.at_ms - received_at < 10_000);
    // The stream entry keeps the delivery's Content-Type, and the relay sends it on.
    assert_eq!(entry["content_type"], "application/json");
    assert_eq!(delivery.header("content-type"), "application/json");
    assert_eq!(delivery.header("authorization"), "Bearer t0k");
    assert_eq!(delivery.header("x-team"), "payments");
    // Unsigned routes send no Standard Webhooks headers.
    assert_eq!(delivery.header("webhook-signature"), "");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_and_password_in_the_url_go_as_basic_auth_unless_the_route_sets_authorization() {
    let worker = RelayWorker::start().await;
    let with_user = |route: &str| {
        worker
            .url(route)
            .replacen("http://", "http://us%40er:p%3Ass@", 1)
    };
    let mut bearer = route(&["stripe"], &with_user("bearer"));
    bearer.headers = BTreeMap::from([(
        "Authorization".to_owned(),
        Secret::literal("Bearer t0k").unwrap(),
    )]);
    let app = serve(vec![
        ("basic", route(&["stripe"], &with_user("basic"))),
        ("bearer", bearer),
    ])
    .await;
    send(&app, "evt_auth", "invoice.paid").await;
    let wanted = ["evt_auth".to_owned()];
    worker.wait_acknowledged("basic", &wanted, 10).await;
    worker.wait_acknowledged("bearer", &wanted, 10).await;
    // RFC 7617: base64 of "us@er:p:ss", the URL's parts percent-decoded.
    assert_eq!(
        worker.to("basic").remove(0).header("authorization"),
        "Basic dXNAZXI6cDpzcw=="
    );
    assert_eq!(
        worker.to("bearer").remove(0).header("authorization"),
        "Bearer t0k"
    );
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signed_deliveries_verify_by_the_standard_webhooks_rules() {
    const SIGNING: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
    let worker = RelayWorker::start().await;
    let mut signed = route(&["stripe", "github"], &worker.url("signed"));
    signed.signing_secret = Some(Secret::literal(SIGNING).unwrap());
    let app = serve(vec![("signed", signed)]).await;
    let wanted = ids("evt_sig", 3);
    for id in &wanted {
        send(&app, id, "invoice.paid").await;
    }
    worker.wait_acknowledged("signed", &wanted, 10).await;
    let deliveries = worker.to("signed");
    for delivery in &deliveries {
        verify_standard_webhook(SIGNING, delivery)
            .unwrap_or_else(|e| panic!("{}: {e}", delivery.event_id()));
        // A changed body or another secret does not verify: the check is not vacuous.
        let mut tampered = delivery.clone();
        tampered.body = format!("{} ", String::from_utf8_lossy(&delivery.body)).into();
        assert!(verify_standard_webhook(SIGNING, &tampered).is_err());
        assert!(
            verify_standard_webhook("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", delivery).is_err()
        );
    }
    // One webhook-id per event, the same on every attempt, distinct across events.
    let mut webhook_ids: Vec<&str> = deliveries.iter().map(|d| d.header("webhook-id")).collect();
    webhook_ids.sort();
    webhook_ids.dedup();
    assert_eq!(webhook_ids.len(), 3);
    app.stop().await;
}
