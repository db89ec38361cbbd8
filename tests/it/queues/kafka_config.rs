//! The Kafka sink's keys through the binary: `check-config` refuses a bad broker address, a bad
//! topic template and a missing TLS file, naming the key and the problem and exiting non-zero;
//! `serve` against brokers that do not answer stops at start naming them; and the SASL password
//! is printed by neither.

use crate::support::binary::{assert_refused, hookonce, output_text, write};
use crate::support::kafka::KafkaMock;

const PASSWORD: &str = "Kq9SaslPassword";

/// A whole configuration with a Kafka sink whose keys are `sink`.
fn config(sink: &str) -> String {
    format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nmetrics_listen = \"127.0.0.1:0\"\n\
         [store]\nbackend = \"memory\"\n\
         [sink]\nkind = \"kafka\"\ntimeout = \"1s\"\n{sink}\n\
         [sources.demo]\nprovider = \"github\"\nsecrets = [\"s\"]\n"
    )
}

fn sasl() -> String {
    format!("sasl_mechanism = \"SCRAM-SHA-256\"\nsasl_username = \"hook\"\nsasl_password = \"{PASSWORD}\"\n")
}

#[test]
fn kafka_check_config_refuses_bad_brokers_templates_and_tls_files() {
    let brokers = "brokers = [\"k1:9092\"]\n";
    let cases = [
        (format!("brokers = [\"k1\"]\n{}", sasl()), "sink.brokers[0]", "port is missing"),
        (
            format!("brokers = [\"k1:9092\", \"k2:99999\"]\n{}", sasl()),
            "sink.brokers[1]",
            "outside 1-65535",
        ),
        (sasl(), "sink.brokers", "required"),
        (
            format!("{brokers}topic = \"events.{{event_type}}\"\n{}", sasl()),
            "sink.topic",
            "only the placeholder {source}",
        ),
        (
            format!("{brokers}topic = \"events/{{source}}\"\n"),
            "sink.topic",
            "letters, digits",
        ),
        (
            format!("{brokers}tls_ca_file = \"/nonexistent/ca.pem\"\n{}", sasl()),
            "sink.tls_ca_file",
            "cannot read /nonexistent/ca.pem",
        ),
        (
            format!(
                "{brokers}tls_cert_file = \"/nonexistent/c.pem\"\ntls_key_file = \"/nonexistent/k.pem\"\n"
            ),
            "sink.tls_cert_file",
            "cannot read /nonexistent/c.pem",
        ),
        (
            format!("{brokers}sasl_mechanism = \"GSSAPI\"\nsasl_username = \"u\"\nsasl_password = \"{PASSWORD}\"\n"),
            "sink.sasl_mechanism",
            "is not one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512",
        ),
        (
            format!("{brokers}{}routing_key = \"{{source}}\"\n", sasl()),
            "sink.routing_key",
            "is not used by sink.kind = \"kafka\"",
        ),
    ];
    assert_refused(
        cases
            .into_iter()
            .map(|(sink, key, problem)| (config(&sink), key.to_owned(), problem.to_owned())),
        PASSWORD,
    );
}

#[test]
fn kafka_check_config_accepts_good_keys_and_shows_the_password_redacted() {
    let dir = tempfile::tempdir().unwrap();
    let text = config(&format!(
        "brokers = [\"k1:9092\", \"[::1]:9093\"]\ntopic = \"hooks.{{source}}.v1\"\ntls = true\n{}",
        sasl()
    ));
    let path = write(dir.path(), "kafka.toml", &text);
    let output = hookonce(&["check-config", "--config", path.to_str().unwrap()], &[]);
    let shown = output_text(&output);
    assert!(output.status.success(), "{shown}");
    assert!(
        !shown.contains(PASSWORD),
        "the password was printed: {shown}"
    );
}

/// Brokers that refuse connections: `serve` stops within `sink.timeout` and says which brokers,
/// with neither the password in its output nor in librdkafka's lines.
#[test]
fn kafka_unreachable_brokers_stop_the_start_naming_them() {
    let port = crate::support::redis::free_port();
    let dir = tempfile::tempdir().unwrap();
    let text = config(&format!("brokers = [\"127.0.0.1:{port}\"]\n{}", sasl()));
    let path = write(dir.path(), "kafka.toml", &text);
    let output = hookonce(&["serve", "--config", path.to_str().unwrap()], &[]);
    let text = output_text(&output);
    assert!(!output.status.success(), "{text}");
    assert!(
        text.contains(&format!("cannot reach the Kafka brokers 127.0.0.1:{port}")),
        "{text}"
    );
    assert!(!text.contains(PASSWORD), "the password was printed: {text}");
}

/// The same daemon against the mock cluster starts and is ready: the addresses the mock gives are
/// ones `check-config` takes.
#[test]
fn kafka_mock_cluster_addresses_pass_check_config() {
    let mock = KafkaMock::start(1);
    let dir = tempfile::tempdir().unwrap();
    let text = config(&format!("brokers = {:?}\n", mock.brokers()));
    let path = write(dir.path(), "kafka.toml", &text);
    let output = hookonce(&["check-config", "--config", path.to_str().unwrap()], &[]);
    assert!(output.status.success(), "{}", output_text(&output));
}
