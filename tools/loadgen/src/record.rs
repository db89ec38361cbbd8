//! The record of a run: one line per delivery attempt and event ID, read back by the audit.
//!
//! Every attempt is written, not just the last one, because what the audit needs is "was this
//! event ever acknowledged?": a 2xx on any attempt of any copy is a promise that the event is in
//! the queue. Lines are tab-separated, `event_id  status  attempt  copy`, with status 0 for no
//! answer (connection refused, reset, timed out). Event IDs never contain tabs or newlines: the
//! daemon rejects control characters, and the generator makes its own IDs.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufRead, BufReader, BufWriter, Write};
use std::path::Path;
use std::sync::Mutex;

const MAGIC: &str = "# hookonce-loadgen record v1";

/// Appends attempt lines; shared by every worker (a short lock per line, far below HTTP costs).
pub struct Recorder {
    out: Option<Mutex<BufWriter<File>>>,
}

impl Recorder {
    /// A recorder writing to `path`, or one that drops everything when there is no path.
    pub fn create(path: Option<&Path>, prefix: &str, source: &str) -> io::Result<Self> {
        let Some(path) = path else {
            return Ok(Self { out: None });
        };
        let mut out = BufWriter::with_capacity(1 << 16, File::create(path)?);
        writeln!(out, "{MAGIC} prefix={prefix} source={source}")?;
        Ok(Self {
            out: Some(Mutex::new(out)),
        })
    }

    pub fn attempt(&self, ids: &[String], status: u16, attempt: u32, copy: u32) {
        let Some(out) = &self.out else { return };
        let mut out = out.lock().expect("recorder lock");
        for id in ids {
            // A full disk must not stop the load; the audit would then report the gap as
            // "unexpected" entries rather than lose them silently.
            let _ = writeln!(out, "{id}\t{status}\t{attempt}\t{copy}");
        }
    }

    pub fn flush(&self) -> io::Result<()> {
        match &self.out {
            Some(out) => out.lock().expect("recorder lock").flush(),
            None => Ok(()),
        }
    }
}

/// What the record says about one event ID.
#[derive(Debug, Default, Clone)]
pub struct Sent {
    pub acked: bool,
    pub attempts: u32,
    pub last_status: u16,
}

/// Every event of one or more record files, and the ID prefixes of their runs.
#[derive(Default)]
pub struct Records {
    pub events: HashMap<String, Sent>,
    pub prefixes: Vec<String>,
}

impl Records {
    pub fn read(&mut self, path: &Path) -> io::Result<()> {
        let file = BufReader::new(File::open(path)?);
        let invalid = |line: usize, what: &str| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}:{line}: {what}", path.display()),
            )
        };
        for (number, line) in file.lines().enumerate() {
            let line = line?;
            if let Some(header) = line.strip_prefix(MAGIC) {
                let prefix = header
                    .split_whitespace()
                    .find_map(|field| field.strip_prefix("prefix="));
                if let Some(prefix) = prefix {
                    self.prefixes.push(prefix.to_owned());
                }
                continue;
            }
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut fields = line.split('\t');
            let (Some(id), Some(status)) = (fields.next(), fields.next()) else {
                return Err(invalid(number + 1, "expected event_id<TAB>status"));
            };
            let status: u16 = status
                .parse()
                .map_err(|_| invalid(number + 1, "status is not a number"))?;
            let sent = self.events.entry(id.to_owned()).or_default();
            sent.attempts += 1;
            sent.last_status = status;
            sent.acked |= (200..300).contains(&status);
        }
        Ok(())
    }

    /// Whether a stream entry's event ID belongs to one of the recorded runs.
    pub fn owns(&self, event_id: &str) -> bool {
        self.prefixes.is_empty() || self.prefixes.iter().any(|p| event_id.contains(p.as_str()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_2xx_attempt_acknowledges_the_event() {
        let dir = std::env::temp_dir().join(format!("loadgen-record-{}", std::process::id()));
        let recorder = Recorder::create(Some(&dir), "abc", "s").unwrap();
        let ids = vec!["evt_abc1".to_owned()];
        recorder.attempt(&ids, 503, 1, 1);
        recorder.attempt(&ids, 200, 2, 1);
        recorder.attempt(&["evt_abc2".to_owned()], 0, 1, 1);
        recorder.flush().unwrap();
        let mut records = Records::default();
        records.read(&dir).unwrap();
        std::fs::remove_file(&dir).unwrap();
        assert!(records.events["evt_abc1"].acked);
        assert_eq!(records.events["evt_abc1"].attempts, 2);
        assert!(!records.events["evt_abc2"].acked);
        assert!(records.owns("evt_abc9") && !records.owns("evt_zzz"));
    }
}
