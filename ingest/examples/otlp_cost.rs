//! The OTLP decode benchmark's stages (`benches/otlp.rs`) one at a time, for instruction
//! counts that do not depend on the machine's load:
//!
//! ```text
//! cargo build --release -p fencewatch-ingest --features otlp --example otlp_cost
//! for n in 1 11; do valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.$n \
//!   target/release/examples/otlp_cost ndjson_lines $n; done
//! ```
//!
//! The difference of the two totals over 10 rounds of 20,000 events is one event's cost.
//! Stages: `ndjson_lines`, `otlp_request` (map, encode for the WAL, decode the record),
//! `otlp_wire_map`, `otlp_encode`, `otlp_stored`; `ndjson_batch` and `otlp_batch`, the WAL
//! payloads of both as ingest stores them, through the WAL's decode stage.
//!
//! `paired ROUNDS` (not for callgrind: timed) is the wall-clock comparison on a shared, noisy
//! machine: each round times one pass of `ndjson_batch` and one of `otlp_batch` back to back
//! (in alternating order), so both see the same neighbours; it prints the median of each and
//! the quartiles of the rounds' ratios.

use fencewatch_ingest::decode::json::decode_line;
use fencewatch_ingest::decode::otlp::{self, Signal};
use std::hint::black_box;

#[path = "../benches/common/otlp_workload.rs"]
mod workload;

fn encode(mapped: &otlp::Mapped) -> Vec<u8> {
    let mut body = Vec::with_capacity(otlp::stored::encoded_len(&mapped.items));
    otlp::stored::encode_into(&mapped.items, &mut body);
    body
}

fn main() {
    let mut args = std::env::args().skip(1);
    let stage = args.next().unwrap_or_else(|| "otlp_request".into());
    let rounds: usize = args
        .next()
        .map_or(1, |n| n.parse().expect("rounds: a number"));
    let ndjson = workload::ndjson();
    let lines = workload::lines(&ndjson);
    let requests = workload::requests(&lines, false);
    let ndjson_payloads = workload::ndjson_payloads(&lines);
    let map = |r: &[u8]| otlp::wire::map(Signal::Traces, r).expect("valid");
    let mapped: Vec<otlp::Mapped> = requests.iter().map(|r| map(r)).collect();
    let stored: Vec<Vec<u8>> = mapped.iter().map(encode).collect();
    if stage == "paired" {
        paired(rounds.max(1), &ndjson_payloads, &requests);
        return;
    }
    let mut n = 0usize;
    for _ in 0..rounds {
        match stage.as_str() {
            "ndjson_lines" => {
                for l in &lines {
                    black_box(decode_line(l, 1 << 20).expect("valid"));
                    n += 1;
                }
            }
            "otlp_request" => {
                for r in &requests {
                    let body = encode(&map(r));
                    n += black_box(otlp::stored::decode(&body).expect("valid").len());
                }
            }
            "otlp_wire_map" => {
                for r in &requests {
                    n += black_box(map(r).items.len());
                }
            }
            "otlp_encode" => {
                for m in &mapped {
                    n += black_box(encode(m).len());
                }
            }
            "otlp_stored" => {
                for body in &stored {
                    n += black_box(otlp::stored::decode(body).expect("valid").len());
                }
            }
            "ndjson_batch" => {
                for p in &ndjson_payloads {
                    n += black_box(workload::decode_stage(p));
                }
            }
            "otlp_batch" => {
                for r in &requests {
                    n += black_box(workload::decode_stage(&workload::otlp_payload(r)));
                }
            }
            other => panic!("unknown stage {other}"),
        }
    }
    println!("{stage}: {rounds} rounds, {n}");
}

/// The `paired` stage: `rounds` rounds of one `ndjson_batch` and one `otlp_batch` pass each.
fn paired(rounds: usize, ndjson: &[Vec<u8>], requests: &[Vec<u8>]) {
    use std::time::Instant;
    let events: usize = ndjson.iter().map(|p| workload::decode_stage(p)).sum();
    let time_ndjson = || {
        let t = Instant::now();
        for p in ndjson {
            black_box(workload::decode_stage(p));
        }
        t.elapsed().as_secs_f64() * 1e9 / events as f64
    };
    let time_otlp = || {
        let t = Instant::now();
        for r in requests {
            black_box(workload::decode_stage(&workload::otlp_payload(r)));
        }
        t.elapsed().as_secs_f64() * 1e9 / events as f64
    };
    // Warm up: page in both workloads, settle the allocator.
    for _ in 0..3 {
        time_ndjson();
        time_otlp();
    }
    let (mut nd, mut ot, mut ratio) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        let (a, b) = if round % 2 == 0 {
            let a = time_ndjson();
            (a, time_otlp())
        } else {
            let b = time_otlp();
            (time_ndjson(), b)
        };
        nd.push(a);
        ot.push(b);
        ratio.push(b / a);
    }
    let at = |v: &mut Vec<f64>, q: f64| {
        v.sort_by(f64::total_cmp);
        v[((v.len() - 1) as f64 * q).round() as usize]
    };
    println!(
        "paired: {rounds} rounds of {events} events; ndjson_batch median {:.0} ns/event, \
         otlp_batch median {:.0} ns/event; ratio otlp/ndjson p25 {:.2} median {:.2} p75 {:.2}",
        at(&mut nd, 0.5),
        at(&mut ot, 0.5),
        at(&mut ratio, 0.25),
        at(&mut ratio, 0.5),
        at(&mut ratio, 0.75),
    );
}
