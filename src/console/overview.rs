//! The overview's data: per source the last hour minute by minute and the last 24 hours by
//! outcome (cluster-wide counts, `counts.rs`), per relay route its backlog, oldest pending entry
//! and dead letters, and the store's health. A bounded number of store calls: one pipeline for
//! the counts, a few per route and stream.

use std::collections::BTreeMap;

use serde::Serialize;

use super::counts::{now_minute, Minutes};
use super::state::Console;
use crate::store::StoreError;

/// Outcomes that are neither forwarded nor duplicate count as rejected.
const ACCEPTED: [&str; 2] = ["forwarded", "duplicate"];

#[derive(Debug, Clone, Serialize)]
pub struct Overview {
    pub sources: Vec<SourceOverview>,
    pub routes: Vec<RouteOverview>,
    pub store: StoreHealth,
}

#[derive(Debug, Clone, Serialize)]
pub struct SourceOverview {
    pub source: String,
    pub last_hour: Totals,
    pub last_day: Totals,
    /// The last 60 minutes, oldest first.
    pub per_minute: Vec<MinuteCounts>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Totals {
    pub forwarded: u64,
    pub duplicates: u64,
    /// Duplicates over forwarded plus duplicates, 0 to 1.
    pub duplicate_rate: f64,
    pub rejected: u64,
    /// Rejected events by outcome.
    pub rejected_by_outcome: BTreeMap<String, u64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct MinuteCounts {
    /// Minutes since the epoch.
    pub minute: u64,
    pub forwarded: u64,
    pub duplicates: u64,
    pub rejected: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct RouteOverview {
    pub route: String,
    /// Entries the route's group has not acknowledged: unread plus pending.
    pub backlog: u64,
    pub pending: u64,
    pub oldest_pending_age_ms: Option<u64>,
    pub dead_letters: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct StoreHealth {
    pub backend: String,
    pub topology: String,
    pub healthy: bool,
}

pub async fn overview(console: &Console) -> Result<Overview, StoreError> {
    let minutes = console.counts.minutes(24).await?;
    let now = now_minute();
    let sources = console
        .targets
        .keys()
        .map(|source| SourceOverview {
            source: source.clone(),
            last_hour: totals(&minutes, source, now.saturating_sub(59)),
            last_day: totals(&minutes, source, now.saturating_sub(24 * 60 - 1)),
            per_minute: per_minute(&minutes, source, now),
        })
        .collect();
    let mut routes = Vec::new();
    let now_ms = super::audit::now_ms();
    if let Some(store) = &console.store {
        for route in &console.routes {
            let mut row = RouteOverview {
                route: route.name.clone(),
                backlog: 0,
                pending: 0,
                oldest_pending_age_ms: None,
                dead_letters: 0,
            };
            for source in &route.per_source {
                for stream in source.streams.iter().chain([&source.replays]) {
                    row.backlog += store
                        .group_backlog(stream, &route.group)
                        .await?
                        .unwrap_or(0);
                    let (pending, oldest) = store.pending_summary(stream, &route.group).await?;
                    row.pending += pending;
                    let age = oldest
                        .and_then(|id| id.split('-').next().and_then(|ms| ms.parse::<u64>().ok()))
                        .map(|ms| now_ms.saturating_sub(ms));
                    row.oldest_pending_age_ms = row.oldest_pending_age_ms.max(age);
                }
                row.dead_letters += store.stream_length(&source.dead_letters).await?;
            }
            routes.push(row);
        }
    }
    let store = StoreHealth {
        backend: format!("{:?}", console.settings.store.backend).to_lowercase(),
        topology: format!("{:?}", console.settings.store.topology).to_lowercase(),
        healthy: match &console.store {
            Some(store) => store.ping().await,
            None => true,
        },
    };
    Ok(Overview {
        sources,
        routes,
        store,
    })
}

fn totals(minutes: &Minutes, source: &str, since: u64) -> Totals {
    let mut out = Totals::default();
    for ((s, outcome), n) in minutes.total_since(since) {
        if s != source {
            continue;
        }
        match outcome.as_str() {
            "forwarded" => out.forwarded += n,
            "duplicate" => out.duplicates += n,
            _ => {
                out.rejected += n;
                *out.rejected_by_outcome.entry(outcome).or_default() += n;
            }
        }
    }
    let accepted = out.forwarded + out.duplicates;
    if accepted > 0 {
        out.duplicate_rate = out.duplicates as f64 / accepted as f64;
    }
    out
}

fn per_minute(minutes: &Minutes, source: &str, now: u64) -> Vec<MinuteCounts> {
    (now.saturating_sub(59)..=now)
        .map(|minute| {
            let mut row = MinuteCounts {
                minute,
                forwarded: 0,
                duplicates: 0,
                rejected: 0,
            };
            if let Some(tally) = minutes.0.get(&minute) {
                for ((s, outcome), n) in tally {
                    if s != source {
                        continue;
                    }
                    match outcome.as_str() {
                        "forwarded" => row.forwarded += n,
                        "duplicate" => row.duplicates += n,
                        o if !ACCEPTED.contains(&o) => row.rejected += n,
                        _ => {}
                    }
                }
            }
            row
        })
        .collect()
}
