//! What every sink is: the event it is given ([`Message`]), the trait it implements ([`Sink`]) and
//! why it may fail ([`SinkError`]). Its own file below the façade, so that the sinks can import
//! it without importing the module that builds them.

use bytes::Bytes;

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

/// Why a sink did not take an event; the provider gets 503, and the claim is released unless the
/// outcome is unknown ([`SinkError::holds_claim`]).
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    #[error("write failed")]
    Io(#[source] std::io::Error),
    #[error("NATS publish failed: {0}")]
    Nats(String),
    #[error("RabbitMQ publish failed: {0}")]
    Amqp(String),
    #[error("Kafka publish failed: {0}")]
    Kafka(String),
    /// The sink may have taken the event (a message timed out in flight, a report that never
    /// came): the claim is kept until its lease ends instead of being released.
    #[error("{sink} publish outcome unknown, the broker may have the event: {problem}")]
    OutcomeUnknown { sink: &'static str, problem: String },
    #[error("worker answered HTTP {0}")]
    Status(u16),
    #[error("worker request failed")]
    Http(#[source] hyper_util::client::legacy::Error),
    #[error("worker request not sent: {0} is not a valid header value")]
    Header(&'static str),
    #[error("sink did not acknowledge within {0:?}")]
    Timeout(std::time::Duration),
}

impl SinkError {
    /// Whether the event may be in the sink all the same, so that releasing the claim would let
    /// a retry publish it again at once: the claim is then held until its lease ends.
    pub fn holds_claim(&self) -> bool {
        matches!(self, SinkError::OutcomeUnknown { .. })
    }
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
