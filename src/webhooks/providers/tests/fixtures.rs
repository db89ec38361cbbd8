//! Replays tests/fixtures/*.json, signed by the providers' own SDKs, through hookonce's providers.
//!
//! The fixtures are written by `scripts/gen-fixtures` (`--check` proves they are current), which
//! also runs each SDK's verifier on every case; here we only check that hookonce reaches the
//! outcome each case expects. Failures are collected so that one run lists every broken case.

use std::sync::Arc;

use base64::Engine as _;
use bytes::Bytes;
use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::super::{build, names, Provider, RawRequest, Verified, VerifiedEvent, VerifyError};
use super::support::headers;

/// Every fixture file, embedded so the test needs no working directory.
pub(super) const FIXTURES: &[(&str, &str)] = &[
    (
        "stripe",
        include_str!("../../../../tests/fixtures/stripe.json"),
    ),
    (
        "standard",
        include_str!("../../../../tests/fixtures/standard.json"),
    ),
    (
        "github",
        include_str!("../../../../tests/fixtures/github.json"),
    ),
    (
        "adyen",
        include_str!("../../../../tests/fixtures/adyen.json"),
    ),
    (
        "adyen_platform",
        include_str!("../../../../tests/fixtures/adyen_platform.json"),
    ),
    (
        "slack",
        include_str!("../../../../tests/fixtures/slack.json"),
    ),
    (
        "paddle",
        include_str!("../../../../tests/fixtures/paddle.json"),
    ),
    (
        "shopify",
        include_str!("../../../../tests/fixtures/shopify.json"),
    ),
    (
        "linear",
        include_str!("../../../../tests/fixtures/linear.json"),
    ),
    (
        "square",
        include_str!("../../../../tests/fixtures/square.json"),
    ),
];

#[derive(Deserialize)]
pub(super) struct FixtureFile {
    pub provider: String,
    pub cases: Vec<Case>,
}

#[derive(Deserialize)]
pub(super) struct Case {
    pub name: String,
    secrets: Vec<String>,
    #[serde(default)]
    settings: serde_json::Map<String, serde_json::Value>,
    pub now_unix: i64,
    pub headers: Vec<(String, String)>,
    body: Option<String>,
    body_base64: Option<String>,
    pub expect: Expect,
}

#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum Expect {
    Events(Vec<ExpectedEvent>),
    Error(String),
    Handshake(String),
}

#[derive(Deserialize)]
pub(super) struct ExpectedEvent {
    event_id: String,
    event_type: String,
    /// The forwarded bytes when they are not the whole request body (batch items)…
    body: Option<String>,
    /// …or, for large ones, their SHA-256 in hex.
    body_sha256: Option<String>,
}

fn error_kind(error: &VerifyError) -> &'static str {
    match error {
        VerifyError::MissingHeader(_) => "missing_header",
        VerifyError::GarbledHeader(_) => "garbled_header",
        VerifyError::BadSignature => "bad_signature",
        VerifyError::StaleTimestamp => "stale_timestamp",
        VerifyError::Malformed(_) => "malformed",
    }
}

/// The provider a case is verified by: `provider` with the case's settings, or with `overrides`
/// in their place (to replay a fixture through `generic`).
pub(super) fn provider_for(
    provider: &str,
    case: &Case,
    overrides: Option<&serde_json::Value>,
) -> Result<Arc<dyn Provider>, String> {
    let mut settings = serde_json::json!({ "provider": provider, "secrets": case.secrets });
    let extra = match overrides.and_then(|o| o.as_object()) {
        Some(overrides) => overrides.clone(),
        None => case.settings.clone(),
    };
    if let Some(map) = settings.as_object_mut() {
        map.extend(extra);
    }
    let settings = serde_json::from_value(settings).map_err(|e| format!("settings: {e}"))?;
    build("fixture", &settings).map_err(|e| format!("build: {e}"))
}

/// A case's raw body.
pub(super) fn body_of(case: &Case) -> Result<Bytes, String> {
    match (&case.body, &case.body_base64) {
        (Some(text), None) => Ok(Bytes::from(text.clone().into_bytes())),
        (None, Some(encoded)) => base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .map(Bytes::from)
            .map_err(|e| format!("body_base64: {e}")),
        _ => Err("needs exactly one of body and body_base64".to_owned()),
    }
}

/// Runs one case; `Err` describes how hookonce's answer differs from the expected one.
fn run(provider: &str, case: &Case, overrides: Option<&serde_json::Value>) -> Result<(), String> {
    let provider = provider_for(provider, case, overrides)?;
    let body = body_of(case)?;
    let pairs: Vec<(&str, &[u8])> = case
        .headers
        .iter()
        .map(|(name, value)| (name.as_str(), value.as_bytes()))
        .collect();
    let headers = headers(&pairs);
    let result = provider.verify(&RawRequest {
        headers: &headers,
        body: &body,
        now_unix: case.now_unix,
    });
    match (&case.expect, result) {
        (Expect::Events(expected), Ok(Verified::Events(events))) => {
            same_events(expected, &events, &body)
        }
        (Expect::Error(kind), Err(error)) if kind == error_kind(&error) => Ok(()),
        (Expect::Handshake(expected), Ok(Verified::Handshake(answer)))
            if answer.as_ref() == expected.as_bytes() =>
        {
            Ok(())
        }
        (_, result) => Err(format!("got {result:?}")),
    }
}

/// Checks accepted events against a case's expectation: IDs, types and forwarded bytes.
fn same_events(
    expected: &[ExpectedEvent],
    events: &[VerifiedEvent],
    body: &Bytes,
) -> Result<(), String> {
    let got: Vec<(&str, &str)> = events
        .iter()
        .map(|e| (e.event_id(), e.event_type()))
        .collect();
    let want: Vec<(&str, &str)> = expected
        .iter()
        .map(|e| (e.event_id.as_str(), e.event_type.as_str()))
        .collect();
    if got != want {
        return Err(format!("events {got:?}, expected {want:?}"));
    }
    for (event, expected) in events.iter().zip(expected) {
        let same = match (&expected.body, &expected.body_sha256) {
            (Some(text), _) => event.body().as_ref() == text.as_bytes(),
            (None, Some(digest)) => hex::encode(Sha256::digest(event.body())) == *digest,
            (None, None) => event.body() == body,
        };
        if !same {
            return Err(format!("event {} forwards other bytes", event.event_id()));
        }
    }
    Ok(())
}

#[test]
fn every_fixture_case_gets_its_expected_outcome() {
    let mut failures = Vec::new();
    let mut total = 0;
    for (name, text) in FIXTURES {
        let file: FixtureFile = serde_json::from_str(text)
            .unwrap_or_else(|e| panic!("tests/fixtures/{name}.json does not parse: {e}"));
        assert_eq!(&file.provider, name);
        assert!(
            names().any(|known| known == *name),
            "{name} is not a known provider"
        );
        assert!(file.cases.len() >= 10, "{name}: too few cases");
        for case in &file.cases {
            total += 1;
            if let Err(problem) = run(&file.provider, case, None) {
                failures.push(format!("{name}/{}: {problem}", case.name));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {total} fixture cases failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// config/examples/generic.toml, whose GitHub, Shopify and Linear sources the README shows.
const GENERIC_EXAMPLE: &str = include_str!("../../../../config/examples/generic.toml");

/// The provider-specific keys of one `[sources.NAME]` of the generic example, as JSON settings.
fn generic_example(source: &str) -> serde_json::Value {
    let file: toml::Table = toml::from_str(GENERIC_EXAMPLE).expect("generic.toml parses");
    let mut table = file["sources"][source]
        .as_table()
        .unwrap_or_else(|| panic!("generic.toml has no [sources.{source}]"))
        .clone();
    assert_eq!(table.remove("provider"), Some("generic".into()));
    table.remove("secrets");
    serde_json::to_value(table).expect("TOML values convert to JSON")
}

/// Replays `name`'s cases accepted by `filter` through a `generic` source configured as `config`.
fn replay_as_generic(name: &str, config: serde_json::Value, filter: impl Fn(&Case) -> bool) {
    let text = FIXTURES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, text)| text)
        .expect("fixture is listed");
    let file: FixtureFile = serde_json::from_str(text).expect("fixture parses");
    let cases: Vec<&Case> = file.cases.iter().filter(|case| filter(case)).collect();
    assert!(
        cases.len() >= 10,
        "{name}: too few cases replayed as generic"
    );
    let failures: Vec<String> = cases
        .iter()
        .filter_map(|case| {
            run("generic", case, Some(&config))
                .err()
                .map(|problem| format!("{name}/{}: {problem}", case.name))
        })
        .collect();
    assert!(failures.is_empty(), "as generic:\n{}", failures.join("\n"));
}

#[test]
fn a_generic_source_configured_like_github_agrees_on_every_github_case() {
    let config = generic_example("github_generic");
    assert_eq!(
        config,
        serde_json::json!({
            "signature_header": "X-Hub-Signature-256", "signature_prefix": "sha256=",
            "algorithm": "sha256", "encoding": "hex",
            "id_header": "X-GitHub-Delivery", "type_header": "X-GitHub-Event",
        })
    );
    replay_as_generic("github", config, |_| true);
}

#[test]
fn a_generic_source_configured_like_shopify_agrees_on_classic_shopify_cases() {
    let config = generic_example("shopify_generic");
    assert_eq!(
        config,
        serde_json::json!({
            "signature_header": "X-Shopify-Hmac-Sha256", "algorithm": "sha256", "encoding": "base64",
            "id_header": "X-Shopify-Event-Id", "type_header": "X-Shopify-Topic",
        })
    );
    // Generic reads one ID header: leave out the cases that rely on Shopify's fallback to the
    // webhook ID, and the newer `shopify-*` header family.
    replay_as_generic("shopify", config, |case| {
        let has = |name: &str| {
            case.headers
                .iter()
                .any(|(n, _)| n.eq_ignore_ascii_case(name))
        };
        has("X-Shopify-Event-Id") || (!has("shopify-hmac-sha256") && !has("X-Shopify-Webhook-Id"))
    });
}

#[test]
fn a_generic_source_configured_like_linear_agrees_on_linear_signatures() {
    let config = generic_example("linear_generic");
    assert_eq!(
        config,
        serde_json::json!({
            "signature_header": "Linear-Signature", "algorithm": "sha256", "encoding": "hex",
            "id_header": "Linear-Delivery", "type_pointer": "/type",
        })
    );
    // Generic checks no timestamp inside the body: leave out the cases that are about it.
    replay_as_generic("linear", config, |case| {
        let stale = matches!(&case.expect, Expect::Error(kind) if kind == "stale_timestamp");
        let has_timestamp = case
            .body
            .as_deref()
            .is_some_and(|b| b.contains("webhookTimestamp"));
        !stale && has_timestamp
    });
}

#[test]
fn every_fixture_file_is_replayed() {
    // `file!()` is relative to the package root, where `cargo test` runs, or absolute.
    let dir = std::path::Path::new(file!())
        .parent()
        .map(|dir| dir.join("../../../../tests/fixtures"))
        .expect("fixture_tests.rs has a parent directory");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return; // Not run from the package root: the embedded list is all we can check.
    };
    for entry in entries.flatten() {
        let file = entry.file_name().to_string_lossy().into_owned();
        if let Some(stem) = file.strip_suffix(".json") {
            assert!(
                FIXTURES.iter().any(|(name, _)| *name == stem),
                "tests/fixtures/{file} is not listed in FIXTURES"
            );
        }
    }
}
