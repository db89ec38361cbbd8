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
//! unsigned timestamp proves nothing; `{id}` needs `id_header`; placeholders need literal text
//! between them, so that the signed bytes split in one way only (`generic_template`). Every problem is a `ConfigError`
//! naming its key. Errors about the request name the *key* (`signature_header`), not the header.
//! One signature per header; several `secrets` for rotation.

use std::borrow::Cow;
use std::time::Duration;

use http::{HeaderMap, HeaderName};

use crate::config::{ConfigError, SourceSettings};

use super::extract::{id_at, parse_body, required, type_at, Pointer};
use super::generic_template::{message, parse_template, unambiguous, Part, MAX_PARTS};
use super::secrets;
use super::signatures::{Candidates, Encoding};
use super::signing::{
    check_timestamp, keyed_macs, parse_unix, random_uuid, tolerance_secs, AnyHmac, Sha256Keys,
};
use super::{
    header_or_empty, id_from_header, Provider, RawRequest, SignOptions, Verified, VerifiedEvent,
    VerifyError,
};

const DEFAULT_TOLERANCE: Duration = Duration::from_secs(5 * 60);

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
        let name = required(
            source,
            settings,
            "signature_header",
            &settings.signature_header,
            "\"X-Signature\"",
        )?;
        let signature_header = header_name(source, "signature_header", name)?;
        let keys = keys(source, settings)?;
        let encoding = match required(source, settings, "encoding", &settings.encoding, "\"hex\"")?
        {
            "hex" => Encoding::Hex,
            "base64" => Encoding::Base64,
            _ => return Err(invalid(source, "encoding", "must be \"hex\" or \"base64\"")),
        };
        let template = parse_template(settings.signed_content.as_deref().unwrap_or("{body}"))
            .map_err(|problem| invalid(source, "signed_content", &problem))?;
        let timestamp = timestamp(source, settings, &template)?;
        let id = header_or_pointer(
            source,
            ("id_header", &settings.id_header),
            ("id_pointer", &settings.id_pointer),
        )?
        .ok_or_else(|| {
            invalid(
                source,
                "id_header",
                "set id_header or id_pointer: events need an ID",
            )
        })?;
        if template.contains(&Part::Id) && !matches!(id, Source::Header(_)) {
            return Err(invalid(
                source,
                "signed_content",
                "uses {id} but id_header is not set",
            ));
        }
        let kind = header_or_pointer(
            source,
            ("type_header", &settings.type_header),
            ("type_pointer", &settings.type_pointer),
        )?;
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

fn invalid(source: &str, key: &str, problem: &str) -> ConfigError {
    ConfigError::invalid(format!("sources.{source}.{key}"), problem)
}

/// The secrets keyed for the configured `algorithm`.
fn keys(source: &str, settings: &SourceSettings) -> Result<AnyHmac, ConfigError> {
    let algorithm = required(
        source,
        settings,
        "algorithm",
        &settings.algorithm,
        "\"sha256\"",
    )?;
    Ok(match algorithm {
        "sha1" => AnyHmac::Sha1(keyed_macs(source, settings, secrets::raw)?),
        "sha256" => AnyHmac::Sha256(Sha256Keys::from_settings(source, settings, secrets::raw)?),
        "sha512" => AnyHmac::Sha512(keyed_macs(source, settings, secrets::raw)?),
        _ => {
            return Err(invalid(
                source,
                "algorithm",
                "must be \"sha1\", \"sha256\" or \"sha512\"",
            ))
        }
    })
}

/// The timestamp header and tolerance, which must come with `{timestamp}` in the template.
fn timestamp(
    source: &str,
    settings: &SourceSettings,
    template: &[Part],
) -> Result<Option<(HeaderName, u64)>, ConfigError> {
    let signed = template.contains(&Part::Timestamp);
    match &settings.timestamp_header {
        Some(_) if !signed => Err(invalid(
            source,
            "timestamp_header",
            "is set but signed_content has no {timestamp}: an unsigned timestamp proves nothing",
        )),
        Some(name) => {
            let tolerance = tolerance_secs(source, settings, DEFAULT_TOLERANCE)?;
            Ok(Some((
                header_name(source, "timestamp_header", name)?,
                tolerance,
            )))
        }
        None if signed => Err(invalid(
            source,
            "signed_content",
            "uses {timestamp} but timestamp_header is not set",
        )),
        None if settings.tolerance.is_some() => Err(invalid(
            source,
            "tolerance",
            "only applies with timestamp_header",
        )),
        None => Ok(None),
    }
}

/// Where a value is read from, given a header key and a pointer key of which at most one is set.
fn header_or_pointer(
    source: &str,
    (header_key, header): (&str, &Option<String>),
    (pointer_key, pointer): (&str, &Option<String>),
) -> Result<Option<Source>, ConfigError> {
    match (header, pointer) {
        (Some(name), None) => Ok(Some(Source::Header(header_name(source, header_key, name)?))),
        (None, Some(pointer)) => Ok(Some(Source::Pointer(Pointer::parse(
            source,
            pointer_key,
            pointer,
        )?))),
        (None, None) => Ok(None),
        (Some(_), Some(_)) => Err(invalid(
            source,
            pointer_key,
            &format!("set only one of {header_key} and {pointer_key}"),
        )),
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

impl Generic {
    /// The signed bytes, in a fixed array so that building them allocates nothing.
    fn message<'a>(
        &'a self,
        body: &'a [u8],
        timestamp: &'a [u8],
        id: &'a [u8],
    ) -> ([&'a [u8]; MAX_PARTS], usize) {
        message(&self.template, body, timestamp, id)
    }

    /// The timestamp header as signed and its value, or nothing when none is configured.
    fn signed_timestamp<'a>(&self, headers: &'a HeaderMap) -> Result<(&'a [u8], i64), VerifyError> {
        let Some((name, _)) = &self.timestamp else {
            return Ok((b"", 0));
        };
        let garbled = VerifyError::GarbledHeader("timestamp_header");
        let text = headers
            .get(name)
            .ok_or(VerifyError::MissingHeader("timestamp_header"))?
            .to_str()
            .map_err(|_| garbled.clone())?;
        let unix = parse_unix(text).ok_or(garbled)?;
        Ok((text.as_bytes(), unix))
    }

    /// The event ID and type of a verified request, from headers or the body as configured. The
    /// body is parsed only when a pointer needs it.
    fn id_and_type<'a>(
        &self,
        headers: &'a HeaderMap,
        body: &'a [u8],
    ) -> Result<(Cow<'a, str>, Cow<'a, str>), VerifyError> {
        let needs_json =
            matches!(self.id, Source::Pointer(_)) || matches!(self.kind, Some(Source::Pointer(_)));
        let document = if needs_json {
            Some(parse_body(body)?)
        } else {
            None
        };
        let id = match (&self.id, &document) {
            (Source::Header(name), _) => {
                id_from_header(headers, name, "missing the configured id_header")?.into()
            }
            (Source::Pointer(pointer), Some(document)) => {
                id_at(pointer, document)?.into_owned().into()
            }
            (Source::Pointer(_), None) => {
                unreachable!("the body is parsed whenever a pointer is configured")
            }
        };
        let kind = match (&self.kind, &document) {
            (Some(Source::Header(name)), _) => header_or_empty(headers, name).into(),
            (Some(Source::Pointer(pointer)), Some(document)) => {
                type_at(Some(pointer), document).into_owned().into()
            }
            _ => Default::default(),
        };
        Ok((id, kind))
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

        let (timestamp, unix) = self.signed_timestamp(headers)?;
        let signed_id: &[u8] = match (&self.id, self.template.contains(&Part::Id)) {
            (Source::Header(name), true) => headers
                .get(name)
                .ok_or(VerifyError::MissingHeader("id_header"))?
                .as_bytes(),
            _ => b"",
        };
        // A value holding its own separator could have been cut elsewhere: refuse it before the
        // signature is checked, so that no re-split of a captured delivery gets through.
        unambiguous(&self.template, timestamp, signed_id).map_err(VerifyError::GarbledHeader)?;
        let (message, len) = self.message(request.body, timestamp, signed_id);
        let digest = self
            .keys
            .verify_digesting(&message[..len], &[request.body], &signatures)?;
        if let Some((_, tolerance)) = self.timestamp {
            check_timestamp(unix, request.now_unix, tolerance)?;
        }
        let (id, kind) = self.id_and_type(headers, request.body)?;
        let mut event = VerifiedEvent::new(id, kind, request.body.clone())?;
        if let Some(digest) = digest {
            event = event.with_payload_digest(&digest);
        }
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
