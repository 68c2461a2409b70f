use super::*;
use crate::decode::otlp::common::v1::any_value::Value;
use crate::decode::otlp::common::v1::{AnyValue, InstrumentationScope, KeyValue};
use crate::decode::otlp::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use crate::decode::otlp::resource::v1::Resource;
use crate::decode::otlp::trace::v1::{ResourceSpans, ScopeSpans, Span, Status};
use proptest::prelude::*;

const TRACE: [u8; 16] = [
    0x0a, 0xf7, 0x65, 0x19, 0x16, 0xcd, 0x43, 0xdd, 0x84, 0x48, 0xeb, 0x21, 0x1c, 0x80, 0x31, 0x9c,
];
const SPAN: [u8; 8] = [0xb7, 0xad, 0x6b, 0x71, 0x69, 0x20, 0x33, 0x31];
const PROV: &str = "otlp:0af7651916cd43dd8448eb211c80319c/b7ad6b7169203331";

pub(super) fn s(k: &str, v: &str) -> KeyValue {
    KeyValue {
        key: k.into(),
        value: Some(AnyValue {
            value: Some(Value::StringValue(v.into())),
        }),
    }
}

fn i(k: &str, v: i64) -> KeyValue {
    KeyValue {
        key: k.into(),
        value: Some(AnyValue {
            value: Some(Value::IntValue(v)),
        }),
    }
}

pub(super) fn kv(k: &str, v: Value) -> KeyValue {
    KeyValue {
        key: k.into(),
        value: Some(AnyValue { value: Some(v) }),
    }
}

pub(super) fn span(attrs: Vec<KeyValue>) -> Span {
    Span {
        trace_id: TRACE.to_vec(),
        span_id: SPAN.to_vec(),
        name: "db.commit".into(),
        start_time_unix_nano: 1,
        end_time_unix_nano: 1_700_000_000_000_000_000,
        attributes: attrs,
        ..Span::default()
    }
}

pub(super) fn commit(epoch: i64) -> Vec<KeyValue> {
    vec![
        s("fencing.kind", "commit"),
        s("fencing.scope", "order-17"),
        i("fencing.epoch", epoch),
        s("fencing.route", "orders-api.transition"),
    ]
}

pub(super) fn traces(
    resource: Vec<KeyValue>,
    scope: Vec<KeyValue>,
    spans: Vec<Span>,
) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: resource,
                ..Resource::default()
            }),
            scope_spans: vec![ScopeSpans {
                scope: Some(InstrumentationScope {
                    name: "orders".into(),
                    attributes: scope,
                    ..InstrumentationScope::default()
                }),
                spans,
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        }],
    }
}

/// The WAL body of a mapped request.
fn body(m: &Mapped) -> Vec<u8> {
    let mut out = Vec::new();
    stored::encode_into(&m.items, &mut out);
    // Its buffer is sized once, by a bound that holds (every test's requests, the proptest's
    // too, come through here).
    assert!(out.len() <= stored::encoded_len(&m.items), "{out:?}");
    out
}

/// What a request comes to after the whole ingest path: mapped, stored, read back.
fn ingest(req: ExportTraceServiceRequest) -> (Mapped, Vec<String>) {
    let mapped = map_traces(&req);
    let items = render(stored::decode(&body(&mapped)).unwrap());
    (mapped, items)
}

/// Each item as one comparable line.
pub(super) fn render<'a>(entries: impl IntoIterator<Item = Entry<'a>>) -> Vec<String> {
    entries
        .into_iter()
        .map(|e| match e {
            Entry::Event(ev, span) => format!("{ev:?} {:?}", span.map(prov)),
            Entry::Malformed(e) => {
                format!("malformed {:?}: {}", e.span.as_ref().map(prov), e.error)
            }
        })
        .collect()
}

/// `otlp:<trace_id>/<span_id>` of a span's ids.
fn prov(id: &SpanId) -> String {
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    format!("otlp:{}/{}", hex(&id[..16]), hex(&id[16..]))
}

fn one(attrs: Vec<KeyValue>) -> Result<(String, Option<String>), String> {
    one_with(vec![], vec![], span(attrs))
}

fn one_with(
    resource: Vec<KeyValue>,
    scope: Vec<KeyValue>,
    sp: Span,
) -> Result<(String, Option<String>), String> {
    let mapped = map_traces(&traces(resource, scope, vec![sp]));
    assert_eq!(mapped.items.len(), 1);
    let body = body(&mapped);
    match stored::decode(&body).unwrap().into_iter().next().unwrap() {
        Entry::Event(ev, span) => Ok((format!("{ev:?}"), span.map(prov))),
        Entry::Malformed(e) => Err(e.error.to_string()),
    }
}

fn event_of(attrs: Vec<KeyValue>) -> Event<'static> {
    let body = body(&map_traces(&traces(vec![], vec![], vec![span(attrs)])));
    let Entry::Event(ev, _) = stored::decode(&body).unwrap().into_iter().next().unwrap() else {
        panic!("malformed")
    };
    // Owned copies for the assertions.
    let leak = |s: Option<&str>| s.map(|s| &*Box::leak(s.to_string().into_boxed_str()));
    Event {
        property: leak(ev.property),
        scope: leak(ev.scope),
        route: leak(ev.route),
        holder: leak(ev.holder),
        op_id: leak(ev.op_id),
        emitter: leak(ev.emitter),
        premise: leak(ev.premise),
        attester: leak(ev.attester),
        evidence: leak(ev.evidence),
        ..ev
    }
}

#[test]
fn an_attestation_span_carries_the_premise_fields() {
    let ev = event_of(vec![
        s("fencing.kind", "attestation"),
        s("fencing.premise", "conditional_commit"),
        s("fencing.route", "orders-api.transition"),
        s("fencing.valid_for", "24h"),
        s("fencing.attester", "ci/conformance"),
        s("fencing.evidence", "sha256:ab12"),
    ]);
    assert_eq!(ev.kind, Kind::Attestation);
    assert_eq!(
        ev.outcome,
        Outcome::Holds,
        "an attestation holds by default"
    );
    assert_eq!(ev.premise, Some("conditional_commit"));
    assert_eq!(
        ev.valid_for,
        Some(fencewatch_assess::time::Duration(86_400_000_000_000))
    );
    assert_eq!(
        (ev.attester, ev.evidence),
        (Some("ci/conformance"), Some("sha256:ab12"))
    );
    assert!(ev.validate().is_ok());
    let ev = event_of(vec![
        s("fencing.kind", "attestation"),
        s("fencing.premise", "durable_fence"),
        i("fencing.valid_for", 5_000),
        s("fencing.outcome", "failed"),
    ]);
    assert_eq!(ev.valid_for, Some(fencewatch_assess::time::Duration(5_000)));
    assert_eq!(ev.outcome, Outcome::Failed);
    // On a commit they are checked for their type, and not kept.
    let ev = event_of(vec![
        s("fencing.kind", "commit"),
        s("fencing.premise", "durable_fence"),
        s("fencing.valid_for", "1h"),
    ]);
    assert_eq!((ev.premise, ev.valid_for), (None, None));
    for bad in ["0s", "0", "1d"] {
        let e = one(vec![
            s("fencing.kind", "attestation"),
            s("fencing.premise", "p"),
            s("fencing.valid_for", bad),
        ])
        .unwrap_err();
        assert!(e.starts_with("field `fencing.valid_for`"), "{bad}: {e}");
    }
}

#[test]
fn a_commit_span_maps_every_field() {
    let mut attrs = commit(42);
    attrs.extend([
        s("fencing.property", "order-mutation"),
        s("fencing.holder", "worker-2"),
        s("fencing.op_id", "op-9"),
        i("fencing.incarnation", 3),
        s("fencing.order", "77"),
        s("fencing.outcome", "rejected"),
        s("fencing.emitter", "orders-api-1"),
        i("fencing.seq", 5),
        s("http.method", "POST"),
    ]);
    let ev = event_of(attrs);
    assert_eq!(ev.kind, Kind::Commit);
    assert_eq!(
        ev.ts,
        EventTime(1_700_000_000_000_000_000),
        "the span's end"
    );
    assert_eq!(ev.scope, Some("order-17"));
    assert_eq!(ev.epoch, Some(Epoch(42)));
    assert_eq!(ev.route, Some("orders-api.transition"));
    assert_eq!(ev.property, Some("order-mutation"));
    assert_eq!(ev.holder, Some("worker-2"));
    assert_eq!(ev.op_id, Some("op-9"));
    assert_eq!(ev.incarnation, Incarnation(3));
    assert_eq!(ev.order, Some(Order(77)));
    assert_eq!(ev.outcome, Outcome::Rejected);
    assert_eq!(ev.emitter, Some("orders-api-1"));
    assert_eq!(ev.seq, Some(Seq(5)));
    let (_, prov) = one(commit(1)).unwrap();
    assert_eq!(prov.as_deref(), Some(PROV));
}

#[test]
fn attributes_are_looked_up_on_the_item_then_the_scope_then_the_resource() {
    let resource = vec![
        s("fencing.property", "from-resource"),
        s("fencing.route", "from-resource"),
        s("fencing.holder", "from-resource"),
    ];
    let scope = vec![
        s("fencing.route", "from-scope"),
        s("fencing.holder", "from-scope"),
    ];
    let mut attrs = commit(1);
    attrs.retain(|kv| kv.key != "fencing.route");
    attrs.push(s("fencing.holder", "from-item"));
    let (ev, _) = one_with(resource, scope, span(attrs)).unwrap();
    assert!(ev.contains(r#"property: Some("from-resource")"#), "{ev}");
    assert!(ev.contains(r#"route: Some("from-scope")"#), "{ev}");
    assert!(ev.contains(r#"holder: Some("from-item")"#), "{ev}");
}

#[test]
fn a_resource_string_reaches_every_item_of_its_scope() {
    let resource = vec![s("fencing.property", "p")];
    let spans = (0..3).map(|_| span(commit(1))).collect();
    let d = map_traces(&traces(resource, vec![], spans)).items;
    assert_eq!(d.len(), 3);
    assert_eq!(d.entries().count(), 3);
    assert!(
        d.entries()
            .all(|e| matches!(e, Entry::Event(ev, _) if ev.property == Some("p")))
    );
}

#[test]
fn fencing_kind_counts_on_the_item_only() {
    let resource = vec![s("fencing.kind", "commit")];
    let scope = vec![s("fencing.kind", "commit")];
    let mut plain = span(vec![s("fencing.scope", "x")]);
    plain.span_id = vec![1; 8];
    let req = traces(resource, scope, vec![plain, span(commit(1))]);
    let (mapped, items) = ingest(req);
    assert_eq!((mapped.items.len(), mapped.ignored), (1, 1));
    assert_eq!(mapped.locations, vec![[0, 0, 1]]);
    assert_eq!(items.len(), 1);
    assert_eq!(
        location_name(Signal::Traces, mapped.locations[0]),
        "resource_spans[0].scope_spans[0].spans[1]"
    );
}

#[test]
fn a_request_without_fencing_items_stores_nothing() {
    let mapped = map_traces(&traces(vec![], vec![], vec![span(vec![s("a", "b")])]));
    assert_eq!((mapped.items.len(), mapped.ignored), (0, 1));
    assert!(mapped.locations.is_empty());
}

#[test]
fn u64_fields_take_non_negative_ints_and_decimal_strings() {
    let epoch = |v: Value| one(vec![s("fencing.kind", "commit"), kv("fencing.epoch", v)]);
    let ok = |r: Result<(String, Option<String>), String>, want: u64| {
        let (ev, _) = r.unwrap();
        assert!(ev.contains(&format!("epoch: Some(Epoch({want}))")), "{ev}");
    };
    ok(epoch(Value::IntValue(0)), 0);
    ok(epoch(Value::IntValue(i64::MAX)), i64::MAX as u64);
    ok(
        epoch(Value::StringValue("18446744073709551615".into())),
        u64::MAX,
    );
    ok(epoch(Value::StringValue("007".into())), 7);
    for bad in [
        Value::IntValue(-1),
        Value::IntValue(i64::MIN),
        Value::StringValue("18446744073709551616".into()),
        Value::StringValue(String::new()),
        Value::StringValue("+1".into()),
        Value::StringValue("-1".into()),
        Value::StringValue(" 1".into()),
        Value::StringValue("1.0".into()),
        Value::StringValue("１".into()),
        Value::DoubleValue(1.0),
        Value::BoolValue(true),
        Value::BytesValue(vec![1]),
    ] {
        let e = epoch(bad.clone()).unwrap_err();
        assert!(
            e.starts_with("field `fencing.epoch`: must be a non-negative integer"),
            "{bad:?}: {e}"
        );
    }
    let none = one(vec![
        s("fencing.kind", "commit"),
        KeyValue {
            key: "fencing.seq".into(),
            value: None,
        },
    ]);
    assert!(none.unwrap_err().starts_with("field `fencing.seq`"));
}

#[test]
fn string_fields_take_strings_and_decimal_ints() {
    let (ev, _) = one(vec![s("fencing.kind", "commit"), i("fencing.scope", -42)]).unwrap();
    assert!(ev.contains(r#"scope: Some("-42")"#), "{ev}");
    let e = one(vec![
        s("fencing.kind", "commit"),
        kv("fencing.route", Value::BoolValue(true)),
    ])
    .unwrap_err();
    assert_eq!(e, format!("field `fencing.route`: {STR_FIELDS}"));
    let e = one(vec![
        s("fencing.kind", "commit"),
        kv("fencing.premise", Value::DoubleValue(1.0)),
    ])
    .unwrap_err();
    assert!(e.starts_with("field `fencing.premise`"), "{e}");
    let e = one(vec![s("fencing.kind", "merge")]).unwrap_err();
    assert_eq!(e, "field `fencing.kind`: unknown kind `merge`");
    let e = one(vec![
        s("fencing.kind", "commit"),
        s("fencing.outcome", "maybe"),
    ])
    .unwrap_err();
    assert_eq!(e, "field `fencing.outcome`: unknown outcome `maybe`");
}

#[test]
fn a_repeated_fencing_key_makes_the_items_under_it_malformed() {
    let mut attrs = commit(1);
    attrs.push(i("fencing.epoch", 2));
    assert_eq!(
        one(attrs).unwrap_err(),
        "attribute `fencing.epoch` is repeated"
    );
    let scope = vec![s("fencing.route", "a"), s("fencing.route", "a")];
    assert_eq!(
        one_with(vec![], scope, span(commit(1))).unwrap_err(),
        "attribute `fencing.route` is repeated"
    );
    // A repeated key on the resource: every fencing item under it.
    let resource = vec![s("fencing.property", "a"), s("fencing.property", "b")];
    let spans = vec![span(commit(1)), span(commit(2))];
    let (_, items) = ingest(traces(resource, vec![], spans));
    assert_eq!(items.len(), 2);
    assert!(
        items
            .iter()
            .all(|l| l.contains("`fencing.property` is repeated")),
        "{items:?}"
    );
    // Other attributes may repeat.
    let mut attrs = commit(1);
    attrs.extend([s("http.method", "a"), s("http.method", "b")]);
    assert!(one(attrs).is_ok());
}

#[test]
fn ids_must_be_16_and_8_bytes_and_not_zero() {
    for (trace, span_id, why) in [
        (vec![1; 15], vec![1; 8], "trace_id is 15 bytes, must be 16"),
        (vec![1; 17], vec![1; 8], "trace_id is 17 bytes, must be 16"),
        (vec![], vec![1; 8], "trace_id is 0 bytes, must be 16"),
        (vec![1; 16], vec![1; 7], "span_id is 7 bytes, must be 8"),
        (vec![1; 16], vec![1; 9], "span_id is 9 bytes, must be 8"),
        (vec![0; 16], vec![1; 8], "trace_id is all zeros"),
        (vec![1; 16], vec![0; 8], "span_id is all zeros"),
    ] {
        let mut sp = span(commit(1));
        sp.trace_id = trace;
        sp.span_id = span_id;
        let body = body(&map_traces(&traces(vec![], vec![], vec![sp])));
        match stored::decode(&body).unwrap().into_iter().next().unwrap() {
            Entry::Malformed(e) => {
                assert_eq!(e.error.reason, why);
                assert_eq!(e.span, None);
                assert!(e.error.ts.is_some(), "its time parsed");
            }
            Entry::Event(..) => panic!("{why}: taken"),
        }
    }
}

#[test]
fn an_errored_commit_without_outcome_is_malformed_never_committed() {
    let errored = |attrs: Vec<KeyValue>| {
        let mut sp = span(attrs);
        sp.status = Some(Status {
            message: "deadlock".into(),
            code: StatusCode::Error as i32,
        });
        sp
    };
    let e = one_with(vec![], vec![], errored(commit(1))).unwrap_err();
    assert_eq!(e, ERROR_WITHOUT_OUTCOME);
    let mut fence = commit(1);
    fence[0] = s("fencing.kind", "fence");
    assert_eq!(
        one_with(vec![], vec![], errored(fence)).unwrap_err(),
        ERROR_WITHOUT_OUTCOME
    );
    // With an outcome it is that outcome.
    let mut attrs = commit(1);
    attrs.push(s("fencing.outcome", "rejected"));
    let (ev, _) = one_with(vec![], vec![], errored(attrs)).unwrap();
    assert!(ev.contains("outcome: Rejected"), "{ev}");
    let mut attrs = commit(1);
    attrs.push(s("fencing.outcome", "committed"));
    assert!(one_with(vec![], vec![], errored(attrs)).is_ok());
    // Only a write's outcome is in doubt.
    let grant = vec![
        s("fencing.kind", "grant"),
        s("fencing.scope", "x"),
        i("fencing.epoch", 1),
    ];
    assert!(one_with(vec![], vec![], errored(grant)).is_ok());
    // OK and unset statuses are as no status.
    let mut ok = span(commit(1));
    ok.status = Some(Status {
        message: String::new(),
        code: StatusCode::Ok as i32,
    });
    assert!(one_with(vec![], vec![], ok).is_ok());
}

#[test]
fn a_span_time_is_its_end_and_must_be_in_range() {
    let at = |end: u64| {
        let mut sp = span(commit(1));
        sp.end_time_unix_nano = end;
        one_with(vec![], vec![], sp)
    };
    assert_eq!(at(0).unwrap_err(), "span end_time_unix_nano is 0");
    assert_eq!(
        at(1 << 63).unwrap_err(),
        "span end_time_unix_nano is beyond 2^63-1 ns"
    );
    assert!(at(i64::MAX as u64).is_ok());
    assert!(at(1).is_ok());
}

fn logs(records: Vec<LogRecord>, resource: Vec<KeyValue>) -> ExportLogsServiceRequest {
    ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            resource: Some(Resource {
                attributes: resource,
                ..Resource::default()
            }),
            scope_logs: vec![ScopeLogs {
                scope: None,
                log_records: records,
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        }],
    }
}

#[test]
fn log_records_take_their_time_or_their_observed_time() {
    let rec = |t: u64, observed: u64, attrs: Vec<KeyValue>| LogRecord {
        time_unix_nano: t,
        observed_time_unix_nano: observed,
        attributes: attrs,
        trace_id: TRACE.to_vec(),
        span_id: SPAN.to_vec(),
        ..LogRecord::default()
    };
    let req = logs(
        vec![
            rec(5, 9, commit(1)),
            rec(0, 9, commit(1)),
            rec(0, 0, commit(1)),
            rec(5, 9, vec![s("other", "x")]),
        ],
        vec![s("fencing.property", "p")],
    );
    let mapped = map_logs(&req);
    assert_eq!((mapped.items.len(), mapped.ignored), (3, 1));
    let body = body(&mapped);
    let items = stored::decode(&body).unwrap();
    let ts = |e: &Entry<'_>| match e {
        Entry::Event(ev, span) => {
            assert_eq!(*span, None, "a log record is named by its offset");
            assert_eq!(ev.property, Some("p"));
            ev.ts.0
        }
        Entry::Malformed(e) => panic!("{}", e.error),
    };
    assert_eq!((ts(&items[0]), ts(&items[1])), (5, 9));
    let Entry::Malformed(e) = &items[2] else {
        panic!("taken")
    };
    assert_eq!(
        e.error.reason,
        "log record time_unix_nano and observed_time_unix_nano are 0"
    );
}

#[test]
fn otlp_json_decodes_as_protobuf_does() {
    let mut sp = span(commit(7));
    sp.attributes.push(s("fencing.order", "12"));
    sp.status = Some(Status {
        message: String::new(),
        code: StatusCode::Error as i32,
    });
    let req = traces(
        vec![s("fencing.property", "p")],
        vec![],
        vec![sp, span(commit(8))],
    );
    let json = serde_json::to_vec(&req).unwrap();
    let text = String::from_utf8(json.clone()).unwrap();
    assert!(
        text.contains("\"traceId\":\"0af7651916cd43dd8448eb211c80319c\""),
        "{text}"
    );
    let from_json = parse_traces(json.as_slice(), true).unwrap();
    let proto = req.encode_to_vec();
    let from_proto = parse_traces(proto.as_slice(), false).unwrap();
    // From the handler's `Bytes` (ids sliced, not copied through a `Bytes` of prost's own):
    // the same request.
    let from_bytes = parse_traces(prost::bytes::Bytes::from(proto), false).unwrap();
    assert_eq!(from_bytes, from_proto);
    assert_eq!(ingest(from_json).1, ingest(from_proto).1);
}

#[test]
fn otlp_json_times_may_be_numbers_as_protobufs_json_mapping_allows() {
    let req = traces(vec![], vec![], vec![span(commit(7)), span(commit(8))]);
    let strings = String::from_utf8(serde_json::to_vec(&req).unwrap()).unwrap();
    // Every time as a JSON number, as some exporters write them.
    let mut numbers = strings.clone();
    for sp in &req.resource_spans[0].scope_spans[0].spans {
        for (key, t) in [
            ("startTimeUnixNano", sp.start_time_unix_nano),
            ("endTimeUnixNano", sp.end_time_unix_nano),
        ] {
            numbers = numbers.replace(&format!("\"{key}\":\"{t}\""), &format!("\"{key}\":{t}"));
        }
    }
    assert_ne!(numbers, strings);
    assert!(numbers.contains("\"endTimeUnixNano\":"), "{numbers}");
    let from_numbers = parse_traces(numbers.as_bytes(), true).unwrap();
    assert_eq!(
        from_numbers,
        parse_traces(strings.as_bytes(), true).unwrap()
    );
    let logs = r#"{"resourceLogs":[{"scopeLogs":[{"logRecords":[
        {"timeUnixNano":1700000000000000000,"observedTimeUnixNano": 1700000000000000001}]}]}]}"#;
    let rec =
        &parse_logs(logs.as_bytes(), true).unwrap().resource_logs[0].scope_logs[0].log_records[0];
    assert_eq!(
        (rec.time_unix_nano, rec.observed_time_unix_nano),
        (1_700_000_000_000_000_000, 1_700_000_000_000_000_001)
    );
    // Still refused: a time that is no u64, one that is no JSON integer, and a body wrong
    // elsewhere (its own error).
    let negative = numbers.replacen("\"endTimeUnixNano\":", "\"endTimeUnixNano\":-", 1);
    let e = parse_traces(negative.as_bytes(), true).unwrap_err();
    assert!(e.0.contains("invalid digit"), "{e}");
    let plus = numbers.replacen("\"endTimeUnixNano\":", "\"endTimeUnixNano\":+", 1);
    assert!(parse_traces(plus.as_bytes(), true).is_err());
    let other = numbers.replacen("\"spans\":[", "\"spans\":[7,", 1);
    let e = parse_traces(other.as_bytes(), true).unwrap_err();
    assert!(
        e.0.starts_with("invalid OTLP/JSON: invalid type: integer `7`"),
        "{e}"
    );
}

#[test]
fn otlp_json_ids_of_another_length_make_the_item_malformed_not_the_request() {
    let json = br#"{"resourceSpans":[{"scopeSpans":[{"spans":[
        {"traceId":"0af7651916cd43dd","spanId":"b7ad6b7169203331","endTimeUnixNano":"5",
         "attributes":[{"key":"fencing.kind","value":{"stringValue":"commit"}},
                       {"key":"fencing.epoch","value":{"intValue":"3"}}]}]}]}]}"#;
    let req = parse_traces(&json[..], true).unwrap();
    let (_, items) = ingest(req);
    assert_eq!(
        items,
        vec!["malformed None: trace_id is 8 bytes, must be 16"]
    );
    // Not hex, not JSON, not protobuf: the request is refused whole.
    assert!(
        parse_traces(
            &br#"{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"zz"}]}]}]}"#[..],
            true
        )
        .is_err()
    );
    assert!(parse_traces(&b"{"[..], true).is_err());
    assert!(parse_traces(&b"\xff\xff\xff"[..], false).is_err());
    assert!(parse_logs(&b"[]"[..], true).is_err());
}

#[test]
fn a_stored_body_that_is_not_otlp_is_an_error() {
    let e = decode(Signal::Logs, b"\xff\xff\xff").unwrap_err();
    assert!(e.to_string().starts_with("not an OTLP logs request"), "{e}");
    let good = body(&map_traces(&traces(vec![], vec![], vec![span(commit(1))])));
    assert_eq!(stored::count(&good).unwrap(), 1);
    // Cut anywhere, or with a byte more, a record is refused, never misread.
    for cut in 0..good.len() {
        assert!(stored::decode(&good[..cut]).is_err(), "cut at {cut}");
    }
    let mut longer = good.clone();
    longer.push(0);
    assert!(stored::decode(&longer).is_err());
    // Earlier builds wrote the count as a minimal varint: their records read the same.
    assert_eq!(good[..stored::COUNT_BYTES], stored::count_bytes(1));
    let mut earlier = vec![1];
    earlier.extend_from_slice(&good[stored::COUNT_BYTES..]);
    assert_eq!(
        render(stored::decode(&earlier).unwrap()),
        render(stored::decode(&good).unwrap())
    );
}

#[test]
fn an_empty_mapping_is_a_valid_record_of_no_items() {
    let d = Decoded::default();
    assert_eq!((d.len(), d.entries().count()), (0, 0));
    assert_eq!(stored::count(d.stored()).unwrap(), 0);
    let m = map_traces(&ExportTraceServiceRequest::default());
    assert_eq!((m.items.len(), m.items.entries().count()), (0, 0));
}

#[test]
fn an_item_count_takes_its_fixed_width_at_any_size() {
    for n in [0, 1, 127, 128, 300, 1 << 20, (1 << 35) - 1] {
        let bytes = stored::count_bytes(n);
        assert_eq!(stored::count(&bytes).unwrap(), n as u64, "{n}");
    }
}

pub(super) fn value() -> impl Strategy<Value = Value> {
    prop_oneof![
        (-3i64..5).prop_map(Value::IntValue),
        prop_oneof![
            Just("commit"),
            Just("fence"),
            Just("grant"),
            Just("heartbeat"),
            Just("rejected"),
            Just("s1"),
            Just("12"),
            Just(""),
        ]
        .prop_map(|s| Value::StringValue(s.into())),
        any::<bool>().prop_map(Value::BoolValue),
    ]
}

fn attrs() -> impl Strategy<Value = Vec<KeyValue>> {
    let key = prop_oneof![
        Just("fencing.kind"),
        Just("fencing.scope"),
        Just("fencing.epoch"),
        Just("fencing.route"),
        Just("fencing.outcome"),
        Just("fencing.property"),
        Just("fencing.order"),
        Just("other"),
    ];
    proptest::collection::vec((key, value()), 0..5).prop_map(|v| {
        v.into_iter()
            .map(|(k, v)| kv(k, v))
            .collect::<Vec<KeyValue>>()
    })
}

fn request() -> impl Strategy<Value = ExportTraceServiceRequest> {
    let sp = (
        attrs(),
        0u64..3,
        0u8..3,
        prop_oneof![Just(16usize), Just(15)],
        0i32..3,
    )
        .prop_map(|(mut a, end, id, tlen, code)| {
            if end > 0 {
                a.push(s("fencing.kind", "commit"));
            }
            Span {
                trace_id: vec![id + 1; tlen],
                span_id: vec![id + 1; 8],
                end_time_unix_nano: end,
                attributes: a,
                status: Some(Status {
                    message: String::new(),
                    code,
                }),
                ..Span::default()
            }
        });
    let scope = (attrs(), proptest::collection::vec(sp, 0..4));
    let resource = (attrs(), proptest::collection::vec(scope, 0..3));
    proptest::collection::vec(resource, 0..3).prop_map(assemble)
}

/// Resources (their attributes), each with its scopes (their attributes) and their spans.
pub(super) type Tree = Vec<(Vec<KeyValue>, Vec<(Vec<KeyValue>, Vec<Span>)>)>;

pub(super) fn assemble(rs: Tree) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: rs
            .into_iter()
            .map(|(ra, scopes)| ResourceSpans {
                resource: Some(Resource {
                    attributes: ra,
                    ..Resource::default()
                }),
                scope_spans: scopes
                    .into_iter()
                    .map(|(sa, spans)| ScopeSpans {
                        scope: Some(InstrumentationScope {
                            name: "orders".into(),
                            attributes: sa,
                            ..InstrumentationScope::default()
                        }),
                        spans,
                        schema_url: "u".into(),
                    })
                    .collect(),
                schema_url: String::new(),
            })
            .collect(),
    }
}

proptest! {
    /// The stored record reads back as the items the request maps to; a record of earlier
    /// builds (the request as protobuf, formats 2 and 3) decodes to them too; JSON and protobuf
    /// give the same; every item is a fencing item or ignored.
    #[test]
    fn storing_and_json_change_no_item(req in request()) {
        let whole = render(map_traces(&req).items.entries());
        let total: usize = req.resource_spans.iter()
            .flat_map(|r| &r.scope_spans).map(|s| s.spans.len()).sum();
        let json = serde_json::to_vec(&req).unwrap();
        let old = decode(Signal::Traces, &req.encode_to_vec()).unwrap();
        prop_assert_eq!(&render(old.entries()), &whole);
        let (mapped, items) = ingest(req.clone());
        prop_assert_eq!(&items, &whole);
        prop_assert_eq!(mapped.items.len() + mapped.ignored as usize, total);
        prop_assert_eq!(mapped.locations.len(), items.len());
        let (_, from_json) = ingest(parse_traces(json.as_slice(), true).unwrap());
        prop_assert_eq!(from_json, whole);
    }
}
