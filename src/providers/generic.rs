//! Generic HMAC: one configurable shape that covers most remaining providers.
//!
//! ```toml
//! [sources.acme]
//! provider = "generic"
//! secrets = ["env:ACME_SECRET"]           # UTF-8 bytes are the key
//! signature_header = "X-Acme-Signature"
//! signature_prefix = "sha256="            # optional; required in the header when set
//! algorithm = "sha256"                    # sha1 | sha256 | sha512
//! encoding = "hex"                        # hex | base64
//! signed_content = "{timestamp}.{body}"   # default "{body}"; also {id} and literal text
//! timestamp_header = "X-Acme-Timestamp"   # unix seconds; needs {timestamp} in signed_content
//! tolerance = "5m"                        # only with timestamp_header (default 5m, both sides)
//! id_header = "X-Acme-Delivery"           # or id_pointer = "/id" (exactly one of the two)
//! type_header = "X-Acme-Event"            # or type_pointer = "/type" (optional)
//! ```
//!
//! Rules that keep a configuration from being silently weak: `{body}` must appear exactly once in
//! `signed_content`; a `timestamp_header` must be signed (`{timestamp}` in the template), since an
//! unsigned timestamp proves nothing; `{id}` needs `id_header`. Every problem is a `ConfigError`
//! naming its key. Errors about the request name the *key* (`signature_header`), not the header.
//! One signature per header; several `secrets` for rotation.

use std::time::Duration;

use http::HeaderName;

use crate::config::{ConfigError, SourceSettings};

use super::extract::{id_at, parse_body, required, type_at, Pointer};
use super::secrets;
use super::signatures::{Candidates, Encoding};
use super::signing::{
    check_timestamp, keyed_macs, parse_unix, random_uuid, tolerance_secs, AnyHmac,
};
use super::{
    header_or_empty, id_from_header, Provider, RawRequest, SignOptions, Verified, VerifiedEvent,
    VerifyError,
};

const DEFAULT_TOLERANCE: Duration = Duration::from_secs(5 * 60);

/// Most pieces a `signed_content` template may have; real schemes use three or four.
const MAX_PARTS: usize = 16;

/// The keys of `[sources.NAME]` this provider reads (its registry entry lists them).
pub(super) const KEYS: &[&str] = &[
    "signature_header",
    "signature_prefix",
    "algorithm",
    "encoding",
    "signed_content",
    "timestamp_header",
    "tolerance",
    "id_header",
    "id_pointer",
    "type_header",
    "type_pointer",
];

#[derive(Debug, PartialEq, Eq)]
enum Part {
    Literal(Vec<u8>),
    Body,
    Timestamp,
    Id,
}

enum Source {
    Header(HeaderName),
    Pointer(Pointer),
}

pub struct Generic {
    keys: AnyHmac,
    signature_header: HeaderName,
    signature_prefix: String,
    encoding: Encoding,
    template: Vec<Part>,
    /// The timestamp header and the tolerance in seconds.
    timestamp: Option<(HeaderName, u64)>,
    id: Source,
    kind: Option<Source>,
}

impl Generic {
    pub fn from_settings(source: &str, settings: &SourceSettings) -> Result<Self, ConfigError> {
        let key = |k: &str| format!("sources.{source}.{k}");
        let invalid = |k: &str, problem: &str| ConfigError::invalid(key(k), problem);

        let name = required(
            source,
            settings,
            "signature_header",
            &settings.signature_header,
            "\"X-Signature\"",
        )?;
        let signature_header = header_name(source, "signature_header", name)?;
        let keys = match required(
            source,
            settings,
            "algorithm",
            &settings.algorithm,
            "\"sha256\"",
        )? {
            "sha1" => AnyHmac::Sha1(keyed_macs(source, settings, secrets::raw)?),
            "sha256" => AnyHmac::Sha256(keyed_macs(source, settings, secrets::raw)?),
            "sha512" => AnyHmac::Sha512(keyed_macs(source, settings, secrets::raw)?),
            _ => {
                return Err(invalid(
                    "algorithm",
                    "must be \"sha1\", \"sha256\" or \"sha512\"",
                ))
            }
        };
        let encoding = match required(source, settings, "encoding", &settings.encoding, "\"hex\"")?
        {
            "hex" => Encoding::Hex,
            "base64" => Encoding::Base64,
            _ => return Err(invalid("encoding", "must be \"hex\" or \"base64\"")),
        };
        let template = parse_template(settings.signed_content.as_deref().unwrap_or("{body}"))
            .map_err(|problem| invalid("signed_content", &problem))?;

        let timestamp = match &settings.timestamp_header {
            Some(name) => {
                if !template.contains(&Part::Timestamp) {
                    return Err(invalid(
                        "timestamp_header",
                        "is set but signed_content has no {timestamp}: an unsigned timestamp proves nothing",
                    ));
                }
                let tolerance = tolerance_secs(source, settings, DEFAULT_TOLERANCE)?;
                Some((header_name(source, "timestamp_header", name)?, tolerance))
            }
            None if template.contains(&Part::Timestamp) => {
                return Err(invalid(
                    "signed_content",
                    "uses {timestamp} but timestamp_header is not set",
                ))
            }
            None if settings.tolerance.is_some() => {
                return Err(invalid("tolerance", "only applies with timestamp_header"))
            }
            None => None,
        };

        let id = match (&settings.id_header, &settings.id_pointer) {
            (Some(name), None) => Source::Header(header_name(source, "id_header", name)?),
            (None, Some(pointer)) => {
                Source::Pointer(Pointer::parse(source, "id_pointer", pointer)?)
            }
            (None, None) => {
                return Err(invalid(
                    "id_header",
                    "set id_header or id_pointer: events need an ID",
                ))
            }
            (Some(_), Some(_)) => {
                return Err(invalid(
                    "id_pointer",
                    "set only one of id_header and id_pointer",
                ))
            }
        };
        if template.contains(&Part::Id) && !matches!(id, Source::Header(_)) {
            return Err(invalid(
                "signed_content",
                "uses {id} but id_header is not set",
            ));
        }
        let kind = match (&settings.type_header, &settings.type_pointer) {
            (Some(name), None) => Some(Source::Header(header_name(source, "type_header", name)?)),
            (None, Some(pointer)) => Some(Source::Pointer(Pointer::parse(
                source,
                "type_pointer",
                pointer,
            )?)),
            (None, None) => None,
            (Some(_), Some(_)) => {
                return Err(invalid(
                    "type_pointer",
                    "set only one of type_header and type_pointer",
                ))
            }
        };
        Ok(Self {
            keys,
            signature_header,
            signature_prefix: settings.signature_prefix.clone().unwrap_or_default(),
            encoding,
            template,
            timestamp,
            id,
            kind,
        })
    }
}

fn header_name(source: &str, key: &str, text: &str) -> Result<HeaderName, ConfigError> {
    HeaderName::from_bytes(text.trim().as_bytes()).map_err(|_| {
        ConfigError::invalid(
            format!("sources.{source}.{key}"),
            format!("{text:?} is not a valid header name"),
        )
    })
}

/// Splits `{body}`, `{timestamp}`, `{id}` and literal text.
fn parse_template(text: &str) -> Result<Vec<Part>, String> {
    let mut parts = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let next = rest.find(['{', '}']).unwrap_or(rest.len());
        if next > 0 {
            parts.push(Part::Literal(rest.as_bytes()[..next].to_vec()));
        }
        rest = &rest[next..];
        if rest.is_empty() {
            break;
        }
        let end = rest
            .find('}')
            .filter(|_| rest.starts_with('{'))
            .ok_or("has an unmatched '}'")?;
        parts.push(match &rest[..=end] {
            "{body}" => Part::Body,
            "{timestamp}" => Part::Timestamp,
            "{id}" => Part::Id,
            other => {
                return Err(format!(
                    "has an unknown placeholder {other} (use {{body}}, {{timestamp}}, {{id}})"
                ))
            }
        });
        rest = &rest[end + 1..];
    }
    if parts.iter().filter(|p| **p == Part::Body).count() != 1 {
        return Err("must contain {body} exactly once: the body has to be signed".to_owned());
    }
    if parts.len() > MAX_PARTS {
        return Err(format!("has more than {MAX_PARTS} parts"));
    }
    Ok(parts)
}

impl Generic {
    /// The signed bytes, in a fixed array so that building them allocates nothing.
    fn message<'a>(
        &'a self,
        body: &'a [u8],
        timestamp: &'a [u8],
        id: &'a [u8],
    ) -> ([&'a [u8]; MAX_PARTS], usize) {
        let mut out: [&[u8]; MAX_PARTS] = [&[]; MAX_PARTS];
        for (slot, part) in out.iter_mut().zip(&self.template) {
            *slot = match part {
                Part::Literal(text) => text,
                Part::Body => body,
                Part::Timestamp => timestamp,
                Part::Id => id,
            };
        }
        (out, self.template.len())
    }

    fn encode(&self, tag: &[u8]) -> String {
        format!("{}{}", self.signature_prefix, self.encoding.encode(tag))
    }
}

impl Provider for Generic {
    fn name(&self) -> &'static str {
        "generic"
    }

    fn verify(&self, request: &RawRequest<'_>) -> Result<Verified, VerifyError> {
        let headers = request.headers;
        let garbled = || VerifyError::GarbledHeader("signature_header");
        let value = headers
            .get(&self.signature_header)
            .ok_or(VerifyError::MissingHeader("signature_header"))?
            .to_str()
            .map_err(|_| garbled())?;
        let value = value
            .trim()
            .strip_prefix(self.signature_prefix.as_str())
            .ok_or_else(garbled)?;
        let signatures = Candidates::single(
            self.encoding,
            value,
            self.keys.tag_len(),
            "signature_header",
        )?;

        let (timestamp, unix) = match &self.timestamp {
            Some((name, _)) => {
                let text = headers
                    .get(name)
                    .ok_or(VerifyError::MissingHeader("timestamp_header"))?
                    .to_str()
                    .map_err(|_| VerifyError::GarbledHeader("timestamp_header"))?;
                let unix =
                    parse_unix(text).ok_or(VerifyError::GarbledHeader("timestamp_header"))?;
                (text.as_bytes(), unix)
            }
            None => (&b""[..], 0),
        };
        let signed_id: &[u8] = match (&self.id, self.template.contains(&Part::Id)) {
            (Source::Header(name), true) => headers
                .get(name)
                .ok_or(VerifyError::MissingHeader("id_header"))?
                .as_bytes(),
            _ => b"",
        };
        let (message, len) = self.message(request.body, timestamp, signed_id);
        if !self.keys.matches(&message[..len], &signatures) {
            return Err(VerifyError::BadSignature);
        }
        if let Some((_, tolerance)) = self.timestamp {
            check_timestamp(unix, request.now_unix, tolerance)?;
        }

        let needs_json =
            matches!(self.id, Source::Pointer(_)) || matches!(self.kind, Some(Source::Pointer(_)));
        let document = if needs_json {
            Some(parse_body(request.body)?)
        } else {
            None
        };
        let id = match (&self.id, &document) {
            (Source::Header(name), _) => {
                id_from_header(headers, name, "missing the configured id_header")?.into()
            }
            (Source::Pointer(pointer), Some(document)) => id_at(pointer, document)?,
            (Source::Pointer(_), None) => {
                unreachable!("the body is parsed whenever a pointer is configured")
            }
        };
        let kind = match (&self.kind, &document) {
            (Some(Source::Header(name)), _) => header_or_empty(headers, name).into(),
            (Some(Source::Pointer(pointer)), Some(document)) => type_at(Some(pointer), document),
            _ => Default::default(),
        };
        let event = VerifiedEvent::new(id, kind, request.body.clone())?;
        Ok(Verified::Events(vec![event]))
    }

    fn sign(&self, body: &[u8], options: &SignOptions) -> Vec<(String, String)> {
        let timestamp = options.now_unix.to_string();
        let id = options.event_id.clone().unwrap_or_else(random_uuid);
        let (message, len) = self.message(body, timestamp.as_bytes(), id.as_bytes());
        let mut out = vec![(
            self.signature_header.as_str().to_owned(),
            self.encode(&self.keys.sign(&message[..len])),
        )];
        if let Some((name, _)) = &self.timestamp {
            out.push((name.as_str().to_owned(), timestamp));
        }
        if let Source::Header(name) = &self.id {
            out.push((name.as_str().to_owned(), id));
        }
        if let Some(Source::Header(name)) = &self.kind {
            let kind = options
                .event_type
                .clone()
                .unwrap_or_else(|| "test".to_owned());
            out.push((name.as_str().to_owned(), kind));
        }
        out.push(("Content-Type".to_owned(), "application/json".to_owned()));
        out
    }
}

#[cfg(test)]
#[path = "generic_tests.rs"]
mod tests;
