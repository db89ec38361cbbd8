//! Sinks outside Redis: where two-phase mode publishes each claimed event.
//!
//! - [`line::LineSink`]: JSON lines on stdout or in a file (the embedded default).
//! - [`nats::NatsSink`]: a NATS JetStream stream, deduplicated by `Nats-Msg-Id`.
//! - [`http::HttpSink`]: a POST to an internal worker, carrying `Idempotency-Key`.
//! - [`rabbitmq::RabbitSink`]: a persistent, mandatory message to a RabbitMQ exchange, confirmed.
//! - [`kafka::KafkaSink`]: a message keyed by the event ID from an idempotent producer, `acks=all`.
//!
//! A sink reports success only once the event is durable on its side (fsync, PubAck, 2xx, a
//! publisher confirm); its answer is the acknowledgement stored in the dedup record.

pub mod http;
pub mod kafka;
pub mod line;
pub mod nats;
pub mod rabbitmq;
mod sink;

pub use sink::{Message, Sink, SinkError};

use std::sync::Arc;

use crate::config::{ConfigError, SinkKind, SinkSettings};

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
    Rabbitmq(#[from] rabbitmq::RabbitStartError),
    #[error(transparent)]
    Kafka(#[from] kafka::KafkaStartError),
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
        SinkKind::Rabbitmq => Arc::new(rabbitmq::RabbitSink::connect(settings).await?),
        SinkKind::Kafka => Arc::new(kafka::KafkaSink::connect(settings).await?),
        SinkKind::RedisStream => {
            return Err(ConfigError::invalid(
                "sink.kind",
                "redis_stream is atomic mode, which has no separate sink",
            )
            .into())
        }
    })
}
