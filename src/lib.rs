//! hookonce: verify, deduplicate and forward webhooks exactly once.
//!
//! Data flows one way: **http → verify → dedup/forward → respond**, with metrics on the side.
//!
//! - [`config`]: typed settings, loaded from defaults, a TOML file and the environment.
//! - [`providers`]: one module per signature scheme; raw request → verified events. Pure.
//! - [`forward`]: the exactly-once seam. `Forwarder::forward` deduplicates one verified event and
//!   puts it in the queue: atomically in Redis (one Lua script), or in-process for the memory store.
//! - [`sinks`]: where the memory store's events go: stdout or a file.
//! - [`ingest`]: one request's pipeline and the single outcome → HTTP mapping (DESIGN §2).
//! - [`server`]: listeners, limits, timeouts, health, graceful shutdown.
//! - [`metrics`]: every metric name in one place.
//! - [`app`]: wires settings into a running application.

pub mod app;
pub mod config;
pub mod forward;
pub mod ingest;
pub mod metrics;
pub mod outcome;
pub mod providers;
pub mod server;
pub mod sinks;
