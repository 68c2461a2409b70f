//! Bounded per-scope state for the service (SPEC §4 "serve is exact within the lateness
//! horizon", §5).
//!
//! A [`Tracker`] keeps, per (incarnation, epoch) of committed commits/fences, the interval
//! `[first, last]` of its event times while it is inside the retention horizon, and folds older
//! intervals into a high-water [`Mark`] — the highest (incarnation, epoch) ever committed and
//! the earliest time it was seen — that is never forgotten, so an owner that resumes after a
//! pause of hours is still caught. An idle scope costs one `Mark` and a null pointer.
//!
//! A new event `b` is judged against the kept intervals exactly (the earliest time of a higher
//! epoch decides whether it certainly precedes `b`). Against the folded mark the answer is exact
//! when `b` is at least `clock_skew` newer than the horizon (every folded event precedes it);
//! for older events it is `Stale` where the mark proves it and [`Judgement::Late`] (the reason
//! `late_evidence`) where the exact answer would need folded detail — never `Clear` by default.
//!
//! Events that arrive before the event that supersedes them are found by
//! [`Tracker::superseded_by`], which names the kept epochs with events after the newcomer's
//! time; the driver fetches those events from the WAL or archive (context events are not
//! resident, by design).

/// The folded high-water mark.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Mark {
    /// Incarnation of the highest epoch.
    pub incarnation: u64,
    /// The highest epoch.
    pub epoch: u64,
    /// Earliest event time of that epoch.
    pub first: i64,
}

/// One (incarnation, epoch) inside the horizon.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Interval {
    /// Incarnation.
    pub incarnation: u64,
    /// Epoch.
    pub epoch: u64,
    /// Earliest event time.
    pub first: i64,
    /// Latest event time.
    pub last: i64,
}

/// How a committed event stands against what the tracker knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Judgement {
    /// Certainly preceded by a higher epoch (same incarnation) or a higher incarnation.
    Stale {
        /// The superseding (incarnation, epoch), highest first.
        by: (u64, u64),
        /// Whether it is superseded by a higher incarnation (`stale_incarnation`).
        incarnation: bool,
    },
    /// A higher partner in ambiguous order and none certain.
    Ambiguous,
    /// The exact answer needs folded detail.
    Late,
    /// Nothing supersedes it.
    Clear,
}

/// Resident state of one (property, scope).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Tracker {
    mark: Option<Mark>,
    /// Boxed so that an idle tracker holds one thin null pointer (8 bytes) instead of an empty
    /// `Vec` (24): idle scopes are the bulk of resident state.
    #[allow(clippy::box_collection)]
    recent: Option<Box<Vec<Interval>>>,
}

impl Tracker {
    /// The high-water mark, folded or not.
    pub fn high_water(&self) -> Option<Mark> {
        if self.recent.is_none() {
            return self.mark;
        }
        let recent = self.recent.iter().flat_map(|v| v.iter()).map(|i| Mark {
            incarnation: i.incarnation,
            epoch: i.epoch,
            first: i.first,
        });
        self.mark
            .into_iter()
            .chain(recent)
            .max_by_key(|m| (m.incarnation, m.epoch, std::cmp::Reverse(m.first)))
    }

    /// Replaces the folded mark (the live assessor lowers a mark whose event turned out to be
    /// one of conflicting deliveries; see `live::scopes`).
    pub fn set_mark(&mut self, mark: Option<Mark>) {
        self.mark = mark;
    }

    /// Intervals still inside the horizon.
    pub fn intervals(&self) -> &[Interval] {
        self.recent.as_deref().map_or(&[], Vec::as_slice)
    }

    /// Whether everything is folded.
    pub fn is_idle(&self) -> bool {
        self.recent.is_none()
    }

    /// Judges a committed event of (`incarnation`, `epoch`) at `ts`, given the horizon
    /// (`i64::MIN` when nothing was ever folded), then records it.
    pub fn observe(
        &mut self,
        incarnation: u64,
        epoch: u64,
        ts: i64,
        skew: i64,
        horizon: i64,
    ) -> Judgement {
        let j = self.judge(incarnation, epoch, ts, skew, horizon);
        let recent = self.recent.get_or_insert_with(Default::default);
        match recent
            .iter_mut()
            .find(|i| i.incarnation == incarnation && i.epoch == epoch)
        {
            Some(i) => {
                i.first = i.first.min(ts);
                i.last = i.last.max(ts);
            }
            None => recent.push(Interval {
                incarnation,
                epoch,
                first: ts,
                last: ts,
            }),
        }
        j
    }

    /// Judges without recording.
    pub fn judge(
        &self,
        incarnation: u64,
        epoch: u64,
        ts: i64,
        skew: i64,
        horizon: i64,
    ) -> Judgement {
        let t = ts.saturating_sub(skew);
        let late_bound = ts.saturating_add(skew);
        let higher = |inc: u64, ep: u64| inc > incarnation || (inc == incarnation && ep > epoch);
        let mut best: Option<(u64, u64, bool)> = None;
        let mut ambiguous = false;
        for i in self
            .intervals()
            .iter()
            .filter(|i| higher(i.incarnation, i.epoch))
        {
            if i.first < t {
                let cand = (i.incarnation, i.epoch, i.incarnation > incarnation);
                if best.is_none_or(|b| (cand.0, cand.1) > (b.0, b.1)) {
                    best = Some(cand);
                }
            } else if i.first <= late_bound {
                ambiguous = true;
            }
        }
        let mut late = false;
        if let Some(m) = self.mark.filter(|m| higher(m.incarnation, m.epoch)) {
            if m.first < t || ts >= horizon.saturating_add(skew) {
                let cand = (m.incarnation, m.epoch, m.incarnation > incarnation);
                if best.is_none_or(|b| (cand.0, cand.1) > (b.0, b.1)) {
                    best = Some(cand);
                }
            } else {
                late = true;
            }
        }
        match best {
            Some((inc, ep, by_inc)) => Judgement::Stale {
                by: (inc, ep),
                incarnation: by_inc,
            },
            None if late => Judgement::Late,
            None if ambiguous => Judgement::Ambiguous,
            None => Judgement::Clear,
        }
    }

    /// Kept epochs lower than (`incarnation`, `epoch`) with events certainly after `ts`: their
    /// events after `ts + skew` are newly stale when an event of (`incarnation`, `epoch`) at
    /// `ts` arrives late.
    pub fn superseded_by(
        &self,
        incarnation: u64,
        epoch: u64,
        ts: i64,
        skew: i64,
    ) -> impl Iterator<Item = &Interval> + '_ {
        let after = ts.saturating_add(skew);
        self.intervals().iter().filter(move |i| {
            (i.incarnation < incarnation || (i.incarnation == incarnation && i.epoch < epoch))
                && i.last > after
        })
    }

    /// Folds intervals whose last event is older than `horizon` into the mark.
    pub fn fold(&mut self, horizon: i64) {
        let Some(recent) = self.recent.as_mut() else {
            return;
        };
        let mut mark = self.mark;
        recent.retain(|i| {
            if i.last >= horizon {
                return true;
            }
            let m = Mark {
                incarnation: i.incarnation,
                epoch: i.epoch,
                first: i.first,
            };
            mark = Some(match mark {
                Some(old) if (old.incarnation, old.epoch) > (m.incarnation, m.epoch) => old,
                Some(old) if (old.incarnation, old.epoch) == (m.incarnation, m.epoch) => Mark {
                    first: old.first.min(m.first),
                    ..old
                },
                _ => m,
            });
            false
        });
        self.mark = mark;
        if recent.is_empty() {
            self.recent = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SKEW: i64 = 50;

    #[test]
    fn judges_like_the_spec_inside_the_horizon() {
        let mut t = Tracker::default();
        assert_eq!(t.observe(0, 41, 0, SKEW, i64::MIN), Judgement::Clear);
        assert_eq!(t.observe(0, 42, 1000, SKEW, i64::MIN), Judgement::Clear);
        assert_eq!(
            t.judge(0, 41, 2000, SKEW, i64::MIN),
            Judgement::Stale {
                by: (0, 42),
                incarnation: false
            }
        );
        assert_eq!(t.judge(0, 41, 1030, SKEW, i64::MIN), Judgement::Ambiguous);
        assert_eq!(t.judge(0, 43, 2000, SKEW, i64::MIN), Judgement::Clear);
        t.observe(1, 1, 3000, SKEW, i64::MIN);
        assert_eq!(
            t.judge(0, 50, 4000, SKEW, i64::MIN),
            Judgement::Stale {
                by: (1, 1),
                incarnation: true
            }
        );
    }

    #[test]
    fn late_arrivals_name_what_they_supersede() {
        let mut t = Tracker::default();
        t.observe(0, 41, 2000, SKEW, i64::MIN);
        t.observe(0, 40, 500, SKEW, i64::MIN);
        let hit: Vec<u64> = t
            .superseded_by(0, 42, 1000, SKEW)
            .map(|i| i.epoch)
            .collect();
        assert_eq!(hit, [41]);
    }

    #[test]
    fn the_mark_is_never_forgotten() {
        let mut t = Tracker::default();
        t.observe(0, 7, 1_000, SKEW, i64::MIN);
        t.observe(0, 6, 500, SKEW, i64::MIN);
        t.fold(10_000);
        assert!(t.is_idle());
        assert_eq!(
            t.high_water(),
            Some(Mark {
                incarnation: 0,
                epoch: 7,
                first: 1_000
            })
        );
        // Hours later, the paused owner of epoch 6 commits: certainly stale.
        assert_eq!(
            t.judge(0, 6, 3_600_000, SKEW, 10_000),
            Judgement::Stale {
                by: (0, 7),
                incarnation: false
            }
        );
        // A late event from before the horizon that the mark cannot decide is late evidence.
        assert_eq!(t.judge(0, 5, 1_020, SKEW, 10_000), Judgement::Late);
        // ... and one the mark does decide is stale.
        assert_eq!(
            t.judge(0, 5, 5_000, SKEW, 10_000),
            Judgement::Stale {
                by: (0, 7),
                incarnation: false
            }
        );
        assert_eq!(t.judge(0, 8, 5_000, SKEW, 10_000), Judgement::Clear);
    }

    #[test]
    fn idle_state_is_small() {
        assert!(
            std::mem::size_of::<Tracker>() <= 40,
            "{}",
            std::mem::size_of::<Tracker>()
        );
    }

    fn brute(prefix: &[(u64, u64, i64)], b: (u64, u64, i64)) -> Judgement {
        let higher: Vec<_> = prefix.iter().filter(|a| (a.0, a.1) > (b.0, b.1)).collect();
        let stale = higher
            .iter()
            .filter(|a| a.2 + SKEW < b.2)
            .map(|a| (a.0, a.1))
            .max();
        match stale {
            Some(by) => Judgement::Stale {
                by,
                incarnation: by.0 > b.0,
            },
            None if higher.iter().any(|a| a.2 <= b.2 + SKEW) => Judgement::Ambiguous,
            None => Judgement::Clear,
        }
    }

    proptest::proptest! {
        #[test]
        fn exact_without_folding(evs in proptest::collection::vec((0u64..2, 0u64..5, 0i64..400), 1..20)) {
            let mut t = Tracker::default();
            for (i, &(inc, ep, ts)) in evs.iter().enumerate() {
                proptest::prop_assert_eq!(t.observe(inc, ep, ts, SKEW, i64::MIN), brute(&evs[..i], (inc, ep, ts)));
            }
        }

        #[test]
        fn folding_never_clears_or_invents_a_refutation(evs in proptest::collection::vec((0u64..2, 0u64..5, 0i64..400), 1..20), horizon in 0i64..400) {
            let mut t = Tracker::default();
            let (old, new): (Vec<_>, Vec<_>) = evs.iter().partition(|e| e.2 < horizon);
            for &&(inc, ep, ts) in &old {
                t.observe(inc, ep, ts, SKEW, i64::MIN);
            }
            t.fold(horizon);
            let mut seen: Vec<(u64, u64, i64)> = old.iter().map(|e| **e).collect();
            for &&(inc, ep, ts) in new.iter().chain(old.iter()) {
                let got = t.judge(inc, ep, ts, SKEW, horizon);
                let want = brute(&seen, (inc, ep, ts));
                match (got, want) {
                    (Judgement::Stale { .. }, Judgement::Stale { .. }) | (Judgement::Late, _) => {}
                    (Judgement::Stale { .. }, w) => proptest::prop_assert!(false, "invented refutation, exact {:?}", w),
                    (g, Judgement::Stale { .. }) => proptest::prop_assert!(false, "missed a stale event: {:?}", g),
                    (g, w) => proptest::prop_assert_eq!(g, w),
                }
                if ts >= horizon {
                    t.observe(inc, ep, ts, SKEW, horizon);
                    seen.push((inc, ep, ts));
                }
            }
        }
    }
}

/// The resident per-scope state of one property: interned scope ids and their trackers.
#[derive(Debug, Default)]
pub struct ScopeTable {
    ids: crate::intern::Interner,
    trackers: Vec<Tracker>,
}

impl ScopeTable {
    /// An empty table.
    pub fn new() -> ScopeTable {
        ScopeTable::default()
    }

    /// The tracker of `scope`, created empty on first use.
    pub fn tracker(&mut self, scope: &str) -> &mut Tracker {
        let id = self.ids.intern(scope) as usize;
        if id == self.trackers.len() {
            self.trackers.push(Tracker::default());
        }
        &mut self.trackers[id]
    }

    /// Folds every scope's intervals older than `horizon`.
    pub fn fold(&mut self, horizon: i64) {
        for t in &mut self.trackers {
            t.fold(horizon);
        }
    }

    /// Number of scopes.
    pub fn len(&self) -> usize {
        self.trackers.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.trackers.is_empty()
    }

    /// Heap bytes held (capacity, not length), for the `state bytes` metric.
    pub fn heap_bytes(&self) -> usize {
        self.ids.heap_bytes()
            + self.trackers.capacity() * std::mem::size_of::<Tracker>()
            + self
                .trackers
                .iter()
                .filter_map(|t| t.recent.as_ref())
                .map(|v| 24 + v.capacity() * std::mem::size_of::<Interval>())
                .sum::<usize>()
    }
}
