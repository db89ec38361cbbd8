//! JSON log lines, written straight into the line buffer.
//!
//! The same line, byte for byte, as tracing-subscriber's JSON format with `flatten_event(true)`:
//! `{"timestamp":"…","level":"INFO","message":"…",<fields in order>,"target":"…"}`. That
//! formatter goes through serde for every value, through an `io::Write` adaptor over a
//! `fmt::Write` for every byte of escaping, and formats the date of every line from scratch;
//! this one writes runs of unescaped text whole and formats each second's date once per thread.
//! Events it does not write itself (inside a span, or bridged from the `log` crate, or dated
//! past the year 9999) go to the stock formatter, so their lines are its own.

use std::cell::Cell;
use std::fmt::{self, Write as _};
use std::time::{SystemTime, UNIX_EPOCH};

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::{self, Writer};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// The event formatter of `--log-format json`.
pub(crate) struct JsonLines {
    stock: format::Format<format::Json>,
}

impl JsonLines {
    pub(crate) fn new() -> Self {
        Self {
            stock: format::Format::default().json().flatten_event(true),
        }
    }
}

impl<S, N> FormatEvent<S, N> for JsonLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let meta = event.metadata();
        let bridged = meta.fields().field("log.target").is_some();
        let time = SystemTime::now().duration_since(UNIX_EPOCH).ok();
        let date = time.and_then(|t| date_of(t.as_secs()));
        let (Some(time), Some(date)) = (time, date) else {
            return self.stock.format_event(ctx, writer, event);
        };
        if bridged || event.parent().is_some() || ctx.lookup_current().is_some() {
            return self.stock.format_event(ctx, writer, event);
        }
        writer.write_str("{\"timestamp\":\"")?;
        // `from_utf8` cannot fail: the date is ASCII digits and separators.
        writer.write_str(std::str::from_utf8(&date).map_err(|_| fmt::Error)?)?;
        let micros = time.subsec_micros();
        let mut fraction = *b".000000Z\",\"level\":\"";
        for (i, digit) in fraction[1..7].iter_mut().rev().enumerate() {
            *digit = b'0' + (micros / 10u32.pow(i as u32) % 10) as u8;
        }
        writer.write_str(std::str::from_utf8(&fraction).map_err(|_| fmt::Error)?)?;
        writer.write_str(level(meta.level()))?;
        writer.write_char('"')?;
        let mut fields = Fields {
            out: &mut writer,
            result: Ok(()),
        };
        event.record(&mut fields);
        fields.result?;
        // A traced request's lines name its span (hex IDs: nothing to escape).
        if let Some((trace_id, span_id)) = hookonce::telemetry::current_ids() {
            write!(
                writer,
                ",\"trace_id\":\"{trace_id}\",\"span_id\":\"{span_id}\""
            )?;
        }
        writer.write_str(",\"target\":\"")?;
        escape(&mut writer, meta.target())?;
        writer.write_str("\"}\n")
    }
}

fn level(level: &Level) -> &'static str {
    match *level {
        Level::ERROR => "ERROR",
        Level::WARN => "WARN",
        Level::INFO => "INFO",
        Level::DEBUG => "DEBUG",
        Level::TRACE => "TRACE",
    }
}

thread_local! {
    /// The last second this thread formatted, and its text.
    static LAST_SECOND: Cell<(u64, [u8; 19])> = const { Cell::new((u64::MAX, [0; 19])) };
}

/// `YYYY-MM-DDTHH:MM:SS` (UTC) of a Unix second, as tracing-subscriber writes it; `None` past
/// the year 9999, which it writes differently.
fn date_of(secs: u64) -> Option<[u8; 19]> {
    let (last, text) = LAST_SECOND.get();
    if last == secs {
        return Some(text);
    }
    let text = civil(secs)?;
    LAST_SECOND.set((secs, text));
    Some(text)
}

/// The calendar date and time of a Unix second (Howard Hinnant's `civil_from_days`).
fn civil(secs: u64) -> Option<[u8; 19]> {
    let days = i64::try_from(secs / 86_400).ok()?;
    let of_day = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    if year > 9_999 {
        return None;
    }
    let mut text = *b"0000-00-00T00:00:00";
    let mut put = |at: usize, width: usize, mut value: u64| {
        for slot in text[at..at + width].iter_mut().rev() {
            *slot = b'0' + (value % 10) as u8;
            value /= 10;
        }
    };
    put(0, 4, year as u64);
    put(5, 2, month as u64);
    put(8, 2, day as u64);
    put(11, 2, of_day / 3_600);
    put(14, 2, of_day / 60 % 60);
    put(17, 2, of_day % 60);
    Some(text)
}

/// Writes each field as `,"name":value`, as serde_json writes it.
struct Fields<'a, 'w> {
    out: &'a mut Writer<'w>,
    result: fmt::Result,
}

impl Fields<'_, '_> {
    fn entry(&mut self, field: &Field, value: impl FnOnce(&mut Writer<'_>) -> fmt::Result) {
        if self.result.is_err() {
            return;
        }
        self.result = (|| {
            self.out.write_str(",\"")?;
            escape(self.out, field.name())?;
            self.out.write_str("\":")?;
            value(self.out)
        })();
    }
}

impl Visit for Fields<'_, '_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.entry(field, |out| {
            out.write_char('"')?;
            escape(out, value)?;
            out.write_char('"')
        });
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.entry(field, |out| {
            out.write_char('"')?;
            write!(Escaped(out), "{value:?}")?;
            out.write_char('"')
        });
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.entry(field, |out| write!(out, "{value}"));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.entry(field, |out| write!(out, "{value}"));
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.entry(field, |out| {
            // serde_json's own shortest form (and `null` for NaN and infinities).
            let mut buffer = [0u8; 32];
            let mut rest = &mut buffer[..];
            serde_json::to_writer(&mut rest, &value).map_err(|_| fmt::Error)?;
            let len = 32 - rest.len();
            out.write_str(std::str::from_utf8(&buffer[..len]).map_err(|_| fmt::Error)?)
        });
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.entry(field, |out| {
            out.write_str(if value { "true" } else { "false" })
        });
    }
}

/// A `fmt::Write` that escapes what goes through it as the inside of a JSON string.
struct Escaped<'a, W: fmt::Write>(&'a mut W);

impl<W: fmt::Write> fmt::Write for Escaped<'_, W> {
    fn write_str(&mut self, text: &str) -> fmt::Result {
        escape(self.0, text)
    }
}

/// The inside of a JSON string, escaped as serde_json escapes it: `"`, `\`, and the control
/// characters (`\b \t \n \f \r`, the others as `\u00xx`); everything else as it is.
fn escape(out: &mut impl fmt::Write, text: &str) -> fmt::Result {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut start = 0;
    for (i, byte) in text.bytes().enumerate() {
        let short = match byte {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0x08 => "\\b",
            0x0c => "\\f",
            0x00..=0x1f => "",
            _ => continue,
        };
        // Every byte matched above is ASCII, so `i` is a character boundary.
        out.write_str(&text[start..i])?;
        if short.is_empty() {
            out.write_str("\\u00")?;
            out.write_char(char::from(HEX[usize::from(byte >> 4)]))?;
            out.write_char(char::from(HEX[usize::from(byte & 0xf)]))?;
        } else {
            out.write_str(short)?;
        }
        start = i + 1;
    }
    out.write_str(&text[start..])
}

#[cfg(test)]
mod tests {
    use std::io;
    use std::sync::{Arc, Mutex};

    use super::*;

    /// Collects every line a subscriber writes.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl io::Write for Captured {
        fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl Captured {
        /// The lines, each with its timestamp's value replaced by `T` (the two formatters read
        /// the clock at different instants), after checking its shape.
        fn lines(&self) -> Vec<String> {
            let text = String::from_utf8(self.0.lock().unwrap().clone()).unwrap();
            text.lines()
                .map(|line| {
                    let rest = line.strip_prefix("{\"timestamp\":\"").unwrap();
                    let (stamp, rest) = rest.split_at(27);
                    let shape: String = stamp
                        .chars()
                        .map(|c| if c.is_ascii_digit() { '9' } else { c })
                        .collect();
                    assert_eq!(shape, "9999-99-99T99:99:99.999999Z", "{line}");
                    format!("{{\"timestamp\":\"T{rest}")
                })
                .collect()
        }
    }

    #[derive(Debug)]
    struct Failure;

    impl fmt::Display for Failure {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("it \"broke\"\n\tbadly")
        }
    }

    impl std::error::Error for Failure {}

    fn events() {
        tracing::info!(
            message = "Webhook handled.",
            source = "github",
            event_id = "f5808ebf-0000-4000-8000-000000000009",
            events = 1u64,
            outcome = "forwarded",
            status = 200u16,
            latency_ms = 3.2976300000000003,
            detail = ""
        );
        tracing::warn!(message = "Webhook not acknowledged.", detail = "quote \" backslash \\ newline \n tab \t cr \r bell \u{7} nul \u{0} esc \u{1b} bs \u{8} ff \u{c} del \u{7f} é 東京");
        tracing::error!(
            small = 1e-7,
            big = 1e21,
            negative = -2.5,
            zero = -0.0,
            nan = f64::NAN,
            infinite = f64::INFINITY,
            signed = -42i64,
            wide = 170_141_183_460_469_231_731_687_303_715_884_105_727i128,
            yes = true,
            no = false,
            "formatted {} message with {:?}",
            "a",
            "quotes"
        );
        let error = Failure;
        tracing::debug!(debugged = ?vec!["a\"b", "c"], displayed = %error, error = &error as &dyn std::error::Error);
        tracing::trace!(r#type = "raw identifier");
        let span = tracing::info_span!("request", id = 7);
        span.in_scope(|| tracing::info!(inside = "a span"));
    }

    #[test]
    fn lines_are_the_stock_json_lines_byte_for_byte() {
        let stock = Captured::default();
        let ours = Captured::default();
        let subscriber = |writer: Captured, own: bool| {
            let builder = tracing_subscriber::fmt()
                .with_max_level(Level::TRACE)
                .with_writer(move || writer.clone())
                .with_ansi(false)
                .json()
                .flatten_event(true);
            if own {
                tracing::Dispatch::new(builder.event_format(JsonLines::new()).finish())
            } else {
                tracing::Dispatch::new(builder.finish())
            }
        };
        tracing::dispatcher::with_default(&subscriber(stock.clone(), false), events);
        tracing::dispatcher::with_default(&subscriber(ours.clone(), true), events);
        let (stock, ours) = (stock.lines(), ours.lines());
        assert_eq!(stock.len(), 6);
        assert_eq!(ours, stock);
        assert!(ours[1].contains("\\u0007 nul \\u0000 esc \\u001b bs \\b ff \\f del \u{7f}"));
    }

    #[test]
    fn dates_are_utc_calendar_dates() {
        let text = |secs| String::from_utf8(civil(secs).unwrap().to_vec()).unwrap();
        assert_eq!(text(0), "1970-01-01T00:00:00");
        assert_eq!(text(951_782_400), "2000-02-29T00:00:00");
        assert_eq!(text(951_868_799), "2000-02-29T23:59:59");
        assert_eq!(text(951_868_800), "2000-03-01T00:00:00");
        assert_eq!(text(1_796_007_150), "2026-11-30T02:52:30");
        assert_eq!(text(4_107_542_399), "2100-02-28T23:59:59");
        assert_eq!(text(4_107_542_400), "2100-03-01T00:00:00");
        assert_eq!(text(253_402_300_799), "9999-12-31T23:59:59");
        assert!(civil(253_402_300_800).is_none());
        // The per-thread cache gives the same text for a second seen before.
        assert_eq!(date_of(951_782_400), civil(951_782_400));
        assert_eq!(date_of(951_782_400), civil(951_782_400));
    }
}
