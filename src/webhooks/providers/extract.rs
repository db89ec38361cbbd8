//! Reading an event's ID and type from a verified body through configured JSON pointers.
//!
//! Used by the providers whose ID location is configuration (`adyen_platform`, `generic`). The
//! body is parsed once per request, after its signature matched.

use std::borrow::Cow;

use serde_json::Value;

use crate::config::{ConfigError, SourceSettings};

use super::VerifyError;

/// A JSON pointer (RFC 6901) checked at configuration time, e.g. `/data/id`.
#[derive(Debug, Clone)]
pub(crate) struct Pointer(String);

impl Pointer {
    /// Parses `text` as the value of `sources.SOURCE.KEY`.
    pub(crate) fn parse(source: &str, key: &str, text: &str) -> Result<Self, ConfigError> {
        let problem = if !text.starts_with('/') {
            Some("must be a JSON pointer starting with '/', e.g. \"/data/id\"")
        } else if has_bad_escape(text) {
            Some("has a '~' not followed by 0 or 1 (write ~0 for '~' and ~1 for '/')")
        } else {
            None
        };
        match problem {
            Some(problem) => Err(ConfigError::invalid(
                format!("sources.{source}.{key}"),
                problem,
            )),
            None => Ok(Self(text.to_owned())),
        }
    }

    /// A pointer written in the code, e.g. a provider's default.
    pub(crate) fn fixed(text: &'static str) -> Self {
        debug_assert!(text.starts_with('/') && !has_bad_escape(text));
        Self(text.to_owned())
    }

    /// Parses an optional key of `settings`.
    pub(crate) fn optional(
        source: &str,
        key: &str,
        value: &Option<String>,
    ) -> Result<Option<Self>, ConfigError> {
        value
            .as_deref()
            .map(|text| Self::parse(source, key, text))
            .transpose()
    }

    /// The text at this pointer: a string as is, a number in decimal; anything else is `None`.
    pub(crate) fn text<'a>(&self, document: &'a Value) -> Option<Cow<'a, str>> {
        match document.pointer(&self.0)? {
            Value::String(text) => Some(Cow::Borrowed(text)),
            Value::Number(number) => Some(Cow::Owned(number.to_string())),
            _ => None,
        }
    }
}

fn has_bad_escape(text: &str) -> bool {
    let bytes = text.as_bytes();
    bytes
        .iter()
        .enumerate()
        .any(|(i, b)| *b == b'~' && !matches!(bytes.get(i + 1), Some(b'0' | b'1')))
}

/// Parses a verified body as JSON for pointer lookups.
pub(crate) fn parse_body(body: &[u8]) -> Result<Value, VerifyError> {
    serde_json::from_slice(body).map_err(|_| VerifyError::Malformed("body is not JSON"))
}

/// The ID at `pointer`, or `Malformed` naming what is missing.
pub(crate) fn id_at<'a>(
    pointer: &Pointer,
    document: &'a Value,
) -> Result<Cow<'a, str>, VerifyError> {
    pointer.text(document).ok_or(VerifyError::Malformed(
        "no string or number at the configured id_pointer",
    ))
}

/// The type at an optional pointer, empty when absent or not text.
pub(crate) fn type_at<'a>(pointer: Option<&Pointer>, document: &'a Value) -> Cow<'a, str> {
    pointer
        .and_then(|pointer| pointer.text(document))
        .unwrap_or_default()
}

/// A required string key of a provider, or a `ConfigError` naming it.
pub(crate) fn required<'a>(
    source: &str,
    settings: &'a SourceSettings,
    key: &str,
    value: &'a Option<String>,
    example: &str,
) -> Result<&'a str, ConfigError> {
    match value.as_deref() {
        Some(text) if !text.trim().is_empty() => Ok(text),
        _ => Err(ConfigError::invalid(
            format!("sources.{source}.{key}"),
            format!(
                "is required for provider {:?} (e.g. {example})",
                settings.provider
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn pointers_are_checked_and_read_strings_and_numbers() {
        assert!(Pointer::parse("s", "id_pointer", "data/id").is_err());
        assert!(Pointer::parse("s", "id_pointer", "/a~2b").is_err());
        assert!(Pointer::parse("s", "id_pointer", "/a~").is_err());
        let doc = json!({ "data": { "id": "evt_1", "n": 42, "o": {}, "a/b": "slash" } });
        let text = |p: &str| {
            Pointer::parse("s", "k", p)
                .unwrap()
                .text(&doc)
                .map(Cow::into_owned)
        };
        assert_eq!(text("/data/id").as_deref(), Some("evt_1"));
        assert_eq!(text("/data/n").as_deref(), Some("42"));
        assert_eq!(text("/data/a~1b").as_deref(), Some("slash"));
        assert_eq!(text("/data/o"), None);
        assert_eq!(text("/missing"), None);
    }
}
