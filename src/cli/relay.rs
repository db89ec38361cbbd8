//! `hookonce relay`, `hookonce dlq list|replay|drop` and `hookonce redeliver`: the relay alone
//! (its `/metrics` and nothing else), and the operator's hands on dead letters.

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{bail, Context};
use hookonce::config::{Settings, StoreBackend};
use hookonce::metrics::Metrics;
use hookonce::relay::{self, Relay};
use hookonce::store::{self, RedisStore};

use crate::runtime;

#[derive(clap::Subcommand)]
pub(crate) enum Dlq {
    /// List dead letters as a table (source, dead-letter ID, event ID, event type, attempts,
    /// last status, time), or with --json one JSON object per line.
    List {
        #[arg(long)]
        route: Option<String>,
        #[arg(long)]
        source: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Hand dead letters back to their route only (attempts start again) and remove them from
    /// the dead-letter stream.
    Replay(Selection),
    /// Delete dead letters.
    Drop(Selection),
}

/// Which dead letters: IDs (with --source when the route reads several sources) or --all.
#[derive(clap::Args)]
pub(crate) struct Selection {
    /// Dead-letter IDs, as `dlq list` prints them.
    #[arg(
        value_name = "ID",
        required_unless_present = "all",
        conflicts_with = "all"
    )]
    pub ids: Vec<String>,
    /// Every dead letter of the route (of --source, if given).
    #[arg(long)]
    pub all: bool,
    #[arg(long)]
    pub route: String,
    #[arg(long)]
    pub source: Option<String>,
}

/// `redeliver SOURCE EVENT_ID --route R`.
#[derive(clap::Args)]
pub(crate) struct Redeliver {
    pub source: String,
    pub event_id: String,
    #[arg(long)]
    pub route: String,
}

fn needs_redis(settings: &Settings) -> anyhow::Result<()> {
    if settings.store.backend != StoreBackend::Redis {
        bail!("the relay needs store.backend = \"redis\" (it reads the Redis Streams)");
    }
    if settings.relay.routes.is_empty() {
        bail!("relay.routes: no route is configured");
    }
    Ok(())
}

/// Runs the relay whatever `relay.enabled` says; serves `/metrics` on `server.metrics_listen`.
pub(crate) fn run_relay(settings: Settings) -> anyhow::Result<ExitCode> {
    needs_redis(&settings)?;
    runtime()?.block_on(async move {
        let listener = tokio::net::TcpListener::bind(settings.server.metrics_listen)
            .await
            .with_context(|| format!("cannot bind {}", settings.server.metrics_listen))?;
        let store = store::connect(&settings.store)
            .await?
            .context("the relay needs the Redis store")?;
        let metrics = Metrics::new();
        let relay = Relay::build(&settings, store.clone(), &metrics).await?;
        let (stop, stopped) = tokio::sync::watch::channel(false);
        relay::trim::spawn(&settings, store, stopped);
        tracing::info!(
            message = "Relay listening for metrics.",
            metrics = %listener.local_addr()?,
            routes = settings.relay.routes.len(),
        );
        let metrics_server = tokio::spawn(serve_metrics(listener, Arc::clone(&metrics)));
        relay.run(hookonce::server::termination_signal()).await;
        let _ = stop.send(true);
        metrics_server.abort();
        Ok(ExitCode::SUCCESS)
    })
}

async fn serve_metrics(listener: tokio::net::TcpListener, metrics: Arc<Metrics>) {
    let router = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let metrics = Arc::clone(&metrics);
            async move {
                metrics.run_upkeep();
                metrics.render()
            }
        }),
    );
    if let Err(error) = axum::serve(listener, router).await {
        tracing::error!(message = "The metrics listener failed.", error = %error);
    }
}

pub(crate) fn dlq(settings: &Settings, command: &Dlq) -> anyhow::Result<ExitCode> {
    needs_redis(settings)?;
    let _ = command;
    runtime()?.block_on(async {
        let _store = RedisStore::connect(&settings.store).await?;
        bail!("dlq: not implemented yet")
    })
}

pub(crate) fn redeliver(settings: &Settings, args: &Redeliver) -> anyhow::Result<ExitCode> {
    needs_redis(settings)?;
    let _ = args;
    bail!("redeliver: not implemented yet")
}
