//! hookonce: verify, deduplicate and forward webhooks exactly once.
//!
//! Data flows one way: **request → verify → claim/forward → respond**, with metrics on the side.
//! ARCHITECTURE.md has the map; docs/design.md the contract (routes, outcomes, keys, metrics).
//!
//! - [`config`]: typed settings, loaded from defaults, a TOML file and the environment. A leaf.
//! - [`app`]: wires settings into a running application, one part at a time.
//! - [`server`]: listeners, limits, timeouts, health, graceful shutdown.
//! - [`access`]: who may call the webhook front: the client address through trusted proxies,
//!   each source's allowlist and rate limit, and the per-client limit on rejected requests.
//! - [`body`] and [`admission`]: what both fronts share at their door: bodies read within their
//!   size, deadline and memory budget, then one pool of `max_in_flight` permits.
//! - [`webhooks`]: the webhook front: the configured sources, one request's pipeline
//!   ([`webhooks::ingest`]) with the single outcome → HTTP mapping, and
//!   [`webhooks::providers`], one module per signature scheme (raw request → verified events; pure).
//! - [`event`]: the verified event that only a provider can build, and `VerifyError`.
//! - [`forward`]: the exactly-once seam. `Forwarder::forward` deduplicates one verified event and
//!   puts it in the queue: atomically in Redis (one Lua script), or in two phases through the
//!   ledger and a sink.
//! - [`proxy`]: the Idempotency-Key proxy: a reverse proxy that executes each keyed API request
//!   once and replays its response to retries, through the same ledger.
//! - [`relay`]: from the streams to internal HTTP workers: one consumer group per route, retries
//!   with backoff, dead letters, takeover of a stopped relay's entries, and stream trimming.
//! - [`ledger`]: claim / complete / release with a lease and a token, in Redis or in process.
//! - [`store`]: the Redis connection and script calls, and the record formats.
//! - [`sinks`]: where two-phase mode publishes: stdout, a file, NATS JetStream, HTTP.
//! - [`metrics`]: every metric name in one place; [`outcome`]: the outcomes of a delivery.
//! - [`provider_defaults`]: each provider's default dedup window and body dedup, below the fronts.
//! - [`http_client`]: the pooled HTTP client of the outgoing hops (the proxy's upstream, the
//!   relay's workers, the HTTP sink).
//! - [`signing`]: the keyed MACs and the Standard Webhooks signer both the front and the relay use.
//! - [`timer`]: a connection's timers (hyper's header-read timer, its requests' deadlines),
//!   kept from request to request.
//! - [`util`]: a boxed future type and the wall clock.

pub mod access;
pub mod admission;
pub mod app;
pub mod body;
pub mod config;
pub mod console;
pub mod event;
pub mod forward;
pub mod http_client;
pub mod ledger;
pub mod metrics;
pub mod outcome;
#[cfg(test)]
mod property;
pub mod provider_defaults;
pub mod proxy;
pub mod relay;
pub mod reload;
pub mod server;
pub mod signing;
pub mod sinks;
pub mod store;
pub mod telemetry;
pub mod timer;
pub mod util;
pub mod webhooks;
