//! `hookonce check-config` refuses what `serve` would fail on or misuse: TLS to Redis that would
//! not verify the server unless that is asked for explicitly, a CA file that cannot be read, a
//! mix of `redis://` and `rediss://` nodes, static headers that frame the request, two listeners on one address,
//! ports outside 1-65535 in the URLs the daemon dials, and secret files that cannot be read or are empty. Each case runs the real binary, which must
//! exit non-zero with a message naming the key (and never a credential of the URL).

use crate::support::binary::{assert_refused, hookonce, output_text, write};

/// A credential carried by some of the URLs below; it must never be printed.
const SECRET: &str = "Zq7edgeCredential";

/// A valid configuration around `extra`: the memory store and a stdout sink, unless `extra`
/// brings its own `[store]` or `[sink]`.
fn config(extra: &str) -> String {
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
    format!("{store}{sink}[sources.demo]\nprovider = \"github\"\nsecrets = [\"s\"]\n{extra}")
}

/// The Redis store in atomic mode, with `store` added to its table.
fn redis(store: &str) -> String {
    format!("[store]\nbackend = \"redis\"\n{store}[sink]\nkind = \"redis_stream\"\n")
}

const ROUTE: &str = "[relay.routes.r]\nsources = [\"demo\"]\nurl = \"http://w/e\"\n";

/// A configuration fragment and what its error must say: the key, then part of the problem.
fn cases() -> Vec<(String, String, &'static str)> {
    let port = "outside 1-65535";
    let mut cases = vec![
        // 1. TLS to Redis: no certificate check unless named, files that exist, one scheme.
        (
            redis(&format!("redis_url = \"rediss://u:{SECRET}@cache:6380/#insecure\"\n")),
            "store.redis_url".to_owned(),
            "set store.tls_insecure = true",
        ),
        (
            redis(&format!(
                "topology = \"cluster\"\ncluster_nodes = [\"rediss://a:7000\", \"redis://:{SECRET}@b:7001\"]\n"
            )),
            "store.cluster_nodes[1]".to_owned(),
            "uses redis:// while other store URLs use rediss://",
        ),
        (
            redis("topology = \"sentinel\"\nsentinels = [\"rediss://s:26379\"]\nsentinel_master = \"m\"\ntls_ca_file = \"/nonexistent/ca.pem\"\n"),
            "store.tls_ca_file".to_owned(),
            "cannot read /nonexistent/ca.pem",
        ),
        // 4. Ports outside 1-65535 in every URL the daemon dials, port 0 included.
        (
            "[proxies.api]\nupstream = \"http://orders:99999\"\nlisten = \"127.0.0.1:0\"\n"
                .to_owned(),
            "proxies.api.upstream".to_owned(),
            port,
        ),
        (
            "[proxies.api]\nupstream = \"http://orders:0\"\nlisten = \"127.0.0.1:0\"\n".to_owned(),
            "proxies.api.upstream".to_owned(),
            port,
        ),
        (
            redis(&format!("redis_url = \"redis://:{SECRET}@cache:65536\"\n")),
            "store.redis_url".to_owned(),
            port,
        ),
        (
            redis("redis_url = \"redis://cache:0\"\n"),
            "store.redis_url".to_owned(),
            port,
        ),
        (
            redis("topology = \"cluster\"\ncluster_nodes = [\"redis://a:70000\"]\n"),
            "store.cluster_nodes[0]".to_owned(),
            port,
        ),
        (
            redis("topology = \"sentinel\"\nsentinels = [\"redis://s:0\"]\nsentinel_master = \"m\"\n"),
            "store.sentinels[0]".to_owned(),
            port,
        ),
        (
            format!("[sink]\nkind = \"http\"\nurl = \"https://u:{SECRET}@worker:123456/hook\"\n"),
            "sink.url".to_owned(),
            port,
        ),
        (
            "[sink]\nkind = \"nats\"\nnats_url = \"nats://bus:0\"\n".to_owned(),
            "sink.nats_url".to_owned(),
            port,
        ),
        (
            format!(
                "{}[relay.routes.r]\nsources = [\"demo\"]\nurl = \"http://w:99999/e\"\n",
                redis("")
            ),
            "relay.routes.r.url".to_owned(),
            port,
        ),
        // 3. Two listeners on one address, or one port on a wildcard and on one interface.
        (
            "[server]\nlisten = \"127.0.0.1:7101\"\nmetrics_listen = \"127.0.0.1:7101\"\n"
                .to_owned(),
            "server.metrics_listen".to_owned(),
            "server.listen",
        ),
        (
            "[server]\nlisten = \"0.0.0.0:7102\"\nmetrics_listen = \"127.0.0.1:7102\"\n".to_owned(),
            "server.metrics_listen".to_owned(),
            "server.listen",
        ),
        (
            "[server]\nlisten = \"127.0.0.1:7103\"\nmetrics_listen = \"127.0.0.1:7104\"\n\
             [proxies.api]\nupstream = \"http://o\"\nlisten = \"0.0.0.0:7104\"\n"
                .to_owned(),
            "proxies.api.listen".to_owned(),
            "server.metrics_listen",
        ),
        (
            "[proxies.a]\nupstream = \"http://o\"\nlisten = \"127.0.0.1:7105\"\n\
             [proxies.b]\nupstream = \"http://o\"\nlisten = \"127.0.0.1:7105\"\n"
                .to_owned(),
            "proxies.b.listen".to_owned(),
            "proxies.a.listen",
        ),
        // 5. Secret files that cannot be read or hold no secret.
        (
            "[sources.more]\nprovider = \"github\"\nsecrets_files = [\"/nonexistent/hookonce-secrets\"]\n"
                .to_owned(),
            "sources.more.secrets_files[0]".to_owned(),
            "cannot read /nonexistent/hookonce-secrets",
        ),
        (
            "[sources.more]\nprovider = \"github\"\nsecrets_files = [\"/dev/null\"]\n".to_owned(),
            "sources.more.secrets_files[0]".to_owned(),
            "/dev/null holds no secret",
        ),
    ];
    // 2. Headers that frame the request, in relay routes and in the HTTP sink, in any case.
    for header in [
        "Content-Length",
        "transfer-encoding",
        "Host",
        "CONNECTION",
        "Upgrade",
        "TE",
        "Trailer",
    ] {
        cases.push((
            format!(
                "{}{ROUTE}[relay.routes.r.headers]\n{header} = \"3\"\n",
                redis("")
            ),
            format!("relay.routes.r.headers.{header}"),
            "frames the request",
        ));
        cases.push((
            format!(
                "[sink]\nkind = \"http\"\nurl = \"http://w/e\"\n[sink.headers]\n{header} = \"3\"\n"
            ),
            format!("sink.headers.{header}"),
            "frames the request",
        ));
    }
    // 7. Telemetry: a collector URL to post to, a ratio, a name.
    for (telemetry, key, problem) in [
        (
            "sample_ratio = 1.5",
            "telemetry.sample_ratio",
            "between 0.0 and 1.0",
        ),
        (
            "sample_ratio = -1",
            "telemetry.sample_ratio",
            "between 0.0 and 1.0",
        ),
        ("service_name = \"\"", "telemetry.service_name", "empty"),
        (
            "otlp_endpoint = \"grpc://c:4317\"",
            "telemetry.otlp_endpoint",
            "not http or https",
        ),
        (
            "otlp_endpoint = \"c:4318\"",
            "telemetry.otlp_endpoint",
            "not http or https",
        ),
        (
            "otlp_endpoint = \"http://u:Zq7edgeCredential@c:4318\"",
            "telemetry.otlp_endpoint",
            "credentials",
        ),
        (
            "otlp_endpoint = \"http://c:0\"",
            "telemetry.otlp_endpoint",
            "port 0",
        ),
        (
            "sample_rate = 0.5",
            "telemetry.sample_rate",
            "unknown field",
        ),
    ] {
        cases.push((
            format!("[telemetry]\n{telemetry}\n"),
            key.to_owned(),
            problem,
        ));
    }
    cases
}

#[test]
fn check_config_refuses_what_serve_would_fail_on_naming_the_key() {
    // Every case is run and every wrong one reported, so one run shows each rule's state; the
    // key leads its problem (`key: problem`).
    assert_refused(
        cases()
            .into_iter()
            .map(|(extra, key, problem)| (config(&extra), format!("{key}: "), problem.to_owned())),
        SECRET,
    );
}

#[test]
fn check_config_accepts_the_neighbours_of_what_it_refuses() {
    let dir = tempfile::tempdir().unwrap();
    let accepted = [
        redis("redis_url = \"redis://cache:6379\"\n"),
        redis("redis_url = \"unix:///run/redis.sock\"\n"),
        "[proxies.api]\nupstream = \"http://orders:65535\"\nlisten = \"127.0.0.1:0\"\n".to_owned(),
        "[server]\nlisten = \"127.0.0.1:0\"\nmetrics_listen = \"127.0.0.1:0\"\n\
         [proxies.api]\nupstream = \"http://o\"\nlisten = \"127.0.0.1:0\"\n"
            .to_owned(),
        "[server]\nlisten = \"127.0.0.1:7110\"\nmetrics_listen = \"127.0.0.2:7110\"\n".to_owned(),
        format!(
            "{}{ROUTE}[relay.routes.r.headers]\nAuthorization = \"Bearer x\"\n",
            redis("")
        ),
        "[sink]\nkind = \"http\"\nurl = \"http://w:8080/e\"\n[sink.headers]\nX-Token = \"t\"\n"
            .to_owned(),
        "[telemetry]\notlp_endpoint = \"https://collector:4318/\"\nsample_ratio = 0\n".to_owned(),
        "[telemetry]\nservice_name = \"edge\"\nsample_ratio = 1\n".to_owned(),
    ];
    for extra in accepted {
        let path = write(dir.path(), "edge.toml", &config(&extra));
        let output = hookonce(&["check-config", "--config", path.to_str().unwrap()], &[]);
        assert!(
            output.status.success(),
            "refused:\n{extra}\n{}",
            output_text(&output)
        );
    }
}
