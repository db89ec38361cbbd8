//! The edits that turn a signed request into a mutant, for the `verify` property tests.
//!
//! Each edit is one an attacker (or a careless proxy) could make to a captured request. Indices
//! are arbitrary numbers taken modulo the length of what they index, so that every generated edit
//! applies to every request and shrinks towards the first byte or header.

use proptest::prelude::*;

/// One edit of a request. Indices are taken modulo the length of what they index.
#[derive(Debug, Clone)]
pub(super) enum Mutation {
    FlipBodyByte(usize, u8),
    InsertBodyByte(usize, u8),
    DropBodyByte(usize),
    TruncateBody(usize),
    PadBody(bool, &'static str),
    FlipHeaderByte(usize, usize, u8),
    TruncateHeader(usize, usize),
    PadHeader(usize, bool, &'static str),
    SpaceAroundSeparators(usize),
    UppercaseName(usize),
    Duplicate { header: usize, first: bool },
    Remove(usize),
    RotateParams(usize, usize),
    ExtraParam(usize, &'static str),
    ExtraHeader(&'static str, String),
}

pub(super) fn mutation() -> impl Strategy<Value = Mutation> {
    let ws = prop::sample::select(vec![" ", "\t", "\n", "\r\n", "  "]);
    let param = prop::sample::select(vec![
        "v0=00",
        "x=y",
        "v1=",
        "t=1",
        "ts=1",
        "h1=zz",
        "v1,AAAA",
        "v2,bm90IGEgc2ln",
        "=",
        "",
    ]);
    let header = prop::sample::select(vec![
        "x-github-delivery",
        "webhook-id",
        "svix-signature",
        "x-shopify-event-id",
        "shopify-hmac-sha256",
        "linear-delivery",
        "x-slack-request-timestamp",
        "idempotency-key",
        "x-other",
    ]);
    prop_oneof![
        (any::<usize>(), 1..=255u8).prop_map(|(a, x)| Mutation::FlipBodyByte(a, x)),
        (any::<usize>(), any::<u8>()).prop_map(|(a, b)| Mutation::InsertBodyByte(a, b)),
        any::<usize>().prop_map(Mutation::DropBodyByte),
        any::<usize>().prop_map(Mutation::TruncateBody),
        (any::<bool>(), ws.clone()).prop_map(|(f, w)| Mutation::PadBody(f, w)),
        (any::<usize>(), any::<usize>(), 1..=255u8)
            .prop_map(|(h, a, x)| Mutation::FlipHeaderByte(h, a, x)),
        (any::<usize>(), any::<usize>()).prop_map(|(h, k)| Mutation::TruncateHeader(h, k)),
        (any::<usize>(), any::<bool>(), ws).prop_map(|(h, f, w)| Mutation::PadHeader(h, f, w)),
        any::<usize>().prop_map(Mutation::SpaceAroundSeparators),
        any::<usize>().prop_map(Mutation::UppercaseName),
        (any::<usize>(), any::<bool>())
            .prop_map(|(header, first)| Mutation::Duplicate { header, first }),
        any::<usize>().prop_map(Mutation::Remove),
        (any::<usize>(), any::<usize>()).prop_map(|(h, by)| Mutation::RotateParams(h, by)),
        (any::<usize>(), param).prop_map(|(h, p)| Mutation::ExtraParam(h, p)),
        (header, "[ -~]{0,40}").prop_map(|(n, v)| Mutation::ExtraHeader(n, v)),
    ]
}

/// The separator of a `key=value` or `version,signature` list, guessed from the value.
fn separator(value: &[u8]) -> u8 {
    [b';', b',', b' ']
        .into_iter()
        .find(|sep| value.contains(sep))
        .unwrap_or(b',')
}

/// Applies `m` to a request. Headers are `(name, value)` pairs in order.
pub(super) fn apply(headers: &mut Vec<(String, Vec<u8>)>, body: &mut Vec<u8>, m: &Mutation) {
    if !apply_to_body(body, m) {
        apply_to_headers(headers, m);
    }
}

/// `i` as an index into something of `len` elements (0 when it is empty).
fn at(i: usize, len: usize) -> usize {
    i.checked_rem(len).unwrap_or(0)
}

/// Applies a body edit; false if `m` is not one.
fn apply_to_body(body: &mut Vec<u8>, m: &Mutation) -> bool {
    let len = body.len();
    match m {
        Mutation::FlipBodyByte(i, x) if len > 0 => body[at(*i, len)] ^= x,
        Mutation::InsertBodyByte(i, b) => body.insert(at(*i, len + 1), *b),
        Mutation::DropBodyByte(i) if len > 0 => drop(body.remove(at(*i, len))),
        Mutation::TruncateBody(k) => body.truncate(at(*k, len)),
        Mutation::PadBody(true, ws) => drop(body.splice(0..0, ws.bytes())),
        Mutation::PadBody(false, ws) => body.extend_from_slice(ws.as_bytes()),
        Mutation::FlipBodyByte(..) | Mutation::DropBodyByte(_) => {}
        _ => return false,
    }
    true
}

/// Applies a header edit (nothing when there is no header to edit).
fn apply_to_headers(headers: &mut Vec<(String, Vec<u8>)>, m: &Mutation) {
    if let Mutation::ExtraHeader(name, value) = m {
        headers.push((name.to_string(), value.clone().into()));
    }
    let n = headers.len();
    if n == 0 {
        return;
    }
    match m {
        Mutation::UppercaseName(h) => headers[h % n].0.make_ascii_uppercase(),
        Mutation::Duplicate { header, first } => {
            let copy = headers[header % n].clone();
            let to = if *first { 0 } else { n };
            headers.insert(to, copy);
        }
        Mutation::Remove(h) => drop(headers.remove(h % n)),
        Mutation::FlipHeaderByte(h, ..)
        | Mutation::TruncateHeader(h, _)
        | Mutation::PadHeader(h, ..)
        | Mutation::SpaceAroundSeparators(h)
        | Mutation::RotateParams(h, _)
        | Mutation::ExtraParam(h, _) => edit_value(&mut headers[h % n].1, m),
        _ => {}
    }
}

/// Applies an edit of one header's value.
fn edit_value(value: &mut Vec<u8>, m: &Mutation) {
    let sep = separator(value);
    let len = value.len();
    match m {
        Mutation::FlipHeaderByte(_, i, x) if len > 0 => value[at(*i, len)] ^= x,
        Mutation::TruncateHeader(_, k) => value.truncate(at(*k, len)),
        Mutation::PadHeader(_, true, ws) => drop(value.splice(0..0, ws.bytes())),
        Mutation::PadHeader(_, false, ws) => value.extend_from_slice(ws.as_bytes()),
        Mutation::SpaceAroundSeparators(_) => {
            let spaced = value.iter().flat_map(|&b| match b {
                b',' | b';' | b'=' => vec![b' ', b, b' '],
                other => vec![other],
            });
            *value = spaced.collect();
        }
        Mutation::RotateParams(_, by) => {
            let mut items: Vec<&[u8]> = value.split(|b| *b == sep).collect();
            let count = items.len();
            items.rotate_left(by % count);
            *value = items.join(&sep);
        }
        Mutation::ExtraParam(_, param) => {
            value.push(sep);
            value.extend_from_slice(param.as_bytes());
        }
        _ => {}
    }
}
