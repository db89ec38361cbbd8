//! The workers' side of the relay, audited: `audit-relay` compares what the workers recorded
//! (one JSON object per delivery attempt, as the test and benchmark workers write them) with what
//! the streams and dead-letter streams hold, route by route.
//!
//! A worker's line: `{"route", "source", "event_id", "event_type", "idempotency_key", "attempt",
//! "status", "at_ms"}`; `route` is the route the delivery was made for (the harness's workers
//! take it from the first path segment of the route's URL). For every route of the configuration
//! and every stream entry of its sources whose event type its globs match:
//! - **delivered**: answered 2xx at least once; **dead-lettered**: in the route's dead letters;
//! - **lost**: neither (the at-least-once promise broken — or the relay has not finished);
//! - **duplicates**: answered 2xx more than once, each explained when possible: the stream holds
//!   the event more than once (`stream`); a later 2xx carries a higher attempt number than an
//!   earlier one, i.e. a relay died between the worker's 2xx and its XACK and another took the
//!   entry over (`takeover`); the attempt count went down (`restarted`: `redeliver`,
//!   `dlq replay`, or a group recreated at 0). Two 2xx with one attempt number are
//!   **unexplained**: two relays held one entry at once (or an operator redelivered an event
//!   that had succeeded at its first attempt: audit before redelivering).
//! - **unexpected**: a 2xx for an event the route does not match (or a stream never held);
//!   **wrong key**: an `Idempotency-Key` other than the event's dedup key.
//!
//! Deliveries whose entry is no longer in the stream (trimmed) but which match the route are
//! counted as `trimmed` and otherwise not judged.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

use anyhow::Context;
use hookonce::config::{Settings, StoreSettings};
use hookonce::relay::{stream_keys, Route};
use hookonce::store::RedisStore;
use hookonce::util::error_chain;
use serde::{Deserialize, Serialize};

/// One line of a worker's record.
#[derive(Debug, Clone, Deserialize)]
pub struct Attempt {
    pub route: String,
    pub source: String,
    pub event_id: String,
    #[serde(default)]
    pub event_type: String,
    #[serde(default)]
    pub idempotency_key: String,
    #[serde(default)]
    pub attempt: u32,
    pub status: u16,
}

#[derive(Debug, Default, Serialize)]
pub struct RouteFindings {
    pub expected: usize,
    pub delivered: usize,
    pub dead_lettered: usize,
    pub attempts: usize,
    pub failed_attempts: usize,
    pub lost: Vec<String>,
    pub duplicates: usize,
    pub explained: BTreeMap<String, usize>,
    pub unexplained: Vec<String>,
    pub unexpected: Vec<String>,
    pub wrong_key: Vec<String>,
    pub trimmed: usize,
}

impl RouteFindings {
    pub fn passed(&self) -> bool {
        self.lost.is_empty()
            && self.unexplained.is_empty()
            && self.unexpected.is_empty()
            && self.wrong_key.is_empty()
    }
}

#[derive(Debug, Default, Serialize)]
pub struct Findings {
    pub routes: BTreeMap<String, RouteFindings>,
}

impl Findings {
    pub fn passed(&self) -> bool {
        self.routes.values().all(RouteFindings::passed)
    }

    pub fn print(&self) {
        for (name, r) in &self.routes {
            let explained: Vec<String> = r
                .explained
                .iter()
                .map(|(why, n)| format!("{why} {n}"))
                .collect();
            println!(
                "route {name}: {} expected, {} delivered, {} dead-lettered ({} attempts, {} failed); lost {}; duplicates {} ({}); unexplained {}; unexpected {}; wrong keys {}; trimmed {}",
                r.expected,
                r.delivered,
                r.dead_lettered,
                r.attempts,
                r.failed_attempts,
                r.lost.len(),
                r.duplicates,
                if explained.is_empty() { "none".to_owned() } else { explained.join(", ") },
                r.unexplained.len(),
                r.unexpected.len(),
                r.wrong_key.len(),
                r.trimmed,
            );
            for (what, ids) in [
                ("lost", &r.lost),
                ("unexplained duplicate", &r.unexplained),
                ("unexpected", &r.unexpected),
                ("wrong key", &r.wrong_key),
            ] {
                for id in ids.iter().take(10) {
                    println!("  {what}: {id}");
                }
            }
        }
        println!("{}", if self.passed() { "PASS" } else { "FAIL" });
    }
}

/// Reads every record file.
pub fn read_attempts(paths: &[impl AsRef<Path>]) -> anyhow::Result<Vec<Attempt>> {
    let mut attempts = Vec::new();
    for path in paths {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        for (n, line) in text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
        {
            attempts.push(
                serde_json::from_str(line).with_context(|| {
                    format!("{}:{}: not a delivery line", path.display(), n + 1)
                })?,
            );
        }
    }
    Ok(attempts)
}

/// (event ID, event type) of every entry of `stream`, read through the daemon's own store client
/// (so a cluster or a Sentinel group is reached as the daemon reaches it).
async fn entries(store: &RedisStore, stream: &str) -> anyhow::Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    let mut start = "-".to_owned();
    loop {
        // Pages of 1000 keep one reply small even with 1.5 KB bodies in every entry.
        let page = store
            .range(stream, &start, "+", 1000)
            .await
            .map_err(|e| anyhow::anyhow!("XRANGE {stream}: {}", error_chain(&e)))?;
        let Some(last) = page.last() else { break };
        start = format!("({}", last.id);
        out.extend(
            page.iter()
                .map(|entry| (entry.text("event_id"), entry.text("event_type"))),
        );
    }
    Ok(out)
}

/// Audits every route of `settings` against the workers' `attempts`.
pub async fn audit(
    settings: &Settings,
    store: &StoreSettings,
    attempts: &[Attempt],
) -> anyhow::Result<Findings> {
    let store = RedisStore::connect(store)
        .await
        .map_err(|e| anyhow::anyhow!("cannot connect to Redis: {}", error_chain(&e)))?;
    let prefix = &settings.store.key_prefix;
    let mut findings = Findings::default();
    for (name, route_settings) in &settings.relay.routes {
        let route = Route::build(name, route_settings, settings)?;
        let mut in_stream: HashMap<(String, String), usize> = HashMap::new();
        let mut expected: BTreeSet<(String, String)> = BTreeSet::new();
        let mut dead: BTreeSet<(String, String)> = BTreeSet::new();
        // The dedup keys an event's deliveries may carry: its record's key in the partition whose
        // stream held it, or (replayed, redelivered) the key its ID alone names.
        let mut keys: HashMap<(String, String), BTreeSet<String>> = HashMap::new();
        for source in &route_settings.sources {
            let (_, target) = hookonce::webhooks::source(settings, source)?;
            for stream in stream_keys::of_source(settings, source)? {
                for (id, event_type) in entries(&store, &stream).await? {
                    let key = (source.clone(), id);
                    let known = keys.entry(key.clone()).or_default();
                    known.insert(target.record_key_in(&stream, &key.1));
                    known.insert(target.record_key(&key.1));
                    *in_stream.entry(key.clone()).or_default() += 1;
                    if route.matches(&event_type) {
                        expected.insert(key);
                    }
                }
            }
            let dlq = stream_keys::dead_letters(prefix, source, name);
            for (id, _) in entries(&store, &dlq).await? {
                dead.insert((source.clone(), id));
            }
        }
        let mut ok: BTreeMap<(String, String), Vec<u32>> = BTreeMap::new();
        let mut r = RouteFindings::default();
        for attempt in attempts.iter().filter(|a| &a.route == name) {
            r.attempts += 1;
            let key = (attempt.source.clone(), attempt.event_id.clone());
            let fallback = || -> Option<String> {
                let (_, target) = hookonce::webhooks::source(settings, &attempt.source).ok()?;
                Some(target.record_key(&attempt.event_id))
            };
            let right = match keys.get(&key) {
                Some(known) => known.contains(&attempt.idempotency_key),
                None => fallback().is_some_and(|k| k == attempt.idempotency_key),
            };
            if !right {
                r.wrong_key.push(format!(
                    "{} ({})",
                    attempt.event_id, attempt.idempotency_key
                ));
            }
            if !(200..300).contains(&attempt.status) {
                r.failed_attempts += 1;
                continue;
            }
            ok.entry(key).or_default().push(attempt.attempt);
        }
        r.expected = expected.len();
        for key in &expected {
            if ok.contains_key(key) {
                r.delivered += 1;
            } else if dead.contains(key) {
                r.dead_lettered += 1;
            } else {
                r.lost.push(format!("{}/{}", key.0, key.1));
            }
        }
        for (key, oks) in &ok {
            let label = format!("{}/{}", key.0, key.1);
            if !expected.contains(key) {
                let matched = attempts
                    .iter()
                    .find(|a| &a.route == name && a.source == key.0 && a.event_id == key.1)
                    .is_some_and(|a| route.matches(&a.event_type));
                if !in_stream.contains_key(key)
                    && matched
                    && route_settings.sources.contains(&key.0)
                {
                    r.trimmed += 1;
                } else {
                    r.unexpected.push(label.clone());
                }
            }
            if oks.len() < 2 {
                continue;
            }
            r.duplicates += oks.len() - 1;
            let copies = in_stream.get(key).copied().unwrap_or(0);
            for pair in oks.windows(2) {
                let why = if copies >= oks.len() {
                    "stream"
                } else if pair[1] > pair[0] {
                    "takeover"
                } else if pair[1] < pair[0] {
                    "restarted"
                } else {
                    r.unexplained
                        .push(format!("{label} (attempt {} twice)", pair[1]));
                    continue;
                };
                *r.explained.entry(why.to_owned()).or_default() += 1;
            }
        }
        r.unexplained.sort();
        r.unexpected.sort();
        findings.routes.insert(name.clone(), r);
    }
    Ok(findings)
}
