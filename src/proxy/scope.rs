//! What one key is unique within, and what it must be used with.
//!
//! - The **scope** is the principal: the values of the `scope_headers` (e.g. `Authorization`),
//!   hashed at once and never stored or logged. A missing header is the anonymous principal.
//! - The **record key** is `<prefix>:{p:<proxy>}:k:<base64url(SHA-256(scope, method, path, key))>`:
//!   the same length (43 characters of digest) whatever the client sends, one hash slot per proxy,
//!   and no principal in clear. Every field is length-prefixed, so no two inputs share a digest
//!   by shifting bytes from one field into the next.
//! - The **fingerprint** is SHA-256 over method, path, query (as sent) and body: the same key
//!   with another fingerprint is a reused key (422).

use axum::http::{HeaderMap, HeaderName, Method};
use base64::Engine;
use sha2::{Digest, Sha256};

/// The hashed principal of one request.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Scope([u8; 32]);

impl std::fmt::Debug for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Even hashed, a principal has no business in logs.
        f.write_str("Scope([hashed])")
    }
}

impl Scope {
    /// The principal named by the `names` headers of `headers`, in the configured order.
    pub fn of(headers: &HeaderMap, names: &[HeaderName]) -> Self {
        let mut hash = Sha256::new();
        for name in names {
            let values: Vec<&[u8]> = headers.get_all(name).iter().map(|v| v.as_bytes()).collect();
            field(&mut hash, name.as_str().as_bytes());
            hash.update((values.len() as u64).to_be_bytes());
            for value in values {
                field(&mut hash, value);
            }
        }
        Self(hash.finalize().into())
    }
}

fn field(hash: &mut Sha256, bytes: &[u8]) {
    hash.update((bytes.len() as u64).to_be_bytes());
    hash.update(bytes);
}

fn base64url(digest: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(digest)
}

/// The unpadded base64url length of a 32-byte digest.
const DIGEST_CHARS: usize = 43;

/// The store key of one idempotency key of one principal on one route.
pub fn record_key(
    prefix: &str,
    proxy: &str,
    scope: &Scope,
    method: &Method,
    path: &str,
    key: &str,
) -> String {
    let mut hash = Sha256::new();
    hash.update(scope.0);
    field(&mut hash, method.as_str().as_bytes());
    field(&mut hash, path.as_bytes());
    field(&mut hash, key.as_bytes());
    // Made in one allocation of its final size (a `format!` grew its string three times).
    let (open, close) = (":{p:", "}:k:");
    let mut record =
        String::with_capacity(prefix.len() + open.len() + proxy.len() + close.len() + DIGEST_CHARS);
    record.push_str(prefix);
    record.push_str(open);
    record.push_str(proxy);
    record.push_str(close);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode_string(hash.finalize(), &mut record);
    record
}

/// The payload fingerprint stored with a claim: 128 bits of SHA-256, base64url.
///
/// Unlike a webhook's, the request is not signed, so the fingerprint keeps enough bits that
/// no client can make two payloads collide on purpose.
pub fn fingerprint(method: &Method, path: &str, query: Option<&str>, body: &[u8]) -> String {
    let mut hash = Sha256::new();
    field(&mut hash, method.as_str().as_bytes());
    field(&mut hash, path.as_bytes());
    match query {
        Some(query) => {
            hash.update([1]);
            field(&mut hash, query.as_bytes());
        }
        None => hash.update([0]),
    }
    field(&mut hash, body);
    base64url(&hash.finalize()[..16])
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn auth() -> Vec<HeaderName> {
        vec![HeaderName::from_static("authorization")]
    }

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, HeaderValue::from_static(value));
        }
        map
    }

    #[test]
    fn principals_are_separate_scopes() {
        let alice = Scope::of(&headers(&[("authorization", "Bearer alice")]), &auth());
        let bob = Scope::of(&headers(&[("authorization", "Bearer bob")]), &auth());
        let anonymous = Scope::of(&HeaderMap::new(), &auth());
        let empty = Scope::of(&headers(&[("authorization", "")]), &auth());
        assert_ne!(alice, bob);
        assert_ne!(alice, anonymous);
        assert_ne!(anonymous, empty);
        assert_eq!(anonymous, Scope::of(&headers(&[("x-other", "1")]), &auth()));
        assert_eq!(format!("{alice:?}"), "Scope([hashed])");
    }

    #[test]
    fn record_keys_are_bounded_and_carry_no_principal() {
        let scope = Scope::of(&headers(&[("authorization", "Bearer secret")]), &auth());
        let long_key = "k".repeat(255);
        let long_path = format!("/{}", "p".repeat(8000));
        let short = record_key("hookonce", "orders", &scope, &Method::POST, "/v1", "k1");
        let long = record_key(
            "hookonce",
            "orders",
            &scope,
            &Method::POST,
            &long_path,
            &long_key,
        );
        assert!(short.starts_with("hookonce:{p:orders}:k:"));
        // Made in one allocation of its final size.
        assert_eq!(short.capacity(), short.len());
        assert_eq!(short.len(), long.len());
        assert_eq!(short.len(), "hookonce:{p:orders}:k:".len() + 43);
        assert!(!short.contains("secret"));
    }

    #[test]
    fn each_field_changes_the_record_key() {
        let scope = Scope::of(&HeaderMap::new(), &auth());
        let base = record_key("h", "p", &scope, &Method::POST, "/a", "k");
        assert_ne!(
            base,
            record_key("h", "p", &scope, &Method::PATCH, "/a", "k")
        );
        assert_ne!(base, record_key("h", "p", &scope, &Method::POST, "/b", "k"));
        assert_ne!(
            base,
            record_key("h", "p", &scope, &Method::POST, "/a", "k2")
        );
        assert_ne!(base, record_key("h", "q", &scope, &Method::POST, "/a", "k"));
        // Length prefixes: bytes cannot move from the path into the key.
        assert_ne!(
            record_key("h", "p", &scope, &Method::POST, "/ab", "c"),
            record_key("h", "p", &scope, &Method::POST, "/a", "bc")
        );
    }

    #[test]
    fn fingerprints_cover_method_path_query_and_body() {
        let fp = |m: &Method, p, q, b: &[u8]| fingerprint(m, p, q, b);
        let base = fp(&Method::POST, "/a", Some("x=1"), b"{}");
        assert_eq!(base.len(), 22);
        assert_eq!(base, fp(&Method::POST, "/a", Some("x=1"), b"{}"));
        assert_ne!(base, fp(&Method::POST, "/a", Some("x=2"), b"{}"));
        assert_ne!(base, fp(&Method::POST, "/a", None, b"{}"));
        assert_ne!(
            fp(&Method::POST, "/a", None, b""),
            fp(&Method::POST, "/a", Some(""), b"")
        );
        assert_ne!(base, fp(&Method::POST, "/a", Some("x=1"), b"{ }"));
        assert_ne!(base, fp(&Method::PATCH, "/a", Some("x=1"), b"{}"));
    }
}
