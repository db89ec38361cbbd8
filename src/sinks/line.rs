//! Local sinks for the memory store: one JSON line per forwarded event, to stdout or a file.
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

/// One forwarded event as a JSON line (the stdout/file consumer contract).
#[derive(Serialize)]
pub struct EventLine<'a> {
    /// Entry ID, `<unix ms>-<sequence>` like a Redis Stream ID.
    pub id: &'a str,
    pub source: &'a str,
    pub provider: &'a str,
    pub event_id: &'a str,
    pub event_type: &'a str,
    pub received_at: u64,
    /// The raw body as text when it is UTF-8 (webhook bodies are JSON) …
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body: Option<&'a str>,
    /// … otherwise base64 of the raw bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body_base64: Option<String>,
}

impl<'a> EventLine<'a> {
    pub fn encode(mut self, raw_body: &'a [u8]) -> Vec<u8> {
        match std::str::from_utf8(raw_body) {
            Ok(text) => self.body = Some(text),
            Err(_) => {
                use base64::Engine;
                self.body_base64 = Some(base64::engine::general_purpose::STANDARD.encode(raw_body));
            }
        }
        let mut line = serde_json::to_vec(&self).expect("event lines serialize");
        line.push(b'\n');
        line
    }
}

/// Called on the sink thread once a line is durable (or failed), before its writer is answered.
pub type OnDone = Box<dyn FnOnce(&io::Result<()>) + Send>;

struct Job {
    line: Vec<u8>,
    on_done: Option<OnDone>,
    reply: oneshot::Sender<io::Result<()>>,
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

    pub fn label(&self) -> &'static str {
        self.label
    }

    /// Writes one line and returns once it is flushed (stdout) or on disk (file).
    ///
    /// The line is handed to the sink thread before this function first awaits, and `on_done`
    /// runs on that thread: the outcome is recorded even if the caller is cancelled meanwhile.
    pub fn write(
        &self,
        line: Vec<u8>,
        on_done: Option<OnDone>,
    ) -> impl std::future::Future<Output = io::Result<()>> {
        let (reply, wait) = oneshot::channel();
        let sent = self.jobs.send(Job {
            line,
            on_done,
            reply,
        });
        async move {
            if let Err(mpsc::SendError(job)) = sent {
                let error = io::Error::other("sink thread stopped");
                let result = Err(error);
                if let Some(on_done) = job.on_done {
                    on_done(&result);
                }
                return result;
            }
            wait.await
                .unwrap_or_else(|_| Err(io::Error::other("sink thread stopped")))
        }
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
        for job in &batch {
            buffer.extend_from_slice(&job.line);
        }
        let result = out.write_all(&buffer).and_then(|()| {
            if sync {
                out.flush()?;
            }
            out.make_durable()
        });
        for job in batch.drain(..) {
            if let Some(on_done) = job.on_done {
                on_done(&result);
            }
            let reply = match &result {
                Ok(()) => Ok(()),
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
    async fn file_sink_appends_one_line_per_event() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        let sink = LineSink::file(&path).unwrap();
        for i in 0..3 {
            let line = EventLine {
                id: &format!("1-{i}"),
                source: "demo",
                provider: "github",
                event_id: "e",
                event_type: "ping",
                received_at: 1,
                body: None,
                body_base64: None,
            }
            .encode(b"{\"a\":1}");
            sink.write(line, None).await.unwrap();
        }
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 3);
        let first: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
        assert_eq!(first["body"], "{\"a\":1}");
        assert_eq!(first["id"], "1-0");
    }
}
