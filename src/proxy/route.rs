//! Which requests get idempotency: a method in `methods` and a path matching one of `routes`.
//!
//! Paths are compared segment by segment, exactly as sent: `*` is one non-empty segment, and
//! there is no trailing-slash, case or percent-decoding normalisation, so that the proxy and the
//! upstream cannot disagree about which resource a path names. No routes means every path.

use axum::http::Method;

/// The compiled `methods` and `routes` of one proxy.
#[derive(Debug, Clone)]
pub struct Routes {
    methods: Vec<Method>,
    patterns: Vec<Vec<Segment>>,
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
        if !self.methods.contains(method) {
            return false;
        }
        if self.patterns.is_empty() {
            return true;
        }
        self.patterns.iter().any(|pattern| {
            let mut parts = segments(path);
            pattern.iter().all(|segment| match (segment, parts.next()) {
                (Segment::Any, Some(part)) => !part.is_empty(),
                (Segment::Literal(literal), Some(part)) => literal == part,
                (_, None) => false,
            }) && parts.next().is_none()
        })
    }
}

/// The segments after the leading slash: `/a/b/` is `a`, `b`, `` (the empty last one).
fn segments(path: &str) -> std::str::Split<'_, char> {
    path.strip_prefix('/').unwrap_or(path).split('/')
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
        assert!(!all.matches(&Method::GET, "/anything"));
        assert!(!all.matches(&Method::PUT, "/anything"));
    }

    #[test]
    fn segments_match_exactly() {
        let r = routes(&["/v1/orders", "/v1/orders/*/refunds"]);
        assert!(r.matches(&Method::POST, "/v1/orders"));
        assert!(r.matches(&Method::POST, "/v1/orders/42/refunds"));
        for path in [
            "/v1/orders/",
            "/V1/orders",
            "/v1/orders/42",
            "/v1/orders//refunds",
            "/v1/orders/42/refunds/",
            "/v1/orders/42/43/refunds",
            "/v1/order%73",
            "/v1",
            "/",
        ] {
            assert!(!r.matches(&Method::POST, path), "{path}");
        }
        assert!(!r.matches(&Method::GET, "/v1/orders"));
    }

    #[test]
    fn root_and_trailing_slash_patterns() {
        let r = routes(&["/", "/a/"]);
        assert!(r.matches(&Method::POST, "/"));
        assert!(r.matches(&Method::POST, "/a/"));
        assert!(!r.matches(&Method::POST, "/a"));
    }
}
