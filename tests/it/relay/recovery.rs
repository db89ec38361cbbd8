//! What the relay survives and what trimming keeps: `sink.trim = "acknowledged"` never drops an
//! entry some group (the relay's or a team's own, created by hand) has pending or has not read;
//! a destroyed group (`XGROUP DESTROY`) and a flushed Redis are recreated and reading goes on.

use hookonce::config::SinkTrim;

use super::*;
use crate::support::relay_worker::RelayWorker;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trimming_keeps_what_any_group_still_needs() {
    let worker = RelayWorker::start().await;
    // Small stream nodes, so that even an approximate MINID can trim a few entries.
    let redis = RedisServer::start_with(&["--stream-node-max-entries", "4"]);
    let mut conn = redis.connection();
    let stripe = stream("stripe");
    let _: () = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(&stripe)
        .arg("team")
        .arg("0")
        .arg("MKSTREAM")
        .query(&mut conn)
        .unwrap();
    let app = crate::support::TestApp::builder(crate::support::Backend::Redis)
        .redis(redis)
        .sink(|s| s.trim = SinkTrim::Acknowledged)
        .relay(|r| {
            *r = relay(
                true,
                vec![("billing", route(&["stripe"], &worker.url("billing")))],
            )
        })
        .start()
        .await;
    let sent = ids("evt_trim", 20);
    for id in &sent {
        send(&app, id, "invoice.paid").await;
    }
    let redis = app.redis.as_ref().unwrap();
    settled(redis, &stripe, &["billing"], 10).await;
    // The team reads 8 entries and acknowledges 5: 3 pending, 12 never read.
    let read: redis::streams::StreamReadReply = redis::cmd("XREADGROUP")
        .arg("GROUP")
        .arg("team")
        .arg("c1")
        .arg("COUNT")
        .arg(8)
        .arg("STREAMS")
        .arg(&stripe)
        .arg(">")
        .query(&mut conn)
        .unwrap();
    let read: Vec<String> = read.keys[0].ids.iter().map(|e| e.id.clone()).collect();
    let _: i64 = redis::cmd("XACK")
        .arg(&stripe)
        .arg("team")
        .arg(&read[..5])
        .query(&mut conn)
        .unwrap();
    let needed: Vec<String> = sent[5..].to_vec();
    crate::support::eventually(25, "the trimmer to drop acknowledged entries", || {
        let left = xlen(redis, &stripe);
        async move { left < 20 }
    })
    .await;
    let kept: Vec<String> = xrange(redis, &stripe)
        .into_iter()
        .map(|(_, f)| f["event_id"].clone())
        .collect();
    assert!(
        needed.iter().all(|id| kept.contains(id)),
        "needed {needed:?}, kept {kept:?}"
    );
    // Once the team has caught up, the stream shrinks further; nothing was lost on the way.
    let _: i64 = redis::cmd("XACK")
        .arg(&stripe)
        .arg("team")
        .arg(&read[5..])
        .query(&mut conn)
        .unwrap();
    let rest: redis::streams::StreamReadReply = redis::cmd("XREADGROUP")
        .arg("GROUP")
        .arg("team")
        .arg("c1")
        .arg("COUNT")
        .arg(100)
        .arg("STREAMS")
        .arg(&stripe)
        .arg(">")
        .query(&mut conn)
        .unwrap();
    assert_eq!(rest.keys[0].ids.len(), 12, "the team lost unread entries");
    let rest: Vec<String> = rest.keys[0].ids.iter().map(|e| e.id.clone()).collect();
    let _: i64 = redis::cmd("XACK")
        .arg(&stripe)
        .arg("team")
        .arg(&rest)
        .query(&mut conn)
        .unwrap();
    crate::support::eventually(25, "the stream trimmed after the team caught up", || {
        let left = xlen(redis, &stripe);
        async move { left <= 4 }
    })
    .await;
    assert_eq!(worker.acknowledged("billing").len(), 20);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_destroyed_group_and_a_flushed_redis_are_recreated() {
    let worker = RelayWorker::start().await;
    let app = serve(vec![(
        "billing",
        route(&["stripe"], &worker.url("billing")),
    )])
    .await;
    let redis = app.redis.as_ref().unwrap();
    send(&app, "evt_before", "invoice.paid").await;
    worker
        .wait_acknowledged("billing", &["evt_before".to_owned()], 10)
        .await;
    let _: i64 = redis::cmd("XGROUP")
        .arg("DESTROY")
        .arg(stream("stripe"))
        .arg(group("billing"))
        .query(&mut redis.connection())
        .unwrap();
    send(&app, "evt_no_group", "invoice.paid").await;
    worker
        .wait_acknowledged("billing", &["evt_no_group".to_owned()], 15)
        .await;
    // Recreated at 0: the retained entry is delivered again (at least once), same key.
    settled(redis, &stream("stripe"), &["billing"], 10).await;
    let before = worker.of("billing", "evt_before");
    assert!(before
        .iter()
        .all(|d| d.key() == dedup_key("stripe", "evt_before")));

    let _: () = redis::cmd("FLUSHALL")
        .query(&mut redis.connection())
        .unwrap();
    send(&app, "evt_flushed", "invoice.paid").await;
    worker
        .wait_acknowledged("billing", &["evt_flushed".to_owned()], 15)
        .await;
    settled(redis, &stream("stripe"), &["billing"], 10).await;
    assert_eq!(worker.acknowledged("billing")["evt_flushed"], 1);
    assert_eq!(worker.acknowledged("billing")["evt_no_group"], 1);
    app.stop().await;
}
