//! The embedded store: dedup records in this process, events to a local [`LineSink`].
//!
//! It keeps the promises of atomic mode within one process: a delivery that finds another
//! delivery of the same event in progress waits for it (instead of answering 409), then sees a
//! duplicate, or takes over if the first one failed. Records expire after `dedup_ttl`; their
//! number is bounded by `store.memory_max_records`, beyond which new events get 503 rather than
//! evicting a record early (which would let a duplicate through). Nothing survives a restart.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use metrics::Histogram;
use tokio::sync::watch;
use tokio::time::Instant;

use super::{BoxFuture, Delivery, Fingerprint, ForwardError, Forwarded, Forwarder};
use crate::sinks::{EventLine, LineSink, OnDone};

enum Record {
    /// A delivery is writing this event; waiters are woken when the sender drops.
    Pending(watch::Receiver<()>),
    Done {
        entry_id: String,
        fingerprint: Fingerprint,
        expires_at: Instant,
    },
}

#[derive(Default)]
struct State {
    records: HashMap<String, Record>,
    /// Expiry order of `Done` records; stale heap entries are skipped when popped.
    expiry: BinaryHeap<Reverse<(Instant, String)>>,
    last_ms: u64,
    sequence: u64,
}

impl State {
    fn purge_expired(&mut self, now: Instant) {
        while let Some(Reverse((deadline, _))) = self.expiry.peek() {
            if *deadline > now {
                break;
            }
            let Reverse((deadline, key)) = self.expiry.pop().expect("peeked");
            if let Some(Record::Done { expires_at, .. }) = self.records.get(&key) {
                if *expires_at == deadline {
                    self.records.remove(&key);
                }
            }
        }
    }

    /// A stream-like entry ID: `<unix ms>-<sequence within that ms>`, always increasing.
    fn next_entry_id(&mut self) -> String {
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        if now_ms > self.last_ms {
            self.last_ms = now_ms;
            self.sequence = 0;
        } else {
            self.sequence += 1;
        }
        format!("{}-{}", self.last_ms, self.sequence)
    }
}

pub struct MemoryForwarder {
    state: Arc<Mutex<State>>,
    sink: LineSink,
    max_records: usize,
    sink_latency: Histogram,
}

enum Step {
    Answer(Forwarded),
    Wait(watch::Receiver<()>),
    Write(watch::Sender<()>, String),
}

impl MemoryForwarder {
    pub fn new(sink: LineSink, max_records: usize, sink_latency: Histogram) -> Self {
        Self {
            state: Arc::new(Mutex::new(State::default())),
            sink,
            max_records,
            sink_latency,
        }
    }

    /// Number of live dedup records (for tests and diagnostics).
    pub fn record_count(&self) -> usize {
        let mut state = self.state.lock().expect("memory store lock");
        state.purge_expired(Instant::now());
        state
            .records
            .values()
            .filter(|r| matches!(r, Record::Done { .. }))
            .count()
    }

    /// Decides what to do with one delivery. The lock is held only for this decision, never
    /// across an await: it is a std mutex for that reason.
    fn step(&self, key: &str, fingerprint: Fingerprint) -> Result<Step, ForwardError> {
        let now = Instant::now();
        let mut state = self.state.lock().expect("memory store lock");
        match state.records.get(key) {
            Some(Record::Done {
                entry_id,
                fingerprint: stored,
                expires_at,
            }) if *expires_at > now => {
                return Ok(Step::Answer(if *stored == fingerprint {
                    Forwarded::Duplicate {
                        entry_id: entry_id.clone(),
                    }
                } else {
                    Forwarded::Mismatch
                }))
            }
            Some(Record::Pending(receiver)) => return Ok(Step::Wait(receiver.clone())),
            _ => {}
        }
        if state.records.len() >= self.max_records {
            state.purge_expired(now);
            if state.records.len() >= self.max_records {
                return Err(ForwardError::Full(self.max_records));
            }
        }
        let (sender, receiver) = watch::channel(());
        state
            .records
            .insert(key.to_owned(), Record::Pending(receiver));
        let entry_id = state.next_entry_id();
        Ok(Step::Write(sender, entry_id))
    }

    async fn run(&self, delivery: Delivery<'_>) -> Result<Forwarded, ForwardError> {
        let target = delivery.target;
        let event = delivery.event;
        let fingerprint = delivery.fingerprint();
        loop {
            let key = target.record_key(event.event_id());
            match self.step(&key, fingerprint)? {
                Step::Answer(answer) => return Ok(answer),
                Step::Wait(mut receiver) => {
                    // Resolves when the writing delivery finishes either way (sender dropped).
                    let _ = receiver.changed().await;
                }
                Step::Write(sender, entry_id) => {
                    let line = EventLine {
                        id: &entry_id,
                        source: &target.source,
                        provider: target.provider,
                        event_id: event.event_id(),
                        event_type: event.event_type(),
                        received_at: delivery.received_at_ms,
                        body: None,
                        body_base64: None,
                    }
                    .encode(event.body());
                    // The record is settled on the sink thread once the line is durable, so a
                    // request cancelled meanwhile (timeout, client gone) cannot leave it pending
                    // or release an event that was in fact written.
                    let state = Arc::clone(&self.state);
                    let ttl = target.dedup_ttl;
                    let settled_id = entry_id.clone();
                    let settle: OnDone = Box::new(move |result| {
                        let done = result
                            .is_ok()
                            .then(|| (settled_id, fingerprint, Instant::now() + ttl));
                        settle(&state, key, done);
                        drop(sender);
                    });
                    let started = std::time::Instant::now();
                    let written = self.sink.write(line, Some(settle)).await;
                    self.sink_latency.record(started.elapsed().as_secs_f64());
                    return match written {
                        Ok(()) => Ok(Forwarded::New { entry_id }),
                        Err(error) => Err(ForwardError::Sink(error)),
                    };
                }
            }
        }
    }
}

fn settle(state: &Mutex<State>, key: String, done: Option<(String, Fingerprint, Instant)>) {
    let mut state = state.lock().expect("memory store lock");
    match done {
        Some((entry_id, fingerprint, expires_at)) => {
            state.expiry.push(Reverse((expires_at, key.clone())));
            state.records.insert(
                key,
                Record::Done {
                    entry_id,
                    fingerprint,
                    expires_at,
                },
            );
        }
        None => {
            state.records.remove(&key);
        }
    }
}

impl Forwarder for MemoryForwarder {
    fn forward<'a>(
        &'a self,
        delivery: Delivery<'a>,
    ) -> BoxFuture<'a, Result<Forwarded, ForwardError>> {
        Box::pin(self.run(delivery))
    }

    fn ready(&self) -> BoxFuture<'_, bool> {
        Box::pin(async { true })
    }

    fn sink_label(&self) -> &'static str {
        self.sink.label()
    }
}
