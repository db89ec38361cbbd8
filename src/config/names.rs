//! The rule for the names of sources and proxies, which the settings and the relay's routes
//! check alike. Its own file below the façade, so that a section can check a name without
//! importing the module that declares it.

use super::error::ConfigError;

/// Source and proxy names become URL path segments, metric labels and Redis hash tags.
pub(super) fn validate_name(section: &str, name: &str) -> Result<(), ConfigError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
        && name != "_unknown";
    if ok {
        Ok(())
    } else {
        Err(ConfigError::invalid(
            format!("{section}.{name}"),
            "names use 1-64 of a-z, 0-9, '_' and '-'",
        ))
    }
}
