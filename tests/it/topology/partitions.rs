//! A partitioned source on the cluster: its partitions' hash tags land on several masters, each
//! event is in its partition's stream exactly once with its redeliveries replayed, and
//! `hookonce-loadgen audit` reads the partitioned streams from the cluster and agrees.

use std::collections::BTreeSet;
use std::path::PathBuf;

use super::{audit, deliver, Attempt};
use crate::support::binary::{output_text, write, BIN};
use crate::support::cluster::RedisCluster;
use crate::support::settings::{ms, source, STRIPE_SECRET};
use crate::support::{Backend, TestApp};
use hookonce::config::{ServiceUrl, SourceSettings, StoreTopology};

const PARTITIONS: u32 = 6;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_source_spreads_over_masters_exactly_once() {
    let cluster = RedisCluster::start();
    let seeds = cluster.seeds();
    let hot = SourceSettings {
        partitions: Some(PARTITIONS),
        ..source("stripe", STRIPE_SECRET)
    };
    let urls = seeds.iter().cloned().map(ServiceUrl).collect();
    let app = TestApp::builder(Backend::Redis)
        .store(|store| {
            store.topology = StoreTopology::Cluster;
            store.cluster_nodes = urls;
            store.timeout = ms(super::STORE_TIMEOUT_MS);
        })
        .source("hot", hot)
        .start()
        .await;
    let streams = app.app.ingest.target("hot").unwrap().streams();
    let masters: BTreeSet<u16> = streams
        .iter()
        .map(|stream| cluster.master_of_slot(cluster.keyslot(stream)))
        .collect();
    assert!(masters.len() > 1, "{streams:?} all on one master");

    let mut attempts = Vec::new();
    for n in 0..60 {
        let id = format!("evt_hot_{n}");
        for _ in 0..2 {
            let status = deliver(&app, "hot", &id).await;
            let (source, id) = ("hot".to_owned(), id.clone());
            attempts.push(Attempt { source, id, status });
        }
    }
    let mut client = cluster.client();
    let (acknowledged, refused) = audit(&app, &attempts, &mut client);
    assert_eq!((acknowledged, refused), (120, 0));
    let used = streams
        .iter()
        .filter(|s| !super::stream_ids(&mut client, s).is_empty())
        .count();
    assert!(used > 1, "events in {used} partition(s)");

    loadgen_audit(&seeds, &attempts);
}

/// `hookonce-loadgen audit` with a configuration naming the cluster and the partitioned source:
/// it must find every acknowledged event once, across every partition's stream.
fn loadgen_audit(seeds: &[String], attempts: &[Attempt]) {
    let dir = tempfile::tempdir().unwrap();
    let nodes: Vec<String> = seeds.iter().map(|s| format!("{s:?}")).collect();
    let config = write(
        dir.path(),
        "hookonce.toml",
        &format!(
            "[store]\nbackend = \"redis\"\ntopology = \"cluster\"\ncluster_nodes = [{}]\n\n[sources.hot]\nprovider = \"stripe\"\nsecrets = [\"{STRIPE_SECRET}\"]\npartitions = {PARTITIONS}\n",
            nodes.join(", ")
        ),
    );
    let mut lines = vec!["# hookonce-loadgen record v1 prefix=evt_hot_ source=hot".to_owned()];
    lines.extend(
        attempts
            .iter()
            .map(|a| format!("{}\t{}\t1\t1", a.id, a.status)),
    );
    let record = write(dir.path(), "run.record", &(lines.join("\n") + "\n"));
    let loadgen = PathBuf::from(BIN).with_file_name("hookonce-loadgen");
    assert!(
        loadgen.exists(),
        "build it first: cargo build -p hookonce-loadgen"
    );
    let output = std::process::Command::new(&loadgen)
        .args([
            "audit",
            "--config",
            config.to_str().unwrap(),
            "--source",
            "hot",
        ])
        .arg("--record")
        .arg(&record)
        .args(["--timeout", "30s"])
        .env_remove("HOOKONCE_CONFIG")
        .output()
        .unwrap();
    let text = output_text(&output);
    assert!(output.status.success(), "audit failed:\n{text}");
    assert!(text.contains("queue holds 60 entries"), "{text}");
    assert!(text.contains("lost 0  duplicated 0"), "{text}");
}
