//! Unit tests of the provider registry: every entry builds, signs and checks its keys.

use std::time::Duration;

use serde_json::json;

use super::super::testing::settings;
use super::super::SignOptions;
use super::*;

/// The smallest valid settings of each provider, with the common keys every provider takes.
fn minimal(provider: &str) -> SourceSettings {
    let (secret, extra) = match provider {
        "adyen" => ("44782DEF547AAA06C910C43932B1EB0C", json!({})),
        "adyen_platform" => (
            "44782DEF547AAA06C910C43932B1EB0C",
            json!({ "id_pointer": "/id" }),
        ),
        "square" => (
            "key",
            json!({ "notification_url": "https://hooks.example.com/sq" }),
        ),
        "generic" => (
            "key",
            json!({ "signature_header": "X-Sig", "algorithm": "sha256", "encoding": "hex", "id_header": "X-Id" }),
        ),
        "standard" => ("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", json!({})),
        _ => ("secret", json!({})),
    };
    let mut extra = extra;
    extra["dedup_ttl"] = json!("2h");
    extra["stream"] = json!("custom:stream");
    settings(provider, &[secret], extra)
}

#[test]
fn every_known_provider_builds_signs_and_has_a_dedup_window() {
    for name in names() {
        let provider = build("src", &minimal(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(provider.name(), name);
        let headers = provider.sign(b"{}", &SignOptions::default());
        assert!(headers.iter().any(|(n, _)| n == "Content-Type"), "{name}");
        assert!(
            default_dedup_ttl(name) >= Duration::from_secs(3600),
            "{name}"
        );
    }
}

#[test]
fn names_are_unique_and_the_windows_are_the_documented_ones() {
    let all: Vec<_> = names().collect();
    for (i, name) in all.iter().enumerate() {
        assert!(!all[i + 1..].contains(name), "{name} is listed twice");
    }
    let days = |n: u64| Duration::from_secs(n * 24 * 3600);
    assert_eq!(default_dedup_ttl("stripe"), days(4));
    assert_eq!(default_dedup_ttl("adyen_platform"), days(31));
    assert_eq!(default_dedup_ttl("slack"), Duration::from_secs(3600));
    assert_eq!(default_dedup_ttl("generic"), days(7));
    assert_eq!(default_dedup_ttl("no such provider"), days(7));
}

#[test]
fn every_listed_key_is_a_source_setting() {
    // `SourceSettings` denies unknown fields, so a misspelt key in an entry fails to deserialize.
    // "1s" is both a valid duration and a valid string; 1 covers the numeric keys.
    for spec in REGISTRY {
        for key in spec.keys {
            assert!(!COMMON_KEYS.contains(key), "{}: {key} is common", spec.name);
            let parses = [json!("1s"), json!(1)].into_iter().any(|sample| {
                let value = json!({ "provider": spec.name, *key: sample });
                serde_json::from_value::<SourceSettings>(value).is_ok()
            });
            assert!(parses, "{}: {key} is not a source key", spec.name);
        }
    }
}

#[test]
fn body_dedup_is_on_by_default_exactly_where_the_event_id_is_unsigned() {
    let on = |provider: &str, extra: serde_json::Value| {
        super::body_dedup(&settings(provider, &["s"], extra))
    };
    for provider in ["github", "shopify", "gitlab", "linear"] {
        assert!(on(provider, json!({})), "{provider}");
    }
    for provider in ["stripe", "standard", "adyen", "slack", "paddle", "square"] {
        assert!(!on(provider, json!({})), "{provider}");
    }
    assert!(on("generic", json!({ "id_header": "X-Id" })));
    let signed_id = json!({ "id_header": "X-Id", "signed_content": "{id}.{body}" });
    assert!(!on("generic", signed_id));
    assert!(!on("generic", json!({ "id_pointer": "/id" })));
    assert!(!on("github", json!({ "body_dedup": false })));
    assert!(on("stripe", json!({ "body_dedup": true })));
}

#[test]
fn unknown_providers_are_named_with_the_known_ones() {
    let error = build("src", &settings("stripey", &["s"], json!({})))
        .err()
        .unwrap()
        .to_string();
    assert!(error.starts_with("sources.src.provider:"), "{error}");
    let known = names().collect::<Vec<_>>().join(", ");
    assert!(
        error.ends_with(&format!("unknown provider \"stripey\" (known: {known})")),
        "{error}"
    );
}

#[test]
fn foreign_keys_are_named() {
    for name in names() {
        let mut source = minimal(name);
        // Every provider but square rejects notification_url; square rejects id_header.
        let key = if name == "square" {
            "id_header"
        } else {
            "notification_url"
        };
        let mut value = serde_json::to_value(&source).unwrap();
        value[key] = json!("x");
        value["secrets"] = json!(source
            .secrets
            .iter()
            .map(|s| s.expose())
            .collect::<Vec<_>>());
        source = serde_json::from_value(value).unwrap();
        let error = build("src", &source)
            .err()
            .unwrap_or_else(|| panic!("{name} took {key}"))
            .to_string();
        assert!(
            error.starts_with(&format!("sources.src.{key}: is not used by provider")),
            "{name}: {error}"
        );
    }
}
