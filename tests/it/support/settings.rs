//! Typed settings for tests: the default sources, durations, and a source's configuration file
//! text for the `hookonce` binary.

use std::collections::BTreeMap;
use std::time::Duration;

pub use hookonce::config::{
    ByteSize, Cidr, HumanDuration, ProxySettings, Rate, Secret, ServiceUrl, Settings, SinkKind,
    SinkSettings, SourceSettings,
};

/// Secrets used by the default sources.
pub const STRIPE_SECRET: &str = "whsec_test_stripe_secret_0123456789";
pub const GITHUB_SECRET: &str = "It's a Secret to Everybody";
pub const STANDARD_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// A source of `provider` with one literal secret and the provider's defaults otherwise.
pub fn source(provider: &str, secret: &str) -> SourceSettings {
    SourceSettings {
        provider: provider.to_owned(),
        secrets: vec![Secret::literal(secret).unwrap()],
        ..SourceSettings::default()
    }
}

/// The sources every [`super::TestApp`] has: `stripe`, `github` and `standard`.
///
/// The suites send one body (`{}`) to `github` under many delivery IDs to test everything but
/// payloads, so its `body_dedup` is off here; `body_dedup.rs` tests the provider's default.
pub fn default_sources() -> BTreeMap<String, SourceSettings> {
    let github = SourceSettings {
        body_dedup: Some(false),
        ..source("github", GITHUB_SECRET)
    };
    BTreeMap::from([
        ("stripe".to_owned(), source("stripe", STRIPE_SECRET)),
        ("github".to_owned(), github),
        ("standard".to_owned(), source("standard", STANDARD_SECRET)),
    ])
}

pub fn ms(n: u64) -> HumanDuration {
    HumanDuration(Duration::from_millis(n))
}

pub fn secs(n: u64) -> HumanDuration {
    HumanDuration(Duration::from_secs(n))
}

/// `[sources.NAME]` tables for a configuration file, secrets written out as literals.
pub fn sources_toml(sources: &BTreeMap<String, SourceSettings>) -> String {
    let mut tables = toml::Table::new();
    for (name, source) in sources {
        let mut table = toml::Table::try_from(source).unwrap();
        let secrets = source
            .secrets
            .iter()
            .map(|secret| toml::Value::String(secret.expose().to_owned()))
            .collect();
        table.insert("secrets".to_owned(), toml::Value::Array(secrets));
        tables.insert(name.to_owned(), toml::Value::Table(table));
    }
    let file = toml::Table::from_iter([("sources".to_owned(), toml::Value::Table(tables))]);
    toml::to_string(&file).unwrap()
}

#[test]
fn rendered_sources_load_back_with_their_secrets() {
    let acme = SourceSettings {
        dedup_ttl: Some(secs(90)),
        notification_url: Some("https://hooks.example.com/sq".to_owned()),
        ..source("square", "a \"quoted\" {secret}")
    };
    let sources = BTreeMap::from([
        ("acme".to_owned(), acme),
        ("pay".to_owned(), source("stripe", "whsec_s")),
    ]);
    let text = sources_toml(&sources);
    let loaded = hookonce::config::from_toml(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let acme = &loaded.sources["acme"];
    assert_eq!(acme.secrets[0].expose(), "a \"quoted\" {secret}");
    assert_eq!(acme.dedup_ttl, Some(secs(90)));
    assert_eq!(
        acme.notification_url.as_deref(),
        Some("https://hooks.example.com/sq")
    );
    assert_eq!(loaded.sources["pay"].provider, "stripe");
    assert_eq!(loaded.sources["pay"].secrets[0].expose(), "whsec_s");
}
