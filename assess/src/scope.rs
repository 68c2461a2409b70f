//! The per-scope decision procedures of SPEC §4, as pure functions over sorted slices.
//!
//! Certain order: `a` precedes `b` when both carry `order` (same scope and incarnation) and
//! `a.order < b.order`, else when `a.ts + clock_skew < b.ts`. A stale event `b` has a partner
//! `a` with a higher epoch that certainly precedes it.
//!
//! [`supersession`] decides every event of one (scope, incarnation) in O(n log n): it sweeps the
//! epochs from highest to lowest, keeping the minimum time (and minimum `order`) of everything
//! above, and a "staircase" of epochs whose minimum is lower than all higher epochs' minimum.
//! The highest epoch that certainly precedes `b` is always on the staircase, which gives the
//! witness (highest epoch, then earliest time, then smallest provenance) by binary search.

use crate::finding::CounterexampleKind;

/// One committed commit/fence (or grant) with an epoch, as the sweeps see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Cand {
    pub(crate) epoch: u64,
    pub(crate) ts: i64,
    pub(crate) order: Option<u64>,
    pub(crate) holder: u32,
    /// Reading-order index: the provenance order.
    pub(crate) idx: u32,
}

/// How an event stands against the higher epochs of its group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sup {
    /// Certainly preceded by a higher epoch; the witness's index.
    Stale(u32),
    /// A higher-epoch partner in ambiguous order, and no certain one.
    Ambiguous,
    /// Neither.
    Clear,
}

/// `a` certainly precedes `b` (SPEC §4 "Certain order").
pub(crate) fn precedes(a: &Cand, b: &Cand, skew: i64) -> bool {
    match (a.order, b.order) {
        (Some(x), Some(y)) => x < y,
        _ => i128::from(a.ts) + i128::from(skew) < i128::from(b.ts),
    }
}

/// Reusable buffers for the sweeps.
#[derive(Debug, Default)]
pub(crate) struct Workspace {
    pub(crate) sweep: Sweep,
    pub(crate) commits: Vec<Cand>,
    pub(crate) grants: Vec<Cand>,
    pub(crate) incs: Vec<(u64, usize, usize, usize)>,
}

/// Staircases of the epoch sweep: (minimum, start of the epoch's slice, its end).
#[derive(Debug, Default)]
pub(crate) struct Sweep {
    all: Vec<(i64, usize, usize)>,
    unordered: Vec<(i64, usize, usize)>,
    ordered: Vec<(u64, usize, usize)>,
}

fn first_below<T: Ord + Copy>(stair: &[(T, usize, usize)], bound: T) -> Option<(usize, usize)> {
    let i = stair.partition_point(|e| e.0 >= bound);
    stair.get(i).map(|e| (e.1, e.2))
}

fn push_stair<T: Ord + Copy>(
    stair: &mut Vec<(T, usize, usize)>,
    v: Option<T>,
    start: usize,
    end: usize,
) {
    if let Some(v) = v
        && stair.last().is_none_or(|l| v < l.0)
    {
        stair.push((v, start, end));
    }
}

/// Decides every event of `cands` (one scope and incarnation, sorted by epoch descending, then
/// time, then index) against the higher epochs. `f(i, outcome)` is called once per event.
pub(crate) fn supersession(
    cands: &[Cand],
    skew: i64,
    sweep: &mut Sweep,
    mut f: impl FnMut(usize, Sup),
) {
    sweep.all.clear();
    sweep.unordered.clear();
    sweep.ordered.clear();
    let (mut min_all, mut min_unordered, mut min_ordered) = (i64::MAX, i64::MAX, u64::MAX);
    let mut any = false;
    let mut i = 0;
    while i < cands.len() {
        let epoch = cands[i].epoch;
        let mut j = i;
        while j < cands.len() && cands[j].epoch == epoch {
            j += 1;
        }
        if any {
            for (k, b) in cands[i..j].iter().enumerate() {
                let t = b.ts.saturating_sub(skew);
                let late = b.ts.saturating_add(skew);
                let outcome = match b.order {
                    None if min_all < t => {
                        let (start, _) = first_below(&sweep.all, t).expect("on the staircase");
                        Sup::Stale(cands[start].idx)
                    }
                    None if min_all <= late => Sup::Ambiguous,
                    None => Sup::Clear,
                    Some(o) => {
                        let by_order = if min_ordered < o {
                            first_below(&sweep.ordered, o)
                        } else {
                            None
                        };
                        let by_time = if min_unordered < t {
                            first_below(&sweep.unordered, t)
                        } else {
                            None
                        };
                        // The higher epoch of the two sits earlier in the slice.
                        match (by_order, by_time) {
                            (None, None) if min_ordered == o || min_unordered <= late => {
                                Sup::Ambiguous
                            }
                            (None, None) => Sup::Clear,
                            (x, y) => {
                                let (start, end) = match (x, y) {
                                    (Some(x), Some(y)) => x.min(y),
                                    (Some(x), None) | (None, Some(x)) => x,
                                    (None, None) => unreachable!(),
                                };
                                let w = cands[start..end]
                                    .iter()
                                    .find(|a| precedes(a, b, skew))
                                    .expect("a preceding event in the epoch");
                                Sup::Stale(w.idx)
                            }
                        }
                    }
                };
                f(i + k, outcome);
            }
        } else {
            for k in i..j {
                f(k, Sup::Clear);
            }
        }
        let group = &cands[i..j];
        let g_all = group.first().map(|c| c.ts);
        let g_unordered = group.iter().find(|c| c.order.is_none()).map(|c| c.ts);
        let g_ordered = group.iter().filter_map(|c| c.order).min();
        push_stair(&mut sweep.all, g_all, i, j);
        push_stair(&mut sweep.unordered, g_unordered, i, j);
        push_stair(&mut sweep.ordered, g_ordered, i, j);
        min_all = min_all.min(g_all.unwrap_or(i64::MAX));
        min_unordered = min_unordered.min(g_unordered.unwrap_or(i64::MAX));
        min_ordered = min_ordered.min(g_ordered.unwrap_or(u64::MAX));
        any = true;
        i = j;
    }
}

/// Decides every committed event against higher incarnations of the same scope (order never
/// applies across incarnations). `slices` are in ascending incarnation order, each sorted by
/// epoch descending then time. `f(idx, outcome)` is called for every event.
pub(crate) fn incarnations(slices: &[Vec<Cand>], skew: i64, mut f: impl FnMut(u32, Sup)) {
    let mut stair: Vec<(i64, usize, usize)> = Vec::new();
    let mut min_all = i64::MAX;
    for (s, slice) in slices.iter().enumerate().rev() {
        for b in slice {
            let t = b.ts.saturating_sub(skew);
            let outcome = if min_all < t {
                let (si, _) = first_below(&stair, t).expect("on the staircase");
                let w = slices[si]
                    .iter()
                    .find(|a| a.ts < t)
                    .expect("a preceding event");
                Sup::Stale(w.idx)
            } else if min_all <= b.ts.saturating_add(skew) {
                Sup::Ambiguous
            } else {
                Sup::Clear
            };
            f(b.idx, outcome);
        }
        let m = slice.iter().map(|c| c.ts).min();
        push_stair(&mut stair, m, s, s);
        min_all = min_all.min(m.unwrap_or(i64::MAX));
    }
}

/// Epoch reuse among `cands` (sorted by epoch descending, time, index): for each epoch with
/// two or more different holders, `f(stale, witness)` with the latest holder-bearing event as
/// stale and the earliest event of another holder as witness.
pub(crate) fn reuse(cands: &[Cand], mut f: impl FnMut(u32, u32)) {
    const NONE: u32 = u32::MAX;
    let mut i = 0;
    while i < cands.len() {
        let mut j = i;
        while j < cands.len() && cands[j].epoch == cands[i].epoch {
            j += 1;
        }
        let group = &cands[i..j];
        if let Some(stale) = group.iter().rev().find(|c| c.holder != NONE)
            && let Some(w) = group
                .iter()
                .find(|c| c.holder != NONE && c.holder != stale.holder)
        {
            f(stale.idx, w.idx);
        }
        i = j;
    }
}

/// Holder mismatch and ungranted epochs of `commits` against `grants` (both sorted by epoch
/// descending, then time).
/// `f(commit, None)` for an ungranted commit, `f(commit, Some(grant))` for a mismatch.
pub(crate) fn grant_checks(commits: &[Cand], grants: &[Cand], mut f: impl FnMut(u32, Option<u32>)) {
    const NONE: u32 = u32::MAX;
    for c in commits {
        let lo = grants.partition_point(|g| g.epoch > c.epoch);
        let hi = lo + grants[lo..].partition_point(|g| g.epoch == c.epoch);
        let granted = &grants[lo..hi];
        if granted.is_empty() {
            f(c.idx, None);
            continue;
        }
        if c.holder == NONE {
            continue;
        }
        let mut holders = granted.iter().filter(|g| g.holder != NONE).peekable();
        if let Some(first) = holders.peek().copied()
            && !holders.any(|g| g.holder == c.holder)
        {
            f(c.idx, Some(first.idx));
        }
    }
}

/// A grouped event as the per-scope sweeps read it: a copy of what they need, so that sorting
/// and sweeping a scope touches contiguous memory only.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Slot {
    pub(crate) inc: u64,
    pub(crate) epoch: u64,
    pub(crate) ts: i64,
    pub(crate) order: Option<u64>,
    pub(crate) idx: u32,
    pub(crate) holder: u32,
    pub(crate) prop: u16,
    /// 0 committed commit/fence with an epoch, 1 grant, 2 anything else.
    pub(crate) class: u8,
}

impl Slot {
    /// The order [`decide_group`] needs: (property, incarnation, class, epoch descending, time,
    /// index).
    pub(crate) fn sort_key(&self) -> (u16, u64, u8, std::cmp::Reverse<u64>, i64, u32) {
        (
            self.prop,
            self.inc,
            self.class,
            std::cmp::Reverse(self.epoch),
            self.ts,
            self.idx,
        )
    }
}

/// Sorts `slots` by [`Slot::sort_key`]. A scope's events read in time order, each epoch's
/// after the one before, come sorted by epoch ascending: the key's order is then that of its
/// epochs' runs reversed, each run kept in its order, which takes two passes instead of a sort
/// (sorting a scope of 2,000 events, 80 epochs of 25, was ~13% of `check`'s CPU on a history
/// of 1,000 scopes; a stable sort's search for runs needs longer ones). Any other order is
/// sorted.
pub(crate) fn sort_slots(slots: &mut [Slot]) {
    let forward = |s: &Slot| (s.prop, s.inc, s.class, s.epoch, s.ts, s.idx);
    if slots.len() <= 16 || !slots.is_sorted_by_key(forward) {
        slots.sort_unstable_by_key(Slot::sort_key);
        return;
    }
    let runs =
        |slots: &mut [Slot], same: fn(&Slot, &Slot) -> bool, f: &mut dyn FnMut(&mut [Slot])| {
            let mut a = 0;
            while a < slots.len() {
                let first = slots[a];
                let n = slots[a..].iter().take_while(|s| same(&first, s)).count();
                f(&mut slots[a..a + n]);
                a += n;
            }
        };
    // Within each (property, incarnation, class): the epochs' runs reversed.
    runs(
        slots,
        |a, b| (a.prop, a.inc, a.class) == (b.prop, b.inc, b.class),
        &mut |block| {
            // One epoch (a hot scope under one lease): in order already.
            if block.first().map(|s| s.epoch) != block.last().map(|s| s.epoch) {
                block.reverse();
                runs(block, |a, b| a.epoch == b.epoch, &mut |run| run.reverse());
            }
        },
    );
    debug_assert!(slots.is_sorted_by_key(Slot::sort_key));
}

/// Runs every per-scope procedure over one (property, scope) group sorted by
/// [`Slot::sort_key`]: supersession of commits and of grants, epoch reuse, grant checks per
/// incarnation, then the incarnation sweep. The same function serves `check` and `serve`.
/// Ungranted commits are listed only with `grants_required`: otherwise nobody reads them,
/// and under optional grants with none sent every commit is one (a list grown per group
/// was ~2% of `check`'s samples in `realloc`).
pub(crate) fn decide_group(
    group: &[Slot],
    skew: i64,
    grants_required: bool,
    work: &mut Workspace,
) -> GroupFindings {
    // Slices per incarnation: (committed, grants).
    work.incs.clear();
    let mut a = 0;
    while a < group.len() {
        let inc = group[a].inc;
        let b = a + group[a..].iter().take_while(|x| x.inc == inc).count();
        let c_end = a + group[a..b].iter().take_while(|x| x.class == 0).count();
        let g_end = c_end + group[c_end..b].iter().take_while(|x| x.class == 1).count();
        work.incs.push((inc, a, c_end, g_end));
        a = b;
    }
    let cand = |x: &Slot| Cand {
        epoch: x.epoch,
        ts: x.ts,
        order: x.order,
        holder: x.holder,
        idx: x.idx,
    };
    let mut found = GroupFindings::default();
    let (mut commits, mut grants) = (
        std::mem::take(&mut work.commits),
        std::mem::take(&mut work.grants),
    );
    for &(_, a, c_end, g_end) in &work.incs {
        commits.clear();
        commits.extend(group[a..c_end].iter().map(cand));
        grants.clear();
        grants.extend(group[c_end..g_end].iter().map(cand));
        supersession(&commits, skew, &mut work.sweep, |b, outcome| {
            found.epoch_outcome(commits[b].idx, outcome, false)
        });
        supersession(&grants, skew, &mut work.sweep, |b, outcome| {
            found.epoch_outcome(grants[b].idx, outcome, true)
        });
        reuse(&commits, |stale, witness| found.reuse(stale, witness));
        reuse(&grants, |stale, witness| found.reuse(stale, witness));
        grant_checks(&commits, &grants, |c, g| {
            if grants_required || g.is_some() {
                found.grant_outcome(c, g);
            }
        });
    }
    (work.commits, work.grants) = (commits, grants);
    if work.incs.len() > 1 {
        let slices: Vec<Vec<Cand>> = work
            .incs
            .iter()
            .map(|&(_, a, c_end, _)| group[a..c_end].iter().map(cand).collect())
            .collect();
        incarnations(&slices, skew, |b, outcome| found.inc_outcome(b, outcome));
    }
    found
}

/// What one (property, scope) group yields: counterexamples as (kind, stale, witness) indices,
/// ambiguous events and ungranted commits.
#[derive(Debug, Default)]
pub(crate) struct GroupFindings {
    pub(crate) cxs: Vec<(CounterexampleKind, u32, u32)>,
    ambiguous: Vec<u32>,
    pub(crate) ungranted: Vec<u32>,
}

impl GroupFindings {
    pub(crate) fn epoch_outcome(&mut self, idx: u32, outcome: Sup, grant: bool) {
        let kind = if grant {
            CounterexampleKind::GrantRegression
        } else {
            CounterexampleKind::StaleCommit
        };
        match outcome {
            Sup::Stale(w) => self.cxs.push((kind, idx, w)),
            Sup::Ambiguous => self.ambiguous.push(idx),
            Sup::Clear => {}
        }
    }

    pub(crate) fn inc_outcome(&mut self, idx: u32, outcome: Sup) {
        match outcome {
            Sup::Stale(w) => self
                .cxs
                .push((CounterexampleKind::StaleIncarnation, idx, w)),
            Sup::Ambiguous => self.ambiguous.push(idx),
            Sup::Clear => {}
        }
    }

    pub(crate) fn reuse(&mut self, stale: u32, witness: u32) {
        self.cxs
            .push((CounterexampleKind::EpochReuse, stale, witness));
    }

    pub(crate) fn grant_outcome(&mut self, commit: u32, grant: Option<u32>) {
        match grant {
            Some(g) => self
                .cxs
                .push((CounterexampleKind::HolderMismatch, commit, g)),
            None => self.ungranted.push(commit),
        }
    }

    /// Events with an ambiguous partner and no certain counterexample of that kind, once each.
    pub(crate) fn ambiguous(&mut self) -> &[u32] {
        self.ambiguous.sort_unstable();
        self.ambiguous.dedup();
        &self.ambiguous
    }
}

/// Window indices `first..=last` (as inclusive runs) in which a route with sorted observation
/// times `obs` had no observation in `(end - freshness, end]`, computed from the gaps between
/// observations rather than by visiting windows.
pub(crate) fn silent_windows(
    obs: &[i64],
    freshness: i64,
    width: i64,
    first: i64,
    last: i64,
) -> Vec<(i64, i64)> {
    let pairs = obs.windows(2).map(|p| (p[0], p[1]));
    let ends = (obs.first().copied(), obs.last().copied());
    silent_between(ends, pairs, freshness, width, first, last)
}

/// [`silent_windows`] of observations given as sorted, disjoint runs `(first, last)` within
/// which no two consecutive observations are more than `freshness` apart: only the gaps
/// between runs can silence a window, so the windows are those of every observation.
pub(crate) fn silent_windows_of_runs(
    runs: &[(i64, i64)],
    freshness: i64,
    width: i64,
    first: i64,
    last: i64,
) -> Vec<(i64, i64)> {
    let pairs = runs.windows(2).map(|p| (p[0].1, p[1].0));
    let ends = (runs.first().map(|r| r.0), runs.last().map(|r| r.1));
    silent_between(ends, pairs, freshness, width, first, last)
}

/// The silent windows given the first and last observation and each pair of consecutive ones
/// that may be more than `freshness` apart.
fn silent_between(
    ends: (Option<i64>, Option<i64>),
    pairs: impl Iterator<Item = (i64, i64)>,
    freshness: i64,
    width: i64,
    first: i64,
    last: i64,
) -> Vec<(i64, i64)> {
    let w = i128::from(width);
    let ceil = |a: i128| -> i128 { -((-a).div_euclid(w)) };
    // Silent window ends E form intervals [x, y); window k ends at (k+1)*width.
    let mut out = Vec::new();
    let mut push = |x: Option<i128>, y: Option<i128>| {
        let lo = x.map_or(i128::from(first), |x| (ceil(x) - 1).max(i128::from(first)));
        let hi = y.map_or(i128::from(last), |y| (ceil(y) - 2).min(i128::from(last)));
        if lo <= hi {
            out.push((lo as i64, hi as i64));
        }
    };
    let f = i128::from(freshness);
    match ends {
        (Some(o1), Some(on)) => {
            push(None, Some(i128::from(o1)));
            for (a, b) in pairs {
                let (x, y) = (i128::from(a) + f, i128::from(b));
                if x < y {
                    push(Some(x), Some(y));
                }
            }
            push(Some(i128::from(on) + f), None);
        }
        _ => push(None, None),
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]
        #[test]
        fn sort_slots_orders_as_the_sort_key(
            fields in prop::collection::vec((0u16..2, 0u64..2, 0u8..3, 0u64..6, -3i64..3), 0..80),
            read_in_order in any::<bool>(),
            swap in prop::option::of(any::<(prop::sample::Index, prop::sample::Index)>()),
        ) {
            // Distinct indices, as a group's records are; the slots in any order, or in the
            // order of a scope read in time order (epoch ascending), perhaps with two swapped.
            let mut slots: Vec<Slot> = fields
                .iter()
                .zip(0u32..)
                .map(|(&(prop, inc, class, epoch, ts), n)| Slot {
                    inc,
                    epoch,
                    ts,
                    order: None,
                    idx: n.wrapping_mul(2_654_435_761) % 1000,
                    holder: 0,
                    prop,
                    class,
                })
                .collect();
            slots.sort_by_key(|s| s.idx);
            slots.dedup_by_key(|s| s.idx);
            if read_in_order {
                slots.sort_by_key(|s| (s.prop, s.inc, s.class, s.epoch, s.ts, s.idx));
            }
            if let (Some((a, b)), false) = (swap, slots.is_empty()) {
                let n = slots.len();
                slots.swap(a.index(n), b.index(n));
            }
            let mut want = slots.clone();
            want.sort_unstable_by_key(Slot::sort_key);
            let mut got = slots;
            sort_slots(&mut got);
            prop_assert_eq!(got, want);
        }
    }

    fn c(epoch: u64, ts: i64, order: Option<u64>, idx: u32) -> Cand {
        Cand {
            epoch,
            ts,
            order,
            holder: u32::MAX,
            idx,
        }
    }

    fn sorted(mut v: Vec<Cand>) -> Vec<Cand> {
        v.sort_by_key(|c| (std::cmp::Reverse(c.epoch), c.ts, c.idx));
        v
    }

    fn decide(v: &[Cand], skew: i64) -> Vec<(u32, Sup)> {
        let mut out = Vec::new();
        supersession(v, skew, &mut Sweep::default(), |i, s| {
            out.push((v[i].idx, s))
        });
        out.sort_by_key(|x| x.0);
        out
    }

    #[test]
    fn stale_ambiguous_clear() {
        let v = sorted(vec![
            c(41, 0, None, 0),
            c(42, 1000, None, 1),
            c(41, 2000, None, 2),
            c(41, 1030, None, 3),
        ]);
        let d = decide(&v, 50);
        assert_eq!(
            d,
            [
                (0, Sup::Clear),
                (1, Sup::Clear),
                (2, Sup::Stale(1)),
                (3, Sup::Ambiguous)
            ]
        );
    }

    #[test]
    fn witness_is_highest_epoch_then_earliest() {
        let v = sorted(vec![
            c(5, 100, None, 0),
            c(7, 300, None, 1),
            c(7, 200, None, 2),
            c(6, 50, None, 3),
            c(1, 1000, None, 4),
        ]);
        assert_eq!(decide(&v, 10)[4], (4, Sup::Stale(2)));
        // Only epoch 6 precedes event 5 at ts 120.
        let v = sorted(vec![
            c(7, 300, None, 0),
            c(6, 50, None, 1),
            c(1, 120, None, 5),
        ]);
        assert_eq!(decide(&v, 10)[2], (5, Sup::Stale(1)));
    }

    #[test]
    fn order_overrides_time() {
        let v = sorted(vec![c(42, 0, Some(10), 0), c(41, 30, Some(11), 1)]);
        assert_eq!(decide(&v, 50)[1], (1, Sup::Stale(0)));
        let v = sorted(vec![c(42, 30, Some(11), 0), c(41, 0, Some(10), 1)]);
        assert_eq!(decide(&v, 50)[1], (1, Sup::Clear));
        let v = sorted(vec![c(42, 30, Some(10), 0), c(41, 0, Some(10), 1)]);
        assert_eq!(decide(&v, 50)[1], (1, Sup::Ambiguous));
        // Mixed: an unordered partner is judged by time.
        let v = sorted(vec![c(42, 0, None, 0), c(41, 1000, Some(3), 1)]);
        assert_eq!(decide(&v, 50)[1], (1, Sup::Stale(0)));
    }

    #[test]
    fn incarnation_sweep() {
        let slices = vec![
            sorted(vec![c(5, 0, None, 0), c(6, 2000, None, 2)]),
            sorted(vec![c(1, 1000, None, 1)]),
        ];
        let mut out = Vec::new();
        incarnations(&slices, 50, |i, s| out.push((i, s)));
        out.sort_by_key(|x| x.0);
        assert_eq!(out, [(0, Sup::Clear), (1, Sup::Clear), (2, Sup::Stale(1))]);
    }

    #[test]
    fn silence_from_observation_gaps() {
        let m = 60i64;
        // Windows 0..=9 of width 60; observations at 0 and 400; freshness 120.
        // Window k ends at 60(k+1); silent iff no obs in (end-120, end].
        let got = silent_windows(&[0, 400], 120, m, 0, 9);
        let brute: Vec<i64> = (0..=9)
            .filter(|k| {
                let end = (k + 1) * m;
                ![0i64, 400].iter().any(|&o| end - 120 < o && o <= end)
            })
            .collect();
        let expanded: Vec<i64> = got.iter().flat_map(|&(a, b)| a..=b).collect();
        assert_eq!(expanded, brute);
        assert_eq!(silent_windows(&[], 10, m, 3, 5), [(3, 5)]);
    }
}
