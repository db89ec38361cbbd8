//! `hookonce inspect` / `forget`, for dedup records and (`--proxy`) proxy keys, through the real
//! binary against a Redis Cluster (a source on every master) and behind Sentinel.

use super::{deliver, sources_on_every_master, Topology};
use crate::proxy::{Answer, ALICE, ORDERS};
use crate::support::binary::{hookonce, output_text, write};
use crate::support::cluster::RedisCluster;
use crate::support::sentinel::SentinelGroup;
use crate::support::settings::{self, ProxySettings, STRIPE_SECRET};
use crate::support::upstream::Upstream;
use crate::support::{now, stripe_body, Backend, TestApp};

const PROXY: &str = "orders";

async fn order(t: &TestApp) -> Answer {
    let response = t
        .client
        .post(t.proxy_url(PROXY, ORDERS))
        .header("idempotency-key", "cli-1")
        .header("authorization", ALICE)
        .body("{}")
        .send()
        .await
        .unwrap();
    Answer {
        status: response.status().as_u16(),
        headers: response.headers().clone(),
        body: response.bytes().await.unwrap(),
    }
}

/// Delivers an event per source and runs a proxy key, then inspects and forgets each with the
/// binary: found (exit 0) and shown, forgotten (exit 0), gone (exit 1), and the next delivery
/// or request is new again.
async fn inspect_and_forget(topology: Topology<'_>, sources: &[&str]) {
    let upstream = Upstream::start().await;
    let mut builder = TestApp::builder(Backend::Redis)
        .store(|store| topology.store(store))
        .proxy(
            PROXY,
            ProxySettings {
                upstream: upstream.url(),
                ..ProxySettings::default()
            },
        );
    let mut tables = String::new();
    for name in sources {
        builder = builder.source(name, settings::source("stripe", STRIPE_SECRET));
        tables.push_str(&format!(
            "[sources.{name}]\nprovider = \"stripe\"\nsecrets = [\"{STRIPE_SECRET}\"]\n"
        ));
    }
    let t = builder.start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "{}{tables}[proxies.{PROXY}]\nlisten = \"127.0.0.1:1\"\nupstream = \"{}\"\n",
        topology.store_toml(),
        upstream.url()
    );
    let config = write(dir.path(), "hookonce.toml", &config);
    let cfg = config.to_str().unwrap();

    for name in sources {
        let id = format!("evt_cli_{name}");
        assert_eq!(deliver(&t, name, &id).await, 200);
        let inspect = hookonce(&["inspect", "--config", cfg, name, &id], &[]);
        let shown = output_text(&inspect);
        assert!(inspect.status.success(), "{shown}");
        let key = format!("hookonce:{{{name}}}:d:{id}");
        assert!(
            shown.contains(&key) && shown.contains("entry_id:"),
            "{shown}"
        );
        let forget = hookonce(&["forget", "--config", cfg, name, &id], &[]);
        assert!(forget.status.success(), "{}", output_text(&forget));
        let gone = hookonce(&["inspect", "--config", cfg, name, &id], &[]);
        assert_eq!(gone.status.code(), Some(1), "{}", output_text(&gone));
        let again = t.deliver(name, &stripe_body(&id, 200), &now()).await;
        assert_eq!(again.status(), 200);
        assert!(again.headers().get("idempotency-replayed").is_none());
    }

    assert_eq!(order(&t).await.status, 201);
    let principal = format!("Authorization={ALICE}");
    let lookup = |command: &str| {
        let args = [
            command,
            "--config",
            cfg,
            "--proxy",
            PROXY,
            "--path",
            ORDERS,
            "--principal",
            &principal,
            "cli-1",
        ];
        hookonce(&args, &[])
    };
    let inspect = lookup("inspect");
    let shown = output_text(&inspect);
    assert!(inspect.status.success(), "{shown}");
    for line in [
        "hookonce:{p:orders}:k:",
        "state:       completed",
        "status:      201",
    ] {
        assert!(shown.contains(line), "{line}: {shown}");
    }
    assert!(!shown.contains(ALICE), "{shown}");
    let forget = lookup("forget");
    assert!(forget.status.success(), "{}", output_text(&forget));
    assert_eq!(lookup("inspect").status.code(), Some(1));
    let again = order(&t).await;
    assert!(again.status == 201 && !again.replayed(), "{again:?}");
    assert_eq!(upstream.executions("cli-1", ORDERS), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_and_forget_on_every_master_of_a_cluster() {
    let cluster = RedisCluster::start();
    let sources = sources_on_every_master(&cluster);
    let names: Vec<&str> = sources.iter().map(|(name, _)| name.as_str()).collect();
    inspect_and_forget(Topology::Cluster(&cluster), &names).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_and_forget_behind_sentinel() {
    let group = SentinelGroup::start();
    inspect_and_forget(Topology::Sentinel(&group), &["shop"]).await;
}
