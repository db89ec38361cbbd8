//! `[proxies.NAME]`: one Idempotency-Key proxy in front of an internal HTTP API.
//!
//! The keys and their defaults are a public interface (docs/design.md, "Idempotency-Key proxy").
//! Checks that need only the table itself live here; those across sections (a listener shared
//! with `[server]` or another proxy) are `Settings::validate`'s.

use std::net::SocketAddr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::values::{ABOVE_ZERO, MAX_DEDUP_TTL, MAX_LEASE, MAX_TIMEOUT};
use super::{ByteSize, ConfigError, HumanDuration};

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProxySettings {
    /// This proxy's own listener; every path received there is forwarded.
    pub listen: SocketAddr,
    /// Base URL (`http://` or `https://`); the request's path and query are appended unchanged.
    pub upstream: String,
    /// Methods that get idempotency; others pass through untouched.
    pub methods: Vec<String>,
    /// Path patterns (`*` = one non-empty segment); empty = every path.
    pub routes: Vec<String>,
    /// A matching request without `Idempotency-Key` gets 400 instead of passing through.
    pub require_key: bool,
    /// Headers naming the principal; their values are hashed into the key's scope, never stored.
    pub scope_headers: Vec<String>,
    /// Accept an empty `scope_headers`: every caller is one principal and shares replays.
    pub anonymous_scope: bool,
    /// Store and replay the upstream's `Set-Cookie` (a session cookie would reach whoever
    /// retries with the key); off, the first client still gets it and the stored copy drops it.
    pub store_set_cookie: bool,
    /// How long a completed response is replayed.
    pub ttl: HumanDuration,
    /// How long a claim holds before another request may take it over.
    pub lease: HumanDuration,
    /// How long a duplicate waits for the request in flight before answering 409.
    pub wait: HumanDuration,
    /// Upper bound on one whole upstream exchange, from sending the request to the last byte of
    /// the answer, one streamed past `max_stored_body` included.
    pub upstream_timeout: HumanDuration,
    /// Responses larger than this are passed through and stored without their body.
    pub max_stored_body: ByteSize,
    /// Upstream statuses that release the claim (the retry executes again) instead of being stored.
    pub retry_statuses: Vec<u16>,
}

impl Default for ProxySettings {
    fn default() -> Self {
        Self {
            listen: ([0, 0, 0, 0], 8081).into(),
            upstream: String::new(),
            methods: vec!["POST".to_owned()],
            routes: Vec::new(),
            require_key: false,
            scope_headers: vec!["Authorization".to_owned()],
            anonymous_scope: false,
            store_set_cookie: false,
            ttl: HumanDuration(Duration::from_secs(24 * 3600)),
            lease: HumanDuration(Duration::from_secs(30)),
            wait: HumanDuration(Duration::ZERO),
            upstream_timeout: HumanDuration(Duration::from_secs(30)),
            max_stored_body: ByteSize(1 << 20),
            retry_statuses: vec![408, 425, 429, 502, 503, 504],
        }
    }
}

impl ProxySettings {
    /// Checks every key of `[proxies.<name>]`, naming the first one that is wrong.
    pub(super) fn validate(&self, name: &str) -> Result<(), ConfigError> {
        let key = |k: &str| format!("proxies.{name}.{k}");
        validate_upstream(&self.upstream).map_err(|p| ConfigError::invalid(key("upstream"), p))?;
        super::endpoints::check_dial_port(&key("upstream"), &self.upstream)?;
        self.validate_matching(name)?;
        let second = Duration::from_secs(1);
        self.ttl.check(key("ttl"), second, MAX_DEDUP_TTL)?;
        self.lease.check(key("lease"), second, MAX_LEASE)?;
        self.upstream_timeout
            .check(key("upstream_timeout"), ABOVE_ZERO, MAX_TIMEOUT)?;
        self.wait.check(key("wait"), Duration::ZERO, MAX_LEASE)?;
        // A claim must outlive its request upstream, or a retry could take over a live claim
        // and run the request twice.
        if self.lease.0 < self.upstream_timeout.0 {
            return Err(ConfigError::invalid(
                key("lease"),
                "must be at least upstream_timeout, so that a claim cannot expire while its request is upstream",
            ));
        }
        if self.wait.0 > self.lease.0 {
            return Err(ConfigError::invalid(key("wait"), "must not exceed lease"));
        }
        if self.max_stored_body.0 > 64 << 20 {
            return Err(ConfigError::invalid(
                key("max_stored_body"),
                "must be at most 64MiB (stored responses live in the store's memory)",
            ));
        }
        for status in &self.retry_statuses {
            if !(100..=599).contains(status) {
                return Err(ConfigError::invalid(
                    key("retry_statuses"),
                    format!("{status} is not an HTTP status"),
                ));
            }
        }
        Ok(())
    }
}

impl ProxySettings {
    /// `methods`, `routes` and `scope_headers`: which requests get idempotency, and for whom.
    fn validate_matching(&self, name: &str) -> Result<(), ConfigError> {
        let key = |k: &str| format!("proxies.{name}.{k}");
        if self.methods.is_empty() {
            return Err(ConfigError::invalid(
                key("methods"),
                "list at least one method",
            ));
        }
        for method in &self.methods {
            let token = !method.is_empty() && method.bytes().all(|b| b.is_ascii_uppercase());
            if !token {
                return Err(ConfigError::invalid(
                    key("methods"),
                    format!("{method:?} is not an upper-case HTTP method such as \"POST\""),
                ));
            }
        }
        for route in &self.routes {
            validate_route(route).map_err(|p| ConfigError::invalid(key("routes"), p))?;
        }
        // No scope header makes every caller one principal: Alice's answer would be replayed to
        // Bob for the same key and body. That must be said, not slip in with an empty list.
        if self.scope_headers.is_empty() && !self.anonymous_scope {
            return Err(ConfigError::invalid(
                key("scope_headers"),
                format!(
                    "is empty, so every caller would share one scope and get each other's \
                     replays; name the headers that identify a caller, or set \
                     proxies.{name}.anonymous_scope = true if every caller may share replays"
                ),
            ));
        }
        for header in &self.scope_headers {
            if http::HeaderName::from_bytes(header.as_bytes()).is_err() {
                return Err(ConfigError::invalid(
                    key("scope_headers"),
                    format!("{header:?} is not a header name"),
                ));
            }
        }
        Ok(())
    }
}

fn validate_upstream(upstream: &str) -> Result<(), String> {
    let rest = upstream
        .strip_prefix("http://")
        .or_else(|| upstream.strip_prefix("https://"))
        .ok_or_else(|| format!("{upstream:?} must start with http:// or https://"))?;
    let authority = rest.split('/').next().unwrap_or("");
    // Credentials in the URL would be printed by check-config and logged with errors; the
    // upstream authenticates clients by their own headers, which pass through.
    if authority.contains('@') {
        return Err("must not carry user information (user:password@)".to_owned());
    }
    let uri: Result<http::Uri, _> = upstream.parse();
    if authority.is_empty() || uri.is_err() || upstream.contains(['?', '#']) {
        return Err(format!(
            "{upstream:?} is not a base URL such as \"http://orders:3000\" (no query or fragment)"
        ));
    }
    Ok(())
}

/// A pattern is an absolute path whose segments are literal or `*`.
fn validate_route(route: &str) -> Result<(), String> {
    let ok = route.starts_with('/')
        && !route.contains(['?', '#'])
        && route.bytes().all(|b| b.is_ascii_graphic())
        && route
            .split('/')
            .skip(1)
            .all(|segment| segment == "*" || !segment.contains('*'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{route:?} is not a path pattern such as \"/v1/orders\" or \"/v1/orders/*/refunds\" \
             (absolute, no query, * only as a whole segment)"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn valid() -> ProxySettings {
        ProxySettings {
            upstream: "http://orders:3000".to_owned(),
            ..ProxySettings::default()
        }
    }

    #[test]
    fn defaults_with_an_upstream_are_valid() {
        valid().validate("orders").unwrap();
    }

    #[test]
    fn an_empty_scope_needs_anonymous_scope() {
        let mut settings = valid();
        settings.scope_headers.clear();
        let error = settings.validate("orders").unwrap_err().to_string();
        assert!(
            error.starts_with("proxies.orders.scope_headers:")
                && error.contains("proxies.orders.anonymous_scope = true"),
            "{error}"
        );
        settings.anonymous_scope = true;
        settings.validate("orders").unwrap();
    }

    #[test]
    fn the_new_keys_are_read_and_default_off() {
        let text = "upstream = \"http://o\"\n";
        let settings: ProxySettings = toml::from_str(text).unwrap();
        assert!(!settings.store_set_cookie && !settings.anonymous_scope);
        let text = "upstream = \"http://o\"\nscope_headers = []\nanonymous_scope = true\n\
                    store_set_cookie = true\n";
        let settings: ProxySettings = toml::from_str(text).unwrap();
        assert!(settings.store_set_cookie && settings.anonymous_scope);
        settings.validate("orders").unwrap();
    }

    type Change = Box<dyn Fn(&mut ProxySettings)>;

    #[test]
    fn each_bad_key_is_named() {
        let cases: Vec<(&str, Change)> = vec![
            ("upstream", Box::new(|s| s.upstream = "orders:3000".into())),
            ("upstream", Box::new(|s| s.upstream = "http://".into())),
            (
                "upstream",
                Box::new(|s| s.upstream = "http://u:p@orders".into()),
            ),
            ("methods", Box::new(|s| s.methods = vec!["post".into()])),
            ("methods", Box::new(|s| s.methods.clear())),
            ("routes", Box::new(|s| s.routes = vec!["v1/orders".into()])),
            ("routes", Box::new(|s| s.routes = vec!["/v1/ord*".into()])),
            (
                "scope_headers",
                Box::new(|s| s.scope_headers = vec!["a b".into()]),
            ),
            ("scope_headers", Box::new(|s| s.scope_headers.clear())),
            (
                "ttl",
                Box::new(|s| s.ttl = HumanDuration(Duration::from_millis(10))),
            ),
            (
                "lease",
                Box::new(|s| s.lease = HumanDuration(Duration::from_secs(5))),
            ),
            (
                "upstream_timeout",
                Box::new(|s| s.upstream_timeout = HumanDuration(Duration::ZERO)),
            ),
            (
                "wait",
                Box::new(|s| s.wait = HumanDuration(Duration::from_secs(31))),
            ),
            ("retry_statuses", Box::new(|s| s.retry_statuses = vec![42])),
            (
                "max_stored_body",
                Box::new(|s| s.max_stored_body = ByteSize(1 << 30)),
            ),
        ];
        for (key, change) in cases {
            let mut settings = valid();
            change(&mut settings);
            let error = settings.validate("orders").unwrap_err().to_string();
            assert!(
                error.starts_with(&format!("proxies.orders.{key}:")),
                "{key}: {error}"
            );
        }
    }
}
