//! A real RabbitMQ broker (Debian's `rabbitmq-server`) in the foreground on free loopback ports,
//! with its own node name, HOME, epmd and data directories, shared by the tests of one process
//! that overlap, and a consumer that declares and reads what a test needs.
//!
//! Start-up takes 5-20 s (an Erlang VM and the broker's boot steps), so [`RabbitBroker::shared`]
//! hands every test of the process that asks while one runs the same broker; each test then uses
//! an exchange and queue of its own. The broker stops when the last holder drops it, by PID: the
//! node (its pid file names the VM) and then the epmd this harness started on its own port, which
//! would otherwise outlive the node. Nothing here touches a process it did not start.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use lapin::options::{
    BasicGetOptions, ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Connection, ConnectionProperties, ExchangeKind};

use super::redis::free_port;

/// How long a boot may take on a loaded machine before the test fails.
const BOOT_DEADLINE: Duration = Duration::from_secs(90);
/// First starts of a broker: a port found free can be taken before the broker binds it.
const START_ATTEMPTS: u32 = 3;

pub struct RabbitBroker {
    pub port: u16,
    dist_port: u16,
    epmd_port: u16,
    node: String,
    dir: tempfile::TempDir,
    epmd: Option<Child>,
    server: Option<Child>,
    /// How long the last boot took, for the test log.
    pub boot: Duration,
}

/// Finds the broker's start script (the real one, not /usr/sbin's wrapper that `su`s to the
/// `rabbitmq` user and writes to /var/log); fails loudly (never skips) when it is missing.
fn server_script() -> PathBuf {
    let script = PathBuf::from("/usr/lib/rabbitmq/bin/rabbitmq-server");
    assert!(
        script.exists(),
        "rabbitmq-server not found: run ./scripts/test, which installs it (apt-get install rabbitmq-server)"
    );
    script
}

/// Numbers the nodes of this process, so that no two share a name.
static NODES: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

static SHARED: Mutex<Weak<RabbitBroker>> = Mutex::new(Weak::new());

impl RabbitBroker {
    /// The broker the overlapping tests of this process share, started when there is none.
    pub fn shared() -> Arc<RabbitBroker> {
        let mut shared = SHARED.lock().unwrap();
        if let Some(broker) = shared.upgrade() {
            return broker;
        }
        let broker = Arc::new(RabbitBroker::start());
        *shared = Arc::downgrade(&broker);
        broker
    }

    /// A broker of the caller's own (one that a test stops and restarts).
    pub fn start() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("enabled_plugins"), "[].\n").unwrap();
        let epmd_port = free_port();
        let epmd = Command::new("epmd")
            .args(["-port", &epmd_port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn epmd (erlang-base)");
        let mut broker = Self {
            port: free_port(),
            dist_port: free_port(),
            epmd_port,
            node: format!(
                "hookonce-test-{}-{}@localhost",
                std::process::id(),
                NODES.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            ),
            dir,
            epmd: Some(epmd),
            server: None,
            boot: Duration::ZERO,
        };
        // free_port only finds a port that was free a moment ago: under the whole suite another
        // test's server can bind it before the broker does. A first start may then take other
        // ports (a restart may not: its clients know the old ones).
        for _ in 1..START_ATTEMPTS {
            match broker.try_spawn() {
                Ok(()) => return broker,
                Err(log) if log.contains("eaddrinuse") => {
                    eprintln!("rabbitmq-server found a port taken; starting it on others");
                    broker.port = free_port();
                    broker.dist_port = free_port();
                }
                Err(log) => panic!("rabbitmq-server exited: {log}"),
            }
        }
        broker.spawn();
        broker
    }

    fn spawn(&mut self) {
        if let Err(log) = self.try_spawn() {
            panic!("rabbitmq-server exited: {log}");
        }
    }

    /// Starts the node and waits until it accepts AMQP; `Err` with the log's tail when it
    /// exits first.
    fn try_spawn(&mut self) -> Result<(), String> {
        let base = self.dir.path();
        let started = Instant::now();
        let log = std::fs::File::create(base.join("server.log")).unwrap();
        let child = Command::new(server_script())
            .env("HOME", base)
            .env("RABBITMQ_NODENAME", &self.node)
            .env("RABBITMQ_NODE_IP_ADDRESS", "127.0.0.1")
            .env("RABBITMQ_NODE_PORT", self.port.to_string())
            .env("RABBITMQ_DIST_PORT", self.dist_port.to_string())
            .env("ERL_EPMD_PORT", self.epmd_port.to_string())
            .env("RABBITMQ_MNESIA_BASE", base.join("mnesia"))
            .env("RABBITMQ_LOG_BASE", base.join("log"))
            .env("RABBITMQ_PID_FILE", base.join("node.pid"))
            .env(
                "RABBITMQ_ENABLED_PLUGINS_FILE",
                base.join("enabled_plugins"),
            )
            // No system-wide configuration: /etc/rabbitmq belongs to the package's own service.
            .env("RABBITMQ_CONFIG_FILE", base.join("none"))
            .env("RABBITMQ_ADVANCED_CONFIG_FILE", base.join("none.config"))
            .env("RABBITMQ_CONF_ENV_FILE", base.join("none-env"))
            .current_dir(base)
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("spawn rabbitmq-server");
        self.server = Some(child);
        // A thread of its own, so that this works from inside a test's runtime as well.
        std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .unwrap();
                    runtime.block_on(self.await_amqp())
                })
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        })?;
        self.boot = started.elapsed();
        eprintln!("rabbitmq-server ready in {:?}", self.boot);
        Ok(())
    }

    /// Polls an AMQP connection (the port opens before the broker accepts logins).
    async fn await_amqp(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + BOOT_DEADLINE;
        loop {
            let attempt = tokio::time::timeout(
                Duration::from_secs(2),
                Connection::connect(&self.url(), ConnectionProperties::default()),
            )
            .await;
            if let Ok(Ok(connection)) = attempt {
                let _ = connection.close(200, "ready".into()).await;
                return Ok(());
            }
            if let Some(status) = self.server.as_mut().and_then(|c| c.try_wait().unwrap()) {
                self.server = None;
                return Err(format!("({status}): {}", self.log_tail()));
            }
            assert!(
                Instant::now() < deadline,
                "rabbitmq-server did not accept AMQP within {BOOT_DEADLINE:?}: {}",
                self.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default();
        log.lines().rev().take(20).collect::<Vec<_>>().join("\n")
    }

    /// The default vhost, guest/guest (allowed from loopback).
    pub fn url(&self) -> String {
        format!("amqp://guest:guest@127.0.0.1:{}/%2f", self.port)
    }

    /// Stops the node: SIGTERM to the VM its pid file names, then waits for the start script.
    pub fn stop(&mut self) {
        let Some(mut child) = self.server.take() else {
            return;
        };
        let pid_file = self.dir.path().join("node.pid");
        match std::fs::read_to_string(&pid_file) {
            Ok(pid) if !pid.trim().is_empty() => signal(pid.trim(), "TERM"),
            // The VM never wrote its pid: the script is all there is to stop.
            _ => signal(&child.id().to_string(), "TERM"),
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while child.try_wait().unwrap().is_none() {
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = std::fs::remove_file(pid_file);
    }

    /// Starts a stopped node again on the same ports and data directory (durable queues and
    /// persistent messages survive).
    pub fn start_again(&mut self) {
        assert!(self.server.is_none(), "the node is still running");
        self.spawn();
    }
}

fn signal(pid: &str, name: &str) {
    let _ = Command::new("kill")
        .args([&format!("-{name}"), pid])
        .status();
}

impl Drop for RabbitBroker {
    fn drop(&mut self) {
        self.stop();
        if let Some(mut epmd) = self.epmd.take() {
            let _ = epmd.kill();
            let _ = epmd.wait();
        }
    }
}

/// One message as a consumer sees it.
#[derive(Debug)]
pub struct Received {
    pub routing_key: String,
    pub properties: BasicProperties,
    pub body: Vec<u8>,
}

impl Received {
    /// A header's value as text.
    pub fn header(&self, name: &str) -> Option<String> {
        let headers = self.properties.headers().as_ref()?;
        match headers.inner().get(name)? {
            lapin::types::AMQPValue::LongString(s) => {
                Some(String::from_utf8_lossy(s.as_bytes()).into_owned())
            }
            other => Some(format!("{other:?}")),
        }
    }
}

/// A durable direct exchange, and a durable queue bound to it with `binding` (when given).
pub async fn declare(url: &str, exchange: &str, queue: &str, binding: Option<&str>) {
    let connection = Connection::connect(url, ConnectionProperties::default())
        .await
        .unwrap();
    let channel = connection.create_channel().await.unwrap();
    channel
        .exchange_declare(
            exchange.into(),
            ExchangeKind::Direct,
            ExchangeDeclareOptions {
                durable: true,
                ..ExchangeDeclareOptions::default()
            },
            FieldTable::default(),
        )
        .await
        .unwrap();
    channel
        .queue_declare(
            queue.into(),
            QueueDeclareOptions {
                durable: true,
                ..QueueDeclareOptions::default()
            },
            FieldTable::default(),
        )
        .await
        .unwrap();
    if let Some(binding) = binding {
        channel
            .queue_bind(
                queue.into(),
                exchange.into(),
                binding.into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await
            .unwrap();
    }
    let _ = connection.close(200, "declared".into()).await;
}

/// Takes every message now in `queue` (acknowledged on receipt).
pub async fn drain(url: &str, queue: &str) -> Vec<Received> {
    let connection = Connection::connect(url, ConnectionProperties::default())
        .await
        .unwrap();
    let channel = connection.create_channel().await.unwrap();
    let mut received = Vec::new();
    while let Some(message) = channel
        .basic_get(queue.into(), BasicGetOptions { no_ack: true })
        .await
        .unwrap()
    {
        let delivery = message.delivery;
        received.push(Received {
            routing_key: delivery.routing_key.to_string(),
            properties: delivery.properties,
            body: delivery.data,
        });
    }
    let _ = connection.close(200, "drained".into()).await;
    received
}

/// Deletes `exchange` (its bindings go with it).
pub async fn delete_exchange(url: &str, exchange: &str) {
    let connection = Connection::connect(url, ConnectionProperties::default())
        .await
        .unwrap();
    let channel = connection.create_channel().await.unwrap();
    channel
        .exchange_delete(
            exchange.into(),
            lapin::options::ExchangeDeleteOptions::default(),
        )
        .await
        .unwrap();
    let _ = connection.close(200, "deleted".into()).await;
}
