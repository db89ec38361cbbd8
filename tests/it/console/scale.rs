//! Each console page against a stream of many entries: a bounded number of Redis calls, so its
//! time does not grow with the stream. The stream is filled with pipelined `XADD`s (200,000
//! entries; `HOOKONCE_CONSOLE_SCALE_ENTRIES=1000000` for the measurement in BENCHMARKS.md), the
//! route's group made to stand past every entry and 1,000 dead letters written, so that an
//! event's relay state takes the longest path (its dead-letter lookup). Every page must answer
//! within 500 ms here (a debug build on a shared machine); the timings are printed.

use std::time::{Duration, Instant};

use crate::support::settings::secs;

use super::*;

const DEAD_LETTERS: usize = 1_000;

fn fill(redis: &mut redis::Connection, stream: &str, n: usize) -> Vec<String> {
    let body = crate::relay::stripe_event("evt_fill", "invoice.paid");
    let mut ids = Vec::with_capacity(n);
    for chunk in (0..n).collect::<Vec<_>>().chunks(10_000) {
        let mut pipe = redis::pipe();
        for i in chunk {
            pipe.cmd("XADD")
                .arg(stream)
                .arg("*")
                .arg("source")
                .arg("stripe")
                .arg("provider")
                .arg("stripe")
                .arg("event_id")
                .arg(format!("evt_fill_{i}"))
                .arg("event_type")
                .arg("invoice.paid")
                .arg("received_at")
                .arg(1_764_000_000_000u64 + *i as u64)
                .arg("content_type")
                .arg("application/json")
                .arg("body")
                .arg(body.as_slice());
        }
        let added: Vec<String> = pipe.query(redis).unwrap();
        ids.extend(added);
    }
    ids
}

/// The best of five GETs of `url`, with the viewer's token (the API) or session `cookie` (pages).
async fn time(client: &reqwest::Client, url: &str, cookie: &str) -> Duration {
    let mut best = Duration::MAX;
    for _ in 0..5 {
        let started = Instant::now();
        let response = client
            .get(url)
            .bearer_auth(VIEWER)
            .header("cookie", cookie)
            .send()
            .await
            .unwrap();
        let status = response.status();
        response.bytes().await.unwrap();
        best = best.min(started.elapsed());
        assert_eq!(status, 200, "{url}");
    }
    best
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_page_is_bounded_with_a_large_stream() {
    let n: usize = std::env::var("HOOKONCE_CONSOLE_SCALE_ENTRIES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200_000);
    let worker = RelayWorker::start().await;
    let billing = route(&["stripe"], &worker.url("billing"));
    // Each page must answer 200 five times: a store timeout a loaded machine's slow moment stays
    // within (the bound below is on the best of the five, and is what this test measures).
    let app = TestApp::builder(Backend::Redis)
        .store(|s| s.timeout = secs(5))
        .relay(|r| *r = crate::relay::relay(false, vec![("billing", billing)]))
        .console(|c| c.viewer_tokens = vec![Secret::literal(VIEWER).unwrap()])
        .start()
        .await;
    let mut redis = app.redis.as_ref().unwrap().connection();
    let stream = crate::relay::stream("stripe");
    let filled = Instant::now();
    let ids = fill(&mut redis, &stream, n);
    let fill_time = filled.elapsed();
    let (oldest, middle) = (&ids[0], &ids[n / 2]);
    // The oldest event is the one found through its record; the group stands past every entry.
    let _: () = redis::cmd("SET")
        .arg(crate::relay::dedup_key("stripe", "evt_fill_0"))
        .arg(format!("{oldest} AAAAAAAAAA"))
        .arg("PX")
        .arg(3_600_000)
        .query(&mut redis)
        .unwrap();
    let _: () = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(&stream)
        .arg(crate::relay::group("billing"))
        .arg("$")
        .query(&mut redis)
        .unwrap();
    let dlq = dead_letters("stripe", "billing");
    let mut pipe = redis::pipe();
    for i in 0..DEAD_LETTERS {
        pipe.cmd("XADD")
            .arg(&dlq)
            .arg("*")
            .arg("event_id")
            .arg(format!("evt_dead_{i}"))
            .arg("entry_id")
            .arg(&ids[n - 1 - i])
            .arg("attempts")
            .arg(12)
            .arg("last_error")
            .arg("worker answered 500")
            .arg("dead_lettered_at")
            .arg(1_764_000_000_000u64 + i as u64)
            .ignore();
    }
    let _: () = pipe.query(&mut redis).unwrap();

    let client = client();
    let login = client
        .post(url(&app, "/login"))
        .form(&[("token", VIEWER)])
        .send()
        .await
        .unwrap();
    let cookie = login.headers()["set-cookie"].to_str().unwrap();
    let cookie = cookie.split(';').next().unwrap().to_owned();
    let pages = [
        "/".to_owned(),
        "/events?source=stripe".to_owned(),
        format!("/events?source=stripe&before={middle}"),
        "/events?source=stripe&id=evt_fill_0".to_owned(),
        "/events/stripe/evt_fill_0".to_owned(),
        "/dead-letters?route=billing".to_owned(),
        "/audit".to_owned(),
        "/api/v1/overview".to_owned(),
        "/api/v1/events?source=stripe".to_owned(),
        format!("/api/v1/events?source=stripe&before={middle}"),
        "/api/v1/events?source=stripe&id=evt_fill_0".to_owned(),
        "/api/v1/events/stripe/evt_fill_0".to_owned(),
        "/api/v1/dead-letters?route=billing".to_owned(),
        "/api/v1/audit".to_owned(),
    ];
    println!("{n} entries in {stream}, filled in {fill_time:?}");
    for page in &pages {
        let took = time(&client, &url(&app, page), &cookie).await;
        println!("{took:>10.1?}  {page}");
        assert!(took < Duration::from_millis(500), "{page}: {took:?}");
    }
    let detail: serde_json::Value = serde_json::from_str(
        &client
            .get(url(&app, "/api/v1/events/stripe/evt_fill_0"))
            .bearer_auth(VIEWER)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap(),
    )
    .unwrap();
    assert_eq!(detail["relay"][0]["state"], "delivered", "{detail}");
}
