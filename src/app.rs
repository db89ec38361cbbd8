//! Wiring: turns validated settings into a ready application (store, forwarder, sources, metrics).

use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::Semaphore;

use crate::config::{Settings, SinkKind, StoreBackend};
use crate::forward::memory::MemoryForwarder;
use crate::forward::redis::{RedisForwarder, RedisStartError, RedisStore};
use crate::forward::{Forwarder, Target};
use crate::ingest::{Ingest, Source};
use crate::metrics::Metrics;
use crate::providers;
use crate::sinks::LineSink;

/// A running daemon's shared state.
pub struct App {
    pub settings: Settings,
    pub ingest: Ingest,
    pub metrics: Arc<Metrics>,
    /// Admission control: one permit per request in flight (`server.max_in_flight`).
    pub in_flight: Arc<Semaphore>,
    /// The memory forwarder, when that is the backend (tests and diagnostics read its size).
    pub memory: Option<Arc<MemoryForwarder>>,
}

/// Why the daemon cannot start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error(transparent)]
    Redis(#[from] RedisStartError),
    #[error("cannot load the forward script into Redis")]
    Script(#[source] redis::RedisError),
    #[error("cannot open sink file {path}")]
    SinkFile {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

impl App {
    pub async fn build(settings: Settings) -> Result<Self, StartError> {
        let metrics = Metrics::new();
        let mut memory = None;
        let forwarder: Arc<dyn Forwarder> = match settings.store.backend {
            StoreBackend::Redis => {
                let store = RedisStore::connect(&settings.store).await?;
                store
                    .check_eviction_policy(settings.store.allow_eviction)
                    .await?;
                let forwarder =
                    RedisForwarder::new(store, settings.sink.max_len, metrics.store_op("forward"))
                        .await
                        .map_err(StartError::Script)?;
                Arc::new(forwarder)
            }
            StoreBackend::Memory => {
                let sink = match (settings.sink.kind, &settings.sink.path) {
                    (SinkKind::File, Some(path)) => {
                        LineSink::file(path).map_err(|source| StartError::SinkFile {
                            path: path.display().to_string(),
                            source,
                        })?
                    }
                    _ => LineSink::stdout(),
                };
                let label = sink.label();
                let forwarder = Arc::new(MemoryForwarder::new(
                    sink,
                    settings.store.memory_max_records,
                    metrics.forward_to(label),
                ));
                memory = Some(Arc::clone(&forwarder));
                forwarder
            }
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
        })
    }
}
