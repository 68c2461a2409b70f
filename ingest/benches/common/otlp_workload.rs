//! The workload of the OTLP decode benchmarks (`benches/otlp.rs`, `examples/otlp_cost.rs`):
//! 20,000 simulated events as NDJSON lines and as OTLP trace requests of 1000 spans.

use fencewatch_assess::EventTime;
use fencewatch_ingest::decode::otlp::trace_service::ExportTraceServiceRequest;
use fencewatch_ingest::simulate::spans;
use fencewatch_ingest::simulate::{Faults, Workload, simulate};
use prost::Message;

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

/// The workload's NDJSON (one event a line).
pub(crate) fn ndjson() -> Vec<u8> {
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
    buf
}

/// The lines of `ndjson`.
pub(crate) fn lines(ndjson: &[u8]) -> Vec<&[u8]> {
    ndjson
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .collect()
}

/// The lines as encoded trace requests of [`BATCH`] spans (`reduced`: see [`request`]).
pub(crate) fn requests(lines: &[&[u8]], reduced: bool) -> Vec<Vec<u8>> {
    let each = |(i, b): (usize, &[&[u8]])| request(b, i as u64, reduced).encode_to_vec();
    lines.chunks(BATCH).enumerate().map(each).collect()
}

/// The lines as WAL payloads of [`BATCH`] lines (what `/v1/events` stores for them).
pub(crate) fn ndjson_payloads(lines: &[&[u8]]) -> Vec<Vec<u8>> {
    let each = |b: &[&[u8]]| {
        let mut body = b.join(&b'\n');
        body.push(b'\n');
        fencewatch_ingest::batch::encode(
            fencewatch_ingest::batch::Format::Ndjson,
            1,
            "http",
            None,
            &body,
        )
    };
    lines.chunks(BATCH).map(each).collect()
}

/// What the OTLP/HTTP handler stores for a protobuf trace request (`api/src/serve/otlp`): the
/// body mapped as it is read, its items' WAL form after a batch header.
pub(crate) fn otlp_payload(request: &[u8]) -> Vec<u8> {
    use fencewatch_ingest::batch;
    use fencewatch_ingest::decode::otlp;
    let header = batch::encode_header(batch::Format::Otlp, 0, "otlp", None, 0);
    let mapped = otlp::wire::map_into(otlp::Signal::Traces, request, header).expect("valid");
    let mut payload = mapped.items.into_buffer();
    batch::set_received_at(&mut payload, 1);
    payload
}

/// What the WAL's decode stage does with a payload: its items decoded, collected; how many.
pub(crate) fn decode_stage(payload: &[u8]) -> usize {
    use fencewatch_ingest::batch;
    let b = batch::decode(payload).expect("a payload of this build");
    batch::decode_items(&b, 1 << 20).len()
}
