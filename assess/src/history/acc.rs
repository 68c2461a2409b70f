//! What `finish` accumulates per property: reason counts and samples, the window series,
//! counterexamples, route observations. Each thread has its own, merged at the end.

use crate::contract::Property;
use crate::finding::{Counterexample, Reason};
use crate::report::Sample;
use crate::rules::SAMPLES_PER_REASON;
use crate::window::WindowSeries;
use std::collections::BTreeMap;

/// Where a sample comes from, (source, position): samples are the smallest ones.
pub(super) type SampleKey = (u32, u64);

/// Keeps `sample` if it is among the [`SAMPLES_PER_REASON`] smallest keys seen.
pub(super) fn keep_sample(
    kept: &mut Vec<(SampleKey, Sample)>,
    key: SampleKey,
    sample: impl FnOnce() -> Sample,
) {
    if kept.len() >= SAMPLES_PER_REASON && kept.iter().all(|(k, _)| *k < key) {
        return;
    }
    kept.push((key, sample()));
    kept.sort_by_key(|(k, _)| *k);
    kept.truncate(SAMPLES_PER_REASON);
}

/// Per-property accumulation during `finish`.
#[derive(Debug)]
pub(super) struct Acc {
    pub(super) counts: [u64; Reason::COUNT],
    /// The samples with the smallest provenance, which does not depend on processing order.
    pub(super) samples: BTreeMap<Reason, Vec<(SampleKey, Sample)>>,
    pub(super) series: WindowSeries,
    pub(super) cxs: Vec<Counterexample>,
    pub(super) events: u64,
    pub(super) stale_rejections: u64,
    pub(super) route_obs: Vec<Vec<i64>>,
    /// Observations already folded into runs ([`Acc::compact_routes`]), per declared route.
    pub(super) route_runs: Vec<Vec<ObsRun>>,
    pub(super) undeclared: BTreeMap<u32, u64>,
}

/// Observations of a route from `from` to `to` (ns), `n` of them, no two consecutive ones more
/// than the route's freshness apart: what route silence needs to know of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ObsRun {
    pub(super) from: i64,
    pub(super) to: i64,
    pub(super) n: u64,
}

/// Sorts `runs` and joins those no more than `freshness` apart.
pub(super) fn coalesce_runs(runs: &mut Vec<ObsRun>, freshness: i64) {
    runs.sort_unstable_by_key(|r| (r.from, r.to));
    let mut out: Vec<ObsRun> = Vec::with_capacity(runs.len());
    for r in runs.drain(..) {
        match out.last_mut() {
            Some(last) if i128::from(r.from) <= i128::from(last.to) + i128::from(freshness) => {
                last.to = last.to.max(r.to);
                last.n += r.n;
            }
            _ => out.push(r),
        }
    }
    *runs = out;
}

/// Folds observations `obs` (times, in any order) into `runs` (see [`Acc::compact_routes`]).
fn fold_observations(obs: Vec<i64>, runs: &mut Vec<ObsRun>, freshness: i64) {
    if freshness <= 0 {
        runs.extend(obs.into_iter().map(|t| ObsRun {
            from: t,
            to: t,
            n: 1,
        }));
    } else {
        let f = i128::from(freshness);
        // The span being filled: `[lo, lo + f)` and its run.
        let mut span: Option<(i128, ObsRun)> = None;
        for t in obs {
            match &mut span {
                Some((lo, run)) if *lo <= i128::from(t) && i128::from(t) < *lo + f => {
                    run.from = run.from.min(t);
                    run.to = run.to.max(t);
                    run.n += 1;
                }
                span => {
                    runs.extend(span.take().map(|(_, run)| run));
                    let lo = i128::from(t).div_euclid(f) * f;
                    let run = ObsRun {
                        from: t,
                        to: t,
                        n: 1,
                    };
                    *span = Some((lo, run));
                }
            }
        }
        runs.extend(span.map(|(_, run)| run));
    }
    coalesce_runs(runs, freshness);
}

impl Acc {
    /// An empty accumulator of property `p`.
    pub(super) fn new(p: &Property) -> Acc {
        Acc::empty(WindowSeries::new(p.window.0), p.routes.len())
    }

    fn empty(series: WindowSeries, routes: usize) -> Acc {
        Acc {
            counts: [0; Reason::COUNT],
            samples: BTreeMap::new(),
            series,
            cxs: Vec::new(),
            events: 0,
            stale_rejections: 0,
            route_obs: vec![Vec::new(); routes],
            route_runs: vec![Vec::new(); routes],
            undeclared: BTreeMap::new(),
        }
    }

    /// An empty accumulator over the same window range.
    pub(super) fn empty_like(&self) -> Acc {
        let mut series = WindowSeries::new(self.series.width());
        if let Some((f, l)) = self.series.range() {
            series.cover(series.start_of(f));
            series.cover(series.start_of(l));
        }
        Acc::empty(series, self.route_obs.len())
    }

    /// Adds what another accumulator found after this one (samples keep reading order).
    pub(super) fn absorb(&mut self, other: Acc) {
        for (a, b) in self.counts.iter_mut().zip(other.counts) {
            *a += b;
        }
        for (reason, samples) in other.samples {
            let mine = self.samples.entry(reason).or_default();
            for (key, sample) in samples {
                keep_sample(mine, key, || sample);
            }
        }
        self.series.merge(&other.series);
        self.cxs.extend(other.cxs);
        self.events += other.events;
        self.stale_rejections += other.stale_rejections;
        for (mine, theirs) in self.route_obs.iter_mut().zip(other.route_obs) {
            mine.extend(theirs);
        }
        for (mine, theirs) in self.route_runs.iter_mut().zip(other.route_runs) {
            mine.extend(theirs);
        }
        for (route, n) in other.undeclared {
            *self.undeclared.entry(route).or_default() += n;
        }
    }

    /// Folds the route observations into runs ([`ObsRun`]) joined with those folded before:
    /// memory in proportion to a route's silences rather than to its events (a check that
    /// assesses its history part by part folds each part's), and all route silence needs.
    ///
    /// Without sorting them: two observations in one span of `freshness` (`[k f, (k + 1) f)`)
    /// are never more than `freshness` apart, so each such span's observations are one run;
    /// spans are taken as the observations come (mostly in time order, so a division only
    /// when the span changes) and their runs joined as sorted runs are. Sorting every
    /// observation was ~2% of `check`'s instructions.
    pub(super) fn compact_routes(&mut self, freshness: i64) {
        for (obs, runs) in self.route_obs.iter_mut().zip(&mut self.route_runs) {
            fold_observations(std::mem::take(obs), runs, freshness);
        }
    }

    pub(super) fn hit(
        &mut self,
        reason: Reason,
        count: u64,
        key: SampleKey,
        sample: impl FnOnce() -> Sample,
    ) {
        self.counts[reason as usize] += count;
        keep_sample(self.samples.entry(reason).or_default(), key, sample);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 2000, ..Default::default() })]
        /// Spans of `freshness` give the runs that sorting the observations and chaining
        /// those no more than `freshness` apart gives, with or without runs folded before.
        #[test]
        fn folding_by_spans_is_chaining_sorted_observations(
            steps in proptest::collection::vec(-20i64..60, 0..200),
            start in proptest::prop_oneof![
                proptest::prelude::Just(i64::MIN),
                proptest::prelude::Just(i64::MAX - 20_000),
                -1000i64..1000,
            ],
            freshness in proptest::prop_oneof![
                proptest::prelude::Just(0i64),
                proptest::prelude::Just(-5i64),
                proptest::prelude::Just(i64::MAX),
                1i64..200,
            ],
            before in proptest::collection::vec((-500i64..500, 0i64..50, 1u64..4), 0..4),
        ) {
            // Mostly rising times with steps back, from anywhere (the extremes too).
            let mut t = start;
            let obs: Vec<i64> = steps.iter().map(|&s| { t = t.saturating_add(s); t }).collect();
            let before: Vec<ObsRun> = before
                .iter()
                .map(|&(from, len, n)| ObsRun { from, to: from + len, n })
                .collect();
            let mut got = before.clone();
            fold_observations(obs.clone(), &mut got, freshness);
            let mut want = before;
            want.extend(obs.iter().map(|&t| ObsRun { from: t, to: t, n: 1 }));
            coalesce_runs(&mut want, freshness);
            proptest::prop_assert_eq!(got, want);
        }
    }
}
