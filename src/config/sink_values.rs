//! `[sink]`'s values: each key that is set is checked here (bounds, URLs, templates, the Kafka
//! sink's addresses and files), after `SinkSettings::validate` has checked which keys are used.

use super::sink::{
    SinkKind, SinkSettings, COALESCE_IN_FLIGHT, COALESCE_MAX_BYTES, COALESCE_MAX_EVENTS,
    COALESCE_MAX_REQUESTS, MAX_COALESCE_WINDOW,
};
use super::{ConfigError, ABOVE_ZERO, MAX_DEDUP_TTL, MAX_LEASE, MAX_TIMEOUT};

impl SinkSettings {
    /// Checks the values of the keys that are set.
    pub(super) fn validate_values(&self) -> Result<(), ConfigError> {
        // The lease is a Redis `PX` and a deadline in milliseconds, the duplicate window a
        // JetStream count of nanoseconds: bounded, neither can be refused after a write ran.
        for (key, value, max) in [
            ("lease", self.lease, MAX_LEASE),
            ("timeout", self.timeout, MAX_TIMEOUT),
            ("sample_interval", self.sample_interval, MAX_LEASE),
            ("duplicate_window", self.duplicate_window, MAX_DEDUP_TTL),
        ] {
            if let Some(value) = value {
                value.check(format!("sink.{key}"), ABOVE_ZERO, max)?;
            }
        }
        if let Some(window) = self.coalesce_window {
            window.check(
                "sink.coalesce_window",
                std::time::Duration::ZERO,
                MAX_COALESCE_WINDOW,
            )?;
        }
        for (key, value, (min, _, max)) in [
            (
                "coalesce_max_events",
                self.coalesce_max_events,
                COALESCE_MAX_EVENTS,
            ),
            (
                "coalesce_max_requests",
                self.coalesce_max_requests,
                COALESCE_MAX_REQUESTS,
            ),
            (
                "coalesce_in_flight",
                self.coalesce_in_flight,
                COALESCE_IN_FLIGHT,
            ),
        ] {
            if let Some(value) = value {
                if !(min..=max).contains(&value) {
                    return Err(ConfigError::invalid(
                        format!("sink.{key}"),
                        format!("must be {min} to {max}"),
                    ));
                }
            }
        }
        if let Some(bytes) = self.coalesce_max_bytes {
            let (min, _, max) = COALESCE_MAX_BYTES;
            if !(min..=max).contains(&bytes.0) {
                return Err(ConfigError::invalid(
                    "sink.coalesce_max_bytes",
                    "must be 1KiB to 64MiB",
                ));
            }
        }
        if let Some(url) = &self.url {
            if self.kind == SinkKind::Rabbitmq {
                super::sink_amqp::check_url(url)?;
                super::endpoints::check_dial_port("sink.url", url)?;
            } else {
                super::endpoints::check_http_url("sink.url", url)?;
            }
        }
        if let Some(exchange) = &self.exchange {
            super::sink_amqp::check_exchange(exchange)?;
        }
        super::sink_amqp::check_routing_key(self.routing_key())?;
        if self.kind == SinkKind::Kafka {
            for (i, broker) in self.brokers.iter().enumerate() {
                super::sink_kafka::check_broker(&format!("sink.brokers[{i}]"), broker)?;
            }
            super::sink_kafka::check_topic(self.topic())?;
            super::sink_kafka::check_security(&self.kafka_security())?;
            // A publish waits for its report up to the timeout and the grace; a lease that ends
            // sooner would let a retry publish while the first is still waiting.
            let waits = self.timeout() + super::sink_kafka::KAFKA_REPORT_GRACE;
            if self.lease() <= waits {
                return Err(ConfigError::invalid(
                    "sink.lease",
                    format!(
                        "must be longer than sink.timeout and {:?} of grace ({waits:?}), the \
                         longest a Kafka publish waits for its delivery report",
                        super::sink_kafka::KAFKA_REPORT_GRACE
                    ),
                ));
            }
        }
        if let Some(url) = &self.nats_url {
            if !(url.0.starts_with("nats://") || url.0.starts_with("tls://")) {
                return Err(ConfigError::invalid(
                    "sink.nats_url",
                    "must start with nats:// or tls://",
                ));
            }
            super::endpoints::check_dial_port("sink.nats_url", &url.0)?;
        }
        if self.subject().is_empty() || self.subject().contains([' ', '*', '>']) {
            return Err(ConfigError::invalid(
                "sink.subject",
                "must be a literal subject (no spaces or wildcards)",
            ));
        }
        for name in self.headers.keys() {
            let key = format!("sink.headers.{name}");
            if axum::http::HeaderName::from_bytes(name.as_bytes()).is_err() {
                return Err(ConfigError::invalid(key, "is not a valid header name"));
            }
            super::endpoints::check_static_header(&key, name)?;
        }
        Ok(())
    }
}
