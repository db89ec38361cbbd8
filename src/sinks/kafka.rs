//! Kafka sink: produce each event to the topic `sink.topic` names, with an idempotent producer
//! (`acks=all`, `enable.idempotence=true`), and wait for librdkafka's delivery report.
//!
//! The message key is the event ID (every copy of one event lands in one partition, and a
//! consumer drops a repeat by key), the value is the raw body, and the `hookonce-*` headers (and
//! `traceparent`, when telemetry is on) say where it came from. An event is acknowledged only when
//! its delivery report says the partition leader and its in-sync replicas have it.
//!
//! Two kinds of failure: a definite one (the message was refused before or by the broker, or
//! could not be queued) releases the claim and answers 503, so the provider's retry publishes
//! again at once; an unknown outcome ([`SinkError::OutcomeUnknown`]) keeps the claim until its
//! lease ends, because the broker may already hold the event. librdkafka reports a message that
//! timed out (`sink.timeout`, its `message.timeout.ms`) with one error code whether or not it was
//! ever sent, and the `rdkafka` crate does not expose the message's persistence status without
//! unsafe code, which this crate forbids: every timed-out message is treated as possibly
//! persisted, and so is a delivery report that never came.
//!
//! librdkafka reconnects by itself. A background task probes the cluster (a metadata request)
//! while the brokers are unreachable, so that `/readyz` recovers without traffic; a producer that
//! hit a fatal error (the idempotent producer's sequence lost) is replaced on the next publish.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use arc_swap::ArcSwap;
use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use rdkafka::ClientContext;

use super::{Message, Sink, SinkError};
use crate::config::{expand_topic, SinkSettings, KAFKA_REPORT_GRACE as REPORT_GRACE};
use crate::util::BoxFuture;

/// How often the background task probes a cluster that is unreachable.
const PROBE_EVERY: Duration = Duration::from_millis(500);

/// Why the Kafka sink cannot start.
#[derive(Debug, thiserror::Error)]
pub enum KafkaStartError {
    #[error("cannot configure the Kafka producer for {brokers}")]
    Configure {
        brokers: String,
        #[source]
        source: KafkaError,
    },
    #[error("cannot reach the Kafka brokers {brokers} within {timeout:?}")]
    Connect {
        brokers: String,
        timeout: Duration,
        #[source]
        source: KafkaError,
    },
}

/// librdkafka's callbacks: its log lines into the daemon's log, and whether a broker answers.
struct Callbacks {
    reachable: Arc<AtomicBool>,
}

impl ClientContext for Callbacks {
    fn log(&self, level: RDKafkaLogLevel, facility: &str, line: &str) {
        match level {
            RDKafkaLogLevel::Emerg
            | RDKafkaLogLevel::Alert
            | RDKafkaLogLevel::Critical
            | RDKafkaLogLevel::Error => tracing::error!(message = "librdkafka.", facility, line),
            RDKafkaLogLevel::Warning => tracing::warn!(message = "librdkafka.", facility, line),
            RDKafkaLogLevel::Notice | RDKafkaLogLevel::Info => {
                tracing::info!(message = "librdkafka.", facility, line)
            }
            RDKafkaLogLevel::Debug => tracing::debug!(message = "librdkafka.", facility, line),
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        if error.rdkafka_error_code() == Some(RDKafkaErrorCode::AllBrokersDown) {
            self.reachable.store(false, Ordering::Relaxed);
        }
        tracing::warn!(message = "Kafka client error.", error = %error, reason);
    }
}

type Client = FutureProducer<Callbacks>;

struct Inner {
    config: ClientConfig,
    producer: ArcSwap<Client>,
    /// `sink.brokers` joined, as it may be logged (addresses carry no credential).
    brokers: String,
    topic: String,
    timeout: Duration,
    reachable: Arc<AtomicBool>,
    /// One producer replacement at a time.
    replacing: std::sync::Mutex<()>,
}

pub struct KafkaSink {
    inner: Arc<Inner>,
}

/// librdkafka's configuration for these settings. The password is set here and nowhere logged.
fn client_config(settings: &SinkSettings) -> ClientConfig {
    let timeout_ms = settings.timeout().as_millis().max(1).to_string();
    let security = settings.kafka_security();
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", settings.brokers.join(","))
        .set("client.id", "hookonce")
        .set("acks", "all")
        .set("enable.idempotence", "true")
        .set("message.timeout.ms", &timeout_ms)
        .set("request.timeout.ms", &timeout_ms)
        .set("security.protocol", security.protocol());
    if security.uses_tls() && security.tls_ca_file.is_none() {
        // The system's CAs wherever the distribution keeps them (librdkafka probes the usual
        // bundle paths), not only where OpenSSL was configured to look.
        config.set("ssl.ca.location", "probe");
    }
    for (key, path) in [
        ("ssl.ca.location", security.tls_ca_file),
        ("ssl.certificate.location", security.tls_cert_file),
        ("ssl.key.location", security.tls_key_file),
    ] {
        if let Some(path) = path {
            config.set(key, path.display().to_string());
        }
    }
    if let Some(mechanism) = security.sasl_mechanism {
        config.set("sasl.mechanism", mechanism);
        config.set("sasl.username", security.sasl_username.unwrap_or_default());
        if let Some(password) = security.sasl_password {
            config.set("sasl.password", password.expose());
        }
    }
    config
}

impl KafkaSink {
    /// Creates the producer and waits until a broker answers a metadata request.
    pub async fn connect(settings: &SinkSettings) -> Result<Self, KafkaStartError> {
        let brokers = settings.brokers.join(",");
        let reachable = Arc::new(AtomicBool::new(false));
        let config = client_config(settings);
        let producer =
            create(&config, &reachable).map_err(|source| KafkaStartError::Configure {
                brokers: brokers.clone(),
                source,
            })?;
        let timeout = settings.timeout();
        let inner = Arc::new(Inner {
            config,
            producer: ArcSwap::from_pointee(producer),
            brokers,
            topic: settings.topic().to_owned(),
            timeout,
            reachable,
            replacing: std::sync::Mutex::new(()),
        });
        inner
            .probe(timeout)
            .await
            .map_err(|source| KafkaStartError::Connect {
                brokers: inner.brokers.clone(),
                timeout,
                source,
            })?;
        tracing::info!(message = "Kafka sink ready.", brokers = %inner.brokers, topic = %inner.topic);
        tokio::spawn(keep_probing(Arc::downgrade(&inner)));
        Ok(Self { inner })
    }
}

fn create(config: &ClientConfig, reachable: &Arc<AtomicBool>) -> Result<Client, KafkaError> {
    config.create_with_context(Callbacks {
        reachable: Arc::clone(reachable),
    })
}

impl Inner {
    /// A metadata request to any broker, off the runtime's threads (librdkafka blocks).
    async fn probe(&self, timeout: Duration) -> Result<(), KafkaError> {
        let producer = self.producer.load_full();
        let answered = tokio::task::spawn_blocking(move || {
            producer.client().fetch_metadata(None, timeout).map(|_| ())
        })
        .await
        .unwrap_or(Err(KafkaError::Canceled));
        if answered.is_ok() {
            self.reachable.store(true, Ordering::Relaxed);
        }
        answered
    }

    /// The producer, replaced first when it hit a fatal error (it takes no message after one).
    fn producer(&self) -> Result<Arc<Client>, SinkError> {
        let producer = self.producer.load_full();
        let Some(fatal) = producer.client().fatal_error() else {
            return Ok(producer);
        };
        let _one = self.replacing.lock().unwrap_or_else(|e| e.into_inner());
        let current = self.producer.load_full();
        if !Arc::ptr_eq(&current, &producer) {
            return Ok(current);
        }
        tracing::warn!(message = "Kafka producer hit a fatal error; replacing it.", code = ?fatal.0, reason = %fatal.1);
        let fresh = Arc::new(
            create(&self.config, &self.reachable)
                .map_err(|e| SinkError::Kafka(format!("cannot replace the producer: {e}")))?,
        );
        self.producer.store(Arc::clone(&fresh));
        Ok(fresh)
    }

    async fn send(&self, message: &Message) -> Result<String, SinkError> {
        let topic = expand_topic(&self.topic, &message.source);
        let producer = self.producer()?;
        let record = FutureRecord::to(&topic)
            .key(message.event_id.as_bytes())
            .payload(message.body.as_ref())
            .timestamp(i64::try_from(message.received_at_ms).unwrap_or(i64::MAX))
            .headers(headers(message));
        let delivery = producer
            .send_result(record)
            .map_err(|(error, _)| SinkError::Kafka(format!("cannot queue the message: {error}")))?;
        let report = tokio::time::timeout(self.timeout + REPORT_GRACE, delivery).await;
        match report {
            Ok(Ok(Ok(delivered))) => {
                self.reachable.store(true, Ordering::Relaxed);
                Ok(format!(
                    "kafka:{topic}/{}@{}",
                    delivered.partition, delivered.offset
                ))
            }
            Ok(Ok(Err((error, _)))) if possibly_persisted(&error) => {
                Err(SinkError::OutcomeUnknown {
                    sink: "kafka",
                    problem: error.to_string(),
                })
            }
            Ok(Ok(Err((error, _)))) => Err(SinkError::Kafka(error.to_string())),
            Ok(Err(_canceled)) => Err(SinkError::OutcomeUnknown {
                sink: "kafka",
                problem: "the producer went away before its delivery report".to_owned(),
            }),
            Err(_elapsed) => Err(SinkError::OutcomeUnknown {
                sink: "kafka",
                problem: format!(
                    "no delivery report within {:?}",
                    self.timeout + REPORT_GRACE
                ),
            }),
        }
    }
}

/// Whether a failed delivery may still have reached the broker: a timeout (in flight or not, the
/// report does not say), a purge of in-flight requests, or the idempotent producer's fatal error.
fn possibly_persisted(error: &KafkaError) -> bool {
    matches!(
        error.rdkafka_error_code(),
        Some(
            RDKafkaErrorCode::MessageTimedOut
                | RDKafkaErrorCode::PurgeInflight
                | RDKafkaErrorCode::Fatal
                | RDKafkaErrorCode::OutOfOrderSequenceNumber
        )
    )
}

/// The `hookonce-*` headers, and with telemetry on the publish span's `traceparent`.
fn headers(message: &Message) -> OwnedHeaders {
    let received_at = message.received_at_ms.to_string();
    let mut headers = OwnedHeaders::new_with_capacity(6);
    for (key, value) in [
        ("hookonce-source", message.source.as_str()),
        ("hookonce-provider", message.provider),
        ("hookonce-event-id", message.event_id.as_str()),
        ("hookonce-event-type", message.event_type.as_str()),
        ("hookonce-received-at", received_at.as_str()),
    ] {
        headers = headers.insert(Header {
            key,
            value: Some(value),
        });
    }
    for (key, value) in crate::telemetry::current_headers() {
        headers = headers.insert(Header {
            key,
            value: Some(&value),
        });
    }
    headers
}

/// Probes the cluster while it is unreachable, so that `/readyz` recovers without traffic.
async fn keep_probing(inner: Weak<Inner>) {
    loop {
        tokio::time::sleep(PROBE_EVERY).await;
        let Some(inner) = inner.upgrade() else {
            return;
        };
        if !inner.reachable.load(Ordering::Relaxed) {
            if let Err(error) = inner.probe(PROBE_EVERY.max(Duration::from_secs(1))).await {
                tracing::debug!(message = "Kafka brokers still unreachable.", error = %error);
            }
        }
    }
}

impl Sink for KafkaSink {
    fn publish<'a>(&'a self, message: &'a Message) -> BoxFuture<'a, Result<String, SinkError>> {
        Box::pin(self.inner.send(message))
    }

    fn label(&self) -> &'static str {
        "kafka"
    }

    fn ready(&self) -> bool {
        self.inner.reachable.load(Ordering::Relaxed)
    }
}
