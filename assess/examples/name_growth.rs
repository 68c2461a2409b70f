//! The longest push while names come and go beside many idle scopes: `cargo run --release -p
//! fencewatch-assess --example name_growth -- [SCOPES] [NAMES]` (defaults 3,000,000 and
//! 1,000,000). SCOPES idle scopes (one commit each, folded), then NAMES heartbeats each from a
//! new emitter (a pod restarted), each falling out with the horizon: the name table fills with
//! names no state refers to, and is swept each time it holds 65,536 or twice what was alive.
//! Prints the longest push and how many took over 5 ms.

mod common;

use common::{STEP, Stalls, count_arg_or, fill_idle_scopes, idle_live};
use fencewatch_assess::EventTime;
use fencewatch_assess::event::{Event, Kind, Seq};
use std::time::Instant;

fn main() {
    let scopes = count_arg_or(3_000_000);
    let names: usize = std::env::args()
        .nth(2)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let mut live = idle_live();
    fill_idle_scopes(&mut live, scopes);
    let src = live.add_source("names");
    let t0 = 1_000_000_000 + (scopes as i64 + 2000) * STEP;
    let mut stalls = Stalls::default();
    let started = Instant::now();
    for i in 0..names {
        let emitter = format!("pod-{i:012}");
        let mut ev = Event::new(Kind::Heartbeat, EventTime(t0 + i as i64 * STEP));
        ev.route = Some("r");
        ev.emitter = Some(&emitter);
        ev.seq = Some(Seq(0));
        stalls.time(i, || live.push(&ev, src, i as u64, i64::MAX / 2));
    }
    println!(
        "scopes {scopes}, names {names}: {:.2} s, {}, names kept {}",
        started.elapsed().as_secs_f64(),
        stalls.summary(),
        live.names_interned()
    );
}
