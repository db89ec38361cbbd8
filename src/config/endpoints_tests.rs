//! The addresses and headers `check-config` refuses, through the whole configuration as the
//! daemon loads it: each rule, with the key its error names.

use super::super::from_toml;

/// A credential carried by some URLs below; no error may show it.
const SECRET: &str = "hunter2";

/// The error of a configuration made of `extra` on top of a valid one (the memory store and a
/// stdout sink unless `extra` brings its own), or "" when it is valid.
fn error(extra: &str) -> String {
    let store = if extra.contains("[store]") {
        ""
    } else {
        "[store]\nbackend = \"memory\"\n"
    };
    let sink = if extra.contains("[sink]") {
        ""
    } else {
        "[sink]\nkind = \"stdout\"\n"
    };
    let text = format!(
        "{store}{sink}[sources.s]\nprovider = \"stripe\"\nsecrets = [\"whsec_x\"]\n{extra}"
    );
    match from_toml(&text) {
        Ok(_) => String::new(),
        Err(e) => e.to_string(),
    }
}

fn redis(store: &str) -> String {
    format!("[store]\nbackend = \"redis\"\n{store}[sink]\nkind = \"redis_stream\"\n")
}

/// Asserts that each configuration is refused with an error starting with its key and
/// containing its problem, and never the credential.
fn refused(cases: &[(String, &str, &str)]) {
    for (extra, key, problem) in cases {
        let message = error(extra);
        assert!(
            message.starts_with(&format!("{key}: ")),
            "{extra}\nnot named {key}: {message:?}"
        );
        assert!(message.contains(problem), "{extra}\n{message}");
        assert!(!message.contains(SECRET), "{message}");
    }
}

#[test]
fn rediss_urls_are_accepted_wherever_redis_is_configured() {
    for store in [
        format!("redis_url = \"rediss://u:{SECRET}@cache:6380\"\n"),
        "topology = \"cluster\"\ncluster_nodes = [\"rediss://a:1\", \"rediss://b:2\"]\n".to_owned(),
        "topology = \"sentinel\"\nsentinels = [\"rediss://s:26379\"]\nsentinel_master = \"m\"\n"
            .to_owned(),
    ] {
        assert_eq!(error(&redis(&store)), "", "{store}");
    }
}

/// A PEM file in a temporary directory (kept while the test runs).
fn pem(dir: &tempfile::TempDir, name: &str, text: &str) -> String {
    let path = dir.path().join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

/// A syntactically valid PEM certificate block (the checks parse PEM, not X.509).
const CERT: &str =
    "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIUQ3w=\n-----END CERTIFICATE-----\n";
const KEY: &str = "-----BEGIN PRIVATE KEY-----\nMIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg\n-----END PRIVATE KEY-----\n";

#[test]
fn tls_settings_are_checked_naming_their_key() {
    let dir = tempfile::tempdir().unwrap();
    let ca = pem(&dir, "ca.pem", CERT);
    let cert = pem(&dir, "client.pem", CERT);
    let key = pem(&dir, "client.key", KEY);
    let empty = pem(&dir, "empty.pem", "not a certificate\n");
    let tls = format!("redis_url = \"rediss://:{SECRET}@cache:6380\"\n");
    let missing = dir.path().join("missing.pem").display().to_string();
    refused(&[
        (
            redis(&format!("{tls}tls_ca_file = \"{missing}\"\n")),
            "store.tls_ca_file",
            "cannot read",
        ),
        (
            redis(&format!("{tls}tls_ca_file = \"{empty}\"\n")),
            "store.tls_ca_file",
            "holds no PEM certificate",
        ),
        (
            redis(&format!("{tls}tls_cert_file = \"{cert}\"\n")),
            "store.tls_key_file",
            "must be set with store.tls_cert_file",
        ),
        (
            redis(&format!("{tls}tls_key_file = \"{key}\"\n")),
            "store.tls_cert_file",
            "must be set with store.tls_key_file",
        ),
        (
            redis(&format!("{tls}tls_cert_file = \"{cert}\"\ntls_key_file = \"{cert}\"\n")),
            "store.tls_key_file",
            "no readable PEM private key",
        ),
        (
            redis(&format!("redis_url = \"redis://cache:6379\"\ntls_ca_file = \"{ca}\"\n")),
            "store.tls_ca_file",
            "only when the store URLs use rediss://",
        ),
        (
            redis("topology = \"cluster\"\ncluster_nodes = [\"rediss://a:1\", \"redis://b:2\"]\n"),
            "store.cluster_nodes[1]",
            "uses redis:// while other store URLs use rediss://",
        ),
        (
            redis(&format!("redis_url = \"rediss://:{SECRET}@cache:6380/#insecure\"\n")),
            "store.redis_url",
            "set store.tls_insecure = true",
        ),
        (
            redis(&format!(
                "redis_url = \"rediss://cache:6380/#insecure\"\ntls_insecure = true\ntls_ca_file = \"{ca}\"\n"
            )),
            "store.tls_ca_file",
            "has no effect with store.tls_insecure",
        ),
        (
            redis("redis_url = \"rediss://cache:6380/#verify\"\n"),
            "store.redis_url",
            "the only URL fragment understood is #insecure",
        ),
        (
            redis("redis_url = \"redis://cache:6380/#insecure\"\n"),
            "store.redis_url",
            "the only URL fragment understood is #insecure",
        ),
        (
            "[store]\nbackend = \"memory\"\ntls_insecure = true\n".to_owned(),
            "store.tls_insecure",
            "applies to store.backend = \"redis\" only",
        ),
    ]);
    for store in [
        format!(
            "{tls}tls_ca_file = \"{ca}\"\ntls_cert_file = \"{cert}\"\ntls_key_file = \"{key}\"\n"
        ),
        "redis_url = \"rediss://cache:6380/#insecure\"\ntls_insecure = true\n".to_owned(),
        "redis_url = \"rediss://cache:6380\"\ntls_insecure = true\n".to_owned(),
    ] {
        assert_eq!(error(&redis(&store)), "", "{store}");
    }
}

#[test]
fn framing_headers_are_refused_in_relay_routes_and_the_http_sink() {
    let route = "[relay.routes.r]\nsources = [\"s\"]\nurl = \"http://w/e\"\n";
    let mut cases = Vec::new();
    for header in [
        "Content-Length",
        "transfer-encoding",
        "Host",
        "Connection",
        "UPGRADE",
        "te",
        "Trailer",
    ] {
        cases.push((
            format!(
                "{}{route}[relay.routes.r.headers]\n{header} = \"3\"\n",
                redis("")
            ),
            format!("relay.routes.r.headers.{header}"),
        ));
        cases.push((
            format!(
                "[sink]\nkind = \"http\"\nurl = \"http://w/e\"\n[sink.headers]\n{header} = \"3\"\n"
            ),
            format!("sink.headers.{header}"),
        ));
    }
    let cases: Vec<(String, &str, &str)> = cases
        .iter()
        .map(|(extra, key)| (extra.clone(), key.as_str(), "frames the request"))
        .collect();
    refused(&cases);
    let other = format!(
        "{}{route}[relay.routes.r.headers]\nX-Token = \"t\"\n",
        redis("")
    );
    assert_eq!(error(&other), "");
}

#[test]
fn two_listeners_on_one_address_are_refused_naming_both_keys() {
    let proxy = |name: &str, listen: &str| {
        format!("[proxies.{name}]\nupstream = \"http://o\"\nlisten = \"{listen}\"\n")
    };
    refused(&[
        (
            "[server]\nlisten = \"127.0.0.1:7001\"\nmetrics_listen = \"127.0.0.1:7001\"\n".into(),
            "server.metrics_listen",
            "server.listen",
        ),
        (
            "[server]\nlisten = \"0.0.0.0:7001\"\nmetrics_listen = \"127.0.0.1:7001\"\n".into(),
            "server.metrics_listen",
            "server.listen",
        ),
        (
            format!(
                "[server]\nlisten = \"127.0.0.1:7001\"\n{}",
                proxy("api", "0.0.0.0:7001")
            ),
            "proxies.api.listen",
            "server.listen",
        ),
        (
            format!(
                "{}{}",
                proxy("a", "127.0.0.1:7002"),
                proxy("b", "127.0.0.1:7002")
            ),
            "proxies.b.listen",
            "proxies.a.listen",
        ),
    ]);
    let ephemeral = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nmetrics_listen = \"127.0.0.1:0\"\n{}",
        proxy("api", "127.0.0.1:0")
    );
    assert_eq!(error(&ephemeral), "");
}

#[test]
fn ports_outside_1_to_65535_are_refused_in_every_url_dialled() {
    let port = "outside 1-65535";
    let upstream =
        |url: &str| format!("[proxies.api]\nupstream = \"{url}\"\nlisten = \"127.0.0.1:0\"\n");
    refused(&[
        (
            upstream("http://orders:99999"),
            "proxies.api.upstream",
            port,
        ),
        (upstream("http://orders:0/v1"), "proxies.api.upstream", port),
        (
            redis(&format!("redis_url = \"redis://:{SECRET}@cache:65536\"\n")),
            "store.redis_url",
            port,
        ),
        (
            redis("redis_url = \"redis://cache:0\"\n"),
            "store.redis_url",
            port,
        ),
        (
            redis("topology = \"cluster\"\ncluster_nodes = [\"redis://a:70000\"]\n"),
            "store.cluster_nodes[0]",
            port,
        ),
        (
            redis(
                "topology = \"sentinel\"\nsentinels = [\"redis://s:0\"]\nsentinel_master = \"m\"\n",
            ),
            "store.sentinels[0]",
            port,
        ),
        (
            format!("[sink]\nkind = \"http\"\nurl = \"https://u:{SECRET}@w:123456/hook\"\n"),
            "sink.url",
            port,
        ),
        (
            "[sink]\nkind = \"nats\"\nnats_url = \"nats://bus:0\"\n".into(),
            "sink.nats_url",
            port,
        ),
        (
            format!(
                "{}[relay.routes.r]\nsources = [\"s\"]\nurl = \"http://w:99999/e\"\n",
                redis("")
            ),
            "relay.routes.r.url",
            port,
        ),
    ]);
    assert_eq!(error(&upstream("http://orders:65535")), "");
}
