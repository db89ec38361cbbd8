//! The daemon's metrics (docs/design.md, "Metrics"), with handles registered up front.
//!
//! - `names.rs`: every metric name in one place; `help.rs`: their units and help texts.
//! - `registry.rs`: [`Metrics`], the recorder, with the webhook front's handles; `proxy.rs` and
//!   `relay.rs` add the proxy's and the relay's.
//!
//! Handles are registered once per source at startup, so the request path never formats a label
//! or looks up a key. Each application owns its own Prometheus recorder rather than the global
//! one, which keeps applications started side by side (tests, benchmarks) from sharing counters.

mod help;
mod names;
mod proxy;
mod registry;
mod relay;

pub use names::*;
pub use proxy::{CompletionFailure, ProxyMetrics};
pub use registry::{BodyGauges, Metrics, ReloadMetrics, SourceMetrics};
pub use relay::RelayMetrics;
