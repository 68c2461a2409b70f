//! What a checkpoint of the live state costs under the partition's lock, at `SCOPES` idle
//! scopes (default 1,000,000; one commit each, 16-byte ids, everything folded):
//! `cargo run --release -p fencewatch-ingest --example checkpoint_cost -- [SCOPES]`. Prints the
//! time and the bytes of encoding the state in place (what the WAL pipeline does since issue
//! 16) against cloning it (what it did before, then encoding the clone off the lock), and the
//! resident-set growth each costs.

use fencewatch_assess::event::{Epoch, Event, Kind};
use fencewatch_assess::live::{Live, LiveOptions};
use fencewatch_assess::{Contract, EventTime};
use fencewatch_ingest::partition::state::encode_state;
use std::time::Instant;

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let contract = Contract::parse(
        "idle.toml",
        "[[property]]\nname=\"p\"\nsubject=\"S\"\nstrategy=\"lease_epoch\"\nwindow=\"1s\"\nallowed_lateness=\"1s\"\n[[property.route]]\nname=\"r\"\n",
    )
    .expect("contract");
    let mut live = Live::new(
        contract,
        LiveOptions {
            retention: Some(1_000_000_000),
            ..LiveOptions::default()
        },
    );
    let src = live.add_source("bench");
    let step = 10_000_000;
    for i in 0..n {
        let scope = format!("order-{i:010}");
        let mut ev = Event::new(Kind::Commit, EventTime(1_000_000_000 + i as i64 * step));
        ev.scope = Some(&scope);
        ev.epoch = Some(Epoch(1 + i as u64 % 7));
        ev.route = Some("r");
        live.push(&ev, src, i as u64, i64::MAX / 2);
    }
    let mut hb = Event::new(
        Kind::Heartbeat,
        EventTime(1_000_000_000 + (n as i64 + 1000) * step),
    );
    hb.route = Some("r");
    live.push(&hb, src, n as u64, i64::MAX / 2);
    println!(
        "scopes: {n}, state bytes (accounted): {}",
        live.state_bytes()
    );
    let before = rss_bytes();
    let t = Instant::now();
    let bytes = encode_state(live.state());
    let encode = t.elapsed();
    let after_encode = rss_bytes();
    println!(
        "encode in place: {:.0} ms under the lock, {} bytes, rss +{} MiB",
        encode.as_secs_f64() * 1e3,
        bytes.len(),
        (after_encode.saturating_sub(before)) >> 20
    );
    drop(bytes);
    let before = rss_bytes();
    let t = Instant::now();
    let copy = live.state().clone();
    let clone = t.elapsed();
    let after_clone = rss_bytes();
    let t = Instant::now();
    let bytes = encode_state(&copy);
    let off_lock = t.elapsed();
    let after_both = rss_bytes();
    println!(
        "clone then encode: {:.0} ms under the lock (clone), {:.0} ms off it, rss +{} MiB (clone) +{} MiB (both)",
        clone.as_secs_f64() * 1e3,
        off_lock.as_secs_f64() * 1e3,
        (after_clone.saturating_sub(before)) >> 20,
        (after_both.saturating_sub(before)) >> 20
    );
    drop((copy, bytes));
}
