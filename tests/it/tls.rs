//! TLS to Redis (`rediss://`) against redis-server's own TLS port, with certificates the suite
//! makes: the webhook front and the proxy over TLS, client certificates a server requires, a
//! server certificate the configured CA did not sign, `hookonce inspect` over TLS, and the relay
//! process with the dead-letter commands over TLS.

use std::sync::Arc;
use std::time::Duration;

use crate::proxy::{ALICE, ORDERS};
use crate::support::binary::{hookonce, output_text, write};
use crate::support::settings::ProxySettings;
use crate::support::tls::TlsFiles;
use crate::support::upstream::Upstream;
use crate::support::{now, stripe_body, Backend, RedisServer, TestApp};
use hookonce::config::StoreSettings;

/// Points `store` at the CA of `tls`, and at its client certificate when `client_cert`.
fn trust(store: &mut StoreSettings, tls: &TlsFiles, client_cert: bool) {
    store.tls_ca_file = Some(tls.ca.clone());
    if client_cert {
        store.tls_cert_file = Some(tls.client_cert.clone());
        store.tls_key_file = Some(tls.client_key.clone());
    }
}

/// The `[store]` table of a configuration file for `redis` over TLS.
fn store_toml(redis: &RedisServer, ca: &std::path::Path, client: Option<&TlsFiles>) -> String {
    let mut text = format!(
        "[store]\nbackend = \"redis\"\nredis_url = \"{}\"\ntls_ca_file = \"{}\"\n",
        redis.url(),
        ca.display()
    );
    if let Some(tls) = client {
        text.push_str(&format!(
            "tls_cert_file = \"{}\"\ntls_key_file = \"{}\"\n",
            tls.client_cert.display(),
            tls.client_key.display()
        ));
    }
    text
}

/// The settings of a daemon with one Stripe source and the `[store]` table `store`.
fn with_source(store: &str) -> hookonce::config::Settings {
    let toml = format!(
        "{store}[sources.stripe]\nprovider = \"stripe\"\nsecrets = [\"{}\"]\n",
        crate::support::settings::STRIPE_SECRET
    );
    hookonce::config::from_toml(&toml).expect("the configuration is valid")
}

/// Why the daemon with this `[store]` table does not start (it must not).
async fn start_error(toml: &str) -> String {
    let settings = with_source(toml);
    let started =
        tokio::time::timeout(Duration::from_secs(15), hookonce::app::App::build(settings))
            .await
            .expect("start-up ends within its connect timeout");
    match started {
        Ok(_) => panic!("the daemon started with {toml}"),
        Err(error) => hookonce::util::error_chain(&error),
    }
}

async fn order(t: &TestApp, key: &str) -> (u16, bool, Vec<u8>) {
    let response = t
        .client
        .post(t.proxy_url("orders", ORDERS))
        .header("idempotency-key", key)
        .header("authorization", ALICE)
        .body("{}")
        .send()
        .await
        .expect("the proxy answers");
    let replayed = response.headers().get("idempotency-replayed").is_some();
    let status = response.status().as_u16();
    (status, replayed, response.bytes().await.unwrap().to_vec())
}

#[tokio::test]
async fn the_front_and_the_proxy_work_over_tls() {
    let tls = Arc::new(TlsFiles::generate());
    let redis = RedisServer::start_tls(Arc::clone(&tls), "optional", &[]);
    let upstream = Upstream::start().await;
    let t = TestApp::builder(Backend::Redis)
        .redis(redis)
        .store(|store| trust(store, &tls, false))
        .proxy(
            "orders",
            ProxySettings {
                upstream: upstream.url(),
                ..ProxySettings::default()
            },
        )
        .start()
        .await;
    assert!(t.app.settings.store.redis_url.0.starts_with("rediss://"));
    let body = stripe_body("evt_tls_1", 300);
    let first = t.deliver("stripe", &body, &now()).await;
    assert_eq!(first.status(), 200);
    assert!(first.headers().get("idempotency-replayed").is_none());
    let retry = t.deliver("stripe", &body, &now()).await;
    assert_eq!(retry.status(), 200);
    assert_eq!(retry.headers()["idempotency-replayed"], "true");
    let entries = t.entries("stripe");
    assert_eq!(entries.len(), 1, "forwarded once");
    assert_eq!(entries[0].1, body);

    let (status, replayed, answer) = order(&t, "tls-1").await;
    assert!(status == 201 && !replayed, "{status}");
    let (again, replayed, replay) = order(&t, "tls-1").await;
    assert!(again == 201 && replayed, "{again}");
    assert_eq!(replay, answer);
    assert_eq!(upstream.executions("tls-1", ORDERS), 1);
    assert_eq!(t.readiness().await, 200);
    t.stop().await;
}

#[tokio::test]
async fn a_server_that_requires_client_certificates_takes_the_configured_one_only() {
    let tls = Arc::new(TlsFiles::generate());
    let redis = RedisServer::start_tls(Arc::clone(&tls), "yes", &[]);
    let without = start_error(&store_toml(&redis, &tls.ca, None)).await;
    assert!(
        without.contains(&format!("cannot connect to Redis at {}", redis.url()))
            && without.contains("no client certificate (store.tls_cert_file)"),
        "{without}"
    );

    let t = TestApp::builder(Backend::Redis)
        .redis(redis)
        .store(|store| trust(store, &tls, true))
        .start()
        .await;
    let body = stripe_body("evt_mtls_1", 100);
    assert_eq!(t.deliver("stripe", &body, &now()).await.status(), 200);
    assert_eq!(t.entries("stripe").len(), 1);
    t.stop().await;
}

#[tokio::test]
async fn a_server_certificate_the_configured_ca_did_not_sign_is_refused_naming_the_ca() {
    let tls = Arc::new(TlsFiles::generate());
    let redis = RedisServer::start_tls(Arc::clone(&tls), "optional", &[]);
    let error = start_error(&store_toml(&redis, &tls.other_ca, None)).await;
    assert!(
        error.contains(&format!("cannot connect to Redis at {}", redis.url()))
            && error.contains(&format!(
                "the CA of store.tls_ca_file = {}",
                tls.other_ca.display()
            ))
            && error.contains("UnknownIssuer"),
        "{error}"
    );
    // The same server with the right CA: the refusal was the CA's.
    hookonce::app::App::build(with_source(&store_toml(&redis, &tls.ca, None)))
        .await
        .expect("starts with the CA that signed the server's certificate");
}

#[tokio::test]
async fn inspect_reads_a_record_over_tls() {
    let tls = Arc::new(TlsFiles::generate());
    let redis = RedisServer::start_tls(Arc::clone(&tls), "yes", &[]);
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "{}[sources.stripe]\nprovider = \"stripe\"\nsecrets = [\"{}\"]\n",
        store_toml(&redis, &tls.ca, Some(&tls)),
        crate::support::settings::STRIPE_SECRET
    );
    let config = write(dir.path(), "hookonce.toml", &config);
    let t = TestApp::builder(Backend::Redis)
        .redis(redis)
        .store(|store| trust(store, &tls, true))
        .start()
        .await;
    let body = stripe_body("evt_inspect_tls", 100);
    assert_eq!(t.deliver("stripe", &body, &now()).await.status(), 200);

    let cfg = config.to_str().unwrap();
    let inspect = hookonce(
        &["inspect", "--config", cfg, "stripe", "evt_inspect_tls"],
        &[],
    );
    let shown = output_text(&inspect);
    assert!(inspect.status.success(), "{shown}");
    assert!(
        shown.contains("hookonce:{stripe}:d:evt_inspect_tls") && shown.contains("entry_id:"),
        "{shown}"
    );
    let missing = hookonce(&["inspect", "--config", cfg, "stripe", "never-seen"], &[]);
    assert_eq!(missing.status.code(), Some(1), "{}", output_text(&missing));
    t.stop().await;
}

#[tokio::test]
async fn an_insecure_url_connects_without_a_ca_only_when_store_tls_insecure_is_set() {
    let tls = Arc::new(TlsFiles::generate());
    let redis = RedisServer::start_tls(Arc::clone(&tls), "optional", &[]);
    let url = format!("{}/#insecure", redis.url());
    let refused = hookonce::config::from_toml(&format!(
        "[store]\nbackend = \"redis\"\nredis_url = \"{url}\"\n[sources.stripe]\nprovider = \"stripe\"\nsecrets = [\"s\"]\n"
    ))
    .expect_err("#insecure without store.tls_insecure is refused")
    .to_string();
    assert!(
        refused.starts_with("store.redis_url: ") && refused.contains("store.tls_insecure = true"),
        "{refused}"
    );
    // The server's certificate chains to the suite's CA, which is not among the public CAs: only
    // an unverified connection gets in without store.tls_ca_file.
    let store =
        format!("[store]\nbackend = \"redis\"\nredis_url = \"{url}\"\ntls_insecure = true\n");
    hookonce::app::App::build(with_source(&store))
        .await
        .expect("starts without checking the server's certificate");
    let verified = format!(
        "[store]\nbackend = \"redis\"\nredis_url = \"{}\"\n",
        redis.url()
    );
    let error = start_error(&verified).await;
    assert!(
        error.contains("the public CAs (no store.tls_ca_file)") && error.contains("UnknownIssuer"),
        "{error}"
    );
}

/// The relay and the dead-letter commands read Redis over TLS with a client certificate, as the
/// front does: `hookonce relay` delivers what the front forwarded, and `hookonce dlq list` and
/// `hookonce inspect` read the same server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_relay_and_its_commands_work_over_tls() {
    use crate::relay::{cli_ok, config_file_with, ids, relay, route, stripe_event};
    use crate::support::daemon::Daemon;
    use crate::support::relay_worker::RelayWorker;

    let tls = Arc::new(TlsFiles::generate());
    let redis = RedisServer::start_tls(Arc::clone(&tls), "yes", &[]);
    let dir = tempfile::tempdir().unwrap();
    let worker = RelayWorker::start().await;
    let routes = relay(
        true,
        vec![("billing", route(&["stripe"], &worker.url("billing")))],
    );
    let config = config_file_with(
        dir.path(),
        &store_toml(&redis, &tls.ca, Some(&tls)),
        &crate::support::settings::default_sources(),
        &routes,
        "",
    );
    let t = TestApp::builder(Backend::Redis)
        .redis(redis)
        .store(|store| trust(store, &tls, true))
        .start()
        .await;
    let mut relay_process = Daemon::relay(&config, dir.path(), &[]).await;

    let sent = ids("evt_relay_tls", 5);
    for id in &sent {
        let response = t
            .deliver("stripe", &stripe_event(id, "invoice.paid"), &now())
            .await;
        assert_eq!(response.status(), 200, "{id}");
    }
    worker.wait_acknowledged("billing", &sent, 30).await;
    assert!(worker.acknowledged("billing").values().all(|n| *n == 1));

    let letters = cli_ok(&config, &["dlq", "list", "--route", "billing", "--json"]);
    assert!(letters.trim().is_empty(), "no dead letters: {letters}");
    let shown = cli_ok(&config, &["inspect", "stripe", &sent[0]]);
    assert!(shown.contains("entry_id:"), "{shown}");
    relay_process.kill();
    t.stop().await;
}
