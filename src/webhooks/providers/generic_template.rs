//! The generic provider's `signed_content` template: literal text and `{body}`, `{timestamp}`,
//! `{id}` placeholders, parsed once at configuration and filled in for every request.

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
    Ok(parts)
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
