//! HTTP sink: POST each event to an internal worker, with `Idempotency-Key` = the dedup key.
//!
//! Any 2xx completes the claim; any other status, a connection error or a timeout releases it and
//! answers the provider 503, so the provider's retry tries again. The worker should treat a
//! repeated `Idempotency-Key` as already done: that is what absorbs a republish after a crash.

use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE};

use super::{Message, Sink, SinkError};
use crate::config::{ConfigError, SinkSettings};
use crate::util::BoxFuture;

pub struct HttpSink {
    client: reqwest::Client,
    url: String,
    timeout: Duration,
}

impl HttpSink {
    pub fn new(settings: &SinkSettings) -> Result<Self, ConfigError> {
        let mut headers = HeaderMap::new();
        for (name, value) in &settings.headers {
            let key = format!("sink.headers.{name}");
            let name = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| ConfigError::invalid(&key, "is not a valid header name"))?;
            let mut value = HeaderValue::from_str(value.expose())
                .map_err(|_| ConfigError::invalid(&key, "is not a valid header value"))?;
            value.set_sensitive(true);
            headers.insert(name, value);
        }
        let timeout = settings.timeout();
        let client = reqwest::Client::builder()
            .default_headers(headers)
            .timeout(timeout)
            .connect_timeout(timeout)
            .build()
            .map_err(|e| ConfigError::invalid("sink.url", e.to_string()))?;
        Ok(Self {
            client,
            url: settings.url.clone().expect("validated: url is set"),
            timeout,
        })
    }

    async fn send(&self, message: &Message) -> Result<String, SinkError> {
        let mut request = self
            .client
            .post(&self.url)
            .header("Idempotency-Key", &message.dedup_key)
            .header("X-Hookonce-Source", &message.source)
            .header("X-Hookonce-Provider", message.provider)
            .header("X-Hookonce-Event-Id", &message.event_id)
            .header("X-Hookonce-Event-Type", &message.event_type)
            .header("X-Hookonce-Received-At", message.received_at_ms)
            .body(message.body.clone());
        if let Some(content_type) = &message.content_type {
            request = request.header(CONTENT_TYPE, content_type);
        }
        for (name, value) in crate::telemetry::current_headers() {
            request = request.header(name, value);
        }
        let response = request.send().await.map_err(|e| {
            if e.is_timeout() {
                SinkError::Timeout(self.timeout)
            } else {
                // reqwest's text ends with the URL, query and credentials included, and this
                // error is logged at WARN on every failed delivery.
                SinkError::Http(e.without_url())
            }
        })?;
        let status = response.status();
        if status.is_success() {
            Ok(format!("http:{}", status.as_u16()))
        } else {
            Err(SinkError::Status(status.as_u16()))
        }
    }
}

impl Sink for HttpSink {
    fn publish<'a>(&'a self, message: &'a Message) -> BoxFuture<'a, Result<String, SinkError>> {
        Box::pin(self.send(message))
    }

    fn label(&self) -> &'static str {
        "http"
    }
}
