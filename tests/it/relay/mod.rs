//! The relay against real parts: a real redis-server, real HTTP workers of the harness
//! (`support::relay_worker`), the daemon in this process (`TestApp` with `relay.enabled`) and the
//! real binary (`hookonce relay` processes, killed with SIGKILL). Each topic is one file;
//! `cluster/` runs the key scenarios again on a real Redis Cluster with a partitioned source.
//! This one holds what they share: routes with test-sized delays, events, configuration files
//! for the binary, and reading the streams, groups and metrics (from a standalone Redis or a
//! cluster, [`ReadBack`]).

mod cluster;
mod dlq;
mod recovery;
mod retries;
mod routing;
mod takeover;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use hookonce::config::{RelaySettings, RouteSettings};

use crate::support::binary::write;
use crate::support::cluster::RedisCluster;
use crate::support::settings::{default_sources, ms, secs, sources_toml};
use crate::support::{eventually, now, RedisServer, TestApp};

/// Where a test reads back what the relay did: a standalone Redis or a cluster (whose client
/// follows `MOVED`, so every key is read from the master of its slot).
pub trait ReadBack {
    fn connect(&self) -> Box<dyn redis::ConnectionLike>;
}

impl ReadBack for RedisServer {
    fn connect(&self) -> Box<dyn redis::ConnectionLike> {
        Box::new(self.connection())
    }
}

impl ReadBack for RedisCluster {
    fn connect(&self) -> Box<dyn redis::ConnectionLike> {
        Box::new(self.client())
    }
}

/// The route's group on every stream it reads.
pub fn group(route: &str) -> String {
    format!("hookonce:{route}")
}

/// The stream of a default source.
pub fn stream(source: &str) -> String {
    format!("hookonce:{{{source}}}:events")
}

/// A route's dead-letter stream for one source.
pub fn dead_letters(source: &str, route: &str) -> String {
    format!("hookonce:{{{source}}}:dlq:{route}")
}

/// The dedup key of an event: the `Idempotency-Key` of its every delivery.
pub fn dedup_key(source: &str, event_id: &str) -> String {
    format!("hookonce:{{{source}}}:d:{event_id}")
}

/// A route of `sources` to `url` with test-sized delays: 20 ms backoff capped at 200 ms, a 2 s
/// timeout, 5 attempts.
pub fn route(sources: &[&str], url: &str) -> RouteSettings {
    RouteSettings {
        sources: sources.iter().map(|s| s.to_string()).collect(),
        url: url.to_owned(),
        backoff: ms(20),
        max_backoff: ms(200),
        timeout: secs(2),
        max_attempts: 5,
        ..RouteSettings::default()
    }
}

/// `route` limited to event types matching `globs`.
pub fn typed(route: RouteSettings, globs: &[&str]) -> RouteSettings {
    RouteSettings {
        event_types: globs.iter().map(|g| g.to_string()).collect(),
        ..route
    }
}

/// The relay settings of a test: these routes, takeover after 1 s.
pub fn relay(enabled: bool, routes: Vec<(&str, RouteSettings)>) -> RelaySettings {
    RelaySettings {
        enabled,
        claim_idle: secs(1),
        routes: routes
            .into_iter()
            .map(|(name, route)| (name.to_owned(), route))
            .collect(),
    }
}

/// A daemon in this process over a fresh Redis, running the relay with these routes.
pub async fn serve(routes: Vec<(&str, RouteSettings)>) -> TestApp {
    TestApp::builder(crate::support::Backend::Redis)
        .relay(|r| *r = relay(true, routes))
        .start()
        .await
}

/// A Stripe event body with this ID and type.
pub fn stripe_event(id: &str, event_type: &str) -> Vec<u8> {
    format!(
        r#"{{"id":"{id}","object":"event","type":"{event_type}","api_version":"2024-06-20","data":{{"object":{{"id":"pi_1","amount":4200}}}}}}"#
    )
    .into_bytes()
}

/// Sends one signed Stripe event and checks that it was accepted (forwarded or a duplicate).
pub async fn send(app: &TestApp, id: &str, event_type: &str) {
    let response = app
        .deliver("stripe", &stripe_event(id, event_type), &now())
        .await;
    assert_eq!(response.status(), 200, "{id} was not accepted");
}

/// `n` event IDs `prefix-0` … `prefix-(n-1)`.
pub fn ids(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i}")).collect()
}

/// Redis reply of `XINFO GROUPS stream`: per group, (pending, lag); lag is `None` when Redis
/// cannot tell (a group that never read, or after deletions).
pub fn groups(redis: &impl ReadBack, stream: &str) -> BTreeMap<String, (u64, Option<u64>)> {
    let reply: Vec<redis::Value> = redis::cmd("XINFO")
        .arg("GROUPS")
        .arg(stream)
        .query(&mut *redis.connect())
        .unwrap_or_default();
    let mut groups = BTreeMap::new();
    for group in reply {
        let fields: BTreeMap<String, redis::Value> = redis::from_redis_value(group).unwrap();
        let name: String = redis::from_redis_value(fields["name"].clone()).unwrap();
        let pending: u64 = redis::from_redis_value(fields["pending"].clone()).unwrap();
        let lag: Option<u64> = fields
            .get("lag")
            .and_then(|v| redis::from_redis_value(v.clone()).ok());
        groups.insert(name, (pending, lag));
    }
    groups
}

/// Waits until each route's group on `stream` exists, has nothing pending and nothing unread.
pub async fn settled(redis: &impl ReadBack, stream: &str, routes: &[&str], seconds: u64) {
    eventually(
        seconds,
        &format!("{routes:?} to settle on {stream}"),
        || {
            let groups = groups(redis, stream);
            let done = routes
                .iter()
                .all(|route| groups.get(&group(route)) == Some(&(0, Some(0))));
            async move { done }
        },
    )
    .await;
}

/// One stream entry: its ID and its fields.
pub type Entry = (String, BTreeMap<String, String>);

/// Every entry of a stream, fields as text.
pub fn xrange(redis: &impl ReadBack, stream: &str) -> Vec<Entry> {
    let reply: redis::streams::StreamRangeReply = redis::cmd("XRANGE")
        .arg(stream)
        .arg("-")
        .arg("+")
        .query(&mut *redis.connect())
        .unwrap();
    reply
        .ids
        .into_iter()
        .map(|entry| {
            let fields = entry
                .map
                .iter()
                .map(|(k, v)| {
                    let bytes: Vec<u8> = redis::from_redis_value(v.clone()).unwrap();
                    (k.clone(), String::from_utf8_lossy(&bytes).into_owned())
                })
                .collect();
            (entry.id, fields)
        })
        .collect()
}

pub fn xlen(redis: &impl ReadBack, stream: &str) -> u64 {
    redis::cmd("XLEN")
        .arg(stream)
        .query(&mut *redis.connect())
        .unwrap()
}

/// The sum of every series of `name` whose labels include `labels` (in any order), 0 if none.
pub fn metric(page: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    page.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let (series_name, rest) = match series.split_once('{') {
                Some((n, rest)) => (n, rest.trim_end_matches('}')),
                None => (series, ""),
            };
            if series_name != name {
                return None;
            }
            let all = labels
                .iter()
                .all(|(k, v)| rest.split(',').any(|pair| pair == format!("{k}=\"{v}\"")));
            all.then(|| value.parse::<f64>().ok()).flatten()
        })
        .sum()
}

/// Waits until a metric of the in-process daemon reaches at least `want`.
pub async fn metric_reaches(app: &TestApp, name: &str, labels: &[(&str, &str)], want: f64) {
    eventually(10, &format!("{name}{labels:?} to reach {want}"), || async {
        metric(&app.metrics().await, name, labels) >= want
    })
    .await;
}

pub const DELIVERIES: &str = "hookonce_relay_deliveries_total";
pub const ATTEMPT_SECONDS: &str = "hookonce_relay_attempt_duration_seconds_count";
pub const END_TO_END_SECONDS: &str = "hookonce_relay_end_to_end_seconds_count";
pub const LAG: &str = "hookonce_relay_lag";
pub const DEAD_LETTERS: &str = "hookonce_dead_letters";

/// A configuration file for the `hookonce` binary: the default sources, this Redis, and
/// `relay` written out as TOML (`extra` appended verbatim, e.g. route headers).
pub fn config_file(dir: &Path, redis_url: &str, relay: &RelaySettings, extra: &str) -> PathBuf {
    let store = format!("[store]\nbackend = \"redis\"\nredis_url = \"{redis_url}\"\n");
    config_file_with(dir, &store, &default_sources(), relay, extra)
}

/// [`config_file`] with its own `[store]` table and sources.
pub fn config_file_with(
    dir: &Path,
    store: &str,
    sources: &BTreeMap<String, hookonce::config::SourceSettings>,
    relay: &RelaySettings,
    extra: &str,
) -> PathBuf {
    let mut text = format!(
        "{store}\n[sink]\nkind = \"redis_stream\"\n\n{}\n",
        sources_toml(sources)
    );
    text.push_str(&format!(
        "[relay]\nenabled = {}\nclaim_idle = \"{}ms\"\n",
        relay.enabled,
        relay.claim_idle.0.as_millis()
    ));
    for (name, route) in &relay.routes {
        let list = |items: &[String]| {
            items
                .iter()
                .map(|s| format!("{s:?}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        text.push_str(&format!(
            "\n[relay.routes.{name}]\nsources = [{}]\nurl = {:?}\nconcurrency = {}\ntimeout = \"{}ms\"\nmax_attempts = {}\nbackoff = \"{}ms\"\nmax_backoff = \"{}ms\"\n",
            list(&route.sources),
            route.url,
            route.concurrency,
            route.timeout.0.as_millis(),
            route.max_attempts,
            route.backoff.0.as_millis(),
            route.max_backoff.0.as_millis(),
        ));
        if !route.event_types.is_empty() {
            text.push_str(&format!("event_types = [{}]\n", list(&route.event_types)));
        }
    }
    text.push_str(extra);
    write(dir, "relay.toml", &text)
}

/// `hookonce ARGS --config CONFIG`, checked to exit 0; its standard output.
pub fn cli_ok(config: &Path, args: &[&str]) -> String {
    let mut all = args.to_vec();
    all.extend(["--config", config.to_str().unwrap()]);
    let output = crate::support::binary::hookonce(&all, &[]);
    let text = crate::support::binary::output_text(&output);
    assert!(output.status.success(), "hookonce {args:?} failed:\n{text}");
    String::from_utf8(output.stdout).unwrap()
}
