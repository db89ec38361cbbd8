//! Wiring: turns validated settings into a ready application (store, forwarder, sources, metrics).

use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::Semaphore;

use crate::config::{Settings, SinkKind, StoreBackend};
use crate::forward::ledger::Ledger;
use crate::forward::memory::MemoryLedger;
use crate::forward::redis::{RedisForwarder, RedisStartError, RedisStore, WaitReplicas};
use crate::forward::redis_ledger::RedisLedger;
use crate::forward::two_phase::TwoPhaseForwarder;
use crate::forward::{Forwarder, Target};
use crate::ingest::{Ingest, Source};
use crate::metrics::Metrics;
use crate::providers;
use crate::sinks::http::HttpSink;
use crate::sinks::line::LineSink;
use crate::sinks::nats::{NatsSink, NatsStartError};
use crate::sinks::Sink;

/// A running daemon's shared state.
pub struct App {
    pub settings: Settings,
    pub ingest: Ingest,
    pub metrics: Arc<Metrics>,
    /// Admission control: one permit per request in flight (`server.max_in_flight`).
    pub in_flight: Arc<Semaphore>,
    /// The in-process ledger, when that is the store (tests and diagnostics read its size).
    pub memory: Option<Arc<MemoryLedger>>,
    /// The Redis connection, when that is the store (the stream-length sampler uses it).
    pub redis: Option<RedisStore>,
}

/// Why the daemon cannot start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error(transparent)]
    Redis(#[from] RedisStartError),
    #[error("cannot load the scripts into Redis")]
    Script(#[source] redis::RedisError),
    #[error("cannot open sink file {path}")]
    SinkFile {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Nats(#[from] NatsStartError),
}

impl App {
    pub async fn build(settings: Settings) -> Result<Self, StartError> {
        let metrics = Metrics::new();
        let redis = match settings.store.backend {
            StoreBackend::Redis => {
                let store = RedisStore::connect(&settings.store).await?;
                store
                    .check_eviction_policy(settings.store.allow_eviction)
                    .await?;
                Some(store)
            }
            StoreBackend::Memory => None,
        };
        let mut memory = None;
        let forwarder: Arc<dyn Forwarder> = if settings.sink.kind == SinkKind::RedisStream {
            let store = redis
                .clone()
                .expect("validated: redis_stream needs the Redis store");
            let wait = (settings.store.wait_replicas > 0).then(|| WaitReplicas {
                replicas: i64::from(settings.store.wait_replicas),
                timeout: settings.store.wait_timeout.0,
            });
            let forwarder = RedisForwarder::new(
                store,
                settings.sink.max_len,
                metrics.store_op("forward"),
                wait,
            )
            .await
            .map_err(StartError::Script)?;
            Arc::new(forwarder)
        } else {
            let ledger: Arc<dyn Ledger> = match &redis {
                Some(store) => Arc::new(
                    RedisLedger::new(store.clone(), |op| metrics.store_op(op))
                        .await
                        .map_err(StartError::Script)?,
                ),
                None => {
                    let ledger = Arc::new(MemoryLedger::new(settings.store.memory_max_records));
                    memory = Some(Arc::clone(&ledger));
                    ledger
                }
            };
            let sink = build_sink(&settings).await?;
            let local = matches!(settings.sink.kind, SinkKind::Stdout | SinkKind::File);
            // Waiting for an in-flight delivery only makes sense within one process.
            let wait_in_flight = local && memory.is_some();
            Arc::new(TwoPhaseForwarder::new(
                ledger,
                sink,
                settings.sink.lease(),
                wait_in_flight,
            ))
        };
        let mut sources = HashMap::new();
        for (name, source_settings) in &settings.sources {
            let provider = providers::build(name, source_settings)?;
            let dedup_ttl = source_settings
                .dedup_ttl
                .map(|d| d.0)
                .unwrap_or_else(|| providers::default_dedup_ttl(provider.name()));
            let target = Target::new(
                &settings.store.key_prefix,
                name,
                provider.name(),
                source_settings.stream.as_deref(),
                dedup_ttl,
            );
            let source = Source {
                provider,
                target,
                metrics: metrics.source(name),
            };
            sources.insert(name.clone(), source);
        }
        let ingest = Ingest::new(
            sources,
            forwarder,
            Arc::clone(&metrics),
            settings.server.body_limit.0 as usize,
            settings.server.request_timeout.0,
            settings.server.retry_after_secs,
        );
        Ok(Self {
            in_flight: Arc::new(Semaphore::new(settings.server.max_in_flight)),
            settings,
            ingest,
            metrics,
            memory,
            redis,
        })
    }

    /// Starts the periodic tasks; each ends once the app is dropped.
    pub fn spawn_background_tasks(self: &Arc<Self>) {
        self.spawn_metrics_upkeep();
        self.spawn_stream_sampler();
    }

    /// Every 5 s: drains recorded histogram samples into their buckets (without it, samples pile
    /// up in memory until `/metrics` is scraped, and an unscraped daemon grows without bound), and
    /// refreshes `hookonce_ready`, which stays visible to Prometheus when the pod is taken out of
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

async fn build_sink(settings: &Settings) -> Result<Arc<dyn Sink>, StartError> {
    let sink = &settings.sink;
    Ok(match sink.kind {
        SinkKind::Stdout => Arc::new(LineSink::stdout()),
        SinkKind::File => {
            let path = sink.path.as_ref().expect("validated: file sink has a path");
            Arc::new(LineSink::file(path).map_err(|source| StartError::SinkFile {
                path: path.display().to_string(),
                source,
            })?)
        }
        SinkKind::Nats => Arc::new(NatsSink::connect(sink).await?),
        SinkKind::Http => Arc::new(HttpSink::new(sink)?),
        SinkKind::RedisStream => unreachable!("atomic mode has no separate sink"),
    })
}
