//! hookonce command line: parse arguments, load configuration, run one subcommand.

use std::io::{IsTerminal, Read};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{bail, Context};
use clap::{Parser, Subcommand, ValueEnum};
use hookonce::app::App;
use hookonce::config::{self, Settings, SinkKind, StoreBackend};
use hookonce::forward::redis::RedisStore;
use hookonce::forward::Target;
use hookonce::providers::{self, SignOptions};
use hookonce::server::{self, Listeners};

/// jemalloc instead of glibc's malloc: request bodies are larger than glibc's per-thread cache,
/// and under load its locked arena path took a quarter of the daemon's CPU (BENCHMARKS.md).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// The embedded default configuration, used when no file is given.
const DEFAULT_CONFIG: &str = include_str!("../config/default.toml");

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
enum LogFormat {
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
    /// Show the dedup record of one event (Redis store).
    Inspect { source: String, event_id: String },
    /// Delete the dedup record of one event, so that a redelivery is forwarded again (Redis store).
    Forget { source: String, event_id: String },
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
    let settings = load_settings(cli.config.as_deref())?;
    match cli.command.unwrap_or(Command::Serve) {
        Command::Serve => {
            // Held until serve returns, so that the last log lines are written before exit.
            let _log_writer = init_logging(cli.log_format, &settings);
            serve(settings)
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
        } => sign(
            &settings,
            &source,
            SignArgs {
                body,
                id,
                event_type,
                out,
            },
        ),
        Command::Inspect { source, event_id } => inspect(&settings, &source, &event_id, false),
        Command::Forget { source, event_id } => inspect(&settings, &source, &event_id, true),
    }
}

fn load_settings(path: Option<&std::path::Path>) -> anyhow::Result<Settings> {
    let settings = match path {
        Some(path) => config::load(Some(path)),
        None => config::load_with_base(DEFAULT_CONFIG),
    };
    settings.context("invalid configuration")
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

fn serve(settings: Settings) -> anyhow::Result<ExitCode> {
    runtime()?.block_on(async move {
        if settings.store.backend == StoreBackend::Memory {
            tracing::warn!(
                message = "Using the in-memory store: dedup state lives in this process only and does not survive a restart. Use store.backend = \"redis\" in production."
            );
        }
        let listeners = Listeners::bind(settings.server.listen, settings.server.metrics_listen)
            .await
            .context("cannot bind the listeners")?;
        let app = Arc::new(App::build(settings).await?);
        app.spawn_background_tasks();
        tracing::info!(
            message = "Listening.",
            webhooks = %listeners.http_addr()?,
            metrics = %listeners.metrics_addr()?,
            sources = app.settings.sources.len(),
            store = app.settings.store.backend.label(),
            sink = app.settings.sink.kind.label(),
        );
        server::run(app, listeners, server::termination_signal()).await;
        tracing::info!(message = "Stopped.");
        Ok(ExitCode::SUCCESS)
    })
}

/// `hookonce sign`'s arguments beyond the source.
struct SignArgs {
    body: Option<PathBuf>,
    id: Option<String>,
    event_type: Option<String>,
    out: Option<PathBuf>,
}

fn sign(settings: &Settings, source: &str, args: SignArgs) -> anyhow::Result<ExitCode> {
    let Some(source_settings) = settings.sources.get(source) else {
        bail!("no source named {source:?} in the configuration");
    };
    let provider = providers::build(source, source_settings)?;
    let body = match &args.body {
        Some(path) => {
            std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?
        }
        None => {
            let mut buffer = Vec::new();
            std::io::stdin()
                .read_to_end(&mut buffer)
                .context("cannot read standard input")?;
            buffer
        }
    };
    let now_unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs() as i64;
    let options = SignOptions {
        event_id: args.id,
        event_type: args.event_type,
        now_unix,
    };
    let name = provider.name();
    let body = match provider
        .sign_body(&body, &options)
        .with_context(|| format!("cannot sign this body as provider {name:?}"))?
    {
        Some(signed) if signed != body => {
            if args.out.is_none() {
                bail!(
                    "provider {name:?} has to change this body to sign it (Adyen puts each item's signature in the body, Linear a fresh webhookTimestamp): pass --out FILE to write the body to send, then send that file (curl --data-binary @FILE)"
                );
            }
            signed
        }
        _ => body,
    };
    if let Some(path) = &args.out {
        std::fs::write(path, &body).with_context(|| format!("cannot write {}", path.display()))?;
    }
    for (name, value) in provider.sign(&body, &options) {
        println!("{name}: {value}");
    }
    Ok(ExitCode::SUCCESS)
}

fn inspect(
    settings: &Settings,
    source: &str,
    event_id: &str,
    forget: bool,
) -> anyhow::Result<ExitCode> {
    let Some(source_settings) = settings.sources.get(source) else {
        bail!("no source named {source:?} in the configuration");
    };
    if settings.store.backend != StoreBackend::Redis {
        bail!("the memory store keeps its records inside the running daemon; inspect and forget need store.backend = \"redis\"");
    }
    let provider = providers::build(source, source_settings)?;
    let target = Target::new(
        &settings.store.key_prefix,
        source,
        provider.name(),
        source_settings.stream.as_deref(),
        std::time::Duration::ZERO,
    );
    let key = target.record_key(event_id);
    runtime()?.block_on(async {
        let store = RedisStore::connect(&settings.store).await?;
        if forget {
            if store.delete_record(&key).await? {
                println!("forgot {key}: the next delivery of this event is forwarded again");
                Ok(ExitCode::SUCCESS)
            } else {
                println!("no record at {key}");
                Ok(ExitCode::from(1))
            }
        } else {
            match store.get_record(&key).await? {
                Some((record, ttl_ms)) => {
                    println!("key:         {key}");
                    match hookonce::forward::ledger::parse_processing(&record) {
                        Some((token, fingerprint, deadline_ms)) => {
                            println!("state:       processing (claimed, not yet completed)");
                            println!("token:       {token}");
                            println!("fingerprint: {fingerprint}");
                            println!("lease_until: {deadline_ms} (unix ms)");
                        }
                        None => {
                            let (entry, fingerprint) =
                                hookonce::forward::parse_record(&record).unwrap_or((&record, ""));
                            println!("state:       done");
                            println!("stream:      {}", target.stream);
                            println!("entry_id:    {entry}");
                            println!("fingerprint: {fingerprint}");
                        }
                    }
                    println!(
                        "expires_in:  {}",
                        humantime::format_duration(std::time::Duration::from_millis(
                            ttl_ms.max(0) as u64
                        ))
                    );
                    Ok(ExitCode::SUCCESS)
                }
                None => {
                    println!("no record at {key}: the event was not seen within its dedup window");
                    Ok(ExitCode::from(1))
                }
            }
        }
    })
}

/// Sets up the log subscriber. Lines are formatted on the request's task but written by one
/// background thread in batches (one `write` per batch instead of one per request); it never
/// drops a line: when its queue is full, logging waits.
fn init_logging(
    format: LogFormat,
    settings: &Settings,
) -> tracing_appender::non_blocking::WorkerGuard {
    use std::io::Write;
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    // The stdout sink owns stdout: logs go to stderr then, so that events stay one JSON per line.
    let to_stderr = settings.sink.kind == SinkKind::Stdout;
    let (terminal, out): (bool, Box<dyn Write + Send>) = if to_stderr {
        (std::io::stderr().is_terminal(), Box::new(std::io::stderr()))
    } else {
        (std::io::stdout().is_terminal(), Box::new(std::io::stdout()))
    };
    let json = match format {
        LogFormat::Json => true,
        LogFormat::Pretty => false,
        LogFormat::Auto => !terminal,
    };
    let (writer, guard) = tracing_appender::non_blocking::NonBlockingBuilder::default()
        .lossy(false)
        .thread_name("hookonce-log")
        .finish(std::io::BufWriter::with_capacity(64 * 1024, out));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .with_ansi(terminal && !json);
    if json {
        builder.json().flatten_event(true).init();
    } else {
        builder.init();
    }
    guard
}
