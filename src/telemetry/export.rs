//! The tracer of the process: a parent-based sampler, a bounded batch processor and the
//! OTLP/HTTP protobuf exporter, which posts through the project's own reqwest client on the
//! daemon's runtime. A collector that is down costs a failed export in the background, counted
//! in `hookonce_telemetry_export_failures_total`; a request never waits for it.

use std::sync::OnceLock;
use std::time::Duration;

use bytes::Bytes;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_http::{HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, Sampler, SdkTracer, SdkTracerProvider, SpanData,
    SpanExporter,
};
use opentelemetry_sdk::Resource;

use crate::config::TelemetrySettings;

/// The spans waiting for export at most; beyond it new spans are dropped, so a dead collector
/// holds a bounded amount of memory.
const MAX_QUEUE: usize = 2048;
const MAX_BATCH: usize = 512;
/// One export's upper bound, connection and answer included.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);

static PROVIDER: OnceLock<SdkTracerProvider> = OnceLock::new();
pub(super) static TRACER: OnceLock<Tracer> = OnceLock::new();

/// The SDK's tracer, and the share of new traces it records.
pub(super) struct Tracer {
    /// Builds recording spans only: `span.rs` decides before it is asked (see [`Tracer::ratio`]).
    pub(super) sdk: SdkTracer,
    /// `telemetry.sample_ratio`: the share of new roots that are recorded. `span.rs` draws a
    /// root's trace ID and keeps the root when the ID falls within the ratio, by the rule of the
    /// SDK's `TraceIdRatioBased`; a span of a trace that is not recorded is never built, so
    /// the SDK's sampler sees only spans to record (`ParentBased(AlwaysOn)`).
    pub(super) ratio: f64,
}

/// Why telemetry could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    #[error("telemetry.otlp_endpoint: cannot build the HTTP client")]
    Client(#[source] reqwest::Error),
    #[error("telemetry.otlp_endpoint: cannot build the OTLP exporter")]
    Exporter(#[source] opentelemetry_otlp::ExporterBuildError),
    #[error("telemetry needs a Tokio runtime to export from")]
    NoRuntime(#[source] tokio::runtime::TryCurrentError),
}

/// Installs the process's tracer when `settings` name a collector; does nothing otherwise, or
/// when a tracer is installed already (a second application in one process shares the first's).
/// `failures` counts the exports that did not reach the collector.
pub fn install(
    settings: &TelemetrySettings,
    failures: metrics::Counter,
) -> Result<(), InstallError> {
    let Some(url) = settings.traces_url() else {
        return Ok(());
    };
    if TRACER.get().is_some() {
        return Ok(());
    }
    let runtime = tokio::runtime::Handle::try_current().map_err(InstallError::NoRuntime)?;
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(EXPORT_TIMEOUT)
        .build()
        .map_err(InstallError::Client)?;
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(url)
        .with_timeout(EXPORT_TIMEOUT)
        .with_http_client(OnRuntime { client, runtime })
        .build()
        .map_err(InstallError::Exporter)?;
    let exporter = Counted {
        inner: exporter,
        failures,
    };
    let batch = BatchConfigBuilder::default()
        .with_max_queue_size(MAX_QUEUE)
        .with_max_export_batch_size(MAX_BATCH)
        .with_scheduled_delay(settings.export_interval())
        .build();
    let processor = BatchSpanProcessor::builder(exporter)
        .with_batch_config(batch)
        .build();
    // Every span that reaches the SDK is to be recorded (`Tracer::ratio` says why).
    let sampler = Sampler::ParentBased(Box::new(Sampler::AlwaysOn));
    let provider = SdkTracerProvider::builder()
        .with_span_processor(processor)
        .with_sampler(sampler)
        .with_resource(
            Resource::builder()
                .with_service_name(settings.service_name.clone())
                .build(),
        )
        .build();
    let tracer = Tracer {
        sdk: provider.tracer("hookonce"),
        ratio: settings.sample_ratio,
    };
    if PROVIDER.set(provider).is_ok() {
        let _ = TRACER.set(tracer);
    }
    Ok(())
}

/// Exports what is still queued and stops the exporter (at exit). Blocking: call it off the
/// runtime's worker threads (`spawn_blocking`), since the export itself runs on the runtime.
pub fn shutdown() {
    if let Some(provider) = PROVIDER.get() {
        if let Err(error) = provider.shutdown_with_timeout(EXPORT_TIMEOUT) {
            tracing::warn!(message = "Telemetry did not shut down cleanly.", error = %error);
        }
    }
}

/// The OTLP exporter with every failed export counted.
#[derive(Debug)]
struct Counted<E> {
    inner: E,
    failures: metrics::Counter,
}

impl<E: SpanExporter> SpanExporter for Counted<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let result = self.inner.export(batch).await;
        if result.is_err() {
            self.failures.increment(1);
        }
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// The project's reqwest client, driven on the daemon's runtime: the batch processor exports
/// from a thread of its own, where reqwest has no reactor.
#[derive(Debug)]
struct OnRuntime {
    client: reqwest::Client,
    runtime: tokio::runtime::Handle,
}

#[async_trait::async_trait]
impl HttpClient for OnRuntime {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let (head, body) = request.into_parts();
        let call = self
            .client
            .request(head.method, head.uri.to_string())
            .headers(head.headers)
            .body(body);
        let exchange = self.runtime.spawn(async move {
            let response = call.send().await?;
            let status = response.status();
            let headers = response.headers().clone();
            let body = response.bytes().await?;
            Ok::<_, reqwest::Error>((status, headers, body))
        });
        let (status, headers, body) = exchange.await??;
        let mut response = Response::new(body);
        *response.status_mut() = status;
        *response.headers_mut() = headers;
        Ok(response)
    }
}
