//! `cargo bench -p fencewatch-ingest`: decoding throughput against a bare serde_json parse
//! into a borrowed struct, and the core alone on pre-decoded events, over a simulated workload.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use fencewatch_assess::{Contract, EventTime, History};
use fencewatch_ingest::decode::json::{Decoded, decode_line};
use fencewatch_ingest::simulate::{Faults, Workload, simulate};
use serde::Deserialize;
use std::hint::black_box;

const EVENTS: u64 = 200_000;

#[derive(Deserialize)]
#[allow(dead_code)]
struct Bare<'a> {
    kind: &'a str,
    ts: i64,
    #[serde(borrow)]
    scope: Option<&'a str>,
    epoch: Option<u64>,
    #[serde(borrow)]
    route: Option<&'a str>,
    #[serde(borrow)]
    holder: Option<&'a str>,
    #[serde(borrow)]
    emitter: Option<&'a str>,
    seq: Option<u64>,
}

fn workload() -> (Workload, Vec<u8>) {
    let wl = Workload {
        events: EVENTS,
        scopes: 20_000,
        seed: 1,
        start: EventTime(1_764_417_600_000_000_000),
        rate: 1000,
        rfc3339: false,
        grants: false,
        faults: Faults {
            paused_old_owner: 10,
            ..Faults::default()
        },
        attest: &[],
    };
    let mut buf = Vec::new();
    simulate(&wl, &mut buf).expect("simulate");
    (wl, buf)
}

fn benches(c: &mut Criterion) {
    let (wl, buf) = workload();
    let lines: Vec<&[u8]> = buf
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .collect();
    let mut g = c.benchmark_group("decode");
    g.throughput(Throughput::Elements(lines.len() as u64));
    g.bench_function(BenchmarkId::new("serde_json_borrowed", lines.len()), |b| {
        b.iter(|| {
            for l in &lines {
                black_box(serde_json::from_slice::<Bare<'_>>(l).expect("valid"));
            }
        })
    });
    g.bench_function(BenchmarkId::new("fencewatch_strict", lines.len()), |b| {
        b.iter(|| {
            for l in &lines {
                black_box(decode_line(l, 1 << 20).expect("valid"));
            }
        })
    });
    g.finish();
    let decoded: Vec<Decoded<'_>> = lines
        .iter()
        .map(|l| decode_line(l, 1 << 20).expect("valid"))
        .collect();
    let contract = Contract::parse("sim", &wl.contract_toml()).expect("contract");
    let mut g = c.benchmark_group("core");
    g.throughput(Throughput::Elements(decoded.len() as u64));
    g.sample_size(10);
    g.bench_function(
        BenchmarkId::new("history_push_and_finish", decoded.len()),
        |b| {
            b.iter(|| {
                let mut h = History::new(contract.clone());
                let src = h.add_source("bench");
                for (i, d) in decoded.iter().enumerate() {
                    h.push(&d.event(), src, i as u64 + 1);
                }
                black_box(h.finish())
            })
        },
    );
    g.finish();
}

criterion_group!(throughput, benches);
criterion_main!(throughput);
