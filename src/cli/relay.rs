//! `hookonce relay`, `hookonce dlq list|replay|drop` and `hookonce redeliver`: the relay alone
//! (its `/metrics` and nothing else), and the operator's hands on dead letters.

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{bail, Context};
use hookonce::config::{Loaded, Origin, Settings, StoreBackend};
use hookonce::metrics::Metrics;
use hookonce::relay::{self, dlq, Relay};
use hookonce::reload::Reloader;
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
pub(crate) fn run_relay(origin: Origin, loaded: Loaded) -> anyhow::Result<ExitCode> {
    let Loaded { settings, tree } = loaded;
    needs_redis(&settings)?;
    runtime()?.block_on(async move {
        let listener = tokio::net::TcpListener::bind(settings.server.metrics_listen)
            .await
            .with_context(|| format!("cannot bind {}", settings.server.metrics_listen))?;
        let store = store::connect(&settings.store)
            .await?
            .context("the relay needs the Redis store")?;
        let metrics = Metrics::new();
        hookonce::telemetry::install(
            &settings.telemetry,
            metrics.counter(
                hookonce::metrics::TELEMETRY_EXPORT_FAILURES_TOTAL,
                Vec::new(),
            ),
        )?;
        let relay = Relay::build(&settings, store.clone(), &metrics).await?;
        Reloader::for_relay(origin, tree, relay.credentials(), metrics.reloads())
            .spawn()
            .context("cannot listen for SIGHUP")?;
        let (stop, stopped) = tokio::sync::watch::channel(false);
        relay::trim::spawn(&settings, store, stopped);
        tracing::info!(
            message = "Relay listening for metrics.",
            metrics = %listener.local_addr()?,
            routes = settings.relay.routes.len(),
            workers = tokio::runtime::Handle::current().metrics().num_workers(),
        );
        let metrics_server = tokio::spawn(serve_metrics(listener, Arc::clone(&metrics)));
        let upkeep = tokio::spawn(upkeep(Arc::clone(&metrics)));
        relay.run(hookonce::server::termination_signal()).await;
        let _ = stop.send(true);
        metrics_server.abort();
        upkeep.abort();
        // The spans still queued go out before the process ends.
        let _ = tokio::task::spawn_blocking(hookonce::telemetry::shutdown).await;
        Ok(ExitCode::SUCCESS)
    })
}

/// Every 5 s, drains the recorded histogram samples into their buckets, as `serve` does: without
/// it every delivery's samples stay in memory until `/metrics` is scraped, and an unscraped relay
/// grows by some 40 bytes per delivery.
async fn upkeep(metrics: Arc<Metrics>) {
    let mut ticker = tokio::time::interval(std::time::Duration::from_secs(5));
    loop {
        ticker.tick().await;
        metrics.run_upkeep();
    }
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
    runtime()?.block_on(async {
        let store = RedisStore::connect(&settings.store).await?;
        match command {
            Dlq::List {
                route,
                source,
                json,
            } => {
                let letters =
                    dlq::list(settings, &store, route.as_deref(), source.as_deref()).await?;
                print_list(&letters, *json)?;
            }
            Dlq::Replay(selection) => {
                let (source, chosen) = selection.chosen();
                let target = selection.target();
                let n = dlq::replay(settings, &store, &selection.route, source, chosen).await?;
                println!("replayed {n} dead letter(s) to route {}", selection.route);
                let result = format!("replayed {n}");
                audited(settings, &store, "dead_letter.replay", target, result).await;
            }
            Dlq::Drop(selection) => {
                let (source, chosen) = selection.chosen();
                let target = selection.target();
                let n = dlq::drop(settings, &store, &selection.route, source, chosen).await?;
                println!("dropped {n} dead letter(s) of route {}", selection.route);
                let result = format!("deleted {n}");
                audited(settings, &store, "dead_letter.delete", target, result).await;
            }
        }
        Ok(ExitCode::SUCCESS)
    })
}

/// Appends a write to the console's audit log; a failure is reported, the write stands.
pub(crate) async fn audited(
    settings: &Settings,
    store: &RedisStore,
    action: &str,
    target: String,
    result: String,
) {
    if let Err(error) = hookonce::console::record_cli(settings, store, action, target, result).await
    {
        eprintln!("hookonce: the write is done, but not in the audit log: {error}");
    }
}

impl Selection {
    /// What the audit log names: `route/id,id…` or `route/all`, and the source if given.
    fn target(&self) -> String {
        let ids = if self.all {
            "all".to_owned()
        } else {
            self.ids.join(",")
        };
        match &self.source {
            Some(source) => format!("{}/{ids} ({source})", self.route),
            None => format!("{}/{ids}", self.route),
        }
    }

    fn chosen(&self) -> (Option<&str>, dlq::Selection) {
        let chosen = if self.all {
            dlq::Selection::All
        } else {
            dlq::Selection::Ids(self.ids.clone())
        };
        (self.source.as_deref(), chosen)
    }
}

fn print_list(letters: &[(String, dlq::DeadLetter)], json: bool) -> anyhow::Result<()> {
    if json {
        for (route, letter) in letters {
            let mut value = serde_json::to_value(letter)?;
            value["route"] = serde_json::Value::String(route.clone());
            println!("{value}");
        }
        return Ok(());
    }
    let rows: Vec<[String; 8]> = letters
        .iter()
        .map(|(route, l)| {
            [
                route.clone(),
                l.source.clone(),
                l.id.clone(),
                l.event_id.clone(),
                l.event_type.clone(),
                l.attempts.clone(),
                if l.last_status.is_empty() {
                    "-".to_owned()
                } else {
                    l.last_status.clone()
                },
                time(&l.dead_lettered_at),
            ]
        })
        .collect();
    let header = [
        "ROUTE",
        "SOURCE",
        "ID",
        "EVENT ID",
        "EVENT TYPE",
        "ATTEMPTS",
        "LAST STATUS",
        "TIME",
    ]
    .map(str::to_owned);
    let mut widths = header.clone().map(|h| h.len());
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    for row in std::iter::once(&header).chain(&rows) {
        let line: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        println!("{}", line.join("  ").trim_end());
    }
    if rows.is_empty() {
        eprintln!("no dead letters");
    }
    Ok(())
}

/// Unix ms as RFC 3339 (UTC, seconds).
fn time(unix_ms: &str) -> String {
    match unix_ms.parse::<u64>() {
        Ok(ms) => humantime::format_rfc3339_seconds(
            std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms),
        )
        .to_string(),
        Err(_) => unix_ms.to_owned(),
    }
}

pub(crate) fn redeliver(settings: &Settings, args: &Redeliver) -> anyhow::Result<ExitCode> {
    needs_redis(settings)?;
    runtime()?.block_on(async {
        let store = RedisStore::connect(&settings.store).await?;
        let entry =
            dlq::redeliver(settings, &store, &args.source, &args.event_id, &args.route).await?;
        println!(
            "handed stream entry {entry} (event {}) back to route {}",
            args.event_id, args.route
        );
        let target = format!("{}/{} ({})", args.route, args.event_id, args.source);
        let result = format!("handed stream entry {entry} back");
        audited(settings, &store, "event.redeliver", target, result).await;
        Ok(ExitCode::SUCCESS)
    })
}
