//! A list of address ranges (`server.trusted_proxies`, a source's `allowed_ips`) and the one
//! question asked of it: is this address in any of them.

use std::net::IpAddr;

use crate::config::Cidr;

/// Address ranges; an address matches when any range holds it. Lists are short (a few load
/// balancer subnets, a provider's published ranges), so a scan beats any index.
#[derive(Debug, Clone, Default)]
pub struct Networks(Vec<Cidr>);

impl Networks {
    pub fn new(ranges: &[Cidr]) -> Self {
        Self(ranges.to_vec())
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether `address` (an IPv4-mapped IPv6 address as its IPv4 address) is in a range.
    pub fn contains(&self, address: IpAddr) -> bool {
        self.0.iter().any(|range| range.contains(address))
    }
}
