//! OTLP bodies through a partition (SPEC §8): stored mapped in the WAL, applied with the
//! span's provenance, replayed after a restart to the same counterexample ids; a span delivered
//! twice is one event; a record of an earlier build (the request as protobuf) gives the same,
//! and so does the payload the OTLP/HTTP handler writes as it maps (`wire::map_into`).

use fencewatch_assess::Contract;
use fencewatch_assess::live::LiveOptions;
use fencewatch_ingest::batch::{self, Format};
use fencewatch_ingest::decode::otlp;
use fencewatch_ingest::decode::otlp::common::v1::{AnyValue, KeyValue, any_value::Value};
use fencewatch_ingest::decode::otlp::trace::v1::{ResourceSpans, ScopeSpans, Span};
use fencewatch_ingest::decode::otlp::trace_service::ExportTraceServiceRequest;
use fencewatch_ingest::partition::Partition;
use fencewatch_ingest::partition::local::{self, PartitionOptions};
use prost::Message;

fn contract() -> Contract {
    Contract::parse(
        "c.toml",
        "[[property]]\nname=\"p\"\nsubject=\"S\"\nstrategy=\"lease_epoch\"\n[[property.route]]\nname=\"r\"\n",
    )
    .unwrap()
}

fn opts() -> PartitionOptions {
    PartitionOptions {
        segment_bytes: 1 << 20,
        max_line_bytes: 1 << 20,
        live: LiveOptions::default(),
    }
}

fn attr(k: &str, v: Value) -> KeyValue {
    KeyValue {
        key: k.into(),
        value: Some(AnyValue { value: Some(v) }),
    }
}

fn span(id: u8, end: u64, epoch: i64, kind: &str) -> Span {
    Span {
        trace_id: vec![7; 16],
        span_id: vec![id; 8],
        end_time_unix_nano: end,
        attributes: vec![
            attr("fencing.kind", Value::StringValue(kind.into())),
            attr("fencing.scope", Value::StringValue("order-17".into())),
            attr("fencing.epoch", Value::IntValue(epoch)),
            attr("fencing.route", Value::StringValue("r".into())),
            attr("service.name", Value::StringValue("orders".into())),
        ],
        ..Span::default()
    }
}

/// A resumed old owner: epoch 2 at 1 s, epoch 1 at 3 s (stale), one span without fencing, one
/// with a bad epoch.
fn request() -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            scope_spans: vec![ScopeSpans {
                spans: vec![
                    span(1, 1_000_000_000, 2, "commit"),
                    Span {
                        trace_id: vec![7; 16],
                        span_id: vec![9; 8],
                        end_time_unix_nano: 2,
                        ..Span::default()
                    },
                    span(2, 3_000_000_000, 1, "commit"),
                    span(3, 3_000_000_000, -1, "commit"),
                ],
                ..ScopeSpans::default()
            }],
            ..ResourceSpans::default()
        }],
    }
}

/// The WAL payload of [`request`] as this build stores it.
fn stored_payload() -> Vec<u8> {
    let mapped = otlp::map_traces(&request());
    assert_eq!((mapped.items.len(), mapped.ignored), (3, 1));
    let mut body = Vec::new();
    otlp::stored::encode_into(&mapped.items, &mut body);
    assert_eq!(batch::items(Format::Otlp, &body), 3);
    batch::encode(Format::Otlp, 10_000_000_000, "otlp", None, &body)
}

#[test]
fn a_span_request_is_stored_applied_and_replayed_to_the_same_counterexample() {
    let ids = stored_applied_replayed(&stored_payload());
    // A record of an earlier build: the request reduced to its fencing spans, protobuf (format
    // 2, any request decodes as one) gives the same events and counterexample ids.
    let body = request().encode_to_vec();
    assert_eq!(batch::items(Format::OtlpTraces, &body), 3);
    let old = batch::encode(Format::OtlpTraces, 10_000_000_000, "otlp", None, &body);
    assert_eq!(stored_applied_replayed(&old), ids);
}

#[test]
fn a_request_mapped_after_its_payload_header_is_its_payload() {
    // What the OTLP/HTTP handler stores for a protobuf body: the items written as mapped,
    // after the header, in one buffer; the same events and counterexample ids.
    let header = batch::encode_header(Format::Otlp, 0, "otlp", None, 0);
    let body = request().encode_to_vec();
    let mapped = otlp::wire::map_into(otlp::Signal::Traces, &body, header).unwrap();
    assert_eq!((mapped.items.len(), mapped.ignored), (3, 1));
    let mut payload = mapped.items.into_buffer();
    batch::set_received_at(&mut payload, 10_000_000_000);
    let b = batch::decode(&payload).unwrap();
    assert_eq!(
        (b.format, b.received_at, b.source),
        (Format::Otlp, 10_000_000_000, "otlp")
    );
    assert_eq!(batch::items(Format::Otlp, b.body), 3);
    assert_eq!(payload, stored_payload());
    assert_eq!(
        stored_applied_replayed(&payload),
        stored_applied_replayed(&stored_payload())
    );
}

/// Applies `payload` twice and restarts: the counterexample ids, the same before and after.
fn stored_applied_replayed(payload: &[u8]) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let stale = "otlp:07070707070707070707070707070707/0202020202020202";
    let ids = {
        let mut p = local::open(dir.path(), contract(), opts()).unwrap();
        let base = p.wal.append(3, payload).unwrap();
        p.wal.sync().unwrap();
        let batch = batch::decode(payload).unwrap();
        let a = p.partition.apply(base, 3, &batch, 1 << 20).unwrap();
        assert_eq!((a.accepted, a.malformed), (2, 1));
        assert_eq!(a.errors[0].item, 3, "the third fencing item");
        assert!(
            a.errors[0]
                .error
                .to_string()
                .starts_with("field `fencing.epoch`")
        );
        // Delivered again (an exporter's retry): one event, one counterexample.
        let base2 = p.wal.append(3, payload).unwrap();
        p.wal.sync().unwrap();
        let again = p.partition.apply(base2, 3, &batch, 1 << 20).unwrap();
        assert_eq!((again.accepted, again.duplicates), (2, 2));
        let page = p
            .partition
            .live()
            .view()
            .counterexamples(None, None, None, None, None, 10);
        assert_eq!(page.counterexamples.len(), 1);
        let cx = &page.counterexamples[0];
        assert_eq!(cx.stale.source, stale);
        assert_eq!(
            cx.superseding.source,
            "otlp:07070707070707070707070707070707/0101010101010101"
        );
        let samples = p.partition.live().view().malformed_samples();
        assert_eq!(samples.len(), 2, "the bad span, once per delivery");
        assert_eq!(
            samples[0].source,
            "otlp:07070707070707070707070707070707/0303030303030303"
        );
        vec![cx.id.clone()]
    };
    // Restart: no checkpoint was taken, the WAL replays.
    let p = local::open(dir.path(), contract(), opts()).unwrap();
    assert_eq!(p.replayed_records, 2);
    let page = p
        .partition
        .live()
        .view()
        .counterexamples(None, None, None, None, None, 10);
    let replayed: Vec<String> = page.counterexamples.iter().map(|c| c.id.clone()).collect();
    assert_eq!(replayed, ids);
    assert_eq!(page.counterexamples[0].stale.source, stale);
    assert_eq!(p.partition.live().totals(), (4, 2, 0, 2));
    replayed
}

#[test]
fn a_record_that_does_not_decode_is_one_malformed_item() {
    let live = fencewatch_assess::live::Live::new(contract(), LiveOptions::default());
    let mut part = Partition::new("wal", live, 0);
    for (at, format) in [Format::OtlpLogs, Format::Otlp].into_iter().enumerate() {
        let payload = batch::encode(format, 0, "otlp", None, b"\xff\xff");
        let batch = batch::decode(&payload).unwrap();
        let a = part.apply(at as u64, 1, &batch, 1 << 20).unwrap();
        assert_eq!(a.malformed, 1);
    }
}

/// The simulated workload's requests (`simulate --otlp`'s spans): the wire mapper, which ingest
/// uses for protobuf bodies, maps each span as prost's parse and the mapping do.
#[test]
fn the_wire_mapper_maps_the_simulated_workload_as_prost_does() {
    use fencewatch_ingest::decode::otlp::{Signal, wire};
    use fencewatch_ingest::simulate::{Faults, Workload, simulate_into, spans::Spans};
    use prost::Message;
    let mut requests = Vec::new();
    let mut sink = Spans::new(1, 50, "orders-api", |r| {
        requests.push(r);
        Ok(())
    });
    let wl = Workload {
        events: 500,
        scopes: 40,
        seed: 3,
        start: fencewatch_assess::EventTime(1_764_417_600_000_000_000),
        rate: 1000,
        rfc3339: false,
        grants: true,
        faults: Faults::default(),
        attest: &[],
    };
    simulate_into(&wl, &mut sink).unwrap();
    sink.finish().unwrap();
    assert!(requests.len() >= 10);
    let render = |m: otlp::Mapped| {
        let items: Vec<String> = m.items.entries().map(|e| format!("{e:?}")).collect();
        (items, m.ignored, m.locations)
    };
    for r in requests {
        let body = r.encode_to_vec();
        let w = render(wire::map(Signal::Traces, &body).unwrap());
        assert_eq!(w.0.len(), r.resource_spans[0].scope_spans[0].spans.len());
        assert!(w.0.iter().all(|e| e.starts_with("Event(")), "{:?}", w.0);
        assert_eq!(render(otlp::map_traces(&r)), w);
    }
}
