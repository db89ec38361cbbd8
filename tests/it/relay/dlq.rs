//! The operator's commands: `dlq list` (a table, and `--json`), `dlq replay` after the worker is
//! fixed (to that route only, attempts starting again), `dlq drop`, and `redeliver` (of an entry
//! the stream still holds, and of a trimmed one: non-zero exit).

use super::*;
use crate::support::binary::{hookonce, output_text};
use crate::support::relay_worker::{Answer, RelayWorker};

/// Two routes over stripe: `billing` gives up after 2 attempts, `audit` takes everything.
async fn setup(worker: &RelayWorker) -> (TestApp, tempfile::TempDir, PathBuf) {
    let billing = RouteSettings {
        max_attempts: 2,
        ..route(&["stripe"], &worker.url("billing"))
    };
    let routes = vec![
        ("billing", billing),
        ("audit", route(&["stripe"], &worker.url("audit"))),
    ];
    let settings = relay(true, routes.clone());
    let app = serve(routes).await;
    let dir = tempfile::tempdir().unwrap();
    let redis_url = app.redis.as_ref().unwrap().url();
    let config = config_file(dir.path(), &redis_url, &settings, "");
    (app, dir, config)
}

async fn dead_lettered(app: &TestApp, route: &str, n: u64) {
    let redis = app.redis.as_ref().unwrap();
    let dlq = dead_letters("stripe", route);
    crate::support::eventually(10, &format!("{n} dead letters on {route}"), || {
        let len = xlen(redis, &dlq);
        async move { len == n }
    })
    .await;
}

fn json_lines(text: &str) -> Vec<serde_json::Value> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_then_replay_to_that_route_only_after_the_worker_is_fixed() {
    let worker = RelayWorker::start().await;
    let (app, _dir, config) = setup(&worker).await;
    worker.poison("billing", "evt_dead", Answer::status(500));
    send(&app, "evt_dead", "invoice.paid").await;
    send(&app, "evt_fine", "invoice.paid").await;
    dead_lettered(&app, "billing", 1).await;
    let redis = app.redis.as_ref().unwrap();
    let (letter_id, _) = xrange(redis, &dead_letters("stripe", "billing")).remove(0);

    let table = cli_ok(&config, &["dlq", "list", "--route", "billing"]);
    let row = table
        .lines()
        .find(|l| l.contains("evt_dead"))
        .unwrap_or_else(|| panic!("no row for evt_dead:\n{table}"));
    for cell in ["stripe", letter_id.as_str(), "invoice.paid", "2", "500"] {
        assert!(row.contains(cell), "{cell} missing from {row:?}");
    }
    assert!(!table.contains("evt_fine"), "{table}");
    let listed = json_lines(&cli_ok(
        &config,
        &["dlq", "list", "--route", "billing", "--json"],
    ));
    assert_eq!(listed.len(), 1, "{listed:?}");
    let text = listed[0].to_string();
    for value in [
        "\"evt_dead\"",
        "\"stripe\"",
        "\"invoice.paid\"",
        &format!("\"{letter_id}\""),
    ] {
        assert!(text.contains(value), "{value} missing from {text}");
    }
    let empty = json_lines(&cli_ok(
        &config,
        &["dlq", "list", "--route", "audit", "--json"],
    ));
    assert!(empty.is_empty(), "{empty:?}");

    worker.heal("billing", "evt_dead");
    // Audit's own first delivery may still be on its way: count from after it.
    worker
        .wait_acknowledged("audit", &["evt_dead".to_owned()], 10)
        .await;
    let before_audit = worker.of("audit", "evt_dead").len();
    cli_ok(
        &config,
        &["dlq", "replay", &letter_id, "--route", "billing"],
    );
    worker
        .wait_acknowledged("billing", &["evt_dead".to_owned()], 10)
        .await;
    let replayed = worker.of("billing", "evt_dead");
    let last = replayed.last().unwrap();
    assert_eq!(
        (last.attempt(), last.status),
        (1, 200),
        "attempts start again"
    );
    assert_eq!(last.key(), dedup_key("stripe", "evt_dead"));
    assert_eq!(xlen(redis, &dead_letters("stripe", "billing")), 0);
    settled(redis, &stream("stripe"), &["billing", "audit"], 10).await;
    assert_eq!(
        worker.of("audit", "evt_dead").len(),
        before_audit,
        "audit got it again: {:?}",
        worker.summary()
    );
    assert_eq!(worker.acknowledged("billing")["evt_fine"], 1);
    // The write is in the audit log the console shows, named after the command line.
    let audit = xrange(redis, "hookonce:{console}:audit");
    let (_, entry) = audit.last().expect("an audit entry");
    assert_eq!(entry["action"], "dead_letter.replay", "{audit:?}");
    assert_eq!(entry["target"], format!("billing/{letter_id}"));
    assert_eq!(entry["result"], "replayed 1");
    assert!(entry["who"].starts_with("cli"), "{audit:?}");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drop_removes_dead_letters_without_delivering_them() {
    let worker = RelayWorker::start().await;
    let (app, _dir, config) = setup(&worker).await;
    for id in ["evt_d1", "evt_d2", "evt_d3"] {
        worker.poison("billing", id, Answer::status(500));
        send(&app, id, "invoice.paid").await;
    }
    dead_lettered(&app, "billing", 3).await;
    let redis = app.redis.as_ref().unwrap();
    let letters = xrange(redis, &dead_letters("stripe", "billing"));
    let first = &letters[0].0;
    cli_ok(&config, &["dlq", "drop", first, "--route", "billing"]);
    assert_eq!(xlen(redis, &dead_letters("stripe", "billing")), 2);
    cli_ok(&config, &["dlq", "drop", "--all", "--route", "billing"]);
    assert_eq!(xlen(redis, &dead_letters("stripe", "billing")), 0);
    let table = cli_ok(&config, &["dlq", "list", "--route", "billing"]);
    assert!(!table.contains("evt_d"), "{table}");
    // Nothing dropped is delivered again.
    for id in ["evt_d1", "evt_d2", "evt_d3"] {
        worker.heal("billing", id);
        assert_eq!(worker.of("billing", id).len(), 2);
    }
    settled(redis, &stream("stripe"), &["billing"], 10).await;
    for id in ["evt_d1", "evt_d2", "evt_d3"] {
        assert_eq!(worker.of("billing", id).len(), 2);
    }
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redeliver_sends_an_entry_again_and_says_when_it_was_trimmed() {
    let worker = RelayWorker::start().await;
    let (app, _dir, config) = setup(&worker).await;
    send(&app, "evt_again", "invoice.paid").await;
    send(&app, "evt_trimmed", "invoice.paid").await;
    let redis = app.redis.as_ref().unwrap();
    settled(redis, &stream("stripe"), &["billing", "audit"], 10).await;
    cli_ok(
        &config,
        &["redeliver", "stripe", "evt_again", "--route", "audit"],
    );
    crate::support::eventually(10, "evt_again redelivered to audit", || {
        let n = worker.of("audit", "evt_again").len();
        async move { n == 2 }
    })
    .await;
    let again = worker.of("audit", "evt_again");
    assert_eq!(again[0].key(), again[1].key());
    assert_eq!(again[1].body, again[0].body);
    settled(redis, &stream("stripe"), &["billing", "audit"], 10).await;
    assert_eq!(
        worker.of("billing", "evt_again").len(),
        1,
        "another route got it"
    );

    // The entry is gone from the stream (trimmed), its dedup record still there.
    let (entry_id, _) = xrange(redis, &stream("stripe"))
        .into_iter()
        .find(|(_, f)| f["event_id"] == "evt_trimmed")
        .unwrap();
    let _: i64 = redis::cmd("XDEL")
        .arg(stream("stripe"))
        .arg(&entry_id)
        .query(&mut redis.connection())
        .unwrap();
    let args = [
        "redeliver",
        "stripe",
        "evt_trimmed",
        "--route",
        "audit",
        "--config",
        config.to_str().unwrap(),
    ];
    let output = hookonce(&args, &[]);
    let text = output_text(&output);
    assert!(
        !output.status.success(),
        "redeliver of a trimmed entry exited 0:\n{text}"
    );
    assert!(text.contains("trimmed"), "{text}");
    let unknown = hookonce(
        &[
            "redeliver",
            "stripe",
            "evt_never",
            "--route",
            "audit",
            "--config",
            config.to_str().unwrap(),
        ],
        &[],
    );
    assert!(!unknown.status.success(), "{}", output_text(&unknown));
    assert_eq!(worker.of("audit", "evt_trimmed").len(), 1);
    app.stop().await;
}
