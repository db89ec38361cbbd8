//! Property tests of configuration loading: any TOML-ish text and environment never panic.
//!
//! The text is built from the real section and key names with values of every shape (valid
//! ones, huge numbers, wrong types, arbitrary strings), so that most cases get past the TOML
//! parser and into deserialization and validation. Whatever loads must render redacted.

use std::collections::HashMap;

use proptest::collection::vec;
use proptest::prelude::*;

use super::{from_toml, from_toml_and_env};
use crate::property::check;

const KEYS: &[&str] = &[
    "server.listen",
    "server.metrics_listen",
    "server.body_limit",
    "server.request_timeout",
    "server.header_read_timeout",
    "server.max_in_flight",
    "store.backend",
    "store.redis_url",
    "store.key_prefix",
    "store.timeout",
    "store.wait_replicas",
    "sink.kind",
    "sink.max_len",
    "sink.lease",
    "sink.nats_url",
    "sink.url",
    "sink.stream",
    "sources.s.provider",
    "sources.s.secrets",
    "sources.s.tolerance",
    "sources.s.dedup_ttl",
    "sources.s.stream",
    "sources.s.signed_content",
    "sources.s.id_pointer",
    "sources.s-2.provider",
];

/// A TOML value as text: mostly plausible, sometimes hostile.
fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "\"stripe\"",
            "\"generic\"",
            "\"redis\"",
            "\"memory\"",
            "\"redis_stream\"",
            "\"http\"",
            "\"30s\"",
            "\"300000000y\"",
            "\"1MiB\"",
            "\"99999999999GiB\"",
            "\"0.0.0.0:8080\"",
            "\"redis://u:pw@h:6379/0\"",
            "\"unix:///tmp/r.sock?pass=pw\"",
            "\"{id}{body}\"",
            "[\"whsec_a\", \"b\"]",
            "[]",
            "0",
            "-1",
            "18446744073709551615",
            "true",
            "{}",
        ])
        .prop_map(str::to_owned),
        any::<i64>().prop_map(|n| n.to_string()),
        "[ -~]{0,24}".prop_map(|s| format!("{s:?}")),
        "[ -~]{0,24}",
    ]
}

#[test]
fn property_configuration_text_never_panics_and_loads_redacted() {
    check(
        512,
        vec((prop::sample::select(KEYS), value()), 0..12),
        |pairs| {
            let text: String = pairs.iter().map(|(k, v)| format!("{k} = {v}\n")).collect();
            if let Ok(settings) = from_toml(&text) {
                let shown = settings.to_redacted_toml();
                for source in settings.sources.values() {
                    for secret in &source.secrets {
                        let quoted = format!("\"{}\"", secret.expose());
                        prop_assert!(!shown.contains(&quoted), "{} shows a secret", text);
                    }
                }
            }
            Ok(())
        },
    );
}

#[test]
fn property_environment_values_never_panic() {
    let base = "[sources.s]\nprovider = \"stripe\"\nsecrets = [\"whsec_a\"]\n";
    let variable = prop::sample::select(KEYS)
        .prop_map(|key| format!("HOOKONCE__{}", key.replace('.', "__").to_ascii_uppercase()));
    check(512, vec((variable, "[ -~]{0,30}"), 0..6), |pairs| {
        let variables: HashMap<String, String> = pairs.into_iter().collect();
        let _ = from_toml_and_env(base, variables);
        Ok(())
    });
}
