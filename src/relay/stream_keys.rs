//! The relay's key and group names, and the one place that says which streams a source has.
//!
//! Every key of a source carries the source's hash tag (`{<source>}`), so that a stream, its
//! dead letters and its replays live in one Redis Cluster slot and a script may touch them all.

use crate::config::{ConfigError, Settings};
use crate::forward::Target;

/// The streams of one source, in the order they are read: one per partition (partition 0
/// first), so one for an unpartitioned source.
pub fn of_source(settings: &Settings, source: &str) -> Result<Vec<String>, ConfigError> {
    Ok(Target::of_source(settings, source)?.streams())
}

/// A route's consumer group, the same on every stream it reads.
pub fn group(route: &str) -> String {
    format!("hookonce:{route}")
}

/// The dead-letter stream of one route for one source.
pub fn dead_letters(key_prefix: &str, source: &str, route: &str) -> String {
    format!("{key_prefix}:{{{source}}}:dlq:{route}")
}

/// The stream through which `dlq replay` and `redeliver` hand entries back to one route only:
/// only that route's group reads it, so no other route sees the event again.
pub fn replays(key_prefix: &str, source: &str, route: &str) -> String {
    format!("{key_prefix}:{{{source}}}:replay:{route}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_carry_the_source_hash_tag() {
        assert_eq!(group("billing"), "hookonce:billing");
        assert_eq!(
            dead_letters("hookonce", "stripe", "billing"),
            "hookonce:{stripe}:dlq:billing"
        );
        assert_eq!(
            replays("hk", "stripe", "billing"),
            "hk:{stripe}:replay:billing"
        );
    }
}
