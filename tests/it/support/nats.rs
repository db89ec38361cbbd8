//! A real `nats-server -js` on a free loopback port with a temporary store, owned by one test.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::redis::free_port;

pub struct NatsServer {
    child: Option<Child>,
    pub port: u16,
    dir: tempfile::TempDir,
}

/// Finds `nats-server`; fails loudly (never skips) when it is missing.
pub fn nats_binary() -> PathBuf {
    for candidate in [
        "nats-server",
        "/usr/sbin/nats-server",
        "/usr/bin/nats-server",
        "/usr/local/bin/nats-server",
    ] {
        if Command::new(candidate)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
        {
            return PathBuf::from(candidate);
        }
    }
    panic!("nats-server not found: run ./scripts/test, which installs it (apt-get install nats-server)");
}

impl NatsServer {
    pub fn start() -> Self {
        let mut server = Self {
            child: None,
            port: free_port(),
            dir: tempfile::tempdir().expect("temp dir"),
        };
        server.spawn();
        server
    }

    fn spawn(&mut self) {
        let child = Command::new(nats_binary())
            .args([
                "-js",
                "-a",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-sd",
            ])
            .arg(self.dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn nats-server");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(Instant::now() < deadline, "nats-server did not come up");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts again on the same port and store directory (JetStream data survives).
    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
    }

    /// Every message of a JetStream stream, as (Nats-Msg-Id, payload).
    pub async fn messages(&self, stream: &str) -> Vec<(String, Vec<u8>)> {
        self.raw_messages(stream)
            .await
            .into_iter()
            .map(|message| {
                let id = message
                    .headers
                    .get("Nats-Msg-Id")
                    .map(|v| v.to_string())
                    .unwrap_or_default();
                (id, message.payload.to_vec())
            })
            .collect()
    }

    /// Every message of a JetStream stream, headers and all.
    pub async fn raw_messages(
        &self,
        stream: &str,
    ) -> Vec<async_nats::jetstream::message::StreamMessage> {
        let client = async_nats::connect(self.url()).await.unwrap();
        let jetstream = async_nats::jetstream::new(client);
        let mut stream = jetstream.get_stream(stream).await.unwrap();
        let info = stream.info().await.unwrap().clone();
        let mut messages = Vec::new();
        for sequence in info.state.first_sequence..=info.state.last_sequence {
            if info.state.messages == 0 {
                break;
            }
            messages.push(stream.get_raw_message(sequence).await.unwrap());
        }
        messages
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.stop();
    }
}
