//! JSON log lines, written straight into the line buffer.
//!
//! The same line, byte for byte, as tracing-subscriber's JSON format with `flatten_event(true)`:
//! `{"timestamp":"…","level":"INFO","message":"…",<fields in order>,"target":"…"}`. That
//! formatter goes through serde for every value, through an `io::Write` adaptor over a
//! `fmt::Write` for every byte of escaping, and formats the date of every line from scratch;
//! this one writes runs of unescaped text whole and formats each second's date once per thread.
//! Events it does not write itself (inside a span, or bridged from the `log` crate, or dated
//! past the year 9999) go to the stock formatter, so their lines are its own.

use std::cell::{Cell, RefCell};
use std::fmt::{self, Write as _};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

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
        // The line is made in this thread's buffer and handed on with one `write_str`: pushing
        // onto a `String` is inlined, where each write through `Writer` is a call through a
        // trait object. A field's `Debug` that logs comes back here while the buffer is in use;
        // that line gets a buffer of its own.
        LINE.with(|buffer| match buffer.try_borrow_mut() {
            Ok(mut line) => {
                line.clear();
                write_line(&mut line, time, &date, event)?;
                let result = writer.write_str(&line);
                if line.capacity() > MAX_KEPT_LINE {
                    *line = String::with_capacity(LINE_CAPACITY);
                }
                result
            }
            Err(_) => {
                let mut line = String::with_capacity(LINE_CAPACITY);
                write_line(&mut line, time, &date, event)?;
                writer.write_str(&line)
            }
        })
    }
}

/// The capacity of a thread's line buffer, and past which a long line's buffer is not kept.
const LINE_CAPACITY: usize = 512;
const MAX_KEPT_LINE: usize = 64 * 1024;

thread_local! {
    /// Where this thread makes its lines.
    static LINE: RefCell<String> = RefCell::new(String::with_capacity(LINE_CAPACITY));
}

/// One event's whole line, newline included.
fn write_line(
    line: &mut String,
    time: Duration,
    date: &[u8; 19],
    event: &Event<'_>,
) -> fmt::Result {
    let meta = event.metadata();
    line.push_str("{\"timestamp\":\"");
    push_ascii(line, date);
    let micros = time.subsec_micros();
    let mut fraction = *b".000000Z";
    for (i, digit) in fraction[1..7].iter_mut().rev().enumerate() {
        *digit = b'0' + (micros / 10u32.pow(i as u32) % 10) as u8;
    }
    push_ascii(line, &fraction);
    line.push_str("\",\"level\":\"");
    line.push_str(level(meta.level()));
    line.push('"');
    let mut fields = Fields {
        out: line,
        result: Ok(()),
    };
    event.record(&mut fields);
    fields.result?;
    // A traced request's lines name its span (hex IDs: nothing to escape).
    if let Some((trace_id, span_id)) = hookonce::telemetry::current_ids() {
        write!(
            line,
            ",\"trace_id\":\"{trace_id}\",\"span_id\":\"{span_id}\""
        )?;
    }
    line.push_str(",\"target\":\"");
    escape(line, meta.target());
    line.push_str("\"}\n");
    Ok(())
}

/// Appends ASCII bytes (digits and separators) to a line.
fn push_ascii(line: &mut String, bytes: &[u8]) {
    for &byte in bytes {
        debug_assert!(byte.is_ascii());
        line.push(char::from(byte));
    }
}

/// Appends a number in decimal, as `Display` writes it.
fn push_u64(line: &mut String, mut value: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (value % 10) as u8;
        value /= 10;
        if value == 0 {
            break;
        }
    }
    push_ascii(line, &digits[at..]);
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
struct Fields<'a> {
    out: &'a mut String,
    result: fmt::Result,
}

impl Fields<'_> {
    fn entry(&mut self, field: &Field) -> &mut String {
        self.out.push_str(",\"");
        escape(self.out, field.name());
        self.out.push_str("\":");
        self.out
    }
}

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        let out = self.entry(field);
        out.push('"');
        escape(out, value);
        out.push('"');
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if self.result.is_err() {
            return;
        }
        let out = self.entry(field);
        out.push('"');
        let result = write!(Escaped(out), "{value:?}");
        out.push('"');
        self.result = result;
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        push_u64(self.entry(field), value);
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        let out = self.entry(field);
        if value < 0 {
            out.push('-');
        }
        push_u64(out, value.unsigned_abs());
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        // serde_json's own shortest form (and `null` for NaN and infinities).
        let mut buffer = [0u8; 32];
        let mut rest = &mut buffer[..];
        let written = serde_json::to_writer(&mut rest, &value).is_ok();
        let len = 32 - rest.len();
        if written {
            push_ascii(self.entry(field), &buffer[..len]);
        } else if self.result.is_ok() {
            self.result = Err(fmt::Error);
        }
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.entry(field)
            .push_str(if value { "true" } else { "false" });
    }
}

/// A `fmt::Write` that escapes what goes through it as the inside of a JSON string.
struct Escaped<'a>(&'a mut String);

impl fmt::Write for Escaped<'_> {
    fn write_str(&mut self, text: &str) -> fmt::Result {
        escape(self.0, text);
        Ok(())
    }
}

/// What each byte becomes inside a JSON string, as serde_json escapes it: `0` for itself, `u`
/// for `\u00xx`, else the letter after the backslash (`"`, `\`, and `b t n f r`).
const ESCAPES: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut byte = 0;
    while byte < 0x20 {
        table[byte] = b'u';
        byte += 1;
    }
    table[0x08] = b'b';
    table[b'\t' as usize] = b't';
    table[b'\n' as usize] = b'n';
    table[0x0c] = b'f';
    table[b'\r' as usize] = b'r';
    table[b'"' as usize] = b'"';
    table[b'\\' as usize] = b'\\';
    table
};

/// The inside of a JSON string, escaped as serde_json escapes it: `"`, `\`, and the control
/// characters (`\b \t \n \f \r`, the others as `\u00xx`); everything else as it is. Text with
/// nothing to escape, nearly all of it, is found so eight bytes at a time and copied whole.
fn escape(out: &mut String, text: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    if !needs_escaping(text.as_bytes()) {
        out.push_str(text);
        return;
    }
    let mut start = 0;
    for (i, &byte) in text.as_bytes().iter().enumerate() {
        let escape = ESCAPES[usize::from(byte)];
        if escape == 0 {
            continue;
        }
        // Every byte escaped is ASCII, so `i` is a character boundary.
        out.push_str(&text[start..i]);
        out.push('\\');
        if escape == b'u' {
            out.push_str("u00");
            out.push(char::from(HEX[usize::from(byte >> 4)]));
            out.push(char::from(HEX[usize::from(byte & 0xf)]));
        } else {
            out.push(char::from(escape));
        }
        start = i + 1;
    }
    out.push_str(&text[start..]);
}

/// Whether any byte of `bytes` is escaped, looked at eight bytes at a time (the last few padded
/// with spaces).
fn needs_escaping(bytes: &[u8]) -> bool {
    let mut words = bytes.chunks_exact(8);
    for word in &mut words {
        if any_to_escape(u64::from_le_bytes(word.try_into().expect("eight bytes"))) {
            return true;
        }
    }
    let rest = words.remainder();
    let mut last = [b' '; 8];
    last[..rest.len()].copy_from_slice(rest);
    any_to_escape(u64::from_le_bytes(last))
}

/// Whether any of eight bytes is below 0x20, `"` or `\` (the bit tricks of "Bit Twiddling
/// Hacks": `has_less` holds for a bound up to 128, `has_zero` exactly).
fn any_to_escape(word: u64) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let has_zero = |x: u64| x.wrapping_sub(ONES) & !x & HIGHS;
    let control = word.wrapping_sub(ONES * 0x20) & !word & HIGHS;
    let quote = has_zero(word ^ (ONES * u64::from(b'"')));
    let backslash = has_zero(word ^ (ONES * u64::from(b'\\')));
    control | quote | backslash != 0
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

    /// A subscriber of every level writing JSON lines to `writer`: hookonce's own (`own`) or the
    /// stock one.
    fn subscriber(writer: Captured, own: bool) -> tracing::Dispatch {
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
    }

    #[test]
    fn lines_are_the_stock_json_lines_byte_for_byte() {
        let stock = Captured::default();
        let ours = Captured::default();
        tracing::dispatcher::with_default(&subscriber(stock.clone(), false), events);
        tracing::dispatcher::with_default(&subscriber(ours.clone(), true), events);
        let (stock, ours) = (stock.lines(), ours.lines());
        assert_eq!(stock.len(), 6);
        assert_eq!(ours, stock);
        assert!(ours[1].contains("\\u0007 nul \\u0000 esc \\u001b bs \\b ff \\f del \u{7f}"));
    }

    #[test]
    fn a_line_made_while_the_buffer_is_in_use_gets_its_own() {
        // What a field's `Debug` that logs meets under the global subscriber: this thread's line
        // buffer is already borrowed.
        let stock = Captured::default();
        let ours = Captured::default();
        let event = || tracing::info!(message = "Nested.", detail = "a \"quoted\" word", n = 7u64);
        tracing::dispatcher::with_default(&subscriber(stock.clone(), false), event);
        LINE.with(|buffer| {
            let _in_use = buffer.borrow_mut();
            tracing::dispatcher::with_default(&subscriber(ours.clone(), true), event);
        });
        let (stock, ours) = (stock.lines(), ours.lines());
        assert_eq!(ours.len(), 1);
        assert_eq!(ours, stock);
    }

    #[test]
    fn strings_are_escaped_as_serde_json_escapes_them() {
        let check = |text: &str| {
            let mut ours = String::new();
            escape(&mut ours, text);
            let theirs = serde_json::to_string(text).unwrap();
            assert_eq!(format!("\"{ours}\""), theirs, "{text:?}");
        };
        // Every ASCII byte at every offset of a word and past it, and runs of them.
        for byte in 0u8..=0x7f {
            for at in 0..20 {
                let mut text = vec![b'a'; 20];
                text[at] = byte;
                check(std::str::from_utf8(&text).unwrap());
                text[19 - at / 2] = byte;
                check(std::str::from_utf8(&text).unwrap());
            }
        }
        for text in [
            "",
            "\"\"\"\"\"\"\"\"\"",
            "é 東京 \u{7f}\u{80}\u{ff} ok",
            "\u{1f600}\n\u{1f600}",
            "12345678\u{0}",
        ] {
            check(text);
        }
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
