//! `[relay]` and `[relay.routes.NAME]`: delivering the streams' events to internal HTTP workers.
//!
//! The keys and their defaults are a public interface (docs/design.md, "Relay"). Checks that need
//! only a route's table live here; those across sections (a route's sources exist, the relay has
//! a Redis store and streams) are `Settings::validate_relay`'s, and the Standard Webhooks secret
//! is decoded by the relay itself (`app::validate`).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::values::{one_or_many, ABOVE_ZERO, MAX_LEASE, MAX_TIMEOUT};
use super::{ConfigError, HumanDuration, Secret};

/// `[relay]`: whether `serve` runs the relay, the takeover delay, and the routes.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RelaySettings {
    /// Run the relay inside `hookonce serve` (`hookonce relay` runs it regardless).
    pub enabled: bool,
    /// Entries pending this long on a relay that stopped refreshing them are taken over.
    pub claim_idle: HumanDuration,
    /// Each route is one consumer group per stream it reads: `hookonce:<route>`.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub routes: BTreeMap<String, RouteSettings>,
}

impl Default for RelaySettings {
    fn default() -> Self {
        Self {
            enabled: false,
            claim_idle: HumanDuration(Duration::from_secs(60)),
            routes: BTreeMap::new(),
        }
    }
}

/// Where a route's group starts reading when it is first created.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
pub enum RouteStart {
    /// `0`: every entry the stream still holds is delivered.
    #[default]
    #[serde(rename = "0")]
    Beginning,
    /// `$`: only entries appended after the group was created.
    #[serde(rename = "new")]
    New,
}

/// `[relay.routes.NAME]`: which events go to which worker, and how hard to try.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RouteSettings {
    /// The configured sources whose streams this route reads.
    #[serde(deserialize_with = "one_or_many")]
    pub sources: Vec<String>,
    /// Globs over the event type (`*` any run, `?` one character); empty = every event.
    #[serde(
        deserialize_with = "one_or_many",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub event_types: Vec<String>,
    /// The worker endpoint; shown redacted.
    #[serde(serialize_with = "serialize_redacted")]
    pub url: String,
    /// Static headers of every delivery; values may be `env:NAME` or `file:PATH`.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, Secret>,
    /// Deliveries in flight for this route, per relay process.
    pub concurrency: usize,
    /// Upper bound on one delivery, from connecting to the worker's status line.
    pub timeout: HumanDuration,
    /// Attempts before an entry goes to the dead-letter stream.
    pub max_attempts: u32,
    /// The first retry's ceiling; doubled per attempt, full jitter.
    pub backoff: HumanDuration,
    /// The ceiling of every retry delay, `Retry-After` included.
    pub max_backoff: HumanDuration,
    /// Where the route's group starts when first created: `"0"` or `"new"`.
    pub start: RouteStart,
    /// Worker statuses that dead-letter at once instead of being retried.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub dead_letter_statuses: Vec<u16>,
    /// A Standard Webhooks secret (`whsec_…`) that signs every delivery.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signing_secret: Option<Secret>,
}

impl Default for RouteSettings {
    fn default() -> Self {
        Self {
            sources: Vec::new(),
            event_types: Vec::new(),
            url: String::new(),
            headers: BTreeMap::new(),
            concurrency: 16,
            timeout: HumanDuration(Duration::from_secs(10)),
            max_attempts: 12,
            backoff: HumanDuration(Duration::from_secs(1)),
            max_backoff: HumanDuration(Duration::from_secs(3600)),
            start: RouteStart::Beginning,
            dead_letter_statuses: Vec::new(),
            signing_secret: None,
        }
    }
}

/// Headers hookonce sets itself on every delivery; a route's `headers` must not replace them.
pub const RESERVED_HEADERS: [&str; 2] = ["idempotency-key", "content-type"];
/// The prefix of hookonce's own delivery headers (`X-Hookonce-Source`, …).
pub const RESERVED_PREFIX: &str = "x-hookonce-";
/// The Standard Webhooks headers a signing route sets.
pub const SIGNING_HEADERS: [&str; 3] = ["webhook-id", "webhook-timestamp", "webhook-signature"];

fn serialize_redacted<S: serde::Serializer>(url: &str, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&super::redact_url(url))
}

impl RelaySettings {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        self.claim_idle
            .check("relay.claim_idle", Duration::from_secs(1), MAX_LEASE)?;
        if self.enabled && self.routes.is_empty() {
            return Err(ConfigError::invalid(
                "relay.routes",
                "relay.enabled = true needs at least one route",
            ));
        }
        for (name, route) in &self.routes {
            super::validate_name("relay.routes", name)?;
            route.validate(name)?;
        }
        Ok(())
    }
}

impl RouteSettings {
    /// Checks every key of `[relay.routes.<name>]` that needs nothing but the table itself.
    fn validate(&self, name: &str) -> Result<(), ConfigError> {
        let key = |k: &str| format!("relay.routes.{name}.{k}");
        if self.sources.is_empty() {
            return Err(ConfigError::invalid(
                key("sources"),
                "list at least one source",
            ));
        }
        if self.event_types.iter().any(String::is_empty) {
            return Err(ConfigError::invalid(
                key("event_types"),
                "a glob must not be empty (omit event_types for every event)",
            ));
        }
        super::endpoints::check_http_url(&key("url"), &self.url)?;
        self.validate_headers(name)?;
        if !(1..=4096).contains(&self.concurrency) {
            return Err(ConfigError::invalid(
                key("concurrency"),
                "must be 1 to 4096",
            ));
        }
        if !(1..=1000).contains(&self.max_attempts) {
            return Err(ConfigError::invalid(
                key("max_attempts"),
                "must be 1 to 1000",
            ));
        }
        self.timeout
            .check(key("timeout"), ABOVE_ZERO, MAX_TIMEOUT)?;
        self.backoff.check(key("backoff"), ABOVE_ZERO, MAX_LEASE)?;
        self.max_backoff
            .check(key("max_backoff"), self.backoff.0, MAX_LEASE)
            .map_err(|_| {
                ConfigError::invalid(
                    key("max_backoff"),
                    "must be at least backoff and at most 1d",
                )
            })?;
        for status in &self.dead_letter_statuses {
            if !(100..=599).contains(status) || (200..=299).contains(status) {
                return Err(ConfigError::invalid(
                    key("dead_letter_statuses"),
                    format!("{status} is not a non-2xx HTTP status"),
                ));
            }
        }
        Ok(())
    }

    /// Header names must be valid and leave hookonce's own headers alone: a worker trusts
    /// `Idempotency-Key` and `X-Hookonce-*` to be what the relay says they are.
    fn validate_headers(&self, name: &str) -> Result<(), ConfigError> {
        for (header, value) in &self.headers {
            let key = format!("relay.routes.{name}.headers.{header}");
            let lower = header.to_ascii_lowercase();
            if http::HeaderName::from_bytes(header.as_bytes()).is_err() {
                return Err(ConfigError::invalid(key, "is not a valid header name"));
            }
            super::endpoints::check_static_header(&key, header)?;
            let signing = self.signing_secret.is_some() && SIGNING_HEADERS.contains(&&*lower);
            if RESERVED_HEADERS.contains(&&*lower) || lower.starts_with(RESERVED_PREFIX) || signing
            {
                return Err(ConfigError::invalid(
                    key,
                    "is set by hookonce on every delivery and cannot be replaced",
                ));
            }
            if http::HeaderValue::from_str(value.expose()).is_err() {
                // Never the value: it may be a secret.
                return Err(ConfigError::invalid(key, "is not a valid header value"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn valid() -> RouteSettings {
        RouteSettings {
            sources: vec!["stripe".into()],
            url: "http://billing:8080/webhooks".into(),
            ..RouteSettings::default()
        }
    }

    type Change = Box<dyn Fn(&mut RouteSettings)>;

    #[test]
    fn each_bad_key_is_named() {
        let header = |name: &str| {
            let name = name.to_owned();
            Box::new(move |s: &mut RouteSettings| {
                s.headers
                    .insert(name.clone(), Secret::literal("x").unwrap());
            }) as Change
        };
        let cases: Vec<(&str, Change)> = vec![
            ("sources", Box::new(|s| s.sources.clear())),
            (
                "event_types",
                Box::new(|s| s.event_types = vec![String::new()]),
            ),
            ("url", Box::new(|s| s.url = "billing:8080".into())),
            ("url", Box::new(|s| s.url = "http://".into())),
            // An HTTP URI, but not a URL: the relay's client could not send to it.
            ("url", Box::new(|s| s.url = "http://256.1.1.1:8080/".into())),
            ("headers.Idempotency-Key", header("Idempotency-Key")),
            ("headers.content-type", header("content-type")),
            ("headers.X-Hookonce-Attempt", header("X-Hookonce-Attempt")),
            ("headers.a b", header("a b")),
            ("concurrency", Box::new(|s| s.concurrency = 0)),
            ("max_attempts", Box::new(|s| s.max_attempts = 0)),
            (
                "timeout",
                Box::new(|s| s.timeout = HumanDuration(Duration::ZERO)),
            ),
            (
                "backoff",
                Box::new(|s| s.backoff = HumanDuration(Duration::ZERO)),
            ),
            (
                "max_backoff",
                Box::new(|s| s.max_backoff = HumanDuration(Duration::from_millis(10))),
            ),
            (
                "dead_letter_statuses",
                Box::new(|s| s.dead_letter_statuses = vec![200]),
            ),
            (
                "dead_letter_statuses",
                Box::new(|s| s.dead_letter_statuses = vec![42]),
            ),
        ];
        valid().validate("billing").unwrap();
        for (key, change) in cases {
            let mut settings = valid();
            change(&mut settings);
            let error = settings.validate("billing").unwrap_err().to_string();
            assert!(
                error.starts_with(&format!("relay.routes.billing.{key}:")),
                "{key}: {error}"
            );
        }
    }

    #[test]
    fn signing_headers_are_reserved_only_when_signing() {
        let mut settings = valid();
        settings
            .headers
            .insert("webhook-id".into(), Secret::literal("x").unwrap());
        settings.validate("billing").unwrap();
        settings.signing_secret = Some(Secret::literal("whsec_AAAA").unwrap());
        assert!(settings.validate("billing").is_err());
    }
}
