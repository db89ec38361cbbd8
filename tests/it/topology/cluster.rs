//! A Redis Cluster in steady state: sources on every master forwarded exactly once, duplicates
//! replayed, readiness and the start-up checks covering every master.

use super::{cluster_app, deliver, sources_on_every_master, stream_ids};
use crate::support::cluster::RedisCluster;
use crate::support::metrics;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sources_on_every_master_are_forwarded_once_and_duplicates_replayed() {
    let cluster = RedisCluster::start();
    let sources = sources_on_every_master(&cluster);
    assert_eq!(sources.len(), 3, "one source per master: {sources:?}");
    let names: Vec<&str> = sources.iter().map(|(name, _)| name.as_str()).collect();
    let app = cluster_app(&cluster, &names, |_| {}).await;
    assert_eq!(app.readiness().await, 200);

    for name in &names {
        for n in 0..5 {
            let id = format!("evt_{name}_{n}");
            assert_eq!(deliver(&app, name, &id).await, 200, "{id}");
            // The provider's retry: answered from the record, not appended again.
            assert_eq!(deliver(&app, name, &id).await, 200, "{id} again");
        }
    }

    let mut client = cluster.client();
    for (name, master) in &sources {
        let target = app.app.ingest.target(name).unwrap();
        let expected: Vec<String> = (0..5).map(|n| format!("evt_{name}_{n}")).collect();
        let stream = &target.streams()[0];
        assert_eq!(stream_ids(&mut client, stream), expected, "{name}");
        // The stream lives on the master the source's hash tag maps to.
        let slot = cluster.keyslot(stream);
        assert_eq!(cluster.master_of_slot(slot), *master);
        let duplicates = app
            .metric(
                metrics::EVENTS,
                &[("source", name), ("outcome", "duplicate")],
            )
            .await;
        assert_eq!(duplicates, 5.0, "{name}");
    }
    assert_eq!(app.metric(metrics::READY, &[]).await, 1.0);
}
