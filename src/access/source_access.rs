//! What one source lets in: its client allowlist (`sources.NAME.allowed_ips`) and the bucket of
//! its verified deliveries (`sources.NAME.rate_limit`). Built from the source's settings, so a
//! reload of the configuration builds a new one and swaps it with the source.

use std::time::Duration;

use super::bucket::TokenBucket;
use super::client_addr::ClientAddr;
use super::networks::Networks;
use crate::config::{ConfigError, SourceSettings};

/// One source's allowlist and delivery bucket.
#[derive(Debug, Default)]
pub struct SourceAccess {
    /// Empty: every client.
    allowed: Networks,
    /// One per source and replica: N replicas admit N times the rate.
    deliveries: Option<TokenBucket>,
}

impl SourceAccess {
    /// The access of the source `name` configured as `settings`.
    pub fn from_settings(name: &str, settings: &SourceSettings) -> Result<Self, ConfigError> {
        Ok(Self {
            allowed: Networks::new(&settings.allowed_ips),
            deliveries: settings.delivery_limit(name)?.map(TokenBucket::new),
        })
    }

    /// Whether `client` may call the source. A client no trusted hop could name is admitted only
    /// where every client is.
    pub fn admits(&self, client: &ClientAddr) -> bool {
        match client {
            _ if self.allowed.is_empty() => true,
            ClientAddr::Known(address) => self.allowed.contains(*address),
            ClientAddr::Unresolved { .. } => false,
        }
    }

    /// Takes one verified delivery's token, or says how long until there is one.
    pub fn take_delivery(&self) -> Result<(), Duration> {
        self.deliveries.as_ref().map_or(Ok(()), TokenBucket::take)
    }
}
