//! The real `hookonce` binary as a child process, with its logs captured to a file.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use super::binary::BIN;
use super::redis::free_port;
use super::{eventually, metrics};

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

    /// `hookonce relay --config CONFIG` with `/metrics` on a free port (the only port it binds),
    /// its logs in `dir/relay-PORT.log`; returns once `/metrics` answers.
    pub async fn relay(config: &Path, dir: &Path, env: &[(&str, &str)]) -> Self {
        let metrics_port = free_port();
        let log = dir.join(format!("relay-{metrics_port}.log"));
        let file = std::fs::File::create(&log).unwrap();
        let mut command = Command::new(BIN);
        command
            .args(["relay", "--config", config.to_str().unwrap()])
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
        let relay = Self {
            child: command.spawn().unwrap(),
            port: 0,
            metrics_port,
            log,
        };
        let client = reqwest::Client::new();
        let url = format!("http://127.0.0.1:{metrics_port}/metrics");
        eventually(20, "the relay to serve /metrics", || {
            let request = client.get(&url).send();
            async move { request.await.is_ok_and(|r| r.status() == 200) }
        })
        .await;
        relay
    }

    /// The whole `/metrics` page.
    pub async fn metrics(&self) -> String {
        let addr = ([127, 0, 0, 1], self.metrics_port).into();
        metrics::scrape(&reqwest::Client::new(), addr).await
    }

    /// SIGKILL, and waits for the process to be gone.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// The value of one series in `/metrics`, 0 when absent (as [`super::TestApp::metric`]).
    pub async fn metric(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let addr = ([127, 0, 0, 1], self.metrics_port).into();
        let page = metrics::scrape(&reqwest::Client::new(), addr).await;
        metrics::value(&page, name, labels)
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
