//! `cargo bench -p fencewatch-ingest --features otlp --bench otlp`: decoding an OTLP span
//! against decoding the same event as an NDJSON line (issue 13: at most 2x), side by side, on
//! 1000-event batches of the simulated workload.
//!
//! - `ndjson_lines`: what the WAL's decode stage does with an NDJSON body, line by line.
//! - `otlp_request`: everything OTLP ingest decodes, once per span: the OTLP/HTTP handler
//!   maps the client's protobuf request as it reads it (`wire::map`) and encodes the events
//!   for the WAL; the WAL's decode stage reads them back.
//! - `otlp_request_prost`: the same through prost's parse into opentelemetry-proto's types
//!   and the mapping of those (what the handler did before `wire::map`; gRPC still does).
//! - `otlp_wire_map`: `wire::map` alone.
//! - `otlp_parse`: the parse alone (prost into the owned generated types): the floor of the
//!   above with those types; `otlp_parse_slice` from a `&[u8]` (prost copies each id twice).
//! - `otlp_stored`: the WAL's decode stage alone (a record of format `Otlp`).
//! - `otlp_old_stored`: what the decode stage did with the records of earlier builds (format
//!   2: the request reduced to its fencing spans, protobuf, parsed and mapped again).

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use fencewatch_assess::EventTime;
use fencewatch_ingest::decode::json::decode_line;
use fencewatch_ingest::decode::otlp::trace_service::ExportTraceServiceRequest;
use fencewatch_ingest::decode::otlp::{self, Signal};
use fencewatch_ingest::simulate::spans;
use fencewatch_ingest::simulate::{Faults, Workload, simulate};
use prost::Message;
use prost::bytes::Bytes;
use std::hint::black_box;

const BATCH: usize = 1000;

/// One span per line (`simulate --otlp`'s), reduced to its `fencing.*` attributes and
/// without its name when `reduced` (what earlier builds stored).
fn request(lines: &[&[u8]], batch: u64, reduced: bool) -> ExportTraceServiceRequest {
    let id = spans::trace_id(1, batch);
    let spans = lines
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let e: serde_json::Value = serde_json::from_slice(l).expect("a simulated event");
            let end = e["ts"].as_i64().expect("integer ts");
            let mut span = spans::span(l, end, id, i as u64 + 1).expect("a simulated event");
            if reduced {
                span.attributes.retain(|kv| kv.key.starts_with("fencing."));
                span.name.clear();
            }
            span
        })
        .collect();
    spans::request("orders-api", spans)
}

fn benches(c: &mut Criterion) {
    let wl = Workload {
        events: 20_000,
        scopes: 2_000,
        seed: 1,
        start: EventTime(1_764_417_600_000_000_000),
        rate: 1000,
        rfc3339: false,
        grants: false,
        faults: Faults::default(),
        attest: &[],
    };
    let mut buf = Vec::new();
    simulate(&wl, &mut buf).expect("simulate");
    let lines: Vec<&[u8]> = buf
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .collect();
    let batches: Vec<&[&[u8]]> = lines.chunks(BATCH).collect();
    let encode = |reduced: bool| -> Vec<Vec<u8>> {
        let each = |(i, b): (usize, &&[&[u8]])| request(b, i as u64, reduced).encode_to_vec();
        batches.iter().enumerate().map(each).collect()
    };
    let requests: Vec<Bytes> = encode(false).into_iter().map(Bytes::from).collect();
    let old_stored = encode(true);
    let encode = |mapped: otlp::Mapped| {
        let mut body = Vec::with_capacity(otlp::stored::encoded_len(&mapped.items));
        otlp::stored::encode_into(&mapped.items, &mut body);
        body
    };
    // What the handler does (api/src/serve/otlp): map the protobuf body as it is read, encode.
    let to_wal = |r: &Bytes| encode(otlp::wire::map(Signal::Traces, r).expect("valid"));
    // What it did before: parse into opentelemetry-proto's types (prost), map those, encode.
    let to_wal_prost = |r: Bytes| {
        encode(otlp::map_traces(
            &otlp::parse_traces(r, false).expect("valid"),
        ))
    };
    let stored: Vec<Vec<u8>> = requests.iter().map(to_wal).collect();
    let mut g = c.benchmark_group("decode_1000");
    g.throughput(Throughput::Elements(lines.len() as u64));
    g.bench_function(BenchmarkId::new("ndjson_lines", lines.len()), |b| {
        b.iter(|| {
            for l in &lines {
                black_box(decode_line(l, 1 << 20).expect("valid"));
            }
        })
    });
    g.bench_function(BenchmarkId::new("otlp_request", lines.len()), |b| {
        b.iter(|| {
            for r in &requests {
                let body = to_wal(r);
                let entries = otlp::stored::decode(&body).expect("valid");
                black_box(entries.len());
            }
        })
    });
    g.bench_function(BenchmarkId::new("otlp_request_prost", lines.len()), |b| {
        b.iter(|| {
            for r in &requests {
                let body = to_wal_prost(r.clone());
                let entries = otlp::stored::decode(&body).expect("valid");
                black_box(entries.len());
            }
        })
    });
    g.bench_function(BenchmarkId::new("otlp_wire_map", lines.len()), |b| {
        b.iter(|| {
            for r in &requests {
                black_box(
                    otlp::wire::map(Signal::Traces, r)
                        .expect("valid")
                        .items
                        .len(),
                );
            }
        })
    });
    g.bench_function(BenchmarkId::new("otlp_parse", lines.len()), |b| {
        b.iter(|| {
            for r in &requests {
                black_box(otlp::parse_traces(r.clone(), false).expect("valid"));
            }
        })
    });
    g.bench_function(BenchmarkId::new("otlp_parse_slice", lines.len()), |b| {
        b.iter(|| {
            for r in &requests {
                black_box(otlp::parse_traces(&r[..], false).expect("valid"));
            }
        })
    });
    g.bench_function(BenchmarkId::new("otlp_stored", lines.len()), |b| {
        b.iter(|| {
            for body in &stored {
                black_box(otlp::stored::decode(body).expect("valid").len());
            }
        })
    });
    g.bench_function(BenchmarkId::new("otlp_old_stored", lines.len()), |b| {
        b.iter(|| {
            for body in &old_stored {
                let d = otlp::decode(Signal::Traces, body).expect("valid");
                black_box(d.entries().count());
            }
        })
    });
    g.finish();
}

criterion_group!(otlp_decode, benches);
criterion_main!(otlp_decode);
