//! Wiring: turns validated settings into a ready application, as a short list of parts.
//!
//! Each part chooses its own implementation from the settings in its own module
//! (`store::connect`, `ledger::build`, `forward::build`, `Ingest::build`, `Proxy::build` per
//! `[proxies.NAME]`, `Relay::build` when `relay.enabled`); this file only orders them and owns
//! what lives as long as the application: metrics, admission and background tasks (the relay
//! and the stream trimmer among them).

use std::sync::Arc;

use tokio::sync::watch;

use crate::admission::Admission;
use crate::body::BodyReader;
use crate::config::{ConfigError, Settings, SinkKind};
use crate::console::Console;
use crate::forward;
use crate::ledger::{self, Ledger};
use crate::metrics::Metrics;
use crate::proxy::{self, Proxy};
use crate::relay::{self, Relay, RelayError, RouteCredentials};
use crate::store::{self, RedisStartError, RedisStore};
use crate::webhooks::{self, Ingest};

/// A running daemon's shared state.
pub struct App {
    pub settings: Settings,
    pub ingest: Ingest,
    pub metrics: Arc<Metrics>,
    /// Admission control: one permit per request in flight (`server.max_in_flight`), shared by
    /// the webhook listener and every proxy.
    pub admission: Arc<Admission>,
    /// The claim/complete/release ledger of this application's store.
    pub ledger: Arc<dyn Ledger>,
    /// The Redis connection, when that is the store (the stream-length sampler uses it).
    pub redis: Option<RedisStore>,
    /// The Idempotency-Key proxies, in name order; they share the ledger.
    pub proxies: Vec<Arc<Proxy>>,
    /// The web console (`console.listen`).
    pub console: Option<Arc<Console>>,
    /// The relay (`relay.enabled`), until `spawn_background_tasks` starts it.
    relay: std::sync::Mutex<Option<Relay>>,
    /// The relay's route credentials, which a reload replaces (empty without a relay).
    relay_credentials: RouteCredentials,
    /// Tells the relay and the trimmer to stop (`stop_relay`).
    stop: watch::Sender<bool>,
    relay_task: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
}

/// Why the daemon cannot start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Redis(#[from] RedisStartError),
    #[error(transparent)]
    Forward(#[from] forward::BuildError),
    #[error(transparent)]
    Relay(#[from] RelayError),
    #[error(transparent)]
    Partitions(#[from] webhooks::partitions::PartitionsError),
    #[error(transparent)]
    Telemetry(#[from] crate::telemetry::InstallError),
}

/// Checks what the configuration loader cannot: the keys of each part, built as it would be.
/// `App::build` runs the same checks; `check-config` runs them without connecting to anything.
pub fn validate(settings: &Settings) -> Result<(), ConfigError> {
    webhooks::validate(settings)?;
    relay::validate(settings)
}

impl App {
    pub async fn build(settings: Settings) -> Result<Self, StartError> {
        validate(&settings)?;
        let metrics = Metrics::new();
        // Before the forwarder: atomic mode writes the trace context into stream entries only
        // when telemetry is on.
        crate::telemetry::install(
            &settings.telemetry,
            metrics.counter(crate::metrics::TELEMETRY_EXPORT_FAILURES_TOTAL, Vec::new()),
        )?;
        let redis = store::connect(&settings.store).await?;
        if let Some(store) = &redis {
            webhooks::partitions::check(&settings, store).await?;
        }
        let ledger = ledger::build(
            redis.as_ref(),
            settings.store.memory_max_records,
            settings.store.memory_max_bytes.0 as usize,
            &metrics,
        )
        .await?;
        let forwarder =
            forward::build(&settings, redis.as_ref(), Arc::clone(&ledger), &metrics).await?;
        // One body reader and one permit pool for both fronts: a stalled client of either must
        // not starve the other.
        let body = Arc::new(BodyReader::from_settings(
            &settings.server,
            metrics.body_gauges(),
        ));
        let admission = Arc::new(Admission::new(
            settings.server.max_in_flight,
            metrics.in_flight.clone(),
        ));
        let ingest = Ingest::build(&settings, forwarder, Arc::clone(&body), &metrics)?;
        let door = proxy::Door {
            ledger: Arc::clone(&ledger),
            body,
            admission: Arc::clone(&admission),
        };
        let proxies = settings
            .proxies
            .keys()
            .filter_map(|name| Proxy::build(name, &settings, door.clone(), &metrics))
            .map(Arc::new)
            .collect();
        let relay = match (&redis, settings.relay.enabled) {
            (Some(store), true) => Some(Relay::build(&settings, store.clone(), &metrics).await?),
            _ => None,
        };
        let relay_credentials = relay.as_ref().map(Relay::credentials).unwrap_or_default();
        let console = Console::build(&settings, redis.clone(), Arc::clone(&metrics))?.map(Arc::new);
        Ok(Self {
            console,
            relay: std::sync::Mutex::new(relay),
            relay_credentials,
            stop: watch::channel(false).0,
            relay_task: std::sync::Mutex::new(None),
            proxies,
            admission,
            settings,
            ingest,
            metrics,
            ledger,
            redis,
        })
    }

    /// The relay's route credentials, for a reload to replace.
    pub fn relay_credentials(&self) -> RouteCredentials {
        self.relay_credentials.clone()
    }

    /// The proxy configured as `[proxies.<name>]`.
    pub fn proxy(&self, name: &str) -> Option<&Arc<Proxy>> {
        self.proxies.iter().find(|p| p.name() == name)
    }

    /// Live dedup records of the memory store (tests and diagnostics); `None` for Redis.
    pub fn memory_records(&self) -> Option<usize> {
        self.ledger.local_records()
    }

    /// Starts the periodic tasks; each ends once the app is dropped.
    pub fn spawn_background_tasks(self: &Arc<Self>) {
        self.spawn_metrics_upkeep();
        self.spawn_stream_sampler();
        self.spawn_relay();
        if let Some(console) = &self.console {
            console.spawn_counts();
        }
    }

    /// Starts the relay (when `relay.enabled`) and the trimmer (`sink.trim = "acknowledged"`);
    /// both run until [`App::stop_relay`].
    fn spawn_relay(&self) {
        let relay = self.relay.lock().map(|mut r| r.take()).unwrap_or(None);
        if let Some(relay) = relay {
            let mut stopped = self.stop.subscribe();
            let task = tokio::spawn(relay.run(async move {
                let _ = stopped.wait_for(|stop| *stop).await;
            }));
            if let Ok(mut slot) = self.relay_task.lock() {
                *slot = Some(task);
            }
        }
        if let Some(store) = &self.redis {
            relay::trim::spawn(&self.settings, store.clone(), self.stop.subscribe());
        }
    }

    /// Stops the relay and the trimmer and waits for the relay's in-flight deliveries (bounded
    /// by `server.shutdown_timeout`; the unfinished stay pending in Redis).
    pub async fn stop_relay(&self) {
        let _ = self.stop.send(true);
        let task = self.relay_task.lock().map(|mut t| t.take()).unwrap_or(None);
        if let Some(task) = task {
            let _ = task.await;
        }
    }

    /// Every 5 s: drains recorded histogram samples into their buckets (without it, samples pile
    /// up in memory until `/metrics` is scraped, and an unscraped daemon grows without bound), and
    /// refreshes the proxies' stuck-claim gauges and `hookonce_ready`, which stays visible to Prometheus when the pod is taken out of
    /// service and the provider's 503s never reach hookonce.
    fn spawn_metrics_upkeep(self: &Arc<Self>) {
        let app = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut ticker = tokio::time::interval(std::time::Duration::from_secs(5));
            loop {
                ticker.tick().await;
                let Some(app) = app.upgrade() else {
                    return;
                };
                app.metrics.run_upkeep();
                for proxy in &app.proxies {
                    proxy.refresh_gauges();
                }
                app.check_ready().await;
            }
        });
    }

    /// Asks the store and sink whether they can serve, and records the answer in `hookonce_ready`.
    pub async fn check_ready(&self) -> bool {
        let ready = self.ingest.forwarder().ready().await;
        self.metrics.ready.set(if ready { 1.0 } else { 0.0 });
        ready
    }

    /// Samples `hookonce_stream_length` for every source's stream (each partition's) until the app is dropped.
    /// Sampled rather than measured per request: `XLEN` is cheap, but not free at 10k req/s.
    fn spawn_stream_sampler(self: &Arc<Self>) {
        let (Some(store), SinkKind::RedisStream) = (self.redis.clone(), self.settings.sink.kind)
        else {
            return;
        };
        let app = Arc::downgrade(self);
        let interval = self.settings.sink.sample_interval();
        let streams: Vec<(String, metrics::Gauge)> = self
            .settings
            .sources
            .keys()
            .filter_map(|name| self.ingest.target(name))
            .flat_map(|target| target.streams())
            .map(|stream| {
                let gauge = self.metrics.stream_length(&stream);
                (stream, gauge)
            })
            .collect();
        tokio::spawn(async move {
            let mut ticker = tokio::time::interval(interval);
            loop {
                ticker.tick().await;
                if app.upgrade().is_none() {
                    return;
                }
                for (stream, gauge) in &streams {
                    if let Ok(length) = store.stream_length(stream).await {
                        gauge.set(length as f64);
                    }
                }
            }
        });
    }
}
