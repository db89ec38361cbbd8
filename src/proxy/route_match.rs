//! Which requests get idempotency: a method in `methods` and a path matching one of `routes`, in
//! the path's one canonical spelling.
//!
//! Paths are compared segment by segment, exactly as sent: `*` is one non-empty segment. Many
//! upstream frameworks route other spellings of a path to the same handler (`/v1/orders/`,
//! `/V1/orders`, `/v1/%6Frders`, `//v1/orders`, `/v1/./orders`, `/v1/orders;x`), so a request on a
//! keyed method whose path is such a spelling is neither keyed under it nor passed through unkeyed
//! (which would let a client skip `require_key`, or execute a keyed retry again under another
//! spelling): it is refused ([`Routing::NonCanonical`]). No routes means every path, and then every
//! spelling that normalisation would change is refused, except a trailing slash, which such an API
//! may use as its own spelling.

use axum::http::Method;

/// The compiled `methods` and `routes` of one proxy.
#[derive(Debug, Clone)]
pub struct Routes {
    methods: Vec<Method>,
    patterns: Vec<Vec<Segment>>,
}

/// What a request's method and path come to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Routing {
    /// A keyed method on a routed path, spelt canonically: gets idempotency.
    Keyed,
    /// Another method, or a path no spelling of which is routed: passed through.
    Unrouted,
    /// A keyed method on another spelling of a routed path: refused with 400.
    NonCanonical,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Literal(String),
    Any,
}

impl Routes {
    /// Compiles validated settings (`ProxySettings::validate` checked every pattern and method).
    pub fn new(methods: &[String], routes: &[String]) -> Self {
        let methods = methods
            .iter()
            .filter_map(|m| Method::from_bytes(m.as_bytes()).ok())
            .collect();
        let patterns = routes
            .iter()
            .map(|route| {
                segments(route)
                    .map(|s| match s {
                        "*" => Segment::Any,
                        literal => Segment::Literal(literal.to_owned()),
                    })
                    .collect()
            })
            .collect();
        Self { methods, patterns }
    }

    /// Whether a request with this method and path (no query) gets idempotency.
    pub fn matches(&self, method: &Method, path: &str) -> bool {
        self.route(method, path) == Routing::Keyed
    }

    /// What a request with this method and path (no query) comes to.
    pub fn route(&self, method: &Method, path: &str) -> Routing {
        if !self.methods.contains(method) {
            return Routing::Unrouted;
        }
        let normal = normalise(path);
        // A trailing slash is the route's business (or, with no routes, the API's): it is
        // compared with the pattern, not normalised away.
        let trimmed = match path.strip_suffix('/') {
            Some(rest) if !rest.is_empty() && !rest.ends_with('/') => rest,
            _ => path,
        };
        let canonical = normal == trimmed;
        if self.patterns.is_empty() {
            return if canonical {
                Routing::Keyed
            } else {
                Routing::NonCanonical
            };
        }
        if self.patterns.iter().any(|p| matches(p, path, str::eq)) {
            // Matched as sent, yet not canonical: a `*` that is `.`, `..` or carries an escape.
            return if canonical {
                Routing::Keyed
            } else {
                Routing::NonCanonical
            };
        }
        // Another spelling of a routed path: the normal form, trailing slash off, letter case
        // folded, against every pattern with its own trailing slash off too.
        let loose = |pattern: &Vec<Segment>| {
            let pattern = match pattern.split_last() {
                Some((Segment::Literal(last), rest)) if last.is_empty() && !rest.is_empty() => rest,
                _ => pattern.as_slice(),
            };
            matches(pattern, &normal, |a, b| a.eq_ignore_ascii_case(b))
        };
        if self.patterns.iter().any(loose) {
            Routing::NonCanonical
        } else {
            Routing::Unrouted
        }
    }
}

/// Whether `path` matches `pattern` segment by segment, literals compared with `same`.
fn matches(pattern: &[Segment], path: &str, same: impl Fn(&str, &str) -> bool) -> bool {
    let mut parts = segments(path);
    pattern.iter().all(|segment| match (segment, parts.next()) {
        (Segment::Any, Some(part)) => !part.is_empty(),
        (Segment::Literal(literal), Some(part)) => same(literal, part),
        (_, None) => false,
    }) && parts.next().is_none()
}

/// The segments after the leading slash: `/a/b/` is `a`, `b`, `` (the empty last one).
fn segments(path: &str) -> std::str::Split<'_, char> {
    path.strip_prefix('/').unwrap_or(path).split('/')
}

/// The one spelling of `path` that the usual URL normalisations agree on (RFC 3986 §6.2.2 and what
/// upstream routers do on top): empty and `.` segments dropped, `..` resolved, `;` parameters cut,
/// percent-encoded unreserved characters decoded and other escapes in upper case, no trailing
/// slash (except the root). Letter case is kept: only route matching folds it.
pub fn normalise(path: &str) -> String {
    let mut kept: Vec<String> = Vec::new();
    for segment in segments(path) {
        let segment = segment.split(';').next().unwrap_or_default();
        let segment = decode_unreserved(segment);
        match segment.as_str() {
            "" | "." => {}
            ".." => {
                kept.pop();
            }
            _ => kept.push(segment),
        }
    }
    let mut normal = String::with_capacity(path.len());
    for segment in &kept {
        normal.push('/');
        normal.push_str(segment);
    }
    if normal.is_empty() {
        normal.push('/');
    }
    normal
}

/// `%XX` escapes of unreserved characters (`A-Z a-z 0-9 - . _ ~`) decoded, every other escape's
/// hex digits in upper case, and a `%` that begins no escape written as one (`%25`), so that
/// decoding can never make a new escape (`%A%61` is not `%Aa`, which would decode again).
fn decode_unreserved(segment: &str) -> String {
    let bytes = segment.as_bytes();
    let mut out = String::with_capacity(segment.len());
    let mut i = 0;
    while i < bytes.len() {
        let escape = (bytes[i] == b'%')
            .then(|| bytes.get(i + 1..i + 3))
            .flatten()
            .and_then(|hex| std::str::from_utf8(hex).ok())
            .and_then(|hex| u8::from_str_radix(hex, 16).ok().map(|b| (b, hex)));
        match escape {
            Some((byte, _)) if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) => {
                out.push(byte as char);
                i += 3;
            }
            Some((_, hex)) => {
                out.push('%');
                out.push_str(&hex.to_ascii_uppercase());
                i += 3;
            }
            None if bytes[i] == b'%' => {
                out.push_str("%25");
                i += 1;
            }
            None => {
                // A path from hyper is ASCII; anything else is kept byte for byte.
                let next = segment[i..].chars().next().unwrap_or_default();
                out.push(next);
                i += next.len_utf8().max(1);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn routes(patterns: &[&str]) -> Routes {
        let patterns: Vec<String> = patterns.iter().map(|p| p.to_string()).collect();
        Routes::new(&["POST".to_owned(), "PATCH".to_owned()], &patterns)
    }

    #[test]
    fn no_routes_means_every_path_of_the_methods() {
        let all = routes(&[]);
        assert!(all.matches(&Method::POST, "/anything/at/all"));
        assert!(all.matches(&Method::PATCH, "/"));
        assert!(all.matches(&Method::POST, "/with/trailing/slash/"));
        assert!(!all.matches(&Method::GET, "/anything"));
        assert!(!all.matches(&Method::PUT, "/anything"));
        for path in ["//a", "/a/./b", "/a/../b", "/%61", "/a;x", "/a//", "/a/%2f"] {
            assert_eq!(
                all.route(&Method::POST, path),
                Routing::NonCanonical,
                "{path}"
            );
            assert_eq!(all.route(&Method::GET, path), Routing::Unrouted, "{path}");
        }
    }

    #[test]
    fn segments_match_exactly() {
        let r = routes(&["/v1/orders", "/v1/orders/*/refunds"]);
        assert!(r.matches(&Method::POST, "/v1/orders"));
        assert!(r.matches(&Method::POST, "/v1/orders/42/refunds"));
        for path in [
            "/v1/orders/42",
            "/v1/orders//refunds",
            "/v1/orders/42/43/refunds",
            "/v1",
            "/",
            "/v2/orders",
        ] {
            assert_eq!(r.route(&Method::POST, path), Routing::Unrouted, "{path}");
        }
        assert!(!r.matches(&Method::GET, "/v1/orders"));
    }

    #[test]
    fn other_spellings_of_a_route_are_refused() {
        let r = routes(&["/v1/orders", "/v1/orders/*/refunds"]);
        for path in [
            "/v1/orders/",
            "/V1/orders",
            "/v1/ORDERS",
            "/v1/%6Frders",
            "/v1/%6frders",
            "/v1/order%73",
            "//v1/orders",
            "/v1//orders",
            "/v1/./orders",
            "/v1/x/../orders",
            "/v1/orders;x",
            "/v1;a=b/orders",
            "/v1/orders/./refunds",
            "/v1/orders/42;x/refunds",
            "/v1/orders/%34%32/refunds",
            "/v1/orders/42/refunds/",
        ] {
            assert_eq!(
                r.route(&Method::POST, path),
                Routing::NonCanonical,
                "{path}"
            );
            // Methods that get no idempotency pass through whatever the spelling.
            assert_eq!(r.route(&Method::GET, path), Routing::Unrouted, "{path}");
        }
        // An escape that is not of an unreserved character names another resource.
        assert_eq!(r.route(&Method::POST, "/v1/orders%2F"), Routing::Unrouted);
    }

    #[test]
    fn root_and_trailing_slash_patterns() {
        let r = routes(&["/", "/a/"]);
        assert!(r.matches(&Method::POST, "/"));
        assert!(r.matches(&Method::POST, "/a/"));
        assert_eq!(r.route(&Method::POST, "/a"), Routing::NonCanonical);
        assert_eq!(r.route(&Method::POST, "//"), Routing::NonCanonical);
    }

    #[test]
    fn normal_forms() {
        for (sent, normal) in [
            ("/", "/"),
            ("", "/"),
            ("//", "/"),
            ("/a/b/", "/a/b"),
            ("/a/./b/../c", "/a/c"),
            ("/../a", "/a"),
            ("/a;p=1/b;q", "/a/b"),
            ("/%7euser/%2f", "/~user/%2F"),
            ("/100%", "/100%25"),
            ("/%zz", "/%25zz"),
            ("/%A%61", "/%25Aa"),
        ] {
            assert_eq!(normalise(sent), normal, "{sent}");
        }
    }
}
