//! The relay in this process on a cluster: routing and fan-out, retries with one key, a poison
//! event dead-lettered across slots, `dlq list` / `replay`, `redeliver`, trimming and recovery.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_a_partitioned_source_fans_out_retries_dead_letters_and_is_trimmed_safely() {
    let cluster = RedisCluster::start();
    let name = partitioned_source(&cluster);
    // A team's own group on partition 0, created by hand and never read until the end: trimming
    // must keep every entry of that stream for it.
    let p0 = partition_stream(&name, 0);
    let _: () = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(&p0)
        .arg("team")
        .arg("0")
        .arg("MKSTREAM")
        .query(&mut *cluster.connect())
        .unwrap();
    let worker = RelayWorker::start().await;
    let billing = RouteSettings {
        max_attempts: 3,
        ..typed(route(&[&name], &worker.url("billing")), &["invoice.*"])
    };
    let relay_settings = relay(
        true,
        vec![
            ("billing", billing),
            ("audit", route(&[&name], &worker.url("audit"))),
        ],
    );
    let app = cluster_app(
        &cluster,
        &name,
        |s| s,
        relay_settings.clone(),
        SinkTrim::Acknowledged,
    )
    .await;
    worker.script(
        "billing",
        "evt_retry",
        &[Answer::status(500), Answer::status(502)],
    );
    worker.poison("billing", "evt_poison", Answer::status(500));
    let mut sent: Vec<(String, &str)> = vec![
        ("evt_retry".to_owned(), "invoice.paid"),
        ("evt_poison".to_owned(), "invoice.paid"),
    ];
    for (i, id) in ids("evt_c", 24).into_iter().enumerate() {
        sent.push((
            id,
            if i.is_multiple_of(3) {
                "charge.refunded"
            } else {
                "invoice.paid"
            },
        ));
    }
    for (id, event_type) in &sent {
        send_to(&app, &name, id, event_type).await;
    }
    // A duplicate of a webhook reaches no worker.
    send_to(&app, &name, "evt_c-1", "invoice.paid").await;

    let dlq = format!("hookonce:{{{name}}}:dlq:billing");
    crate::support::eventually(15, "the poison event in the dead letters", || {
        let n = xlen(&cluster, &dlq);
        async move { n == 1 }
    })
    .await;
    all_settled(&cluster, &name, &["billing", "audit"], 15).await;
    let delivered: Vec<(String, &str)> = sent
        .iter()
        .filter(|(id, _)| id != "evt_poison")
        .cloned()
        .collect();
    audit_routes(
        &app,
        &worker,
        &name,
        &[("billing", &["invoice.*"][..])],
        &delivered,
        true,
    );
    audit_routes(&app, &worker, &name, &[("audit", &[][..])], &sent, true);
    // The events used every partition, and so every master.
    let used: BTreeSet<u32> = sent
        .iter()
        .map(|(id, _)| partition_of(&app, &name, id))
        .collect();
    let masters: BTreeSet<u16> = used
        .iter()
        .map(|k| cluster.master_of_slot(cluster.keyslot(&partition_stream(&name, *k))))
        .collect();
    assert_eq!(
        masters.len(),
        cluster.masters().len(),
        "partitions {used:?}"
    );
    // Retries: one key, attempts rising.
    let retried = worker.of("billing", "evt_retry");
    let seen: Vec<(u32, u16)> = retried.iter().map(|d| (d.attempt(), d.status)).collect();
    assert_eq!(seen, [(1, 500), (2, 502), (3, 200)]);
    // The dead letter, written across slots: the entry's fields, why, and its original ID
    // (the ack of the event's dedup record).
    let poison = worker.of("billing", "evt_poison");
    assert_eq!(
        poison.iter().map(|d| d.attempt()).collect::<Vec<_>>(),
        [1, 2, 3]
    );
    let record: String = redis::cmd("GET")
        .arg(
            app.app
                .ingest
                .target(&name)
                .unwrap()
                .record_key("evt_poison"),
        )
        .query(&mut *cluster.connect())
        .unwrap();
    let entry_id = record.split(' ').next().unwrap().to_owned();
    let (_, letter) = xrange(&cluster, &dlq).remove(0);
    assert_eq!(letter["event_id"], "evt_poison");
    assert_eq!(letter["source"], name);
    assert_eq!(letter["entry_id"], entry_id);
    assert_eq!(
        (letter["attempts"].as_str(), letter["last_status"].as_str()),
        ("3", "500")
    );
    assert!(!letter["body"].is_empty());

    // Trimming: every partition stream but the team's is emptied; the team's keeps it all.
    let in_p0: Vec<&str> = sent
        .iter()
        .filter(|(id, _)| partition_of(&app, &name, id) == 0)
        .map(|(id, _)| id.as_str())
        .collect();
    crate::support::eventually(20, "the acknowledged partitions trimmed", || {
        let left: u64 = (1..PARTITIONS)
            .map(|k| xlen(&cluster, &partition_stream(&name, k)))
            .sum();
        async move { left == 0 }
    })
    .await;
    let kept: BTreeSet<String> = xrange(&cluster, &p0)
        .into_iter()
        .map(|(_, f)| f["event_id"].clone())
        .collect();
    assert_eq!(
        kept,
        in_p0.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>()
    );

    // The operator's commands on the cluster.
    let dir = tempfile::tempdir().unwrap();
    let config = cluster_config(dir.path(), &cluster, &name, &relay_settings);
    let listed = cli_ok(&config, &["dlq", "list", "--route", "billing", "--json"]);
    assert!(
        listed.contains("\"evt_poison\"") && listed.lines().count() == 1,
        "{listed}"
    );
    worker.heal("billing", "evt_poison");
    cli_ok(&config, &["dlq", "replay", "--all", "--route", "billing"]);
    worker
        .wait_acknowledged("billing", &["evt_poison".to_owned()], 10)
        .await;
    let last = worker.of("billing", "evt_poison").pop().unwrap();
    assert_eq!((last.attempt(), last.status), (1, 200));
    assert_eq!(xlen(&cluster, &dlq), 0);
    // redeliver copies from a partition stream to the route's replay stream (another slot).
    let again = in_p0
        .iter()
        .find(|id| {
            sent.iter()
                .any(|(s, t)| s == *id && t.starts_with("invoice"))
        })
        .expect("an invoice event in partition 0")
        .to_string();
    cli_ok(&config, &["redeliver", &name, &again, "--route", "billing"]);
    crate::support::eventually(10, "the redelivered event", || {
        let n = worker.acknowledged("billing")[&again];
        async move { n == 2 }
    })
    .await;
    // An event of a trimmed partition cannot be redelivered, and says so.
    let trimmed = sent
        .iter()
        .map(|(id, _)| id)
        .find(|id| partition_of(&app, &name, id) != 0)
        .unwrap();
    let mut args = vec!["redeliver", &name, trimmed, "--route", "audit"];
    args.extend(["--config", config.to_str().unwrap()]);
    let output = hookonce(&args, &[]);
    assert!(!output.status.success());
    assert!(
        output_text(&output).contains("trimmed"),
        "{}",
        output_text(&output)
    );

    // A destroyed group on partition 0 is recreated at 0: what the stream retains is delivered
    // again (at least once, the same key), and new events flow.
    let before = worker.acknowledged("audit");
    let _: i64 = redis::cmd("XGROUP")
        .arg("DESTROY")
        .arg(&p0)
        .arg(group("audit"))
        .query(&mut *cluster.connect())
        .unwrap();
    crate::support::eventually(15, "partition 0 delivered again to audit", || {
        let now = worker.acknowledged("audit");
        let done = in_p0.iter().all(|id| now[*id] > before[*id]);
        async move { done }
    })
    .await;
    settled(&cluster, &p0, &["billing", "audit"], 10).await;
    // The team's group lost nothing.
    let read: redis::streams::StreamReadReply = redis::cmd("XREADGROUP")
        .arg("GROUP")
        .arg("team")
        .arg("c1")
        .arg("COUNT")
        .arg(100)
        .arg("STREAMS")
        .arg(&p0)
        .arg(">")
        .query(&mut *cluster.connect())
        .unwrap();
    assert_eq!(read.keys[0].ids.len(), in_p0.len());
    app.stop().await;
}
