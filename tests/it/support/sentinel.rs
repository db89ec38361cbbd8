//! A real Sentinel group: one master, one replica and three `redis-server --sentinel` processes
//! on free loopback ports, each with its own directory, all killed when dropped.
//!
//! The data nodes and the sentinels have *different* passwords, so a test can show that each
//! credential goes where it belongs (and is redacted wherever it is printed). The sentinels use
//! a short `down-after-milliseconds` so that a killed master is replaced within seconds; every
//! wait is for a condition (`SENTINEL get-master-addr-by-name`, the replica's link), never a
//! fixed sleep.
//!
//! In TLS mode ([`SentinelGroup::start_tls`]) every process listens on its `--tls-port` only,
//! replication and the sentinels' links to the data nodes use TLS (`tls-replication yes`), and
//! the test's own connections present the suite's client certificate.

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use super::cluster::wait_for;
use super::redis::{free_port, redis_binary};
use super::tls::TlsFiles;

pub const MASTER_NAME: &str = "hookonce-test";
/// The data nodes' password (`requirepass` and `masterauth`).
pub const MASTER_PASSWORD: &str = "master-pw-7c1e";
/// The sentinels' own password.
pub const SENTINEL_PASSWORD: &str = "sentinel-pw-93ab";

struct Process {
    port: u16,
    child: Option<Child>,
    /// How it was started, to start it again the same way.
    args: Vec<std::ffi::OsString>,
}

impl Process {
    fn spawn(port: u16, args: Vec<std::ffi::OsString>) -> Self {
        let child = Command::new(redis_binary())
            .args(&args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn redis-server");
        Self {
            port,
            child: Some(child),
            args,
        }
    }
}

/// A master, its replica and three sentinels watching it.
pub struct SentinelGroup {
    data: Vec<Process>,
    sentinels: Vec<Process>,
    dir: tempfile::TempDir,
    tls: Option<Arc<TlsFiles>>,
}

impl SentinelGroup {
    pub fn start() -> Self {
        Self::start_with(None)
    }

    /// A group whose every process speaks TLS only, with the certificates of `tls`.
    pub fn start_tls(tls: Arc<TlsFiles>) -> Self {
        Self::start_with(Some(tls))
    }

    fn start_with(tls: Option<Arc<TlsFiles>>) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut group = Self {
            data: Vec::new(),
            sentinels: Vec::new(),
            dir,
            tls,
        };
        let master = group.spawn_data(None);
        group.spawn_data(Some(master));
        group.wait_for_replica(master);
        for _ in 0..3 {
            group.spawn_sentinel(master);
        }
        wait_for(
            45,
            "every sentinel to see the replica and the others",
            || {
                group.sentinels.iter().all(|s| {
                    let info: Option<Vec<String>> =
                        sentinel_query(group.tls(), s.port, &["SENTINEL", "MASTER", MASTER_NAME]);
                    info.is_some_and(|info| {
                        field(&info, "num-slaves") == Some("1")
                            && field(&info, "num-other-sentinels") == Some("2")
                    })
                })
            },
        );
        group
    }

    fn spawn_data(&mut self, replica_of: Option<u16>) -> u16 {
        let port = free_port();
        let node_dir = self.dir.path().join(format!("data{port}"));
        std::fs::create_dir(&node_dir).unwrap();
        let listen = match &self.tls {
            Some(tls) => {
                let mut args = tls.server_args(port, "optional");
                args.extend(["--tls-replication".to_owned(), "yes".to_owned()]);
                args
            }
            None => vec!["--port".to_owned(), port.to_string()],
        };
        let mut args: Vec<std::ffi::OsString> = listen.into_iter().map(Into::into).collect();
        args.extend(
            [
                "--bind",
                "127.0.0.1",
                "--requirepass",
                MASTER_PASSWORD,
                "--masterauth",
                MASTER_PASSWORD,
                "--save",
                "",
                "--appendonly",
                "no",
                "--daemonize",
                "no",
                // A replica's first sync starts at once instead of after the default 5 s.
                "--repl-diskless-sync-delay",
                "0",
                "--dir",
            ]
            .iter()
            .map(Into::into),
        );
        args.push(node_dir.into());
        if let Some(master) = replica_of {
            args.extend(["--replicaof", "127.0.0.1", &master.to_string()].map(Into::into));
        }
        self.data.push(Process::spawn(port, args));
        wait_for(10, "a data node to answer PING", || {
            data_ping(self.tls(), port)
        });
        port
    }

    fn spawn_sentinel(&mut self, master: u16) {
        let port = free_port();
        let config = self.dir.path().join(format!("sentinel{port}.conf"));
        let listen = match &self.tls {
            Some(tls) => format!(
                "port 0\ntls-port {port}\ntls-cert-file {}\ntls-key-file {}\n\
                 tls-ca-cert-file {}\ntls-auth-clients optional\ntls-replication yes\n",
                tls.server_cert.display(),
                tls.server_key.display(),
                tls.ca.display()
            ),
            None => format!("port {port}\n"),
        };
        let text = format!(
            "{listen}bind 127.0.0.1\ndir {dir}\nrequirepass {SENTINEL_PASSWORD}\n\
             sentinel sentinel-pass {SENTINEL_PASSWORD}\n\
             sentinel monitor {MASTER_NAME} 127.0.0.1 {master} 2\n\
             sentinel auth-pass {MASTER_NAME} {MASTER_PASSWORD}\n\
             sentinel down-after-milliseconds {MASTER_NAME} 1000\n\
             sentinel failover-timeout {MASTER_NAME} 10000\n\
             sentinel parallel-syncs {MASTER_NAME} 1\n",
            dir = self.dir.path().display()
        );
        std::fs::write(&config, text).unwrap();
        let args = vec![config.into_os_string(), "--sentinel".into()];
        self.sentinels.push(Process::spawn(port, args));
    }

    fn wait_for_replica(&self, master: u16) {
        wait_for(45, "the replica's link to the master", || {
            data_query::<String>(self.tls(), master, &["INFO", "replication"])
                .is_some_and(|text| text.contains("state=online"))
        });
    }

    /// `redis://` URLs of the sentinels (`rediss://` in TLS mode), without credentials (the
    /// daemon gets them apart).
    pub fn sentinel_urls(&self) -> Vec<String> {
        let scheme = if self.tls.is_some() {
            "rediss"
        } else {
            "redis"
        };
        self.sentinels
            .iter()
            .map(|s| format!("{scheme}://127.0.0.1:{}", s.port))
            .collect()
    }

    /// The master's port as the first answering sentinel names it.
    pub fn master(&self) -> u16 {
        for sentinel in &self.sentinels {
            let reply: Option<Vec<String>> = sentinel_query(
                self.tls(),
                sentinel.port,
                &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER_NAME],
            );
            if let Some([_, port]) = reply.as_deref() {
                return port.parse().unwrap();
            }
        }
        panic!("no sentinel names the master");
    }

    /// The data node that is not `port` (the replica of a master, or the master of a replica).
    pub fn other_data_node(&self, port: u16) -> u16 {
        self.data.iter().find(|p| p.port != port).unwrap().port
    }

    /// SIGKILLs the data node on `port`.
    pub fn kill(&mut self, port: u16) {
        let node = self.data.iter_mut().find(|p| p.port == port).unwrap();
        kill(node);
    }

    /// Starts the killed data node on `port` again (empty: nothing is persisted) as a replica of
    /// `master`, as an operator's restart would, and waits until its link is up.
    ///
    /// Left to the sentinels, a node restarted as a master is converted only after their next
    /// `INFO` to it (every 10 s) and a further 8 s of it claiming to be a master: close to 20 s
    /// before its sync even starts, which a loaded machine turned into a timeout.
    pub fn restart_as_replica(&mut self, port: u16, master: u16) {
        let node = self.data.iter_mut().find(|p| p.port == port).unwrap();
        let mut args = node.args.clone();
        if let Some(at) = args.iter().position(|arg| arg == "--replicaof") {
            args.drain(at..at + 3);
        }
        args.extend(["--replicaof", "127.0.0.1", &master.to_string()].map(Into::into));
        *node = Process::spawn(port, args);
        wait_for(10, "the restarted node to answer PING", || {
            data_ping(self.tls(), port)
        });
        self.wait_for_replica_of(port, master);
    }

    /// Asks a sentinel for a failover (`SENTINEL FAILOVER`): the replica is promoted and the
    /// master, still running, is demoted to its replica (its clients are disconnected, and a
    /// write reaching it gets `READONLY`).
    pub fn failover(&self) {
        let reply: Option<String> = sentinel_query(
            self.tls(),
            self.sentinels[0].port,
            &["SENTINEL", "FAILOVER", MASTER_NAME],
        );
        assert_eq!(reply.as_deref(), Some("OK"), "SENTINEL FAILOVER");
    }

    /// Waits until `port` is a replica of `master` with its link up.
    pub fn wait_for_replica_of(&self, port: u16, master: u16) {
        wait_for(45, "the node to replicate the master", || {
            data_query::<String>(self.tls(), port, &["INFO", "replication"]).is_some_and(|text| {
                text.contains("role:slave")
                    && text.contains(&format!("master_port:{master}"))
                    && text.contains("master_link_status:up")
            })
        });
    }

    /// Waits until the sentinels name `port` as the master and it accepts writes.
    pub fn wait_for_master(&self, port: u16, seconds: u64) {
        wait_for(seconds, "the sentinels to promote the replica", || {
            let role: Option<Vec<redis::Value>> = data_query(self.tls(), port, &["ROLE"]);
            let is_master = role.is_some_and(
                |role| matches!(role.first(), Some(redis::Value::BulkString(r)) if r == b"master"),
            );
            self.master() == port && is_master
        });
    }

    /// An authenticated connection to a data node.
    pub fn data_connection(&self, port: u16) -> redis::Connection {
        data_connection(self.tls(), port).expect("connect to a data node")
    }

    fn tls(&self) -> Option<&TlsFiles> {
        self.tls.as_deref()
    }
}

impl Drop for SentinelGroup {
    fn drop(&mut self) {
        for process in self.data.iter_mut().chain(self.sentinels.iter_mut()) {
            kill(process);
        }
    }
}

fn kill(process: &mut Process) {
    if let Some(mut child) = process.child.take() {
        let _ = child.kill();
        let _ = child.wait();
    }
}

fn connect(
    tls: Option<&TlsFiles>,
    port: u16,
    password: &str,
) -> redis::RedisResult<redis::Connection> {
    let client = match tls {
        Some(tls) => redis::Client::build_with_tls(
            format!("rediss://:{password}@127.0.0.1:{port}"),
            tls.certificates(),
        )?,
        None => redis::Client::open(format!("redis://:{password}@127.0.0.1:{port}"))?,
    };
    let conn = client.get_connection_with_timeout(Duration::from_millis(300))?;
    conn.set_read_timeout(Some(Duration::from_secs(2)))?;
    Ok(conn)
}

fn data_connection(tls: Option<&TlsFiles>, port: u16) -> redis::RedisResult<redis::Connection> {
    connect(tls, port, MASTER_PASSWORD)
}

fn data_ping(tls: Option<&TlsFiles>, port: u16) -> bool {
    data_connection(tls, port)
        .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c))
        .is_ok()
}

fn query<T: redis::FromRedisValue>(
    tls: Option<&TlsFiles>,
    port: u16,
    password: &str,
    args: &[&str],
) -> Option<T> {
    let mut conn = connect(tls, port, password).ok()?;
    let mut cmd = redis::cmd(args[0]);
    for arg in &args[1..] {
        cmd.arg(*arg);
    }
    cmd.query(&mut conn).ok()
}

fn data_query<T: redis::FromRedisValue>(
    tls: Option<&TlsFiles>,
    port: u16,
    args: &[&str],
) -> Option<T> {
    query(tls, port, MASTER_PASSWORD, args)
}

fn sentinel_query<T: redis::FromRedisValue>(
    tls: Option<&TlsFiles>,
    port: u16,
    args: &[&str],
) -> Option<T> {
    query(tls, port, SENTINEL_PASSWORD, args)
}

/// The value after `name` in a flat `[name, value, …]` reply.
fn field<'a>(flat: &'a [String], name: &str) -> Option<&'a str> {
    flat.chunks(2)
        .find(|pair| pair[0] == name)
        .and_then(|pair| pair.get(1))
        .map(String::as_str)
}
