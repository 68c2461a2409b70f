//! The wire mapper ([`super::map`]) against prost's parse followed by the mapping: the same
//! items, the same refusals.

use crate::decode::otlp::common::v1::any_value::Value;
use crate::decode::otlp::common::v1::{self as common, AnyValue, InstrumentationScope, KeyValue};
use crate::decode::otlp::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use crate::decode::otlp::logs_service::ExportLogsServiceRequest;
use crate::decode::otlp::resource::v1::Resource;
use crate::decode::otlp::tests::{assemble, commit, kv, render, s, span, traces, value};
use crate::decode::otlp::trace::v1::{self as trace, Span, Status};
use crate::decode::otlp::trace_service::ExportTraceServiceRequest;
use crate::decode::otlp::{
    ERROR_WITHOUT_OUTCOME, Location, Mapped, Signal, map_logs, map_traces, wire,
};
use proptest::prelude::*;
use prost::Message;

/// Everything a mapping gives, comparable.
type Outcome = (Vec<String>, u64, Vec<Location>);

fn outcome(m: Mapped) -> Outcome {
    (render(m.items.entries()), m.ignored, m.locations)
}

/// What prost's parse and the mapping make of `body`; `Err` where prost refuses it.
fn via_prost(signal: Signal, body: &[u8]) -> Result<Outcome, String> {
    match signal {
        Signal::Traces => ExportTraceServiceRequest::decode(body).map(|r| outcome(map_traces(&r))),
        Signal::Logs => ExportLogsServiceRequest::decode(body).map(|r| outcome(map_logs(&r))),
    }
    .map_err(|e| e.to_string())
}

fn via_wire(signal: Signal, body: &[u8]) -> Result<Outcome, String> {
    wire::map(signal, body)
        .map(outcome)
        .map_err(|e| e.to_string())
}

fn agree(signal: Signal, body: &[u8]) -> Result<(), TestCaseError> {
    match (via_prost(signal, body), via_wire(signal, body)) {
        (Ok(p), Ok(w)) => prop_assert_eq!(p, w),
        (Err(_), Err(_)) => {}
        (p, w) => prop_assert!(false, "prost {p:?}, wire {w:?}, body {body:?}"),
    }
    Ok(())
}

/// Any attribute value, nested arrays and lists included.
fn rich_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        value(),
        any::<f64>().prop_map(Value::DoubleValue),
        proptest::collection::vec(any::<u8>(), 0..4).prop_map(Value::BytesValue),
        Just(Value::IntValue(i64::MIN)),
        Just(Value::StringValue("18446744073709551615".into())),
    ];
    leaf.prop_recursive(3, 12, 3, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..3).prop_map(|vs| {
                Value::ArrayValue(common::ArrayValue {
                    values: vs
                        .into_iter()
                        .map(|v| AnyValue { value: Some(v) })
                        .collect(),
                })
            }),
            proptest::collection::vec(inner, 0..3).prop_map(|vs| {
                Value::KvlistValue(common::KeyValueList {
                    values: vs.into_iter().map(|v| kv("fencing.kind", v)).collect(),
                })
            }),
        ]
    })
}

fn rich_attrs() -> impl Strategy<Value = Vec<KeyValue>> {
    let key = prop_oneof![
        Just("fencing.kind"),
        Just("fencing.scope"),
        Just("fencing.epoch"),
        Just("fencing.route"),
        Just("fencing.outcome"),
        Just("fencing.holder"),
        Just("fencing.unknown"),
        Just("db.system"),
    ];
    let value = prop_oneof![
        4 => rich_value().prop_map(Some),
        1 => Just(None),
    ];
    proptest::collection::vec((key, value), 0..6).prop_map(|v| {
        v.into_iter()
            .map(|(k, v)| KeyValue {
                key: k.into(),
                value: Some(AnyValue { value: v }),
            })
            .collect()
    })
}

fn rich_span() -> impl Strategy<Value = Span> {
    (
        rich_attrs(),
        prop_oneof![Just(0u64), Just(7), Just(u64::MAX)],
        prop_oneof![Just(16usize), Just(8), Just(0)],
        0i32..3,
        any::<bool>(),
        rich_attrs(),
    )
        .prop_map(|(mut a, end, tlen, code, kind, extra)| {
            if kind {
                a.push(s("fencing.kind", "commit"));
            }
            Span {
                trace_id: vec![3; tlen],
                span_id: vec![4; 8],
                name: "UPDATE orders".into(),
                end_time_unix_nano: end,
                attributes: a,
                events: vec![trace::span::Event {
                    time_unix_nano: 1,
                    name: "e".into(),
                    attributes: extra.clone(),
                    dropped_attributes_count: 0,
                }],
                links: vec![trace::span::Link {
                    trace_id: vec![1; 16],
                    span_id: vec![2; 8],
                    attributes: extra,
                    ..Default::default()
                }],
                status: (code > 0).then(|| Status {
                    message: "m".into(),
                    code,
                }),
                ..Span::default()
            }
        })
}

fn rich_traces() -> impl Strategy<Value = ExportTraceServiceRequest> {
    let scope = (rich_attrs(), proptest::collection::vec(rich_span(), 0..4));
    let resource = (rich_attrs(), proptest::collection::vec(scope, 0..3));
    proptest::collection::vec(resource, 0..3).prop_map(assemble)
}

fn rich_logs() -> impl Strategy<Value = ExportLogsServiceRequest> {
    let rec = (rich_attrs(), 0u64..3, 0u64..3, any::<bool>(), rich_value()).prop_map(
        |(mut a, t, o, kind, body)| {
            if kind {
                a.push(s("fencing.kind", "commit"));
            }
            LogRecord {
                time_unix_nano: t,
                observed_time_unix_nano: o,
                body: Some(AnyValue { value: Some(body) }),
                attributes: a,
                severity_text: "INFO".into(),
                ..LogRecord::default()
            }
        },
    );
    let scope = (rich_attrs(), proptest::collection::vec(rec, 0..4));
    let resource = (rich_attrs(), proptest::collection::vec(scope, 0..3));
    proptest::collection::vec(resource, 0..3).prop_map(|rs| ExportLogsServiceRequest {
        resource_logs: rs
            .into_iter()
            .map(|(ra, scopes)| ResourceLogs {
                resource: Some(Resource {
                    attributes: ra,
                    ..Resource::default()
                }),
                scope_logs: scopes
                    .into_iter()
                    .map(|(sa, records)| ScopeLogs {
                        scope: Some(InstrumentationScope {
                            attributes: sa,
                            ..InstrumentationScope::default()
                        }),
                        log_records: records,
                        schema_url: String::new(),
                    })
                    .collect(),
                schema_url: String::new(),
            })
            .collect(),
    })
}

/// A body changed the ways a careless or hostile client changes one.
#[derive(Debug, Clone)]
enum Change {
    None,
    /// Another body after it: prost merges the two (repeated fields append, others merge).
    Append(Vec<u8>),
    Cut(usize),
    Set(usize, u8),
    Insert(usize, Vec<u8>),
}

fn change(other: Vec<u8>) -> impl Strategy<Value = Change> {
    prop_oneof![
        Just(Change::None),
        Just(Change::Append(other)),
        any::<usize>().prop_map(Change::Cut),
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Change::Set(i, b)),
        (any::<usize>(), proptest::collection::vec(any::<u8>(), 1..6))
            .prop_map(|(i, b)| Change::Insert(i, b)),
    ]
}

fn changed(mut body: Vec<u8>, c: Change) -> Vec<u8> {
    let at = |i: usize, len: usize| if len == 0 { 0 } else { i % len };
    match c {
        Change::None => {}
        Change::Append(more) => body.extend_from_slice(&more),
        Change::Cut(i) => body.truncate(at(i, body.len() + 1)),
        Change::Set(i, b) => {
            if !body.is_empty() {
                let i = at(i, body.len());
                body[i] = b;
            }
        }
        Change::Insert(i, b) => {
            let i = at(i, body.len() + 1);
            body.splice(i..i, b);
        }
    }
    body
}

/// Field `tag` holding `bytes` (a length-delimited field), as protobuf encodes it.
fn field(tag: u32, bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    prost::encoding::encode_key(tag, prost::encoding::WireType::LengthDelimited, &mut out);
    prost::encoding::encode_varint(bytes.len() as u64, &mut out);
    out.extend_from_slice(bytes);
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Trace bodies, whole, merged with another, cut or corrupted: the wire mapper gives what
    /// prost and the mapping give, and refuses what prost refuses.
    #[test]
    fn wire_maps_traces_as_prost_and_the_mapping_do(
        (body, c) in (rich_traces(), rich_traces())
            .prop_flat_map(|(a, b)| (Just(a.encode_to_vec()), change(b.encode_to_vec())))
    ) {
        agree(Signal::Traces, &changed(body, c))?;
    }

    /// The same for log bodies.
    #[test]
    fn wire_maps_logs_as_prost_and_the_mapping_do(
        (body, c) in (rich_logs(), rich_logs())
            .prop_flat_map(|(a, b)| (Just(a.encode_to_vec()), change(b.encode_to_vec())))
    ) {
        agree(Signal::Logs, &changed(body, c))?;
    }

    /// Arbitrary bytes: mostly refused, by both.
    #[test]
    fn wire_refuses_what_prost_refuses(body in proptest::collection::vec(any::<u8>(), 0..64)) {
        agree(Signal::Traces, &body)?;
        agree(Signal::Logs, &body)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Messages met twice merge in prost: a span written as two spans back to back, a key and
    /// value written as two, a scope and a resource given twice and after their items. The wire
    /// mapper merges them the same way.
    #[test]
    fn wire_merges_messages_met_twice_as_prost_does(
        (a, b) in (rich_span(), rich_span()),
        (kv1, kv2) in (rich_attrs(), rich_attrs()),
        (s1, s2, r1, r2) in (rich_attrs(), rich_attrs(), rich_attrs(), rich_attrs()),
    ) {
        let mut span = a.encode_to_vec();
        span.extend(b.encode_to_vec());
        // One attribute from two KeyValues (the last key wins; the values merge).
        let mut kv = Vec::new();
        for x in kv1.iter().chain(&kv2).take(2) {
            kv.extend(x.encode_to_vec());
        }
        span.extend(field(9, &kv));
        let scope = |attrs: Vec<KeyValue>| InstrumentationScope {
            attributes: attrs,
            ..InstrumentationScope::default()
        }
        .encode_to_vec();
        let resource = |attrs: Vec<KeyValue>| Resource {
            attributes: attrs,
            ..Resource::default()
        }
        .encode_to_vec();
        let mut ss = field(1, &scope(s1));
        ss.extend(field(2, &span));
        ss.extend(field(2, &a.encode_to_vec()));
        ss.extend(field(1, &scope(s2)));
        let mut rs = field(2, &ss);
        rs.extend(field(1, &resource(r1)));
        rs.extend(field(2, &ss));
        rs.extend(field(1, &resource(r2)));
        let body = field(1, &rs);
        let prost = via_prost(Signal::Traces, &body);
        prop_assert!(prost.is_ok(), "{prost:?}");
        agree(Signal::Traces, &body)?;
    }
}

/// A span whose attribute value nests `depth` arrays deep, as a trace body.
fn nested(depth: usize) -> Vec<u8> {
    let mut v = Value::StringValue("x".into());
    for _ in 0..depth {
        v = Value::ArrayValue(common::ArrayValue {
            values: vec![AnyValue { value: Some(v) }],
        });
    }
    let mut attrs = commit(1);
    attrs.push(kv("deep", v));
    traces(vec![], vec![], vec![span(attrs)]).encode_to_vec()
}

#[test]
fn wire_keeps_prosts_recursion_limit() {
    let mut refused = 0;
    for depth in 40..60 {
        let body = nested(depth);
        agree(Signal::Traces, &body).unwrap();
        refused += usize::from(via_prost(Signal::Traces, &body).is_err());
    }
    // The limit falls inside the range tried: both sides of it are checked.
    assert!(refused > 0 && refused < 20, "{refused}");
}

/// A trace body of one span: `span` (encoded), under one scope and one resource.
fn one_span_body(span: &[u8]) -> Vec<u8> {
    field(1, &field(2, &field(2, span)))
}

#[test]
fn wire_agrees_at_the_edges_of_merging_and_nesting() {
    let base = span(commit(1)).encode_to_vec();
    let kv_bytes = |k: &KeyValue| k.encode_to_vec();
    // A KeyValue met twice whose second value sets nothing keeps the first value.
    let empty_value = KeyValue {
        key: "fencing.holder".into(),
        value: Some(AnyValue { value: None }),
    };
    let mut kv = kv_bytes(&s("fencing.holder", "w-1"));
    kv.extend(kv_bytes(&empty_value));
    let mut sp = base.clone();
    sp.extend(field(9, &kv));
    let body = one_span_body(&sp);
    let (items, _, _) = via_prost(Signal::Traces, &body).unwrap();
    assert!(items[0].contains("Some(\"w-1\")"), "{items:?}");
    agree(Signal::Traces, &body).unwrap();
    // A status code beyond 32 bits is its low 32 bits (2: ERROR), as prost reads an int32.
    let mut status = Vec::new();
    prost::encoding::encode_key(3, prost::encoding::WireType::Varint, &mut status);
    prost::encoding::encode_varint((1 << 32) + 2, &mut status);
    let mut sp = base.clone();
    sp.extend(field(15, &status));
    let body = one_span_body(&sp);
    let (items, _, _) = via_prost(Signal::Traces, &body).unwrap();
    assert!(items[0].contains(ERROR_WITHOUT_OUTCOME), "{items:?}");
    agree(Signal::Traces, &body).unwrap();
    // An unknown field at the deepest level a body may reach is refused, one level up taken.
    let mut refused = 0;
    for depth in 40..55 {
        // The unknown field alone in the innermost ArrayValue (at an even depth, as 100 is).
        let mut array = Vec::new();
        prost::encoding::encode_key(15, prost::encoding::WireType::Varint, &mut array);
        array.push(0);
        let mut inner = field(5, &array);
        for _ in 0..depth {
            inner = field(5, &field(1, &inner));
        }
        let mut kv = field(1, b"deep");
        kv.extend(field(2, &inner));
        let mut sp = base.clone();
        sp.extend(field(9, &kv));
        let body = one_span_body(&sp);
        agree(Signal::Traces, &body).unwrap();
        refused += usize::from(via_prost(Signal::Traces, &body).is_err());
    }
    assert!(refused > 0 && refused < 15, "{refused}");
}

/// The short ASCII check agrees with the standard library's at every length and position of
/// a byte above 127.
#[test]
fn ascii_agrees_with_is_ascii() {
    for n in 0..40 {
        let clean = vec![b'a'; n];
        assert!(super::ascii(&clean), "{n}");
        for at in 0..n {
            for high in [0x80u8, 0xc3, 0xff] {
                let mut b = clean.clone();
                b[at] = high;
                assert_eq!(super::ascii(&b), b.is_ascii(), "{n} {at} {high}");
            }
        }
    }
}

/// The short varint reader agrees with prost's on every value of one and two bytes, on
/// non-minimal two-byte forms, and leaves longer ones to it.
#[test]
fn short_varints_read_as_prost_reads_them() {
    let prost_read = |b: &[u8]| {
        let mut rest = b;
        prost::encoding::decode_varint(&mut rest).map(|v| (v, b.len() - rest.len()))
    };
    for v in 0u64..(1 << 14) {
        let mut b = Vec::new();
        prost::encoding::encode_varint(v, &mut b);
        b.push(0x55);
        assert_eq!(super::short_varint(&b), prost_read(&b).ok(), "{v}");
    }
    for b0 in 0x80..=0xffu8 {
        assert_eq!(super::short_varint(&[b0, 0]), prost_read(&[b0, 0]).ok());
        assert_eq!(super::short_varint(&[b0]), None);
    }
    assert_eq!(super::short_varint(&[0x80, 0x80, 0x01]), None);
}
