//! Configuration that would leak or fail later: no credential of any URL is printed by
//! `check-config`, a failed start-up or a failing sink's log lines; values Redis cannot take are
//! refused before anything is written; signed timestamps are read in canonical form only.

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::support::binary::{output_text, write, BIN};
use crate::support::daemon::Daemon;
use crate::support::metrics::EVENTS;
use crate::support::redis::free_port;
use crate::support::settings::{source, GITHUB_SECRET, STRIPE_SECRET};
use crate::support::{app, eventually, now_unix, stripe_body, with_id, Backend, TestApp};

/// Every credential in these tests; none of its pieces may appear in any output.
const SECRET: &str = "Zq7credentialNeverPrinted";

const GITHUB_SOURCE: &str = "[sources.gh]\nprovider = \"github\"\nsecrets = [\"gh-secret\"]\n";

/// Runs `hookonce ARGS` and waits at most `limit` for it to exit; a daemon that keeps running
/// (it accepted what it should have refused) is killed and the test fails.
fn run_until_exit(args: &[&str], limit: Duration) -> Output {
    run_until_exit_with(args, &[], limit)
}

/// [`run_until_exit`] with `env` added to the environment.
fn run_until_exit_with(args: &[&str], env: &[(&str, &str)], limit: Duration) -> Output {
    let child = Command::new(BIN)
        .args(args)
        .env_remove("HOOKONCE_CONFIG")
        .envs(env.iter().copied())
        .env(
            "HOOKONCE__SERVER__LISTEN",
            format!("127.0.0.1:{}", free_port()),
        )
        .env(
            "HOOKONCE__SERVER__METRICS_LISTEN",
            format!("127.0.0.1:{}", free_port()),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let id = child.id();
    let (done, wait) = std::sync::mpsc::channel();
    std::thread::spawn(move || done.send(child.wait_with_output().unwrap()));
    match wait.recv_timeout(limit) {
        Ok(output) => output,
        Err(_) => {
            let _ = Command::new("kill")
                .args(["-KILL", &id.to_string()])
                .status();
            panic!("hookonce {args:?} was still running after {limit:?}: it should have refused");
        }
    }
}

fn check_config(dir: &std::path::Path, config: &str) -> Output {
    let path = write(dir, "hookonce.toml", config);
    run_until_exit(
        &["check-config", "--config", path.to_str().unwrap()],
        Duration::from_secs(20),
    )
}

#[test]
fn check_config_shows_no_credential_of_any_url() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        format!("[store]\nredis_url = \"unix:///run/redis.sock?db=0&pass={SECRET}\"\n[sink]\nkind = \"redis_stream\"\n"),
        format!("[store]\nredis_url = \"redis+unix:///run/redis.sock?password={SECRET}\"\n[sink]\nkind = \"redis_stream\"\n"),
        format!("[store]\nredis_url = \"redis://default:{SECRET}@cache:6379/0\"\n[sink]\nkind = \"redis_stream\"\n"),
        format!("[store]\nbackend = \"memory\"\n[sink]\nkind = \"http\"\nurl = \"https://worker.local/hook?x=1&token={SECRET}\"\n"),
        format!("[store]\nbackend = \"memory\"\n[sink]\nkind = \"http\"\nurl = \"https://u:{SECRET}@worker.local/hook\"\n"),
        format!("[store]\nbackend = \"memory\"\n[sink]\nkind = \"nats\"\nnats_url = \"nats://{SECRET}@bus:4222\"\n"),
        format!("[store]\nbackend = \"memory\"\n[sink]\nkind = \"nats\"\nnats_url = \"tls://u:{SECRET}@bus:4222\"\n"),
    ];
    for config in cases {
        let output = check_config(dir.path(), &format!("{config}{GITHUB_SOURCE}"));
        let shown = output_text(&output);
        assert!(output.status.success(), "{config}\n{shown}");
        assert!(shown.contains("[redacted]"), "{shown}");
        assert!(!shown.contains("Zq7"), "a credential was printed: {shown}");
    }
}

#[test]
fn a_failed_start_up_names_the_url_without_its_credentials() {
    let dir = tempfile::tempdir().unwrap();
    let closed = free_port();
    let cases = [
        (
            format!("[store]\nredis_url = \"unix://{}/none.sock?pass={SECRET}\"\ntimeout = \"200ms\"\n[sink]\nkind = \"redis_stream\"\n", dir.path().display()),
            "cannot connect to Redis at unix://",
        ),
        (
            format!("[store]\nredis_url = \"redis://default:{SECRET}@127.0.0.1:{closed}/0\"\ntimeout = \"200ms\"\n[sink]\nkind = \"redis_stream\"\n"),
            "cannot connect to Redis at redis://[redacted]@127.0.0.1",
        ),
        (
            format!("[store]\nbackend = \"memory\"\n[sink]\nkind = \"nats\"\nnats_url = \"nats://{SECRET}@127.0.0.1:{closed}\"\ntimeout = \"500ms\"\n"),
            "cannot connect to NATS at nats://[redacted]@127.0.0.1",
        ),
    ];
    for (config, expected) in cases {
        let path = write(
            dir.path(),
            "hookonce.toml",
            &format!("{config}{GITHUB_SOURCE}"),
        );
        let output = run_until_exit(
            &["serve", "--config", path.to_str().unwrap()],
            Duration::from_secs(20),
        );
        let shown = output_text(&output);
        assert!(!output.status.success(), "{config}\n{shown}");
        assert!(shown.contains(expected), "{shown}");
        assert!(!shown.contains("Zq7"), "a credential was printed: {shown}");
    }
}

#[tokio::test]
async fn a_failing_http_sink_logs_no_credential_of_its_url() {
    let dir = tempfile::tempdir().unwrap();
    // Nothing listens there: every delivery fails with a connection error, logged at WARN; an
    // HTTP client's error text may carry the URL it was sending to (reqwest's did).
    let closed = free_port();
    let config = format!(
        "[store]\nbackend = \"memory\"\n[sink]\nkind = \"http\"\nurl = \"http://u:{SECRET}@127.0.0.1:{closed}/hook?token={SECRET}\"\ntimeout = \"1s\"\n\n[sources.gh]\nprovider = \"github\"\nsecrets = [\"{GITHUB_SECRET}\"]\n"
    );
    let path = write(dir.path(), "hookonce.toml", &config);
    let daemon = Daemon::spawn(&path, dir.path(), &[]).await;
    let provider = app::provider("gh", &source("github", GITHUB_SECRET));
    let body = br#"{"action":"opened"}"#;
    let client = reqwest::Client::new();
    for attempt in 0..3 {
        let mut request = client.post(daemon.url("/webhooks/gh")).body(body.to_vec());
        for (name, value) in provider.sign(body, &with_id(&format!("leak-{attempt}"))) {
            request = request.header(name, value);
        }
        assert_eq!(request.send().await.unwrap().status(), 503);
    }
    eventually(10, "three failed deliveries in the log", || {
        let logs = daemon.logs();
        async move { logs.matches("Webhook not acknowledged.").count() == 3 }
    })
    .await;
    let logs = daemon.logs();
    assert!(logs.contains("worker request failed"), "{logs}");
    assert!(!logs.contains("Zq7"), "a credential was logged: {logs}");
}

#[test]
fn a_ttl_redis_cannot_take_is_refused_before_anything_is_written() {
    let redis = crate::support::RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "[store]\nredis_url = \"{}\"\n[sink]\nkind = \"redis_stream\"\n{GITHUB_SOURCE}dedup_ttl = \"300000000y\"\n",
        redis.url()
    );
    let path = write(dir.path(), "hookonce.toml", &config);
    let started = Instant::now();
    let output = run_until_exit(
        &["serve", "--config", path.to_str().unwrap()],
        Duration::from_secs(20),
    );
    let shown = output_text(&output);
    assert!(!output.status.success(), "{shown}");
    assert!(
        shown.contains("sources.gh.dedup_ttl: must be at least 1s and at most 3650d"),
        "{shown}"
    );
    assert_eq!(redis.dbsize(), 0, "written before the refusal");
    assert!(started.elapsed() < Duration::from_secs(20));
}

#[tokio::test]
async fn a_signed_timestamp_with_a_leading_zero_is_refused_and_writes_nothing() {
    let t = TestApp::start(Backend::Redis).await;
    let body = stripe_body("evt_padded", 200);
    // A valid signature over the padded timestamp, as a replayer could not make but a capture
    // re-read with a different spelling of the same instant would need.
    let padded = format!("0{}", now_unix());
    let mut mac = Hmac::<Sha256>::new_from_slice(STRIPE_SECRET.as_bytes()).unwrap();
    mac.update(padded.as_bytes());
    mac.update(b".");
    mac.update(&body);
    let header = format!("t={padded},v1={}", hex::encode(mac.finalize().into_bytes()));
    let headers = [("Stripe-Signature".to_owned(), header)];
    let response = t.post("stripe", &body, &headers).await;
    assert_eq!(response.status(), 401);
    assert_eq!(t.stored(), 0, "a refused request wrote to the store");
    let refused = [("source", "stripe"), ("outcome", "invalid_signature")];
    assert_eq!(t.metric(EVENTS, &refused).await, 1.0);
    // The same signature over the canonical spelling is accepted.
    let canonical = padded.trim_start_matches('0').to_owned();
    let mut mac = Hmac::<Sha256>::new_from_slice(STRIPE_SECRET.as_bytes()).unwrap();
    mac.update(canonical.as_bytes());
    mac.update(b".");
    mac.update(&body);
    let header = format!(
        "t={canonical},v1={}",
        hex::encode(mac.finalize().into_bytes())
    );
    let headers = [("Stripe-Signature".to_owned(), header)];
    assert_eq!(t.post("stripe", &body, &headers).await.status(), 200);
}

/// `TOKIO_WORKER_THREADS`, on which the async runtime would panic when it cannot read it, is
/// refused by name before anything starts; a good value is the number of workers the daemon
/// runs, and says so in its start line.
#[tokio::test]
async fn worker_threads_from_the_environment_are_refused_by_name_or_run() {
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "[store]\nbackend = \"memory\"\n[sink]\nkind = \"stdout\"\n[sources.gh]\nprovider = \"github\"\nsecrets = [\"{GITHUB_SECRET}\"]\n"
    );
    let path = write(dir.path(), "hookonce.toml", &config);
    let path = path.to_str().unwrap();
    for value in ["0", "two", "-1", "1025", " 2", ""] {
        for command in ["check-config", "serve"] {
            let output = run_until_exit_with(
                &[command, "--config", path],
                &[("TOKIO_WORKER_THREADS", value)],
                Duration::from_secs(20),
            );
            let shown = output_text(&output);
            assert_eq!(
                output.status.code(),
                Some(1),
                "{command} {value:?}: {shown}"
            );
            assert!(
                shown.contains(&format!(
                    "hookonce: TOKIO_WORKER_THREADS: must be a whole number from 1 to 1024, got {value:?}"
                )),
                "{command} {value:?}: {shown}"
            );
            assert!(!shown.contains("panicked"), "{shown}");
        }
    }

    let daemon = Daemon::spawn(
        std::path::Path::new(path),
        dir.path(),
        &[("TOKIO_WORKER_THREADS", "1")],
    )
    .await;
    let provider = app::provider("gh", &source("github", GITHUB_SECRET));
    let body = br#"{"action":"opened"}"#;
    let client = reqwest::Client::new();
    let mut request = client.post(daemon.url("/webhooks/gh")).body(body.to_vec());
    for (name, value) in provider.sign(body, &with_id("one-worker")) {
        request = request.header(name, value);
    }
    assert_eq!(request.send().await.unwrap().status(), 200);
    // Log lines are written by a background thread in batches: the start line may still be on
    // its way when the request is answered.
    eventually(10, "the start line in the log", || {
        let logs = daemon.logs();
        async move { logs.contains("Listening.") }
    })
    .await;
    let logs = daemon.logs();
    let started = logs
        .lines()
        .find(|line| line.contains("Listening."))
        .unwrap_or_else(|| panic!("no start line: {logs}"));
    assert!(started.contains("\"workers\":1"), "{started}");
}
