//! The tracer of the process: a parent-based sampler, a bounded batch processor and the
//! OTLP/HTTP protobuf exporter, which encodes each batch itself (`otlp.rs`) and posts it through
//! the daemon's own HTTP client (`http_client.rs`) on the daemon's runtime. A collector that is
//! down costs a failed export in the background, counted in
//! `hookonce_telemetry_export_failures_total`; a request never waits for it.

use std::sync::OnceLock;
use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, Sampler, SdkTracer, SdkTracerProvider, SpanData,
    SpanExporter,
};
use opentelemetry_sdk::Resource;

use crate::config::TelemetrySettings;
use crate::http_client::{self, Pooled};

/// The spans waiting for export at most; beyond it new spans are dropped, so a dead collector
/// holds a bounded amount of memory.
const MAX_QUEUE: usize = 2048;
const MAX_BATCH: usize = 512;
/// One export's upper bound, connection and answer included.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);
/// How much of the collector's answer is read: enough for any partial-success message, so that
/// the connection serves the next export.
const READ_ANSWER: usize = 64 * 1024;

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
    /// Validation refuses such an endpoint first; this is for a caller that skipped it.
    #[error("telemetry.otlp_endpoint {0}")]
    Endpoint(String),
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
    let (uri, _) = http_client::target(&url).map_err(InstallError::Endpoint)?;
    let exporter = OtlpHttp {
        client: http_client::pooled(Some(EXPORT_TIMEOUT), 1),
        runtime,
        uri,
        resource: Resource::builder_empty().build(),
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

/// The exporter: each batch encoded as one `ExportTraceServiceRequest` and posted to
/// `{otlp_endpoint}/v1/traces` as `application/x-protobuf`, on the daemon's runtime (the batch
/// processor exports from a thread of its own, which has no reactor). An export that does not
/// reach the collector within [`EXPORT_TIMEOUT`], or that it does not accept (an answer other
/// than 2xx), is counted.
#[derive(Debug)]
struct OtlpHttp {
    client: Pooled,
    runtime: tokio::runtime::Handle,
    uri: http::Uri,
    /// The provider's resource, given by the SDK before the first export.
    resource: Resource,
    failures: metrics::Counter,
}

impl SpanExporter for OtlpHttp {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let body = super::otlp::encode(&self.resource, &batch);
        drop(batch);
        let mut headers = http::HeaderMap::new();
        headers.insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/x-protobuf"),
        );
        let request = http_client::post(self.uri.clone(), headers, body);
        let client = self.client.clone();
        // Everything that needs the runtime (the timer, the connection) is made inside the task:
        // this thread is the batch processor's own.
        let exchange = self.runtime.spawn(async move {
            let exchange = async {
                let response = client.request(request).await?;
                let status = response.status();
                http_client::read_some(response, READ_ANSWER).await;
                Ok::<_, hyper_util::client::legacy::Error>(status)
            };
            tokio::time::timeout(EXPORT_TIMEOUT, exchange).await
        });
        let failure = match exchange.await {
            Ok(Ok(Ok(status))) if status.is_success() => return Ok(()),
            Ok(Ok(Ok(status))) => format!("the collector answered {status}"),
            Ok(Ok(Err(error))) => crate::util::error_chain(&error),
            Ok(Err(_)) => format!("no answer within {EXPORT_TIMEOUT:?}"),
            Err(error) => error.to_string(),
        };
        self.failures.increment(1);
        Err(OTelSdkError::InternalFailure(failure))
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.resource = resource.clone();
    }
}
