//! A route's credentials: its static headers (bearer tokens and the like) and its Standard
//! Webhooks signer. Built from `[relay.routes.NAME]` at start and again on every reload
//! (`SIGHUP`), when a token or signing secret read from a file may have been rotated.

use http::{HeaderMap, HeaderName, HeaderValue};

use crate::config::{ConfigError, RouteSettings};
use crate::signing::StandardSigner;

/// What a route sends to prove itself to its worker.
pub struct Credentials {
    /// The static headers; values may be secrets, so this map is never logged.
    pub headers: HeaderMap,
    pub signer: Option<StandardSigner>,
}

impl Credentials {
    /// The credentials of the route `name`, naming the key of a value that does not fit.
    pub fn build(name: &str, route: &RouteSettings) -> Result<Self, ConfigError> {
        let signer = match &route.signing_secret {
            Some(secret) => Some(StandardSigner::new(secret.expose()).map_err(|problem| {
                ConfigError::invalid(format!("relay.routes.{name}.signing_secret"), problem)
            })?),
            None => None,
        };
        let mut headers = HeaderMap::new();
        for (header, value) in &route.headers {
            let key = || format!("relay.routes.{name}.headers.{header}");
            let header = HeaderName::from_bytes(header.as_bytes())
                .map_err(|_| ConfigError::invalid(key(), "is not a valid header name"))?;
            let mut value = HeaderValue::from_str(value.expose())
                .map_err(|_| ConfigError::invalid(key(), "is not a valid header value"))?;
            value.set_sensitive(true);
            headers.insert(header, value);
        }
        Ok(Self { headers, signer })
    }
}
