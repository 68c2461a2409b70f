//! The applier's cost an event, NDJSON against OTLP spans, in one process (issue 16: OTLP's
//! applier took ~0.6 µs an event more than NDJSON's in `serve_bench`):
//!
//! ```text
//! cargo build --release -p fencewatch-ingest --features otlp --example apply_cost
//! target/release/examples/apply_cost [EVENTS] [ROUNDS]
//! ```
//!
//! `serve_bench`'s workload (200k scopes, rising epochs, two routes, 64 holders, four
//! emitters with rising seqs, 1,000 events a body), each body stored as the WAL stores it: an
//! NDJSON payload, or the OTLP trace request (a span an event, `simulate --otlp`'s) mapped as
//! the OTLP/HTTP handler maps it. Every round decodes them (not timed) and applies all of one
//! format to a fresh partition without an archive (timed), then the other, in alternating
//! order, so both see the same neighbours; it prints each round's ns an event, the medians
//! and the median of the rounds' OTLP/NDJSON ratios. Under callgrind, one round of one
//! format: `apply_cost EVENTS 1 ndjson|otlp`, which also prints the longest time one batch's
//! applying took (what its answer waited for) and what encoding the final state as a
//! checkpoint took (what the applier does under the read lock every `checkpoint_interval`).

use fencewatch_assess::Contract;
use fencewatch_assess::live::{Live, LiveOptions};
use fencewatch_ingest::batch::{self, DecodedGroup, Format};
use fencewatch_ingest::decode::otlp::{self, Signal};
use fencewatch_ingest::partition::Partition;
use fencewatch_ingest::simulate::spans;
use prost::Message;
use std::io::Write;
use std::time::Instant;

const CONTRACT: &str = r#"[[property]]
name = "order-mutation"
subject = "Order"
strategy = "lease_epoch"
window = "1m"
allowed_lateness = "30s"
  [[property.route]]
  name = "orders-api.transition"
  [[property.route]]
  name = "orders-worker.apply"
"#;
const ROUTES: [&str; 2] = ["orders-api.transition", "orders-worker.apply"];
const SCOPES: usize = 200_000;
const BATCH: usize = 1000;
const EMITTERS: usize = 4;
/// The bodies' receive time: after every event (none is dated ahead of it).
const RECEIVED: i64 = 1_800_000_000_000_000_000;

/// `serve_bench`'s bodies as NDJSON: body `b` is emitter `b % 4`'s next 1,000 commits.
fn bodies(events: usize) -> Vec<Vec<u8>> {
    let (mut rng, mut epochs, mut seqs) = (7u64, vec![0u32; SCOPES], [0u64; EMITTERS]);
    let mut ts = 1_764_417_600_000_000_000i64;
    (0..events.div_ceil(BATCH))
        .map(|b| {
            let mut out = Vec::new();
            let e = b % EMITTERS;
            for _ in 0..BATCH {
                rng ^= rng >> 12;
                rng ^= rng << 25;
                rng ^= rng >> 27;
                let r = rng.wrapping_mul(0x2545_f491_4f6c_dd1d);
                let s = (r >> 32) as usize % SCOPES;
                let epoch = &mut epochs[s];
                if *epoch == 0 {
                    *epoch = 1 + (r % 5) as u32;
                } else if r.is_multiple_of(12) {
                    *epoch += 1;
                }
                let route = ROUTES[(r >> 8) as usize % 2];
                seqs[e] += 1;
                let _ = writeln!(
                    out,
                    r#"{{"kind":"commit","ts":{ts},"scope":"order-{s}","epoch":{},"route":"{route}","holder":"w{}","emitter":"bench-order-{e}","seq":{}}}"#,
                    *epoch,
                    *epoch % 64,
                    seqs[e]
                );
                ts += 1_000;
            }
            out
        })
        .collect()
}

/// Body `b` as the OTLP/HTTP handler stores it: the trace request of its spans, mapped.
fn otlp_payload(ndjson: &[u8], b: usize) -> Vec<u8> {
    let trace_id = spans::trace_id(0, b as u64);
    let list = ndjson
        .split(|&c| c == b'\n')
        .filter(|l| !l.is_empty())
        .enumerate()
        .map(|(n, line)| {
            let e: serde_json::Value = serde_json::from_slice(line).expect("a generated event");
            let end = e["ts"].as_i64().expect("integer ts");
            spans::span(line, end, trace_id, n as u64 + 1).expect("a generated event")
        })
        .collect();
    let request = spans::request("orders-api", list).encode_to_vec();
    let header = batch::encode_header(Format::Otlp, RECEIVED, "otlp", None, 0);
    let mapped = otlp::wire::map_into(Signal::Traces, &request, header).expect("valid");
    mapped.items.into_buffer()
}

/// Applies every payload to a fresh partition in groups of 64 (as the WAL source decodes
/// them); the applying's seconds, what was accepted, and the longest one batch took (s): a
/// batch's answer waits for it (a table grown whole stopped the applier for 168 ms at 2M
/// spans, session 29). With `checkpoint`, also the seconds and bytes of encoding the final
/// state as a checkpoint (`Partition::encode_into`, what the applier does under the read lock
/// every `checkpoint_interval`).
fn apply(payloads: &[Vec<u8>], checkpoint: bool) -> (f64, u64, f64, Option<(f64, u64)>) {
    let contract = Contract::parse("c.toml", CONTRACT).expect("a contract");
    let mut p = Partition::new("wal", Live::new(contract, LiveOptions::default()), 0);
    let (mut base, mut secs, mut accepted, mut longest) = (0u64, 0.0, 0u64, 0f64);
    for group in payloads.chunks(64) {
        let group = DecodedGroup::decode(group.to_vec(), 1 << 20);
        for (b, items) in group.batches() {
            let len = items.len() as u64;
            let t = Instant::now();
            let a = p.apply_kept(base, len, b, items, None, 1 << 20);
            let took = t.elapsed().as_secs_f64();
            secs += took;
            longest = longest.max(took);
            accepted += a.expect("applied").accepted;
            base += len;
        }
    }
    let checkpoint = checkpoint.then(|| {
        let mut out = Counted(0);
        let t = Instant::now();
        p.encode_into(&mut out).expect("a counter takes every byte");
        (t.elapsed().as_secs_f64(), out.0)
    });
    (secs, accepted, longest, checkpoint)
}

/// A writer that counts the bytes it is given.
struct Counted(u64);

impl Write for Counted {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0 += bytes.len() as u64;
        Ok(std::hint::black_box(bytes).len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let mut args = std::env::args().skip(1);
    let events: usize = args
        .next()
        .map_or(1_000_000, |n| n.parse().expect("events"));
    let rounds: usize = args.next().map_or(5, |n| n.parse().expect("rounds"));
    let only = args.next();
    let ndjson = bodies(events);
    let n = (ndjson.len() * BATCH) as f64;
    let nd_payloads: Vec<Vec<u8>> = ndjson
        .iter()
        .map(|b| batch::encode(Format::Ndjson, RECEIVED, "http", None, b))
        .collect();
    let otlp_payloads: Vec<Vec<u8>> = ndjson
        .iter()
        .enumerate()
        .map(|(b, body)| otlp_payload(body, b))
        .collect();
    if let Some(which) = only {
        let p = if which == "otlp" {
            &otlp_payloads
        } else {
            &nd_payloads
        };
        let (s, a, longest, checkpoint) = apply(p, true);
        let (cs, cb) = checkpoint.expect("asked for");
        println!(
            "{which}: {:.0} ns/event ({a} accepted), longest batch {:.1} ms; \
             checkpoint of the final state: {:.0} ms, {cb} bytes",
            s / n * 1e9,
            longest * 1e3,
            cs * 1e3
        );
        return;
    }
    let (mut nd, mut ot, mut ratio) = (Vec::new(), Vec::new(), Vec::new());
    for r in 0..rounds {
        let run = |p: &[Vec<u8>]| {
            let (s, a, _, _) = apply(p, false);
            assert_eq!(a as f64, n, "every event accepted");
            s / n * 1e9
        };
        let (a, b) = if r % 2 == 0 {
            let a = run(&nd_payloads);
            (a, run(&otlp_payloads))
        } else {
            let b = run(&otlp_payloads);
            (run(&nd_payloads), b)
        };
        println!("round {}: ndjson {a:.0} ns/event, otlp {b:.0}", r + 1);
        nd.push(a);
        ot.push(b);
        ratio.push(b / a);
    }
    println!(
        "medians: ndjson {:.0} ns/event, otlp {:.0}, otlp/ndjson {:.2}",
        median(&mut nd),
        median(&mut ot),
        median(&mut ratio)
    );
}
