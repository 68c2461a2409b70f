//! What a checkpoint of `SCOPES` idle scopes (default 1,000,000; as the assess example
//! `checkpoint_cost` builds them) costs as `serve` writes it: the state encoded under the
//! partition's read lock into a pipe, written into the checkpoint file on another thread as
//! the bytes come, committed (fsync, rename) after the lock is released. Prints the time the
//! lock is held, the time to the commit, the file's bytes and how far the resident set grew
//! beyond the state's meanwhile (VmHWM, reset before). `vec` instead encodes the whole state into memory first, then
//! saves it (as fencewatch did before).
//!
//! usage: `cargo run --release -p fencewatch-ingest --example checkpoint_write -- [SCOPES] [stream|vec]`

#[path = "../../assess/examples/common/mod.rs"]
mod common;

use common::{count_arg, fill_idle_scopes, idle_live, vm};
use fencewatch_ingest::checkpoint::{self, CheckpointStore};
use fencewatch_ingest::partition::Partition;
use std::sync::RwLock;
use std::time::Instant;

fn main() {
    let n = count_arg();
    let mode = std::env::args().nth(2).unwrap_or_else(|| "stream".into());
    let mut live = idle_live();
    fill_idle_scopes(&mut live, n);
    let part = RwLock::new(Partition::new("local", live, n as u64 + 1));
    let dir = tempfile::tempdir().expect("a temporary directory");
    let mut store = CheckpointStore::open(dir.path()).expect("the store");
    let rss = vm("VmRSS:");
    println!(
        "scopes: {n}, state bytes (accounted): {}, rss {} MiB",
        part.read().unwrap().live().state_bytes(),
        rss >> 20,
    );
    // Resets VmHWM to the resident set now, so that it reads the checkpoint's peak.
    std::fs::write("/proc/self/clear_refs", "5").expect("/proc/self/clear_refs");
    let started = Instant::now();
    let (locked, pending) = match mode.as_str() {
        "vec" => {
            let guard = part.read().unwrap();
            let (offset, bytes) = guard.encode();
            drop(guard);
            let locked = started.elapsed();
            let mut pending = store.begin(offset).expect("begin");
            std::io::Write::write_all(&mut pending, &bytes).expect("write");
            (locked, pending)
        }
        "stream" => {
            let mut locked = None;
            let guard = part.read().unwrap();
            let offset = guard.next();
            let pending = checkpoint::stream(&store, offset, |out| {
                let encoded = guard.encode_into(out);
                locked = Some(started.elapsed());
                encoded
            })
            .expect("stream");
            (locked.expect("encoded"), pending)
        }
        other => panic!("mode {other}: stream or vec"),
    };
    let bytes = store.commit(pending).expect("commit");
    println!(
        "{mode}: read lock held {:.0} ms (encoding), committed after {:.0} ms, {bytes} bytes, peak rss +{} MiB over the state's",
        locked.as_secs_f64() * 1e3,
        started.elapsed().as_secs_f64() * 1e3,
        vm("VmHWM:").saturating_sub(rss) >> 20
    );
}
