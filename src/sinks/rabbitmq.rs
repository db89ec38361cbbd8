//! RabbitMQ sink: publish each event to `sink.exchange` as a persistent, mandatory message and
//! wait for the broker's publisher confirm.
//!
//! An event is acknowledged only when the broker confirmed it (`basic.ack`) and did not return it
//! (`basic.return`, sent before the confirm for a mandatory message no queue took). A nack, a
//! return, a closed connection or no confirm within `sink.timeout` is a failure: the claim is
//! released and the provider gets 503, so nothing unroutable is ever answered 200.
//!
//! `message_id` and the `hookonce-event-id` header carry the event ID: they are what lets a
//! consumer drop the second copy that two-phase mode's window can publish (a failure between the
//! confirm and the completion, or a confirm that came after the timeout).
//!
//! The exchange is the operator's: it is checked passively at start (a clear error naming
//! `sink.exchange`), never declared. A lost connection is replaced by a background task (and on
//! the next publish), so that the sink recovers from a broker restart without a daemon restart.

use std::sync::{Arc, Weak};
use std::time::Duration;

use arc_swap::ArcSwapOption;
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions, ExchangeDeclareOptions};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::uri::AMQPUri;
use lapin::{BasicProperties, Channel, Confirmation, Connection, ConnectionProperties};

use super::{Message, Sink, SinkError};
use crate::config::{expand_routing_key, parse_amqp_url, SinkSettings, AMQP_SHORT_MAX};
use crate::util::BoxFuture;

/// How often the background task looks at the connection and replaces a lost one.
const RECONNECT_EVERY: Duration = Duration::from_millis(500);

/// Why the RabbitMQ sink cannot start.
#[derive(Debug, thiserror::Error)]
pub enum RabbitStartError {
    #[error("cannot connect to RabbitMQ at {url}: {problem}")]
    Connect { url: String, problem: String },
    #[error("sink.exchange {exchange:?} cannot be used on {url}: {problem} (hookonce does not declare it: create it and bind a queue)")]
    Exchange {
        exchange: String,
        url: String,
        problem: String,
    },
}

/// One connection and its confirm-mode channel.
struct Link {
    connection: Connection,
    channel: Channel,
}

impl Link {
    fn up(&self) -> bool {
        self.connection.status().connected() && self.channel.status().connected()
    }
}

struct Inner {
    uri: AMQPUri,
    /// `sink.url` as it may be logged.
    redacted: String,
    exchange: String,
    routing_key: String,
    timeout: Duration,
    link: ArcSwapOption<Link>,
    /// One reconnect at a time; publishes that find the link down wait for it.
    reconnecting: tokio::sync::Mutex<()>,
}

pub struct RabbitSink {
    inner: Arc<Inner>,
}

impl RabbitSink {
    /// Connects, checks `sink.exchange` passively, and starts the reconnecting task.
    pub async fn connect(settings: &SinkSettings) -> Result<Self, RabbitStartError> {
        let url = settings.url.as_deref().expect("validated: url is set");
        let redacted = crate::config::redact_url(url);
        let uri = parse_amqp_url(url).map_err(|e| RabbitStartError::Connect {
            url: redacted.clone(),
            problem: e.to_string(),
        })?;
        let inner = Arc::new(Inner {
            uri,
            redacted,
            exchange: settings
                .exchange
                .clone()
                .expect("validated: exchange is set"),
            routing_key: settings.routing_key().to_owned(),
            timeout: settings.timeout(),
            link: ArcSwapOption::empty(),
            reconnecting: tokio::sync::Mutex::new(()),
        });
        let link = inner
            .open()
            .await
            .map_err(|problem| RabbitStartError::Connect {
                url: inner.redacted.clone(),
                problem,
            })?;
        inner.check_exchange(&link).await?;
        inner.link.store(Some(Arc::new(link)));
        tracing::info!(message = "RabbitMQ sink ready.", url = %inner.redacted, exchange = %inner.exchange);
        tokio::spawn(keep_connected(Arc::downgrade(&inner)));
        Ok(Self { inner })
    }
}

impl Inner {
    /// A new connection with a channel in confirm mode, within the sink's timeout.
    async fn open(&self) -> Result<Link, String> {
        let properties = ConnectionProperties::default()
            .with_connection_name(LongString::from("hookonce".as_bytes().to_vec()));
        let open = async {
            let connection = Connection::connect_uri(self.uri.clone(), properties)
                .await
                .map_err(|e| e.to_string())?;
            let channel = connection
                .create_channel()
                .await
                .map_err(|e| e.to_string())?;
            channel
                .confirm_select(ConfirmSelectOptions::default())
                .await
                .map_err(|e| e.to_string())?;
            Ok::<_, String>(Link {
                connection,
                channel,
            })
        };
        tokio::time::timeout(self.timeout, open)
            .await
            .unwrap_or_else(|_| Err(format!("no connection within {:?}", self.timeout)))
    }

    /// A passive declare on a channel of its own: a missing exchange closes that channel only.
    async fn check_exchange(&self, link: &Link) -> Result<(), RabbitStartError> {
        // The default exchange always exists and cannot be declared, even passively.
        if self.exchange.is_empty() {
            return Ok(());
        }
        let failed = |problem: String| RabbitStartError::Exchange {
            exchange: self.exchange.clone(),
            url: self.redacted.clone(),
            problem,
        };
        let probe = link
            .connection
            .create_channel()
            .await
            .map_err(|e| failed(e.to_string()))?;
        let options = ExchangeDeclareOptions {
            passive: true,
            ..ExchangeDeclareOptions::default()
        };
        probe
            .exchange_declare(
                self.exchange.as_str().into(),
                lapin::ExchangeKind::Direct,
                options,
                FieldTable::default(),
            )
            .await
            .map_err(|e| failed(e.to_string()))?;
        let _ = probe.close(200, "checked".into()).await;
        Ok(())
    }

    /// The current link when it is up, else a new one (one reconnect at a time).
    async fn link(&self) -> Result<Arc<Link>, SinkError> {
        if let Some(link) = self.link.load_full().filter(|l| l.up()) {
            return Ok(link);
        }
        let _one = self.reconnecting.lock().await;
        if let Some(link) = self.link.load_full().filter(|l| l.up()) {
            return Ok(link);
        }
        let link = Arc::new(self.open().await.map_err(SinkError::Amqp)?);
        if let Some(old) = self.link.swap(Some(Arc::clone(&link))) {
            // A channel can close (a 404 from a deleted exchange, say) while its connection
            // stays open: close that connection rather than leave it, and its I/O loop, behind.
            tokio::spawn(async move {
                let _ = old.connection.close(200, "replaced".into()).await;
            });
        }
        tracing::info!(message = "RabbitMQ connection restored.", url = %self.redacted);
        Ok(link)
    }

    async fn send(&self, message: &Message) -> Result<String, SinkError> {
        let routing_key =
            expand_routing_key(&self.routing_key, &message.source, &message.event_type);
        if routing_key.len() > AMQP_SHORT_MAX {
            return Err(SinkError::Amqp(format!(
                "routing key of {} bytes is longer than AMQP's {AMQP_SHORT_MAX}",
                routing_key.len()
            )));
        }
        let link = self.link().await?;
        let options = BasicPublishOptions {
            mandatory: true,
            ..BasicPublishOptions::default()
        };
        let confirm = link
            .channel
            .basic_publish(
                self.exchange.as_str().into(),
                routing_key.as_str().into(),
                options,
                &message.body,
                properties(message),
            )
            .await
            .map_err(|e| SinkError::Amqp(e.to_string()))?;
        match confirm.await.map_err(|e| SinkError::Amqp(e.to_string()))? {
            Confirmation::Ack(None) => Ok(format!("rabbitmq:{routing_key}")),
            Confirmation::Ack(Some(returned)) | Confirmation::Nack(Some(returned)) => {
                Err(SinkError::Amqp(format!(
                    "the broker returned the message: {} {} (exchange {:?}, routing key {routing_key:?})",
                    returned.reply_code, returned.reply_text, self.exchange
                )))
            }
            Confirmation::Nack(None) => Err(SinkError::Amqp(
                "the broker refused the message (basic.nack)".to_owned(),
            )),
            Confirmation::NotRequested => Err(SinkError::Amqp(
                "the channel is not in confirm mode".to_owned(),
            )),
        }
    }
}

/// A persistent message whose `message_id` is the event ID, with the hookonce headers.
fn properties(message: &Message) -> BasicProperties {
    let mut headers = FieldTable::default();
    let mut header = |name: &str, value: &str| {
        headers.insert(
            ShortString::from(name),
            AMQPValue::LongString(LongString::from(value.as_bytes().to_vec())),
        );
    };
    header("hookonce-source", &message.source);
    header("hookonce-provider", message.provider);
    header("hookonce-event-id", &message.event_id);
    header("hookonce-event-type", &message.event_type);
    header("hookonce-received-at", &message.received_at_ms.to_string());
    // With telemetry on, the publish span's context, so that a consumer continues the trace.
    for (name, value) in crate::telemetry::current_headers() {
        header(name, &value);
    }
    let content_type = message
        .content_type
        .as_deref()
        .filter(|c| c.len() <= AMQP_SHORT_MAX)
        .unwrap_or("application/octet-stream");
    BasicProperties::default()
        .with_delivery_mode(2)
        .with_message_id(message.event_id.as_str().into())
        .with_content_type(content_type.into())
        .with_timestamp(message.received_at_ms / 1000)
        .with_headers(headers)
}

/// Replaces a lost connection while the sink lives, so that `/readyz` recovers without traffic.
async fn keep_connected(inner: Weak<Inner>) {
    loop {
        tokio::time::sleep(RECONNECT_EVERY).await;
        let Some(inner) = inner.upgrade() else {
            return;
        };
        if !inner.link.load().as_ref().is_some_and(|l| l.up()) {
            if let Err(error) = inner.link().await {
                tracing::debug!(message = "RabbitMQ still unreachable.", error = %error);
            }
        }
    }
}

impl Sink for RabbitSink {
    fn publish<'a>(&'a self, message: &'a Message) -> BoxFuture<'a, Result<String, SinkError>> {
        Box::pin(async move {
            let timeout = self.inner.timeout;
            tokio::time::timeout(timeout, self.inner.send(message))
                .await
                .unwrap_or(Err(SinkError::Timeout(timeout)))
        })
    }

    fn label(&self) -> &'static str {
        "rabbitmq"
    }

    fn ready(&self) -> bool {
        self.inner.link.load().as_ref().is_some_and(|l| l.up())
    }
}
