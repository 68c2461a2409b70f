//! The duplicate keys whose deliveries conflicted (SPEC §4 "Duplicates"), each with the
//! properties it named and the times its deliveries span, so that a further delivery is
//! placed as `check` places one group of a key: `conflicting_duplicate` counted once for
//! each property any delivery names, over every window from the earliest delivery to the
//! latest. A further delivery naming a property the key had not named counts there; one
//! beyond the span widens it, for every property counted.
//!
//! Conflicts are rare (a delivery that differs from another of its key), so a sorted map is
//! enough: kept until their latest delivery falls behind the lowest horizon of the
//! properties, checkpointed with the state. One whose entry is gone (behind the horizon) is
//! placed at the further delivery's window alone, as before this table.
//!
//! `Live`'s placing of a further delivery is in the `resettle` module (this one holds the table,
//! which the state does).

use super::spans::SpanId;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A duplicate key, as a conflict is found again by it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub(super) enum ConflictKey {
    /// An (emitter, seq).
    Seq(u32, u64),
    /// The order key of the kept event with this provenance (source, position): its first
    /// delivery, kept in a scope and set aside there.
    Order(u32, u64),
    /// A span id.
    Span(SpanId),
    /// The 128-bit hash of an order key whose first delivery was set aside on arrival (the
    /// `aside` module).
    Noted(u128),
}

/// One conflicted key: the properties counted, and the times its deliveries span.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Conflict {
    pub(super) lo: i64,
    pub(super) hi: i64,
    pub(super) props: Vec<u16>,
}

/// The conflicted keys (the module doc).
pub(super) type Conflicts = Aging<ConflictKey, Conflict>;

/// A time an entry of an [`Aging`] table holds: it is dropped once that falls behind the
/// lowest horizon of the properties.
pub(super) trait Dated {
    fn time(&self) -> i64;
}

impl Dated for Conflict {
    /// Its latest delivery.
    fn time(&self) -> i64 {
        self.hi
    }
}

/// A table of rare entries kept until their time ([`Dated`]) falls behind the lowest
/// horizon: swept when it holds twice the entries alive after the last sweep (at least
/// 1,024), unless no entry is behind the horizon (a lower bound on their times says so
/// without walking them: a table growing inside the horizon, as links do under a flood of
/// equal re-deliveries, was walked at each doubling to drop nothing). The conflicts here,
/// the order keys and links of the `aside` module. Entries are added by [`Aging::insert`];
/// a change through `map` may only move an entry's time later.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Aging<K: Ord, V> {
    pub(super) map: BTreeMap<K, V>,
    sweep_at: usize,
    /// No entry's time is below this (`i64::MIN`: not known, as after a restore). Not
    /// checkpointed: the same bytes as before it.
    #[serde(skip, default = "unknown_oldest")]
    oldest: i64,
}

fn unknown_oldest() -> i64 {
    i64::MIN
}

/// What the table holds: its bound on the entries' times is not part of it.
impl<K: Ord, V: PartialEq> PartialEq for Aging<K, V> {
    fn eq(&self, other: &Aging<K, V>) -> bool {
        self.map == other.map && self.sweep_at == other.sweep_at
    }
}

impl<K: Ord, V: Eq> Eq for Aging<K, V> {}

const SWEEP_MIN: usize = 1 << 10;

impl<K: Ord, V> Default for Aging<K, V> {
    fn default() -> Aging<K, V> {
        Aging {
            map: BTreeMap::new(),
            sweep_at: SWEEP_MIN,
            oldest: i64::MAX,
        }
    }
}

impl<K: Ord, V: Dated> Aging<K, V> {
    pub(super) fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Whether `key` is held.
    pub(super) fn contains(&self, key: &K) -> bool {
        self.map.contains_key(key)
    }

    /// Whether a sweep is due.
    pub(super) fn needs_sweep(&self) -> bool {
        self.map.len() > self.sweep_at
    }

    /// Adds (or replaces) the entry of `key`.
    pub(super) fn insert(&mut self, key: K, value: V) {
        self.oldest = self.oldest.min(value.time());
        self.map.insert(key, value);
    }

    /// Drops the entries behind `horizon`.
    pub(super) fn sweep(&mut self, horizon: i64) {
        self.sweep_keeping(horizon, |_| false);
    }

    /// Drops the entries behind `horizon` but those whose key `keep` holds. With none behind
    /// it, only the next sweep is put off (what a walk would leave).
    pub(super) fn sweep_keeping(&mut self, horizon: i64, keep: impl Fn(&K) -> bool) {
        if self.oldest < horizon {
            let mut oldest = i64::MAX;
            self.map.retain(|k, v| {
                let t = v.time();
                let kept = t >= horizon || keep(k);
                if kept {
                    oldest = oldest.min(t);
                }
                kept
            });
            self.oldest = oldest;
        }
        self.sweep_at = (2 * self.map.len()).max(SWEEP_MIN);
    }

    /// Approximate heap bytes.
    pub(super) fn heap_bytes(&self) -> usize {
        self.map.len() * (std::mem::size_of::<(K, V)>() + 16)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    thread_local! {
        /// How many times an entry's time was read: a walk reads every entry's.
        static READ: Cell<usize> = const { Cell::new(0) };
    }

    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
    struct At(i64);

    impl Dated for At {
        fn time(&self) -> i64 {
            READ.with(|r| r.set(r.get() + 1));
            self.0
        }
    }

    fn reads_of(f: impl FnOnce()) -> usize {
        let before = READ.with(Cell::get);
        f();
        READ.with(Cell::get) - before
    }

    /// A table growing inside the horizon is not walked at each doubling; once an entry
    /// falls behind, the sweep drops it (and keeps what `keep` holds); a restored table,
    /// whose bound is not known, walks as before. Either way it holds what a walk leaves.
    #[test]
    fn a_sweep_with_nothing_behind_the_horizon_is_put_off() {
        let mut t: Aging<u32, At> = Aging::default();
        let mut walked = 0;
        for k in 0..3000u32 {
            t.insert(k, At(100 + i64::from(k)));
            if t.needs_sweep() {
                walked += reads_of(|| t.sweep(100));
            }
        }
        assert_eq!(walked, 0, "nothing behind the horizon: no entry read");
        assert_eq!((t.map.len(), t.oldest), (3000, 100));
        assert_eq!(t.sweep_at, 4102, "put off to the next doubling: 2 x 2051");
        // Walked: the first ten are behind 110, the odd ones of them kept.
        assert!(reads_of(|| t.sweep_keeping(110, |k| k % 2 == 1)) >= 3000);
        assert_eq!(t.map.len(), 2995);
        assert_eq!(t.oldest, 101, "recomputed over what is left");
        assert_eq!(t.sweep_at, 2 * 2995);
        // The bound is not checkpointed (the same bytes as without it): restored, it is not
        // known, and the next sweep walks.
        let bytes = postcard::to_allocvec(&t).unwrap();
        #[derive(Serialize)]
        struct Before<'a> {
            map: &'a BTreeMap<u32, At>,
            sweep_at: usize,
        }
        let before = Before {
            map: &t.map,
            sweep_at: t.sweep_at,
        };
        assert_eq!(bytes, postcard::to_allocvec(&before).unwrap());
        let mut back: Aging<u32, At> = postcard::from_bytes(&bytes).unwrap();
        assert_eq!((back.oldest, &back), (i64::MIN, &t));
        assert!(reads_of(|| back.sweep(100)) >= 2995, "not known: walked");
        assert_eq!(back.oldest, 101);
        back.sweep(111);
        assert_eq!(
            back.map.len(),
            2995 - 6,
            "101, 103, 105, 107, 109 and 110 behind 111"
        );
    }
}
