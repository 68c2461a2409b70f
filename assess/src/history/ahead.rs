//! Pages of the history's growing arrays faulted in ahead of the copies that fill them.
//!
//! Reading appends every batch to a few large arrays (records, scope hashes, texts and
//! ends: ~110 bytes an event), whose pages are each first touched by that copy: a page fault
//! a page, 59k of `check`'s ~73k on 2.1M events, taken one at a time on the thread that
//! appends. A [`Populate`] hook given by the caller ([`History::populate_with`]; `check`
//! passes one asking the kernel for `MADV_POPULATE_WRITE`) makes them resident a few
//! megabytes at a time instead, before the copy reaches them: the same pages, without an
//! exception and a return per page. The core itself touches no system interface; without a
//! hook nothing changes.
//!
//! [`History::populate_with`]: super::History::populate_with

/// Makes the `len` bytes at address `start` resident and writable, their contents unchanged
/// (both page-aligned, inside one allocation the caller owns and has not yet written).
pub type Populate = fn(start: usize, len: usize);

/// Bytes made resident at a time, past what the next copy needs.
const STEP: usize = 4 << 20;
/// The page size the ranges are aligned to (a larger page only makes some calls redundant).
const PAGE: usize = 4096;

/// How far one array was made resident.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Ahead {
    /// The end of the resident range, an address inside the array's allocation (0: none).
    upto: usize,
}

impl Ahead {
    /// Before `more` bytes are appended to an array whose allocation of `cap` bytes starts
    /// at address `base` and holds `len`: makes resident, through `hook`, its spare pages up
    /// to [`STEP`] past the end of the copy when the copy would pass what is resident. Only
    /// whole pages of spare capacity are given to the hook (the page the array's last bytes
    /// share is already resident); after the array moved (it grew), it starts over.
    pub(super) fn before(
        &mut self,
        hook: Option<Populate>,
        (base, len, cap): (usize, usize, usize),
        more: usize,
    ) {
        let Some(hook) = hook else { return };
        let (written, end) = (base + len, base + cap);
        if self.upto < written || self.upto > end {
            self.upto = written.next_multiple_of(PAGE);
        }
        let need = written.saturating_add(more);
        if need <= self.upto {
            return;
        }
        let to = need.saturating_add(STEP).min(end) & !(PAGE - 1);
        if to > self.upto {
            hook(self.upto, to - self.upto);
            self.upto = to;
        }
    }
}

/// `(base, len, cap)` of a vector, in bytes, for [`Ahead::before`].
pub(super) fn extent<T>(v: &[T], cap: usize) -> (usize, usize, usize) {
    (
        v.as_ptr() as usize,
        std::mem::size_of_val(v),
        cap * std::mem::size_of::<T>(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    thread_local! {
        static CALLS: RefCell<Vec<(usize, usize)>> = const { RefCell::new(Vec::new()) };
    }

    fn record(start: usize, len: usize) {
        CALLS.with_borrow_mut(|c| c.push((start, len)));
    }

    fn calls() -> Vec<(usize, usize)> {
        CALLS.with_borrow(Clone::clone)
    }

    /// Every range given is whole pages of spare capacity, never written bytes, together
    /// covering every page the copies reach past the first partial one, each once.
    #[test]
    fn populates_whole_spare_pages_ahead_once() {
        let base = 0x10_0000 + 100; // an allocation not page-aligned
        let cap = 40 << 20;
        let mut a = Ahead::default();
        let mut len = 0;
        for more in [10, 5000, 3 << 20, 1, 7 << 20, 20 << 20, 9 << 20] {
            let more = more.min(cap - len);
            a.before(Some(record), (base, len, cap), more);
            let first = base.next_multiple_of(PAGE);
            let covered = calls().last().map_or(first, |&(s, l)| s + l);
            assert!(
                covered >= (base + len + more) & !(PAGE - 1),
                "the copy's pages resident"
            );
            len += more;
        }
        let seen = calls();
        let mut at = (base).next_multiple_of(PAGE);
        for &(s, l) in &seen {
            assert_eq!(s, at, "contiguous, each page once");
            assert_eq!((s % PAGE, l % PAGE), (0, 0));
            assert!(s + l <= base + cap);
            at = s + l;
        }
        assert!(seen.len() < 12, "a few megabytes at a time: {seen:?}");
        // Without a hook: nothing.
        Ahead::default().before(None, (base, 0, cap), 1 << 20);
        assert_eq!(calls().len(), seen.len());
    }

    /// An array that moved (grew) starts over at its new place, past its written bytes.
    #[test]
    fn starts_over_where_the_array_moved() {
        let mut a = Ahead::default();
        a.before(Some(record), (1 << 30, 0, 8 << 20), 4096);
        a.before(Some(record), (2 << 30, 6000, 16 << 20), 4096);
        let seen = calls();
        assert_eq!(
            seen[1].0,
            (2 << 30) + 8192,
            "after the moved array's written bytes"
        );
    }
}
