//! The real `hookonce` binary as a child process, with its logs captured to a file.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use super::binary::BIN;
use super::redis::free_port;
use super::{eventually, metrics};

/// A process's resident memory, in bytes ([`Daemon::resident`]).
#[derive(Debug, Clone, Copy)]
pub struct Resident {
    pub now: u64,
    pub peak: u64,
}

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
        let listen = format!("127.0.0.1:{port}");
        let mut env = env.to_vec();
        env.push(("HOOKONCE__SERVER__LISTEN", &listen));
        let daemon = Self::start("serve", config, (port, metrics_port), log, &env);
        daemon
            .wait_for("the daemon to serve /healthz", daemon.url("/healthz"))
            .await;
        daemon
    }

    /// `hookonce relay --config CONFIG` with `/metrics` on a free port (the only port it binds),
    /// its logs in `dir/relay-PORT.log`; returns once `/metrics` answers.
    pub async fn relay(config: &Path, dir: &Path, env: &[(&str, &str)]) -> Self {
        let metrics_port = free_port();
        let log = dir.join(format!("relay-{metrics_port}.log"));
        let relay = Self::start("relay", config, (0, metrics_port), log, env);
        let url = format!("http://127.0.0.1:{metrics_port}/metrics");
        relay.wait_for("the relay to serve /metrics", url).await;
        relay
    }

    /// Runs `hookonce COMMAND --config CONFIG` with `/metrics` on `ports.1`, stdout and stderr
    /// appended to `log`.
    fn start(
        command: &str,
        config: &Path,
        (port, metrics_port): (u16, u16),
        log: PathBuf,
        env: &[(&str, &str)],
    ) -> Self {
        let file = std::fs::File::options()
            .create(true)
            .append(true)
            .open(&log)
            .unwrap();
        let mut child = Command::new(BIN);
        child
            .args([command, "--config", config.to_str().unwrap()])
            .env(
                "HOOKONCE__SERVER__METRICS_LISTEN",
                format!("127.0.0.1:{metrics_port}"),
            )
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .stdin(Stdio::null());
        for (k, v) in env {
            child.env(k, v);
        }
        Self {
            child: child.spawn().unwrap(),
            port,
            metrics_port,
            log,
        }
    }

    /// Waits until `url` answers 200.
    async fn wait_for(&self, what: &str, url: String) {
        let client = reqwest::Client::new();
        eventually(20, what, || {
            let request = client.get(&url).send();
            async move { request.await.is_ok_and(|r| r.status() == 200) }
        })
        .await;
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

    /// The process's resident memory now and at its peak (`VmRSS`, `VmHWM` of `/proc/PID/status`),
    /// in bytes.
    pub fn resident(&self) -> Resident {
        let pid = self.child.id();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let field = |name: &str| {
            status
                .lines()
                .find_map(|line| line.strip_prefix(name))
                .and_then(|rest| {
                    rest.trim()
                        .trim_end_matches("kB")
                        .trim()
                        .parse::<u64>()
                        .ok()
                })
                .unwrap_or_else(|| panic!("{name} in /proc/{pid}/status"))
                * 1024
        };
        Resident {
            now: field("VmRSS:"),
            peak: field("VmHWM:"),
        }
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
