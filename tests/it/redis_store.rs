//! Redis-specific behaviour: layout, stream format, failures and recovery, startup safety.

use std::time::{Duration, Instant};

use crate::coalesce::{pause_writers, unpause};
use crate::support::app::{App, StartError};
use crate::support::metrics::{READY, STREAM_LENGTH};
use crate::support::redis::free_port;
use crate::support::replica::Replica;
use crate::support::settings::{ms, source, ServiceUrl, Settings};
use crate::support::{
    eventually, now, now_unix, stripe_body, with_id, Backend, RedisServer, TestApp,
};

#[tokio::test]
async fn stream_entries_and_records_follow_the_documented_layout() {
    let t = TestApp::start(Backend::Redis).await;
    let body = stripe_body("evt_1NG8Du2eZvKYlo2CUI79vXWy", 800);
    let before = now_unix() as u64 * 1000;
    assert_eq!(t.deliver("stripe", &body, &now()).await.status(), 200);
    let redis = t.redis.as_ref().unwrap();
    let mut conn = redis.connection();

    let reply: redis::streams::StreamRangeReply = redis::cmd("XRANGE")
        .arg("hookonce:{stripe}:events")
        .arg("-")
        .arg("+")
        .query(&mut conn)
        .unwrap();
    assert_eq!(reply.ids.len(), 1);
    let entry = &reply.ids[0];
    let mut fields: Vec<&str> = entry.map.keys().map(String::as_str).collect();
    fields.sort();
    assert_eq!(
        fields,
        [
            "body",
            "content_type",
            "event_id",
            "event_type",
            "provider",
            "received_at",
            "source"
        ]
    );
    assert_eq!(entry.get::<String>("source").unwrap(), "stripe");
    assert_eq!(
        entry.get::<String>("content_type").unwrap(),
        "application/json"
    );
    assert_eq!(entry.get::<String>("provider").unwrap(), "stripe");
    assert_eq!(
        entry.get::<String>("event_id").unwrap(),
        "evt_1NG8Du2eZvKYlo2CUI79vXWy"
    );
    assert_eq!(
        entry.get::<String>("event_type").unwrap(),
        "payment_intent.succeeded"
    );
    assert_eq!(entry.get::<Vec<u8>>("body").unwrap(), body);
    let received_at: u64 = entry.get::<String>("received_at").unwrap().parse().unwrap();
    assert!(received_at >= before && received_at < before + 60_000);

    let record: String = redis::cmd("GET")
        .arg("hookonce:{stripe}:d:evt_1NG8Du2eZvKYlo2CUI79vXWy")
        .query(&mut conn)
        .unwrap();
    let (entry_id, fingerprint) = record.split_once(' ').unwrap();
    assert_eq!(entry_id, entry.id);
    assert_eq!(fingerprint.len(), 10);
    let ttl: i64 = redis::cmd("PTTL")
        .arg("hookonce:{stripe}:d:evt_1NG8Du2eZvKYlo2CUI79vXWy")
        .query(&mut conn)
        .unwrap();
    let four_days = 4 * 24 * 3600 * 1000;
    assert!(ttl > four_days - 60_000 && ttl <= four_days, "ttl {ttl}");
    // Exactly two keys: the record and the stream. Nothing is stored twice.
    assert_eq!(redis.dbsize(), 2);
    let usage: i64 = redis::cmd("MEMORY")
        .arg("USAGE")
        .arg("hookonce:{stripe}:d:evt_1NG8Du2eZvKYlo2CUI79vXWy")
        .query(&mut conn)
        .unwrap();
    assert!(usage <= 150, "dedup record takes {usage} bytes");
}

#[tokio::test]
async fn redis_down_answers_503_then_recovers_without_restart() {
    let mut t = TestApp::start(Backend::Redis).await;
    assert_eq!(
        t.deliver("github", b"{}", &with_id("before"))
            .await
            .status(),
        200
    );

    // Kill Redis: deliveries must fail with 503 + Retry-After, never 2xx, and readiness drops.
    let port = t.redis.as_ref().unwrap().port;
    t.redis.as_mut().unwrap().kill();
    let response = t.deliver("github", b"{}", &with_id("during")).await;
    assert_eq!(response.status(), 503);
    assert_eq!(response.headers()["retry-after"], "1");
    assert_eq!(response.text().await.unwrap(), r#"{"error":"unavailable"}"#);
    assert_eq!(t.readiness().await, 503);
    assert_eq!(t.metric(READY, &[]).await, 0.0);
    assert_eq!(t.events("github", "unavailable").await, 1.0);

    // Bring it back on the same port (empty): the daemon reconnects and reloads its script.
    t.redis.as_mut().unwrap().restart();
    assert_eq!(t.redis.as_ref().unwrap().port, port);
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let status = t
            .deliver("github", b"{}", &with_id("during"))
            .await
            .status();
        if status == 200 {
            break;
        }
        assert_eq!(status, 503);
        assert!(Instant::now() < deadline, "daemon did not recover");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(t.readiness().await, 200);
    assert_eq!(t.metric(READY, &[]).await, 1.0);
    assert_eq!(t.entries("github").len(), 1);
}

#[tokio::test]
async fn script_flushed_from_redis_is_reloaded() {
    let t = TestApp::start(Backend::Redis).await;
    assert_eq!(
        t.deliver("github", b"{}", &with_id("a")).await.status(),
        200
    );
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query(&mut t.redis.as_ref().unwrap().connection())
        .unwrap();
    assert_eq!(
        t.deliver("github", b"{}", &with_id("b")).await.status(),
        200
    );
    assert_eq!(
        t.deliver("github", b"{}", &with_id("a")).await.headers()["idempotency-replayed"],
        "true"
    );
    assert_eq!(t.entries("github").len(), 2);
}

#[tokio::test]
async fn out_of_memory_redis_writes_nothing_and_answers_503() {
    let t = TestApp::start(Backend::Redis).await;
    assert_eq!(
        t.deliver("github", b"{}", &with_id("fits")).await.status(),
        200
    );
    let redis = t.redis.as_ref().unwrap();
    let mut conn = redis.connection();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg("1")
        .query(&mut conn)
        .unwrap();
    let before = redis.dbsize();
    let response = t.deliver("github", b"{}", &with_id("does-not-fit")).await;
    assert_eq!(response.status(), 503);
    assert_eq!(redis.dbsize(), before);
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg("0")
        .query(&mut conn)
        .unwrap();
    assert_eq!(
        t.deliver("github", b"{}", &with_id("does-not-fit"))
            .await
            .status(),
        200
    );
    assert_eq!(t.entries("github").len(), 2);
}

#[tokio::test]
async fn max_len_trims_the_stream_approximately() {
    let t = TestApp::builder(Backend::Redis)
        .sink(|s| s.max_len = 10)
        .start()
        .await;
    for i in 0..300 {
        assert_eq!(
            t.deliver("github", b"{}", &with_id(&format!("trim-{i}")))
                .await
                .status(),
            200
        );
    }
    let len = t.entries("github").len();
    assert!(len < 300, "stream was not trimmed ({len} entries)");
    assert!(len >= 10, "trimmed below max_len ({len} entries)");
}

/// Redis at `url` with its stream, and one GitHub source.
fn redis_settings(url: &str) -> Settings {
    let mut settings = Settings::default();
    settings.store.redis_url = ServiceUrl(url.to_owned());
    settings
        .sources
        .insert("github".to_owned(), source("github", "s"));
    settings.validate().unwrap();
    settings
}

#[tokio::test]
async fn refuses_to_start_when_redis_may_evict_dedup_records() {
    let redis = RedisServer::start_with(&["--maxmemory-policy", "allkeys-lru"]);
    let error = App::build(redis_settings(&redis.url()))
        .await
        .err()
        .expect("refused");
    assert!(matches!(error, StartError::Redis(_)), "{error:?}");
    let message = error.to_string();
    assert!(
        message.contains("allkeys-lru") && message.contains("store.allow_eviction"),
        "{message}"
    );
    let mut settings = redis_settings(&redis.url());
    settings.store.allow_eviction = true;
    assert!(App::build(settings).await.is_ok());
}

#[tokio::test]
async fn unreachable_redis_at_startup_is_a_clear_error() {
    let port = free_port();
    let mut settings = redis_settings(&format!("redis://127.0.0.1:{port}"));
    settings.store.timeout = ms(200);
    let error = App::build(settings).await.err().expect("refused");
    assert!(
        error.to_string().contains(&format!("127.0.0.1:{port}")),
        "{error}"
    );
}

#[tokio::test]
async fn a_stalled_redis_answers_503_within_the_store_timeout_then_recovers() {
    // A timeout that a loaded machine's first call stays within (200 ms was tight for the 200
    // below), and far shorter than the pause, so that only it can end the paused call.
    let t = TestApp::builder(Backend::Redis)
        .store(|s| s.timeout = ms(1000))
        .start()
        .await;
    assert_eq!(
        t.deliver("github", b"{}", &with_id("pre-pause"))
            .await
            .status(),
        200
    );
    let mut admin = t.redis.as_ref().unwrap().connection();
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(6000)
        .arg("WRITE")
        .query(&mut admin)
        .unwrap();
    let started = Instant::now();
    let response = t.deliver("github", b"{}", &with_id("paused")).await;
    assert_eq!(response.status(), 503);
    assert!(
        started.elapsed() < Duration::from_millis(3000),
        "took {:?}",
        started.elapsed()
    );
    let _: () = redis::cmd("CLIENT")
        .arg("UNPAUSE")
        .query(&mut admin)
        .unwrap();
    eventually(10, "recovery after CLIENT UNPAUSE", || async {
        t.deliver("github", b"{}", &with_id("paused"))
            .await
            .status()
            == 200
    })
    .await;
    assert_eq!(t.entries("github").len(), 2);
}

/// The request's own deadline holds where it ends before the store's: the script call stalls in
/// Redis, and the answer is 503 at `server.request_timeout`, not at `store.timeout`. The call
/// itself was sent, so it still writes the event once Redis goes on: the retry is a duplicate.
/// A request before it on the same connection had its own deadline on the connection's one
/// timer, which the stalled request's deadline then moved.
#[tokio::test]
async fn a_request_timeout_before_the_store_timeout_answers_503_at_the_request_timeout() {
    let t = TestApp::builder(Backend::Redis)
        .store(|s| s.timeout = ms(8000))
        .server(|s| s.request_timeout = ms(300))
        .start()
        .await;
    let before = t.deliver("github", b"{}", &with_id("before")).await;
    assert_eq!(before.status(), 200);
    let mut admin = t.redis.as_ref().unwrap().connection();
    pause_writers(&mut admin);
    let started = Instant::now();
    let response = t.deliver("github", b"{}", &with_id("held")).await;
    let took = started.elapsed();
    assert_eq!(response.status(), 503);
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_millis(4000),
        "took {took:?}"
    );
    unpause(&mut admin);
    let retry = t.deliver("github", b"{}", &with_id("held")).await;
    assert_eq!(retry.status(), 200);
    assert_eq!(retry.headers()["idempotency-replayed"], "true");
    assert_eq!(t.entries("github").len(), 2);
}

#[tokio::test]
async fn starts_with_a_warning_when_config_is_not_permitted() {
    let redis = RedisServer::start();
    let _: () = redis::cmd("ACL")
        .arg(&["SETUSER", "hook", "on", ">pw", "~*", "+@all", "-config"])
        .query(&mut redis.connection())
        .unwrap();
    let url = format!("redis://hook:pw@127.0.0.1:{}", redis.port);
    let settings = redis_settings(&url);
    assert_eq!(
        format!("{:?}", settings.store.redis_url),
        // The whole userinfo is redacted: a user name can be a token (NATS reads one so).
        format!("redis://[redacted]@127.0.0.1:{}", redis.port)
    );
    assert!(App::build(settings).await.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_replicas_acknowledges_only_replicated_writes() {
    let primary = RedisServer::start();
    let mut replica = Replica::of(&primary);
    let t = TestApp::builder(Backend::Redis)
        .redis(primary)
        .store(|s| {
            s.wait_replicas = 1;
            // Room for a live replica's acknowledgement on a loaded machine.
            s.wait_timeout = ms(1000);
            s.timeout = ms(2000);
        })
        .start()
        .await;
    assert_eq!(
        t.deliver("github", b"{}", &with_id("replicated"))
            .await
            .status(),
        200
    );
    replica.kill();
    let started = Instant::now();
    let unconfirmed = t.deliver("github", b"{}", &with_id("unreplicated")).await;
    assert_eq!(unconfirmed.status(), 503);
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "took {:?}",
        started.elapsed()
    );
    assert_eq!(unconfirmed.headers()["retry-after"], "1");
}

#[tokio::test]
async fn stream_length_is_sampled_per_stream() {
    let t = TestApp::builder(Backend::Redis)
        .sink(|s| s.sample_interval = Some(ms(50)))
        .start()
        .await;
    for i in 0..3 {
        assert_eq!(
            t.deliver("github", b"{}", &with_id(&format!("len-{i}")))
                .await
                .status(),
            200
        );
    }
    eventually(5, "the stream length gauge", || async {
        t.metric(STREAM_LENGTH, &[("stream", "hookonce:{github}:events")])
            .await
            == 3.0
    })
    .await;
}
