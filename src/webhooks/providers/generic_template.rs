//! The generic provider's `signed_content` template: literal text and `{body}`, `{timestamp}`,
//! `{id}` placeholders, parsed once at configuration and filled in for every request.
//!
//! The signed bytes must split back into their parts in one way only, or a captured delivery
//! could be re-framed under the same signature: `{id}{timestamp}{body}` signs the same bytes for
//! ID `a`, timestamp `17…` and for ID `a1`, timestamp `7…`, so moving a character from one header
//! to the other makes a new event ID. Two rules make the split unique:
//! - at configuration, every two placeholders have literal text between them, and the text next
//!   to `{timestamp}` does not start (after it) or end (before it) with a digit;
//! - for each request, the value of a placeholder before `{body}` holds no earlier occurrence of
//!   the literal that follows it (and one after `{body}` no later occurrence of the literal before
//!   it), so each cut is at the first (or last) occurrence of its separator. [`unambiguous`]
//!   checks it. `{body}` appears once and takes what is left between the cuts.

/// Most pieces a `signed_content` template may have; real schemes use three or four.
pub(super) const MAX_PARTS: usize = 16;

/// One piece of a template.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Part {
    Literal(Vec<u8>),
    Body,
    Timestamp,
    Id,
}

/// Splits `{body}`, `{timestamp}`, `{id}` and literal text.
pub(super) fn parse_template(text: &str) -> Result<Vec<Part>, String> {
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
    check_separators(&parts)?;
    Ok(parts)
}

fn placeholder(part: &Part) -> Option<&'static str> {
    match part {
        Part::Literal(_) => None,
        Part::Body => Some("{body}"),
        Part::Timestamp => Some("{timestamp}"),
        Part::Id => Some("{id}"),
    }
}

/// The signed bytes of one request as parts, in a fixed array so that building them allocates
/// nothing; the second value is how many of the slots are used.
pub(super) fn message<'a>(
    template: &'a [Part],
    body: &'a [u8],
    timestamp: &'a [u8],
    id: &'a [u8],
) -> ([&'a [u8]; MAX_PARTS], usize) {
    let mut out: [&[u8]; MAX_PARTS] = [&[]; MAX_PARTS];
    for (slot, part) in out.iter_mut().zip(template) {
        *slot = match part {
            Part::Literal(text) => text,
            Part::Body => body,
            Part::Timestamp => timestamp,
            Part::Id => id,
        };
    }
    (out, template.len())
}

/// Placeholders need literal text between them, and a timestamp's digits must not run into the
/// text beside it.
fn check_separators(parts: &[Part]) -> Result<(), String> {
    for pair in parts.windows(2) {
        if let (Some(a), Some(b)) = (placeholder(&pair[0]), placeholder(&pair[1])) {
            return Err(format!(
                "has {a} right before {b}: with no literal text between them the signed bytes \
                 split in more than one way, so a captured delivery could be re-framed under a \
                 new ID; put a separator between them, e.g. \"{a}.{b}\""
            ));
        }
        let digit_next_to_timestamp = match pair {
            [Part::Timestamp, Part::Literal(text)] => text.first().is_some_and(u8::is_ascii_digit),
            [Part::Literal(text), Part::Timestamp] => text.last().is_some_and(u8::is_ascii_digit),
            _ => false,
        };
        if digit_next_to_timestamp {
            return Err(
                "has a digit right next to {timestamp}: the timestamp's digits would run into it"
                    .to_owned(),
            );
        }
    }
    Ok(())
}

/// Checks that the request's `timestamp` and `id` cut the signed bytes in one way only: each
/// value left of `{body}` contains no occurrence of the literal after it that starts inside the
/// value, and each value right of `{body}` none of the literal before it that ends inside it.
/// The error is the key of the offending value (`timestamp_header` or `id_header`).
pub(super) fn unambiguous(
    template: &[Part],
    timestamp: &[u8],
    id: &[u8],
) -> Result<(), &'static str> {
    let body = template.iter().position(|p| *p == Part::Body).unwrap_or(0);
    let ambiguous = template.iter().enumerate().find(|&(i, part)| {
        let value = match part {
            Part::Timestamp => timestamp,
            Part::Id => id,
            Part::Literal(_) | Part::Body => return false,
        };
        let literal = |at: usize| match template.get(at) {
            Some(Part::Literal(text)) => text.as_slice(),
            _ => &[],
        };
        if i < body {
            !cut_is_unique(value, literal(i + 1), true)
        } else {
            !cut_is_unique(value, literal(i - 1), false)
        }
    });
    match ambiguous {
        Some((_, Part::Timestamp)) => Err("timestamp_header"),
        Some(_) => Err("id_header"),
        None => Ok(()),
    }
}

/// True when `separator` first occurs in `value ++ separator` at its end (`forward`), or last
/// occurs in `separator ++ value` at its start (not `forward`, read from the end). Compares in
/// place, so that verifying allocates nothing.
fn cut_is_unique(value: &[u8], separator: &[u8], forward: bool) -> bool {
    let (n, m) = (value.len(), separator.len());
    // Byte k of the joined text, read from the front or from the back.
    let joined = |k: usize| match (forward, k < n) {
        (true, true) => value[k],
        (true, false) => separator[k - n],
        (false, true) => value[n - 1 - k],
        (false, false) => separator[m - 1 - (k - n)],
    };
    let wanted = |j: usize| {
        if forward {
            separator[j]
        } else {
            separator[m - 1 - j]
        }
    };
    (0..n).all(|start| !(0..m).all(|j| joined(start + j) == wanted(j)))
}
