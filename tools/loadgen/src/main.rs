//! hookonce-loadgen: provider-realistic signed webhook load, and the exactly-once audit after it.
//!
//! `run` sends deliveries signed exactly as a configured source's provider signs them (it reads the
//! same hookonce configuration file as the daemon, so signatures and secrets never drift), measures
//! throughput and latency, and records every attempt's status. `audit` reads the daemon's queue
//! (Redis Stream, JetStream subject, or a RabbitMQ queue bound to the sink's exchange) and checks
//! the record against it: nothing acknowledged may be missing, nothing may be there twice
//! (RabbitMQ's republishes through the two-phase window are counted apart). `audit-relay` checks
//! the relay's side: the workers' record of deliveries against the streams, route by route.
//!
//! Modules: `cli` (the subcommands and their arguments), `workload` (bodies and signatures), `http`
//! (one raw keep-alive connection per slot), `runner` (dispatch, spacing, retries), `report`
//! (histograms, progress), `record` (the attempt log), `audit` (queue vs record), `rabbitmq_queue`
//! (the audit's RabbitMQ reader), `relay_audit` (workers' record vs streams), `requests`
//! (pre-signed requests in a file, for wrk: `bench/wrk-signed.lua`).

mod audit;
mod cli;
mod http;
mod rabbitmq_queue;
mod record;
mod relay_audit;
mod report;
mod requests;
mod runner;
mod workload;

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::Parser;
use hookonce::config::{self, Settings, SinkKind, SourceSettings};

use crate::cli::{
    AmqpDeclareArgs, AuditArgs, AuditRelayArgs, Cli, Command, RequestsArgs, RunArgs, SourceArgs,
};
use crate::runner::{Plan, RetryPolicy, Spacing};

/// Unix seconds now (signatures need the wall clock, not a monotonic one).
pub(crate) fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let result = match cli.command {
        Command::Run(args) => runtime.block_on(run(*args)),
        Command::Audit(args) => runtime.block_on(audit(args)),
        Command::AuditRelay(args) => runtime.block_on(audit_relay(args)),
        Command::AmqpDeclare(args) => runtime.block_on(amqp_declare(args)),
        Command::Requests(args) => write_requests(args),
    };
    match result {
        Ok(code) => code,
        Err(error) => {
            eprintln!("hookonce-loadgen: {error:#}");
            ExitCode::from(2)
        }
    }
}

fn load(path: &std::path::Path) -> anyhow::Result<Settings> {
    config::load(Some(path)).with_context(|| format!("cannot load {}", path.display()))
}

fn source_settings(args: &SourceArgs) -> anyhow::Result<SourceSettings> {
    if let (Some(provider), Some(secret)) = (&args.provider, &args.secret) {
        let value = serde_json::json!({ "provider": provider, "secrets": [secret] });
        return serde_json::from_value(value).context("invalid --provider/--secret");
    }
    let Some(path) = &args.config else {
        bail!("give --config FILE, or --provider and --secret");
    };
    let mut settings = load(path)?;
    settings
        .sources
        .remove(&args.source)
        .with_context(|| format!("{} has no source {:?}", path.display(), args.source))
}

async fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    let settings = source_settings(&args.source)?;
    let mut addrs = Vec::new();
    let mut authorities = Vec::new();
    for url in &args.url {
        let authority = url
            .strip_prefix("http://")
            .context("--url must start with http://")?
            .trim_end_matches('/');
        let addr = tokio::net::lookup_host(authority)
            .await
            .with_context(|| format!("cannot resolve {authority}"))?
            .next()
            .with_context(|| format!("{authority} has no address"))?;
        addrs.push(addr);
        authorities.push(authority.to_owned());
    }
    if args.dup_factor < 1.0 {
        bail!("--dup-factor must be at least 1");
    }
    if args.spacing == Spacing::Concurrent && args.dup_factor.ceil() as usize > args.concurrency {
        bail!("--spacing concurrent needs --concurrency of at least the copies per event");
    }
    let prefix = args
        .id_prefix
        .unwrap_or_else(|| format!("{:08x}", rand::random::<u32>()));
    let path = args
        .path
        .unwrap_or_else(|| format!("/webhooks/{}", args.source.source));
    let workload = workload::Workload::new(
        &args.source.source,
        &settings,
        path,
        // Replicas of one service answer to the same name; the first URL's names them all.
        authorities[0].clone(),
        prefix.clone(),
        args.body_size,
        args.batch,
    )
    .map_err(anyhow::Error::msg)?;
    let recorder = record::Recorder::create(args.record.as_deref(), &prefix, &args.source.source)
        .context("cannot create the record file")?;
    let retry = args.retry.then_some(RetryPolicy {
        base: args.retry_base,
        max_delay: args.retry_max_delay,
        give_up_after: args.retry_for,
    });
    let drain = args.drain.unwrap_or(match retry {
        Some(retry) => retry.give_up_after + args.timeout,
        None => args.dup_delay + args.timeout,
    });
    let plan = Plan {
        addrs,
        events: args.events.or(if args.duration.is_some() {
            None
        } else {
            Some(1000)
        }),
        duration: args.duration,
        concurrency: args.concurrency.max(1),
        rate: args.rate.filter(|r| *r > 0.0),
        dup_factor: args.dup_factor,
        spacing: args.spacing,
        dup_delay: args.dup_delay,
        retry,
        timeout: args.timeout,
        drain,
        progress: (!args.progress.is_zero()).then_some(args.progress),
    };
    eprintln!(
        "run prefix {prefix}: {} → {}",
        args.source.source,
        args.url.join(", ")
    );
    let summary = runner::run(workload, plan, recorder).await;
    summary.print();
    if let Some(path) = args.json {
        std::fs::write(&path, serde_json::to_vec_pretty(&summary)?)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(ExitCode::SUCCESS)
}

fn write_requests(args: RequestsArgs) -> anyhow::Result<ExitCode> {
    let settings = source_settings(&args.source)?;
    let prefix = args
        .id_prefix
        .unwrap_or_else(|| format!("{:08x}", rand::random::<u32>()));
    let path = args
        .path
        .unwrap_or_else(|| format!("/webhooks/{}", args.source.source));
    let workload = workload::Workload::new(
        &args.source.source,
        &settings,
        path,
        args.host,
        prefix.clone(),
        args.body_size,
        args.batch,
    )
    .map_err(anyhow::Error::msg)?;
    let width = requests::write(&workload, args.count, unix_now(), &args.out)?;
    eprintln!(
        "prefix {prefix}: {} requests for {} ({} per request), {width} varying bytes each, in {}",
        args.count,
        args.source.source,
        workload.events_per_request(),
        args.out.display()
    );
    Ok(ExitCode::SUCCESS)
}

async fn audit(args: AuditArgs) -> anyhow::Result<ExitCode> {
    let settings = args.config.as_deref().map(load).transpose()?;
    let queue = match &settings {
        Some(s) if s.sink.kind == SinkKind::Nats => audit::Queue::JetStream {
            url: s
                .sink
                .nats_url
                .as_ref()
                .context("no sink.nats_url")?
                .0
                .clone(),
            stream: s.sink.nats_stream().to_owned(),
            subject: s.sink.subject().replace("{source}", &args.source),
        },
        Some(s) if s.sink.kind == SinkKind::Rabbitmq || args.amqp_queue.is_some() => {
            rabbitmq_queue(&args, s)?
        }
        None if args.amqp_queue.is_some() => rabbitmq_queue(&args, &Settings::default())?,
        _ => redis_queue(&args, settings.as_ref())?,
    };
    let mut records = record::Records::default();
    for path in &args.record {
        records
            .read(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
    }
    let contents = audit::read_queue(&queue, args.timeout)
        .await
        .map_err(anyhow::Error::msg)?;
    let findings = audit::compare(&records, &contents);
    findings.print();
    if let Some(path) = args.json {
        std::fs::write(&path, serde_json::to_vec_pretty(&findings)?)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(if findings.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// The RabbitMQ queue an audit reads: `--amqp-queue` on `--amqp-url` or the configured
/// `sink.url`, and the gap that tells a republish from a duplicate.
fn rabbitmq_queue(args: &AuditArgs, settings: &Settings) -> anyhow::Result<audit::Queue> {
    let Some(queue) = args.amqp_queue.clone() else {
        bail!(
            "sink.kind = \"rabbitmq\": give --amqp-queue NAME, a queue bound to sink.exchange \
             (hookonce publishes to an exchange; the audit reads a queue)"
        );
    };
    let url = amqp_url(args.amqp_url.clone(), settings)?;
    let republish_gap = match args.republish_gap {
        Some(gap) if gap.is_zero() => bail!("--republish-gap must be above zero"),
        Some(gap) => gap,
        None => {
            let sink = &settings.sink;
            let gap = sink
                .lease()
                .min(sink.timeout())
                .saturating_sub(settings.store.timeout.0);
            if gap.is_zero() {
                bail!(
                    "sink.lease and sink.timeout are no longer than store.timeout: no gap between \
                     copies tells a republish from a duplicate; give --republish-gap"
                );
            }
            gap
        }
    };
    Ok(audit::Queue::RabbitMq {
        url,
        queue,
        republish_gap,
    })
}

/// The broker's URL: `--amqp-url`, checked here so that a mistake names the flag, or the
/// configured `sink.url` (checked when the configuration loaded).
fn amqp_url(flag: Option<String>, settings: &Settings) -> anyhow::Result<String> {
    match flag {
        Some(url) => match config::parse_amqp_url(&url) {
            Ok(_) => Ok(url),
            Err(config::ConfigError::Invalid { problem, .. }) => bail!("--amqp-url: {problem}"),
            Err(other) => bail!("--amqp-url: {other}"),
        },
        None => settings
            .sink
            .url
            .clone()
            .context("give --amqp-url URL, or --config with a sink.url"),
    }
}

/// The store an audit reads: the configured one, whatever its topology, unless `redis_url`
/// names a standalone Redis; with a timeout fit for reading large streams page by page (slower
/// than one daemon call is allowed to be).
fn audit_store(settings: &Settings, redis_url: Option<&str>) -> config::StoreSettings {
    let mut store = settings.store.clone();
    if let Some(url) = redis_url {
        store.topology = config::StoreTopology::Standalone;
        store.redis_url = config::ServiceUrl(url.to_owned());
    }
    store.timeout = config::HumanDuration(store.timeout.0.max(Duration::from_secs(10)));
    store
}

/// The source's streams (every partition's) and the store to read them from (`audit_store`).
fn redis_queue(args: &AuditArgs, settings: Option<&Settings>) -> anyhow::Result<audit::Queue> {
    let store = match (&args.redis_url, settings) {
        (url, Some(s)) => audit_store(s, url.as_deref()),
        (Some(url), None) => audit_store(&Settings::default(), Some(url)),
        (None, None) => bail!("give --config FILE or --redis-url"),
    };
    let streams = match (&args.stream, settings) {
        (Some(stream), _) => vec![stream.clone()],
        (None, Some(s)) if s.sources.contains_key(&args.source) => {
            let (_, target) = hookonce::webhooks::source(s, &args.source)?;
            target.streams()
        }
        (None, s) => {
            let prefix = s.map_or("hookonce", |s| &s.store.key_prefix);
            vec![format!("{prefix}:{{{}}}:events", args.source)]
        }
    };
    Ok(audit::Queue::Redis {
        store: Box::new(store),
        streams,
    })
}

async fn amqp_declare(args: AmqpDeclareArgs) -> anyhow::Result<ExitCode> {
    let settings = load(&args.config)?;
    if settings.sink.kind != SinkKind::Rabbitmq {
        bail!(
            "{} has sink.kind = {:?}, not \"rabbitmq\"",
            args.config.display(),
            settings.sink.kind.label()
        );
    }
    let url = amqp_url(args.amqp_url, &settings)?;
    let exchange = settings.sink.exchange.unwrap_or_default();
    rabbitmq_queue::declare(&url, &exchange, &args.queue, &args.binding)
        .await
        .map_err(anyhow::Error::msg)?;
    eprintln!(
        "declared exchange {exchange:?} and queue {:?} bound with {:?} on {}",
        args.queue,
        args.binding,
        config::redact_url(&url)
    );
    Ok(ExitCode::SUCCESS)
}

async fn audit_relay(args: AuditRelayArgs) -> anyhow::Result<ExitCode> {
    let settings = load(&args.config)?;
    let store = audit_store(&settings, args.redis_url.as_deref());
    let attempts = relay_audit::read_attempts(&args.deliveries)?;
    let findings = relay_audit::audit(&settings, &store, &attempts).await?;
    findings.print();
    if let Some(path) = args.json {
        std::fs::write(&path, serde_json::to_vec_pretty(&findings)?)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(if findings.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
