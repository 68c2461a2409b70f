//! Measures resident memory per idle scope: `cargo run --release -p fencewatch-assess
//! --example idle_scopes -- [SCOPES]` (default 1,000,000). Each scope gets one commit with a
//! 16-byte scope id, one incarnation, no grants, and the watermark advances as a running
//! service's does: every 10,000 scopes, everything older is folded into the high-water marks, so
//! freed interval memory is reused as it would be in steady state. Prints the resident-set growth
//! per scope, read from /proc/self/statm (Linux).

mod common;

use common::{count_arg, rss_bytes};

use fencewatch_assess::tracker::ScopeTable;

fn main() {
    let n = count_arg();
    let before = rss_bytes();
    let mut table = ScopeTable::new();
    for i in 0..n {
        let scope = format!("order-{i:010}"); // 16 bytes
        table.tracker(&scope).observe(
            0,
            1 + (i as u64 % 7),
            1_000_000 + i as i64,
            50_000_000,
            i64::MIN,
        );
        if i % 10_000 == 9_999 {
            table.fold(1_000_000 + i as i64);
        }
    }
    let busy = rss_bytes();
    table.fold(i64::MAX);
    let idle = rss_bytes();
    assert_eq!(table.len(), n);
    println!("scopes: {n}");
    println!(
        "heap bytes (accounted): {} ({:.1} per scope)",
        table.heap_bytes(),
        table.heap_bytes() as f64 / n as f64
    );
    println!(
        "rss growth, watermark advancing (<= 10,000 scopes active): {:.1} bytes per scope",
        (busy - before) as f64 / n as f64
    );
    println!(
        "rss growth, all idle: {:.1} bytes per scope",
        (idle.max(before) - before) as f64 / n as f64
    );
}
