//! The command line of hookonce-loadgen: its subcommands and their arguments (clap), apart from
//! what each command does (main.rs), so that either can be read alone.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::runner::Spacing;

#[derive(Parser)]
#[command(name = "hookonce-loadgen", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Send signed deliveries and report throughput, latency and statuses.
    Run(Box<RunArgs>),
    /// Check a run's record against the queue: exit 1 if anything was lost or duplicated.
    Audit(AuditArgs),
    /// Check the workers' record of relay deliveries against the streams: every entry delivered
    /// to every matching route (or dead-lettered), duplicates explained; exit 1 otherwise.
    AuditRelay(AuditRelayArgs),
    /// Declare the RabbitMQ sink's exchange (durable, direct) and a durable queue bound to it,
    /// for `audit --amqp-queue` to read; hookonce checks its exchange but never declares it.
    AmqpDeclare(AmqpDeclareArgs),
    /// Write pre-signed, all-unique requests to a file, for a client that cannot sign (wrk's
    /// Lua, `bench/wrk-signed.lua`): one template and each request's varying bytes.
    Requests(RequestsArgs),
}

#[derive(Args)]
pub struct RequestsArgs {
    #[command(flatten)]
    pub source: SourceArgs,
    /// Requests to write, each a new event (a client that runs out must say so, not wrap).
    #[arg(long)]
    pub count: u64,
    /// Body size in bytes (an Adyen batch shares it among its items).
    #[arg(long, default_value_t = 1500)]
    pub body_size: usize,
    /// Adyen: notification items per request.
    #[arg(long, default_value_t = 5)]
    pub batch: usize,
    /// Request path (default `/webhooks/SOURCE`).
    #[arg(long)]
    pub path: Option<String>,
    /// The `Host` header.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Event ID prefix (default: random).
    #[arg(long)]
    pub id_prefix: Option<String>,
    /// The file to write.
    #[arg(long)]
    pub out: PathBuf,
}

#[derive(Args)]
pub struct AmqpDeclareArgs {
    /// hookonce configuration file: its sink.url and sink.exchange.
    #[arg(long, env = "HOOKONCE_CONFIG")]
    pub config: PathBuf,
    /// The broker, instead of the configured sink.url (never printed unredacted).
    #[arg(long)]
    pub amqp_url: Option<String>,
    /// The queue to declare and bind.
    #[arg(long)]
    pub queue: String,
    /// The binding key: a routing key the sink's `sink.routing_key` makes (e.g. the source).
    #[arg(long)]
    pub binding: String,
}

#[derive(Args)]
pub struct AuditRelayArgs {
    /// hookonce configuration file with the `[relay.routes]` the workers were fed by.
    #[arg(long, env = "HOOKONCE_CONFIG")]
    pub config: PathBuf,
    /// The workers' JSON-lines records of every delivery attempt.
    #[arg(long, required = true, num_args = 1..)]
    pub deliveries: Vec<PathBuf>,
    /// Read this standalone Redis instead of the configured store (whose topology, cluster or
    /// sentinel, is otherwise followed).
    #[arg(long)]
    pub redis_url: Option<String>,
    /// Write the findings as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// Which source to sign for: a hookonce configuration file, or a provider and secret inline.
#[derive(Args)]
pub struct SourceArgs {
    /// hookonce configuration file (the daemon's); secrets are resolved as the daemon does.
    #[arg(long, env = "HOOKONCE_CONFIG")]
    pub config: Option<PathBuf>,
    /// The configured source to sign for; also the default path `/webhooks/SOURCE`.
    #[arg(long)]
    pub source: String,
    /// Without --config: the provider to sign as (stripe, github, standard, adyen, …).
    #[arg(long, requires = "secret", conflicts_with = "config")]
    pub provider: Option<String>,
    /// Without --config: the signing secret.
    #[arg(long, requires = "provider")]
    pub secret: Option<String>,
}

#[derive(Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub source: SourceArgs,
    /// Base URL of the server (plain HTTP). Repeat it for replicas: the copies of each event
    /// are then split between them.
    #[arg(long, default_value = "http://127.0.0.1:8080", num_args = 1)]
    pub url: Vec<String>,
    /// Request path (default `/webhooks/SOURCE`); other servers use other routes.
    #[arg(long)]
    pub path: Option<String>,
    /// Unique events to send (default: 1000, or unbounded with --duration).
    #[arg(long)]
    pub events: Option<u64>,
    /// Stop making new events after this long (e.g. `30s`); whichever of --events comes first.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub duration: Option<Duration>,
    /// Connections, each with one request in flight.
    #[arg(long, short = 'c', default_value_t = 50)]
    pub concurrency: usize,
    /// Target requests per second (open loop); without it, each connection sends back to back.
    #[arg(long)]
    pub rate: Option<f64>,
    /// Average deliveries per event: 1 = all unique, 1.25 = one event in four delivered twice.
    #[arg(long, default_value_t = 1.0)]
    pub dup_factor: f64,
    /// How duplicates follow the first delivery.
    #[arg(long, value_enum, default_value_t = Spacing::Immediate)]
    pub spacing: Spacing,
    /// With --spacing delayed: the pause between an answer and the next copy.
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    pub dup_delay: Duration,
    /// Body size in bytes (an Adyen batch shares it among its items).
    #[arg(long, default_value_t = 1500)]
    pub body_size: usize,
    /// Adyen: notification items per request.
    #[arg(long, default_value_t = 5)]
    pub batch: usize,
    /// Retry every delivery not answered 2xx, like a provider, with exponential backoff.
    #[arg(long)]
    pub retry: bool,
    /// First retry delay (doubling after each attempt).
    #[arg(long, default_value = "100ms", value_parser = humantime::parse_duration)]
    pub retry_base: Duration,
    /// Longest delay between two attempts.
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    pub retry_max_delay: Duration,
    /// Give up on a delivery this long after its first attempt.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    pub retry_for: Duration,
    /// Per-request timeout; an unanswered request counts as status 0.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
    /// After the last event is made, how long to wait for pending copies and retries
    /// (default: --retry-for with --retry, else --dup-delay plus --timeout).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub drain: Option<Duration>,
    /// Event ID prefix (default: random), unique per run so that runs never collide.
    #[arg(long)]
    pub id_prefix: Option<String>,
    /// Write every attempt's status here, for `audit`.
    #[arg(long)]
    pub record: Option<PathBuf>,
    /// Write the summary as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Progress on stderr every this long; `0s` for none.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    pub progress: Duration,
}

#[derive(Args)]
pub struct AuditArgs {
    /// hookonce configuration file: the queue is read where the daemon writes it.
    #[arg(long, env = "HOOKONCE_CONFIG")]
    pub config: Option<PathBuf>,
    /// The source whose queue to read.
    #[arg(long)]
    pub source: String,
    /// Record files written by `run --record` (several runs may share one queue).
    #[arg(long, required = true, num_args = 1..)]
    pub record: Vec<PathBuf>,
    /// Read this standalone Redis instead of the configured store (whose topology, cluster or
    /// sentinel, is otherwise followed).
    #[arg(long)]
    pub redis_url: Option<String>,
    /// Read this stream key instead of the configured one.
    #[arg(long)]
    pub stream: Option<String>,
    /// RabbitMQ (`sink.kind = "rabbitmq"`, or without --config): the queue to read, bound to
    /// sink.exchange before the daemon started. Its messages are read, not consumed.
    #[arg(long)]
    pub amqp_queue: Option<String>,
    /// RabbitMQ: the broker, instead of the configured sink.url (never printed unredacted).
    #[arg(long, requires = "amqp_queue")]
    pub amqp_url: Option<String>,
    /// RabbitMQ: copies of one event at least this far apart (by hookonce-received-at) are
    /// republishes through the two-phase window, not duplicates (default: the smaller of
    /// sink.lease and sink.timeout, less store.timeout).
    #[arg(long, requires = "amqp_queue", value_parser = humantime::parse_duration)]
    pub republish_gap: Option<Duration>,
    /// Give up reading the queue after this long.
    #[arg(long, default_value = "120s", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
    /// Write the findings as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
}
