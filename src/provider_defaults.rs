//! Each provider's defaults that shape a configured source's keys: its dedup window and whether it
//! deduplicates on the body too. They sit below both fronts and the relay (which
//! `forward::Target::of_source` serves), so that knowing a source's keys does not take building
//! its provider; `webhooks::providers::registry` holds each provider's constructor and own keys,
//! and a test holds the two lists to the same names.

use std::time::Duration;

use crate::config::SourceSettings;

/// The defaults of one provider.
pub struct ProviderDefaults {
    /// The name written in `provider = "…"`.
    pub name: &'static str,
    /// The dedup window of sources that set no `dedup_ttl`: the provider's retry horizon plus a
    /// margin. A window shorter than the horizon lets a late retry through as a new event; a longer
    /// one only costs Redis memory (one small record per event), so the margins are generous.
    pub dedup_ttl: Duration,
    /// Whether a source that sets no `body_dedup` also deduplicates on the payload: yes exactly
    /// when the scheme does not sign the event ID, so that a captured body replayed under a
    /// fresh ID is not forwarded again.
    pub body_dedup: BodyDedup,
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
    pub fn applies_to(self, settings: &SourceSettings) -> bool {
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

const HOUR: Duration = Duration::from_secs(3600);
const DAY: Duration = Duration::from_secs(24 * 3600);

const fn days(n: u64) -> Duration {
    Duration::from_secs(n * DAY.as_secs())
}

/// Every provider's defaults, in registry order.
pub static PROVIDER_DEFAULTS: &[ProviderDefaults] = &[
    ProviderDefaults {
        name: "stripe",
        // Stripe retries live events for up to 3 days; one day of margin.
        dedup_ttl: days(4),
        body_dedup: BodyDedup::Off,
    },
    ProviderDefaults {
        name: "standard",
        // Svix's schedule ends about 28 hours after the first attempt; the rest is margin.
        dedup_ttl: days(3),
        body_dedup: BodyDedup::Off,
    },
    ProviderDefaults {
        name: "github",
        // GitHub lets operators redeliver for 3 days; one day of margin.
        dedup_ttl: days(4),
        // X-GitHub-Delivery is not signed.
        body_dedup: BodyDedup::On,
    },
    ProviderDefaults {
        name: "adyen",
        // Adyen's retry queue keeps trying for up to 30 days (both webhook families).
        dedup_ttl: days(31),
        body_dedup: BodyDedup::Off,
    },
    ProviderDefaults {
        name: "adyen_platform",
        dedup_ttl: days(31),
        body_dedup: BodyDedup::Off,
    },
    ProviderDefaults {
        name: "shopify",
        // Shopify retries 8 times over 4 hours; a day covers late manual re-sends too.
        dedup_ttl: DAY,
        // X-Shopify-Event-Id is not signed.
        body_dedup: BodyDedup::On,
    },
    ProviderDefaults {
        name: "slack",
        // Slack retries 3 times within about 6 minutes; an hour is ample.
        dedup_ttl: HOUR,
        body_dedup: BodyDedup::Off,
    },
    ProviderDefaults {
        name: "paddle",
        // Paddle retries for up to 3 days; one day of margin.
        dedup_ttl: days(4),
        body_dedup: BodyDedup::Off,
    },
    ProviderDefaults {
        name: "square",
        // Square retries for up to 72 hours; one day of margin.
        dedup_ttl: days(4),
        body_dedup: BodyDedup::Off,
    },
    ProviderDefaults {
        name: "linear",
        // Linear retries after 1 minute, 1 hour and 6 hours.
        dedup_ttl: DAY,
        // Linear-Delivery is not signed; the signed webhookTimestamp bounds a replay to the
        // tolerance, body_dedup closes that minute too.
        body_dedup: BodyDedup::On,
    },
    ProviderDefaults {
        name: "gitlab",
        // GitLab keeps hook logs (and their "Resend request" button) for 2 days.
        dedup_ttl: days(3),
        // Idempotency-Key is not signed (GitLab signs nothing but sends its token).
        body_dedup: BodyDedup::On,
    },
    ProviderDefaults {
        name: "generic",
        // The sender's retry schedule is unknown: a week.
        dedup_ttl: days(7),
        body_dedup: BodyDedup::WhenIdHeaderUnsigned,
    },
];

/// The window for names no entry has: the longest plausible schedule, as for `generic`.
const UNKNOWN_DEDUP_TTL: Duration = days(7);

/// The defaults of provider `name`, if there is one.
pub fn lookup(name: &str) -> Option<&'static ProviderDefaults> {
    PROVIDER_DEFAULTS.iter().find(|spec| spec.name == name)
}

/// Default dedup window for a provider: its retry horizon plus a margin (see [`PROVIDER_DEFAULTS`]).
pub fn default_dedup_ttl(provider: &str) -> Duration {
    lookup(provider).map_or(UNKNOWN_DEDUP_TTL, |spec| spec.dedup_ttl)
}

/// Whether a source deduplicates on the payload too: its `body_dedup`, else its provider's
/// default (see [`ProviderDefaults::body_dedup`]).
pub fn body_dedup(settings: &SourceSettings) -> bool {
    settings.body_dedup.unwrap_or_else(|| {
        lookup(&settings.provider).is_some_and(|spec| spec.body_dedup.applies_to(settings))
    })
}

#[cfg(test)]
mod tests {
    use super::PROVIDER_DEFAULTS;
    use crate::webhooks::providers::names;

    #[test]
    fn every_registered_provider_has_defaults_and_no_other() {
        let defaults: Vec<&str> = PROVIDER_DEFAULTS.iter().map(|d| d.name).collect();
        assert_eq!(defaults, names().collect::<Vec<_>>());
    }
}
