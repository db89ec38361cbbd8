//! What the events pages show, read from Redis in a bounded number of calls: a page of a
//! source's stream newest first (`XREVRANGE` per partition, paged by entry ID), an event found
//! by its ID through its dedup record, and one event's detail — its entry, record, duplicate
//! arrivals and its state in each relay route that takes it.

use serde::Serialize;

use super::state::Console;
use crate::forward::Target;
use crate::relay::dlq;
use crate::store::{Record, RedisStore, StoreError, StreamEntry};

/// Entries per events page.
pub const PAGE: usize = 50;
/// Dead letters searched for an event's entry, per route and source, newest first.
const DEAD_LETTER_SCAN: usize = 500;

#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("no source {0:?} is configured")]
    UnknownSource(String),
    #[error("the console reads events from Redis Streams; this daemon has no Redis store")]
    NoStreams,
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Dlq(#[from] dlq::DlqError),
}

/// One row of the events list.
#[derive(Debug, Clone, Serialize)]
pub struct EventRow {
    pub entry_id: String,
    pub event_id: String,
    pub event_type: String,
    /// Unix ms.
    pub received_at: u64,
}

impl EventRow {
    fn of(entry: &StreamEntry) -> Self {
        Self {
            entry_id: entry.id.clone(),
            event_id: entry.text("event_id"),
            event_type: entry.text("event_type"),
            received_at: entry.text("received_at").parse().unwrap_or(0),
        }
    }
}

/// A page of a source's events, newest first, and the cursor of the next page.
#[derive(Debug, Clone, Serialize)]
pub struct EventsPage {
    pub source: String,
    pub events: Vec<EventRow>,
    /// Pass as `before` for the next (older) page; absent on the last.
    pub next_before: Option<String>,
}

fn parts<'a>(
    console: &'a Console,
    source: &str,
) -> Result<(&'a RedisStore, &'a Target), ReadError> {
    let target = console
        .targets
        .get(source)
        .ok_or_else(|| ReadError::UnknownSource(source.to_owned()))?;
    let store = console.store.as_ref().ok_or(ReadError::NoStreams)?;
    Ok((store, target))
}

/// Events older than `before` (newest when `None`), or the one event `id`.
pub async fn events(
    console: &Console,
    source: &str,
    id: Option<&str>,
    before: Option<&str>,
) -> Result<EventsPage, ReadError> {
    let (store, target) = parts(console, source)?;
    if let Some(id) = id.filter(|id| !id.is_empty()) {
        let events = find(store, target, id)
            .await?
            .map(|(_, entry)| vec![EventRow::of(&entry)])
            .unwrap_or_default();
        return Ok(EventsPage {
            source: source.to_owned(),
            events,
            next_before: None,
        });
    }
    // An entry ID is `<ms>-<seq>`; anything else would be an error from Redis, so it is refused
    // here as the newest page.
    let end = match before.filter(|b| is_entry_id(b)) {
        Some(before) => format!("({before}"),
        None => "+".to_owned(),
    };
    let mut rows = Vec::new();
    for stream in target.streams() {
        for entry in store.rev_range(&stream, &end, "-", PAGE + 1).await? {
            rows.push(EventRow::of(&entry));
        }
    }
    // Partitions interleave in time: the newest PAGE of all of them, by entry ID.
    rows.sort_by_key(|row| std::cmp::Reverse(entry_order(&row.entry_id)));
    let more = rows.len() > PAGE;
    rows.truncate(PAGE);
    let next_before = more
        .then(|| rows.last().map(|r| r.entry_id.clone()))
        .flatten();
    Ok(EventsPage {
        source: source.to_owned(),
        events: rows,
        next_before,
    })
}

fn is_entry_id(text: &str) -> bool {
    let mut parts = text.splitn(2, '-');
    let numeric =
        |p: Option<&str>| p.is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    numeric(parts.next()) && numeric(parts.next())
}

fn entry_order(id: &str) -> (u64, u64) {
    let (ms, seq) = id.split_once('-').unwrap_or((id, "0"));
    (ms.parse().unwrap_or(0), seq.parse().unwrap_or(0))
}

/// The stream and entry of event `id`, found through its dedup record.
async fn find(
    store: &RedisStore,
    target: &Target,
    id: &str,
) -> Result<Option<(String, StreamEntry)>, StoreError> {
    for partition in target.partitions_for_id(id) {
        let Some((record, _)) = store.get_record(&partition.record_key(id)).await? else {
            continue;
        };
        if let Some(Record::Done { ack, .. }) = Record::parse(&record) {
            if let Some(entry) = store.entry(&partition.stream, ack).await? {
                return Ok(Some((partition.stream.clone(), entry)));
            }
        }
    }
    Ok(None)
}

/// One event as the detail page shows it.
#[derive(Debug, Clone, Serialize)]
pub struct EventDetail {
    pub source: String,
    pub event_id: String,
    pub event_type: String,
    pub provider: String,
    pub content_type: String,
    /// Unix ms.
    pub received_at: u64,
    pub stream: String,
    pub entry_id: String,
    /// The body as text (invalid UTF-8 replaced).
    pub body: String,
    /// Pretty-printed when the body is JSON.
    pub body_pretty: Option<String>,
    pub record: RecordState,
    pub duplicates: Duplicates,
    pub relay: Vec<RouteState>,
}

#[derive(Debug, Clone, Serialize)]
pub struct RecordState {
    /// `done`, `processing`, `unreadable`, or `expired` when the dedup window has passed.
    pub state: String,
    pub fingerprint: String,
    /// Ms left in the dedup window.
    pub window_left_ms: Option<u64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Duplicates {
    pub count: u64,
    /// Unix ms of the last duplicate's arrival.
    pub last_at: Option<u64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct RouteState {
    pub route: String,
    /// `delivered`, `pending`, `dead_lettered`, or `not_read` (the route has not reached it).
    pub state: String,
    pub attempts: Option<u64>,
    /// Ms since the last attempt began, while pending.
    pub idle_ms: Option<u64>,
    pub last_error: Option<String>,
    /// The dead letter's ID, for replay.
    pub dead_letter_id: Option<String>,
}

/// Event `event_id` of `source`; `None` when its record or entry is gone.
pub async fn event(
    console: &Console,
    source: &str,
    event_id: &str,
) -> Result<Option<EventDetail>, ReadError> {
    let (store, target) = parts(console, source)?;
    let Some((stream, entry)) = find(store, target, event_id).await? else {
        return Ok(None);
    };
    let record_key = target.record_key_in(&stream, event_id);
    let duplicates_key = record_key.replacen("}:d:", "}:n:", 1);
    let (record, ttl, dups) = store.event_record(&record_key, &duplicates_key).await?;
    let record = match record.as_deref().map(|r| (r, Record::parse(r))) {
        None => RecordState {
            state: "expired".into(),
            fingerprint: String::new(),
            window_left_ms: None,
        },
        Some((_, parsed)) => RecordState {
            state: match parsed {
                Some(Record::Done { .. }) => "done",
                Some(Record::Processing { .. }) => "processing",
                None => "unreadable",
            }
            .into(),
            fingerprint: parsed
                .map(|p| p.fingerprint().to_owned())
                .unwrap_or_default(),
            window_left_ms: u64::try_from(ttl).ok(),
        },
    };
    let dup = |name: &str| {
        dups.iter()
            .find(|(k, _)| k == name)
            .and_then(|(_, v)| v.parse().ok())
    };
    let event_type = entry.text("event_type");
    let mut relay = Vec::new();
    for route in console.routes_of(source).filter(|r| r.matches(&event_type)) {
        relay.push(route_state(console, store, route, source, &stream, &entry).await?);
    }
    let body = entry.text("body");
    let body_pretty = serde_json::from_str::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| serde_json::to_string_pretty(&v).ok());
    Ok(Some(EventDetail {
        source: source.to_owned(),
        event_id: entry.text("event_id"),
        event_type,
        provider: entry.text("provider"),
        content_type: entry.text("content_type"),
        received_at: entry.text("received_at").parse().unwrap_or(0),
        stream,
        entry_id: entry.id.clone(),
        body,
        body_pretty,
        record,
        duplicates: Duplicates {
            count: dup("count").unwrap_or(0),
            last_at: dup("last_at"),
        },
        relay,
    }))
}

/// Where `entry` stands in `route`: pending in its group, dead-lettered (found among the
/// route's newest dead letters), delivered (the group is past it), or not read yet.
async fn route_state(
    console: &Console,
    store: &RedisStore,
    route: &crate::relay::Route,
    source: &str,
    stream: &str,
    entry: &StreamEntry,
) -> Result<RouteState, ReadError> {
    let mut state = RouteState {
        route: route.name.clone(),
        state: "not_read".into(),
        attempts: None,
        idle_ms: None,
        last_error: None,
        dead_letter_id: None,
    };
    let Some((last, pending)) = store.group_state(stream, &route.group, &entry.id).await? else {
        return Ok(state);
    };
    if let Some(pending) = pending {
        state.state = "pending".into();
        state.attempts = Some(pending.deliveries);
        state.idle_ms = Some(pending.idle_ms);
        return Ok(state);
    }
    if entry_order(&last) < entry_order(&entry.id) {
        return Ok(state);
    }
    let dead = dlq::newest(&console.settings, store, &route.name, DEAD_LETTER_SCAN).await?;
    match dead
        .into_iter()
        .find(|d| d.source == source && d.entry_id == entry.id)
    {
        Some(dead) => {
            state.state = "dead_lettered".into();
            state.attempts = dead.attempts.parse().ok();
            state.last_error = Some(dead.last_error);
            state.dead_letter_id = Some(dead.id);
        }
        None => state.state = "delivered".into(),
    }
    Ok(state)
}
