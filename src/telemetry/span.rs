//! What the rest of the daemon calls: spans that exist only when telemetry is on, and the W3C
//! trace context (`traceparent`, `tracestate`) read from and written to headers and stream
//! entries. Every function starts with the one check of [`enabled`]; off, nothing else runs.

use http::{HeaderMap, HeaderName, HeaderValue};
use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::{
    SpanContext, SpanKind, Status, TraceContextExt, TraceFlags, TraceId, TraceState, Tracer as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{IdGenerator as _, RandomIdGenerator};

use super::export::{Tracer, TRACER};

/// The stream entry field and header that carry the W3C trace context.
pub const TRACEPARENT: &str = "traceparent";

/// Whether spans are exported (`telemetry.otlp_endpoint` is set).
pub fn enabled() -> bool {
    TRACER.get().is_some()
}

/// The kind of a span.
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    Server,
    Client,
    Internal,
}

impl From<Kind> for SpanKind {
    fn from(kind: Kind) -> Self {
        match kind {
            Kind::Server => SpanKind::Server,
            Kind::Client => SpanKind::Client,
            Kind::Internal => SpanKind::Internal,
        }
    }
}

/// Room for the attributes a span is given after it starts (what came of its work: the webhook
/// span's source, outcome, event ID and status code), so that adding them does not grow its
/// list: a grown list cost a sampled request two reallocations, 1 000 instructions.
const ADDED_LATER: usize = 4;

/// A span's first attributes, in a list with [`ADDED_LATER`] places to spare (the SDK keeps the
/// list it is given).
fn with_room(attributes: impl IntoIterator<Item = KeyValue>) -> Vec<KeyValue> {
    let attributes = attributes.into_iter();
    let mut list = Vec::with_capacity(attributes.size_hint().0 + ADDED_LATER);
    list.extend(attributes);
    list
}

/// Another span a span points at (a coalesced store call at each request it carried).
pub type Link = SpanContext;

/// A span, or nothing when telemetry is off. Ends when dropped, unless ended before.
///
/// A span of a trace that is not sampled is never built: it carries its trace's context (so
/// outbound messages pass the decision on and log lines name the trace) and records nothing, so
/// its attributes are never made.
pub struct Span {
    /// A context whose span records (built by the SDK), or the context of a trace not sampled
    /// (a span context only, which records nothing and whose end does nothing).
    context: Option<Context>,
}

impl Span {
    /// No span: telemetry is off.
    pub const fn none() -> Self {
        Self { context: None }
    }

    /// A server span for an inbound request: the child of its `traceparent` (and `tracestate`)
    /// when it carries one, else the root of a new trace.
    pub fn server<A: IntoIterator<Item = KeyValue>>(
        name: &'static str,
        headers: &HeaderMap,
        attributes: impl FnOnce() -> A,
    ) -> Self {
        let Some(tracer) = TRACER.get() else {
            return Self::none();
        };
        let parent = TraceContextPropagator::new().extract(&Headers(headers));
        Self::start(tracer, name, Kind::Server, parent, attributes, Vec::new())
    }

    /// A child of the current span (the task's context).
    pub fn child<A: IntoIterator<Item = KeyValue>>(
        name: &'static str,
        kind: Kind,
        attributes: impl FnOnce() -> A,
    ) -> Self {
        let Some(tracer) = TRACER.get() else {
            return Self::none();
        };
        let parent = Context::current();
        Self::start(tracer, name, kind, parent, attributes, Vec::new())
    }

    /// A span whose parent is `parent` (a context carried from elsewhere, or none: a new root),
    /// linked to each of `links`.
    pub fn under<A: IntoIterator<Item = KeyValue>>(
        name: &'static str,
        kind: Kind,
        parent: Option<&Link>,
        links: Vec<Link>,
        attributes: impl FnOnce() -> A,
    ) -> Self {
        let Some(tracer) = TRACER.get() else {
            return Self::none();
        };
        let parent = match parent {
            Some(link) => Context::new().with_remote_span_context(link.clone()),
            None => Context::new(),
        };
        Self::start(tracer, name, kind, parent, attributes, links)
    }

    /// A span whose parent is the `traceparent` of a stream entry, if it has a readable one.
    pub fn from_traceparent<A: IntoIterator<Item = KeyValue>>(
        name: &'static str,
        kind: Kind,
        traceparent: Option<&[u8]>,
        attributes: impl FnOnce() -> A,
    ) -> Self {
        let Some(tracer) = TRACER.get() else {
            return Self::none();
        };
        let mut headers = HeaderMap::new();
        if let Some(value) = traceparent.and_then(|v| HeaderValue::from_bytes(v).ok()) {
            headers.insert(HeaderName::from_static(TRACEPARENT), value);
        }
        let parent = TraceContextPropagator::new().extract(&Headers(&headers));
        Self::start(tracer, name, kind, parent, attributes, Vec::new())
    }

    /// The span beneath `parent`. The sampling decision is made here, before anything is built:
    /// beneath a parent, the parent's (a trace not sampled stays so, and its span is the
    /// parent's context itself); for a new root, `telemetry.sample_ratio` applied to a fresh
    /// trace ID. Only a span to record reaches the SDK.
    fn start<A: IntoIterator<Item = KeyValue>>(
        tracer: &Tracer,
        name: &'static str,
        kind: Kind,
        parent: Context,
        attributes: impl FnOnce() -> A,
        links: Vec<Link>,
    ) -> Self {
        let (beneath_one, sampled) = {
            let above = parent.span();
            let above = above.span_context();
            (above.is_valid(), above.is_sampled())
        };
        if beneath_one {
            if !sampled {
                return Self::unrecorded(parent);
            }
        } else if tracer.ratio < 1.0 {
            let trace_id = RandomIdGenerator::default().new_trace_id();
            if !within_ratio(tracer.ratio, trace_id) {
                let root = SpanContext::new(
                    trace_id,
                    RandomIdGenerator::default().new_span_id(),
                    TraceFlags::default(),
                    false,
                    TraceState::default(),
                );
                return Self::unrecorded(Context::new().with_remote_span_context(root));
            }
        }
        let span = tracer
            .sdk
            .span_builder(name)
            .with_kind(kind.into())
            .with_attributes(with_room(attributes()))
            .with_links(
                links
                    .into_iter()
                    .map(opentelemetry::trace::Link::with_context)
                    .collect(),
            )
            .start_with_context(&tracer.sdk, &parent);
        Self {
            context: Some(parent.with_span(span)),
        }
    }

    /// The context of a trace that is not sampled, carried without a span of its own.
    fn unrecorded(context: Context) -> Self {
        Self {
            context: Some(context),
        }
    }

    /// The context to run the span's work in (`FutureExt::with_context`), when there is a span.
    pub fn context(&self) -> Option<&Context> {
        self.context.as_ref()
    }

    /// Adds attributes to the span (made only when it records).
    pub fn set<A: IntoIterator<Item = KeyValue>>(&self, attributes: impl FnOnce() -> A) {
        if let Some(cx) = self.recorded() {
            cx.span().set_attributes(attributes());
        }
    }

    /// The span's context when its span records, to write to.
    fn recorded(&self) -> Option<&Context> {
        self.context.as_ref().filter(|cx| cx.span().is_recording())
    }

    /// Ends a server span with the status code its request was answered with.
    pub fn answered(self, status: u16) {
        self.set(|| {
            vec![KeyValue::new(
                "http.response.status_code",
                i64::from(status),
            )]
        });
        self.end();
    }

    /// Marks the span failed, with why.
    pub fn fail(&self, why: impl FnOnce() -> String) {
        if let Some(cx) = self.recorded() {
            cx.span().set_status(Status::error(why()));
        }
    }

    /// The span's context as a link or a parent elsewhere (a sampled span only).
    pub fn link(&self) -> Option<Link> {
        let cx = self.context.as_ref()?;
        let span = cx.span();
        let context = span.span_context();
        (context.is_valid() && context.is_sampled()).then(|| context.clone())
    }

    /// Writes the span's `traceparent` (and `tracestate`) into `headers`.
    pub fn inject(&self, headers: &mut HeaderMap) {
        if let Some(cx) = &self.context {
            inject_into(cx, headers);
        }
    }

    /// Ends the span now.
    pub fn end(mut self) {
        self.finish();
    }

    /// Ends the span (nothing for a trace not sampled: its context has no span to end).
    fn finish(&mut self) {
        if let Some(cx) = self.context.take() {
            cx.span().end();
        }
    }
}

impl Drop for Span {
    fn drop(&mut self) {
        self.finish();
    }
}

/// Whether a new root with `trace_id` is sampled at `ratio` (below 1): the rule of the SDK's
/// `TraceIdRatioBased` (the trace ID's last 8 bytes, shifted right by one, below the ratio of
/// 2^63), so that a trace ID says alike here and there whether its trace was kept.
fn within_ratio(ratio: f64, trace_id: TraceId) -> bool {
    let bound = (ratio.max(0.0) * (1u64 << 63) as f64) as u64;
    let low: [u8; 8] = trace_id.to_bytes()[8..]
        .try_into()
        .expect("a trace ID has 16 bytes");
    (u64::from_be_bytes(low) >> 1) < bound
}

/// `work` in the current context, taken now (a task spawned for it continues the trace); off,
/// `work` as it is.
pub fn in_current<F: std::future::Future>(work: F) -> impl std::future::Future<Output = F::Output> {
    in_context(enabled().then(Context::current), work)
}

/// `work` in `span`'s context, when there is a span.
pub fn within<F: std::future::Future>(
    span: &Span,
    work: F,
) -> impl std::future::Future<Output = F::Output> {
    in_context(span.context().cloned(), work)
}

/// `work`, in `cx` when there is one. One future of `work`'s size and a context: an `async`
/// block that held `work` and awaited it in either of two arms kept room for it three times
/// over (15 KB for a proxied request), and every move of the request's future copied all of it.
fn in_context<F: std::future::Future>(
    cx: Option<Context>,
    work: F,
) -> futures_util::future::Either<opentelemetry::context::WithContext<F>, F> {
    use futures_util::future::Either;
    use opentelemetry::context::FutureExt as _;
    match cx {
        Some(cx) => Either::Left(work.with_context(cx)),
        None => Either::Right(work),
    }
}

/// Adds attributes to the current span (one whose work is running), when telemetry is on and
/// that span records; the attributes are made only then.
pub fn annotate_current<A: IntoIterator<Item = KeyValue>>(attributes: impl FnOnce() -> A) {
    if enabled() {
        let cx = Context::current();
        let span = cx.span();
        if span.is_recording() {
            span.set_attributes(attributes());
        }
    }
}

/// The current span as a link or parent elsewhere (another task, a stream entry), when
/// telemetry is on and the current span is sampled.
pub fn current_link() -> Option<Link> {
    if !enabled() {
        return None;
    }
    let cx = Context::current();
    let span = cx.span();
    let context = span.span_context();
    (context.is_valid() && context.is_sampled()).then(|| context.clone())
}

/// The `traceparent` value of `link`.
pub fn link_of(link: &Link) -> String {
    traceparent(link, link.trace_flags().to_u8())
}

/// The W3C `traceparent` of `context` with `flags`: `00-<trace ID>-<span ID>-<flags>`, in
/// lowercase hex. Written by hand: `format!` of the IDs' hex cost a sampled request 1 300
/// instructions, a fifteenth of its telemetry.
fn traceparent(context: &SpanContext, flags: u8) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    fn hex(out: &mut [u8], bytes: &[u8]) {
        for (pair, byte) in out.chunks_exact_mut(2).zip(bytes) {
            pair[0] = HEX[usize::from(byte >> 4)];
            pair[1] = HEX[usize::from(byte & 0xf)];
        }
    }
    let mut out = *b"00-00000000000000000000000000000000-0000000000000000-00";
    hex(&mut out[3..35], &context.trace_id().to_bytes());
    hex(&mut out[36..52], &context.span_id().to_bytes());
    hex(&mut out[53..55], &[flags]);
    String::from_utf8(out.to_vec()).unwrap_or_default()
}

/// What the SDK's `TraceContextPropagator::inject_context` writes, without its `format!` and its
/// header-name parsing: `traceparent` with the sampled flag alone, and `tracestate` (empty when
/// the context has none), for a valid context; nothing otherwise.
fn inject_into(cx: &Context, headers: &mut HeaderMap) {
    for (name, value) in context_values(cx) {
        if let Ok(value) = HeaderValue::try_from(value) {
            headers.insert(HeaderName::from_static(name), value);
        }
    }
}

/// The `traceparent` and `tracestate` values of `cx`'s span as the propagator writes them; none
/// for an invalid context.
fn context_values(cx: &Context) -> Vec<(&'static str, String)> {
    let span = cx.span();
    let context = span.span_context();
    if !context.is_valid() {
        return Vec::new();
    }
    let flags = (context.trace_flags() & TraceFlags::SAMPLED).to_u8();
    vec![
        (TRACEPARENT, traceparent(context, flags)),
        ("tracestate", context.trace_state().header()),
    ]
}

/// Writes the current span's `traceparent` (and `tracestate`) into `headers` (an outbound
/// message continues the trace); nothing when telemetry is off.
pub fn inject_current(headers: &mut HeaderMap) {
    if !enabled() {
        return;
    }
    inject_into(&Context::current(), headers);
}

/// The current span's `traceparent` (and `tracestate`) as header pairs, for a message whose
/// headers are not an `http::HeaderMap` (NATS, RabbitMQ, Kafka); empty when telemetry is off.
pub fn current_headers() -> Vec<(&'static str, String)> {
    if !enabled() {
        return Vec::new();
    }
    context_values(&Context::current())
}

/// The trace and span IDs of the current span, for a log line; `None` when telemetry is off or
/// no span is current.
pub fn current_ids() -> Option<(String, String)> {
    if !enabled() {
        return None;
    }
    let cx = Context::current();
    let span = cx.span();
    let context = span.span_context();
    context.is_valid().then(|| {
        (
            context.trace_id().to_string(),
            context.span_id().to_string(),
        )
    })
}

struct Headers<'a>(&'a HeaderMap);

impl Extractor for Headers<'_> {
    /// The propagator asks for its two headers by name: those are looked up by a name made at
    /// compile time, not parsed from the text at every request.
    fn get(&self, key: &str) -> Option<&str> {
        const PARENT: HeaderName = HeaderName::from_static(TRACEPARENT);
        const STATE: HeaderName = HeaderName::from_static("tracestate");
        let value = match key {
            TRACEPARENT => self.0.get(PARENT),
            "tracestate" => self.0.get(STATE),
            other => self.0.get(other),
        };
        value.and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(HeaderName::as_str).collect()
    }
}

#[cfg(test)]
mod tests {
    use opentelemetry::propagation::Injector;

    use super::*;

    type Pairs = Vec<(String, String)>;

    struct Written(Pairs);

    impl Injector for Written {
        fn set(&mut self, key: &str, value: String) {
            self.0.push((key.to_owned(), value));
        }
    }

    /// The headers the SDK's propagator writes for `cx`, and those `inject_into` writes.
    fn both(cx: &Context) -> (Pairs, Pairs) {
        let mut sdk = Written(Vec::new());
        TraceContextPropagator::new().inject_context(cx, &mut sdk);
        sdk.0.sort();
        let mut headers = HeaderMap::new();
        inject_into(cx, &mut headers);
        let mut ours: Vec<_> = headers
            .iter()
            .map(|(k, v)| (k.as_str().to_owned(), v.to_str().unwrap().to_owned()))
            .collect();
        ours.sort();
        (sdk.0, ours)
    }

    #[test]
    fn the_context_is_written_as_the_sdk_s_propagator_writes_it() {
        let ids = RandomIdGenerator::default();
        let states = [
            TraceState::default(),
            TraceState::from_key_value([("vendor", "a1"), ("other", "x")]).unwrap(),
        ];
        for round in 0..200u32 {
            let flags = TraceFlags::new((round % 4) as u8);
            let state = states[(round % 2) as usize].clone();
            // Edge IDs too: leading zeros in every nibble position.
            let mut low = [0u8; 16];
            low[15] = 1;
            let trace = match round {
                0 => TraceId::from_bytes(low),
                1 => TraceId::from_bytes([0xff; 16]),
                _ => ids.new_trace_id(),
            };
            let context = SpanContext::new(trace, ids.new_span_id(), flags, true, state);
            let cx = Context::new().with_remote_span_context(context.clone());
            let (sdk, ours) = both(&cx);
            assert_eq!(sdk, ours, "{context:?}");
            let stored = link_of(&context);
            let expected = format!(
                "00-{}-{}-{:02x}",
                context.trace_id(),
                context.span_id(),
                flags.to_u8()
            );
            assert_eq!(stored, expected);
        }
        // An invalid context writes nothing, as the propagator writes nothing.
        let (sdk, ours) = both(&Context::new());
        assert!(sdk.is_empty() && ours.is_empty(), "{sdk:?} {ours:?}");
    }
}
