//! The real `hookonce` binary as a child process, with its logs captured to a file.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use super::eventually;
use super::redis::free_port;

pub const BIN: &str = env!("CARGO_BIN_EXE_hookonce");

/// A daemon process with its logs captured to a file.
pub struct Daemon {
    pub child: Child,
    pub port: u16,
    pub metrics_port: u16,
    pub log: PathBuf,
}

impl Daemon {
    pub async fn spawn(config: &Path, dir: &Path, env: &[(&str, &str)]) -> Self {
        let port = free_port();
        let metrics_port = free_port();
        let log = dir.join("daemon.log");
        let file = std::fs::File::options()
            .create(true)
            .append(true)
            .open(&log)
            .unwrap();
        let mut command = Command::new(BIN);
        command
            .args(["serve", "--config", config.to_str().unwrap()])
            .env("HOOKONCE__SERVER__LISTEN", format!("127.0.0.1:{port}"))
            .env(
                "HOOKONCE__SERVER__METRICS_LISTEN",
                format!("127.0.0.1:{metrics_port}"),
            )
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .stdin(Stdio::null());
        for (k, v) in env {
            command.env(k, v);
        }
        let daemon = Self {
            child: command.spawn().unwrap(),
            port,
            metrics_port,
            log,
        };
        let client = reqwest::Client::new();
        let url = daemon.url("/healthz");
        eventually(20, "the daemon to serve /healthz", || {
            let request = client.get(&url).send();
            async move { request.await.is_ok_and(|r| r.status() == 200) }
        })
        .await;
        daemon
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    pub async fn metric(&self, series: &str) -> f64 {
        let text = reqwest::get(format!("http://127.0.0.1:{}/metrics", self.metrics_port))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        text.lines()
            .find_map(|l| {
                l.strip_prefix(series)
                    .and_then(|r| r.strip_prefix(' '))
                    .map(|v| v.trim().parse().unwrap())
            })
            .unwrap_or(0.0)
    }

    pub fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .args([&format!("-{name}"), &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
