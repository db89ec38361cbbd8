//! JSON lines on stdout or in a file: one line per forwarded event.
//!
//! Writes go through one background thread that batches whatever is waiting, writes it, then
//! flushes (stdout) or `fsync`s (file) once for the whole batch before acknowledging each
//! writer. A request is answered only after its line is durable, yet a burst of requests costs
//! one `fsync`, not one each (group commit).

use std::fs::OpenOptions;
use std::io::{self, Write};
use std::path::Path;
use std::sync::mpsc;
use std::thread;

use serde::Serialize;
use tokio::sync::oneshot;

use super::{Message, Sink, SinkError};
use crate::util::BoxFuture;

/// One forwarded event as a JSON line (the stdout/file consumer contract).
#[derive(Serialize)]
struct EventLine<'a> {
    /// Entry ID, `<unix ms>-<sequence>` like a Redis Stream ID.
    id: &'a str,
    source: &'a str,
    provider: &'a str,
    event_id: &'a str,
    event_type: &'a str,
    received_at: u64,
    /// The raw body as text when it is UTF-8 (webhook bodies are JSON) …
    #[serde(skip_serializing_if = "Option::is_none")]
    body: Option<&'a str>,
    /// … otherwise base64 of the raw bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    body_base64: Option<String>,
}

fn encode_line(buffer: &mut Vec<u8>, id: &str, message: &Message) {
    let utf8 = std::str::from_utf8(&message.body).ok();
    let line = EventLine {
        id,
        source: &message.source,
        provider: message.provider,
        event_id: &message.event_id,
        event_type: &message.event_type,
        received_at: message.received_at_ms,
        body: utf8,
        body_base64: utf8.is_none().then(|| {
            use base64::Engine;
            base64::engine::general_purpose::STANDARD.encode(&message.body)
        }),
    };
    serde_json::to_writer(&mut *buffer, &line).expect("event lines serialize");
    buffer.push(b'\n');
}

/// Issues stream-like entry IDs, `<unix ms>-<sequence within that ms>`, always increasing.
#[derive(Default)]
struct EntryClock {
    last_ms: u64,
    sequence: u64,
}

impl EntryClock {
    fn next(&mut self) -> String {
        let now_ms = crate::util::unix_ms();
        if now_ms > self.last_ms {
            self.last_ms = now_ms;
            self.sequence = 0;
        } else {
            self.sequence += 1;
        }
        format!("{}-{}", self.last_ms, self.sequence)
    }
}

struct Job {
    message: Message,
    reply: oneshot::Sender<io::Result<String>>,
}

/// A line-oriented, group-committing writer.
pub struct LineSink {
    jobs: mpsc::Sender<Job>,
    label: &'static str,
}

impl LineSink {
    /// Writes to stdout, flushing after each batch.
    pub fn stdout() -> Self {
        Self::spawn("stdout", Box::new(io::stdout()), false)
    }

    /// Appends to a file, `fsync`ing after each batch.
    pub fn file(path: &Path) -> io::Result<Self> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(Self::spawn("file", Box::new(FileOut(file)), true))
    }

    fn spawn(label: &'static str, out: Box<dyn Durable + Send>, sync: bool) -> Self {
        let (jobs, queue) = mpsc::channel::<Job>();
        thread::Builder::new()
            .name(format!("hookonce-sink-{label}"))
            .spawn(move || write_loop(queue, out, sync))
            .expect("spawn sink thread");
        Self { jobs, label }
    }

    /// Writes one line and returns its entry ID once it is flushed (stdout) or on disk (file).
    async fn write(&self, message: Message) -> io::Result<String> {
        let (reply, wait) = oneshot::channel();
        self.jobs
            .send(Job { message, reply })
            .map_err(|_| io::Error::other("sink thread stopped"))?;
        wait.await
            .unwrap_or_else(|_| Err(io::Error::other("sink thread stopped")))
    }
}

impl Sink for LineSink {
    fn publish<'a>(&'a self, message: &'a Message) -> BoxFuture<'a, Result<String, SinkError>> {
        Box::pin(async move { self.write(message.clone()).await.map_err(SinkError::Io) })
    }

    fn label(&self) -> &'static str {
        self.label
    }
}

/// Where a sink writes, and how it makes a batch durable.
trait Durable: Write {
    fn make_durable(&mut self) -> io::Result<()>;
}

impl Durable for io::Stdout {
    fn make_durable(&mut self) -> io::Result<()> {
        self.flush()
    }
}

struct FileOut(std::fs::File);

impl Write for FileOut {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

impl Durable for FileOut {
    fn make_durable(&mut self) -> io::Result<()> {
        self.0.sync_data()
    }
}

/// Most lines written between two flushes.
const MAX_BATCH: usize = 256;

fn write_loop(queue: mpsc::Receiver<Job>, mut out: Box<dyn Durable + Send>, sync: bool) {
    let mut batch: Vec<Job> = Vec::with_capacity(MAX_BATCH);
    let mut ids: Vec<String> = Vec::with_capacity(MAX_BATCH);
    let mut clock = EntryClock::default();
    let mut buffer = Vec::new();
    while let Ok(first) = queue.recv() {
        batch.push(first);
        while batch.len() < MAX_BATCH {
            match queue.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        buffer.clear();
        ids.clear();
        for job in &batch {
            let id = clock.next();
            encode_line(&mut buffer, &id, &job.message);
            ids.push(id);
        }
        let result = out.write_all(&buffer).and_then(|()| {
            if sync {
                out.flush()?;
            }
            out.make_durable()
        });
        for (job, id) in batch.drain(..).zip(ids.drain(..)) {
            let reply = match &result {
                Ok(()) => Ok(id),
                Err(e) => Err(io::Error::new(e.kind(), e.to_string())),
            };
            let _ = job.reply.send(reply);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn file_sink_appends_one_line_per_event_with_increasing_ids() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        let sink = LineSink::file(&path).unwrap();
        let message = Message {
            dedup_key: "k".into(),
            source: "demo".into(),
            provider: "github",
            event_id: "e".into(),
            event_type: "ping".into(),
            received_at_ms: 1,
            body: bytes::Bytes::from_static(b"{\"a\":1}"),
            content_type: None,
        };
        let mut ids = Vec::new();
        for _ in 0..3 {
            ids.push(sink.publish(&message).await.unwrap());
        }
        let binary = Message {
            body: bytes::Bytes::from_static(&[0xff, 0x00]),
            ..message
        };
        sink.publish(&binary).await.unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 4);
        assert_eq!(lines[0]["body"], "{\"a\":1}");
        assert_eq!(lines[0]["id"], ids[0].as_str());
        assert_eq!(lines[3]["body_base64"], "/wA=");
        assert!(ids.windows(2).all(|w| w[0] != w[1]));
    }
}
