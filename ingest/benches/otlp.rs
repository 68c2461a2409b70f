//! `cargo bench -p fencewatch-ingest --features otlp --bench otlp`: decoding an OTLP span
//! against decoding the same event as an NDJSON line (issue 13: at most 2x), side by side, on
//! 1000-event batches of the simulated workload.
//!
//! - `ndjson_batch` and `otlp_batch`, the comparison: what ingest does to decode a line and a
//!   span. NDJSON: the WAL's decode stage over the payload `/v1/events` stores, its events
//!   collected per batch. OTLP: the OTLP/HTTP handler maps the client's protobuf request as it
//!   reads it (`wire::map`) and stores its items' WAL form after a batch header; the decode
//!   stage reads them back, collected per batch.
//! - `ndjson_lines`: the lines decoded one by one and dropped (nothing collected).
//! - `otlp_request`: the handler's mapping, the items' WAL form and the record read back,
//!   without the batch header and the decode stage's dispatch.
//! - `otlp_request_prost`: the same through prost's parse into opentelemetry-proto's types
//!   and the mapping of those (what the handlers did before `wire::map`).
//! - `otlp_wire_map`: `wire::map` alone.
//! - `otlp_parse`: the parse alone (prost into the owned generated types): the floor of the
//!   above with those types; `otlp_parse_slice` from a `&[u8]` (prost copies each id twice).
//! - `otlp_stored`: the WAL's decode stage alone (a record of format `Otlp`).
//! - `otlp_old_stored`: what the decode stage did with the records of earlier builds (format
//!   2: the request reduced to its fencing spans, protobuf, parsed and mapped again).

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use fencewatch_ingest::decode::json::decode_line;
use fencewatch_ingest::decode::otlp::{self, Signal};
use prost::bytes::Bytes;
use std::hint::black_box;

#[path = "common/otlp_workload.rs"]
mod workload;

fn benches(c: &mut Criterion) {
    let ndjson = workload::ndjson();
    let lines = workload::lines(&ndjson);
    let requests: Vec<Bytes> = workload::requests(&lines, false)
        .into_iter()
        .map(Bytes::from)
        .collect();
    let old_stored = workload::requests(&lines, true);
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
    // Both through the WAL's decode stage as ingest stores them: the decoded items collected
    // per batch (the OTLP side's cost includes the handler's mapping and encoding).
    let ndjson_payloads = workload::ndjson_payloads(&lines);
    g.bench_function(BenchmarkId::new("ndjson_batch", lines.len()), |b| {
        b.iter(|| {
            for p in &ndjson_payloads {
                black_box(workload::decode_stage(p));
            }
        })
    });
    g.bench_function(BenchmarkId::new("otlp_batch", lines.len()), |b| {
        b.iter(|| {
            for r in &requests {
                black_box(workload::decode_stage(&workload::otlp_payload(r)));
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
