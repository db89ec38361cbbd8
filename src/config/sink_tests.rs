//! `[sink]`'s checks: the coalescing keys' bounds, and the Kafka sink's keys named in their errors
//! without the password.

use super::super::from_toml;

const BASE: &str =
    "[store]\nbackend = \"redis\"\n[sources.s]\nprovider = \"stripe\"\nsecrets = [\"whsec_x\"]\n";

fn error(sink: &str) -> String {
    let text = format!("{BASE}[sink]\n{sink}\n");
    match from_toml(&text).and_then(|s| s.validate().map(|()| s)) {
        Ok(_) => String::new(),
        Err(e) => e.to_string(),
    }
}

#[test]
fn coalescing_keys_are_bounded_and_errors_name_the_key() {
    assert_eq!(error("coalesce = false\ncoalesce_max_events = 10000"), "");
    assert_eq!(
        error("coalesce_window = \"100ms\"\ncoalesce_in_flight = 16"),
        ""
    );
    assert_eq!(error("coalesce_max_bytes = \"64MiB\""), "");
    assert_eq!(error("coalesce_max_requests = 1"), "");
    for (sink, key) in [
        ("coalesce_max_events = 0", "sink.coalesce_max_events"),
        ("coalesce_max_events = 10001", "sink.coalesce_max_events"),
        ("coalesce_max_requests = 0", "sink.coalesce_max_requests"),
        (
            "coalesce_max_requests = 10001",
            "sink.coalesce_max_requests",
        ),
        (
            "kind = \"stdout\"\ncoalesce_max_requests = 4",
            "sink.coalesce_max_requests",
        ),
        ("coalesce_in_flight = 0", "sink.coalesce_in_flight"),
        ("coalesce_in_flight = 17", "sink.coalesce_in_flight"),
        ("coalesce_window = \"101ms\"", "sink.coalesce_window"),
        ("coalesce_max_bytes = \"512B\"", "sink.coalesce_max_bytes"),
        ("coalesce_max_bytes = \"65MiB\"", "sink.coalesce_max_bytes"),
        ("kind = \"stdout\"\ncoalesce = false", "sink.coalesce"),
        (
            "kind = \"stdout\"\ncoalesce_window = \"1ms\"",
            "sink.coalesce_window",
        ),
    ] {
        let message = error(sink);
        assert!(message.starts_with(key), "{sink}: {message}");
    }
}

const SECRET: &str = "Zq7kafkaSecret";

fn kafka(keys: &str) -> String {
    error(&format!("kind = \"kafka\"\n{keys}"))
}

#[test]
fn kafka_keys_are_checked_naming_the_key_and_never_the_password() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.pem");
    let not_pem = dir.path().join("not.pem");
    std::fs::write(&not_pem, "no certificate here").unwrap();
    let sasl = format!(
        "sasl_mechanism = \"SCRAM-SHA-512\"\nsasl_username = \"hook\"\nsasl_password = \"{SECRET}\""
    );
    assert_eq!(kafka("brokers = [\"k1:9092\", \"10.0.0.2:9093\"]"), "");
    assert_eq!(
        kafka(&format!(
            "brokers = [\"[::1]:9092\"]\ntopic = \"events.{{source}}\"\ntls = true\n{sasl}"
        )),
        ""
    );
    for (keys, key, problem) in [
        ("topic = \"t\"", "sink.brokers", "required"),
        ("brokers = [\"k1\"]", "sink.brokers[0]", "port is missing"),
        (
            "brokers = [\"k1:9092\", \"k2:0\"]",
            "sink.brokers[1]",
            "outside 1-65535",
        ),
        (
            "brokers = [\"kafka://k1:9092\"]",
            "sink.brokers[0]",
            "without a scheme",
        ),
        ("brokers = [\"k 1:9092\"]", "sink.brokers[0]", "host:port"),
        (
            "brokers = [\"k:1\"]\ntopic = \"t.{event_type}\"",
            "sink.topic",
            "placeholder",
        ),
        (
            "brokers = [\"k:1\"]\ntopic = \"t/x\"",
            "sink.topic",
            "letters, digits",
        ),
        (
            &format!("brokers = [\"k:1\"]\ntopic = \"{}{{source}}\"", "t".repeat(190)),
            "sink.topic",
            "more than Kafka's 249",
        ),
        (
            &format!("brokers = [\"k:1\"]\ntls_ca_file = {missing:?}"),
            "sink.tls_ca_file",
            "cannot read",
        ),
        (
            &format!("brokers = [\"k:1\"]\ntls_ca_file = {not_pem:?}"),
            "sink.tls_ca_file",
            "no PEM certificate",
        ),
        (
            &format!("brokers = [\"k:1\"]\ntls_cert_file = {not_pem:?}"),
            "sink.tls_key_file",
            "must be set with sink.tls_cert_file",
        ),
        (
            &format!("brokers = [\"k:1\"]\ntls = false\ntls_ca_file = {not_pem:?}"),
            "sink.tls",
            "is false",
        ),
        (
            &format!(
                "brokers = [\"k:1\"]\nsasl_mechanism = \"GSSAPI\"\nsasl_username = \"u\"\nsasl_password = \"{SECRET}\""
            ),
            "sink.sasl_mechanism",
            "not one of",
        ),
        (
            &format!("brokers = [\"k:1\"]\nsasl_mechanism = \"PLAIN\"\nsasl_password = \"{SECRET}\""),
            "sink.sasl_username",
            "required",
        ),
        (
            &format!("brokers = [\"k:1\"]\nsasl_password = \"{SECRET}\""),
            "sink.sasl_password",
            "needs sink.sasl_mechanism",
        ),
        (
            &format!("brokers = [\"k:1\"]\n{sasl}\nexchange = \"x\""),
            "sink.exchange",
            "not used by sink.kind = \"kafka\"",
        ),
    ] {
        let message = kafka(keys);
        assert!(message.starts_with(key), "{keys}: {message}");
        assert!(message.contains(problem), "{keys}: {message}");
        assert!(!message.contains(SECRET), "{keys}: {message}");
    }
}

#[test]
fn kafka_password_is_redacted_in_debug_and_in_the_shown_settings() {
    let text = format!(
        "{BASE}[sink]\nkind = \"kafka\"\nbrokers = \"k1:9092\"\nsasl_mechanism = \"PLAIN\"\nsasl_username = \"hook\"\nsasl_password = \"{SECRET}\"\ntls = true\n"
    );
    let settings = from_toml(&text).unwrap();
    settings.validate().unwrap();
    assert_eq!(
        settings.sink.brokers,
        ["k1:9092"],
        "one string is a list of one"
    );
    let shown = format!(
        "{:?} {}",
        settings.sink,
        toml::to_string(&settings.sink).unwrap()
    );
    assert!(!shown.contains(SECRET), "{shown}");
    assert!(shown.contains("[redacted]"), "{shown}");
    assert_eq!(settings.sink.kafka_security().protocol(), "sasl_ssl");
    assert_eq!(
        super::super::expand_topic(settings.sink.topic(), "gh"),
        "hookonce.gh"
    );
}

#[test]
fn kafka_lease_must_outlast_the_timeout() {
    let keys = "brokers = [\"k:1\"]\ntimeout = \"5s\"\nlease = \"8s\"";
    assert!(kafka(keys).starts_with("sink.lease"), "{}", kafka(keys));
    assert_eq!(
        kafka("brokers = [\"k:1\"]\ntimeout = \"5s\"\nlease = \"9s\""),
        ""
    );
}
