//! The one list of providers: each name with its constructor and own keys. Each provider's
//! defaults that shape a source's keys (its dedup window, whether it deduplicates on the body)
//! are in `crate::provider_defaults`, below the fronts, so that the relay resolves a source's keys
//! without this module.
//!
//! Besides its own module (and the `mod` line that declares it), a provider is added here and
//! nowhere else: `build` looks names up in [`REGISTRY`], the tests and error messages list
//! [`names`], Which `[sources.NAME]` keys a provider reads beyond the common ones is part
//! of its entry, so that one check rejects every key a provider would silently ignore.

use std::sync::Arc;

use crate::config::{ConfigError, SourceSettings};
pub use crate::provider_defaults::{body_dedup, default_dedup_ttl, BodyDedup};

use super::{
    adyen, adyen_platform, generic, github, gitlab, linear, paddle, shopify, slack, square,
    standard, stripe, Provider,
};

/// Builds one provider from a source's settings, after its keys were checked.
type BuildFn = fn(&str, &SourceSettings) -> Result<Arc<dyn Provider>, ConfigError>;

/// Everything the rest of the daemon needs to know about one provider.
pub struct ProviderSpec {
    /// The name written in `provider = "…"`, and the one the provider's `name()` returns.
    pub name: &'static str,
    /// The `[sources.NAME]` keys this provider reads beyond the common ones (`provider`,
    /// `secrets`, `dedup_ttl`, `stream`, `body_dedup`); any other configured key is an error.
    pub keys: &'static [&'static str],
    build: BuildFn,
}

impl ProviderSpec {
    /// Builds the provider for source `source`, first rejecting keys it does not read.
    pub fn build(
        &self,
        source: &str,
        settings: &SourceSettings,
    ) -> Result<Arc<dyn Provider>, ConfigError> {
        reject_unused_keys(source, settings, self.keys)?;
        refuse_partitioned_batches(source, settings, self.keys)?;
        (self.build)(source, settings)
    }
}

/// Every provider, in the order they are listed in errors and documentation.
pub static REGISTRY: &[ProviderSpec] = &[
    ProviderSpec {
        name: "stripe",
        keys: &["tolerance"],
        build: |source, settings| Ok(Arc::new(stripe::Stripe::from_settings(source, settings)?)),
    },
    ProviderSpec {
        name: "standard",
        keys: &["tolerance"],
        build: |source, settings| {
            Ok(Arc::new(standard::Standard::from_settings(
                source, settings,
            )?))
        },
    },
    ProviderSpec {
        name: "github",
        keys: &[],
        build: |source, settings| Ok(Arc::new(github::GitHub::from_settings(source, settings)?)),
    },
    ProviderSpec {
        name: "adyen",
        keys: &["max_batch_items"],
        build: |source, settings| Ok(Arc::new(adyen::Adyen::from_settings(source, settings)?)),
    },
    ProviderSpec {
        name: "adyen_platform",
        keys: &["id_pointer", "type_pointer"],
        build: |source, settings| {
            Ok(Arc::new(adyen_platform::AdyenPlatform::from_settings(
                source, settings,
            )?))
        },
    },
    ProviderSpec {
        name: "shopify",
        keys: &[],
        build: |source, settings| Ok(Arc::new(shopify::Shopify::from_settings(source, settings)?)),
    },
    ProviderSpec {
        name: "slack",
        keys: &["tolerance"],
        build: |source, settings| Ok(Arc::new(slack::Slack::from_settings(source, settings)?)),
    },
    ProviderSpec {
        name: "paddle",
        keys: &["tolerance"],
        build: |source, settings| Ok(Arc::new(paddle::Paddle::from_settings(source, settings)?)),
    },
    ProviderSpec {
        name: "square",
        keys: &["notification_url"],
        build: |source, settings| Ok(Arc::new(square::Square::from_settings(source, settings)?)),
    },
    ProviderSpec {
        name: "linear",
        keys: &["tolerance"],
        build: |source, settings| Ok(Arc::new(linear::Linear::from_settings(source, settings)?)),
    },
    ProviderSpec {
        name: "gitlab",
        keys: &[],
        build: |source, settings| Ok(Arc::new(gitlab::GitLab::from_settings(source, settings)?)),
    },
    ProviderSpec {
        name: "generic",
        keys: generic::KEYS,
        build: |source, settings| Ok(Arc::new(generic::Generic::from_settings(source, settings)?)),
    },
];

/// The entry of provider `name`, if there is one.
pub fn lookup(name: &str) -> Option<&'static ProviderSpec> {
    REGISTRY.iter().find(|spec| spec.name == name)
}

/// Every provider name `build` accepts, in registry order.
pub fn names() -> impl Iterator<Item = &'static str> {
    REGISTRY.iter().map(|spec| spec.name)
}

/// Builds the provider for one configured source, validating its provider-specific keys.
pub fn build(source: &str, settings: &SourceSettings) -> Result<Arc<dyn Provider>, ConfigError> {
    match lookup(&settings.provider) {
        Some(spec) => spec.build(source, settings),
        None => Err(ConfigError::invalid(
            format!("sources.{source}.provider"),
            format!(
                "unknown provider {:?} (known: {})",
                settings.provider,
                names().collect::<Vec<_>>().join(", ")
            ),
        )),
    }
}

/// Keys of `[sources.NAME]` that every provider understands.
pub(super) const COMMON_KEYS: &[&str] = &[
    "provider",
    "secrets",
    "secrets_files",
    "dedup_ttl",
    "stream",
    "body_dedup",
    "partitions",
    "repartition",
];

/// Rejects any configured provider-specific key that is not in `used`, naming it.
///
/// A key that a provider silently ignores is a misconfiguration waiting to surprise someone (a
/// `notification_url` on a Stripe source suggests the operator meant another provider).
/// A provider whose requests carry several events (those that read `max_batch_items`) cannot
/// be partitioned: a batch's events would fall in different partitions, so in a cluster they
/// could not be judged and written in one script call, and the batch would stop being
/// all-or-nothing. Refused here rather than split per partition, which would weaken that promise.
fn refuse_partitioned_batches(
    source: &str,
    settings: &SourceSettings,
    keys: &[&str],
) -> Result<(), ConfigError> {
    if settings.partitions.unwrap_or(1) > 1 && keys.contains(&"max_batch_items") {
        return Err(ConfigError::invalid(
            format!("sources.{source}.partitions"),
            format!(
                "{} delivers several events in one request, which must be all-or-nothing in one \
                 Redis script call (one hash tag); a partitioned source would spread them over \
                 several, so partitions must be 1 for this provider",
                settings.provider
            ),
        ));
    }
    Ok(())
}

fn reject_unused_keys(
    source: &str,
    settings: &SourceSettings,
    used: &[&str],
) -> Result<(), ConfigError> {
    // Unset options are skipped when serializing, so the object's keys are exactly the keys that
    // were configured, and a key added to `SourceSettings` later is covered without touching this.
    let configured = serde_json::to_value(settings)
        .map_err(|e| ConfigError::invalid(format!("sources.{source}"), e.to_string()))?;
    let Some(configured) = configured.as_object() else {
        return Ok(());
    };
    let unused = configured
        .keys()
        .find(|key| !COMMON_KEYS.contains(&key.as_str()) && !used.contains(&key.as_str()));
    match unused {
        None => Ok(()),
        Some(key) => {
            let uses = if used.is_empty() {
                "none".to_owned()
            } else {
                used.join(", ")
            };
            Err(ConfigError::invalid(
                format!("sources.{source}.{key}"),
                format!(
                    "is not used by provider {:?} (its own keys: {uses})",
                    settings.provider
                ),
            ))
        }
    }
}
