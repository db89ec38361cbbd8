//! A real `redis-server` on a free loopback port, owned by one test: plain TCP, or TLS only
//! (its own `--tls-port`, with certificates from [`super::tls`]).

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::tls::TlsFiles;

/// A redis-server child process; killed when dropped.
pub struct RedisServer {
    child: Option<Child>,
    pub port: u16,
    dir: tempfile::TempDir,
    extra: Vec<String>,
    /// TLS mode: the certificates, and whether clients must present one (`yes`) or may
    /// (`optional`). `port` is then the TLS port, and plain TCP is off.
    tls: Option<(Arc<TlsFiles>, String)>,
}

/// Finds `redis-server`; fails loudly (never skips) when it is missing.
pub fn redis_binary() -> PathBuf {
    for candidate in [
        "redis-server",
        "/usr/bin/redis-server",
        "/usr/local/bin/redis-server",
    ] {
        if Command::new(candidate)
            .arg("--version")
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
        {
            return PathBuf::from(candidate);
        }
    }
    panic!("redis-server not found: run ./scripts/test, which installs it (apt-get install redis-server)");
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind an ephemeral port")
        .port()
}

impl RedisServer {
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// Starts with extra `--key value` arguments, e.g. `["--maxmemory-policy", "allkeys-lru"]`.
    pub fn start_with(extra: &[&str]) -> Self {
        let mut server = Self {
            child: None,
            port: free_port(),
            dir: tempfile::tempdir().expect("temp dir"),
            extra: extra.iter().map(|s| s.to_string()).collect(),
            tls: None,
        };
        server.spawn();
        server
    }

    /// Starts a server that speaks TLS only, on its `--tls-port`, requiring client certificates
    /// when `auth_clients` is `yes` (`optional`: accepted, not required).
    pub fn start_tls(tls: Arc<TlsFiles>, auth_clients: &str, extra: &[&str]) -> Self {
        let mut server = Self {
            child: None,
            port: free_port(),
            dir: tempfile::tempdir().expect("temp dir"),
            extra: extra.iter().map(|s| s.to_string()).collect(),
            tls: Some((tls, auth_clients.to_owned())),
        };
        server.spawn();
        server
    }

    fn spawn(&mut self) {
        let listen = match &self.tls {
            Some((tls, auth_clients)) => tls.server_args(self.port, auth_clients),
            None => vec!["--port".to_owned(), self.port.to_string()],
        };
        let child = Command::new(redis_binary())
            .args(listen)
            .args(["--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .arg("--dir")
            .arg(self.dir.path())
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn redis-server");
        self.child = Some(child);
        self.wait_until_up();
    }

    fn wait_until_up(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        let client = self.client();
        while Instant::now() < deadline {
            if let Ok(mut conn) = client.get_connection_with_timeout(Duration::from_millis(200)) {
                if redis::cmd("PING").query::<String>(&mut conn).is_ok() {
                    return;
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("redis-server on port {} did not come up", self.port);
    }

    /// `rediss://` in TLS mode.
    pub fn url(&self) -> String {
        match self.tls {
            Some(_) => format!("rediss://127.0.0.1:{}", self.port),
            None => format!("redis://127.0.0.1:{}", self.port),
        }
    }

    /// A client for the test's own reads; in TLS mode it trusts the suite's CA and presents
    /// the client certificate.
    pub fn client(&self) -> redis::Client {
        match &self.tls {
            Some((tls, _)) => redis::Client::build_with_tls(self.url(), tls.certificates()),
            None => redis::Client::open(self.url()),
        }
        .expect("a client for the test redis")
    }

    /// Kills the server (SIGKILL) and waits for it to exit.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port (with an empty dataset).
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// The process ID of the running server (for signals such as SIGSTOP).
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("the server is running").id()
    }

    pub fn connection(&self) -> redis::Connection {
        self.client()
            .get_connection()
            .expect("connect to test redis")
    }

    /// How many keys hold events, records or streams: `DBSIZE` without the partition counts
    /// every daemon records at start (`<prefix>:{<source>}:partitions`), which are there
    /// before any request and would make "nothing was written" checks count the start.
    pub fn dbsize(&self) -> i64 {
        let mut connection = self.connection();
        let all: i64 = redis::cmd("DBSIZE").query(&mut connection).unwrap();
        let counts: Vec<String> = redis::cmd("KEYS")
            .arg("*:partitions")
            .query(&mut connection)
            .unwrap();
        all - counts.len() as i64
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}
