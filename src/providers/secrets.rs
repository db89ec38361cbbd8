//! Turning configured secret strings into HMAC keys, per each provider's encoding rules.

use crate::config::{ConfigError, Secret};

/// Decodes every secret of a source with `decode`, naming the offending list entry on failure.
pub fn decode_secrets(
    source: &str,
    secrets: &[Secret],
    decode: impl Fn(&str) -> Result<Vec<u8>, String>,
) -> Result<Vec<Vec<u8>>, ConfigError> {
    secrets
        .iter()
        .enumerate()
        .map(|(i, secret)| {
            decode(secret.expose()).map_err(|problem| {
                ConfigError::invalid(format!("sources.{source}.secrets[{i}]"), problem)
            })
        })
        .collect()
}
