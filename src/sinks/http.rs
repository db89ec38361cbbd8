//! HTTP sink: POST each event to an internal worker, with `Idempotency-Key` = the dedup key.
//!
//! Any 2xx completes the claim; any other status, a connection error or a timeout releases it and
//! answers the provider 503, so the provider's retry tries again. The worker should treat a
//! repeated `Idempotency-Key` as already done: that is what absorbs a republish after a crash.

use std::time::Duration;

use http::header::{AUTHORIZATION, CONTENT_TYPE};
use http::{HeaderMap, HeaderName, HeaderValue, Uri};

use super::{Message, Sink, SinkError};
use crate::config::{ConfigError, SinkSettings};
use crate::http_client::{self, Pooled};
use crate::util::BoxFuture;

const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");
const SOURCE: HeaderName = HeaderName::from_static("x-hookonce-source");
const PROVIDER: HeaderName = HeaderName::from_static("x-hookonce-provider");
const EVENT_ID: HeaderName = HeaderName::from_static("x-hookonce-event-id");
const EVENT_TYPE: HeaderName = HeaderName::from_static("x-hookonce-event-type");
const RECEIVED_AT: HeaderName = HeaderName::from_static("x-hookonce-received-at");

/// The most of a worker's answer that is read, so that its connection can be reused.
const READ_ANSWER: usize = 64 << 10;

pub struct HttpSink {
    client: Pooled,
    url: Uri,
    /// `sink.headers`, and `Authorization: Basic` from the URL's user and password unless
    /// those set one.
    headers: HeaderMap,
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
        let url = settings.url.as_deref().expect("validated: url is set");
        let (url, basic_auth) = http_client::target(url)
            .map_err(|problem| ConfigError::invalid("sink.url", problem))?;
        if let Some(basic) = basic_auth {
            headers.entry(AUTHORIZATION).or_insert(basic);
        }
        let timeout = settings.timeout();
        Ok(Self {
            client: http_client::pooled(Some(timeout), usize::MAX),
            url,
            headers,
            timeout,
        })
    }

    async fn send(&self, message: &Message) -> Result<String, SinkError> {
        let mut headers = self.headers.clone();
        let text = |value: &str| {
            HeaderValue::from_str(value).map_err(|_| SinkError::Header("a field of the event"))
        };
        headers.insert(IDEMPOTENCY_KEY, text(&message.dedup_key)?);
        headers.insert(SOURCE, text(&message.source)?);
        headers.insert(PROVIDER, HeaderValue::from_static(message.provider));
        headers.insert(EVENT_ID, text(&message.event_id)?);
        headers.insert(EVENT_TYPE, text(&message.event_type)?);
        headers.insert(RECEIVED_AT, HeaderValue::from(message.received_at_ms));
        if let Some(content_type) = &message.content_type {
            headers.insert(CONTENT_TYPE, text(content_type)?);
        }
        crate::telemetry::inject_current(&mut headers);
        let request = http_client::post(self.url.clone(), headers, message.body.clone());
        let exchange = async {
            let response = self
                .client
                .request(request)
                .await
                .map_err(SinkError::Http)?;
            let status = response.status();
            http_client::read_some(response, READ_ANSWER).await;
            Ok(status)
        };
        let status = tokio::time::timeout(self.timeout, exchange)
            .await
            .map_err(|_| SinkError::Timeout(self.timeout))??;
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
