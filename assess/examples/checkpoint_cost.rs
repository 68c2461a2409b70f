//! What a checkpoint of the live state costs under the partition's lock, at `SCOPES` idle
//! scopes (default 1,000,000; one commit each, 16-byte ids, everything folded):
//! `cargo run --release -p fencewatch-assess --example checkpoint_cost -- [SCOPES]`. Prints the
//! time and the bytes of encoding the state in place (what the WAL pipeline does since issue
//! 16; the checkpoint is these postcard bytes behind a 6-byte tag) against cloning it (what it
//! did before, then encoding the clone off the lock), and the resident-set growth each costs.

mod common;

use common::{count_arg, fill_idle_scopes, idle_live, rss_bytes};
use std::time::Instant;

fn main() {
    let n = count_arg();
    let mut live = idle_live();
    fill_idle_scopes(&mut live, n);
    println!(
        "scopes: {n}, state bytes (accounted): {}",
        live.state_bytes()
    );
    let mib = |a: u64, b: u64| b.saturating_sub(a) >> 20;
    let before = rss_bytes();
    let t = Instant::now();
    let bytes = postcard::to_stdvec(live.state()).expect("the state serializes");
    let encode = t.elapsed();
    println!(
        "encode in place: {:.0} ms under the lock, {} bytes, rss +{} MiB",
        encode.as_secs_f64() * 1e3,
        bytes.len(),
        mib(before, rss_bytes())
    );
    drop(bytes);
    let before = rss_bytes();
    let t = Instant::now();
    let copy = live.state().clone();
    let clone = t.elapsed();
    let after_clone = rss_bytes();
    let t = Instant::now();
    let bytes = postcard::to_stdvec(&copy).expect("the state serializes");
    let off_lock = t.elapsed();
    println!(
        "clone then encode: {:.0} ms under the lock (clone), {:.0} ms off it, rss +{} MiB (clone) +{} MiB (both)",
        clone.as_secs_f64() * 1e3,
        off_lock.as_secs_f64() * 1e3,
        mib(before, after_clone),
        mib(before, rss_bytes())
    );
    drop((copy, bytes));
}
