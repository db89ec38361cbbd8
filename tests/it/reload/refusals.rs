//! Reloads that are refused keep the running configuration whole (a key that needs a restart, a
//! secret that does not decode, a source added, a file that does not parse), and a relay route's
//! token and signing secret read from files are replaced by a reload that is applied.

use std::sync::Arc;

use hookonce::webhooks::providers::Provider;

use super::{config_file, hangup, log_with, post_signed, replace, LAST_RELOAD_OK, RELOADS};
use crate::support::app::provider;
use crate::support::daemon::Daemon;
use crate::support::relay_worker::{verify_standard_webhook, RelayWorker};
use crate::support::settings::source;
use crate::support::RedisServer;

/// A GitHub delivery of the event `id`, signed by `signer`, to the daemon's source `gh`.
async fn gh(daemon: &Daemon, signer: &Arc<dyn Provider>, id: &str) -> u16 {
    let body = format!(r#"{{"id":"{id}"}}"#);
    let url = daemon.url("/webhooks/gh");
    post_signed(
        &reqwest::Client::new(),
        &url,
        signer,
        (id, body.as_bytes()),
        &[],
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_reload_names_its_keys_and_keeps_the_running_configuration() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let secrets = dir.path().join("github");
    std::fs::write(&secrets, "gh_old\n").unwrap();
    let text = |extra: &str| {
        format!(
            "[store]\nbackend = \"redis\"\nredis_url = \"{}\"\n{extra}\n\
             [sources.gh]\nprovider = \"github\"\nsecrets_files = [\"{}\"]\n",
            redis.url(),
            secrets.display()
        )
    };
    let config = config_file(dir.path(), &text(""));
    let daemon = Daemon::spawn(&config, dir.path(), &[]).await;
    let old = provider("gh", &source("github", "gh_old"));
    let new = provider("gh", &source("github", "gh_new"));
    assert_eq!(gh(&daemon, &old, "r-1").await, 200);

    // A new secret together with a key that needs a restart: nothing is applied.
    std::fs::write(&secrets, "gh_new\n").unwrap();
    replace(&config, &text("[server]\nbody_limit = \"2MiB\""));
    hangup(&daemon, "refused", 1.0).await;
    assert_eq!(daemon.metric(LAST_RELOAD_OK, &[]).await, 0.0);
    assert_eq!(gh(&daemon, &old, "r-2").await, 200);
    assert_eq!(gh(&daemon, &new, "r-3").await, 401);

    // A source added, and a file that does not parse: refused too.
    replace(
        &config,
        &format!(
            "{}\n[sources.more]\nprovider = \"github\"\nsecrets = [\"m\"]\n",
            text("")
        ),
    );
    hangup(&daemon, "refused", 2.0).await;
    replace(&config, "[store\nbackend = ");
    hangup(&daemon, "refused", 3.0).await;
    assert_eq!(gh(&daemon, &old, "r-4").await, 200);

    // The same file as at start, with the new secret: applied.
    replace(&config, &text(""));
    hangup(&daemon, "applied", 1.0).await;
    assert_eq!(daemon.metric(LAST_RELOAD_OK, &[]).await, 1.0);
    assert_eq!(gh(&daemon, &new, "r-5").await, 200);
    assert_eq!(gh(&daemon, &old, "r-6").await, 401);

    let logs = log_with(
        &daemon,
        &[
            "cannot change without a restart: server.body_limit",
            "cannot change without a restart: sources.more",
        ],
    )
    .await;
    assert!(
        !logs.contains("gh_old") && !logs.contains("gh_new"),
        "{logs}"
    );
    assert_eq!(daemon.metric(RELOADS, &[("result", "refused")]).await, 3.0);
}

/// A Standard Webhooks secret that does not decode is refused with the file and line that
/// hold it; the running secret keeps verifying.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_that_does_not_decode_is_named_by_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let secrets = dir.path().join("standard");
    let good = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    std::fs::write(&secrets, format!("{good}\n")).unwrap();
    let config = config_file(
        dir.path(),
        &format!(
            "[store]\nbackend = \"memory\"\n[sink]\nkind = \"stdout\"\n\
             [sources.sv]\nprovider = \"standard\"\nsecrets_files = [\"{}\"]\n",
            secrets.display()
        ),
    );
    let daemon = Daemon::spawn(&config, dir.path(), &[]).await;
    replace(&secrets, &format!("{good}\nwhsec_!!not-base64!!\n"));
    hangup(&daemon, "refused", 1.0).await;
    let logs = log_with(&daemon, &["sources.sv.secrets_files[0] line 2"]).await;
    assert!(
        !logs.contains("not-base64"),
        "the log shows the secret: {logs}"
    );

    let signer = provider("sv", &source("standard", good));
    let url = daemon.url("/webhooks/sv");
    let delivery = ("msg_reload_1", &br#"{"type":"ping"}"#[..]);
    let status = post_signed(&reqwest::Client::new(), &url, &signer, delivery, &[]).await;
    assert_eq!(status, 200);
}

/// The relay's route token (a header read from a file) and its signing secret change on an
/// applied reload: the worker sees the new token on the next delivery.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_replaces_a_relay_routes_token_and_signing_secret() {
    let redis = RedisServer::start();
    let worker = RelayWorker::start().await;
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "Bearer first-token\n").unwrap();
    let signing = dir.path().join("signing");
    let first_key = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    let second_key = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
    std::fs::write(&signing, first_key).unwrap();
    let config = config_file(
        dir.path(),
        &format!(
            "[store]\nbackend = \"redis\"\nredis_url = \"{}\"\n\
             [sources.gh]\nprovider = \"github\"\nsecrets = [\"s\"]\n\
             [relay]\nenabled = true\n\
             [relay.routes.w]\nsources = [\"gh\"]\nurl = \"{}\"\nsigning_secret = \"file:{}\"\n\
             [relay.routes.w.headers]\nauthorization = \"file:{}\"\n",
            redis.url(),
            worker.url("w"),
            signing.display(),
            token.display()
        ),
    );
    let daemon = Daemon::spawn(&config, dir.path(), &[]).await;
    let signer = provider("gh", &source("github", "s"));
    let deliver = |id: &'static str| {
        let url = daemon.url("/webhooks/gh");
        let signer = Arc::clone(&signer);
        async move {
            let body = format!(r#"{{"id":"{id}"}}"#);
            let client = reqwest::Client::new();
            let status = post_signed(&client, &url, &signer, (id, body.as_bytes()), &[]).await;
            assert_eq!(status, 200);
        }
    };
    deliver("relay-1").await;
    worker.wait_deliveries(1, 10).await;

    replace(&token, "Bearer second-token\n");
    replace(&signing, second_key);
    hangup(&daemon, "applied", 1.0).await;
    deliver("relay-2").await;
    worker.wait_deliveries(2, 10).await;
    let received = worker.deliveries();
    assert_eq!(received[0].header("authorization"), "Bearer first-token");
    assert_eq!(received[1].header("authorization"), "Bearer second-token");
    // Each delivery verifies under its own key, and only under it.
    for (i, key, other) in [(0, first_key, second_key), (1, second_key, first_key)] {
        verify_standard_webhook(key, &received[i])
            .unwrap_or_else(|e| panic!("delivery {i} not signed with its key: {e}"));
        assert!(
            verify_standard_webhook(other, &received[i]).is_err(),
            "delivery {i} signed with the other key"
        );
    }
    let logs = log_with(&daemon, &["Configuration reloaded."]).await;
    assert!(!logs.contains("first-token") && !logs.contains("second-token"));
}

/// `allowed_ips` and `server.trusted_proxies` change on a reload: a client refused (403) before
/// is let in after, and refused again once the allowlist shrinks back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_changes_who_may_call() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let text = |allowed: &str| {
        format!(
            "[store]\nbackend = \"redis\"\nredis_url = \"{}\"\n\
             [server]\ntrusted_proxies = [\"127.0.0.1\"]\n\
             [sources.gh]\nprovider = \"github\"\nsecrets = [\"gh_old\"]\nallowed_ips = [{allowed}]\n",
            redis.url()
        )
    };
    let config = config_file(dir.path(), &text("\"192.0.2.0/24\""));
    let daemon = Daemon::spawn(&config, dir.path(), &[]).await;
    let signer = provider("gh", &source("github", "gh_old"));
    let from = |client: &'static str, id: &'static str| {
        let url = daemon.url("/webhooks/gh");
        let signer = Arc::clone(&signer);
        async move {
            let body = format!(r#"{{"id":"{id}"}}"#);
            let forwarded = [("x-forwarded-for", client)];
            let http = reqwest::Client::new();
            post_signed(&http, &url, &signer, (id, body.as_bytes()), &forwarded).await
        }
    };
    assert_eq!(from("192.0.2.9", "a-1").await, 200);
    assert_eq!(from("198.51.100.7", "a-2").await, 403);

    replace(&config, &text("\"192.0.2.0/24\", \"198.51.100.0/24\""));
    hangup(&daemon, "applied", 1.0).await;
    assert_eq!(from("198.51.100.7", "a-3").await, 200);

    replace(&config, &text("\"192.0.2.0/24\""));
    hangup(&daemon, "applied", 2.0).await;
    assert_eq!(from("198.51.100.7", "a-4").await, 403);
    log_with(&daemon, &[r#""changed":"sources.gh.allowed_ips""#]).await;
}
