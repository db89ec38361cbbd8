//! The `Idempotency-Key` header: a bare token (as Stripe's clients send it) or a Structured
//! Field String (as the IETF draft writes it), both naming the same key.
//!
//! Bare: 1–255 visible ASCII characters (0x21–0x7E). String: `"…"` whose content, once `\"` and
//! `\\` are unescaped, is 1–255 printable ASCII characters (0x20–0x7E). Anything else — empty,
//! control or non-ASCII bytes, a broken string, the header sent twice — is invalid, so that two
//! spellings a client might think different never silently name one key.

use axum::http::{HeaderMap, HeaderName};

/// The request header carrying the key; forwarded upstream verbatim. A `HeaderName` rather than
/// text, which the header map would parse again at every lookup.
pub const HEADER: HeaderName = HeaderName::from_static("idempotency-key");

/// Longest key, in characters of content.
pub const MAX_LEN: usize = 255;

/// Why a request's key could not be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyError {
    Missing,
    Invalid,
}

/// The request's key, in its canonical form (a string's content, or the bare token).
pub fn from_headers(headers: &HeaderMap) -> Result<String, KeyError> {
    let mut values = headers.get_all(HEADER).iter();
    let Some(value) = values.next() else {
        return Err(KeyError::Missing);
    };
    if values.next().is_some() {
        return Err(KeyError::Invalid);
    }
    parse(value.as_bytes()).ok_or(KeyError::Invalid)
}

/// Parses one header value; `None` when it is neither a valid bare key nor a valid string.
pub fn parse(raw: &[u8]) -> Option<String> {
    let key = match raw.strip_prefix(b"\"") {
        Some(quoted) => unquote(quoted)?,
        None if raw.iter().all(|b| (0x21..=0x7e).contains(b)) => {
            String::from_utf8(raw.to_vec()).ok()?
        }
        None => return None,
    };
    (1..=MAX_LEN).contains(&key.len()).then_some(key)
}

/// The content of an sf-string whose opening quote is already consumed; the closing quote must
/// end the value (no parameters).
fn unquote(rest: &[u8]) -> Option<String> {
    let mut content = Vec::with_capacity(rest.len());
    let mut bytes = rest.iter();
    while let Some(&byte) = bytes.next() {
        match byte {
            b'\\' => match bytes.next() {
                Some(&escaped @ (b'"' | b'\\')) => content.push(escaped),
                _ => return None,
            },
            b'"' => {
                return bytes
                    .next()
                    .is_none()
                    .then(|| String::from_utf8(content).ok())?
            }
            0x20..=0x7e => content.push(byte),
            _ => return None,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn bare_and_quoted_name_one_key() {
        assert_eq!(parse(b"k1").as_deref(), Some("k1"));
        assert_eq!(parse(b"\"k1\"").as_deref(), Some("k1"));
        assert_eq!(parse(br#""a \"b\" \\c""#).as_deref(), Some(r#"a "b" \c"#));
        assert_eq!(parse(b"\"with space\"").as_deref(), Some("with space"));
        let uuid = b"8e03978e-40d5-43e8-bc93-6894a57f9324";
        assert_eq!(parse(uuid).unwrap().as_bytes(), uuid);
    }

    #[test]
    fn lengths_are_bounded() {
        assert!(parse(&[b'a'; 255]).is_some());
        assert!(parse(&[b'a'; 256]).is_none());
        let mut quoted = vec![b'"'];
        quoted.extend([b'a'; 255]);
        quoted.push(b'"');
        assert!(parse(&quoted).is_some());
        quoted.insert(1, b'a');
        assert!(parse(&quoted).is_none());
    }

    #[test]
    fn ill_formed_values_are_invalid() {
        for raw in [
            &b""[..],
            b"\"\"",
            b"a b",
            b"a\tb",
            b"\"open",
            b"\"k1\";a=1",
            b"\"k1\"x",
            b"\"bad \\n escape\"",
            b"\"tab\there\"",
            "ü".as_bytes(),
            b"\x7f",
        ] {
            assert_eq!(parse(raw), None, "{:?}", String::from_utf8_lossy(raw));
        }
    }

    #[test]
    fn the_header_is_read_once() {
        let mut headers = HeaderMap::new();
        assert_eq!(from_headers(&headers), Err(KeyError::Missing));
        headers.insert(HEADER, HeaderValue::from_static("k1"));
        assert_eq!(from_headers(&headers).as_deref(), Ok("k1"));
        headers.append(HEADER, HeaderValue::from_static("k2"));
        assert_eq!(from_headers(&headers), Err(KeyError::Invalid));
        headers.insert(HEADER, HeaderValue::from_static(""));
        assert_eq!(from_headers(&headers), Err(KeyError::Invalid));
    }
}
