//! Peak memory and time of `check` over NDJSON files, holding the whole history or within a
//! budget (`check --max-memory`, spill files by scope): the figures of the README's "check
//! within a memory budget". One assessment per process, so that VmHWM is its own; the report's
//! digest is printed so that two runs can be compared.
//!
//! usage: check_memory CONTRACT BUDGET_BYTES|whole FILE... (release build:
//! `cargo run --release -p fencewatch-ingest --example check_memory -- c.toml 67108864 ev.ndjson`)

#[path = "../../assess/examples/common/mod.rs"]
mod common;

use common::vm;

use fencewatch_assess::history::{Spilled, parts_for};
use fencewatch_assess::{Contract, History, Report};
use fencewatch_ingest::source::file::{Input, ReadOptions, read_into, total_size};
use fencewatch_ingest::source::spill::DirStore;
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, contract, budget, files @ ..] = &args[..] else {
        eprintln!("usage: check_memory CONTRACT BUDGET_BYTES|whole FILE...");
        std::process::exit(64);
    };
    let src = std::fs::read_to_string(contract).expect("read the contract");
    let contract = Contract::parse(contract, &src).expect("a valid contract");
    let inputs: Vec<Input> = files.iter().map(|f| Input::Path(f.into())).collect();
    let opts = ReadOptions::default();
    let started = Instant::now();
    let (report, spilled): (Report, u64) = if budget == "whole" {
        let mut h = History::new(contract);
        read_into(&mut h, &inputs, opts, None).expect("read");
        (h.finish(), 0)
    } else {
        let budget: u64 = budget.parse().expect("a budget in bytes");
        // As `check --max-memory`: about one byte of history per byte read.
        let parts = parts_for(Some(total_size(&inputs)), budget);
        let store = DirStore::new(&std::env::temp_dir()).expect("a spill directory");
        let mut s = Spilled::new(contract, store, parts, budget);
        read_into(&mut s, &inputs, opts, None).expect("read");
        let bytes = s.spilled_bytes();
        (s.finish(&mut |_, _| {}).expect("assess"), bytes)
    };
    let secs = started.elapsed().as_secs_f64();
    let json = serde_json::to_vec_pretty(&report).expect("a report");
    if let Some(path) = std::env::var_os("CHECK_MEMORY_REPORT") {
        std::fs::write(path, &json).expect("write the report");
    }
    let digest = json.iter().fold(0xcbf29ce484222325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100000001b3)
    });
    println!(
        "budget {budget} events {} verdict {} seconds {secs:.2} VmHWM {:.1} MiB spilled {:.1} MiB report {digest:016x}",
        report.events,
        report.verdict,
        vm("VmHWM:") as f64 / (1 << 20) as f64,
        spilled as f64 / (1 << 20) as f64,
    );
}
