//! The one redaction of credential-bearing URLs, for everything that prints or logs a URL.
//!
//! A URL is parsed with the `url` crate, as redis-rs, async-nats and the daemon's HTTP client
//! (`http_client::target`) parse it, so that what is hidden is at least what those clients would
//! send as a credential:
//! - the whole userinfo (`user:password@`, and NATS's `token@`) becomes `[redacted]@`;
//! - a query is shown up to its first parameter whose (decoded) name looks like a credential
//!   (`pass`, `user`, `token`, `secret`, `key`, `auth`, `sig`, …): that value and everything after
//!   it become `[redacted]`. This covers redis-rs's `unix:///path?user=…&pass=…`, and a secret
//!   with an unescaped `&` or `=` that would otherwise spill into parameters of its own;
//! - a fragment is shown only when it is `insecure` (redis-rs's one fragment): any other may be
//!   the tail of a secret with an unescaped `#`.
//!
//! Text that does not parse as a URL is not shown at all beyond its scheme: without a parse
//! nothing says where a password in it would start or end. Neither is a URL with an `@` after its
//! host: that is most likely a userinfo whose password held an unescaped `/` or `?`, which moved
//! part of it into the host and the rest past it.

use url::{Position, Url};

/// What replaces every redacted part.
pub const REDACTED: &str = "[redacted]";

/// Words that mark a query parameter as a credential when its name contains one of them,
/// compared case-insensitively (so `api_key`, `X-Auth-Token`, `access_token` are all caught).
const CREDENTIAL_WORDS: &[&str] = &[
    "pass", "pwd", "token", "secret", "key", "auth", "sig", "cred", "session", "cookie", "jwt",
    "nkey", "seed", "bearer", "user",
];

/// `text` with every credential-bearing part replaced by `[redacted]`.
pub fn redact_url(text: &str) -> String {
    let Ok(url) = Url::parse(text) else {
        return hidden(text, "not a valid URL");
    };
    if url[Position::AfterPort..].contains('@') {
        return hidden(
            text,
            "an '@' after the host: is a '/', '?' or '#' in its password unescaped?",
        );
    }
    let mut out = String::with_capacity(text.len());
    out.push_str(&url[..Position::BeforeUsername]);
    if !url.username().is_empty() || url.password().is_some() {
        out.push_str(REDACTED);
        out.push('@');
    }
    out.push_str(&url[Position::BeforeHost..Position::AfterPath]);
    if let Some(query) = url.query() {
        out.push('?');
        push_query(&mut out, query);
    }
    match url.fragment() {
        Some("insecure") => out.push_str("#insecure"),
        Some(_) => {
            out.push('#');
            out.push_str(REDACTED);
        }
        None => {}
    }
    out
}

/// True when a parameter named `name` (already decoded) may carry a credential.
pub fn is_credential_name(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    CREDENTIAL_WORDS.iter().any(|word| name.contains(word))
}

/// `a=1&pass=x&b=2` → `a=1&pass=[redacted]&[redacted]`. The query is split on `&` as
/// `url::Url::query_pairs` does, and each name is judged after percent- and `+`-decoding it, as
/// the clients that read it do.
fn push_query(out: &mut String, query: &str) {
    for (i, piece) in query.split('&').enumerate() {
        if i > 0 {
            out.push('&');
        }
        let raw_name = piece.split_once('=').map_or(piece, |(name, _)| name);
        let name: String = url::form_urlencoded::parse(raw_name.as_bytes())
            .map(|(name, _)| name.into_owned())
            .collect();
        if is_credential_name(&name) {
            out.push_str(raw_name);
            out.push('=');
            out.push_str(REDACTED);
            if i + 1 < query.split('&').count() {
                out.push('&');
                out.push_str(REDACTED);
            }
            return;
        }
        out.push_str(piece);
    }
}

/// What is shown of a value whose credentials cannot be told apart: its scheme, when it has a
/// plausible one, and why the rest is hidden.
fn hidden(text: &str, why: &str) -> String {
    let scheme = text
        .split_once("://")
        .map(|(scheme, _)| scheme)
        .filter(|s| {
            !s.is_empty()
                && s.len() <= 16
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'))
        });
    match scheme {
        Some(scheme) => format!("{scheme}://{REDACTED} ({why})"),
        None => format!("{REDACTED} ({why})"),
    }
}

#[cfg(test)]
#[path = "redact_tests.rs"]
mod tests;
