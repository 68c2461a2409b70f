//! Measures resident memory per idle scope of the service's live assessor:
//! `cargo run --release -p fencewatch-assess --example idle_live_scopes -- [SCOPES]` (default
//! 1,000,000). Each scope gets one commit with a 16-byte scope id, one incarnation, no grants,
//! at rising times, so the watermark advances as a running service's does and everything older
//! than the horizon folds into the scopes' high-water marks. Prints the resident-set growth per
//! scope, read from /proc/self/statm (Linux), once everything is idle.

mod common;

use common::{count_arg, rss_bytes};

use fencewatch_assess::event::{Epoch, Event, Kind};
use fencewatch_assess::live::{Live, LiveOptions};
use fencewatch_assess::{Contract, EventTime};

fn main() {
    let n = count_arg();
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
    let before = rss_bytes();
    let step = 10_000_000; // 10 ms apart: 100 scopes per second of event time
    for i in 0..n {
        let scope = format!("order-{i:010}"); // 16 bytes
        let mut ev = Event::new(Kind::Commit, EventTime(1_000_000_000 + i as i64 * step));
        ev.scope = Some(&scope);
        ev.epoch = Some(Epoch(1 + i as u64 % 7));
        ev.route = Some("r");
        live.push(&ev, src, i as u64, i64::MAX / 2);
    }
    // A last heartbeat far ahead folds everything.
    let mut hb = Event::new(
        Kind::Heartbeat,
        EventTime(1_000_000_000 + (n as i64 + 1000) * step),
    );
    hb.route = Some("r");
    live.push(&hb, src, n as u64, i64::MAX / 2);
    let idle = rss_bytes();
    assert_eq!(live.active_scopes(), n);
    println!("scopes: {n}");
    println!(
        "state bytes (accounted): {} ({:.1} per scope)",
        live.state_bytes(),
        live.state_bytes() as f64 / n as f64
    );
    println!(
        "rss growth, all idle: {:.1} bytes per scope",
        (idle.max(before) - before) as f64 / n as f64
    );
}
