//! Test harness: a real daemon on loopback, against a real redis-server or the memory store.
#![allow(dead_code)]

pub mod daemon;
pub mod nats;
pub mod proxy;
pub mod redis;
pub mod worker;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use hookonce::app::App;
use hookonce::config::{self, Settings};
use hookonce::providers::{self, SignOptions};
use hookonce::server::{self, Listeners};
use tokio::sync::oneshot;

pub use self::redis::RedisServer;

/// Which store a behavioural test runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Redis,
    Memory,
}

/// Secrets used by the test sources.
pub const STRIPE_SECRET: &str = "whsec_test_stripe_secret_0123456789";
pub const GITHUB_SECRET: &str = "It's a Secret to Everybody";
pub const STANDARD_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// Sources shared by the behavioural suite.
pub fn sources_toml() -> String {
    format!(
        r#"
[sources.stripe]
provider = "stripe"
secrets = ["{STRIPE_SECRET}"]

[sources.github]
provider = "github"
secrets = ["{GITHUB_SECRET}"]

[sources.standard]
provider = "standard"
secrets = ["{STANDARD_SECRET}"]
"#
    )
}

/// One daemon serving on ephemeral loopback ports.
pub struct TestApp {
    pub app: Arc<App>,
    pub addr: SocketAddr,
    pub metrics_addr: SocketAddr,
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

/// Extra TOML for `[server]`, `[store]` and `[sink]`, merged into the backend's defaults.
#[derive(Default, Clone)]
pub struct Extra {
    pub server: String,
    pub store: String,
    pub sink: String,
    pub sources: String,
}

impl TestApp {
    pub async fn start(backend: Backend) -> Self {
        Self::start_with(backend, Extra::default()).await
    }

    pub async fn start_with(backend: Backend, extra: Extra) -> Self {
        let redis = (backend == Backend::Redis).then(RedisServer::start);
        Self::start_on(backend, redis, extra).await
    }

    /// Starts against an already running Redis (or none for the memory store).
    pub async fn start_on(backend: Backend, redis: Option<RedisServer>, extra: Extra) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let sink_file = dir.path().join("events.jsonl");
        let (store, sink) = match backend {
            Backend::Redis => (
                format!(
                    "backend = \"redis\"\nredis_url = \"{}\"\n",
                    redis.as_ref().expect("redis").url()
                ),
                "kind = \"redis_stream\"\n".to_owned(),
            ),
            Backend::Memory => (
                "backend = \"memory\"\n".to_owned(),
                format!(
                    "kind = \"file\"\npath = {:?}\n",
                    sink_file.display().to_string()
                ),
            ),
        };
        // A sink table that names its kind replaces the backend's default sink.
        let (sink, sink_extra) = if extra.sink.contains("kind =") {
            (String::new(), extra.sink.clone())
        } else {
            (sink, extra.sink.clone())
        };
        let text = format!(
            "[server]\nlisten = \"127.0.0.1:0\"\nmetrics_listen = \"127.0.0.1:0\"\n{}\n[store]\n{store}{}\n[sink]\n{sink}{}\n{}\n{}",
            extra.server,
            extra.store,
            sink_extra,
            sources_toml(),
            extra.sources,
        );
        let settings =
            config::from_toml(&text).unwrap_or_else(|e| panic!("test config: {e}\n{text}"));
        Self::serve(
            settings,
            redis,
            (backend == Backend::Memory).then_some(sink_file),
            dir,
        )
        .await
    }

    async fn serve(
        settings: Settings,
        redis: Option<RedisServer>,
        sink_file: Option<PathBuf>,
        dir: tempfile::TempDir,
    ) -> Self {
        let listeners = Listeners::bind(settings.server.listen, settings.server.metrics_listen)
            .await
            .unwrap();
        let addr = listeners.http_addr().unwrap();
        let metrics_addr = listeners.metrics_addr().unwrap();
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
        let settings = &self.app.settings.sources[source];
        let provider = providers::build(source, settings).unwrap();
        provider.sign(body, options)
    }

    /// The body the source's provider would send for `body`: `sign_body`'s result (Adyen writes
    /// its signatures into the body, Linear a fresh `webhookTimestamp`), or `body` itself.
    pub fn sign_body(&self, source: &str, body: &[u8], options: &SignOptions) -> Vec<u8> {
        let settings = &self.app.settings.sources[source];
        let provider = providers::build(source, settings).unwrap();
        provider
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
        let mut request = self
            .client
            .post(self.url(&format!("/webhooks/{source}")))
            .body(body.to_vec());
        for (name, value) in headers {
            request = request.header(name.as_str(), value.as_str());
        }
        request.send().await.expect("request sent")
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

    /// Every field of each entry of a source's Redis Stream, in order (Redis backend only).
    pub fn stream_entries(&self, source: &str) -> Vec<StreamEntry> {
        let redis = self
            .redis
            .as_ref()
            .expect("stream_entries needs the Redis backend");
        let stream = &self
            .app
            .ingest
            .target(source)
            .expect("configured source")
            .stream;
        let reply: ::redis::streams::StreamRangeReply = ::redis::cmd("XRANGE")
            .arg(stream)
            .arg("-")
            .arg("+")
            .query(&mut redis.connection())
            .unwrap();
        reply
            .ids
            .into_iter()
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

    pub async fn metrics(&self) -> String {
        self.client
            .get(format!("http://{}/metrics", self.metrics_addr))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    /// The value of one series in /metrics, 0 when absent.
    pub async fn metric(&self, series: &str) -> f64 {
        let text = self.metrics().await;
        text.lines()
            .find_map(|line| {
                line.strip_prefix(series)
                    .and_then(|rest| rest.strip_prefix(' '))
                    .map(|v| v.trim().parse::<f64>().unwrap())
            })
            .unwrap_or(0.0)
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

pub fn now_unix() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// Sign options for "now".
pub fn now() -> SignOptions {
    SignOptions {
        now_unix: now_unix(),
        ..SignOptions::default()
    }
}

/// Sign options with a header-carried event ID.
pub fn with_id(id: &str) -> SignOptions {
    SignOptions {
        event_id: Some(id.to_owned()),
        now_unix: now_unix(),
        ..SignOptions::default()
    }
}

/// A Stripe-shaped event body of roughly `size` bytes.
pub fn stripe_body(id: &str, size: usize) -> Vec<u8> {
    let head = format!(
        r#"{{"id":"{id}","object":"event","type":"payment_intent.succeeded","api_version":"2024-06-20","data":{{"object":{{"id":"pi_1","amount":4200,"currency":"eur","description":""#
    );
    let tail = r#""}}}"#;
    let pad = size.saturating_sub(head.len() + tail.len());
    let mut body = head.into_bytes();
    body.extend(std::iter::repeat_n(b'x', pad));
    body.extend_from_slice(tail.as_bytes());
    body
}

/// Generates one `#[tokio::test]` per backend from an async fn taking a [`Backend`].
#[macro_export]
macro_rules! both_backends {
    ($($name:ident),* $(,)?) => {
        mod redis_backend {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::common::Backend::Redis).await;
                }
            )*
        }
        mod memory_backend {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::common::Backend::Memory).await;
                }
            )*
        }
    };
}

/// Opens a raw connection and sends a request's head and the first part of its body, holding
/// the request in flight until the rest is written.
pub async fn start_slow_request(
    addr: SocketAddr,
    path: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> tokio::net::TcpStream {
    use tokio::io::AsyncWriteExt;
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut head = format!(
        "POST {path} HTTP/1.1\r\nHost: test\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(&body[..body.len() / 2]).await.unwrap();
    stream
}

/// Sends the rest of a slow request's body and returns the response's status line and headers.
pub async fn finish_slow_request(mut stream: tokio::net::TcpStream, body: &[u8]) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    stream.write_all(&body[body.len() / 2..]).await.unwrap();
    let mut response = vec![0u8; 4096];
    let n = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        stream.read(&mut response),
    )
    .await
    .expect("response within 10s")
    .unwrap();
    String::from_utf8_lossy(&response[..n]).into_owned()
}

/// Polls `probe` until it returns true, for at most `seconds`.
pub async fn eventually<F, Fut>(seconds: u64, what: &str, mut probe: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(seconds);
    while !probe().await {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}
