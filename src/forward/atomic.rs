//! Atomic mode (docs/design.md, "Redis layout"): one Lua script deduplicates a request's events
//! and appends the new ones to the Redis Stream.
//!
//! The script runs by SHA through the store, which reloads it on `NOSCRIPT`. Its `#!lua` shebang
//! without flags makes Redis refuse it *before* it runs when Redis is over `maxmemory`, so an
//! out-of-memory Redis can never leave half a delivery behind. It reads every record of a
//! request first and writes only when none is a mismatch, so a request answered 422 writes
//! nothing; then, per new event, `XADD` comes before `SET`: a script torn by a crash can at worst
//! forward an event whose record was lost (a duplicate), never record an event that was not
//! forwarded (a loss). Every key of a source partition carries its hash tag, so the call touches
//! one Redis Cluster slot. A single event is a request of one: the same script, the same three
//! commands as a script written for one event (`GET`, `XADD`, `SET`).
//!
//! A call of more than one record asks about all of them with one `EXISTS` before anything
//! else: under load nearly every event is new, and then no record is fetched at all. A call in
//! which one exists reads each with `GET` in turn; a call in which none exists keeps what it
//! writes in a table, where a later request of it finds an earlier one's records (one delivery
//! twice in one call).
//!
//! One call may carry several requests of one stream (`sink.coalesce`, see [`super::coalesce`]):
//! the script takes them in order, each judged and written all or nothing on its own before the
//! next is read, so a later request sees an earlier one's records exactly as if it came in a call
//! of its own after it. A call that fails answers 503 to every request in it; a record the
//! script cannot judge (a two-phase processing record) refuses its own request only, which is
//! answered 503 while the others of the call keep their answers.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use metrics::Histogram;
use redis::Value;

use super::batch::Plan;
use super::coalesce::{Coalescer, Limits, Runner, Weight};
use super::{within, Delivery, ForwardError, Forwarded, Forwarder};
use crate::config::{Settings, SinkKind};
use crate::metrics::{Metrics, STORE_BATCH_EVENTS, STORE_BATCH_REQUESTS};
use crate::store::{RedisStartError, RedisStore, Script, StoreError, WaitReplicas};
use crate::telemetry;
use crate::util::BoxFuture;
use opentelemetry::KeyValue;

/// KEYS[1] = stream, then per event (request after request) its record key and, with
/// body_dedup, its body record key.
/// ARGV = ttl ms, max_len (0 = no trim), source, provider, keys per event (1 or 2), confirm (`1`
/// when `WAIT` follows: each duplicate's record of an accepted request is written again, same
/// value and expiry, so that the `WAIT` behind the script covers it; else `0`), count duplicates
/// (`1` when the daemon has a console: each duplicate adds to the hash `…:n:<event_id>` beside
/// its record, which the console shows; else `0`), then per
/// request: received_at, content_type (the request's, which the relay sends on; empty when
/// absent), its number of events n, then per event of it: fingerprint, event_id, event_type, body.
/// Returns one verdict per event, request after request: the entry ID alone new (it begins with
/// a digit, every other verdict with a letter), `d<ack>` duplicate of its record, `b<ack>`
/// duplicate of its body record, `m` mismatch, `w` withheld (new, but its request was refused),
/// `x<record>` a record in neither format.
const FORWARD_SCRIPT: &str = include_str!("forward.lua");

/// [`FORWARD_SCRIPT`] when telemetry is on: each request carries its `traceparent` after its
/// content_type (empty when the request's span was not sampled), and each entry it appends has a
/// `traceparent` field when it is not empty. Off, the plain script runs, unchanged.
fn traced_script() -> String {
    let text = FORWARD_SCRIPT
        .replace(
            "local received_at, content_type, n = ARGV[a], ARGV[a + 1], ARGV[a + 2]\n  a = a + 3",
            "local received_at, content_type, tp, n = ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3]\n  a = a + 4",
        )
        // One empty table for every request without a sampled trace, not one each.
        .replace("local verdicts = {}\n", "local verdicts = {}\nlocal untraced = {}\n")
        .replace(
            "local id\n",
            "local id\n        local extra = untraced\n        if tp ~= '' then extra = {'traceparent', tp} end\n",
        )
        .replace("'body', ARGV[e + 3])", "'body', ARGV[e + 3], unpack(extra))");
    debug_assert!(text.contains("tp, n = "));
    debug_assert!(text.contains("local untraced = {}"));
    debug_assert_eq!(text.matches("unpack(extra)").count(), 2);
    text
}

/// Atomic claim-and-append into a Redis Stream.
pub struct RedisForwarder {
    coalescer: Coalescer<ScriptRunner>,
}

/// Runs the script for one or more requests of one stream.
pub struct ScriptRunner {
    store: RedisStore,
    script: Script,
    max_len: u64,
    store_latency: Histogram,
    wait: Option<WaitReplicas>,
    /// Whether duplicates are counted per event (`console.listen` is set).
    count_duplicates: bool,
    /// Telemetry is on: the script takes each request's `traceparent`.
    traced: bool,
}

/// What every request of one stream shares: the stream and its source.
pub struct Stream {
    key: String,
    ttl_ms: u64,
    source: String,
    provider: &'static str,
    keys_per_event: usize,
}

/// One request's part of a call: the events the store must judge, with everything the script
/// needs of them, owned so that the call may run in another task.
pub struct Segment {
    /// Per event its record key and, with body_dedup, its body record key.
    keys: Vec<String>,
    received_at_ms: u64,
    content_type: String,
    events: Vec<EventArgs>,
    /// The request's span, when telemetry is on and it is sampled: the store call's parent or
    /// link, and the context written into the entries.
    trace: Option<telemetry::Link>,
}

struct EventArgs {
    fingerprint: String,
    event_id: String,
    event_type: String,
    body: Bytes,
}

/// One request's verdicts (one per judged event), or the error its whole call ended in.
type Judged = Result<Vec<Forwarded>, Arc<ForwardError>>;

impl RedisForwarder {
    /// The forwarder for `sink.kind = "redis_stream"`, with `store.wait_replicas` when set and
    /// coalescing when `sink.coalesce` is on.
    pub async fn build(
        settings: &Settings,
        store: RedisStore,
        metrics: &Metrics,
    ) -> Result<Self, RedisStartError> {
        debug_assert_eq!(settings.sink.kind, SinkKind::RedisStream);
        let wait = store.wait_replicas();
        let traced = telemetry::enabled();
        let script = if traced {
            Script::new(&traced_script())
        } else {
            Script::new(FORWARD_SCRIPT)
        };
        store.load(&[&script]).await?;
        let sink = &settings.sink;
        // Off, a lane never queues: every request runs its own call at once, as many at once
        // as there are requests.
        let limits = if sink.coalesce {
            Limits {
                max_events: u64::from(sink.coalesce_max_events()),
                max_requests: sink.coalesce_max_requests() as usize,
                max_bytes: sink.coalesce_max_bytes(),
                window: sink.coalesce_window(),
                in_flight: sink.coalesce_in_flight() as usize,
            }
        } else {
            Limits {
                max_events: 1,
                max_requests: 1,
                max_bytes: 0,
                window: Duration::ZERO,
                in_flight: usize::MAX,
            }
        };
        let requests = metrics.histogram(STORE_BATCH_REQUESTS, Vec::new());
        let events = metrics.histogram(STORE_BATCH_EVENTS, Vec::new());
        let observe = Box::new(move |n: usize, e: u64| {
            requests.record(n as f64);
            events.record(e as f64);
        });
        let runner = ScriptRunner {
            store,
            script,
            max_len: settings.sink.max_len,
            store_latency: metrics.store_op("forward"),
            wait,
            count_duplicates: settings.console.listen.is_some(),
            traced,
        };
        Ok(Self {
            coalescer: Coalescer::new(runner, limits, observe),
        })
    }

    async fn run(&self, deliveries: &[Delivery<'_>]) -> Result<Vec<Forwarded>, ForwardError> {
        let mut plan = Plan::new(deliveries);
        let Some(first) = plan.unique.first() else {
            return Ok(Vec::new());
        };
        if plan.has_conflict() {
            return Ok(plan.rejected());
        }
        let target = first.delivery.target;
        let Some(partition) = plan.partition() else {
            let spread = "the events of one request span partitions".to_owned();
            return Err(StoreError::Protocol(spread).into());
        };
        let keys_per_event = if target.body_dedup() { 2 } else { 1 };
        let stream = &target.partitions()[partition].stream;
        let mut segment = Segment {
            keys: Vec::with_capacity(keys_per_event * plan.unique.len()),
            received_at_ms: first.delivery.received_at_ms,
            content_type: first.delivery.content_type.unwrap_or_default().to_owned(),
            events: Vec::with_capacity(plan.unique.len()),
            trace: telemetry::current_link(),
        };
        let mut weight = Weight::default();
        // The plan is done with its keys and fingerprints (only its slots answer below): they
        // move into the call.
        for planned in &mut plan.unique {
            let event = planned.delivery.event;
            segment.keys.push(std::mem::take(&mut planned.key));
            if let Some(body_key) = planned.body_key.take() {
                segment.keys.push(body_key);
            }
            weight.events += 1;
            weight.bytes += event.body().len() as u64;
            segment.events.push(EventArgs {
                fingerprint: std::mem::take(&mut planned.fingerprint),
                event_id: event.event_id().to_owned(),
                event_type: event.event_type().to_owned(),
                body: event.body().clone(),
            });
        }
        let context = || Stream {
            key: stream.clone(),
            ttl_ms: target.dedup_ttl.as_millis() as u64,
            source: target.source.clone(),
            provider: target.provider,
            keys_per_event,
        };
        let judged = self
            .coalescer
            .submit(stream, context, segment, weight)
            .await
            .map_err(ForwardError::Shared)?;
        if judged.len() != plan.unique.len() {
            return Err(StoreError::Protocol("a verdict per event".to_owned()).into());
        }
        Ok(plan.answers(judged))
    }
}

impl ScriptRunner {
    fn deadline(&self) -> Duration {
        self.store.timeout() + self.wait.map_or(Duration::ZERO, |w| w.timeout)
    }

    /// One script call for `segments`, with `WAIT` in the same pipeline when waiting is on,
    /// within the store's deadline when `bounded` (a call whose caller sets no deadline of its
    /// own: see [`Runner::run_in_caller`]).
    async fn call(&self, stream: &Stream, segments: &[Segment], bounded: bool) -> Vec<Judged> {
        let keys: usize = segments.iter().map(|s| s.keys.len()).sum();
        let (args, bytes) = call_size(stream, segments);
        let mut call = self.store.script_sized(&self.script, 1 + keys, args, bytes);
        call.arg(&stream.key);
        for segment in segments {
            for key in &segment.keys {
                call.arg(key);
            }
        }
        call.arg(stream.ttl_ms)
            .arg(self.max_len)
            .arg(&stream.source)
            .arg(stream.provider)
            .arg(stream.keys_per_event)
            .arg(if self.wait.is_some() { "1" } else { "0" })
            .arg(if self.count_duplicates { "1" } else { "0" });
        for segment in segments {
            call.arg(segment.received_at_ms).arg(&segment.content_type);
            if self.traced {
                call.arg(
                    segment
                        .trace
                        .as_ref()
                        .map(telemetry::link_of)
                        .unwrap_or_default(),
                );
            }
            call.arg(segment.events.len());
            for event in &segment.events {
                call.arg(&event.fingerprint)
                    .arg(&event.event_id)
                    .arg(&event.event_type)
                    .arg(event.body.as_ref());
            }
        }
        let invoked = async {
            let started = Instant::now();
            // With wait_replicas, WAIT goes in the same pipeline, on the connection the script
            // ran on: one WAIT covers every request of the call, the events just appended and,
            // for duplicates, their records rewritten (replication is one ordered stream per
            // master, so everything before them too).
            let waited = call
                .invoke_waiting::<Vec<Value>>(&stream.key, self.wait)
                .await?;
            self.store_latency.record(started.elapsed().as_secs_f64());
            let confirmation = waited.confirmation().map_err(|e| Arc::new(e.into()));
            let reply = waited.reply;
            let mut judged = Vec::with_capacity(segments.len());
            let mut verdicts = reply.iter();
            for segment in segments {
                // Each request's verdicts are taken whole before any is read, so that one the
                // daemon cannot read leaves the next request's verdicts where they belong.
                let mine: Vec<&Value> = verdicts.by_ref().take(segment.events.len()).collect();
                if mine.len() != segment.events.len() {
                    return Err(StoreError::Protocol(format!("{reply:?}")).into());
                }
                // A verdict that cannot be read (a record the script cannot judge) answers 503
                // to its own request only: the script refused that request and wrote nothing
                // of it, while the other requests of the call were judged, and written, as
                // their verdicts say.
                judged.push(
                    mine.into_iter()
                        .map(verdict)
                        .collect::<Result<Vec<_>, _>>()
                        .map_err(Arc::new),
                );
            }
            if verdicts.next().is_some() {
                return Err(StoreError::Protocol(format!("{reply:?}")).into());
            }
            Ok::<_, ForwardError>(
                judged
                    .into_iter()
                    .map(|verdicts| {
                        let verdicts = verdicts?;
                        let accepted = verdicts.iter().all(|f| {
                            matches!(f, Forwarded::New { .. } | Forwarded::Duplicate { .. })
                        });
                        // Fewer replicas than wanted: 503, never a 2xx that was not confirmed.
                        // A refused request wrote nothing, so the count does not matter to it.
                        match (&confirmation, accepted) {
                            (Err(error), true) => Err(Arc::clone(error)),
                            _ => Ok(verdicts),
                        }
                    })
                    .collect(),
            )
        };
        let judged = if bounded {
            within(self.deadline(), invoked).await
        } else {
            invoked.await
        };
        match judged {
            Ok(judged) => judged,
            Err(error) => {
                let error = Arc::new(error);
                segments.iter().map(|_| Err(Arc::clone(&error))).collect()
            }
        }
    }
}

impl Runner for ScriptRunner {
    type Lane = Stream;
    type Item = Segment;
    type Output = Judged;

    fn run<'a>(&'a self, lane: &'a Stream, items: &'a [Segment]) -> BoxFuture<'a, Vec<Judged>> {
        if !self.traced {
            return Box::pin(self.call(lane, items, true));
        }
        // One span for the call, beneath the first request it carries and linked to each.
        let links: Vec<telemetry::Link> = items.iter().filter_map(|s| s.trace.clone()).collect();
        let span = telemetry::Span::under(
            "redis forward",
            telemetry::Kind::Client,
            links.first(),
            links.clone(),
            || {
                [
                    KeyValue::new("db.system.name", "redis"),
                    KeyValue::new("hookonce.source", lane.source.clone()),
                    KeyValue::new("hookonce.requests", items.len() as i64),
                ]
            },
        );
        Box::pin(async move {
            let judged = self.call(lane, items, true).await;
            if let Some(Err(error)) = judged.iter().find(|j| j.is_err()) {
                span.fail(|| crate::util::error_chain(error.as_ref()));
            }
            span.end();
            judged
        })
    }

    /// A lone request's call runs in its own task inside `forward_all`, under the store deadline
    /// its caller keeps around `forward_all` (`Forwarder::bound`): a second timer around the
    /// call would never fire first.
    fn run_in_caller<'a>(
        &'a self,
        lane: &'a Stream,
        items: &'a [Segment],
    ) -> BoxFuture<'a, Vec<Judged>> {
        if self.traced {
            return self.run(lane, items);
        }
        Box::pin(self.call(lane, items, false))
    }

    fn lost(&self) -> Judged {
        Err(Arc::new(
            StoreError::Protocol("the store call ended without an answer".to_owned()).into(),
        ))
    }
}

/// About how many keys and arguments one call for `segments` has, and how many bytes they hold
/// (an upper bound for the numbers, which are written in decimal): what the command is sized for.
fn call_size(stream: &Stream, segments: &[Segment]) -> (usize, usize) {
    const NUMBER: usize = RedisStore::NUMBER_BYTES;
    let mut args = 1 + 7;
    let mut bytes = stream.key.len() + stream.source.len() + stream.provider.len() + 4 * NUMBER;
    for segment in segments {
        args += segment.keys.len() + 4 + 4 * segment.events.len();
        bytes += segment.keys.iter().map(String::len).sum::<usize>();
        // received_at, content_type, traceparent (when traced) and the number of events
        bytes += NUMBER + segment.content_type.len() + 55 + NUMBER;
        for event in &segment.events {
            bytes += event.fingerprint.len()
                + event.event_id.len()
                + event.event_type.len()
                + event.body.len();
        }
    }
    (args, bytes)
}

/// Reads one verdict of the script (see [`FORWARD_SCRIPT`]).
fn verdict(value: &Value) -> Result<Forwarded, ForwardError> {
    let Value::BulkString(bytes) = value else {
        return Err(StoreError::Protocol(format!("{value:?}")).into());
    };
    let rest = || String::from_utf8_lossy(&bytes[1..]).into_owned();
    Ok(match bytes.first() {
        Some(b'0'..=b'9') => Forwarded::New {
            entry_id: String::from_utf8_lossy(bytes).into_owned(),
            reclaimed: false,
        },
        Some(b'd' | b'b') => Forwarded::Duplicate { entry_id: rest() },
        Some(b'm') => Forwarded::Mismatch,
        Some(b'w') => Forwarded::Withheld,
        Some(b'x') => {
            let record = rest();
            return Err(StoreError::Protocol(format!("unreadable dedup record {record:?}")).into());
        }
        _ => {
            let reply = String::from_utf8_lossy(bytes);
            return Err(StoreError::Protocol(format!("unknown verdict {reply:?}")).into());
        }
    })
}

impl Forwarder for RedisForwarder {
    fn forward_all<'a>(
        &'a self,
        deliveries: &'a [Delivery<'a>],
    ) -> BoxFuture<'a, Result<Vec<Forwarded>, ForwardError>> {
        // Unbounded here: the caller keeps it within `bound` (see `Forwarder::forward_all`).
        Box::pin(self.run(deliveries))
    }

    fn bound(&self) -> Option<Duration> {
        Some(self.coalescer.runner().deadline())
    }

    fn ready(&self) -> BoxFuture<'_, bool> {
        Box::pin(self.coalescer.runner().store.ping())
    }

    fn sink_label(&self) -> &'static str {
        "redis_stream"
    }
}
