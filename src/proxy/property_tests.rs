//! Property tests of the proxy's edges (stable toolchain, proptest through `crate::property`):
//! the `Idempotency-Key` grammar, path normalisation and the route rule built on it, and the
//! stored response's framing.
//!
//! What they hold: two spellings of one key name one key and nothing outside the grammar is a
//! key; no spelling of a routed path is passed through unkeyed or keyed under another name; and
//! a stored answer decodes to itself, carries no hop-by-hop header, and replays with a length
//! that matches its body.

use axum::http::{header, HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use bytes::Bytes;
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use super::key;
use super::response::StoredResponse;
use super::route_match::{normalise, Routes, Routing};
use super::upstream::HopByHop;
use crate::property::check;

/// A bare key: 1–255 visible ASCII characters, not starting with a quote (that is a string).
fn bare_key() -> impl Strategy<Value = String> {
    vec(0x21u8..=0x7e, 1..=key::MAX_LEN)
        .prop_filter("a quote opens a string", |k| k[0] != b'"')
        .prop_map(|k| String::from_utf8(k).expect("ASCII"))
}

/// The sf-string spelling of `content`: quoted, with `"` and `\` escaped.
fn quoted(content: &str) -> String {
    let mut out = String::from("\"");
    for c in content.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

#[test]
fn a_bare_key_and_its_string_spelling_name_one_key() {
    check(256, bare_key(), |k| {
        prop_assert_eq!(key::parse(k.as_bytes()), Some(k.clone()));
        prop_assert_eq!(key::parse(quoted(&k).as_bytes()), Some(k));
        Ok(())
    });
}

#[test]
fn a_string_key_is_its_printable_content() {
    let content = vec(0x20u8..=0x7e, 1..=key::MAX_LEN).prop_map(|c| String::from_utf8(c).unwrap());
    check(256, content, |content| {
        prop_assert_eq!(key::parse(quoted(&content).as_bytes()), Some(content));
        Ok(())
    });
}

#[test]
fn nothing_outside_the_grammar_is_a_key() {
    check(1024, vec(any::<u8>(), 0..300), |raw| {
        let Some(k) = key::parse(&raw) else {
            return Ok(());
        };
        prop_assert!((1..=key::MAX_LEN).contains(&k.len()), "{k:?}");
        prop_assert!(k.bytes().all(|b| (0x20..=0x7e).contains(&b)), "{k:?}");
        if raw.first() != Some(&b'"') {
            // A bare key is taken as sent, byte for byte.
            prop_assert_eq!(k.as_bytes(), &raw[..]);
        } else {
            let spelt = quoted(&k);
            prop_assert_eq!(spelt.as_bytes(), &raw[..], "one spelling per string");
        }
        Ok(())
    });
}

/// Any path-like text: segments of the characters that normalisation reads, any slashes.
fn any_path() -> impl Strategy<Value = String> {
    "(/|//)?([a-zA-Z0-9._~;=%-]{0,6}/{0,2}){0,6}"
}

#[test]
fn normalising_is_idempotent_and_leaves_one_spelling() {
    check(1024, any_path(), |path| {
        let normal = normalise(&path);
        prop_assert_eq!(normalise(&normal), normal.clone(), "{}", path);
        prop_assert!(normal.starts_with('/'), "{normal}");
        prop_assert!(!normal.contains("//") && !normal.contains(';'), "{normal}");
        prop_assert!(normal == "/" || !normal.ends_with('/'), "{normal}");
        for segment in normal.split('/').skip(1) {
            prop_assert!(segment != "." && segment != "..", "{normal}");
        }
        Ok(())
    });
}

/// One route (literal segments and `*`) and a canonical path it matches.
fn route_and_path() -> impl Strategy<Value = (String, String)> {
    let segment = prop_oneof![
        3 => "[a-z0-9][a-zA-Z0-9_-]{0,5}".prop_map(|s| (s.clone(), s)),
        1 => "[a-zA-Z0-9][a-zA-Z0-9_-]{0,5}".prop_map(|s| ("*".to_owned(), s)),
    ];
    vec(segment, 1..5).prop_map(|segments| {
        let route = segments.iter().map(|(r, _)| format!("/{r}")).collect();
        let path = segments.iter().map(|(_, p)| format!("/{p}")).collect();
        (route, path)
    })
}

/// Another spelling of `path` that an upstream router may take for the same resource: one of
/// the usual normalisations undone at segment `at`, with `byte` choosing the character to spell
/// differently. `route_segments` says which segments are literals (only their case is the
/// route's; a `*` segment in another case is another resource).
fn respell(path: &str, literal: &[bool], mutation: u8, at: usize, byte: usize) -> String {
    let mut segments: Vec<String> = path.split('/').skip(1).map(str::to_owned).collect();
    let at = at % segments.len();
    match mutation % 7 {
        0 => segments[at].insert(0, '/'), // an empty segment: `//`
        1 => segments.insert(at, ".".to_owned()),
        2 => segments.insert(at, "x/..".to_owned()),
        3 => {
            let s = &mut segments[at];
            let i = byte % s.len();
            let c = s.as_bytes()[i];
            s.replace_range(i..=i, &format!("%{c:02x}"));
        }
        4 => segments[at].push_str(";p=1"),
        5 => return format!("{path}/"),
        _ => {
            let Some(at) = (0..literal.len())
                .map(|i| (at + i) % literal.len())
                .find(|&i| literal[i] && segments[i].bytes().any(|b| b.is_ascii_alphabetic()))
            else {
                return format!("{path}/");
            };
            let s = &mut segments[at];
            let i = s.find(|c: char| c.is_ascii_alphabetic()).expect("a letter");
            let flipped = match s.as_bytes()[i] {
                c if c.is_ascii_lowercase() => c.to_ascii_uppercase(),
                c => c.to_ascii_lowercase(),
            };
            s.replace_range(i..=i, &(flipped as char).to_string());
        }
    }
    segments.iter().map(|s| format!("/{s}")).collect()
}

#[test]
fn no_spelling_of_a_routed_path_passes_through_or_is_keyed() {
    let cases = (
        route_and_path(),
        any::<u8>(),
        any::<usize>(),
        any::<usize>(),
    );
    check(1024, cases, |((route, path), mutation, at, byte)| {
        let routes = Routes::new(&["POST".to_owned()], std::slice::from_ref(&route));
        prop_assert_eq!(
            routes.route(&Method::POST, &path),
            Routing::Keyed,
            "{} {}",
            route,
            path
        );
        let literal: Vec<bool> = route.split('/').skip(1).map(|s| s != "*").collect();
        let other = respell(&path, &literal, mutation, at, byte);
        prop_assert_ne!(&other, &path);
        prop_assert_eq!(
            routes.route(&Method::POST, &other),
            Routing::NonCanonical,
            "{} as {}",
            route,
            other
        );
        prop_assert_eq!(routes.route(&Method::GET, &other), Routing::Unrouted);
        // With no routes every path is keyed: other spellings, bar a trailing slash, are not.
        let every = Routes::new(&["POST".to_owned()], &[]);
        let expected = if other == format!("{path}/") || other.to_lowercase() == path.to_lowercase()
        {
            Routing::Keyed
        } else {
            Routing::NonCanonical
        };
        prop_assert_eq!(every.route(&Method::POST, &other), expected, "{}", other);
        Ok(())
    });
}

#[test]
fn routing_survives_any_path() {
    let routes = Routes::new(
        &["POST".to_owned()],
        &["/v1/orders".to_owned(), "/v1/*/refunds/".to_owned()],
    );
    check(1024, any_path(), |path| {
        let _ = routes.route(&Method::POST, &path);
        Ok(())
    });
}

/// Upstream headers: ordinary ones, hop-by-hop ones (fixed and named by `Connection`) and `Date`.
fn upstream_headers() -> impl Strategy<Value = Vec<(String, Vec<u8>)>> {
    let name = prop_oneof![
        "x-[a-z]{1,8}",
        Just("content-type".to_owned()),
        Just("location".to_owned()),
        Just("connection".to_owned()),
        Just("transfer-encoding".to_owned()),
        Just("keep-alive".to_owned()),
        Just("te".to_owned()),
        Just("trailer".to_owned()),
        Just("upgrade".to_owned()),
        Just("proxy-authenticate".to_owned()),
        Just("date".to_owned()),
    ];
    let value = vec(prop_oneof![0x20u8..=0x7e, 0x80u8..=0xff], 0..40);
    vec((name, value), 0..12)
}

#[test]
fn a_stored_answer_decodes_to_itself_and_replays_with_its_own_framing() {
    let cases = (
        100u16..=599,
        upstream_headers(),
        vec(any::<u8>(), 0..2048),
        any::<bool>(),
        any::<bool>(),
    );
    check(512, cases, |(status, raw, body, truncated, with_length)| {
        let mut headers = HeaderMap::new();
        for (name, value) in &raw {
            let name = HeaderName::from_bytes(name.as_bytes()).expect("a token");
            let value =
                HeaderValue::from_bytes(value).map_err(|e| TestCaseError::fail(e.to_string()))?;
            headers.append(name, value);
        }
        if with_length {
            headers.insert(header::CONTENT_LENGTH, HeaderValue::from(body.len()));
        }
        let status =
            StatusCode::from_u16(status).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let stored = StoredResponse::new(status, &headers, Bytes::from(body.clone()), truncated);
        let hop = HopByHop::of(&headers);
        for (name, _) in &stored.headers {
            prop_assert!(*name != header::DATE && !hop.contains(name), "{name}");
        }
        let text = stored.encode();
        prop_assert!(text.is_ascii() && !text.contains(' '));
        prop_assert_eq!(StoredResponse::decode(&text), Some(stored.clone()));

        let replay = stored.replay();
        let sent_body = if truncated { &[][..] } else { &body[..] };
        for length in replay.headers().get_all(header::CONTENT_LENGTH) {
            prop_assert_eq!(length.to_str().ok(), Some(&*sent_body.len().to_string()));
        }
        prop_assert!(replay.headers().get(header::TRANSFER_ENCODING).is_none());
        prop_assert_eq!(replay.status(), status);
        Ok(())
    });
}

#[test]
fn decoding_survives_any_text() {
    let text = prop_oneof![
        any::<String>(),
        "r1\\.[A-Za-z0-9+/]{0,64}",
        vec(any::<u8>(), 0..64).prop_map(|b| {
            use base64::Engine;
            format!(
                "r1.{}",
                base64::engine::general_purpose::STANDARD_NO_PAD.encode(b)
            )
        }),
    ];
    check(1024, text, |text| {
        if let Some(decoded) = StoredResponse::decode(&text) {
            // Whatever decodes encodes back to a text that decodes to the same answer.
            prop_assert_eq!(StoredResponse::decode(&decoded.encode()), Some(decoded));
        }
        Ok(())
    });
}
