//! One route, built from `[relay.routes.NAME]`: which events it takes (sources, type globs),
//! where it sends them and how, and the keys of each source it reads.

use std::time::Duration;

use arc_swap::ArcSwap;

use super::backoff::Backoff;
use super::credentials::Credentials;
use super::stream_keys;
use crate::config::{ConfigError, RouteSettings, RouteStart, Settings};
use crate::forward::Target;
use crate::http_client;

/// What a route knows of one source it reads.
pub struct RouteSource {
    pub name: String,
    /// The source's keys: the dedup record key of an event is its `Idempotency-Key`.
    pub target: Target,
    /// The source's streams ([`stream_keys::of_source`]).
    pub streams: Vec<String>,
    pub dead_letters: String,
    pub replays: String,
}

/// A route ready to deliver.
pub struct Route {
    pub name: String,
    pub group: String,
    pub sources: Vec<String>,
    pub per_source: Vec<RouteSource>,
    globs: Vec<Vec<char>>,
    /// Where attempts go, parsed once here; without the URL's user and password, which go as
    /// `basic_auth`.
    pub url: http::Uri,
    /// `Authorization: Basic` from the URL's user and password, if it names any (sent unless the
    /// route's own headers hold an `Authorization`).
    pub basic_auth: Option<http::HeaderValue>,
    /// Its headers and signer: replaced in place by a reload, loaded once per attempt.
    pub credentials: ArcSwap<Credentials>,
    pub concurrency: usize,
    pub timeout: Duration,
    pub max_attempts: u32,
    pub backoff: Backoff,
    pub start: RouteStart,
    pub dead_letter_statuses: Vec<u16>,
}

impl Route {
    /// Builds the route `name`; `settings` gives the sources' keys.
    pub fn build(
        name: &str,
        route: &RouteSettings,
        settings: &Settings,
    ) -> Result<Self, ConfigError> {
        let credentials = Credentials::build(name, route)?;
        // Validation took it as a URL already; the message never holds it (it may carry
        // credentials).
        let (url, basic_auth) = http_client::target(&route.url)
            .map_err(|problem| ConfigError::invalid(format!("relay.routes.{name}.url"), problem))?;
        let mut per_source = Vec::new();
        for source in &route.sources {
            let target = Target::of_source(settings, source)?;
            let streams = target.streams();
            let prefix = &settings.store.key_prefix;
            per_source.push(RouteSource {
                name: source.clone(),
                target,
                streams,
                dead_letters: stream_keys::dead_letters(prefix, source, name),
                replays: stream_keys::replays(prefix, source, name),
            });
        }
        Ok(Self {
            name: name.to_owned(),
            group: stream_keys::group(name),
            sources: route.sources.clone(),
            per_source,
            globs: route
                .event_types
                .iter()
                .map(|g| g.chars().collect())
                .collect(),
            url,
            basic_auth,
            credentials: ArcSwap::from_pointee(credentials),
            concurrency: route.concurrency,
            timeout: route.timeout.0,
            max_attempts: route.max_attempts,
            backoff: Backoff {
                base: route.backoff.0,
                max: route.max_backoff.0,
            },
            start: route.start,
            dead_letter_statuses: route.dead_letter_statuses.clone(),
        })
    }

    /// Whether this route takes events of `event_type` (every type when no glob is set).
    pub fn matches(&self, event_type: &str) -> bool {
        if self.globs.is_empty() {
            return true;
        }
        let text: Vec<char> = event_type.chars().collect();
        self.globs.iter().any(|glob| glob_matches(glob, &text))
    }

    /// The source `name` as this route reads it.
    pub fn source(&self, name: &str) -> Option<&RouteSource> {
        self.per_source.iter().find(|s| s.name == name)
    }
}

/// `*` matches any run of characters (dots included), `?` exactly one; the rest literally.
/// Iterative with one backtrack point, so a hostile pattern cannot take exponential time.
pub fn glob_matches(glob: &[char], text: &[char]) -> bool {
    let (mut g, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        match glob.get(g) {
            Some('*') => {
                star = Some((g, t));
                g += 1;
            }
            Some('?') => {
                g += 1;
                t += 1;
            }
            Some(c) if *c == text[t] => {
                g += 1;
                t += 1;
            }
            _ => match star {
                // Let the last `*` swallow one more character and try again from there.
                Some((sg, st)) => {
                    g = sg + 1;
                    t = st + 1;
                    star = Some((sg, st + 1));
                }
                None => return false,
            },
        }
    }
    glob[g..].iter().all(|c| *c == '*')
}

#[cfg(test)]
mod tests {
    use super::glob_matches;

    fn m(glob: &str, text: &str) -> bool {
        let glob: Vec<char> = glob.chars().collect();
        let text: Vec<char> = text.chars().collect();
        glob_matches(&glob, &text)
    }

    #[test]
    fn globs() {
        assert!(m("invoice.*", "invoice.paid"));
        assert!(m("invoice.*", "invoice.payment.failed"));
        assert!(m("invoice.*", "invoice."));
        assert!(!m("invoice.*", "invoice"));
        assert!(!m("invoice.*", "xinvoice.paid"));
        assert!(m("*", ""));
        assert!(m("*", "anything.at.all"));
        assert!(m("payment_intent.succeeded", "payment_intent.succeeded"));
        assert!(!m("payment_intent.succeeded", "payment_intent.succeeded2"));
        assert!(m("charge.?", "charge.x"));
        assert!(!m("charge.?", "charge.xy"));
        assert!(!m("charge.?", "charge."));
        assert!(m("*.created", "customer.subscription.created"));
        assert!(m("a*b*c", "aXbYbZc"));
        assert!(!m("a*b*c", "aXbYbZ"));
        assert!(m("é?", "éü"));
        assert!(!m("", "x"));
        assert!(m("", ""));
    }

    #[test]
    fn hostile_globs_are_linear() {
        let text = "a".repeat(10_000);
        assert!(!m(&format!("{}b", "*a".repeat(50)), &text));
    }
}
