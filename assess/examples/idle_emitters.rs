//! Measures resident memory per idle emitter of the service's live assessor:
//! `cargo run --release -p fencewatch-assess --example idle_emitters -- [EMITTERS]` (default
//! 1,000,000). Each emitter (a 16-byte id, as a pod restart makes a new one) sends three
//! heartbeats with seqs 0, 1, 2 on the declared route, at rising times, so the watermark
//! advances and every emitter's recent deliveries fall out with the horizon: what stays is one
//! run of seqs, its name and its properties. Prints the resident-set growth per emitter, read
//! from /proc/self/statm (Linux), once all are idle.

mod common;

use common::{STEP, count_arg, idle_live, rss_bytes};

use fencewatch_assess::EventTime;
use fencewatch_assess::event::{Event, Kind, Seq};

fn main() {
    let n = count_arg();
    let mut live = idle_live();
    let src = live.add_source("bench");
    let before = rss_bytes();
    let step = STEP;
    let mut pos = 0u64;
    for i in 0..n {
        let emitter = format!("pod-{i:012}"); // 16 bytes
        for seq in 0..3u64 {
            let t = 1_000_000_000 + (i as i64 * 3 + seq as i64) * step;
            let mut ev = Event::new(Kind::Heartbeat, EventTime(t));
            ev.route = Some("r");
            ev.emitter = Some(&emitter);
            ev.seq = Some(Seq(seq));
            live.push(&ev, src, pos, i64::MAX / 2);
            pos += 1;
        }
    }
    // A last heartbeat far ahead lets every recent delivery fall out.
    let mut hb = Event::new(
        Kind::Heartbeat,
        EventTime(1_000_000_000 + (3 * n as i64 + 1000) * step),
    );
    hb.route = Some("r");
    live.push(&hb, src, pos, i64::MAX / 2);
    let idle = rss_bytes();
    println!("emitters: {n}");
    println!(
        "emitter table (accounted, names excluded): {:.1} bytes per emitter",
        live.emitters_bytes() as f64 / n as f64
    );
    println!(
        "name table (accounted): {:.1} bytes per emitter",
        live.names_bytes() as f64 / n as f64
    );
    let grown = idle.max(before) - before;
    println!(
        "rss growth, all idle: {:.1} bytes per emitter (its name included); state_bytes {:.1} per emitter, {:.2} of the growth",
        grown as f64 / n as f64,
        live.state_bytes() as f64 / n as f64,
        live.state_bytes() as f64 / grown.max(1) as f64
    );
}
