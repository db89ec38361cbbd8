//! Value types that parse themselves from configuration strings: durations, sizes and secrets.

use std::fmt;
use std::time::Duration;

use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::{Deserialize, Serialize, Serializer};

use super::ConfigError;

const DAY: Duration = Duration::from_secs(24 * 60 * 60);

/// The least a duration must be when zero is not allowed.
pub const ABOVE_ZERO: Duration = Duration::from_nanos(1);
/// The longest `dedup_ttl` (and JetStream `duplicate_window`): ten years of 365 days. Redis takes
/// `PX` as a signed 64-bit count of milliseconds and refuses an expiry whose deadline overflows
/// it, and a refusal after `XADD` ran would append an entry on every retry; ten years is far
/// below that and far beyond any provider's retry horizon.
pub const MAX_DEDUP_TTL: Duration = Duration::from_secs(3650 * 24 * 60 * 60);
/// The longest `tolerance`: a signed timestamp a day old proves little about freshness.
pub const MAX_TOLERANCE: Duration = DAY;
/// The longest lease and sampling interval.
pub const MAX_LEASE: Duration = DAY;
/// The longest request, store, sink and shutdown timeout.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(60 * 60);

/// A duration written as `"500ms"`, `"30s"`, `"72h"` or `"1d 12h"`.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct HumanDuration(pub Duration);

impl fmt::Debug for HumanDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", humantime::format_duration(self.0))
    }
}

impl HumanDuration {
    /// Refuses a value outside `[min, max]`, naming `key` and both bounds.
    pub(super) fn check(
        self,
        key: impl Into<String>,
        min: Duration,
        max: Duration,
    ) -> Result<(), ConfigError> {
        if self.0 < min || self.0 > max {
            let min = match min {
                Duration::ZERO => String::new(),
                ABOVE_ZERO => "above zero and ".to_owned(),
                min => format!("at least {} and ", show(min)),
            };
            return Err(ConfigError::invalid(
                key,
                format!("must be {min}at most {}", show(max)),
            ));
        }
        Ok(())
    }
}

/// A bound as an operator would write it: `3650d`, `1h`, `1s`.
fn show(duration: Duration) -> String {
    let secs = duration.as_secs();
    match secs {
        s if s >= DAY.as_secs() && s % DAY.as_secs() == 0 => format!("{}d", s / DAY.as_secs()),
        s if s >= 3600 && s % 3600 == 0 => format!("{}h", s / 3600),
        _ => humantime::format_duration(duration).to_string(),
    }
}

impl<'de> Deserialize<'de> for HumanDuration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        humantime::parse_duration(text.trim())
            .map(HumanDuration)
            .map_err(|e| {
                de::Error::custom(format!(
                    "{text:?} is not a duration ({e}); write e.g. \"500ms\", \"30s\", \"72h\""
                ))
            })
    }
}

impl Serialize for HumanDuration {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(&humantime::format_duration(self.0))
    }
}

/// A size in bytes written as `"1MiB"`, `"512KiB"`, `"64KB"` or a plain number of bytes.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct ByteSize(pub u64);

impl ByteSize {
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        let split = text
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(text.len());
        let (digits, unit) = text.split_at(split);
        let number: u64 = digits
            .parse()
            .map_err(|_| format!("{text:?} is not a size; write e.g. \"1MiB\" or \"65536\""))?;
        let factor: u64 = match unit.trim() {
            "" | "B" => 1,
            "KB" | "kB" => 1_000,
            "KiB" => 1 << 10,
            "MB" => 1_000_000,
            "MiB" => 1 << 20,
            "GB" => 1_000_000_000,
            "GiB" => 1 << 30,
            other => {
                return Err(format!(
                    "{text:?} has an unknown unit {other:?} (use B, KB, KiB, MB, MiB, GB or GiB)"
                ))
            }
        };
        number
            .checked_mul(factor)
            .map(ByteSize)
            .ok_or_else(|| format!("{text:?} is too large"))
    }
}

impl fmt::Debug for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}B", self.0)
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        ByteSize::parse(&text).map_err(de::Error::custom)
    }
}

impl Serialize for ByteSize {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let n = self.0;
        let text = match n {
            n if n >= 1 << 30 && n % (1 << 30) == 0 => format!("{}GiB", n >> 30),
            n if n >= 1 << 20 && n % (1 << 20) == 0 => format!("{}MiB", n >> 20),
            n if n >= 1 << 10 && n % (1 << 10) == 0 => format!("{}KiB", n >> 10),
            n => n.to_string(),
        };
        serializer.serialize_str(&text)
    }
}

/// A secret value, configured as a literal, `env:NAME` or `file:PATH` and resolved while loading.
///
/// `Debug` and `Serialize` never show the value: they show `[redacted]`, or the reference
/// (`env:NAME`, `file:PATH`) which names where the secret lives without revealing it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret {
    value: String,
    origin: SecretOrigin,
}

#[derive(Clone, PartialEq, Eq)]
enum SecretOrigin {
    Literal,
    Reference(String),
}

impl Secret {
    /// Resolves `env:NAME`, `file:PATH` or a literal.
    pub fn resolve(spec: &str) -> Result<Self, String> {
        if let Some(name) = spec.strip_prefix("env:") {
            let value = std::env::var(name)
                .map_err(|_| format!("environment variable {name} is not set"))?;
            Self::reference(value, spec)
        } else if let Some(path) = spec.strip_prefix("file:") {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read secret file {path}: {e}"))?;
            Self::reference(text.trim_end_matches(['\r', '\n']).to_owned(), spec)
        } else if spec.is_empty() {
            Err("secret is empty".to_owned())
        } else {
            Ok(Self {
                value: spec.to_owned(),
                origin: SecretOrigin::Literal,
            })
        }
    }

    /// A literal secret, for settings built in code (tests, tools); never empty.
    pub fn literal(value: impl Into<String>) -> Result<Self, String> {
        let value = value.into();
        if value.is_empty() {
            return Err("secret is empty".to_owned());
        }
        Ok(Self {
            value,
            origin: SecretOrigin::Literal,
        })
    }

    /// Line `line` of the secret file `path` (`secrets_files`); shown as `file:PATH:LINE`.
    pub(super) fn from_file_line(value: &str, path: &str, line: usize) -> Result<Self, String> {
        Self::reference(value.to_owned(), &format!("file:{path}:{line}"))
    }

    fn reference(value: String, spec: &str) -> Result<Self, String> {
        if value.is_empty() {
            return Err(format!("{spec} resolves to an empty secret"));
        }
        Ok(Self {
            value,
            origin: SecretOrigin::Reference(spec.to_owned()),
        })
    }

    /// The secret itself. Call sites are few and obvious on purpose.
    pub fn expose(&self) -> &str {
        &self.value
    }

    fn shown(&self) -> String {
        match &self.origin {
            SecretOrigin::Literal => "[redacted]".to_owned(),
            SecretOrigin::Reference(spec) => format!("{spec} [redacted]"),
        }
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.shown())
    }
}

impl Serialize for Secret {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.shown())
    }
}

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let spec = String::deserialize(deserializer)?;
        Secret::resolve(&spec).map_err(de::Error::custom)
    }
}

/// Deserializes a list that may also be written as one string (handy for environment overrides).
pub fn one_or_many<'de, D, T>(deserializer: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    struct OneOrMany<T>(std::marker::PhantomData<T>);

    impl<'de, T: Deserialize<'de>> Visitor<'de> for OneOrMany<T> {
        type Value = Vec<T>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a string or a list of strings")
        }

        fn visit_str<E: de::Error>(self, value: &str) -> Result<Vec<T>, E> {
            T::deserialize(de::value::StrDeserializer::new(value)).map(|v| vec![v])
        }

        fn visit_string<E: de::Error>(self, value: String) -> Result<Vec<T>, E> {
            self.visit_str(&value)
        }

        fn visit_i64<E: de::Error>(self, value: i64) -> Result<Vec<T>, E> {
            self.visit_str(&value.to_string())
        }

        fn visit_u64<E: de::Error>(self, value: u64) -> Result<Vec<T>, E> {
            self.visit_str(&value.to_string())
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
            let mut items = Vec::new();
            while let Some(item) = seq.next_element()? {
                items.push(item);
            }
            Ok(items)
        }
    }

    deserializer.deserialize_any(OneOrMany(std::marker::PhantomData))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_binary_and_decimal_units() {
        assert_eq!(ByteSize::parse("1MiB").unwrap().0, 1 << 20);
        assert_eq!(ByteSize::parse("64KB").unwrap().0, 64_000);
        assert_eq!(ByteSize::parse("4096").unwrap().0, 4096);
        assert!(ByteSize::parse("1 parsec").is_err());
        assert!(ByteSize::parse("MiB").is_err());
    }

    #[test]
    fn durations_are_bounded_and_the_error_names_the_key_and_the_bounds() {
        let huge = HumanDuration(humantime::parse_duration("300000000y").unwrap());
        let error = huge
            .check("sources.x.dedup_ttl", Duration::from_secs(1), MAX_DEDUP_TTL)
            .unwrap_err()
            .to_string();
        assert_eq!(
            error,
            "sources.x.dedup_ttl: must be at least 1s and at most 3650d"
        );
        let zero = HumanDuration(Duration::ZERO).check("store.timeout", ABOVE_ZERO, MAX_TIMEOUT);
        assert_eq!(
            zero.unwrap_err().to_string(),
            "store.timeout: must be above zero and at most 1h"
        );
        let ok = HumanDuration(MAX_TIMEOUT).check("store.timeout", ABOVE_ZERO, MAX_TIMEOUT);
        assert!(ok.is_ok());
        let none = HumanDuration(Duration::ZERO).check(
            "server.shutdown_timeout",
            Duration::ZERO,
            MAX_TIMEOUT,
        );
        assert!(none.is_ok(), "zero is allowed where there is no minimum");
    }

    #[test]
    fn secrets_never_print_their_value() {
        let secret = Secret::resolve("whsec_topsecret").unwrap();
        assert_eq!(format!("{secret:?}"), "[redacted]");
        assert_eq!(secret.expose(), "whsec_topsecret");
        std::env::set_var("HOOKONCE_TEST_SECRET_VALUES", "s3cr3t");
        let secret = Secret::resolve("env:HOOKONCE_TEST_SECRET_VALUES").unwrap();
        assert_eq!(
            format!("{secret:?}"),
            "env:HOOKONCE_TEST_SECRET_VALUES [redacted]"
        );
        assert!(Secret::resolve("env:HOOKONCE_TEST_NOT_SET_ANYWHERE").is_err());
    }
}
