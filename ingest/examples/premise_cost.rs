//! The core's work on one NDJSON file, for instruction counts under callgrind (README,
//! Benchmarks: the cost of premise tracking): `check` reads every line into a `History` and
//! finishes it; `serve` pushes every line into one `Live`, closes it and answers the queries a
//! metrics scrape makes (assurance and unknown counts of every property).
//!
//! usage: premise_cost check|serve|serve-spans CONTRACT FILE

use fencewatch_assess::live::{Live, LiveOptions};
use fencewatch_assess::{Contract, History};
use fencewatch_ingest::decode::json::{DEFAULT_MAX_LINE_BYTES, decode_line, is_blank};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, mode, contract, file] = &args[..] else {
        eprintln!("usage: premise_cost check|serve|serve-spans CONTRACT FILE");
        std::process::exit(64);
    };
    let src = std::fs::read_to_string(contract).expect("read the contract");
    let contract = Contract::parse(contract, &src).expect("a valid contract");
    let data = std::fs::read(file).expect("read the events");
    let lines = data
        .split(|&b| b == b'\n')
        .enumerate()
        .filter(|(_, l)| !is_blank(l));
    match mode.as_str() {
        "check" => {
            let mut h = History::new(contract);
            let s = h.add_source(file);
            for (i, line) in lines {
                match decode_line(line, DEFAULT_MAX_LINE_BYTES) {
                    Ok(d) => h.push(&d.event(), s, i as u64 + 1),
                    Err(e) => h.push_malformed(s, i as u64 + 1, e.ts, e.to_string()),
                }
            }
            let r = h.finish();
            println!("{} {}", r.verdict, r.events);
        }
        "serve" | "serve-spans" => {
            // `serve-spans`: each event as an OTLP span (its own provenance, a span id of its
            // line number), as OTLP ingest pushes it.
            let spans = mode == "serve-spans";
            let n = contract.properties.len();
            let mut l = Live::new(contract, LiveOptions::default());
            let s = l.add_source("wal");
            for (i, line) in lines {
                match decode_line(line, DEFAULT_MAX_LINE_BYTES) {
                    Ok(d) if spans => {
                        let mut id = [0u8; 24];
                        id[..8].copy_from_slice(&(i as u64).to_le_bytes());
                        let key = (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                        id[16..].copy_from_slice(&key.to_le_bytes());
                        l.push_span(&d.event(), &id, s, i as u64 + 1, i64::MAX / 2);
                    }
                    Ok(d) => {
                        l.push(&d.event(), s, i as u64 + 1, i64::MAX / 2);
                    }
                    Err(e) => l.push_malformed(s, i as u64 + 1, e.ts, e.to_string()),
                }
            }
            l.close();
            let v = l.view();
            for p in 0..n {
                let a = v.assurance(p, i64::MAX / 2, 900_000_000_000, i64::MAX / 2);
                println!("{} {:?}", a.verdict, v.unknown_counts(p));
            }
        }
        _ => {
            eprintln!("usage: premise_cost check|serve|serve-spans CONTRACT FILE");
            std::process::exit(64);
        }
    }
}
