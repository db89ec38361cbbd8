//! Helpers for the providers' unit tests: settings, requests and expectations in one line each.

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue};

use crate::config::SourceSettings;

use super::super::{RawRequest, Verified, VerifyError};

/// Settings for `provider` with `secrets` and extra keys given as a JSON object.
pub(crate) fn settings(
    provider: &str,
    secrets: &[&str],
    extra: serde_json::Value,
) -> SourceSettings {
    let mut value = serde_json::json!({ "provider": provider, "secrets": secrets });
    if let (Some(map), Some(extra)) = (value.as_object_mut(), extra.as_object()) {
        map.extend(extra.clone());
    }
    serde_json::from_value(value).expect("test settings deserialize")
}

/// A header map from `(name, value)` pairs; values may hold any bytes a header can.
pub(crate) fn headers(pairs: &[(&str, &[u8])]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        map.append(
            HeaderName::from_bytes(name.as_bytes()).expect("valid header name"),
            HeaderValue::from_bytes(value).expect("valid header value"),
        );
    }
    map
}

/// The headers a provider's `sign` produced, as a map.
pub(crate) fn signed(pairs: &[(String, String)]) -> HeaderMap {
    let pairs: Vec<(&str, &[u8])> = pairs
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_bytes()))
        .collect();
    headers(&pairs)
}

/// Runs `verify` on one request.
pub(crate) fn verify(
    provider: &dyn super::super::Provider,
    headers: &HeaderMap,
    body: &[u8],
    now_unix: i64,
) -> Result<Verified, VerifyError> {
    let body = Bytes::copy_from_slice(body);
    provider.verify(&RawRequest {
        headers,
        body: &body,
        now_unix,
    })
}

/// The (event_id, event_type) pairs of an accepted request; panics on anything else.
pub(crate) fn events(result: Result<Verified, VerifyError>) -> Vec<(String, String)> {
    match result {
        Ok(Verified::Events(events)) => events
            .iter()
            .map(|e| (e.event_id().to_owned(), e.event_type().to_owned()))
            .collect(),
        other => panic!("expected events, got {other:?}"),
    }
}

/// Shorthand for one accepted event.
pub(crate) fn one(id: &str, kind: &str) -> Vec<(String, String)> {
    vec![(id.to_owned(), kind.to_owned())]
}

/// The `ConfigError` text of a failed construction.
pub(crate) fn config_error<T>(result: Result<T, crate::config::ConfigError>) -> String {
    match result {
        Ok(_) => panic!("expected a configuration error"),
        Err(e) => e.to_string(),
    }
}
