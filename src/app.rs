//! Wiring: turns validated settings into a ready application, as a short list of parts.
//!
//! Each part chooses its own implementation from the settings in its own module
//! (`store::connect`, `ledger::build`, `forward::build`, `Ingest::build`, `Proxy::build` per
//! `[proxies.NAME]`); this file only orders
//! them and owns what lives as long as the application: metrics, admission and background tasks.

use std::sync::Arc;

use tokio::sync::Semaphore;

use crate::config::{ConfigError, Settings, SinkKind};
use crate::forward;
use crate::ledger::{self, Ledger};
use crate::metrics::Metrics;
use crate::proxy::Proxy;
use crate::store::{self, RedisStartError, RedisStore};
use crate::webhooks::{self, Ingest};

/// A running daemon's shared state.
pub struct App {
    pub settings: Settings,
    pub ingest: Ingest,
    pub metrics: Arc<Metrics>,
    /// Admission control: one permit per request in flight (`server.max_in_flight`).
    pub in_flight: Arc<Semaphore>,
    /// The claim/complete/release ledger of this application's store.
    pub ledger: Arc<dyn Ledger>,
    /// The Redis connection, when that is the store (the stream-length sampler uses it).
    pub redis: Option<RedisStore>,
    /// The Idempotency-Key proxies, in name order; they share the ledger.
    pub proxies: Vec<Arc<Proxy>>,
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
}

/// Checks what the configuration loader cannot: the keys of each part, built as it would be.
/// `App::build` runs the same checks; `check-config` runs them without connecting to anything.
pub fn validate(settings: &Settings) -> Result<(), ConfigError> {
    webhooks::validate(settings)
}

impl App {
    pub async fn build(settings: Settings) -> Result<Self, StartError> {
        validate(&settings)?;
        let metrics = Metrics::new();
        let redis = store::connect(&settings.store).await?;
        let ledger =
            ledger::build(redis.as_ref(), settings.store.memory_max_records, &metrics).await?;
        let forwarder =
            forward::build(&settings, redis.as_ref(), Arc::clone(&ledger), &metrics).await?;
        let ingest = Ingest::build(&settings, forwarder, &metrics)?;
        let proxies = settings
            .proxies
            .keys()
            .filter_map(|name| Proxy::build(name, &settings, Arc::clone(&ledger), &metrics))
            .map(Arc::new)
            .collect();
        Ok(Self {
            proxies,
            in_flight: Arc::new(Semaphore::new(settings.server.max_in_flight)),
            settings,
            ingest,
            metrics,
            ledger,
            redis,
        })
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

    /// Samples `hookonce_stream_length` for every source's stream until the app is dropped.
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
            .map(|target| {
                (
                    target.stream.clone(),
                    self.metrics.stream_length(&target.stream),
                )
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
