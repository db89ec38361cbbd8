//! Sinks outside Redis: where two-phase mode publishes each claimed event.
//!
//! - [`line::LineSink`]: JSON lines on stdout or in a file (the embedded default).
//! - [`nats::NatsSink`]: a NATS JetStream stream, deduplicated by `Nats-Msg-Id`.
//! - [`http::HttpSink`]: a POST to an internal worker, carrying `Idempotency-Key`.
//!
//! A sink reports success only once the event is durable on its side (fsync, PubAck, 2xx); its
//! answer is the acknowledgement stored in the dedup record.

pub mod http;
pub mod line;
pub mod nats;

use std::sync::Arc;

use bytes::Bytes;

use crate::config::{ConfigError, SinkKind, SinkSettings};

use crate::util::BoxFuture;

/// One event on its way to a sink. Owned, because publishing runs in its own task.
#[derive(Debug, Clone)]
pub struct Message {
    /// The dedup record's key: the sink-side idempotency ID (`Nats-Msg-Id`, `Idempotency-Key`).
    pub dedup_key: String,
    pub source: String,
    pub provider: &'static str,
    pub event_id: String,
    pub event_type: String,
    /// Unix milliseconds at which the daemon received the request.
    pub received_at_ms: u64,
    pub body: Bytes,
    /// The provider's Content-Type, passed on by the HTTP sink.
    pub content_type: Option<String>,
}

/// Why a sink did not take an event; the claim is released and the provider gets 503.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    #[error("write failed")]
    Io(#[source] std::io::Error),
    #[error("NATS publish failed: {0}")]
    Nats(String),
    #[error("worker answered HTTP {0}")]
    Status(u16),
    #[error("worker request failed")]
    Http(#[source] reqwest::Error),
    #[error("sink did not acknowledge within {0:?}")]
    Timeout(std::time::Duration),
}

/// A destination that acknowledges durable receipt.
pub trait Sink: Send + Sync + 'static {
    /// Publishes one event; the `String` is the sink's acknowledgement (an entry ID, a stream
    /// sequence, an HTTP status), stored in the dedup record.
    fn publish<'a>(&'a self, message: &'a Message) -> BoxFuture<'a, Result<String, SinkError>>;

    /// The `sink` label of `hookonce_forward_duration_seconds`.
    fn label(&self) -> &'static str;

    /// Whether the sink can take events now (`/readyz`); a cheap local check, no round trip.
    fn ready(&self) -> bool {
        true
    }
}

/// Why a sink cannot start.
#[derive(Debug, thiserror::Error)]
pub enum SinkStartError {
    #[error("cannot open sink file {path}")]
    File {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Nats(#[from] nats::NatsStartError),
    #[error(transparent)]
    Config(#[from] ConfigError),
}

/// Builds the sink `sink.kind` names (every kind but `redis_stream`, which is atomic mode's).
pub async fn build(settings: &SinkSettings) -> Result<Arc<dyn Sink>, SinkStartError> {
    Ok(match settings.kind {
        SinkKind::Stdout => Arc::new(line::LineSink::stdout()),
        SinkKind::File => {
            let path = settings
                .path
                .as_ref()
                .ok_or_else(|| ConfigError::invalid("sink.path", "the file sink needs a path"))?;
            Arc::new(
                line::LineSink::file(path).map_err(|source| SinkStartError::File {
                    path: path.display().to_string(),
                    source,
                })?,
            )
        }
        SinkKind::Nats => Arc::new(nats::NatsSink::connect(settings).await?),
        SinkKind::Http => Arc::new(http::HttpSink::new(settings)?),
        SinkKind::RedisStream => {
            return Err(ConfigError::invalid(
                "sink.kind",
                "redis_stream is atomic mode, which has no separate sink",
            )
            .into())
        }
    })
}
