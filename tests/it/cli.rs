//! The `hookonce` binary: check-config, sign, inspect/forget, logs and graceful shutdown.

use std::path::Path;

use crate::support::binary::{hookonce, output_text, printed_headers, write};
use crate::support::daemon::Daemon;
use crate::support::http::{finish_slow_request, start_slow_request};
use crate::support::metrics::BODY_READS;
use crate::support::{eventually, RedisServer};

const LITERAL_SECRET: &str = "literal-secret-never-printed-9f3a";

fn memory_config(dir: &Path) -> String {
    format!(
        "[store]\nbackend = \"memory\"\n[sink]\nkind = \"file\"\npath = {:?}\n\n[sources.demo]\nprovider = \"github\"\nsecrets = [\"{LITERAL_SECRET}\"]\n",
        dir.join("events.jsonl").display().to_string()
    )
}

#[test]
fn check_config_prints_the_effective_configuration_with_secrets_redacted() {
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "{}\n[sources.stripe]\nprovider = \"stripe\"\nsecrets = [\"env:HOOKONCE_TEST_STRIPE\", \"whsec_old_literal\"]\n",
        memory_config(dir.path())
    );
    let path = write(dir.path(), "hookonce.toml", &config);
    let output = hookonce(
        &["check-config", "--config", path.to_str().unwrap()],
        &[("HOOKONCE_TEST_STRIPE", "whsec_from_env_value")],
    );
    let shown = output_text(&output);
    assert!(output.status.success(), "{shown}");
    assert!(
        shown.contains("env:HOOKONCE_TEST_STRIPE [redacted]"),
        "{shown}"
    );
    for secret in [LITERAL_SECRET, "whsec_from_env_value", "whsec_old_literal"] {
        assert!(!shown.contains(secret), "secret printed: {shown}");
    }
    assert!(shown.contains("body_limit = \"1MiB\""), "{shown}");
}

#[test]
fn the_embedded_default_configuration_is_valid() {
    let output = hookonce(&["check-config"], &[]);
    let shown = output_text(&output);
    assert!(output.status.success(), "{shown}");
    assert!(
        shown.contains("backend = \"memory\"") && shown.contains("[sources.demo]"),
        "{shown}"
    );
}

/// A configuration fragment, environment overrides, and the key its error must name.
type Case = (
    &'static str,
    &'static [(&'static str, &'static str)],
    &'static str,
);

/// Each case is invalid on its own, added to an otherwise valid configuration.
fn configuration_error_cases() -> &'static [Case] {
    &[
        ("[server]\nlistne = \"0.0.0.0:1\"\n", &[], "listne"),
        ("[server]\nrequest_timeout = \"ten seconds\"\n", &[], "server.request_timeout"),
        ("[server]\nbody_limit = \"1 parsec\"\n", &[], "server.body_limit"),
        ("[sources.x]\nprovider = \"stripe\"\nsecrets = [\"env:HOOKONCE_TEST_UNSET_VAR\"]\n", &[], "sources.x.secrets[0]"),
        ("[sources.x]\nprovider = \"nosuch\"\nsecrets = [\"s\"]\n", &[], "sources.x.provider"),
        ("[sources.x]\nprovider = \"stripe\"\n", &[], "sources.x.secrets"),
        ("[sources.x]\nprovider = \"stripe\"\nsecrets = [\"s\"]\nnotification_url = \"https://x\"\n", &[], "sources.x.notification_url"),
        ("[sources.x]\nprovider = \"github\"\nsecrets = [\"s\"]\nsecretz = 1\n", &[], "secretz"),
        ("", &[("HOOKONCE__SERVER__MAX_IN_FLIGHT", "lots")], "server.max_in_flight"),
        ("", &[("HOOKONCE__STORE__BACKEND", "postgres")], "store.backend"),
        ("[sink]\npath = \"/tmp/x\"\nkind = \"stdout\"\n", &[], "sink.path"),
        ("[sink]\nkind = \"http\"\n", &[], "sink.url"),
        ("[sink]\nkind = \"http\"\nurl = \"ftp://worker\"\n", &[], "sink.url"),
        // An HTTP URI, but not a URL the client can send to.
        ("[sink]\nkind = \"http\"\nurl = \"http://256.1.1.1/hook\"\n", &[], "sink.url"),
        ("[sink]\nkind = \"http\"\nurl = \"http://\"\n", &[], "sink.url"),
        ("[sink]\nkind = \"nats\"\nnats_url = \"nats://x:4222\"\nurl = \"http://x\"\n", &[], "sink.url"),
        ("[sink]\nkind = \"nats\"\nnats_url = \"nats://x:4222\"\nlease = \"0s\"\n", &[], "sink.lease"),
        ("[sink]\nkind = \"file\"\n", &[], "sink.path"),
        ("[sink]\nkind = \"stdout\"\nmax_len = 5\n", &[], "sink.max_len"),
        ("[sink]\nkind = \"http\"\nurl = \"http://w\"\n[sink.headers]\nX-Token = \"env:HOOKONCE_TEST_UNSET_TOKEN\"\n", &[], "sink.headers.X-Token"),
        ("", &[("HOOKONCE__STORE__WAIT_REPLICAS", "1")], "store.wait_replicas"),
        ("[sink]\nkind = \"redis_stream\"\n", &[("HOOKONCE__STORE__BACKEND", "redis"), ("HOOKONCE__STORE__WAIT_REPLICAS", "1"), ("HOOKONCE__STORE__WAIT_TIMEOUT", "0s")], "store.wait_timeout"),
        ("[sink]\nkind = \"redis_stream\"\n", &[("HOOKONCE__STORE__BACKEND", "redis"), ("HOOKONCE__STORE__WAIT_REPLICAS", "1"), ("HOOKONCE__STORE__WAIT_TIMEOUT", "1s")], "store.wait_timeout"),
        // Idempotency-Key proxies: every key is checked and named.
        ("[proxies.api]\nlisten = \"127.0.0.1:0\"\n", &[], "proxies.api.upstream"),
        ("[proxies.api]\nupstream = \"orders:3000\"\n", &[], "proxies.api.upstream"),
        ("[proxies.api]\nupstream = \"ftp://orders\"\n", &[], "proxies.api.upstream"),
        ("[proxies.api]\nupstream = \"http://orders?x=1\"\n", &[], "proxies.api.upstream"),
        ("[proxies.api]\nupstream = \"http://o\"\nlease = \"5s\"\nupstream_timeout = \"10s\"\n", &[], "proxies.api.lease"),
        ("[proxies.api]\nupstream = \"http://o\"\nttl = \"500ms\"\n", &[], "proxies.api.ttl"),
        ("[proxies.api]\nupstream = \"http://o\"\nlease = \"900ms\"\nupstream_timeout = \"500ms\"\n", &[], "proxies.api.lease"),
        ("[proxies.api]\nupstream = \"http://o\"\nmethods = [\"post\"]\n", &[], "proxies.api.methods"),
        ("[proxies.api]\nupstream = \"http://o\"\nmethods = [\"PO ST\"]\n", &[], "proxies.api.methods"),
        ("[proxies.api]\nupstream = \"http://o\"\nroutes = [\"v1/orders\"]\n", &[], "proxies.api.routes"),
        ("[proxies.api]\nupstream = \"http://o\"\nroutes = [\"/v1/ord*\"]\n", &[], "proxies.api.routes"),
        ("[proxies.api]\nupstream = \"http://o\"\nscope_headers = [\"a b\"]\n", &[], "proxies.api.scope_headers"),
        ("[proxies.api]\nupstream = \"http://o\"\nscope_headers = []\n", &[], "proxies.api.scope_headers"),
        ("[proxies.api]\nupstream = \"http://o\"\nretry_statuses = [42]\n", &[], "proxies.api.retry_statuses"),
        ("[proxies.api]\nupstream = \"http://o\"\nmax_stored_body = \"lots\"\n", &[], "proxies.api.max_stored_body"),
        ("[proxies.api]\nupstream = \"http://o\"\nwait = \"forever\"\n", &[], "proxies.api.wait"),
        ("[proxies.api]\nupstream = \"http://o\"\nrequire_keys = true\n", &[], "require_keys"),
        ("[proxies.Api]\nupstream = \"http://o\"\n", &[], "proxies.Api"),
        ("[server]\nlisten = \"127.0.0.1:7001\"\n[proxies.api]\nupstream = \"http://o\"\nlisten = \"127.0.0.1:7001\"\n", &[], "proxies.api.listen"),
        // Values Redis, NATS or the timers cannot take, refused before anything runs.
        ("[sources.x]\nprovider = \"github\"\nsecrets = [\"s\"]\ndedup_ttl = \"300000000y\"\n", &[], "sources.x.dedup_ttl"),
        ("[sources.x]\nprovider = \"stripe\"\nsecrets = [\"s\"]\ntolerance = \"400d\"\n", &[], "sources.x.tolerance"),
        ("", &[("HOOKONCE__STORE__TIMEOUT", "100000000000y")], "store.timeout"),
        ("", &[("HOOKONCE__SERVER__REQUEST_TIMEOUT", "30d")], "server.request_timeout"),
        ("[sink]\nkind = \"stdout\"\nlease = \"3650d\"\n", &[], "sink.lease"),
        ("[sink]\nkind = \"nats\"\nnats_url = \"nats://x:4222\"\nduplicate_window = \"300000000y\"\n", &[], "sink.duplicate_window"),
        // A custom stream keeps the source's hash tag, so no other source can write to it.
        ("[sources.x]\nprovider = \"github\"\nsecrets = [\"s\"]\nstream = \"events\"\n", &[], "sources.x.stream"),
        ("[sources.x]\nprovider = \"github\"\nsecrets = [\"s\"]\nstream = \"x:{}{x}\"\n", &[], "sources.x.stream"),
        ("[sources.x]\nprovider = \"github\"\nsecrets = [\"s\"]\nstream = \"hookonce:{demo}:events\"\n", &[], "sources.x.stream"),
        ("[sources.x]\nprovider = \"github\"\nsecrets = [\"s\"]\nstream = \"hookonce:{x}:d:evt\"\n", &[], "sources.x.stream"),
        ("[sources.x]\nprovider = \"github\"\nsecrets = [\"s\"]\nstream = \"hookonce:{x}:b:abc\"\n", &[], "sources.x.stream"),
        ("[sources.x]\nprovider = \"github\"\nsecrets = [\"s\"]\npartitions = 0\n", &[], "sources.x.partitions"),
        ("[sources.x]\nprovider = \"github\"\nsecrets = [\"s\"]\npartitions = 2\nstream = \"hookonce:{x}:events\"\n", &[], "sources.x.stream"),
        ("[sources.x]\nprovider = \"adyen\"\nsecrets = [\"00ff\"]\npartitions = 2\n", &[], "sources.x.partitions"),
        // Ambiguous templates, and secrets that do not decode (the message must not quote them).
        ("[sources.x]\nprovider = \"generic\"\nsecrets = [\"s\"]\nsignature_header = \"X-Sig\"\nalgorithm = \"sha256\"\nencoding = \"hex\"\nid_header = \"X-Id\"\ntimestamp_header = \"X-Ts\"\nsigned_content = \"{id}{timestamp}{body}\"\n", &[], "sources.x.signed_content"),
        ("[sources.x]\nprovider = \"standard\"\nsecrets = [\"whsec_Zq7*\"]\n", &[], "sources.x.secrets[0]: is not \"whsec_\" followed by base64 (it has a non-base64 character at 3)"),
        ("[sources.x]\nprovider = \"adyen\"\nsecrets = [\"0aZq\"]\n", &[], "sources.x.secrets[0]: is not a hex HMAC key (it has a non-hex character at 2)"),
        ("[relay]\nclaim_idle = \"0s\"\n", &[], "relay.claim_idle"),
        ("[relay]\nenabled = true\n", &[], "relay.routes"),
        ("[relay]\nenabled = true\n[relay.routes.r]\nsources = [\"demo\"]\nurl = \"http://w/e\"\n", &[], "relay.enabled: the relay needs store.backend = \"redis\""),
        ("[relay.routes.r]\nsources = [\"demo\"]\nurl = \"http://w/e\"\n", &[], "relay.routes: the relay needs store.backend"),
        ("[relay.routes.r]\nurl = \"http://w/e\"\n", &[], "relay.routes.r.sources"),
        ("[relay.routes.r]\nsources = [\"demo\"]\nurl = \"ftp://w/e\"\n", &[], "relay.routes.r.url"),
        ("[relay.routes.r]\nsources = [\"demo\"]\nurl = \"http://w/e\"\nconcurrency = 0\n", &[], "relay.routes.r.concurrency"),
        ("[relay.routes.r]\nsources = [\"demo\"]\nurl = \"http://w/e\"\nmax_attempts = 0\n", &[], "relay.routes.r.max_attempts"),
        ("[relay.routes.r]\nsources = [\"demo\"]\nurl = \"http://w/e\"\ntimeout = \"0s\"\n", &[], "relay.routes.r.timeout"),
        ("[relay.routes.r]\nsources = [\"demo\"]\nurl = \"http://w/e\"\nbackoff = \"2s\"\nmax_backoff = \"1s\"\n", &[], "relay.routes.r.max_backoff"),
        ("[relay.routes.r]\nsources = [\"demo\"]\nurl = \"http://w/e\"\nevent_types = [\"\"]\n", &[], "relay.routes.r.event_types"),
        ("[relay.routes.r]\nsources = [\"demo\"]\nurl = \"http://w/e\"\nstart = \"latest\"\n", &[], "relay.routes.r.start"),
        ("[relay.routes.r]\nsources = [\"demo\"]\nurl = \"http://w/e\"\ncolour = 1\n", &[], "colour"),
        ("[relay.routes.r]\nsources = [\"demo\"]\nurl = \"http://w/e\"\nheaders = { Idempotency-Key = \"x\" }\n", &[], "relay.routes.r.headers"),
        ("[relay.routes.r]\nsources = [\"demo\"]\nurl = \"http://w/e\"\nheaders = { Content-Type = \"text/plain\" }\n", &[], "relay.routes.r.headers"),
        ("[relay.routes.r]\nsources = [\"demo\"]\nurl = \"http://w/e\"\nheaders = { X-Hookonce-Attempt = \"9\" }\n", &[], "relay.routes.r.headers"),
        ("[relay.routes.r]\nsources = [\"demo\"]\nurl = \"http://w/e\"\nheaders = { Authorization = \"env:HOOKONCE_TEST_UNSET_TOKEN\" }\n", &[], "relay.routes.r.headers.Authorization"),
        ("[sink]\nkind = \"redis_stream\"\n[relay.routes.r]\nsources = [\"demo\"]\nurl = \"http://w/e\"\nsigning_secret = \"whsec_Zq7*\"\n", &[("HOOKONCE__STORE__BACKEND", "redis")], "relay.routes.r.signing_secret"),
        ("[relay.routes.bad name]\nsources = [\"demo\"]\nurl = \"http://w/e\"\n", &[], "relay.routes"),
        ("[sink]\nkind = \"stdout\"\ntrim = \"acknowledged\"\n", &[], "sink.trim"),
        ("[sink]\nkind = \"redis_stream\"\ntrim = \"sometimes\"\n", &[], "sink.trim"),
        ("[sink]\nkind = \"redis_stream\"\n[relay.routes.r]\nsources = [\"nosuch\"]\nurl = \"http://w/e\"\n", &[("HOOKONCE__STORE__BACKEND", "redis")], "relay.routes.r.sources: \"nosuch\" is not a configured source"),
        ("[sink]\nkind = \"file\"\npath = \"/tmp/x\"\n[relay.routes.r]\nsources = [\"demo\"]\nurl = \"http://w/e\"\n", &[("HOOKONCE__STORE__BACKEND", "redis")], "relay.routes: the relay needs sink.kind = \"redis_stream\""),
    ]
}

#[test]
fn configuration_errors_name_the_key_and_exit_non_zero() {
    let dir = tempfile::tempdir().unwrap();
    let cases = configuration_error_cases();
    for (extra, env, key) in cases {
        let sink = if extra.starts_with("[sink]") {
            ""
        } else {
            "[sink]\nkind = \"stdout\"\n"
        };
        let config = format!(
            "[store]\nbackend = \"memory\"\n{sink}[sources.demo]\nprovider = \"github\"\nsecrets = [\"s\"]\n{extra}"
        );
        let path = write(dir.path(), "bad.toml", &config);
        let output = hookonce(&["check-config", "--config", path.to_str().unwrap()], env);
        let shown = output_text(&output);
        assert!(
            !output.status.success(),
            "accepted: {extra} {env:?}\n{shown}"
        );
        assert!(shown.contains(key), "message does not name {key}: {shown}");
    }
    let missing = hookonce(
        &["check-config", "--config", "/nonexistent/hookonce.toml"],
        &[],
    );
    assert!(!missing.status.success());
    assert!(output_text(&missing).contains("/nonexistent/hookonce.toml"));
}

fn sign(config: &Path, source: &str, body_file: &Path, extra: &[&str]) -> Vec<(String, String)> {
    let mut args = vec![
        "sign",
        "--config",
        config.to_str().unwrap(),
        "--source",
        source,
        "--body",
        body_file.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let output = hookonce(&args, &[]);
    assert!(output.status.success(), "{}", output_text(&output));
    printed_headers(&output.stdout)
}

async fn post(url: &str, body: &[u8], headers: &[(String, String)]) -> reqwest::Response {
    crate::support::http::post(&reqwest::Client::new(), url, body, headers).await
}

#[tokio::test]
async fn signed_by_the_cli_accepted_by_the_daemon_and_logs_hold_no_secrets() {
    let dir = tempfile::tempdir().unwrap();
    let config = write(dir.path(), "hookonce.toml", &memory_config(dir.path()));
    let daemon = Daemon::spawn(&config, dir.path(), &[("RUST_LOG", "debug")]).await;
    let body = br#"{"zen":"Keep it logically awesome.","marker":"BODY-MARKER-77"}"#;
    let body_file = write(dir.path(), "body.json", std::str::from_utf8(body).unwrap());
    let headers = sign(
        &config,
        "demo",
        &body_file,
        &["--id", "delivery-cli-1", "--type", "ping"],
    );
    let signature = headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("x-hub-signature-256"))
        .expect("signature header")
        .1
        .clone();

    let url = daemon.url("/webhooks/demo");
    assert_eq!(post(&url, body, &headers).await.status(), 200);
    let replay = post(&url, body, &headers).await;
    assert_eq!(replay.status(), 200);
    assert_eq!(replay.headers()["idempotency-replayed"], "true");
    let mut tampered = headers.clone();
    for (name, value) in tampered.iter_mut() {
        if name.eq_ignore_ascii_case("x-hub-signature-256") {
            *value = format!("sha256={}", "0".repeat(64));
        }
    }
    assert_eq!(post(&url, body, &tampered).await.status(), 401);
    assert_eq!(
        post(&daemon.url("/webhooks/nope"), body, &headers)
            .await
            .status(),
        404
    );

    let events = std::fs::read_to_string(dir.path().join("events.jsonl")).unwrap();
    assert_eq!(events.lines().count(), 1);
    assert!(events.contains("delivery-cli-1"));

    daemon.signal("TERM");
    // Log lines are written by a background thread; after a clean exit all of them are out.
    let mut daemon = daemon;
    assert!(daemon.child.wait().unwrap().success());
    let logs = daemon.logs();
    assert!(
        logs.contains("delivery-cli-1") && logs.contains("invalid_signature"),
        "{logs}"
    );
    assert!(
        logs.contains("\"outcome\":\"duplicate\""),
        "logs are not JSON lines: {logs}"
    );
    for secret in [LITERAL_SECRET, signature.as_str(), "BODY-MARKER-77"] {
        assert!(!logs.contains(secret), "logs contain {secret:?}:\n{logs}");
    }
}

#[tokio::test]
async fn sigterm_stops_accepting_and_drains_in_flight_requests() {
    let dir = tempfile::tempdir().unwrap();
    let config = write(dir.path(), "hookonce.toml", &memory_config(dir.path()));
    let mut daemon = Daemon::spawn(&config, dir.path(), &[]).await;
    let body = br#"{"action":"drain"}"#;
    let body_file = write(dir.path(), "body.json", std::str::from_utf8(body).unwrap());
    let headers = sign(&config, "demo", &body_file, &["--id", "drain-1"]);
    let addr = format!("127.0.0.1:{}", daemon.port).parse().unwrap();
    let slow = start_slow_request(addr, "/webhooks/demo", &headers, body).await;
    let d = &daemon;
    // Half its body is sent: the request is being received, and must be drained all the same.
    eventually(
        10,
        "the request's body to be being read",
        move || async move { d.metric(BODY_READS, &[]).await == 1.0 },
    )
    .await;

    daemon.signal("TERM");
    let url = daemon.url("/healthz");
    eventually(10, "the listener to close", || {
        let request = reqwest::get(url.clone());
        async move { request.await.is_err() }
    })
    .await;
    let response = finish_slow_request(slow, body).await;
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    let status = daemon.child.wait().unwrap();
    assert!(status.success(), "exit status {status:?}");
    let events = std::fs::read_to_string(dir.path().join("events.jsonl")).unwrap();
    assert!(events.contains("drain-1"));
}

#[tokio::test]
async fn inspect_and_forget_a_dedup_record() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let config = write(
        dir.path(),
        "hookonce.toml",
        &format!(
            "[store]\nbackend = \"redis\"\nredis_url = \"{}\"\n[sources.gh]\nprovider = \"github\"\nsecrets = [\"s3\"]\n",
            redis.url()
        ),
    );
    let daemon = Daemon::spawn(&config, dir.path(), &[]).await;
    let body_file = write(dir.path(), "body.json", "{}");
    let headers = sign(&config, "gh", &body_file, &["--id", "redeliver-me"]);
    let url = daemon.url("/webhooks/gh");
    assert_eq!(post(&url, b"{}", &headers).await.status(), 200);

    let cfg = config.to_str().unwrap();
    let inspect = hookonce(&["inspect", "--config", cfg, "gh", "redeliver-me"], &[]);
    let shown = output_text(&inspect);
    assert!(inspect.status.success(), "{shown}");
    assert!(
        shown.contains("hookonce:{gh}:d:redeliver-me") && shown.contains("entry_id:"),
        "{shown}"
    );

    let forget = hookonce(&["forget", "--config", cfg, "gh", "redeliver-me"], &[]);
    assert!(forget.status.success(), "{}", output_text(&forget));
    let again = post(&url, b"{}", &headers).await;
    assert_eq!(again.status(), 200);
    assert!(again.headers().get("idempotency-replayed").is_none());
    let len: i64 = redis::cmd("XLEN")
        .arg("hookonce:{gh}:events")
        .query(&mut redis.connection())
        .unwrap();
    assert_eq!(len, 2);

    let missing = hookonce(&["inspect", "--config", cfg, "gh", "never-seen"], &[]);
    assert_eq!(missing.status.code(), Some(1));
    let unknown = hookonce(&["inspect", "--config", cfg, "nosource", "x"], &[]);
    assert!(!unknown.status.success());
}
