//! The log subscriber: JSON or pretty lines, written by one background thread in batches
//! (`writer`); JSON lines are formatted by `json`.

mod json;
mod writer;

use std::io::IsTerminal;

use hookonce::config::{Settings, SinkKind};

use crate::LogFormat;

/// Sets up the log subscriber. Lines are formatted on the request's task but written by one
/// background thread in batches (one `write` per batch instead of one per request); it never
/// drops a line: when too much is waiting to be written, logging waits. Dropping the guard
/// writes the last lines.
pub(crate) fn init(format: LogFormat, settings: &Settings) -> std::io::Result<writer::WriterGuard> {
    use std::io::Write;
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    // async-nats logs the server address, credentials included, at debug level; cap it at info
    // whatever RUST_LOG asks for, so that no password reaches the log.
    let filter = filter.add_directive("async_nats=info".parse().expect("a valid directive"));
    // lapin and amq-protocol trace AMQP frames, and connection.start-ok carries the PLAIN
    // password: the same cap (a target directive matches every module path it prefixes).
    let filter = filter
        .add_directive("lapin=info".parse().expect("a valid directive"))
        .add_directive("amq_protocol=info".parse().expect("a valid directive"));
    // librdkafka's own lines come through the Kafka sink's callbacks; the crate's `log` lines
    // (librdkafka's debug contexts included) are capped the same way.
    let filter = filter
        .add_directive("rdkafka=info".parse().expect("a valid directive"))
        .add_directive("librdkafka=info".parse().expect("a valid directive"));
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
    let (writer, guard) = writer::spawn(out)?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .with_ansi(terminal && !json);
    if json {
        // The stock JSON format's field formatter (for spans) with hookonce's event formatter.
        builder
            .json()
            .flatten_event(true)
            .event_format(json::JsonLines::new())
            .init();
    } else {
        builder.init();
    }
    Ok(guard)
}
