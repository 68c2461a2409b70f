//! The applying threads' heap, extended ahead of the state's growth.
//!
//! glibc gives each thread but the first an arena of its own, and grows such an arena's heap
//! by exactly what the allocation it cannot serve needs, rounded to a page, with one
//! `mprotect` call each time (`M_TOP_PAD` is not added when a thread arena's heap grows,
//! only when one is made or trimmed). A partition's state grows by small blocks (a scope's
//! kept events, 72 bytes each, reallocated as they double): on `serve_bench`'s OTLP load the
//! WAL applier made ~24,000 `mprotect` calls a million spans, 5.5% of its CPU samples in them
//! (session 33).
//!
//! [`extend_ahead`], called before a batch is applied, allocates one block of [`AHEAD`]
//! bytes and frees it at once, untouched: when the arena's top has less free, it grows until
//! it has that much, in one call, and the freed block stays there (under the trim threshold
//! `serve` sets) for the batch's small blocks to be carved from. The same load: 1,276 calls
//! a million spans. It only does so once [`extend_ahead_from_now`] was called, which `serve`
//! does where it fixes the allocator's thresholds that this relies on: the block must be
//! below the mmap threshold (or it is a mapping of its own, made and unmapped at every call)
//! and below the trim threshold (or freeing it gives it back at once). Only its first and
//! last pages are touched (the allocator's headers); the rest become resident as the blocks
//! carved from them are used: at most [`AHEAD`] bytes of address space an applying thread
//! beyond what it uses. The first touches of the state's new pages are page faults as before.

use std::sync::atomic::{AtomicBool, Ordering};

/// Bytes an arena is extended by at a time.
pub const AHEAD: usize = 768 << 10;

static ON: AtomicBool = AtomicBool::new(false);

/// Makes [`extend_ahead`] extend from now on. Call it only where blocks of [`AHEAD`] bytes
/// come from the arenas and are not given back when freed (see the module docs).
pub fn extend_ahead_from_now() {
    ON.store(true, Ordering::Relaxed);
}

/// Extends the calling thread's arena until its top has [`AHEAD`] bytes free, once
/// [`extend_ahead_from_now`] was called; returns the address the block had (never read
/// through: only compared, by tests), or `None` when off.
pub fn extend_ahead() -> Option<usize> {
    if !ON.load(Ordering::Relaxed) {
        return None;
    }
    let block = std::hint::black_box(Vec::<u8>::with_capacity(AHEAD));
    Some(block.as_ptr() as usize)
}
