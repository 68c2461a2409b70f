//! The longest push while heartbeats sent as spans pile up inside the horizon (each noted by
//! span id, the `spans` module's unkept table, until it falls behind): `cargo run --release -p
//! fencewatch-assess --example unkept_growth -- [SPANS]` (default 2,000,000), one property
//! keeping 1 s, heartbeats 100 ns apart (all within the horizon). Prints the longest push and
//! how many took over 5 ms.

mod common;

use common::{Stalls, count_arg_or, idle_live};
use fencewatch_assess::EventTime;
use fencewatch_assess::event::{Event, Kind};
use std::time::Instant;

fn main() {
    let n = count_arg_or(2_000_000);
    let mut live = idle_live();
    let src = live.add_source("otlp");
    let mut stalls = Stalls::default();
    let started = Instant::now();
    for i in 0..n {
        let mut id = [0u8; 24];
        id[..8].copy_from_slice(&(i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15).to_le_bytes());
        id[16..].copy_from_slice(&(i as u64).to_le_bytes());
        let mut ev = Event::new(Kind::Heartbeat, EventTime(1_000_000_000 + i as i64 * 100));
        ev.route = Some("r");
        stalls.time(i, || live.push_span(&ev, &id, src, i as u64, i64::MAX / 2));
    }
    println!(
        "spans {n}: {:.2} s, {}",
        started.elapsed().as_secs_f64(),
        stalls.summary()
    );
}
