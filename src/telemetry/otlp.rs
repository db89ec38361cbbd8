//! A batch of spans as the body of an OTLP/HTTP export: `ExportTraceServiceRequest` in protobuf,
//! written straight from the SDK's span data.
//!
//! The OTLP exporter crate first converts every span into the generated message types (a copy of
//! every string and attribute) and then encodes them with prost, which computes each nested
//! message's length again at every level above it. Written directly, a span costs a pass over its
//! fields: each nested message is written in place behind a one-byte length that is widened
//! afterwards when the message turned out longer than 127 bytes. The messages and field numbers
//! are opentelemetry-proto's `collector/trace/v1`, `trace/v1`, `resource/v1` and `common/v1`; the
//! output decodes, field for field, to what the exporter crate sends (this module's tests).

use std::time::{SystemTime, UNIX_EPOCH};

use opentelemetry::trace::{SpanContext, SpanId, SpanKind, Status};
use opentelemetry::{Array, InstrumentationScope, KeyValue, Value};
use opentelemetry_sdk::trace::SpanData;
use opentelemetry_sdk::Resource;

/// Wire types.
const VARINT: u32 = 0;
const FIXED64: u32 = 1;
const LEN: u32 = 2;
const FIXED32: u32 = 5;

/// `Span.flags`: the context says whether the parent is remote, and whether it is.
const HAS_IS_REMOTE: u32 = 0x100;
const IS_REMOTE: u32 = 0x200;

/// The export request for `spans` of `resource`: one `ResourceSpans`, one `ScopeSpans` per
/// instrumentation scope in the order the scopes first appear.
pub fn encode(resource: &Resource, spans: &[SpanData]) -> Vec<u8> {
    let mut out = Vec::with_capacity(256 + spans.len() * 320);
    let mut scopes: Vec<&InstrumentationScope> = Vec::new();
    for span in spans {
        if !scopes.contains(&&span.instrumentation_scope) {
            scopes.push(&span.instrumentation_scope);
        }
    }
    // ExportTraceServiceRequest.resource_spans
    nested(&mut out, 1, |out| {
        // ResourceSpans.resource
        nested(out, 1, |out| {
            for (key, value) in resource.iter() {
                nested(out, 1, |out| key_value(out, key.as_str(), value));
            }
        });
        for scope in &scopes {
            // ResourceSpans.scope_spans
            nested(out, 2, |out| {
                // ScopeSpans.scope
                nested(out, 1, |out| {
                    string(out, 1, scope.name());
                    string(out, 2, scope.version().unwrap_or_default());
                    for attribute in scope.attributes() {
                        nested(out, 3, |out| {
                            key_value(out, attribute.key.as_str(), &attribute.value)
                        });
                    }
                });
                for data in spans.iter().filter(|s| &&s.instrumentation_scope == scope) {
                    nested(out, 2, |out| span(out, data));
                }
                string(out, 3, scope.schema_url().unwrap_or_default());
            });
        }
        string(out, 3, resource.schema_url().unwrap_or_default());
    });
    out
}

/// One `Span`.
fn span(out: &mut Vec<u8>, data: &SpanData) {
    let context = &data.span_context;
    bytes(out, 1, &context.trace_id().to_bytes());
    bytes(out, 2, &context.span_id().to_bytes());
    string(out, 3, &context.trace_state().header());
    if data.parent_span_id != SpanId::INVALID {
        bytes(out, 4, &data.parent_span_id.to_bytes());
    }
    string(out, 5, &data.name);
    uint(out, 6, kind(&data.span_kind));
    fixed64(out, 7, nanos(data.start_time));
    fixed64(out, 8, nanos(data.end_time));
    attributes(out, 9, &data.attributes);
    uint(out, 10, u64::from(data.dropped_attributes_count));
    for event in data.events.iter() {
        nested(out, 11, |out| {
            fixed64(out, 1, nanos(event.timestamp));
            string(out, 2, &event.name);
            attributes(out, 3, &event.attributes);
            uint(out, 4, u64::from(event.dropped_attributes_count));
        });
    }
    uint(out, 12, u64::from(data.events.dropped_count));
    for link in data.links.iter() {
        nested(out, 13, |out| {
            let linked = &link.span_context;
            bytes(out, 1, &linked.trace_id().to_bytes());
            bytes(out, 2, &linked.span_id().to_bytes());
            string(out, 3, &linked.trace_state().header());
            attributes(out, 4, &link.attributes);
            uint(out, 5, u64::from(link.dropped_attributes_count));
            fixed32(out, 6, flags(linked, linked.is_remote()));
        });
    }
    uint(out, 14, u64::from(data.links.dropped_count));
    // Span.status, always present (its code may be UNSET).
    nested(out, 15, |out| {
        let (message, code) = match &data.status {
            Status::Unset => ("", 0),
            Status::Ok => ("", 1),
            Status::Error { description } => (description.as_ref(), 2),
        };
        string(out, 2, message);
        uint(out, 3, code);
    });
    fixed32(out, 16, flags(context, data.parent_span_is_remote));
}

/// `Span.flags` (and `Span.Link.flags`): the W3C trace flags, and whether the parent (the
/// linked span) is remote.
fn flags(context: &SpanContext, remote: bool) -> u32 {
    let mut flags = u32::from(context.trace_flags().to_u8()) | HAS_IS_REMOTE;
    if remote {
        flags |= IS_REMOTE;
    }
    flags
}

/// `Span.SpanKind`.
fn kind(kind: &SpanKind) -> u64 {
    match kind {
        SpanKind::Internal => 1,
        SpanKind::Server => 2,
        SpanKind::Client => 3,
        SpanKind::Producer => 4,
        SpanKind::Consumer => 5,
    }
}

fn nanos(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map(|since| since.as_nanos() as u64)
        .unwrap_or_default()
}

fn attributes(out: &mut Vec<u8>, field: u32, attributes: &[KeyValue]) {
    for attribute in attributes {
        nested(out, field, |out| {
            key_value(out, attribute.key.as_str(), &attribute.value)
        });
    }
}

/// A `KeyValue`'s fields.
fn key_value(out: &mut Vec<u8>, key: &str, value: &Value) {
    string(out, 1, key);
    nested(out, 2, |out| any_value(out, value));
}

/// An `AnyValue`'s one field (a oneof: written even when it holds a default).
fn any_value(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::Bool(flag) => {
            tag(out, 2, VARINT);
            varint(out, u64::from(*flag));
        }
        Value::I64(number) => {
            tag(out, 3, VARINT);
            varint(out, *number as u64);
        }
        Value::F64(number) => {
            tag(out, 4, FIXED64);
            out.extend_from_slice(&number.to_le_bytes());
        }
        Value::String(text) => {
            tag(out, 1, LEN);
            varint(out, text.as_str().len() as u64);
            out.extend_from_slice(text.as_str().as_bytes());
        }
        Value::Array(array) => nested(out, 5, |out| {
            // ArrayValue.values
            let mut each = |value: Value| nested(out, 1, |out| any_value(out, &value));
            match array {
                Array::Bool(values) => values.iter().for_each(|v| each(Value::Bool(*v))),
                Array::I64(values) => values.iter().for_each(|v| each(Value::I64(*v))),
                Array::F64(values) => values.iter().for_each(|v| each(Value::F64(*v))),
                Array::String(values) => values.iter().for_each(|v| each(Value::String(v.clone()))),
                // A kind of array this version does not know: an empty one.
                _ => {}
            }
        }),
        // A kind of value this version does not know: an AnyValue with none set.
        _ => {}
    }
}

/// A length-delimited field written by `body` in place: one byte is kept for its length, and
/// widened once the length is known to need more.
fn nested(out: &mut Vec<u8>, field: u32, body: impl FnOnce(&mut Vec<u8>)) {
    tag(out, field, LEN);
    let at = out.len();
    out.push(0);
    body(out);
    let length = (out.len() - at - 1) as u64;
    let width = varint_width(length);
    if width > 1 {
        out.splice(at + 1..at + 1, std::iter::repeat_n(0, width - 1));
    }
    let mut cursor = at;
    let mut rest = length;
    while rest >= 0x80 {
        out[cursor] = (rest as u8) | 0x80;
        rest >>= 7;
        cursor += 1;
    }
    out[cursor] = rest as u8;
}

/// A string field; nothing when empty (proto3's default).
fn string(out: &mut Vec<u8>, field: u32, text: &str) {
    bytes(out, field, text.as_bytes());
}

/// A bytes field; nothing when empty.
fn bytes(out: &mut Vec<u8>, field: u32, value: &[u8]) {
    if !value.is_empty() {
        tag(out, field, LEN);
        varint(out, value.len() as u64);
        out.extend_from_slice(value);
    }
}

/// An unsigned or enum field; nothing when zero.
fn uint(out: &mut Vec<u8>, field: u32, value: u64) {
    if value != 0 {
        tag(out, field, VARINT);
        varint(out, value);
    }
}

/// A fixed64 field; nothing when zero.
fn fixed64(out: &mut Vec<u8>, field: u32, value: u64) {
    if value != 0 {
        tag(out, field, FIXED64);
        out.extend_from_slice(&value.to_le_bytes());
    }
}

/// A fixed32 field; nothing when zero.
fn fixed32(out: &mut Vec<u8>, field: u32, value: u32) {
    if value != 0 {
        tag(out, field, FIXED32);
        out.extend_from_slice(&value.to_le_bytes());
    }
}

fn tag(out: &mut Vec<u8>, field: u32, wire: u32) {
    varint(out, u64::from((field << 3) | wire));
}

fn varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

fn varint_width(value: u64) -> usize {
    let bits = 64 - (value | 1).leading_zeros() as usize;
    bits.div_ceil(7)
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;
    use std::time::Duration;

    use opentelemetry::trace::{Event, Link, SpanContext, SpanId, TraceFlags, TraceId, TraceState};
    use opentelemetry::{InstrumentationScope, KeyValue};
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::transform::common::tonic::ResourceAttributesWithSchema;
    use opentelemetry_proto::transform::trace::tonic::group_spans_by_resource_and_scope;
    use opentelemetry_sdk::trace::{SpanEvents, SpanLinks};
    use prost::Message;

    use super::*;

    fn context(trace: u128, span: u64, sampled: bool, remote: bool, state: &str) -> SpanContext {
        let flags = if sampled {
            TraceFlags::SAMPLED
        } else {
            TraceFlags::default()
        };
        let state = if state.is_empty() {
            TraceState::default()
        } else {
            TraceState::from_key_value([("vendor", state)]).unwrap()
        };
        SpanContext::new(
            TraceId::from(trace),
            SpanId::from(span),
            flags,
            remote,
            state,
        )
    }

    /// Spans with every field this module writes set, and a few at their defaults: a root, a
    /// child of a remote parent with a long error, a span of another scope with links, events and
    /// attributes of every kind of value.
    fn spans() -> Vec<SpanData> {
        let at = UNIX_EPOCH + Duration::from_nanos(1_764_856_283_123_456_789);
        let hookonce = InstrumentationScope::builder("hookonce").build();
        let other = InstrumentationScope::builder("other")
            .with_version("1.2.3")
            .with_schema_url("https://opentelemetry.io/schemas/1.30.0")
            .with_attributes([KeyValue::new("scope.attr", "x")])
            .build();
        let base = SpanData {
            span_context: context(
                0x4bf92f3577b34da6a3ce929d0e0e4736,
                0x00f067aa0ba902b7,
                true,
                false,
                "",
            ),
            parent_span_id: SpanId::INVALID,
            parent_span_is_remote: false,
            span_kind: SpanKind::Server,
            name: Cow::Borrowed("webhook"),
            start_time: at,
            end_time: at + Duration::from_micros(850),
            attributes: vec![
                KeyValue::new("hookonce.source", "github"),
                KeyValue::new("http.response.status_code", 200_i64),
            ],
            dropped_attributes_count: 0,
            events: SpanEvents::default(),
            links: SpanLinks::default(),
            status: Status::Unset,
            instrumentation_scope: hookonce.clone(),
        };
        let mut child = base.clone();
        child.span_context = context(7, 8, true, false, "rojo");
        child.parent_span_id = SpanId::from(9);
        child.parent_span_is_remote = true;
        child.span_kind = SpanKind::Internal;
        child.name = Cow::Owned("verify".to_owned());
        child.status = Status::error("a reason ".repeat(40));
        child.dropped_attributes_count = 3;
        child.attributes = vec![];
        let mut linked = base.clone();
        linked.instrumentation_scope = other;
        linked.span_kind = SpanKind::Client;
        linked.name = Cow::Borrowed("redis forward");
        linked.status = Status::Ok;
        linked.attributes = vec![
            KeyValue::new("a.bool", true),
            KeyValue::new("a.false", false),
            KeyValue::new("a.zero", 0_i64),
            KeyValue::new("a.negative", -12_i64),
            KeyValue::new("a.float", 1.5),
            KeyValue::new("a.empty", ""),
            KeyValue::new("a.long", "x".repeat(300)),
            KeyValue::new("a.bools", Value::Array(Array::Bool(vec![true, false]))),
            KeyValue::new("a.ints", Value::Array(Array::I64(vec![1, -2, 300]))),
            KeyValue::new("a.floats", Value::Array(Array::F64(vec![0.25]))),
            KeyValue::new(
                "a.strings",
                Value::Array(Array::String(vec!["p".into(), "".into()])),
            ),
        ];
        let mut links = SpanLinks::default();
        for n in 0..20_u64 {
            links.links.push(Link::new(
                context(u128::from(n) + 100, n + 1, n % 2 == 0, n % 3 == 0, ""),
                vec![KeyValue::new("n", n as i64)],
                u32::from(n == 5),
            ));
        }
        links.dropped_count = 2;
        linked.links = links;
        let mut events = SpanEvents::default();
        events.events.push(Event::new(
            "retry",
            at + Duration::from_micros(10),
            vec![KeyValue::new("attempt", 2_i64)],
            1,
        ));
        events.dropped_count = 4;
        linked.events = events;
        let mut unsampled = base.clone();
        unsampled.span_context = context(1, 2, false, false, "");
        unsampled.start_time = UNIX_EPOCH;
        unsampled.end_time = UNIX_EPOCH;
        vec![base, child, linked, unsampled]
    }

    fn resource() -> Resource {
        Resource::builder()
            .with_service_name("hookonce-test")
            .with_attribute(KeyValue::new("deployment.environment", "ci"))
            .build()
    }

    /// What the OTLP exporter crate sends for the same batch.
    fn reference(resource: &Resource, spans: Vec<SpanData>) -> ExportTraceServiceRequest {
        ExportTraceServiceRequest {
            resource_spans: group_spans_by_resource_and_scope(
                spans,
                &ResourceAttributesWithSchema::from(resource),
            ),
        }
    }

    #[test]
    fn a_batch_decodes_to_what_the_exporter_crate_sends() {
        let resource = resource();
        let written = encode(&resource, &spans());
        let decoded = ExportTraceServiceRequest::decode(written.as_slice()).unwrap();
        assert_eq!(decoded, reference(&resource, spans()));
    }

    #[test]
    fn lengths_are_written_at_their_shortest() {
        // prost writes every length in its shortest form, and so does `nested`: the same message
        // re-encoded by prost is the same bytes, length for length (only the order of fields in
        // a message may differ, so the sizes are compared).
        let resource = resource();
        let written = encode(&resource, &spans());
        let decoded = ExportTraceServiceRequest::decode(written.as_slice()).unwrap();
        assert_eq!(written.len(), decoded.encode_to_vec().len());
    }

    #[test]
    fn an_empty_batch_is_a_resource_without_spans() {
        let resource = resource();
        let decoded = ExportTraceServiceRequest::decode(encode(&resource, &[]).as_slice()).unwrap();
        assert_eq!(decoded.resource_spans.len(), 1);
        assert!(decoded.resource_spans[0].scope_spans.is_empty());
        assert_eq!(decoded, reference(&resource, Vec::new()));
    }

    #[test]
    fn varint_widths() {
        for (value, width) in [
            (0, 1),
            (127, 1),
            (128, 2),
            (16_383, 2),
            (16_384, 3),
            (u64::MAX, 10),
        ] {
            assert_eq!(varint_width(value), width, "{value}");
            let mut out = Vec::new();
            varint(&mut out, value);
            assert_eq!(out.len(), width, "{value}");
        }
    }
}
