//! Telemetry (docs/design.md, "Telemetry"): spans exported over OTLP/HTTP protobuf when
//! `[telemetry] otlp_endpoint` is set, and the W3C trace context read from inbound requests,
//! carried in stream entries and sent on every outbound message.
//!
//! `export.rs` installs the one tracer of the process (the batch processor, the exporter over the
//! daemon's own HTTP client, the export failures counted), `otlp.rs` writes a batch as the OTLP
//! protobuf it posts; `span.rs` is what the fronts, the
//! relay and the sinks call. Off, every call there is one check of a `OnceLock` and nothing else:
//! no span is built, no context is read or written.

mod export;
mod otlp;
mod span;

pub use export::{install, shutdown, InstallError};
pub use span::{
    annotate_current, current_headers, current_ids, current_link, enabled, in_current,
    inject_current, link_of, within, Kind, Link, Span, TRACEPARENT,
};
