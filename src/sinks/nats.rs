//! NATS JetStream sink: publish with `Nats-Msg-Id` = the dedup key and wait for the PubAck.
//!
//! JetStream drops a second message with the same `Nats-Msg-Id` within the stream's duplicate
//! window. That is what closes two-phase mode's crash window: a delivery that republishes after a
//! crashed claim's lease expired is absorbed, provided it comes within the window.

use std::time::Duration;

use async_nats::jetstream::{self, stream};
use async_nats::HeaderMap;

use super::{Message, Sink, SinkError};
use crate::config::SinkSettings;
use crate::util::BoxFuture;

/// Subjects of a stream hookonce creates.
pub const STREAM_SUBJECTS: &str = "hookonce.>";

pub struct NatsSink {
    client: async_nats::Client,
    jetstream: jetstream::Context,
    /// Subject template with `{source}`.
    subject: String,
    timeout: Duration,
}

/// Why the NATS sink cannot start.
#[derive(Debug, thiserror::Error)]
pub enum NatsStartError {
    #[error("cannot connect to NATS at {url}: {problem}")]
    Connect { url: String, problem: String },
    #[error("cannot find or create JetStream stream {stream:?}: {problem}")]
    Stream { stream: String, problem: String },
}

impl NatsSink {
    /// Connects, and finds the stream or creates it (subjects `hookonce.>`, file storage).
    pub async fn connect(settings: &SinkSettings) -> Result<Self, NatsStartError> {
        let url = settings
            .nats_url
            .as_ref()
            .expect("validated: nats_url is set");
        let timeout = settings.timeout();
        let client = async_nats::ConnectOptions::new()
            .connection_timeout(timeout)
            .request_timeout(Some(timeout))
            .connect(url.0.as_str())
            .await
            .map_err(|e| NatsStartError::Connect {
                url: url.redacted(),
                problem: e.to_string(),
            })?;
        let jetstream = jetstream::new(client.clone());
        let name = settings.nats_stream().to_owned();
        let mut config = stream::Config {
            name: name.clone(),
            subjects: vec![STREAM_SUBJECTS.to_owned()],
            storage: stream::StorageType::File,
            ..Default::default()
        };
        if let Some(window) = settings.duplicate_window {
            config.duplicate_window = window.0;
        }
        let mut found =
            jetstream
                .get_or_create_stream(config)
                .await
                .map_err(|e| NatsStartError::Stream {
                    stream: name.clone(),
                    problem: e.to_string(),
                })?;
        let info = found.info().await.map_err(|e| NatsStartError::Stream {
            stream: name.clone(),
            problem: e.to_string(),
        })?;
        let window = info.config.duplicate_window;
        let lease = settings.lease();
        if window < lease {
            tracing::warn!(
                message = "JetStream duplicate window is shorter than the lease: a republish after a crash may not be deduplicated.",
                stream = %name,
                duplicate_window = ?window,
                lease = ?lease,
            );
        } else {
            tracing::info!(message = "JetStream stream ready.", stream = %name, duplicate_window = ?window);
        }
        Ok(Self {
            client,
            jetstream,
            subject: settings.subject().to_owned(),
            timeout,
        })
    }

    async fn send(&self, message: &Message) -> Result<String, SinkError> {
        let mut headers = HeaderMap::new();
        headers.insert("Nats-Msg-Id", message.dedup_key.as_str());
        headers.insert("Hookonce-Source", message.source.as_str());
        headers.insert("Hookonce-Provider", message.provider);
        headers.insert("Hookonce-Event-Id", message.event_id.as_str());
        headers.insert("Hookonce-Event-Type", message.event_type.as_str());
        headers.insert(
            "Hookonce-Received-At",
            message.received_at_ms.to_string().as_str(),
        );
        for (name, value) in crate::telemetry::current_headers() {
            headers.insert(name, value.as_str());
        }
        let subject = self.subject.replace("{source}", &message.source);
        let pending = self
            .jetstream
            .publish_with_headers(subject, headers, message.body.clone())
            .await
            .map_err(|e| SinkError::Nats(e.to_string()))?;
        let ack = pending.await.map_err(|e| SinkError::Nats(e.to_string()))?;
        Ok(format!("{}:{}", ack.stream, ack.sequence))
    }
}

impl Sink for NatsSink {
    fn publish<'a>(&'a self, message: &'a Message) -> BoxFuture<'a, Result<String, SinkError>> {
        Box::pin(async move {
            tokio::time::timeout(self.timeout, self.send(message))
                .await
                .unwrap_or(Err(SinkError::Timeout(self.timeout)))
        })
    }

    fn label(&self) -> &'static str {
        "nats"
    }

    fn ready(&self) -> bool {
        self.client.connection_state() == async_nats::connection::State::Connected
    }
}
