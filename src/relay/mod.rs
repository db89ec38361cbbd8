//! The relay: delivers the events of the sources' Redis Streams to internal HTTP workers, at
//! least once per matching route, with retries, dead letters and takeover of a stopped relay's
//! entries (docs/design.md, "Relay").
//!
//! Public API:
//! - [`Relay::build`]`(&settings, store, &metrics)` builds every route of `[relay.routes]` and
//!   loads its scripts; [`Relay::run`]`(shutdown)` reads and delivers until `shutdown` resolves,
//!   then lets in-flight deliveries finish within `server.shutdown_timeout` (the others stay
//!   pending, for this relay's successor). `App` runs it when `relay.enabled`; `hookonce relay`
//!   runs it alone.
//! - [`validate`]: the checks that need the relay's own code (signing secrets decode).
//! - [`stream_keys::of_source`]: the one place that says which streams a source has.
//! - [`dlq`]: list, replay and drop dead letters, and [`dlq::redeliver`] one stream entry
//!   (`hookonce dlq …`, `hookonce redeliver`).
//! - [`trim::Trimmer`]: `sink.trim = "acknowledged"`, run by `App` and `hookonce relay`.
//!
//! Parts: `route.rs` (a route's globs and headers), `route_runner.rs` (one route's lanes and read
//! loops), `keeper.rs` (refresh of what it holds, takeover, sampling), `job.rs` (one entry's
//! attempts, ack or dead letter), `deliver.rs` (one HTTP attempt), `backoff.rs`
//! (delays and `Retry-After`), `dlq.rs`, `trim.rs`, `stream_keys.rs` (key names). Every Redis
//! command goes through `store::RedisStore` (its stream methods and scripts).

pub mod backoff;
mod credentials;
pub mod deliver;
pub mod dlq;
mod job;
mod keeper;
mod reload;
pub mod route;
mod route_runner;
mod route_state;
pub mod stream_keys;
pub mod trim;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::config::{ConfigError, Settings};
use crate::metrics::Metrics;
use crate::store::{RedisStartError, RedisStore, RelayScripts};

pub use reload::{PreparedCredentials, RouteCredentials};
pub use route::Route;

/// Why the relay cannot start.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Redis(#[from] RedisStartError),
}

/// Checks what `Settings::validate` cannot: each route's signing secret decodes.
pub fn validate(settings: &Settings) -> Result<(), ConfigError> {
    for (name, route) in &settings.relay.routes {
        Route::build(name, route, settings)?;
    }
    Ok(())
}

/// Every route of one relay process, ready to run.
pub struct Relay {
    routes: Vec<route_runner::RouteRunner>,
    shutdown_timeout: Duration,
    consumer: String,
}

impl Relay {
    /// Builds every configured route; nothing is read until [`Relay::run`].
    pub async fn build(
        settings: &Settings,
        store: RedisStore,
        metrics: &Metrics,
    ) -> Result<Self, RelayError> {
        validate(settings)?;
        let consumer = consumer_name();
        let scripts = Arc::new(RelayScripts::new());
        store.load(&scripts.all()).await?;
        let client = deliver::client();
        let mut routes = Vec::new();
        for (name, route) in &settings.relay.routes {
            let route = Arc::new(Route::build(name, route, settings)?);
            let metrics = Arc::new(metrics.relay_route(name, &route.sources));
            routes.push(route_runner::RouteRunner {
                route,
                metrics,
                store: store.clone(),
                scripts: Arc::clone(&scripts),
                client: client.clone(),
                consumer: consumer.clone(),
                claim_idle: settings.relay.claim_idle.0,
            });
        }
        Ok(Self {
            routes,
            shutdown_timeout: settings.server.shutdown_timeout.0,
            consumer,
        })
    }

    /// The routes' credentials, for a reload to replace while the relay runs.
    pub fn credentials(&self) -> RouteCredentials {
        RouteCredentials::new(self.routes.iter().map(|r| Arc::clone(&r.route)).collect())
    }

    /// This process's consumer name in every group it reads.
    pub fn consumer(&self) -> &str {
        &self.consumer
    }

    /// Reads and delivers until `shutdown` resolves; then waits up to `server.shutdown_timeout`
    /// for the deliveries in flight. What is still unfinished stays pending in Redis.
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send) {
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let mut tasks = tokio::task::JoinSet::new();
        for route in self.routes {
            tasks.spawn(route.run(stopped.clone()));
        }
        tracing::info!(message = "Relay started.", consumer = %self.consumer);
        shutdown.await;
        let _ = stop.send(true);
        let drained = tokio::time::timeout(self.shutdown_timeout, async {
            while tasks.join_next().await.is_some() {}
        })
        .await
        .is_ok();
        if !drained {
            tracing::warn!(
                message = "Relay shutdown timeout reached; unfinished deliveries stay pending."
            );
            tasks.abort_all();
        }
        tracing::info!(message = "Relay stopped.");
    }
}

/// Unique per process and per build of a relay: host, process ID and a random suffix, so that
/// two relays (or a restarted one) never share a consumer and its pending entries.
fn consumer_name() -> String {
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "relay".to_owned());
    let host: String = host
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        .take(64)
        .collect();
    format!(
        "{host}-{}-{:08x}",
        std::process::id(),
        rand::random::<u32>()
    )
}
