//! `cargo bench -p fencewatch-ingest --features otlp --bench otlp`: decoding an OTLP span
//! against decoding the same event as an NDJSON line (issue 13: at most 2x), side by side, on
//! 1000-event batches of the simulated workload. `otlp_stored` is what the WAL's decode stage
//! does (a reduced request, protobuf, mapped to events); `otlp_request` adds what the
//! OTLP/HTTP handler does first (parse the client's request, reduce it, encode it).

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use fencewatch_assess::EventTime;
use fencewatch_ingest::decode::json::decode_line;
use fencewatch_ingest::decode::otlp::common::v1::{AnyValue, KeyValue, any_value::Value};
use fencewatch_ingest::decode::otlp::trace::v1::{ResourceSpans, ScopeSpans, Span};
use fencewatch_ingest::decode::otlp::trace_service::ExportTraceServiceRequest;
use fencewatch_ingest::decode::otlp::{self, Signal};
use fencewatch_ingest::simulate::{Faults, Workload, simulate};
use prost::Message;
use std::hint::black_box;

const BATCH: usize = 1000;

fn kv(k: &str, v: Value) -> KeyValue {
    KeyValue {
        key: k.into(),
        value: Some(AnyValue { value: Some(v) }),
    }
}

/// One span per line, its fields as `fencing.*` attributes (and two others, as instrumented
/// code has).
fn request(lines: &[&[u8]], batch: u64) -> ExportTraceServiceRequest {
    let spans = lines
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let e: serde_json::Value = serde_json::from_slice(l).expect("a simulated event");
            let mut attrs = vec![
                kv("db.system", Value::StringValue("postgresql".into())),
                kv("db.operation.name", Value::StringValue("UPDATE".into())),
            ];
            for (k, v) in e.as_object().expect("an object") {
                let v = match v {
                    serde_json::Value::String(s) => Value::StringValue(s.clone()),
                    serde_json::Value::Number(n) => Value::IntValue(n.as_i64().unwrap_or(0)),
                    _ => continue,
                };
                if k != "ts" {
                    attrs.push(kv(&format!("fencing.{k}"), v));
                }
            }
            let end = e["ts"].as_u64().expect("integer ts");
            let mut trace_id = [0u8; 16];
            trace_id[..8].copy_from_slice(&(batch + 1).to_be_bytes());
            Span {
                trace_id: trace_id.to_vec(),
                span_id: (i as u64 + 1).to_be_bytes().to_vec(),
                name: "UPDATE orders".into(),
                start_time_unix_nano: end - 1000,
                end_time_unix_nano: end,
                attributes: attrs,
                ..Span::default()
            }
        })
        .collect();
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            scope_spans: vec![ScopeSpans {
                spans,
                ..ScopeSpans::default()
            }],
            ..ResourceSpans::default()
        }],
    }
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
    let requests: Vec<Vec<u8>> = batches
        .iter()
        .enumerate()
        .map(|(i, b)| request(b, i as u64).encode_to_vec())
        .collect();
    let stored: Vec<Vec<u8>> = requests
        .iter()
        .map(|r| otlp::reduce_traces(otlp::parse_traces(r, false).expect("valid")).body)
        .collect();
    let mut g = c.benchmark_group("decode_1000");
    g.throughput(Throughput::Elements(lines.len() as u64));
    g.bench_function(BenchmarkId::new("ndjson_lines", lines.len()), |b| {
        b.iter(|| {
            for l in &lines {
                black_box(decode_line(l, 1 << 20).expect("valid"));
            }
        })
    });
    g.bench_function(BenchmarkId::new("otlp_stored", lines.len()), |b| {
        b.iter(|| {
            for body in &stored {
                let d = otlp::decode(Signal::Traces, body).expect("valid");
                black_box(d.entries().count());
            }
        })
    });
    g.bench_function(BenchmarkId::new("otlp_request", lines.len()), |b| {
        b.iter(|| {
            for r in &requests {
                let reduced = otlp::reduce_traces(otlp::parse_traces(r, false).expect("valid"));
                let d = otlp::decode(Signal::Traces, &reduced.body).expect("valid");
                black_box(d.entries().count());
            }
        })
    });
    g.finish();
}

criterion_group!(otlp_decode, benches);
criterion_main!(otlp_decode);
