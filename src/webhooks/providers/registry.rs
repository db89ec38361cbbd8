//! The one list of providers: each name with its constructor, default dedup window and own keys.
//!
//! Besides its own module (and the `mod` line that declares it), a provider is added here and
//! nowhere else: `build` looks names up in [`REGISTRY`], the tests and error messages list
//! [`names`], and the daemon asks [`default_dedup_ttl`] for sources that set no `dedup_ttl`. Which `[sources.NAME]` keys a provider reads beyond the common ones is part
//! of its entry, so that one check rejects every key a provider would silently ignore.

use std::sync::Arc;
use std::time::Duration;

use crate::config::{ConfigError, SourceSettings};

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
    /// The dedup window of sources that set no `dedup_ttl`: the provider's retry horizon plus a
    /// margin. A window shorter than the horizon lets a late retry through as a new event; a longer
    /// one only costs Redis memory (one small record per event), so the margins are generous.
    pub default_dedup_ttl: Duration,
    /// The `[sources.NAME]` keys this provider reads beyond the common ones (`provider`,
    /// `secrets`, `dedup_ttl`, `stream`, `body_dedup`); any other configured key is an error.
    pub keys: &'static [&'static str],
    /// Whether a source that sets no `body_dedup` also deduplicates on the payload: yes exactly
    /// when the scheme does not sign the event ID, so that a captured body replayed under a
    /// fresh ID is not forwarded again.
    pub default_body_dedup: BodyDedup,
    build: BuildFn,
}

/// The default of `sources.NAME.body_dedup` for one provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyDedup {
    /// The event ID is signed (in the body, or in the signed string): the ID alone decides.
    Off,
    /// The event ID comes from a header no signature covers.
    On,
    /// `generic`: on when the ID comes from `id_header` and `signed_content` does not sign `{id}`.
    WhenIdHeaderUnsigned,
}

impl BodyDedup {
    fn applies_to(self, settings: &SourceSettings) -> bool {
        match self {
            BodyDedup::Off => false,
            BodyDedup::On => true,
            BodyDedup::WhenIdHeaderUnsigned => {
                let signs_id = settings
                    .signed_content
                    .as_deref()
                    .is_some_and(|template| template.contains("{id}"));
                settings.id_header.is_some() && !signs_id
            }
        }
    }
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

const HOUR: Duration = Duration::from_secs(3600);
const DAY: Duration = Duration::from_secs(24 * 3600);

const fn days(n: u64) -> Duration {
    Duration::from_secs(n * DAY.as_secs())
}

/// Every provider, in the order they are listed in errors and documentation.
pub static REGISTRY: &[ProviderSpec] = &[
    ProviderSpec {
        name: "stripe",
        // Stripe retries live events for up to 3 days; one day of margin.
        default_dedup_ttl: days(4),
        keys: &["tolerance"],
        default_body_dedup: BodyDedup::Off,
        build: |source, settings| Ok(Arc::new(stripe::Stripe::from_settings(source, settings)?)),
    },
    ProviderSpec {
        name: "standard",
        // Svix's schedule ends about 28 hours after the first attempt; the rest is margin.
        default_dedup_ttl: days(3),
        keys: &["tolerance"],
        default_body_dedup: BodyDedup::Off,
        build: |source, settings| {
            Ok(Arc::new(standard::Standard::from_settings(
                source, settings,
            )?))
        },
    },
    ProviderSpec {
        name: "github",
        // GitHub lets operators redeliver for 3 days; one day of margin.
        default_dedup_ttl: days(4),
        keys: &[],
        // X-GitHub-Delivery is not signed.
        default_body_dedup: BodyDedup::On,
        build: |source, settings| Ok(Arc::new(github::GitHub::from_settings(source, settings)?)),
    },
    ProviderSpec {
        name: "adyen",
        // Adyen's retry queue keeps trying for up to 30 days (both webhook families).
        default_dedup_ttl: days(31),
        keys: &["max_batch_items"],
        default_body_dedup: BodyDedup::Off,
        build: |source, settings| Ok(Arc::new(adyen::Adyen::from_settings(source, settings)?)),
    },
    ProviderSpec {
        name: "adyen_platform",
        default_dedup_ttl: days(31),
        keys: &["id_pointer", "type_pointer"],
        default_body_dedup: BodyDedup::Off,
        build: |source, settings| {
            Ok(Arc::new(adyen_platform::AdyenPlatform::from_settings(
                source, settings,
            )?))
        },
    },
    ProviderSpec {
        name: "shopify",
        // Shopify retries 8 times over 4 hours; a day covers late manual re-sends too.
        default_dedup_ttl: DAY,
        keys: &[],
        // X-Shopify-Event-Id is not signed.
        default_body_dedup: BodyDedup::On,
        build: |source, settings| Ok(Arc::new(shopify::Shopify::from_settings(source, settings)?)),
    },
    ProviderSpec {
        name: "slack",
        // Slack retries 3 times within about 6 minutes; an hour is ample.
        default_dedup_ttl: HOUR,
        keys: &["tolerance"],
        default_body_dedup: BodyDedup::Off,
        build: |source, settings| Ok(Arc::new(slack::Slack::from_settings(source, settings)?)),
    },
    ProviderSpec {
        name: "paddle",
        // Paddle retries for up to 3 days; one day of margin.
        default_dedup_ttl: days(4),
        keys: &["tolerance"],
        default_body_dedup: BodyDedup::Off,
        build: |source, settings| Ok(Arc::new(paddle::Paddle::from_settings(source, settings)?)),
    },
    ProviderSpec {
        name: "square",
        // Square retries for up to 72 hours; one day of margin.
        default_dedup_ttl: days(4),
        keys: &["notification_url"],
        default_body_dedup: BodyDedup::Off,
        build: |source, settings| Ok(Arc::new(square::Square::from_settings(source, settings)?)),
    },
    ProviderSpec {
        name: "linear",
        // Linear retries after 1 minute, 1 hour and 6 hours.
        default_dedup_ttl: DAY,
        keys: &["tolerance"],
        // Linear-Delivery is not signed; the signed webhookTimestamp bounds a replay to the
        // tolerance, body_dedup closes that minute too.
        default_body_dedup: BodyDedup::On,
        build: |source, settings| Ok(Arc::new(linear::Linear::from_settings(source, settings)?)),
    },
    ProviderSpec {
        name: "gitlab",
        // GitLab keeps hook logs (and their "Resend request" button) for 2 days.
        default_dedup_ttl: days(3),
        keys: &[],
        // Idempotency-Key is not signed (GitLab signs nothing but sends its token).
        default_body_dedup: BodyDedup::On,
        build: |source, settings| Ok(Arc::new(gitlab::GitLab::from_settings(source, settings)?)),
    },
    ProviderSpec {
        name: "generic",
        // The sender's retry schedule is unknown: a week.
        default_dedup_ttl: days(7),
        keys: generic::KEYS,
        default_body_dedup: BodyDedup::WhenIdHeaderUnsigned,
        build: |source, settings| Ok(Arc::new(generic::Generic::from_settings(source, settings)?)),
    },
];

/// The window for names no entry has: the longest plausible schedule, as for `generic`.
const UNKNOWN_DEDUP_TTL: Duration = days(7);

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

/// Default dedup window for a provider: its retry horizon plus a margin (see [`ProviderSpec`]).
pub fn default_dedup_ttl(provider: &str) -> Duration {
    lookup(provider).map_or(UNKNOWN_DEDUP_TTL, |spec| spec.default_dedup_ttl)
}

/// Whether a source deduplicates on the payload too: its `body_dedup`, else its provider's
/// default (see [`ProviderSpec::default_body_dedup`]).
pub fn body_dedup(settings: &SourceSettings) -> bool {
    settings.body_dedup.unwrap_or_else(|| {
        lookup(&settings.provider).is_some_and(|spec| spec.default_body_dedup.applies_to(settings))
    })
}

/// Keys of `[sources.NAME]` that every provider understands.
pub(super) const COMMON_KEYS: &[&str] = &[
    "provider",
    "secrets",
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
