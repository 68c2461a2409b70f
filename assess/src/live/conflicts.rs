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

use super::spans::SpanId;
use super::state::Live;
use crate::event::Kind;
use crate::finding::Reason;
use crate::rules::Rec;
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
    lo: i64,
    hi: i64,
    props: Vec<u16>,
}

/// The conflicted keys (the module doc), swept when they hold twice the entries alive after
/// the last sweep (at least 1,024).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Conflicts {
    map: BTreeMap<ConflictKey, Conflict>,
    sweep_at: usize,
}

const SWEEP_MIN: usize = 1 << 10;

impl Default for Conflicts {
    fn default() -> Conflicts {
        Conflicts {
            map: BTreeMap::new(),
            sweep_at: SWEEP_MIN,
        }
    }
}

impl Conflicts {
    /// Whether `key` conflicted (and is still held).
    pub(super) fn contains(&self, key: &ConflictKey) -> bool {
        self.map.contains_key(key)
    }

    /// Whether a sweep is due.
    pub(super) fn needs_sweep(&self) -> bool {
        self.map.len() > self.sweep_at
    }

    /// Drops the conflicts whose deliveries are all behind `horizon`.
    pub(super) fn sweep(&mut self, horizon: i64) {
        self.map.retain(|_, c| c.hi >= horizon);
        self.sweep_at = (2 * self.map.len()).max(SWEEP_MIN);
    }

    /// Approximate heap bytes.
    pub(super) fn heap_bytes(&self) -> usize {
        self.map.len() * (std::mem::size_of::<(ConflictKey, Conflict)>() + 16)
    }
}

impl Live {
    /// Notes that `key`'s deliveries at `a` and `b` conflicted, `conflicting_duplicate`
    /// counted and placed over them for `props` (the caller did).
    pub(super) fn note_conflict(
        &mut self,
        key: ConflictKey,
        a: i64,
        b: i64,
        props: impl IntoIterator<Item = usize>,
    ) {
        let mut props: Vec<u16> = props.into_iter().map(|p| p as u16).collect();
        props.sort_unstable();
        props.dedup();
        let c = Conflict {
            lo: a.min(b),
            hi: a.max(b),
            props,
        };
        self.state.conflicts.map.insert(key, c);
    }

    /// Places `conflicting_duplicate` for `rec`, a further delivery (of property `p`) of
    /// `key`, whose deliveries conflicted already (the module doc): counted and placed over
    /// the key's whole span if the key had not named `p`; otherwise the span widened to `rec`
    /// for every property counted. `fallback`: where the key's entry is gone, the time of its
    /// first delivery of property `p`'s, whose window `rec`'s shares adds nothing.
    pub(super) fn place_conflict_again(
        &mut self,
        key: ConflictKey,
        p: usize,
        rec: &Rec,
        fallback: Option<i64>,
    ) {
        let ts = rec.ts;
        let Some(c) = self.state.conflicts.map.get_mut(&key) else {
            let series = &mut self.state.props[p].tally.series;
            if fallback.is_none_or(|f| series.index(ts) != series.index(f)) {
                series.add_reason(ts, Reason::ConflictingDuplicate);
            }
            return;
        };
        let (lo, hi) = (c.lo, c.hi);
        (c.lo, c.hi) = (lo.min(ts), hi.max(ts));
        let new = !c.props.contains(&(p as u16));
        if new {
            c.props.push(p as u16);
        }
        let props = c.props.clone();
        for q in props.into_iter().map(usize::from) {
            if q == p && new {
                self.count(p, rec, Reason::ConflictingDuplicate, |_| {
                    "differs from another delivery under the same key".to_string()
                });
                let series = &mut self.state.props[p].tally.series;
                if rec.kind != Kind::Attestation {
                    series.cover(ts);
                }
                series.add_reason_span(lo.min(ts), hi.max(ts), Reason::ConflictingDuplicate);
                continue;
            }
            let series = &mut self.state.props[q].tally.series;
            if rec.kind != Kind::Attestation && q == p {
                series.cover(ts);
            }
            let (klo, khi, kts) = (series.index(lo), series.index(hi), series.index(ts));
            if kts > khi {
                series.add_reason(ts, Reason::ConflictingDuplicate);
                if kts - khi > 1 {
                    series.add_span(khi + 1, kts - 1, Reason::ConflictingDuplicate);
                }
            } else if kts < klo {
                series.add_reason(ts, Reason::ConflictingDuplicate);
                if klo - kts > 1 {
                    series.add_span(kts + 1, klo - 1, Reason::ConflictingDuplicate);
                }
            }
        }
    }
}
