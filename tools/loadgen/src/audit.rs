//! The exactly-once audit: compare what the queue holds with what the generator was told.
//!
//! For every event ID the record knows (was it ever answered 2xx?) and the queue knows (how many
//! entries carry it?):
//! - **lost**: acknowledged but absent — the at-least-once promise was broken;
//! - **duplicated**: present more than once — the at-most-once promise was broken;
//! - **unexpected**: present but never sent by the recorded runs (a foreign writer, or IDs that
//!   the generator and the daemon disagree on);
//! - **recovered**: never acknowledged but present — allowed: the daemon answered 503 (or the
//!   answer was lost) after the event had reached the queue, and a provider would retry into a
//!   duplicate hit;
//! - **unacknowledged**: never acknowledged and absent — allowed: the provider keeps retrying;
//! - **republished** (RabbitMQ only): further copies under the same `message_id` that two-phase
//!   mode's documented window explains (`rabbitmq_queue`): reported, never a duplicate, never a
//!   loss. JetStream absorbs such copies itself, and the Redis Stream sink has no such window.
//!
//! Entries whose ID carries none of the recorded runs' prefixes are counted as foreign and left
//! out, so a stream shared with other traffic can still be audited.

use std::collections::HashMap;
use std::time::Duration;

use futures_util::StreamExt;
use hookonce::config::StoreSettings;
use hookonce::store::RedisStore;
use hookonce::util::error_chain;
use serde::Serialize;

use crate::rabbitmq_queue;
use crate::record::Records;

/// Where the forwarded events are.
pub enum Queue {
    /// A source's streams (one per partition), read through the daemon's own store client, so
    /// a cluster or a Sentinel group is reached as the daemon reaches it.
    Redis {
        store: Box<StoreSettings>,
        streams: Vec<String>,
    },
    JetStream {
        url: String,
        stream: String,
        subject: String,
    },
    /// A queue bound to the sink's exchange. Copies of one event at least `republish_gap`
    /// apart are republishes through the two-phase window, not duplicates.
    RabbitMq {
        url: String,
        queue: String,
        republish_gap: Duration,
    },
}

/// What the queue holds of each event ID.
#[derive(Debug, Default)]
pub struct Contents {
    /// Copies the audit counts: more than one is a duplicate.
    pub counts: HashMap<String, u32>,
    /// Further copies explained by two-phase mode's window (RabbitMQ).
    pub republished: HashMap<String, u32>,
    /// The gap that explained them, when the queue can hold republishes.
    pub republish_gap: Option<Duration>,
    /// The shortest time between a republish and the copy before it, in milliseconds.
    pub closest_republish_ms: Option<u64>,
}

impl Contents {
    fn counted(counts: HashMap<String, u32>) -> Self {
        Self {
            counts,
            ..Self::default()
        }
    }
}

#[derive(Default, Serialize)]
pub struct Findings {
    pub sent: usize,
    pub acknowledged: usize,
    pub entries: u64,
    pub foreign: u64,
    pub lost: Vec<String>,
    pub duplicated: Vec<(String, u32)>,
    pub unexpected: Vec<String>,
    pub recovered: usize,
    pub unacknowledged: usize,
    /// Event IDs with copies republished through the two-phase window, and how many.
    pub republished: Vec<(String, u32)>,
    /// The smallest gap between copies counted as a republish (RabbitMQ), in milliseconds.
    pub republish_gap_ms: Option<u64>,
    /// The shortest time between a republish and the copy before it, in milliseconds.
    pub closest_republish_ms: Option<u64>,
}

impl Findings {
    pub fn passed(&self) -> bool {
        self.lost.is_empty() && self.duplicated.is_empty()
    }

    pub fn print(&self) {
        println!(
            "sent {} events ({} acknowledged); queue holds {} entries of them ({} foreign ignored)",
            self.sent, self.acknowledged, self.entries, self.foreign
        );
        let republished = match self.republish_gap_ms {
            Some(gap) => format!(
                "  republished {} (copies ≥ {gap} ms apart{}: the two-phase window)",
                self.republished
                    .iter()
                    .map(|(_, n)| u64::from(*n))
                    .sum::<u64>(),
                self.closest_republish_ms
                    .map_or(String::new(), |c| format!(", the closest {c} ms"))
            ),
            None => String::new(),
        };
        println!(
            "lost {}  duplicated {}  unexpected {}  recovered {}  unacknowledged {}{republished}",
            self.lost.len(),
            self.duplicated.len(),
            self.unexpected.len(),
            self.recovered,
            self.unacknowledged
        );
        let show = |what: &str, ids: Vec<String>| {
            for id in ids.iter().take(10) {
                println!("  {what}: {id}");
            }
        };
        show("lost", self.lost.clone());
        show(
            "duplicated",
            self.duplicated
                .iter()
                .map(|(id, n)| format!("{id} ×{n}"))
                .collect(),
        );
        show("unexpected", self.unexpected.clone());
        show(
            "republished",
            self.republished
                .iter()
                .map(|(id, n)| format!("{id} +{n}"))
                .collect(),
        );
        println!("{}", if self.passed() { "PASS" } else { "FAIL" });
    }
}

/// Counts the entries of each event ID in the queue.
pub async fn read_queue(queue: &Queue, timeout: Duration) -> Result<Contents, String> {
    let reading = async {
        match queue {
            Queue::Redis { store, streams } => {
                read_redis(store, streams).await.map(Contents::counted)
            }
            Queue::JetStream {
                url,
                stream,
                subject,
            } => read_jetstream(url, stream, subject)
                .await
                .map(Contents::counted),
            Queue::RabbitMq {
                url,
                queue,
                republish_gap,
            } => {
                let copies = rabbitmq_queue::read(url, queue).await?;
                let sorted = rabbitmq_queue::sort(copies, *republish_gap);
                Ok(Contents {
                    counts: sorted.counted,
                    republished: sorted.republished,
                    republish_gap: Some(*republish_gap),
                    closest_republish_ms: sorted.closest_republish_ms,
                })
            }
        }
    };
    tokio::time::timeout(timeout, reading)
        .await
        .map_err(|_| format!("reading the queue took longer than {timeout:?}"))?
}

async fn read_redis(
    store: &StoreSettings,
    streams: &[String],
) -> Result<HashMap<String, u32>, String> {
    let store = RedisStore::connect(store)
        .await
        .map_err(|e| format!("cannot connect to Redis: {}", error_chain(&e)))?;
    let mut counts = HashMap::new();
    for stream in streams {
        let mut start = "-".to_owned();
        loop {
            // Pages of 1000 keep one reply small even with 1.5 KB bodies in every entry.
            let page = store
                .range(stream, &start, "+", 1000)
                .await
                .map_err(|e| format!("XRANGE {stream}: {}", error_chain(&e)))?;
            let Some(last) = page.last() else { break };
            start = format!("({}", last.id);
            for entry in &page {
                if entry.field("event_id").is_none() {
                    return Err(format!(
                        "entry {} of {stream} has no event_id field",
                        entry.id
                    ));
                }
                *counts.entry(entry.text("event_id")).or_default() += 1;
            }
        }
    }
    Ok(counts)
}

async fn read_jetstream(
    url: &str,
    stream: &str,
    subject: &str,
) -> Result<HashMap<String, u32>, String> {
    use async_nats::jetstream::consumer::{pull::OrderedConfig, DeliverPolicy};
    let client = async_nats::connect(url)
        .await
        .map_err(|e| format!("cannot connect to NATS: {e}"))?;
    let jetstream = async_nats::jetstream::new(client);
    let stream = jetstream
        .get_stream(stream)
        .await
        .map_err(|e| format!("stream {stream}: {e}"))?;
    let mut consumer = stream
        .create_consumer(OrderedConfig {
            filter_subject: subject.to_owned(),
            deliver_policy: DeliverPolicy::All,
            ..Default::default()
        })
        .await
        .map_err(|e| format!("cannot create a consumer: {e}"))?;
    let pending = consumer
        .info()
        .await
        .map_err(|e| e.to_string())?
        .num_pending;
    let mut counts = HashMap::new();
    if pending == 0 {
        return Ok(counts);
    }
    let mut messages = consumer.messages().await.map_err(|e| e.to_string())?;
    while let Some(message) = messages.next().await {
        let message = message.map_err(|e| e.to_string())?;
        let id = message
            .headers
            .as_ref()
            .and_then(|h| h.get("Hookonce-Event-Id"))
            .map(|v| v.as_str().to_owned())
            .ok_or("a message has no Hookonce-Event-Id header")?;
        *counts.entry(id).or_default() += 1;
        if message.info().map_err(|e| e.to_string())?.pending == 0 {
            break;
        }
    }
    Ok(counts)
}

/// Compares the record with the queue's contents.
pub fn compare(records: &Records, contents: &Contents) -> Findings {
    let queue = &contents.counts;
    let mut findings = Findings {
        sent: records.events.len(),
        republish_gap_ms: contents
            .republish_gap
            .map(|gap| u64::try_from(gap.as_millis()).unwrap_or(u64::MAX)),
        closest_republish_ms: contents.closest_republish_ms,
        ..Default::default()
    };
    for (id, sent) in &records.events {
        let present = queue.get(id).copied().unwrap_or(0);
        findings.acknowledged += usize::from(sent.acked);
        match (sent.acked, present) {
            (true, 0) => findings.lost.push(id.clone()),
            (false, 0) => findings.unacknowledged += 1,
            (false, _) => findings.recovered += 1,
            (true, _) => {}
        }
        if present > 1 {
            findings.duplicated.push((id.clone(), present));
        }
    }
    for (id, count) in queue {
        if !records.owns(id) {
            findings.foreign += u64::from(*count);
            continue;
        }
        findings.entries += u64::from(*count);
        if !records.events.contains_key(id) {
            findings.unexpected.push(id.clone());
        }
    }
    for (id, count) in &contents.republished {
        if records.owns(id) {
            findings.entries += u64::from(*count);
            findings.republished.push((id.clone(), *count));
        } else {
            findings.foreign += u64::from(*count);
        }
    }
    findings.lost.sort();
    findings.duplicated.sort();
    findings.unexpected.sort();
    findings.republished.sort();
    findings
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Sent;

    fn records(events: &[(&str, bool)]) -> Records {
        let mut records = Records {
            prefixes: vec!["run1".to_owned()],
            ..Default::default()
        };
        for (id, acked) in events {
            let sent = Sent {
                acked: *acked,
                attempts: 1,
                last_status: if *acked { 200 } else { 503 },
            };
            records.events.insert((*id).to_owned(), sent);
        }
        records
    }

    fn counts(list: &[(&str, u32)]) -> HashMap<String, u32> {
        list.iter().map(|(id, n)| ((*id).to_owned(), *n)).collect()
    }

    #[test]
    fn every_category_is_found() {
        let records = records(&[
            ("run1-ok", true),
            ("run1-lost", true),
            ("run1-dup", true),
            ("run1-recovered", false),
            ("run1-unacked", false),
        ]);
        let queue = Contents::counted(counts(&[
            ("run1-ok", 1),
            ("run1-dup", 2),
            ("run1-recovered", 1),
            ("run1-stray", 1),
            ("other", 3),
        ]));
        let findings = compare(&records, &queue);
        assert_eq!(findings.lost, ["run1-lost"]);
        assert_eq!(findings.duplicated, [("run1-dup".to_owned(), 2)]);
        assert_eq!(findings.unexpected, ["run1-stray"]);
        assert_eq!((findings.recovered, findings.unacknowledged), (1, 1));
        assert_eq!((findings.entries, findings.foreign), (5, 3));
        assert!(findings.republished.is_empty());
        assert_eq!(findings.republish_gap_ms, None);
        assert!(!findings.passed());
    }

    /// RabbitMQ: copies explained by the two-phase window are reported as republished, and
    /// neither fail the audit nor hide a loss or a duplicate.
    #[test]
    fn republishes_are_counted_apart_and_pass() {
        let records = records(&[
            ("run1-ok", true),
            ("run1-window", true),
            ("run1-recovered", false),
        ]);
        let queue = Contents {
            counts: counts(&[("run1-ok", 1), ("run1-window", 1), ("run1-recovered", 1)]),
            republished: counts(&[("run1-window", 2), ("run1-recovered", 1), ("other", 1)]),
            republish_gap: Some(Duration::from_millis(1500)),
            closest_republish_ms: Some(2100),
        };
        let findings = compare(&records, &queue);
        assert!(findings.passed());
        assert!(findings.lost.is_empty() && findings.duplicated.is_empty());
        assert_eq!(
            findings.republished,
            [
                ("run1-recovered".to_owned(), 1),
                ("run1-window".to_owned(), 2)
            ]
        );
        assert_eq!((findings.entries, findings.foreign), (6, 1));
        assert_eq!(findings.recovered, 1);
        assert_eq!(findings.republish_gap_ms, Some(1500));

        // A republished event that was also present twice too close together still fails.
        let mut racing = queue;
        racing.counts.insert("run1-window".to_owned(), 2);
        let findings = compare(&records, &racing);
        assert_eq!(findings.duplicated, [("run1-window".to_owned(), 2)]);
        assert!(!findings.passed());
    }
}
