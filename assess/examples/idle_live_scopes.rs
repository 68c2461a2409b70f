//! Measures resident memory per idle scope of the service's live assessor:
//! `cargo run --release -p fencewatch-assess --example idle_live_scopes -- [SCOPES]` (default
//! 1,000,000). Each scope gets one commit with a 16-byte scope id, one incarnation, no grants,
//! at rising times, so the watermark advances as a running service's does and everything older
//! than the horizon folds into the scopes' high-water marks. Prints the resident-set growth per
//! scope, read from /proc/self/statm (Linux), once everything is idle.

mod common;

use common::{count_arg, fill_idle_scopes, idle_live, rss_bytes};

fn main() {
    let n = count_arg();
    let mut live = idle_live();
    let before = rss_bytes();
    fill_idle_scopes(&mut live, n);
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
