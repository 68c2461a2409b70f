//! The binary's allocator: the system's, asking the kernel for transparent huge pages
//! (`madvise(MADV_HUGEPAGE)`) on blocks of 4 MiB and more once [`enable`] was called, which
//! `check` does. Its history is a few large arrays written once (72-byte records, ~150 MiB
//! for 2.1M events): in 4 KiB pages their first touches were ~80k page faults, a fifth of
//! `check`'s CPU in the kernel (fault, zeroing, memory-cgroup charge, page-table lock). In
//! 2 MiB pages they are ~20k. `serve` does not enable it: its memory is many small blocks and
//! its resident size is what its targets count. On a kernel whose
//! `/sys/kernel/mm/transparent_hugepage/enabled` is `never` the advice does nothing; with
//! `always` it is not needed.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, Ordering};

/// Blocks from this size on are advised.
const LARGE: usize = 4 << 20;
/// The huge page size the advice is aligned to.
const HUGE: usize = 2 << 20;

static ENABLED: AtomicBool = AtomicBool::new(false);

/// Asks for huge pages on large blocks allocated from now on.
pub fn enable() {
    ENABLED.store(true, Ordering::Relaxed);
}

/// The system allocator, advising huge pages on large blocks once [`enable`]d.
#[derive(Debug, Default)]
pub struct LargePages;

/// Advises the whole huge pages inside the `size` bytes at `p` (the kernel needs 2 MiB-aligned
/// ranges; the block's edges stay in small pages).
fn advise(p: *mut u8, size: usize) {
    if size < LARGE || p.is_null() || !ENABLED.load(Ordering::Relaxed) {
        return;
    }
    let start = (p as usize).next_multiple_of(HUGE);
    let end = (p as usize + size) & !(HUGE - 1);
    if end > start {
        // SAFETY: the range lies inside a block the allocator just handed out; the advice
        // changes how its pages are backed, never their contents or the mapping's validity.
        #[allow(unsafe_code)]
        let _ = unsafe {
            rustix::mm::madvise(
                start as *mut std::ffi::c_void,
                end - start,
                rustix::mm::Advice::LinuxHugepage,
            )
        };
    }
}

// SAFETY: every call is passed to `System` unchanged; `advise` only adds advice on the block
// returned.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for LargePages {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        let p = unsafe { System.alloc(layout) };
        advise(p, layout.size());
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as above.
        let p = unsafe { System.alloc_zeroed(layout) };
        advise(p, layout.size());
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as above.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if new_size > layout.size() {
            advise(p, new_size);
        }
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `VmFlags` of the mapping holding `addr`, from `/proc/self/smaps`.
    fn vm_flags(addr: usize) -> Option<String> {
        let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
        let mut inside = false;
        for line in smaps.lines() {
            let range = line.split_whitespace().next().unwrap_or("");
            if let Some((a, b)) = range.split_once('-')
                && let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
            {
                inside = (a..b).contains(&addr);
            } else if inside && let Some(flags) = line.strip_prefix("VmFlags:") {
                return Some(flags.trim().to_string());
            }
        }
        None
    }

    #[test]
    #[allow(unsafe_code)]
    fn a_large_block_is_advised_huge_pages_once_enabled() {
        if !std::path::Path::new("/proc/self/smaps").exists() {
            eprintln!("skipped: no /proc/self/smaps");
            return;
        }
        let layout = Layout::from_size_align(16 << 20, 8).expect("a layout");
        let huge = |p: *mut u8| {
            let middle = p as usize + (8 << 20);
            let flags = vm_flags(middle).expect("the block is mapped");
            flags.split_whitespace().any(|f| f == "hg")
        };
        // SAFETY: a non-zero layout; the block is freed with it below.
        let before = unsafe { LargePages.alloc(layout) };
        assert!(!before.is_null());
        let advised_before = huge(before);
        enable();
        // SAFETY: as above.
        let after = unsafe { LargePages.alloc(layout) };
        assert!(!after.is_null());
        assert!(huge(after), "{:?}", vm_flags(after as usize + (8 << 20)));
        // Grown past its size by `realloc`, the block stays advised.
        // SAFETY: `after` was allocated with `layout`.
        let grown = unsafe { LargePages.realloc(after, layout, 32 << 20) };
        assert!(!grown.is_null());
        assert!(huge(grown));
        // SAFETY: each block with the layout it has now.
        unsafe {
            LargePages.dealloc(before, layout);
            LargePages.dealloc(
                grown,
                Layout::from_size_align(32 << 20, 8).expect("a layout"),
            );
        }
        assert!(!advised_before, "not advised before `enable`");
    }
}
