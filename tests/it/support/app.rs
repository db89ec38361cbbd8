//! `TestApp`: one daemon in this process on ephemeral loopback ports, over a real redis-server or
//! the memory store, built from typed settings by [`TestApp::builder`]; with Idempotency-Key
//! proxies (each on its own ephemeral port) when the builder adds them.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

pub use hookonce::app::{App, StartError};
use hookonce::config::{
    ConsoleSettings, ProxySettings, RelaySettings, ServerSettings, ServiceUrl, Settings, SinkKind,
    SinkSettings, SourceSettings, StoreBackend, StoreSettings, StoreTopology,
};
use hookonce::server::{self, Listeners};
use hookonce::webhooks::providers::{self, Provider, SignOptions};
use tokio::sync::oneshot;

use super::redis::RedisServer;
use super::{http, metrics, settings};

/// Which store a test runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Redis,
    Memory,
}

/// One daemon serving on ephemeral loopback ports.
pub struct TestApp {
    pub app: Arc<App>,
    pub addr: SocketAddr,
    pub metrics_addr: SocketAddr,
    /// Each proxy's bound listener, by name.
    pub proxy_addrs: BTreeMap<String, SocketAddr>,
    /// The console's listener, when the builder configured one.
    pub console_addr: Option<SocketAddr>,
    pub client: reqwest::Client,
    pub redis: Option<RedisServer>,
    pub sink_file: Option<PathBuf>,
    _dir: tempfile::TempDir,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

/// One entry of a source's Redis Stream: the fields of the consumer contract.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamEntry {
    pub source: String,
    pub provider: String,
    pub event_id: String,
    pub event_type: String,
    pub received_at: u64,
    pub body: Vec<u8>,
}

/// Settings for one [`TestApp`]: the backend's defaults (loopback listeners; a fresh Redis with
/// its stream, or the memory store with a file sink) and the sources of
/// [`settings::default_sources`], changed in Rust before the daemon starts.
pub struct Builder {
    backend: Backend,
    redis: Option<RedisServer>,
    settings: Settings,
    sink_file: PathBuf,
    dir: tempfile::TempDir,
    /// The Redis at `store.redis_url` belongs to someone else: start none.
    shared_redis: bool,
}

impl Builder {
    fn new(backend: Backend) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let sink_file = dir.path().join("events.jsonl");
        let loopback: SocketAddr = ([127, 0, 0, 1], 0).into();
        let (store, sink) = match backend {
            Backend::Redis => (StoreBackend::Redis, SinkSettings::default()),
            Backend::Memory => (
                StoreBackend::Memory,
                SinkSettings {
                    kind: SinkKind::File,
                    path: Some(sink_file.clone()),
                    ..SinkSettings::default()
                },
            ),
        };
        let settings = Settings {
            server: ServerSettings {
                listen: loopback,
                metrics_listen: loopback,
                ..ServerSettings::default()
            },
            store: StoreSettings {
                backend: store,
                ..StoreSettings::default()
            },
            sink,
            sources: settings::default_sources(),
            proxies: BTreeMap::new(),
            relay: Default::default(),
            console: Default::default(),
            telemetry: Default::default(),
        };
        Self {
            backend,
            redis: None,
            settings,
            sink_file,
            dir,
            shared_redis: false,
        }
    }

    /// Runs against this already started Redis instead of a fresh one.
    pub fn redis(mut self, redis: RedisServer) -> Self {
        self.redis = Some(redis);
        self
    }

    /// Runs against a Redis another test part owns (another daemon's, say), at `url`.
    pub fn shared_redis(mut self, url: String) -> Self {
        self.settings.store.redis_url = ServiceUrl(url);
        self.shared_redis = true;
        self
    }

    /// Adds (or replaces) a source.
    pub fn source(mut self, name: &str, source: SourceSettings) -> Self {
        self.settings.sources.insert(name.to_owned(), source);
        self
    }

    /// Adds (or replaces) an Idempotency-Key proxy, listening on an ephemeral loopback port
    /// whatever `proxy.listen` says.
    pub fn proxy(mut self, name: &str, mut proxy: ProxySettings) -> Self {
        proxy.listen = ([127, 0, 0, 1], 0).into();
        self.settings.proxies.insert(name.to_owned(), proxy);
        self
    }

    /// Removes the default webhook sources (a configuration with only proxies).
    pub fn without_sources(mut self) -> Self {
        self.settings.sources.clear();
        self
    }

    pub fn server(mut self, change: impl FnOnce(&mut ServerSettings)) -> Self {
        change(&mut self.settings.server);
        self
    }

    pub fn store(mut self, change: impl FnOnce(&mut StoreSettings)) -> Self {
        change(&mut self.settings.store);
        self
    }

    /// Changes the backend's default sink; assign a whole `SinkSettings` to replace it.
    pub fn sink(mut self, change: impl FnOnce(&mut SinkSettings)) -> Self {
        change(&mut self.settings.sink);
        self
    }

    /// Changes `[relay]` (routes, `enabled`, `claim_idle`); `relay.enabled` runs it in the daemon.
    pub fn telemetry(
        mut self,
        change: impl FnOnce(&mut hookonce::config::TelemetrySettings),
    ) -> Self {
        change(&mut self.settings.telemetry);
        self
    }

    pub fn relay(mut self, change: impl FnOnce(&mut RelaySettings)) -> Self {
        change(&mut self.settings.relay);
        self
    }

    /// Changes `[console]`; it listens on an ephemeral loopback port whatever `listen` says.
    pub fn console(mut self, change: impl FnOnce(&mut ConsoleSettings)) -> Self {
        change(&mut self.settings.console);
        self.settings.console.listen = Some(([127, 0, 0, 1], 0).into());
        self
    }

    /// Validates the settings as loading a file would, then serves them.
    pub async fn start(self) -> TestApp {
        let Self {
            backend,
            redis,
            mut settings,
            sink_file,
            dir,
            shared_redis,
        } = self;
        let external = shared_redis || settings.store.topology != StoreTopology::Standalone;
        let redis = match backend {
            // A cluster or a sentinel group is the test's own; its settings name it already.
            Backend::Redis if external => None,
            Backend::Redis => {
                let redis = redis.unwrap_or_else(RedisServer::start);
                settings.store.redis_url = ServiceUrl(redis.url());
                Some(redis)
            }
            Backend::Memory => {
                assert!(redis.is_none(), "the memory backend uses no Redis");
                None
            }
        };
        settings
            .validate()
            .unwrap_or_else(|e| panic!("test settings: {e}\n{settings:#?}"));
        let sink_file = (backend == Backend::Memory).then_some(sink_file);
        TestApp::serve(settings, redis, sink_file, dir).await
    }
}

/// The provider the source `name` configured as `settings` verifies (and signs) with.
pub fn provider(name: &str, settings: &SourceSettings) -> Arc<dyn Provider> {
    providers::build(name, settings).unwrap_or_else(|e| panic!("{name}: {e}"))
}

impl TestApp {
    /// A daemon with the backend's defaults; see [`Builder`] to change them.
    pub async fn start(backend: Backend) -> Self {
        Self::builder(backend).start().await
    }

    pub fn builder(backend: Backend) -> Builder {
        Builder::new(backend)
    }

    async fn serve(
        settings: Settings,
        redis: Option<RedisServer>,
        sink_file: Option<PathBuf>,
        dir: tempfile::TempDir,
    ) -> Self {
        let listeners = Listeners::bind_for(&settings).await.unwrap();
        let addr = listeners.http_addr().unwrap();
        let metrics_addr = listeners.metrics_addr().unwrap();
        let proxy_addrs = settings
            .proxies
            .keys()
            .map(|name| (name.clone(), listeners.proxy_addr(name).unwrap()))
            .collect();
        let console_addr = listeners.console_addr().ok();
        let app = Arc::new(App::build(settings).await.expect("app starts"));
        app.spawn_background_tasks();
        let (shutdown, signal) = oneshot::channel::<()>();
        let task = tokio::spawn(server::run(Arc::clone(&app), listeners, async {
            let _ = signal.await;
        }));
        Self {
            app,
            addr,
            metrics_addr,
            proxy_addrs,
            console_addr,
            client: reqwest::Client::new(),
            redis,
            sink_file,
            _dir: dir,
            shutdown: Some(shutdown),
            task: Some(task),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// The URL of `path` on the proxy `name`'s listener.
    pub fn proxy_url(&self, name: &str, path: &str) -> String {
        let addr = self
            .proxy_addrs
            .get(name)
            .unwrap_or_else(|| panic!("no proxy {name:?} configured"));
        format!("http://{addr}{path}")
    }

    /// The provider a configured source verifies with.
    pub fn provider(&self, source: &str) -> Arc<dyn Provider> {
        provider(source, &self.app.settings.sources[source])
    }

    /// Signs `body` as the source's provider would and posts it.
    pub async fn deliver(
        &self,
        source: &str,
        body: &[u8],
        options: &SignOptions,
    ) -> reqwest::Response {
        let headers = self.sign(source, body, options);
        self.post(source, body, &headers).await
    }

    pub fn sign(&self, source: &str, body: &[u8], options: &SignOptions) -> Vec<(String, String)> {
        self.provider(source).sign(body, options)
    }

    /// The body the source's provider would send for `body`: `sign_body`'s result (Adyen writes
    /// its signatures into the body, Linear a fresh `webhookTimestamp`), or `body` itself.
    pub fn sign_body(&self, source: &str, body: &[u8], options: &SignOptions) -> Vec<u8> {
        self.provider(source)
            .sign_body(body, options)
            .unwrap_or_else(|e| panic!("{source}: sign_body: {e}"))
            .unwrap_or_else(|| body.to_vec())
    }

    /// Like `deliver`, for every provider: applies `sign_body` first, then signs and posts the
    /// result. Returns the response and the body that was sent.
    pub async fn deliver_signed(
        &self,
        source: &str,
        body: &[u8],
        options: &SignOptions,
    ) -> (reqwest::Response, Vec<u8>) {
        let body = self.sign_body(source, body, options);
        let headers = self.sign(source, &body, options);
        (self.post(source, &body, &headers).await, body)
    }

    pub async fn post(
        &self,
        source: &str,
        body: &[u8],
        headers: &[(String, String)],
    ) -> reqwest::Response {
        let url = self.url(&format!("/webhooks/{source}"));
        http::post(&self.client, &url, body, headers).await
    }

    /// Forwarded entries as (event_id, body), in order.
    pub fn entries(&self, source: &str) -> Vec<(String, Vec<u8>)> {
        match (&self.redis, &self.sink_file) {
            (Some(_), _) => self
                .stream_entries(source)
                .into_iter()
                .map(|entry| (entry.event_id, entry.body))
                .collect(),
            (None, Some(path)) => {
                let text = std::fs::read_to_string(path).unwrap_or_default();
                text.lines()
                    .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap())
                    .filter(|v| v["source"] == source)
                    .map(|v| {
                        (
                            v["event_id"].as_str().unwrap().to_owned(),
                            v["body"].as_str().unwrap().as_bytes().to_vec(),
                        )
                    })
                    .collect()
            }
            _ => unreachable!(),
        }
    }

    /// Every field of each entry of a source's Redis Streams, in order (partition 0's first;
    /// Redis backend only).
    pub fn stream_entries(&self, source: &str) -> Vec<StreamEntry> {
        let redis = self
            .redis
            .as_ref()
            .expect("stream_entries needs the Redis backend");
        let streams = self
            .app
            .ingest
            .target(source)
            .expect("configured source")
            .streams();
        let mut connection = redis.connection();
        streams
            .iter()
            .flat_map(|stream| {
                let reply: ::redis::streams::StreamRangeReply = ::redis::cmd("XRANGE")
                    .arg(stream)
                    .arg("-")
                    .arg("+")
                    .query(&mut connection)
                    .unwrap();
                reply.ids
            })
            .map(|entry| StreamEntry {
                source: entry.get("source").unwrap(),
                provider: entry.get("provider").unwrap(),
                event_id: entry.get("event_id").unwrap(),
                event_type: entry.get("event_type").unwrap(),
                received_at: entry.get("received_at").unwrap(),
                body: entry.get("body").unwrap(),
            })
            .collect()
    }

    /// Everything the store holds: DBSIZE for Redis; records plus sink lines for memory.
    pub fn stored(&self) -> usize {
        match (&self.redis, &self.sink_file) {
            (Some(redis), _) => redis.dbsize() as usize,
            (None, Some(path)) => {
                let lines = std::fs::read_to_string(path)
                    .unwrap_or_default()
                    .lines()
                    .count();
                self.app.memory_records().unwrap() + lines
            }
            _ => unreachable!(),
        }
    }

    /// The status `/readyz` answers now.
    pub async fn readiness(&self) -> u16 {
        self.client
            .get(self.url("/readyz"))
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    }

    /// The whole `/metrics` page.
    pub async fn metrics(&self) -> String {
        metrics::scrape(&self.client, self.metrics_addr).await
    }

    /// The value of one series in `/metrics`, 0 when absent:
    /// `t.metric(metrics::EVENTS, &[("source", "stripe"), ("outcome", "forwarded")])`.
    pub async fn metric(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        metrics::value(&self.metrics().await, name, labels)
    }

    /// `hookonce_events_total` of one source and outcome.
    pub async fn events(&self, source: &str, outcome: &str) -> f64 {
        self.metric(metrics::EVENTS, &[("source", source), ("outcome", outcome)])
            .await
    }

    pub async fn stop(mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}
