//! Retries and dead letters: the same `Idempotency-Key` on every attempt with a rising
//! `X-Hookonce-Attempt`, `Retry-After` honoured on 429 and 503 for that event only (capped by
//! `max_backoff`), a poison event dead-lettered with its fields while the others flow (no
//! head-of-line blocking), `dead_letter_statuses` at once, a worker down then up.

use std::time::{Duration, Instant};

use super::*;
use crate::support::relay_worker::{Answer, RelayWorker};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_keep_the_key_and_count_attempts_up() {
    let worker = RelayWorker::start().await;
    let app = serve(vec![(
        "billing",
        route(&["stripe"], &worker.url("billing")),
    )])
    .await;
    worker.script(
        "billing",
        "evt_retry",
        &[
            Answer::status(500),
            Answer::status(502),
            Answer::status(404),
        ],
    );
    send(&app, "evt_retry", "invoice.paid").await;
    worker
        .wait_acknowledged("billing", &["evt_retry".to_owned()], 10)
        .await;
    let attempts = worker.of("billing", "evt_retry");
    let seen: Vec<(u32, u16)> = attempts.iter().map(|d| (d.attempt(), d.status)).collect();
    assert_eq!(seen, [(1, 500), (2, 502), (3, 404), (4, 200)]);
    assert!(attempts
        .iter()
        .all(|d| d.key() == dedup_key("stripe", "evt_retry")));
    let page = app.metrics().await;
    let count = |outcome| {
        metric(
            &page,
            DELIVERIES,
            &[("route", "billing"), ("outcome", outcome)],
        )
    };
    assert_eq!((count("failed"), count("delivered")), (3.0, 1.0));
    assert_eq!(metric(&page, ATTEMPT_SECONDS, &[("route", "billing")]), 4.0);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_is_honoured_for_that_event_only_and_capped() {
    let worker = RelayWorker::start().await;
    let capped = RouteSettings {
        max_backoff: ms(300),
        ..route(&["stripe"], &worker.url("capped"))
    };
    let app = serve(vec![
        (
            "billing",
            RouteSettings {
                max_backoff: secs(5),
                ..route(&["stripe"], &worker.url("billing"))
            },
        ),
        ("capped", capped),
    ])
    .await;
    worker.script("billing", "evt_429", &[Answer::retry_after(429, 1)]);
    worker.script("billing", "evt_503", &[Answer::retry_after(503, 1)]);
    worker.script("billing", "evt_500", &[Answer::status(500)]);
    // A Retry-After far above max_backoff waits max_backoff.
    worker.script("capped", "evt_429", &[Answer::retry_after(429, 30)]);
    worker.script("capped", "evt_503", &[Answer::retry_after(503, 30)]);
    worker.script("capped", "evt_500", &[Answer::retry_after(500, 30)]);
    for id in ["evt_429", "evt_503", "evt_500"] {
        send(&app, id, "invoice.paid").await;
    }
    let all: Vec<String> = ["evt_429", "evt_503", "evt_500"].map(String::from).to_vec();
    worker.wait_acknowledged("billing", &all, 15).await;
    worker.wait_acknowledged("capped", &all, 15).await;
    let gap = |route: &str, id: &str| {
        let attempts = worker.of(route, id);
        assert_eq!(attempts.len(), 2, "{route} {id}: {:?}", worker.summary());
        attempts[1].at - attempts[0].at
    };
    for id in ["evt_429", "evt_503"] {
        let waited = gap("billing", id);
        assert!(
            waited >= Duration::from_millis(950),
            "{id} retried after {waited:?}"
        );
        let capped = gap("capped", id);
        assert!(
            capped < Duration::from_secs(5),
            "{id} capped retry after {capped:?}"
        );
    }
    // A 500 is retried on the route's backoff (20 ms, at most 200 ms), not a Retry-After.
    assert!(gap("billing", "evt_500") < Duration::from_millis(900));
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poison_event_is_dead_lettered_while_the_others_flow() {
    let worker = RelayWorker::start().await;
    let billing = RouteSettings {
        max_attempts: 3,
        max_backoff: secs(5),
        // One delivery in flight: the poison event's backoff must not hold the slot.
        concurrency: 1,
        ..route(&["stripe"], &worker.url("billing"))
    };
    let app = serve(vec![("billing", billing)]).await;
    // Its retry is due 4 s later: the others (five ingests and deliveries) must be done before,
    // with room for a loaded machine's slow moments (2 s left it too little).
    worker.poison("billing", "evt_poison", Answer::retry_after(503, 4));
    let started = Instant::now();
    send(&app, "evt_poison", "invoice.paid").await;
    worker.wait_deliveries(1, 10).await;
    let others = ids("evt_ok", 5);
    for id in &others {
        send(&app, id, "invoice.paid").await;
    }
    worker.wait_acknowledged("billing", &others, 10).await;
    let poison = worker.of("billing", "evt_poison");
    let last_ok = worker
        .to("billing")
        .iter()
        .filter(|d| d.ok())
        .map(|d| d.at)
        .max();
    assert_eq!(
        poison.len(),
        1,
        "the others waited for the poison event's retry"
    );
    let took = last_ok.unwrap() - started;
    assert!(
        took < Duration::from_millis(3900),
        "the others were delivered {took:?} after the poison event (its retry is due at 4 s): {:?}",
        worker.summary()
    );

    let redis = app.redis.as_ref().unwrap();
    let dlq = dead_letters("stripe", "billing");
    crate::support::eventually(25, "the poison event in the dead letters", || {
        let n = xlen(redis, &dlq);
        async move { n == 1 }
    })
    .await;
    let poison = worker.of("billing", "evt_poison");
    assert_eq!(
        poison.iter().map(|d| d.attempt()).collect::<Vec<_>>(),
        [1, 2, 3]
    );
    let original = xrange(redis, &stream("stripe"))
        .into_iter()
        .find(|(_, fields)| fields["event_id"] == "evt_poison")
        .unwrap();
    let (_, letter) = xrange(redis, &dlq).remove(0);
    for field in [
        "source",
        "provider",
        "event_id",
        "event_type",
        "received_at",
        "body",
        "content_type",
    ] {
        assert_eq!(letter[field], original.1[field], "{field}");
    }
    assert_eq!(letter["route"], "billing");
    assert_eq!(letter["entry_id"], original.0);
    assert_eq!(letter["attempts"], "3");
    assert_eq!(letter["last_status"], "503");
    assert!(letter.contains_key("last_error"));
    let at: u64 = letter["dead_lettered_at"].parse().unwrap();
    assert!(at.abs_diff(crate::support::now_unix() as u64 * 1000) < 60_000);
    settled(redis, &stream("stripe"), &["billing"], 10).await;
    let page = app.metrics().await;
    let count = |outcome| {
        metric(
            &page,
            DELIVERIES,
            &[("route", "billing"), ("outcome", outcome)],
        )
    };
    assert_eq!(
        (count("delivered"), count("failed"), count("dead_lettered")),
        (5.0, 3.0, 1.0)
    );
    crate::support::eventually(15, "the dead-letter gauge to read 1", || async {
        let page = app.metrics().await;
        metric(
            &page,
            DEAD_LETTERS,
            &[("route", "billing"), ("source", "stripe")],
        ) == 1.0
    })
    .await;
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letter_statuses_and_unanswered_attempts_go_to_the_dead_letters() {
    let worker = RelayWorker::start().await;
    let closed = format!(
        "http://127.0.0.1:{}/gone",
        crate::support::redis::free_port()
    );
    let app = serve(vec![
        (
            "strict",
            RouteSettings {
                dead_letter_statuses: vec![400, 410, 422],
                ..route(&["stripe"], &worker.url("strict"))
            },
        ),
        (
            "gone",
            RouteSettings {
                max_attempts: 2,
                ..route(&["stripe"], &closed)
            },
        ),
    ])
    .await;
    worker.poison("strict", "evt_bad", Answer::status(422));
    send(&app, "evt_bad", "invoice.paid").await;
    let redis = app.redis.as_ref().unwrap();
    crate::support::eventually(10, "both dead letters", || {
        let n = xlen(redis, &dead_letters("stripe", "strict"))
            + xlen(redis, &dead_letters("stripe", "gone"));
        async move { n == 2 }
    })
    .await;
    assert_eq!(
        worker.of("strict", "evt_bad").len(),
        1,
        "422 is not retried"
    );
    let (_, strict) = xrange(redis, &dead_letters("stripe", "strict")).remove(0);
    assert_eq!(
        (strict["attempts"].as_str(), strict["last_status"].as_str()),
        ("1", "422")
    );
    // No answer at all: an empty last_status and the error said.
    let (_, gone) = xrange(redis, &dead_letters("stripe", "gone")).remove(0);
    assert_eq!(
        (gone["attempts"].as_str(), gone["last_status"].as_str()),
        ("2", "")
    );
    assert!(!gone["last_error"].is_empty());
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_down_then_up_loses_nothing() {
    let worker = RelayWorker::start().await;
    let billing = RouteSettings {
        max_attempts: 100,
        ..route(&["stripe"], &worker.url("billing"))
    };
    let app = serve(vec![("billing", billing)]).await;
    // Sick first (503 to everything), then gone: connection refused.
    worker.answer(Answer::status(503));
    send(&app, "evt_sick", "invoice.paid").await;
    worker.wait_deliveries(1, 10).await;
    worker.stop().await;
    worker.answer(Answer::OK);
    let mut wanted = ids("evt_down", 10);
    for id in &wanted {
        send(&app, id, "invoice.paid").await;
    }
    super::metric_reaches(
        &app,
        DELIVERIES,
        &[("route", "billing"), ("outcome", "failed")],
        20.0,
    )
    .await;
    assert!(worker
        .deliveries()
        .iter()
        .all(|d| d.event_id() == "evt_sick"));
    worker.restart().await;
    wanted.push("evt_sick".to_owned());
    worker.wait_acknowledged("billing", &wanted, 15).await;
    let redis = app.redis.as_ref().unwrap();
    settled(redis, &stream("stripe"), &["billing"], 10).await;
    let acknowledged = worker.acknowledged("billing");
    assert!(acknowledged.values().all(|n| *n == 1), "{acknowledged:?}");
    assert_eq!(acknowledged.len(), 11);
    assert_eq!(xlen(redis, &dead_letters("stripe", "billing")), 0);
    app.stop().await;
}
