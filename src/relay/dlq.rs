//! The operator's hands on dead letters (`hookonce dlq list|replay|drop`) and on one event
//! (`hookonce redeliver`). Replays and redeliveries go to the route's replay stream, which only
//! that route's group reads, so no other route sees the event again; the relay delivers them
//! with attempts starting at 1 and the same `Idempotency-Key`.

use serde::Serialize;

use super::route::{Route, RouteSource};
use crate::config::{ConfigError, Settings};
use crate::store::{Record, RedisStore, RelayScripts, StoreError, StreamEntry};

/// Entries read or changed per store call.
const PAGE: usize = 200;

#[derive(Debug, thiserror::Error)]
pub enum DlqError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("route {route} reads several sources ({sources}); say which with --source")]
    WhichSource { route: String, sources: String },
    #[error("no dedup record for event {event_id} of source {source_name}: it was never forwarded, or its record expired")]
    NoRecord {
        source_name: String,
        event_id: String,
    },
    #[error("the record of event {event_id} is not a forwarded stream entry ({record})")]
    NotForwarded { event_id: String, record: String },
    #[error(
        "stream entry {entry_id} of event {event_id} is no longer in {stream}: it was trimmed"
    )]
    Trimmed {
        event_id: String,
        entry_id: String,
        stream: String,
    },
}

/// One dead letter, as `dlq list` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct DeadLetter {
    pub source: String,
    pub id: String,
    pub event_id: String,
    pub event_type: String,
    pub attempts: String,
    pub last_status: String,
    pub last_error: String,
    pub entry_id: String,
    /// Unix ms.
    pub dead_lettered_at: String,
}

impl DeadLetter {
    fn of(source: &str, entry: &StreamEntry) -> Self {
        Self {
            source: source.to_owned(),
            id: entry.id.clone(),
            event_id: entry.text("event_id"),
            event_type: entry.text("event_type"),
            attempts: entry.text("attempts"),
            last_status: entry.text("last_status"),
            last_error: entry.text("last_error"),
            entry_id: entry.text("entry_id"),
            dead_lettered_at: entry.text("dead_lettered_at"),
        }
    }
}

/// Which dead letters `replay` and `drop` act on.
pub enum Selection {
    Ids(Vec<String>),
    All,
}

fn route(settings: &Settings, name: &str) -> Result<Route, ConfigError> {
    let route = settings.relay.routes.get(name).ok_or_else(|| {
        ConfigError::invalid(
            format!("relay.routes.{name}"),
            "no route of this name is configured",
        )
    })?;
    Route::build(name, route, settings)
}

/// The sources of `route` that `source` selects (all of them when `None`).
fn sources<'a>(
    route: &'a Route,
    source: Option<&str>,
) -> Result<Vec<&'a RouteSource>, ConfigError> {
    match source {
        None => Ok(route.per_source.iter().collect()),
        Some(name) => route.source(name).map(|s| vec![s]).ok_or_else(|| {
            ConfigError::invalid(
                format!("relay.routes.{}.sources", route.name),
                format!("{name:?} is not one of the route's sources"),
            )
        }),
    }
}

/// Every dead letter of the selected routes and sources, oldest first per stream.
pub async fn list(
    settings: &Settings,
    store: &RedisStore,
    route_name: Option<&str>,
    source: Option<&str>,
) -> Result<Vec<(String, DeadLetter)>, DlqError> {
    let mut out = Vec::new();
    for name in settings
        .relay
        .routes
        .keys()
        .filter(|n| route_name.is_none_or(|r| r == *n))
    {
        let route = route(settings, name)?;
        if route_name.is_none() && source.is_some_and(|s| route.source(s).is_none()) {
            continue;
        }
        for source in sources(&route, source)? {
            for entry in all_entries(store, &source.dead_letters).await? {
                out.push((name.clone(), DeadLetter::of(&source.name, &entry)));
            }
        }
    }
    Ok(out)
}

/// The newest `count` dead letters of each source of `route_name`, newest first: a bounded
/// read for the console, where `list` reads them all.
pub async fn newest(
    settings: &Settings,
    store: &RedisStore,
    route_name: &str,
    count: usize,
) -> Result<Vec<DeadLetter>, DlqError> {
    let route = route(settings, route_name)?;
    let mut out = Vec::new();
    for source in &route.per_source {
        for entry in store
            .rev_range(&source.dead_letters, "+", "-", count)
            .await?
        {
            out.push(DeadLetter::of(&source.name, &entry));
        }
    }
    out.sort_by(|a, b| b.dead_lettered_at.cmp(&a.dead_lettered_at));
    Ok(out)
}

async fn all_entries(store: &RedisStore, stream: &str) -> Result<Vec<StreamEntry>, StoreError> {
    let mut out = Vec::new();
    let mut start = "-".to_owned();
    loop {
        let page = store.range(stream, &start, "+", PAGE).await?;
        let Some(last) = page.last() else { break };
        start = format!("({}", last.id);
        let full = page.len() == PAGE;
        out.extend(page);
        if !full {
            break;
        }
    }
    Ok(out)
}

/// The single source an ID selection applies to.
fn one_source<'a>(route: &'a Route, source: Option<&str>) -> Result<&'a RouteSource, DlqError> {
    let mut selected = sources(route, source)?;
    if selected.len() != 1 {
        return Err(DlqError::WhichSource {
            route: route.name.clone(),
            sources: route.sources.join(", "),
        });
    }
    Ok(selected.remove(0))
}

/// Per selected source, the dead-letter IDs to act on.
async fn selected(
    store: &RedisStore,
    route: &Route,
    source: Option<&str>,
    selection: Selection,
) -> Result<Vec<(DlqKeys, Vec<String>)>, DlqError> {
    Ok(match selection {
        Selection::Ids(ids) => vec![(DlqKeys::of(one_source(route, source)?), ids)],
        Selection::All => {
            let mut out = Vec::new();
            for s in sources(route, source)? {
                let ids = all_entries(store, &s.dead_letters)
                    .await?
                    .into_iter()
                    .map(|e| e.id)
                    .collect();
                out.push((DlqKeys::of(s), ids));
            }
            out
        }
    })
}

/// The two keys of one source that `replay` and `drop` touch.
struct DlqKeys {
    dead_letters: String,
    replays: String,
}

impl DlqKeys {
    fn of(source: &RouteSource) -> Self {
        Self {
            dead_letters: source.dead_letters.clone(),
            replays: source.replays.clone(),
        }
    }
}

/// Hands dead letters back to `route_name` only and removes them; the number handed back.
pub async fn replay(
    settings: &Settings,
    store: &RedisStore,
    route_name: &str,
    source: Option<&str>,
    selection: Selection,
) -> Result<usize, DlqError> {
    let route = route(settings, route_name)?;
    let scripts = RelayScripts::new();
    let mut count = 0;
    for (keys, ids) in selected(store, &route, source, selection).await? {
        for chunk in ids.chunks(PAGE) {
            count += scripts
                .copy(store, &keys.dead_letters, &keys.replays, chunk, true)
                .await?
                .len();
        }
    }
    Ok(count)
}

/// Deletes dead letters; the number deleted.
pub async fn drop(
    settings: &Settings,
    store: &RedisStore,
    route_name: &str,
    source: Option<&str>,
    selection: Selection,
) -> Result<u64, DlqError> {
    let route = route(settings, route_name)?;
    let mut count = 0;
    for (keys, ids) in selected(store, &route, source, selection).await? {
        for chunk in ids.chunks(PAGE) {
            count += store.delete_entries(&keys.dead_letters, chunk).await?;
        }
    }
    Ok(count)
}

/// Delivers event `event_id` of `source` to `route_name` again, read from its stream entry
/// (found through its dedup record); the stream entry's ID.
pub async fn redeliver(
    settings: &Settings,
    store: &RedisStore,
    source: &str,
    event_id: &str,
    route_name: &str,
) -> Result<String, DlqError> {
    let route = route(settings, route_name)?;
    let keys = one_source(&route, Some(source))?;
    let record_key = keys.target.record_key(event_id);
    let Some((record, _ttl)) = store.get_record(&record_key).await? else {
        return Err(DlqError::NoRecord {
            source_name: source.to_owned(),
            event_id: event_id.to_owned(),
        });
    };
    let Some(Record::Done { ack: entry_id, .. }) = Record::parse(&record) else {
        return Err(DlqError::NotForwarded {
            event_id: event_id.to_owned(),
            record,
        });
    };
    // The event's own partition holds its entry (every partition for a partitioned source
    // with `body_dedup`): an entry of the same ID in another partition is another event's.
    let partitions = keys.target.partitions_for_id(event_id);
    for stream in partitions.iter().map(|p| &p.stream) {
        let copied = RelayScripts::new()
            .copy(store, stream, &keys.replays, &[entry_id.to_owned()], false)
            .await?;
        if !copied.is_empty() {
            return Ok(entry_id.to_owned());
        }
    }
    Err(DlqError::Trimmed {
        event_id: event_id.to_owned(),
        entry_id: entry_id.to_owned(),
        stream: keys.streams.join(", "),
    })
}
