//! The binary's allocator: the system's, asking the kernel for transparent huge pages
//! (`madvise(MADV_HUGEPAGE)`) on blocks of 4 MiB and more once [`enable`] was called, which
//! `check` does. Its history is a few large arrays written once (72-byte records, ~150 MiB
//! for 2.1M events): in 4 KiB pages their first touches were ~85k page faults, a fifth of
//! `check`'s CPU in the kernel (fault, zeroing, memory-cgroup charge, page-table lock). In
//! 2 MiB pages they are ~20k. `serve` does not enable it: its memory is many small blocks and
//! its resident size is what its targets count; it fixes glibc's mmap threshold instead
//! ([`return_large_blocks`]), so that request bodies go back to the system once freed.
//!
//! [`enable`] turns the advice on only where the kernel's policy
//! (`/sys/kernel/mm/transparent_hugepage/enabled`) is `madvise` (under `always` it is not
//! needed, under `never` it would do nothing), and not in a virtual machine whose free memory
//! is reported to its host ([`free_memory_reported`]): there the kernel hands a huge page
//! fault a 2 MiB block its host took back, and the first touch waits for the host to back it
//! again. `check` on 2.1M events (~290 MiB of history) took 0.63–0.77 s with the advice and
//! 0.40–0.44 s without, run two seconds apart (the kernel reports free memory after two
//! seconds); only run back to back, on memory the run before had just freed, did it gain
//! (0.32 s against 0.42). A 300 MiB block written a page at a time: 0.30–0.62 s in huge
//! pages after a 3 s pause, 0.03 s without one, 0.11–0.14 s in 4 KiB pages either way
//! (session 35). The advice covers the block's whole pages, not
//! only its 2 MiB-aligned interior: advising part of a mapping splits it, and glibc could no
//! longer grow a large block in place (`mremap`), copying it at every growth instead. On the
//! heap the advice may reach a neighbouring block's bytes, which it never changes (only how
//! their pages are backed). With the default `defrag` setting (`madvise`), a fault in advised
//! memory may wait for compaction when memory is fragmented.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, Ordering};

/// Blocks from this size on are advised.
const LARGE: usize = 4 << 20;
/// The page size the advised range is aligned to.
const PAGE: usize = 4096;

static ENABLED: AtomicBool = AtomicBool::new(false);

/// The kernel's transparent huge page policy file.
const POLICY: &str = "/sys/kernel/mm/transparent_hugepage/enabled";

/// Asks for huge pages on large blocks allocated from now on, where the kernel's policy is
/// `madvise` and free memory is not reported to a host (see the module doc); returns whether
/// it does.
pub fn enable() -> bool {
    let on = cfg!(any(target_os = "linux", target_os = "android"))
        && std::fs::read_to_string(POLICY).is_ok_and(|p| p.contains("[madvise]"))
        && !free_memory_reported(std::path::Path::new(VIRTIO_DEVICES));
    ENABLED.store(on, Ordering::Relaxed);
    on
}

/// Where Linux lists virtio devices.
const VIRTIO_DEVICES: &str = "/sys/bus/virtio/devices";
/// The virtio device id of a memory balloon.
const BALLOON: &str = "0x0005";
/// The balloon's feature bit for free page reporting (`VIRTIO_BALLOON_F_REPORTING`).
const REPORTING: usize = 5;

/// Whether a virtio memory balloon under `devices` negotiated free page reporting: the guest
/// kernel then hands free blocks of 2 MiB and more back to the host, which backs them again
/// only when they are next touched. A device's `features` file lists the negotiated bits as
/// `0`s and `1`s, bit 0 first.
fn free_memory_reported(devices: &std::path::Path) -> bool {
    let Ok(entries) = std::fs::read_dir(devices) else {
        return false;
    };
    entries.flatten().any(|d| {
        let read = |f: &str| std::fs::read_to_string(d.path().join(f)).unwrap_or_default();
        read("device").trim() == BALLOON
            && read("features").as_bytes().get(REPORTING) == Some(&b'1')
    })
}

/// Blocks from this size on are mapped on their own by glibc's allocator, and unmapped when
/// freed, once [`return_large_blocks`] was called.
pub const OWN_MAPPING: usize = 1 << 20;

/// Free memory an arena keeps at its top before giving it back, once [`return_large_blocks`]
/// was called: twice [`OWN_MAPPING`], the pairing glibc's own moving threshold keeps.
pub const KEPT_AT_TOP: usize = 2 * OWN_MAPPING;

// The appliers' arena extension is a block below both thresholds: else it would be a mapping
// of its own, or be given back at once when freed.
const _: () = assert!(
    fencewatch_ingest::heap::AHEAD < OWN_MAPPING && fencewatch_ingest::heap::AHEAD < KEPT_AT_TOP
);

/// Makes glibc's allocator give blocks of [`OWN_MAPPING`] and more a mapping of their own,
/// unmapped when freed, for good, and keep up to [`KEPT_AT_TOP`] free at an arena's top;
/// returns whether it does both (glibc only). `serve` calls it. By
/// default glibc raises that threshold (128 KiB) to the largest block freed so far, up to
/// 32 MiB: after one 15 MiB request body was freed, the next ones came from the heap's arenas,
/// which keep what is freed. Six clients posting 15 MiB bodies for 30 s left `serve` at 536 MB
/// resident once idle (peak 745 MB, `max_pending_bytes` 256 MiB); with the threshold fixed,
/// 161 MB (peak 586 MB), at the same rate (hostile test, session 32). Twelve 12 MiB bodies
/// from four clients: 71–125 MiB more resident once idle, now 26–47. A block of this size or
/// more costs a mapping and its page faults; ingest bodies of 1,000 events (~200–330 KiB) stay
/// below it.
///
/// Fixing the mmap threshold also stops glibc moving its trim threshold (twice the mmap
/// threshold, as that moves), which then stays at 128 KiB: an arena whose top held more free
/// memory than that gave it back at once, and a request body's pages (~300 KiB) were given
/// back and faulted in again at nearly every request. `serve_bench`'s OTLP load (3M spans)
/// made 628 `madvise` calls a million spans (35 before session 32), and ~1 s more system time
/// a run. The trim threshold is set to [`KEPT_AT_TOP`] with it: 46 calls a million spans,
/// ~1 s less system time, per-round ratios of spans a second 1.25, 1.04, 1.30 and 1.13, 1.02,
/// 1.55 in two A/Bs of 3 rounds (session 33).
///
/// With both set, the threads applying batches extend their arenas ahead of the state's
/// growth ([`fencewatch_ingest::heap`]), which relies on them.
pub fn return_large_blocks() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: `mallopt` changes a parameter of glibc's allocator; any value is valid and
        // applies to the blocks allocated or freed from now on.
        #[allow(unsafe_code)]
        let set = unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, OWN_MAPPING as libc::c_int) == 1
                && libc::mallopt(libc::M_TRIM_THRESHOLD, KEPT_AT_TOP as libc::c_int) == 1
        };
        if set {
            fencewatch_ingest::heap::extend_ahead_from_now();
        }
        set
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    false
}

/// The mmap threshold [`keep_freed_blocks`] sets: glibc's own ceiling for its moving one.
pub const OWN_MAPPING_CHECK: usize = 32 << 20;

/// Makes glibc's allocator keep what is freed for the blocks allocated next: blocks under
/// [`OWN_MAPPING_CHECK`] come from its arenas, whose free memory at their top is not given
/// back (the trim threshold at its greatest; a thread's secondary heap left wholly empty
/// still is); returns whether it does (glibc only). `check` calls
/// it: its decoders' batches (~1 MiB each, freed by the thread that appends them) were partly
/// given back by the decoders' arenas and faulted in again, as were the sweep's buckets;
/// 2.1M events took ~87k page faults and 73k with it (3.15M events: 136k and 107k), every
/// fault one more first touch for a host that backs a guest's memory lazily (see the module
/// docs). What stays resident is what the run held at its peak, which `check` reaches at its
/// end anyway. `serve`, which must give memory back, calls [`return_large_blocks`] instead.
pub fn keep_freed_blocks() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: as in `return_large_blocks`.
        #[allow(unsafe_code)]
        let set = unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, OWN_MAPPING_CHECK as libc::c_int) == 1
                && libc::mallopt(libc::M_TRIM_THRESHOLD, libc::c_int::MAX) == 1
        };
        set
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    false
}

/// Makes the `len` bytes at `start` resident and writable in one call
/// (`MADV_POPULATE_WRITE`, Linux 5.14 and later; elsewhere, or where it fails, nothing: the
/// first writes fault them in as before). [`fencewatch_assess::history::Populate`] for
/// `check`'s history: its arrays' pages made resident a few megabytes ahead of the copies
/// that fill them, rather than by a page fault each (~25% less CPU a page, measured in C,
/// session 36); 2.1M events: `check` 0.37 → 0.35 s, its system time 0.21–0.26 → 0.16–0.19 s
/// (five alternated runs each, with [`keep_freed_blocks`] in both).
///
/// Meant for pages of the caller's own anonymous memory (the spare capacity of its vectors):
/// the kernel only backs them, as a write would, never changing their contents; on a shared
/// file mapping it would mark pages dirty.
pub fn populate(start: usize, len: usize) {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        // SAFETY: `MADV_POPULATE_WRITE` never changes the contents of any memory, whatever
        // the range: it backs pages as a write would (a private mapping's page is copied
        // unchanged), and fails without effect on a range that is not mapped or not writable.
        // Its side effects on memory not one's own (a shared file mapping's pages marked
        // dirty, a userfaultfd range waited on) are why the doc asks for one's own pages: a
        // matter of use, not of memory safety.
        #[allow(unsafe_code)]
        let _ = unsafe {
            rustix::mm::madvise(
                start as *mut std::ffi::c_void,
                len,
                rustix::mm::Advice::LinuxPopulateWrite,
            )
        };
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    let _ = (start, len);
}

/// The system allocator, advising huge pages on large blocks once [`enable`]d.
#[derive(Debug, Default)]
pub struct LargePages;

/// Advises huge pages for the pages holding the `size` bytes at `p`.
fn advise(p: *mut u8, size: usize) {
    if size < LARGE || p.is_null() || !ENABLED.load(Ordering::Relaxed) {
        return;
    }
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        let start = p as usize & !(PAGE - 1);
        let Some(end) = (p as usize)
            .checked_add(size)
            .and_then(|e| e.checked_next_multiple_of(PAGE))
        else {
            return;
        };
        // SAFETY: the range covers the pages of a block the allocator just handed out (on
        // the heap, perhaps bytes of its neighbours too); the advice changes how those pages
        // are backed, never their contents or the mapping's validity.
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

    /// A balloon that negotiated free page reporting is found among other virtio devices; one
    /// without that bit, or another device with it, is not.
    #[test]
    fn free_page_reporting_is_read_from_the_balloons_features() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let device = |name: &str, id: &str, features: &str| {
            let d = dir.path().join(name);
            std::fs::create_dir(&d).expect("a device directory");
            std::fs::write(d.join("device"), format!("{id}\n")).expect("its id");
            std::fs::write(d.join("features"), format!("{features}\n")).expect("its features");
        };
        // This VM's block device and balloon (bits 1, 2, 5 and 7 of the balloon's).
        device("virtio1", "0x0002", "00000111");
        assert!(!free_memory_reported(dir.path()), "a block device's bit 5");
        device("virtio0", "0x0005", "01100001");
        assert!(
            !free_memory_reported(dir.path()),
            "a balloon without reporting"
        );
        std::fs::write(dir.path().join("virtio0/features"), "01100101\n").expect("features");
        assert!(free_memory_reported(dir.path()));
        assert!(!free_memory_reported(&dir.path().join("absent")));
    }

    #[test]
    #[allow(unsafe_code)]
    fn a_large_block_is_advised_huge_pages_once_enabled() {
        let layout = Layout::from_size_align(16 << 20, 8).expect("a layout");
        // SAFETY: a non-zero layout; the block is freed with it below.
        let before = unsafe { LargePages.alloc(layout) };
        assert!(!before.is_null());
        let huge = |p: *mut u8| {
            vm_flags(p as usize + (8 << 20)).map(|f| f.split_whitespace().any(|f| f == "hg"))
        };
        let advised_before = huge(before);
        if !enable() {
            eprintln!(
                "skipped: the kernel's transparent huge page policy is not `madvise`, or free \
                 memory is reported to a host"
            );
            // SAFETY: allocated above with `layout`.
            unsafe { LargePages.dealloc(before, layout) };
            return;
        }
        // SAFETY: as above.
        let after = unsafe { LargePages.alloc(layout) };
        assert!(!after.is_null());
        let Some(advised) = huge(after) else {
            eprintln!("skipped: no VmFlags in /proc/self/smaps");
            // SAFETY: each block with its layout.
            unsafe {
                LargePages.dealloc(before, layout);
                LargePages.dealloc(after, layout);
            }
            return;
        };
        assert!(advised, "{:?}", vm_flags(after as usize + (8 << 20)));
        // Grown past its size by `realloc`, the block stays advised.
        // SAFETY: `after` was allocated with `layout`.
        let grown = unsafe { LargePages.realloc(after, layout, 32 << 20) };
        assert!(!grown.is_null());
        assert_eq!(huge(grown), Some(true));
        // SAFETY: each block with the layout it has now.
        unsafe {
            LargePages.dealloc(before, layout);
            LargePages.dealloc(
                grown,
                Layout::from_size_align(32 << 20, 8).expect("a layout"),
            );
        }
        assert_eq!(advised_before, Some(false), "not advised before `enable`");
    }

    /// Page faults of the calling thread so far.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[allow(unsafe_code)]
    fn minor_faults() -> i64 {
        // SAFETY: all zeros is a valid `rusage` (integers only), which `getrusage` fills.
        let mut u: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: a valid pointer to a `rusage`.
        assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut u) }, 0);
        u.ru_minflt
    }

    /// A request body's block (under [`OWN_MAPPING`]), written, freed and allocated again, as
    /// each request does on a worker thread: its pages are kept, not given back and faulted in
    /// again each time (with the trim threshold left at glibc's 128 KiB, each round faulted in
    /// 64 of the block's 96 pages again: 3,202 faults in 50 rounds, 3 in all with
    /// it), and blocks from [`OWN_MAPPING`] on are unmapped once freed.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn request_sized_blocks_keep_their_pages_and_large_ones_are_given_back() {
        assert!(return_large_blocks());
        // A thread of its own: its own arena, as `serve`'s workers have.
        std::thread::spawn(|| {
            let body = |n: usize| {
                let v = vec![7u8; n];
                std::hint::black_box(&v);
            };
            body(384 << 10);
            let before = minor_faults();
            for _ in 0..50 {
                body(384 << 10);
            }
            let faults = minor_faults() - before;
            assert!(
                faults < 400,
                "{faults} page faults in 50 rounds of a 384 KiB block"
            );
            // Each block of the mapping threshold's size is a mapping of its own, its pages
            // faulted in every time: given back once freed.
            let before = minor_faults();
            for _ in 0..10 {
                body(OWN_MAPPING);
            }
            let faults = minor_faults() - before;
            assert!(
                faults >= 10 * 200,
                "{faults} page faults in 10 rounds of a 1 MiB block"
            );
        })
        .join()
        .expect("the thread");
    }

    /// `check`'s allocator: blocks under its threshold (here three of 4 MiB, a decoder's
    /// batches in flight), freed together and allocated again round after round, keep their
    /// pages. With glibc's defaults the first round's blocks are mappings of their own, and
    /// later rounds' come from the arena, which gives the 12 MiB back once freed (over its
    /// moving trim threshold, twice the largest block freed): 3,072 faults a round.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn blocks_under_checks_threshold_keep_their_pages_once_freed() {
        assert!(keep_freed_blocks());
        std::thread::spawn(|| {
            let mut faults = Vec::new();
            for _ in 0..10 {
                let before = minor_faults();
                let blocks: Vec<Vec<u8>> = (0..3).map(|_| vec![7u8; 4 << 20]).collect();
                std::hint::black_box(&blocks);
                drop(blocks);
                faults.push(minor_faults() - before);
            }
            let later: i64 = faults[1..].iter().sum();
            assert!(later < 1024, "page faults a round: {faults:?}");
        })
        .join()
        .expect("the thread");
    }

    /// Pages made resident by [`populate`] are written without a page fault; the pages
    /// around them fault in as usual. Skipped (said so) where the kernel lacks
    /// `MADV_POPULATE_WRITE` (before 5.14) or backs anonymous memory with huge pages always
    /// (a fault then maps 2 MiB).
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn populated_pages_are_written_without_faults() {
        let always = std::fs::read_to_string(POLICY).is_ok_and(|p| p.contains("[always]"));
        let probe: Vec<u8> = Vec::with_capacity(1 << 20);
        let page = (probe.as_ptr() as usize).next_multiple_of(4096);
        // SAFETY: a page of the probe's spare capacity, whose contents the advice keeps.
        #[allow(unsafe_code)]
        let supported = unsafe {
            rustix::mm::madvise(
                page as *mut std::ffi::c_void,
                4096,
                rustix::mm::Advice::LinuxPopulateWrite,
            )
        }
        .is_ok();
        if always || !supported {
            eprintln!("skipped: MADV_POPULATE_WRITE {supported}, huge pages always {always}");
            assert_ne!(
                std::env::var("CI").as_deref(),
                Ok("true"),
                "under CI=true this test may not skip"
            );
            return;
        }
        std::thread::spawn(|| {
            let mut block: Vec<u8> = Vec::with_capacity(8 << 20);
            let start = (block.as_ptr() as usize).next_multiple_of(4096);
            populate(start, 4 << 20);
            let offset = start - block.as_ptr() as usize;
            let spare = block.spare_capacity_mut();
            let before = minor_faults();
            for page in spare[offset..offset + (4 << 20)].chunks_mut(4096) {
                page[0].write(1);
            }
            let populated = minor_faults() - before;
            let before = minor_faults();
            for page in spare[offset + (4 << 20)..].chunks_mut(4096) {
                page[0].write(1);
            }
            let faulted = minor_faults() - before;
            assert!(
                populated < 8,
                "{populated} faults writing 1,024 populated pages"
            );
            assert!(faulted > 500, "{faulted} faults writing ~1,000 other pages");
        })
        .join()
        .expect("the thread");
    }

    /// Bytes glibc's arenas hold from the system (all arenas, not mapped blocks).
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[allow(unsafe_code)]
    fn arena_bytes() -> usize {
        // SAFETY: `mallinfo2` only reads the allocator's counters.
        unsafe { libc::mallinfo2() }.arena
    }

    /// Once `serve`'s thresholds are set, the block an applying thread extends its arena with
    /// stays at the arena's top once freed, and the small blocks allocated next (a batch's
    /// growth of the state) are carved from it: the arena takes nothing more from the system
    /// for them. (With the trim threshold left at 128 KiB the freed block was given back at
    /// once and the arena grew again for them; with the block at the mmap threshold it was
    /// a mapping of its own and they came from elsewhere.)
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn small_blocks_are_carved_from_the_arena_extended_ahead() {
        use fencewatch_ingest::heap::{AHEAD, extend_ahead};
        assert!(return_large_blocks());
        std::thread::spawn(|| {
            let before = arena_bytes();
            let at = extend_ahead().expect("on once the thresholds are set");
            let extended = arena_bytes();
            // Grown until its top had the block free (a new arena's top held some already).
            assert!(extended >= before + AHEAD / 2, "{before} -> {extended}");
            let blocks: Vec<Box<[u8; 512]>> = (0..1000).map(|_| Box::new([1u8; 512])).collect();
            assert_eq!(
                arena_bytes(),
                extended,
                "the arena grew for the small blocks"
            );
            let inside = (blocks.iter())
                .filter(|b| (at..at + AHEAD).contains(&(b.as_ptr() as usize)))
                .count();
            assert!(inside >= 990, "{inside} of 1000 blocks in the extension");
        })
        .join()
        .expect("the thread");
    }
}
