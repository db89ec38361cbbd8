//! The value types of "who may call": address ranges (`server.trusted_proxies`,
//! `sources.NAME.allowed_ips`) and rates (`sources.NAME.rate_limit`, `server.rejected_limit`),
//! each parsing itself from its configuration string, and the checks on a rate and its burst.

use std::fmt;
use std::net::IpAddr;

use serde::de::{self, Deserializer};
use serde::{Deserialize, Serialize, Serializer};

use super::ConfigError;

/// An address range written `"10.0.0.0/8"`, `"2001:db8::/32"`, or a bare address (`/32` for
/// IPv4, `/128` for IPv6). An IPv4-mapped IPv6 address (`::ffff:192.0.2.7`) is read as the IPv4
/// address it maps, so that a dual-stack listener's peers match IPv4 ranges.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    network: IpAddr,
    prefix: u8,
}

impl Cidr {
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        let (address, prefix) = match text.split_once('/') {
            Some((address, prefix)) => (address, Some(prefix)),
            None => (text, None),
        };
        let written: IpAddr = address.parse().map_err(|_| {
            format!(
                "{text:?} is not an IP address or range; write e.g. \"10.0.0.0/8\", \
                 \"2001:db8::/32\" or \"192.0.2.7\""
            )
        })?;
        let width = width(written);
        let prefix = match prefix {
            None => width,
            Some(digits) => digits
                .parse::<u8>()
                .ok()
                .filter(|p| *p <= width && digits.bytes().all(|b| b.is_ascii_digit()))
                .ok_or_else(|| format!("{text:?} has a prefix length outside 0-{width}"))?,
        };
        // A mapped IPv4 address keeps its meaning: ::ffff:10.0.0.0/104 is 10.0.0.0/8.
        let network = written.to_canonical();
        let prefix = if network.is_ipv4() && written.is_ipv6() {
            prefix.checked_sub(96).ok_or_else(|| {
                format!("{text:?}: an IPv4-mapped range needs a prefix of at least 96")
            })?
        } else {
            prefix
        };
        let cidr = Self { network, prefix };
        if cidr.masked(network) != network {
            return Err(format!(
                "{text:?} has address bits set past its /{prefix} prefix; write {:?}",
                format!("{}/{prefix}", cidr.masked(network))
            ));
        }
        Ok(cidr)
    }

    /// Whether `address` is in the range (an IPv4-mapped IPv6 address as its IPv4 address).
    pub fn contains(&self, address: IpAddr) -> bool {
        let address = address.to_canonical();
        address.is_ipv4() == self.network.is_ipv4() && self.masked(address) == self.network
    }

    /// `address` with every bit past the prefix cleared (same family as the network).
    fn masked(&self, address: IpAddr) -> IpAddr {
        match address {
            IpAddr::V4(v4) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                IpAddr::V4((u32::from(v4) & mask).into())
            }
            IpAddr::V6(v6) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                IpAddr::V6((u128::from(v6) & mask).into())
            }
        }
    }
}

fn width(address: IpAddr) -> u8 {
    if address.is_ipv4() {
        32
    } else {
        128
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

impl fmt::Debug for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl std::str::FromStr for Cidr {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        Cidr::parse(text)
    }
}

impl<'de> Deserialize<'de> for Cidr {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Cidr::parse(&text).map_err(de::Error::custom)
    }
}

impl Serialize for Cidr {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// The highest rate a limit may have: one token a nanosecond, the resolution of the buckets.
pub const MAX_RATE_PER_SECOND: f64 = 1e9;
/// The lowest: one a day. A slower limit is a typo (`"1/m"` meant), and a day's interval keeps
/// every bucket's arithmetic far from overflowing.
pub const MIN_RATE_PER_SECOND: f64 = 1.0 / 86_400.0;
/// The largest burst a limit may have.
pub const MAX_BURST: u32 = 1_000_000_000;

/// A rate written `"200/s"` or `"30/m"`: a positive number of tokens per second or per minute.
#[derive(Clone, PartialEq)]
pub struct Rate {
    per_second: f64,
    text: String,
}

impl Rate {
    pub fn parse(text: &str) -> Result<Self, String> {
        let trimmed = text.trim();
        let help = "write e.g. \"200/s\" or \"30/m\"";
        let Some((number, unit)) = trimmed.split_once('/') else {
            return Err(format!("{text:?} is not a rate; {help}"));
        };
        let seconds = match unit.trim() {
            "s" => 1.0,
            "m" => 60.0,
            other => {
                return Err(format!(
                    "{text:?} has an unknown unit {other:?} (use s or m); {help}"
                ))
            }
        };
        let number = number.trim();
        // Plain decimal digits only: no sign, exponent, `inf` or `NaN`.
        let plain = !number.is_empty()
            && number.bytes().all(|b| b.is_ascii_digit() || b == b'.')
            && number.bytes().filter(|b| *b == b'.').count() <= 1;
        let count: f64 = number
            .parse()
            .ok()
            .filter(|_| plain)
            .ok_or_else(|| format!("{text:?} is not a rate; {help}"))?;
        let per_second = count / seconds;
        if !(MIN_RATE_PER_SECOND..=MAX_RATE_PER_SECOND).contains(&per_second) {
            return Err(format!(
                "{text:?} must be a positive rate from 1 a day to {MAX_RATE_PER_SECOND} a second"
            ));
        }
        Ok(Self {
            per_second,
            text: trimmed.to_owned(),
        })
    }

    /// Tokens per second.
    pub fn per_second(&self) -> f64 {
        self.per_second
    }

    /// The burst when none is configured: a second's worth of tokens, at least one.
    pub fn default_burst(&self) -> u32 {
        (self.per_second.ceil() as u32).clamp(1, MAX_BURST)
    }
}

impl fmt::Debug for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl<'de> Deserialize<'de> for Rate {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Rate::parse(&text).map_err(de::Error::custom)
    }
}

impl Serialize for Rate {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.text)
    }
}

/// A rate and its burst as a bucket is built from them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limit {
    pub per_second: f64,
    pub burst: u32,
}

/// Checks a rate key and its burst key (`<key>_burst`) together: a burst needs its rate, and is
/// 1 to [`MAX_BURST`]. Returns the limit they configure, if any.
pub fn check_limit(
    key: &str,
    rate: Option<&Rate>,
    burst: Option<u32>,
) -> Result<Option<Limit>, ConfigError> {
    let burst_key = format!("{key}_burst");
    match (rate, burst) {
        (None, None) => Ok(None),
        (None, Some(_)) => Err(ConfigError::invalid(
            burst_key,
            format!("is read only with {key}, which is not set"),
        )),
        (Some(_), Some(burst)) if !(1..=MAX_BURST).contains(&burst) => Err(ConfigError::invalid(
            burst_key,
            format!("must be from 1 to {MAX_BURST}, got {burst}"),
        )),
        (Some(rate), burst) => Ok(Some(Limit {
            per_second: rate.per_second(),
            burst: burst.unwrap_or_else(|| rate.default_burst()),
        })),
    }
}

#[cfg(test)]
#[path = "access_tests.rs"]
mod tests;
