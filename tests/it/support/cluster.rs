//! A real local Redis Cluster: three masters and three replicas on free loopback ports, each node
//! with its own directory, created with `redis-cli --cluster create` and killed when dropped.
//!
//! `cluster-node-timeout` is short (1 s) so that a killed master's replica takes over within a
//! few seconds. Every wait is for a condition (`CLUSTER INFO` says ok and covers every slot, each
//! master has its replica), never a fixed sleep.
//!
//! A cluster node also listens on its port + 10 000 (the cluster bus): node ports come from
//! [`free_cluster_port`], which keeps both below the kernel's ephemeral range and never draws a
//! node port where another node's bus port could be. A port can still be taken between that check
//! and the node's bind (by another test's process, which checks the same way): a node that exits
//! before answering is started again on another pair, a few times at most.
//!
//! In TLS mode ([`RedisCluster::start_tls`]) every node listens on its `--tls-port` only, and the
//! cluster bus and replication use TLS too (`tls-cluster yes`, `tls-replication yes`).

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use std::net::TcpListener;

use super::redis::redis_binary;
use super::tls::TlsFiles;

const NODE_TIMEOUT_MS: &str = "1000";
pub const SLOTS: usize = 16384;

/// A free loopback port with its cluster-bus port (+10 000) free too, both below the kernel's
/// ephemeral range (read from `ip_local_port_range`; 32 768 and up by default): a port in that
/// range can be taken between this check and the node's own bind by any connection another test
/// opens, or by any server bound to port 0, and the node then exits without ever answering.
/// Node ports stay below 20 000 where the range allows it, so that no node port is ever another
/// node's bus port (20 000 and up).
pub fn free_cluster_port() -> u16 {
    // The highest node port whose bus port is still below the range; where the range starts too
    // low to leave room, any pair below redis-server's limit (55 535 + 10 000).
    let top = ephemeral_start()
        .and_then(|start| start.checked_sub(10_001))
        .filter(|&top| top >= 12_000)
        .map_or(55_535, |top| top.min(19_999));
    for _ in 0..1000 {
        let port = rand::random_range(10_000..=top);
        let free = |p: u16| TcpListener::bind(("127.0.0.1", p)).is_ok();
        if free(port) && free(port + 10_000) {
            return port;
        }
    }
    panic!("no free port pair for a cluster node in 10000..={top}");
}

/// The first port of the kernel's ephemeral range, if it can be read.
fn ephemeral_start() -> Option<u16> {
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok()?;
    range.split_whitespace().next()?.parse().ok()
}

/// One `redis-server --cluster-enabled yes`.
struct Node {
    port: u16,
    dir: std::path::PathBuf,
    child: Option<Child>,
    tls: Option<Arc<TlsFiles>>,
}

impl Node {
    /// Starts the node; its `nodes.conf` keeps its identity across a restart, so a killed
    /// master that comes back rejoins as a replica of the node that took over.
    fn spawn(&mut self) {
        let listen = match &self.tls {
            Some(tls) => {
                let mut args = tls.server_args(self.port, "optional");
                args.extend(["--tls-cluster", "yes", "--tls-replication", "yes"].map(String::from));
                args
            }
            None => vec!["--port".to_owned(), self.port.to_string()],
        };
        let child = Command::new(redis_binary())
            .args(listen)
            .args(["--bind", "127.0.0.1"])
            .args([
                "--cluster-enabled",
                "yes",
                "--cluster-node-timeout",
                NODE_TIMEOUT_MS,
            ])
            .args(["--cluster-config-file", "nodes.conf"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            // A replica's first sync starts at once instead of after the default 5 s.
            .args(["--repl-diskless-sync-delay", "0"])
            .arg("--dir")
            .arg(&self.dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn redis-server");
        self.child = Some(child);
    }
}

/// Six nodes joined into a cluster; every node is killed on drop.
pub struct RedisCluster {
    nodes: Vec<Node>,
    _dir: tempfile::TempDir,
    tls: Option<Arc<TlsFiles>>,
}

impl RedisCluster {
    pub fn start() -> Self {
        Self::start_with(None)
    }

    /// A cluster whose nodes speak TLS only, with the certificates of `tls`.
    pub fn start_tls(tls: Arc<TlsFiles>) -> Self {
        Self::start_with(Some(tls))
    }

    fn start_with(tls: Option<Arc<TlsFiles>>) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut cluster = Self {
            nodes: Vec::new(),
            _dir: dir,
            tls,
        };
        for i in 0..6 {
            let dir = cluster._dir.path().join(format!("node{i}"));
            std::fs::create_dir(&dir).unwrap();
            let mut node = Node {
                port: free_cluster_port(),
                dir,
                child: None,
                tls: cluster.tls.clone(),
            };
            node.spawn();
            cluster.nodes.push(node);
        }
        for node in &mut cluster.nodes {
            let mut starts = 1;
            wait_for(10, "a cluster node to answer PING", || {
                if let Some(status) = node.child.as_mut().and_then(|c| c.try_wait().ok()?) {
                    // Its port or bus port was taken after the check (another test's server):
                    // another pair, with a fresh identity.
                    let port = node.port;
                    assert!(
                        starts < 3,
                        "redis-server on port {port} (bus {}) exited {starts} times: {status}",
                        port + 10_000
                    );
                    starts += 1;
                    let _ = std::fs::remove_file(node.dir.join("nodes.conf"));
                    node.port = free_cluster_port();
                    node.spawn();
                    return false;
                }
                ping(node.tls.as_deref(), node.port).is_some()
            });
        }
        cluster.create();
        cluster
    }

    fn create(&self) {
        let addresses: Vec<String> = self
            .nodes
            .iter()
            .map(|node| format!("127.0.0.1:{}", node.port))
            .collect();
        let mut command = Command::new("redis-cli");
        if let Some(tls) = &self.tls {
            command
                .args(["--tls", "--cacert"])
                .arg(&tls.ca)
                .arg("--cert")
                .arg(&tls.client_cert)
                .arg("--key")
                .arg(&tls.client_key);
        }
        let output = command
            .arg("--cluster")
            .arg("create")
            .args(&addresses)
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .expect("run redis-cli --cluster create");
        assert!(
            output.status.success(),
            "redis-cli --cluster create: {}",
            String::from_utf8_lossy(&output.stdout)
        );
        self.wait_until_healthy();
    }

    /// Waits until every live node says `cluster_state:ok` with every slot covered, and every
    /// master holding slots has a replica whose link is up (so a failover can happen).
    pub fn wait_until_healthy(&self) {
        wait_for(20, "the cluster to be ok on every node", || {
            self.live_ports().iter().all(|&port| {
                info(self.tls(), port, &["CLUSTER", "INFO"]).is_some_and(|text| {
                    text.contains("cluster_state:ok")
                        && text.contains(&format!("cluster_slots_ok:{SLOTS}"))
                })
            }) && self.masters().iter().all(|&port| {
                info(self.tls(), port, &["INFO", "replication"])
                    .is_some_and(|text| text.contains("state=online"))
            })
        });
    }

    /// `redis://` URLs of every node (the daemon's seed nodes); `rediss://` in TLS mode.
    pub fn seeds(&self) -> Vec<String> {
        let scheme = if self.tls.is_some() {
            "rediss"
        } else {
            "redis"
        };
        self.nodes
            .iter()
            .map(|node| format!("{scheme}://127.0.0.1:{}", node.port))
            .collect()
    }

    fn tls(&self) -> Option<&TlsFiles> {
        self.tls.as_deref()
    }

    fn live_ports(&self) -> Vec<u16> {
        self.nodes
            .iter()
            .filter(|node| node.child.is_some())
            .map(|node| node.port)
            .collect()
    }

    /// Ports of the live masters that own slots, as a live node sees them.
    pub fn masters(&self) -> Vec<u16> {
        let mut masters: Vec<u16> = self
            .slot_ranges()
            .into_iter()
            .map(|(_, _, port)| port)
            .collect();
        masters.sort_unstable();
        masters.dedup();
        masters
    }

    /// `(first, last, master port)` of every slot range, from `CLUSTER SLOTS` on a live node.
    pub fn slot_ranges(&self) -> Vec<(u16, u16, u16)> {
        for port in self.live_ports() {
            let Ok(mut conn) = node_connection(self.tls(), port) else {
                continue;
            };
            let reply: redis::RedisResult<Vec<Vec<redis::Value>>> =
                redis::cmd("CLUSTER").arg("SLOTS").query(&mut conn);
            if let Ok(ranges) = reply {
                return ranges
                    .iter()
                    .filter_map(|range| parse_range(range))
                    .collect();
            }
        }
        Vec::new()
    }

    /// The port of the master that owns `slot`.
    pub fn master_of_slot(&self, slot: u16) -> u16 {
        self.slot_ranges()
            .into_iter()
            .find(|&(first, last, _)| (first..=last).contains(&slot))
            .map(|(_, _, port)| port)
            .unwrap_or_else(|| panic!("no master owns slot {slot}"))
    }

    /// `CLUSTER KEYSLOT key`, as the cluster computes it.
    pub fn keyslot(&self, key: &str) -> u16 {
        let port = self.live_ports()[0];
        redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(&mut node_connection(self.tls(), port).unwrap())
            .unwrap()
    }

    /// A cluster client of redis-rs (it follows `MOVED`), for reading back what was written.
    pub fn client(&self) -> redis::cluster::ClusterConnection {
        let mut builder = redis::cluster::ClusterClientBuilder::new(self.seeds());
        if let Some(tls) = &self.tls {
            builder = builder.certs(tls.certificates());
        }
        builder
            .build()
            .unwrap()
            .get_connection()
            .expect("connect to the test cluster")
    }

    /// SIGKILLs the node on `port` and waits for it to exit.
    pub fn kill(&mut self, port: u16) {
        let node = self.nodes.iter_mut().find(|n| n.port == port).unwrap();
        if let Some(mut child) = node.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the killed node on `port` again and waits until the cluster is whole: every slot
    /// served and every master with its replica.
    pub fn restart(&mut self, port: u16) {
        let node = self.nodes.iter_mut().find(|n| n.port == port).unwrap();
        node.spawn();
        let tls = self.tls.clone();
        wait_for(10, "the restarted node to answer PING", || {
            ping(tls.as_deref(), port).is_some()
        });
        self.wait_until_healthy();
    }

    /// The node ID of the node on `port` (`CLUSTER MYID`).
    pub fn node_id(&self, port: u16) -> String {
        redis::cmd("CLUSTER")
            .arg("MYID")
            .query(&mut node_connection(self.tls(), port).unwrap())
            .unwrap()
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            if let Some(mut child) = node.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

/// A plain connection to one node, with short timeouts.
pub fn connection(port: u16) -> redis::RedisResult<redis::Connection> {
    node_connection(None, port)
}

/// A connection to one node, over TLS with the suite's client certificate when `tls` is given.
fn node_connection(tls: Option<&TlsFiles>, port: u16) -> redis::RedisResult<redis::Connection> {
    let client = match tls {
        Some(tls) => {
            redis::Client::build_with_tls(format!("rediss://127.0.0.1:{port}"), tls.certificates())?
        }
        None => redis::Client::open(format!("redis://127.0.0.1:{port}"))?,
    };
    let conn = client.get_connection_with_timeout(Duration::from_millis(300))?;
    conn.set_read_timeout(Some(Duration::from_secs(2)))?;
    Ok(conn)
}

/// One `CLUSTER SLOTS` entry: `[first, last, [ip, port, id, …], replicas…]`.
fn parse_range(range: &[redis::Value]) -> Option<(u16, u16, u16)> {
    let number = |value: &redis::Value| match value {
        redis::Value::Int(n) => u16::try_from(*n).ok(),
        _ => None,
    };
    let redis::Value::Array(master) = range.get(2)? else {
        return None;
    };
    Some((
        number(range.first()?)?,
        number(range.get(1)?)?,
        number(master.get(1)?)?,
    ))
}

fn ping(tls: Option<&TlsFiles>, port: u16) -> Option<String> {
    redis::cmd("PING")
        .query(&mut node_connection(tls, port).ok()?)
        .ok()
}

fn info(tls: Option<&TlsFiles>, port: u16, command: &[&str]) -> Option<String> {
    let mut cmd = redis::cmd(command[0]);
    for arg in &command[1..] {
        cmd.arg(*arg);
    }
    cmd.query(&mut node_connection(tls, port).ok()?).ok()
}

/// Polls `probe` every 50 ms until it holds, for at most `seconds` (a blocking wait: the
/// harness runs outside the daemon's runtime or before it starts).
pub fn wait_for(seconds: u64, what: &str, mut probe: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    while !probe() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}
