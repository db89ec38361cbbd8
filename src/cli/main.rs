//! hookonce command line: parse arguments, load configuration, run one subcommand.
//!
//! The only place that uses `anyhow`; each subcommand is a short function over the library
//! (docs/design.md, "Command line"): `serve` here, `sign` in `sign.rs`, `inspect` and `forget`
//! in `inspect.rs`, `relay`, `dlq` and `redeliver` in `relay.rs`, the log subscriber in
//! `logging.rs`.

mod inspect;
mod logging;
mod relay;
mod sign;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};
use hookonce::app::{self, App};
use hookonce::config::{self, StoreBackend};
use hookonce::reload::Reloader;
use hookonce::server::{self, Listeners};

/// jemalloc instead of glibc's malloc: request bodies are larger than glibc's per-thread cache,
/// and under load its locked arena path took a quarter of the daemon's CPU (bench/history/2026-11-30-hot-path.md).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// The embedded default configuration, used when no file is given.
const DEFAULT_CONFIG: &str = include_str!("../../config/default.toml");

#[derive(Parser)]
#[command(
    name = "hookonce",
    version,
    about = "Verify, deduplicate and forward webhooks exactly once"
)]
struct Cli {
    /// Configuration file (TOML). Without it, the embedded default (memory store, stdout sink).
    #[arg(long, global = true, env = "HOOKONCE_CONFIG")]
    config: Option<PathBuf>,

    /// Log format; `auto` is pretty on a terminal and JSON otherwise.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Auto)]
    log_format: LogFormat,

    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum LogFormat {
    Auto,
    Json,
    Pretty,
}

#[derive(Subcommand)]
enum Command {
    /// Serve webhooks (the default).
    Serve,
    /// Validate the configuration and print it with secrets redacted.
    CheckConfig,
    /// Print the headers a provider would send for a body, for `curl -H @-` (and, with --out, write
    /// the body to send when the provider signs inside it).
    Sign {
        /// The configured source whose provider and first secret sign the body.
        #[arg(long)]
        source: String,
        /// The body to sign (default: standard input).
        #[arg(long)]
        body: Option<PathBuf>,
        /// Event ID, for schemes that carry it in a header (random when absent).
        #[arg(long)]
        id: Option<String>,
        /// Event type, for schemes that carry it in a header.
        #[arg(long = "type")]
        event_type: Option<String>,
        /// Write the body to send here. Required when the provider signs inside the body (Adyen)
        /// or has to set a field in it (Linear's webhookTimestamp); the headers are for this body.
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
    },
    /// Show the dedup record of one event, or with --proxy of one Idempotency-Key (Redis store).
    Inspect(inspect::Lookup),
    /// Delete the dedup record of one event, so that a redelivery is forwarded again, or with
    /// --proxy of one Idempotency-Key, so that its next request executes again (Redis store).
    Forget(inspect::Lookup),
    /// Run the relay alone (whatever relay.enabled says): deliver the streams' events to the
    /// routes' workers; serves /metrics on server.metrics_listen and binds nothing else.
    Relay,
    /// List, replay or drop a route's dead letters.
    #[command(subcommand)]
    Dlq(relay::Dlq),
    /// Deliver one event again to one route, read from its stream entry (via its dedup record).
    Redeliver(relay::Redeliver),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("hookonce: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let origin = match cli.config.as_deref() {
        Some(path) => config::Origin::File(path.to_owned()),
        None => config::Origin::Embedded(DEFAULT_CONFIG),
    };
    let loaded = load_settings(&origin)?;
    // Read by every command that starts the runtime; refused here for all of them, check-config
    // included, so that a bad value is named instead of panicking inside the runtime.
    worker_threads()?;
    let settings = loaded.settings.clone();
    match cli.command.unwrap_or(Command::Serve) {
        Command::Serve => {
            // Held until serve returns, so that the last log lines are written before exit.
            let _log_writer =
                logging::init(cli.log_format, &settings).context("cannot start logging")?;
            serve(origin, loaded)
        }
        Command::CheckConfig => {
            print!("{}", settings.to_redacted_toml());
            eprintln!("configuration is valid");
            Ok(ExitCode::SUCCESS)
        }
        Command::Sign {
            source,
            body,
            id,
            event_type,
            out,
        } => sign::run(
            &settings,
            &source,
            sign::Args {
                body,
                id,
                event_type,
                out,
            },
        ),
        Command::Inspect(lookup) => inspect::run(&settings, &lookup, false),
        Command::Forget(lookup) => inspect::run(&settings, &lookup, true),
        Command::Relay => {
            let _log_writer =
                logging::init(cli.log_format, &settings).context("cannot start logging")?;
            relay::run_relay(origin, loaded)
        }
        Command::Dlq(command) => relay::dlq(&settings, &command),
        Command::Redeliver(args) => relay::redeliver(&settings, &args),
    }
}

fn load_settings(origin: &config::Origin) -> anyhow::Result<config::Loaded> {
    let loaded = origin.load().context("invalid configuration")?;
    app::validate(&loaded.settings).context("invalid configuration")?;
    Ok(loaded)
}

/// The environment variable that sets the runtime's number of worker threads (tokio's own
/// name for it; by default one per core the process may use, cgroup CPU limits included).
const WORKER_THREADS: &str = "TOKIO_WORKER_THREADS";

/// The most worker threads `TOKIO_WORKER_THREADS` may ask for.
const MAX_WORKER_THREADS: usize = 1024;

/// `TOKIO_WORKER_THREADS` when it is set: a whole number from 1 to [`MAX_WORKER_THREADS`].
fn worker_threads() -> anyhow::Result<Option<usize>> {
    let Some(value) = std::env::var_os(WORKER_THREADS) else {
        return Ok(None);
    };
    value
        .to_str()
        .and_then(|text| text.parse::<usize>().ok())
        .filter(|n| (1..=MAX_WORKER_THREADS).contains(n))
        .map(Some)
        .ok_or_else(|| {
            anyhow::anyhow!(
                "{WORKER_THREADS}: must be a whole number from 1 to {MAX_WORKER_THREADS}, got {value:?}"
            )
        })
}

pub(crate) fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    // Set here rather than left to the runtime, which panics on a value it cannot read.
    if let Some(threads) = worker_threads()? {
        builder.worker_threads(threads);
    }
    builder
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

fn serve(origin: config::Origin, loaded: config::Loaded) -> anyhow::Result<ExitCode> {
    let config::Loaded { settings, tree } = loaded;
    runtime()?.block_on(async move {
        if settings.store.backend == StoreBackend::Memory {
            tracing::warn!(
                message = "Using the in-memory store: dedup state lives in this process only and does not survive a restart. Use store.backend = \"redis\" in production."
            );
        }
        let listeners = Listeners::bind_for(&settings)
            .await
            .context("cannot bind the listeners")?;
        let app = Arc::new(App::build(settings).await?);
        Reloader::for_app(origin, tree, Arc::clone(&app))
            .spawn()
            .context("cannot listen for SIGHUP")?;
        app.spawn_background_tasks();
        tracing::info!(
            message = "Listening.",
            webhooks = %listeners.http_addr()?,
            metrics = %listeners.metrics_addr()?,
            sources = app.settings.sources.len(),
            store = app.settings.store.backend.label(),
            topology = app.settings.store.topology.label(),
            sink = app.settings.sink.kind.label(),
            workers = tokio::runtime::Handle::current().metrics().num_workers(),
        );
        server::run(app, listeners, server::termination_signal()).await;
        // The spans still queued go out before the process ends.
        let _ = tokio::task::spawn_blocking(hookonce::telemetry::shutdown).await;
        tracing::info!(message = "Stopped.");
        Ok(ExitCode::SUCCESS)
    })
}
