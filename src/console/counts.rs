//! Per-minute event counts by source and outcome, for the overview's charts: cluster-wide.
//!
//! Every few seconds each daemon reads its own `hookonce_events_total` counters, takes what
//! changed since the last look, and adds it into Redis in one pipeline (one hash per hour, a
//! field per minute, source and outcome): one small write per daemon per interval, never one per
//! request, and the webhook path is untouched. The overview sums what every daemon added. On the
//! memory store the counts stay in this process.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::metrics::{Metrics, EVENTS_TOTAL};
use crate::store::{RedisStore, StoreError};

/// How often each daemon adds its counts.
pub const INTERVAL: Duration = Duration::from_secs(5);
/// Hours of counts kept (the overview shows 24; one more covers the hour under way).
const HOURS: u64 = 25;

/// (source, outcome) → events.
pub type Tally = BTreeMap<(String, String), u64>;

/// Counts by minute (minutes since the epoch), as far back as they are kept.
#[derive(Debug, Default, Clone)]
pub struct Minutes(pub BTreeMap<u64, Tally>);

impl Minutes {
    fn add(&mut self, minute: u64, source: String, outcome: String, amount: u64) {
        *self
            .0
            .entry(minute)
            .or_default()
            .entry((source, outcome))
            .or_default() += amount;
    }

    /// The total per (source, outcome) from `since` (a minute) on.
    pub fn total_since(&self, since: u64) -> Tally {
        let mut out = Tally::new();
        for tally in self.0.range(since..).map(|(_, t)| t) {
            for (key, n) in tally {
                *out.entry(key.clone()).or_default() += n;
            }
        }
        out
    }
}

/// The counts of this process, and where they are added cluster-wide.
pub struct Counts {
    metrics: Arc<Metrics>,
    store: Option<RedisStore>,
    key_prefix: String,
    last: Mutex<HashMap<(String, String), u64>>,
    local: Mutex<Minutes>,
}

impl Counts {
    pub fn new(metrics: Arc<Metrics>, store: Option<RedisStore>, key_prefix: &str) -> Self {
        Self {
            metrics,
            store,
            key_prefix: key_prefix.to_owned(),
            last: Mutex::new(HashMap::new()),
            local: Mutex::new(Minutes::default()),
        }
    }

    fn hour_key(&self, hour: u64) -> String {
        format!("{}:{{console}}:counts:{hour}", self.key_prefix)
    }

    /// Takes what the counters gained since the last call and adds it: into Redis when that is
    /// the store, else into this process's minutes.
    pub async fn flush(&self) -> Result<(), StoreError> {
        let minute = now_minute();
        let gained = self.gained();
        if gained.is_empty() {
            return Ok(());
        }
        match &self.store {
            Some(store) => {
                let fields: Vec<(String, u64)> = gained
                    .iter()
                    .map(|((source, outcome), n)| (format!("{minute}|{source}|{outcome}"), *n))
                    .collect();
                let result = store
                    .add_counts(&self.hour_key(minute / 60), &fields, HOURS * 3600)
                    .await;
                if result.is_err() {
                    // Not lost: counted again at the next flush.
                    self.forget(&gained);
                }
                result
            }
            None => {
                let mut local = self.local.lock().unwrap_or_else(|e| e.into_inner());
                for ((source, outcome), n) in gained {
                    local.add(minute, source, outcome, n);
                }
                let oldest = minute.saturating_sub(HOURS * 60);
                local.0 = local.0.split_off(&oldest);
                Ok(())
            }
        }
    }

    /// Every minute's counts of the last `hours`, summed over every daemon.
    pub async fn minutes(&self, hours: u64) -> Result<Minutes, StoreError> {
        let now = now_minute();
        let Some(store) = &self.store else {
            let local = self.local.lock().unwrap_or_else(|e| e.into_inner());
            return Ok(local.clone());
        };
        let first_hour = (now / 60).saturating_sub(hours);
        let keys: Vec<String> = (first_hour..=now / 60).map(|h| self.hour_key(h)).collect();
        let mut out = Minutes::default();
        for hash in store.read_counts(&keys).await? {
            for (field, n) in hash {
                let mut parts = field.splitn(3, '|');
                let (Some(minute), Some(source), Some(outcome)) =
                    (parts.next(), parts.next(), parts.next())
                else {
                    continue;
                };
                if let Ok(minute) = minute.parse() {
                    out.add(minute, source.to_owned(), outcome.to_owned(), n);
                }
            }
        }
        Ok(out)
    }

    /// What each (source, outcome) counter gained since the last call.
    fn gained(&self) -> Vec<((String, String), u64)> {
        let now = events_totals(&self.metrics.render());
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = Vec::new();
        for (key, value) in now {
            let before = last.insert(key.clone(), value).unwrap_or(0);
            if value > before {
                out.push((key, value - before));
            }
        }
        out
    }

    /// Undoes [`Counts::gained`] for amounts that could not be written.
    fn forget(&self, gained: &[((String, String), u64)]) {
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        for (key, n) in gained {
            if let Some(value) = last.get_mut(key) {
                *value = value.saturating_sub(*n);
            }
        }
    }
}

/// Minutes since the epoch.
pub fn now_minute() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() / 60)
        .unwrap_or(0)
}

/// `hookonce_events_total` by (source, outcome), read from the Prometheus text format.
fn events_totals(text: &str) -> Vec<((String, String), u64)> {
    let prefix = format!("{EVENTS_TOTAL}{{");
    text.lines()
        .filter_map(|line| line.strip_prefix(&prefix))
        .filter_map(|rest| {
            let (labels, value) = rest.rsplit_once("} ")?;
            let value = value.trim().parse::<f64>().ok()?;
            let label = |name: &str| {
                labels.split(',').find_map(|pair| {
                    let (k, v) = pair.split_once('=')?;
                    (k == name).then(|| v.trim_matches('"').to_owned())
                })
            };
            Some(((label("source")?, label("outcome")?), value as u64))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_read_from_the_exposition() {
        let text = "# HELP x\nhookonce_events_total{source=\"demo\",outcome=\"forwarded\"} 3\n\
                    hookonce_events_total{source=\"demo\",outcome=\"duplicate\"} 1\n\
                    hookonce_events_totalx{source=\"a\",outcome=\"b\"} 9\n";
        let totals = events_totals(text);
        assert_eq!(
            totals,
            vec![
                (("demo".into(), "forwarded".into()), 3),
                (("demo".into(), "duplicate".into()), 1)
            ]
        );
    }
}
