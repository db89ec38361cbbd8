//! Two-phase mode's crash window, with a real process killed between publish and completion.

use std::time::Duration;

use crate::support::app::provider;
use crate::support::daemon::Daemon;
use crate::support::freezer::Freezer;
use crate::support::metrics::LEASE_RECLAIMS;
use crate::support::nats::NatsServer;
use crate::support::settings::source;
use crate::support::{eventually, RedisServer, SignOptions};

/// The daemon is SIGKILLed after JetStream stored its message but before the ledger marked the
/// event done. The next delivery after the lease republishes with the same `Nats-Msg-Id`, and
/// JetStream's duplicate window absorbs it: the stream still holds the event once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_between_publish_and_completion_the_republish_is_absorbed_by_jetstream() {
    let redis = RedisServer::start();
    let nats = NatsServer::start();
    let freezer = Freezer::start(format!("127.0.0.1:{}", redis.port).parse().unwrap()).await;
    let dir = tempfile::tempdir().unwrap();
    // The lease must outlast the kill and a new daemon's start, so that its first delivery still
    // finds the claim live (3 s left a loaded machine too little).
    let config = |redis_url: String| {
        format!(
            "[store]\nbackend = \"redis\"\nredis_url = \"{redis_url}\"\ntimeout = \"5s\"\n\
             [sink]\nkind = \"nats\"\nnats_url = \"{}\"\nlease = \"6s\"\n\
             [sources.gh]\nprovider = \"github\"\nsecrets = [\"s\"]\n",
            nats.url()
        )
    };
    let through_freezer = dir.path().join("freezer.toml");
    std::fs::write(
        &through_freezer,
        config(format!("redis://{}", freezer.addr)),
    )
    .unwrap();
    let direct = dir.path().join("direct.toml");
    std::fs::write(&direct, config(redis.url())).unwrap();

    let body = br#"{"crash":"window"}"#;
    let headers = provider("gh", &source("github", "s")).sign(
        body,
        &SignOptions {
            event_id: Some("crash-1".into()),
            ..SignOptions::default()
        },
    );
    let post = |url: String| {
        let mut request = reqwest::Client::new().post(url).body(body.to_vec());
        for (name, value) in &headers {
            request = request.header(name.as_str(), value.as_str());
        }
        request.send()
    };

    // 1. The claim (a script call) passes the freezer; the completion that follows the publish
    //    never reaches Redis.
    let mut daemon = Daemon::spawn(&through_freezer, dir.path(), &[]).await;
    freezer.freeze_after_next_script();
    let stuck = tokio::spawn(post(daemon.url("/webhooks/gh")));
    eventually(10, "JetStream to store the message", || async {
        nats.messages("HOOKONCE").await.len() == 1
    })
    .await;
    daemon.signal("KILL");
    let _ = daemon.child.wait();
    assert!(
        stuck.await.unwrap().is_err(),
        "the provider must not get an answer from a killed daemon"
    );
    let record: String = redis::cmd("GET")
        .arg("hookonce:{gh}:d:crash-1")
        .query(&mut redis.connection())
        .unwrap();
    assert!(
        record.starts_with("p "),
        "the claim should still be processing: {record}"
    );

    // 2. A new daemon: within the lease the event is in flight; after it, it is reclaimed,
    //    republished (absorbed by JetStream) and completed.
    let daemon = Daemon::spawn(&direct, dir.path(), &[]).await;
    let mut saw_in_flight = false;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let status = post(daemon.url("/webhooks/gh"))
            .await
            .unwrap()
            .status()
            .as_u16();
        match status {
            200 => break,
            409 => saw_in_flight = true,
            other => panic!("unexpected {other}"),
        }
        assert!(std::time::Instant::now() < deadline, "never accepted");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(saw_in_flight, "a live lease must answer 409");
    let messages = nats.messages("HOOKONCE").await;
    assert_eq!(messages.len(), 1, "JetStream did not absorb the republish");
    assert_eq!(messages[0].0, "hookonce:{gh}:d:crash-1");
    assert_eq!(
        daemon.metric(LEASE_RECLAIMS, &[("source", "gh")]).await,
        1.0
    );
    let done: String = redis::cmd("GET")
        .arg("hookonce:{gh}:d:crash-1")
        .query(&mut redis.connection())
        .unwrap();
    assert!(done.starts_with("HOOKONCE:1 "), "{done}");
}
