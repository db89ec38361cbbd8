//! The log writer: every line is appended to one shared buffer, and one thread writes that buffer
//! out in batches.
//!
//! A line costs its writer a short lock and a copy: no allocation, no channel message and, while
//! the writing thread is busy or lingering, no wake-up. The thread wakes when the first line of a
//! batch arrives, waits [`LINGER`] for more, then writes everything gathered with one `write`.
//! Under load that is one wake-up and one write per few hundred lines; a line waits at most
//! `LINGER` plus one write before it is out. Nothing is dropped: past [`MAX_BUFFERED`] bytes
//! not yet written, a logging thread waits for the writer. [`WriterGuard`] writes what is left
//! when it is dropped.

use std::io::{self, Write};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use tracing_subscriber::fmt::MakeWriter;

/// How long the writing thread gathers lines after the first of a batch.
pub(crate) const LINGER: Duration = Duration::from_millis(5);

/// Bytes of lines not yet written past which logging waits for the writer.
pub(crate) const MAX_BUFFERED: usize = 1 << 20;

/// Where log lines go: a handle for the subscriber, cheap to write through.
pub(crate) struct LineWriter {
    shared: Arc<Shared>,
}

/// Stops the writing thread when dropped, after it has written every line.
pub(crate) struct WriterGuard {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

struct Shared {
    state: Mutex<State>,
    /// Signalled when the first line of a batch arrives while the writer waits, and on close.
    wake: Condvar,
    /// Signalled when the writer has taken the buffer, for loggers waiting for room.
    room: Condvar,
}

struct State {
    lines: Vec<u8>,
    /// The writer waits on `wake` for a first line (and is not gathering or writing).
    idle: bool,
    closed: bool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves the buffer as valid as ever.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Starts the writing thread over `out`.
pub(crate) fn spawn(out: Box<dyn Write + Send>) -> io::Result<(LineWriter, WriterGuard)> {
    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            lines: Vec::with_capacity(64 * 1024),
            idle: false,
            closed: false,
        }),
        wake: Condvar::new(),
        room: Condvar::new(),
    });
    let thread = std::thread::Builder::new()
        .name("hookonce-log".to_owned())
        .spawn({
            let shared = Arc::clone(&shared);
            move || write_batches(&shared, out, LINGER)
        })?;
    Ok((
        LineWriter {
            shared: Arc::clone(&shared),
        },
        WriterGuard {
            shared,
            thread: Some(thread),
        },
    ))
}

/// The writing thread: wait for a first line, gather for `linger`, write the batch; until closed
/// and empty.
fn write_batches(shared: &Shared, mut out: Box<dyn Write + Send>, linger: Duration) {
    let mut batch = Vec::with_capacity(64 * 1024);
    loop {
        let mut state = shared.lock();
        while state.lines.is_empty() && !state.closed {
            state.idle = true;
            state = shared.wake.wait(state).unwrap_or_else(|p| p.into_inner());
        }
        state.idle = false;
        if state.lines.is_empty() {
            return; // closed, and everything is written
        }
        if !state.closed {
            drop(state);
            std::thread::sleep(linger);
            state = shared.lock();
        }
        std::mem::swap(&mut state.lines, &mut batch);
        drop(state);
        shared.room.notify_all();
        // Nowhere to report a failed write of the log itself; the next batch tries again.
        let _ = out.write_all(&batch).and_then(|()| out.flush());
        batch.clear();
        if batch.capacity() > MAX_BUFFERED {
            batch.shrink_to(64 * 1024);
        }
    }
}

impl LineWriter {
    fn append(&self, line: &[u8]) {
        let mut state = self.shared.lock();
        while state.lines.len() >= MAX_BUFFERED && !state.closed {
            state = self
                .shared
                .room
                .wait(state)
                .unwrap_or_else(|p| p.into_inner());
        }
        state.lines.extend_from_slice(line);
        if state.idle {
            state.idle = false;
            drop(state);
            self.shared.wake.notify_one();
        }
    }
}

/// What the subscriber writes one event's line through (it writes each line whole, at once).
pub(crate) struct LineRef<'a>(&'a LineWriter);

impl Write for LineRef<'_> {
    fn write(&mut self, line: &[u8]) -> io::Result<usize> {
        self.0.append(line);
        Ok(line.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for LineWriter {
    type Writer = LineRef<'a>;

    fn make_writer(&'a self) -> Self::Writer {
        LineRef(self)
    }
}

impl Drop for WriterGuard {
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.wake.notify_one();
        self.shared.room.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;

    use super::*;

    /// An output that hands each `write` call to the test, as one chunk.
    struct Chunks(mpsc::Sender<Vec<u8>>);

    impl Write for Chunks {
        fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
            let _ = self.0.send(bytes.to_vec());
            Ok(bytes.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn line(writer: &LineWriter, text: &str) {
        writer.make_writer().write_all(text.as_bytes()).unwrap();
    }

    #[test]
    fn lines_come_out_whole_in_order_and_in_batches() {
        let (sender, chunks) = mpsc::channel();
        let (writer, guard) = spawn(Box::new(Chunks(sender))).unwrap();
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let shared = Arc::clone(&writer.shared);
                std::thread::spawn(move || {
                    let writer = LineWriter { shared };
                    for i in 0..1000 {
                        line(&writer, &format!("{t} {i}\n"));
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        drop(guard);
        let chunks: Vec<Vec<u8>> = chunks.iter().collect();
        // 4000 lines from four threads in far fewer writes than lines.
        assert!(chunks.len() < 400, "{} writes", chunks.len());
        let text = String::from_utf8(chunks.concat()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4000);
        for t in 0..4 {
            let own: Vec<usize> = lines
                .iter()
                .filter_map(|l| l.strip_prefix(&format!("{t} ")))
                .map(|i| i.parse().unwrap())
                .collect();
            assert_eq!(own, (0..1000).collect::<Vec<_>>(), "thread {t}");
        }
    }

    #[test]
    fn a_line_is_written_without_waiting_for_more_and_the_guard_writes_the_rest() {
        let (sender, chunks) = mpsc::channel();
        let (writer, guard) = spawn(Box::new(Chunks(sender))).unwrap();
        line(&writer, "first\n");
        let first = chunks.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(first, b"first\n");
        line(&writer, "last\n");
        drop(guard);
        assert_eq!(chunks.iter().collect::<Vec<_>>().concat(), b"last\n");
    }

    #[test]
    fn a_full_buffer_makes_logging_wait_rather_than_drop() {
        // The output stalls until the test lets it go, so the buffer fills up.
        let (release, released) = mpsc::channel::<()>();
        struct Stalled(mpsc::Receiver<()>, Arc<Mutex<usize>>);
        impl Write for Stalled {
            fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
                let _ = self.0.recv();
                *self.1.lock().unwrap() += bytes.len();
                Ok(bytes.len())
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let written = Arc::new(Mutex::new(0));
        let (writer, guard) = spawn(Box::new(Stalled(released, Arc::clone(&written)))).unwrap();
        let chunk = "x".repeat(1023) + "\n";
        let total = 3 * MAX_BUFFERED;
        let logger = std::thread::spawn(move || {
            for _ in 0..total / chunk.len() {
                line(&writer, &chunk);
            }
        });
        // The logger cannot finish while the output is stalled: it waits for room.
        std::thread::sleep(Duration::from_millis(100));
        assert!(!logger.is_finished());
        drop(release);
        logger.join().unwrap();
        drop(guard);
        assert_eq!(*written.lock().unwrap(), total / 1024 * 1024);
    }
}
