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

impl Ahead {
    /// [`Ahead::before`] the elements `more` are appended to the array `v` whose allocation
    /// holds `cap` of them.
    pub(super) fn before_append<T>(
        &mut self,
        hook: Option<Populate>,
        (v, cap): (&[T], usize),
        more: &[T],
    ) {
        self.before(hook, extent(v, cap), std::mem::size_of_val(more));
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

    thread_local! {
        static HOOKED: RefCell<Vec<(usize, usize)>> = const { RefCell::new(Vec::new()) };
    }

    fn hooked(start: usize, len: usize) {
        HOOKED.with_borrow_mut(|c| c.push((start, len)));
    }

    /// `History::append` hands the hook pages of its arrays' spare capacity only (records,
    /// scope hashes, ends and text), ahead of its copies, and the report is the same with a
    /// hook as without.
    #[test]
    fn history_populates_its_arrays_ahead_and_reports_the_same() {
        use crate::event::{Epoch, Event, Kind};
        use crate::history::{Batch, History};
        use crate::time::EventTime;
        let contract = crate::Contract::parse(
            "c",
            "[[property]]\nname=\"p\"\nsubject=\"S\"\nstrategy=\"lease_epoch\"\n[[property.route]]\nname=\"r\"\n",
        )
        .expect("a contract");
        let run = |hook: Option<Populate>| {
            let mut h = History::new(contract.clone());
            if let Some(hook) = hook {
                h.populate_with(hook);
            }
            let src = h.add_source("f");
            h.reserve(120_000);
            for b in 0..20u64 {
                let mut batch = Batch::new(src);
                for i in 0..5_000u64 {
                    let n = b * 5_000 + i;
                    let scope = format!("scope-{}", n % 997);
                    let mut e = Event::new(Kind::Commit, EventTime(n as i64 * 1_000));
                    e.scope = Some(&scope);
                    e.epoch = Some(Epoch(1 + n / 40_000 + u64::from(n % 5_003 == 0)));
                    e.route = Some("r");
                    batch.push(&contract, &e, i + 1);
                }
                h.append(batch);
            }
            let spans = [
                extent(&h.recs, h.recs.capacity()),
                h.scopes.extents()[0],
                h.scopes.extents()[1],
                h.scopes.extents()[2],
            ];
            let report = serde_json::to_string(&h.finish()).expect("json");
            (report, spans)
        };
        let (without, _) = run(None);
        let (with, spans) = run(Some(hooked));
        assert_eq!(with, without, "the same report");
        let calls = HOOKED.with_borrow(Clone::clone);
        assert!(!calls.is_empty());
        let mut on_recs = 0;
        for &(start, len) in &calls {
            assert_eq!((start % PAGE, len % PAGE), (0, 0));
            let within = spans
                .iter()
                .position(|&(base, _, cap)| start >= base && start + len <= base + cap);
            assert!(
                within.is_some(),
                "({start:#x}, {len}) outside every array: {spans:?}"
            );
            on_recs += usize::from(within == Some(0)) * len;
        }
        // 100k records of 72 bytes: all but the first partial page made resident ahead.
        assert!(on_recs >= 100_000 * 72 - PAGE, "{on_recs} bytes of records");
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
