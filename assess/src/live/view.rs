//! The query view: any set of partitions, local [`Live`]s and remote [`Summary`]s, answering
//! as one (SPEC §5: "one process with one partition and many processes with many Kafka
//! partitions share one code path").
//!
//! Every query of [`Live`] goes through a [`View`] of that one partition, so the merge code is
//! the only code. With one partition the view borrows its state ([`Cow::Borrowed`]): nothing
//! is copied or rendered beyond what the answer holds. With several, it merges into owned data
//! per query, and only what the query reads:
//! - window series with [`WindowSeries::merge`]; reason counts, events and undeclared routes
//!   added;
//! - route observations per window: min of mins, max of maxes, counts added (silence stays
//!   exact);
//! - counterexamples united by (stale event time, id): ids are deterministic, so one present in
//!   two partitions during a handover counts once, as the most settled of its copies (final,
//!   else withdrawn, else provisional: a summary from another instance may say withdrawn);
//! - emitters by name, their runs of contiguous seqs united (adjacent or overlapping runs join,
//!   keeping the times of the events at the joined ends), gaps derived after the merge;
//! - samples: the first [`SAMPLES_PER_REASON`] by (time, source, detail); malformed samples
//!   concatenated in the order partitions were added, the last [`MALFORMED_SAMPLES`] kept.
//!
//! The watermark (SPEC §4) is the minimum over active partitions; idle ones (caught up, nothing
//! in flight) are left out; when none is active, the maximum over all; `EventTime::MIN`

use super::emitters::{SeqRuns, merge_runs};
use super::parts::{CxRef, EmitterRef, Part, Src};
use super::state::{CxKey, Live, fingerprint};
use super::summary::Summary;
use super::tally::{Kept, Obs, Tally, count_undeclared};
use crate::contract::Contract;
use crate::finding::{Counterexample, Reason};
use crate::report::Sample;
use crate::rules::{MALFORMED_SAMPLES, SAMPLES_PER_REASON};
use crate::time::EventTime;
use crate::window::WindowSeries;
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::ops::Bound;

/// Partitions answering queries as one: [`View::new`], then [`View::add_live`] and
/// [`View::add_summary`] for each partition, then the queries ([`View::assurance`],
/// [`View::timeline`], [`View::counterexamples`], [`View::coverage`], ...). Cheap to build:
/// it borrows the partitions and merges per query.
#[derive(Debug, Clone)]
pub struct View<'a> {
    contract: &'a Contract,
    fingerprint: u64,
    parts: Vec<Part<'a>>,
    /// The emitters merged over the partitions, once per view (several queries use them).
    emitters: std::cell::OnceCell<Vec<EmitterRef<'a>>>,
}

/// A partition that was not assessed under the view's contract.
#[derive(Debug, thiserror::Error)]
#[error(
    "the partition was assessed under another contract (fingerprint {found:016x}, this one is {expected:016x})"
)]
pub struct ContractMismatch {
    /// The partition's contract fingerprint.
    pub found: u64,
    /// The view's.
    pub expected: u64,
}

impl<'a> View<'a> {
    /// An empty view under `contract`: no partition yet (watermark `EventTime::MIN`, every
    /// property without events).
    pub fn new(contract: &'a Contract) -> View<'a> {
        View {
            contract,
            fingerprint: fingerprint(contract),
            parts: Vec::new(),
            emitters: std::cell::OnceCell::new(),
        }
    }

    /// The view of one active partition.
    pub(super) fn of_live(live: &'a Live) -> View<'a> {
        View {
            contract: &live.contract,
            fingerprint: live.state.fingerprint,
            parts: vec![Part {
                src: Src::Live(live),
                active: true,
            }],
            emitters: std::cell::OnceCell::new(),
        }
    }

    /// Adds a local partition. `active`: it may still move the watermark (not idle).
    pub fn add_live(&mut self, live: &'a Live, active: bool) -> Result<(), ContractMismatch> {
        self.add(Src::Live(live), active)
    }

    /// Adds a partition's [`Summary`] (remote, or exported). `active`: it may still move the
    /// watermark (not idle). A summary of another contract, or whose shape does not fit this
    /// one, is refused.
    pub fn add_summary(&mut self, s: &'a Summary, active: bool) -> Result<(), ContractMismatch> {
        let props = &self.contract.properties;
        let fits = s.props.len() == props.len()
            && s.props.iter().zip(props).all(|(sp, pc)| {
                sp.tally.routes.len() == pc.routes.len() && sp.tally.series.width() == pc.window.0
            });
        if !fits {
            return Err(ContractMismatch {
                found: s.fingerprint,
                expected: self.fingerprint,
            });
        }
        self.add(Src::Summary(s), active)
    }

    fn add(&mut self, src: Src<'a>, active: bool) -> Result<(), ContractMismatch> {
        if src.fingerprint() != self.fingerprint {
            return Err(ContractMismatch {
                found: src.fingerprint(),
                expected: self.fingerprint,
            });
        }
        self.parts.push(Part { src, active });
        self.emitters = std::cell::OnceCell::new();
        Ok(())
    }

    /// The contract.
    pub fn contract(&self) -> &'a Contract {
        self.contract
    }

    /// How many partitions the view holds.
    pub fn partitions(&self) -> usize {
        self.parts.len()
    }

    /// The watermark of property `p` (SPEC §4): the minimum over active partitions of their
    /// greatest valid event time minus the property's `allowed_lateness` (`EventTime::MIN`
    /// before any event, `EventTime::MAX` once closed); idle partitions are left out; when none
    /// is active, the maximum over all; `EventTime::MIN` without partitions.
    pub fn watermark(&self, p: usize) -> EventTime {
        let lateness = self.contract.properties[p].allowed_lateness.0;
        let wm = |x: &Part<'a>| x.src.watermark(lateness);
        let active = self.parts.iter().filter(|x| x.active).map(wm).min();
        active
            .or_else(|| self.parts.iter().map(wm).max())
            .unwrap_or(EventTime::MIN)
    }

    /// Valid, malformed, unattributed and duplicate events, over all partitions.
    pub fn totals(&self) -> (u64, u64, u64, u64) {
        let mut t = [0u64; 4];
        for x in &self.parts {
            for (a, b) in t.iter_mut().zip(x.src.totals()) {
                *a += b;
            }
        }
        (t[0], t[1], t[2], t[3])
    }

    /// Samples of unknown reasons of a property: per reason the first
    /// [`SAMPLES_PER_REASON`] of the partitions' samples by (time, source, detail).
    pub fn samples(&self, p: usize) -> BTreeMap<Reason, Vec<Sample>> {
        let mut all: BTreeMap<Reason, Vec<&'a Kept>> = BTreeMap::new();
        for t in self.tallies(p) {
            for (r, v) in &t.samples {
                all.entry(*r).or_default().extend(v);
            }
        }
        all.into_iter()
            .map(|(r, mut v)| {
                v.sort_by(|a, b| (&a.ts, &a.source, &a.detail).cmp(&(&b.ts, &b.source, &b.detail)));
                v.dedup();
                v.truncate(SAMPLES_PER_REASON);
                (r, v.into_iter().map(Kept::sample).collect())
            })
            .collect()
    }

    /// The most recent malformed events: the partitions' samples in the order the partitions
    /// were added, the last [`MALFORMED_SAMPLES`] of them.
    pub fn malformed_samples(&self) -> Vec<Sample> {
        let all: Vec<&Kept> = self
            .parts
            .iter()
            .flat_map(|x| x.src.malformed_samples())
            .collect();
        all[all.len().saturating_sub(MALFORMED_SAMPLES)..]
            .iter()
            .map(|k| k.sample())
            .collect()
    }

    /// The message of the last malformed event (of the last partition added that has one).
    pub fn last_malformed(&self) -> Option<&'a str> {
        self.parts
            .iter()
            .rev()
            .find_map(|x| x.src.malformed_samples().back())
            .map(|k| k.detail.as_str())
    }

    /// Events assessed of property `p`.
    pub fn property_events(&self, p: usize) -> u64 {
        self.tallies(p).map(|t| t.events).sum()
    }

    /// Stale rejections (rejected commits/fences: the fence worked) of property `p`.
    pub fn stale_rejections(&self, p: usize) -> u64 {
        self.tallies(p).map(|t| t.stale_rejections).sum()
    }

    /// Counterexamples of property `p` that stand (one per id): final or provisional, not
    /// withdrawn.
    pub fn counterexample_count(&self, p: usize) -> usize {
        let kept = match self.parts.as_slice() {
            [one] => one.src.cx_count(p) - one.src.withdrawn_count(p),
            _ => self
                .cxs(p, Bound::Unbounded, |_| false, |_, _| true, usize::MAX)
                .iter()
                .filter(|(_, c)| !c.withdrawn())
                .count(),
        };
        kept + self.counterexamples_dropped(p) as usize
    }

    /// Final counterexamples of property `p` found but whose detail is no longer kept
    /// ([`super::LiveOptions::max_counterexamples`]), over all partitions: they stand, are
    /// counted by [`View::counterexample_count`] and refute their windows, but are not listed
    /// ("N more counterexamples were found but their detail is no longer kept").
    pub fn counterexamples_dropped(&self, p: usize) -> u64 {
        self.tallies(p).map(|t| t.cxs_dropped).sum()
    }

    /// Withdrawn counterexamples of property `p` whose detail is no longer kept (counted by
    /// [`View::withdrawn_count`]).
    pub fn withdrawn_dropped(&self, p: usize) -> u64 {
        self.tallies(p).map(|t| t.withdrawn_dropped).sum()
    }

    /// Dropped final counterexamples of property `p` with their stale event in `(lo, hi]`:
    /// how many are certainly there, and whether some may be (a window holding dropped ones
    /// both before `lo` and after `hi`, none known inside, or one whose bounds are no longer
    /// all known times, [`MIN_LOOSE`](super::tally::MIN_LOOSE), reaching into the range).
    pub(super) fn dropped_between(&self, p: usize, lo: i64, hi: i64) -> (u64, bool) {
        if hi <= lo {
            return (0, false);
        }
        let at = self.merged(|s| &s.tally(p).dropped_at, merge_obs, BTreeMap::new);
        let w = self.contract.properties[p].window.0;
        let (k0, k1) = (lo.saturating_add(1).div_euclid(w), hi.div_euclid(w));
        let (mut n, mut maybe) = (0, false);
        for o in at.range(k0..=k1).map(|(_, o)| o) {
            let (certain, may) = o.dropped_in(lo, hi);
            n += certain;
            maybe |= may;
        }
        (n, maybe)
    }

    /// Provisional counterexamples of property `p` (one per id): not yet final, not withdrawn
    /// (the gauge `fencewatch_counterexamples_provisional`).
    pub fn provisional_count(&self, p: usize) -> usize {
        match self.parts.as_slice() {
            [one] => one.src.provisional_count(p),
            _ => self
                .cxs(p, Bound::Unbounded, |_| false, |_, _| true, usize::MAX)
                .iter()
                .filter(|(_, c)| c.settled() == 0)
                .count(),
        }
    }

    /// Withdrawn counterexamples of property `p` (one per id), still listed.
    pub fn withdrawn_count(&self, p: usize) -> usize {
        let kept = match self.parts.as_slice() {
            [one] => one.src.withdrawn_count(p),
            _ => self
                .cxs(p, Bound::Unbounded, |_| false, |_, _| true, usize::MAX)
                .iter()
                .filter(|(_, c)| c.withdrawn())
                .count(),
        };
        kept + self.withdrawn_dropped(p) as usize
    }

    /// Every partition's tally of property `p`.
    pub(super) fn tallies(&self, p: usize) -> impl Iterator<Item = &'a Tally> + '_ {
        self.parts.iter().map(move |x| x.src.tally(p))
    }

    /// Borrows the part's `T` when there is one part, else merges the parts' into an owned one.
    pub(super) fn merged<T: Clone>(
        &self,
        pick: impl Fn(Src<'a>) -> &'a T,
        merge: impl Fn(&mut T, &T),
        empty: impl FnOnce() -> T,
    ) -> Cow<'a, T> {
        match self.parts.as_slice() {
            [] => Cow::Owned(empty()),
            [one] => Cow::Borrowed(pick(one.src)),
            [first, rest @ ..] => {
                let mut t = pick(first.src).clone();
                for x in rest {
                    merge(&mut t, pick(x.src));
                }
                Cow::Owned(t)
            }
        }
    }

    /// The window series of property `p`, merged.
    pub(super) fn series(&self, p: usize) -> Cow<'a, WindowSeries> {
        self.merged(
            |s| &s.tally(p).series,
            WindowSeries::merge,
            || WindowSeries::new(self.contract.properties[p].window.0),
        )
    }

    /// Observation bounds per window of declared route `i` of property `p`, merged.
    pub(super) fn route_obs(&self, p: usize, i: usize) -> Cow<'a, BTreeMap<i64, Obs>> {
        self.merged(|s| &s.tally(p).routes[i], merge_obs, BTreeMap::new)
    }

    /// Reason counts of property `p` (those placed by events), added.
    pub(super) fn counts(&self, p: usize) -> [u64; Reason::COUNT] {
        let mut counts = [0u64; Reason::COUNT];
        for t in self.tallies(p) {
            for (a, b) in counts.iter_mut().zip(t.counts) {
                *a += b;
            }
        }
        counts
    }

    /// Undeclared routes of property `p` with their counts, added.
    pub(super) fn undeclared(&self, p: usize) -> BTreeMap<String, u64> {
        let mut out: BTreeMap<String, u64> = BTreeMap::new();
        for t in self.tallies(p) {
            for (name, n) in &t.undeclared {
                count_undeclared(&mut out, name, *n);
            }
        }
        out
    }

    /// Events of property `p` set aside because their emitter was beyond
    /// [`super::LiveOptions::max_emitters`] when they arrived (each raised
    /// `unknown(telemetry_gap)`), over all partitions.
    pub fn untracked_emitter_events(&self, p: usize) -> u64 {
        self.tallies(p).map(|t| t.untracked_emitter_events).sum()
    }

    /// Unattributed events of emitters beyond [`super::LiveOptions::max_emitters`] (counted,
    /// nothing more), over all partitions.
    pub fn untracked_unattributed_events(&self) -> u64 {
        self.parts
            .iter()
            .map(|x| match x.src {
                Src::Live(l) => l.state.untracked_unattributed,
                Src::Summary(s) => s.untracked_unattributed,
            })
            .sum()
    }

    /// Heartbeats on undeclared routes of property `p`, added.
    pub(super) fn undeclared_heartbeats(&self, p: usize) -> u64 {
        self.tallies(p).map(|t| t.undeclared_heartbeats).sum()
    }

    /// Emitters merged by name (sorted by name when there are several partitions).
    /// Every emitter's runs of seqs merged over the partitions (see [`SeqRuns`]).
    pub fn seq_runs(&self) -> SeqRuns {
        SeqRuns(
            self.emitters()
                .iter()
                .map(|e| (e.name.to_string(), e.runs.as_ref().clone()))
                .collect(),
        )
    }

    pub(super) fn emitters(&self) -> &[EmitterRef<'a>] {
        self.emitters.get_or_init(|| self.merged_emitters())
    }

    fn merged_emitters(&self) -> Vec<EmitterRef<'a>> {
        let mut all = Vec::new();
        for x in &self.parts {
            x.src.emitters(&mut all);
        }
        if self.parts.len() < 2 {
            return all;
        }
        all.sort_by(|a, b| a.name.cmp(b.name));
        all.chunk_by(|a, b| a.name == b.name)
            .map(|group| match group {
                [one] => one.clone(),
                _ => {
                    let mut props: Vec<u16> =
                        group.iter().flat_map(|e| e.props.iter()).copied().collect();
                    props.sort_unstable();
                    props.dedup();
                    EmitterRef {
                        name: group[0].name,
                        runs: Cow::Owned(merge_runs(group.iter().map(|e| e.runs.as_ref()))),
                        props: Cow::Owned(props),
                        events: group.iter().map(|e| e.events).sum(),
                    }
                }
            })
            .collect()
    }

    /// Counterexamples of property `p` from `start` on, by key, one per key (of a key in
    /// several partitions, the most settled: final, else withdrawn, else provisional): until
    /// `stop` holds for a stale event time; only those `keep` accepts; at most `cap` from each
    /// partition (the first `cap` merged ones are always among them).
    pub(super) fn cxs(
        &self,
        p: usize,
        start: Bound<CxKey>,
        stop: impl Fn(i64) -> bool,
        keep: impl Fn(&CxKey, &CxRef<'a>) -> bool,
        cap: usize,
    ) -> Vec<(&'a CxKey, CxRef<'a>)> {
        let mut out = Vec::new();
        for x in &self.parts {
            let mut n = 0;
            for (k, c) in x.src.cxs(p, start.clone()) {
                if n >= cap || stop(k.0) {
                    break;
                }
                if keep(k, &c) {
                    out.push((k, c));
                    n += 1;
                }
            }
        }
        if self.parts.len() > 1 {
            out.sort_by(|a, b| a.0.cmp(b.0));
            out.dedup_by(|later, kept| {
                if later.0 != kept.0 {
                    return false;
                }
                if later.1.settled() > kept.1.settled() {
                    std::mem::swap(later, kept);
                }
                true
            });
        }
        out
    }

    /// One counterexample by id, in any partition (the most settled, as [`View::cxs`]).
    pub(super) fn find_cx(&self, id: &str) -> Option<Counterexample> {
        (0..self.contract.properties.len()).find_map(|p| {
            let mut best: Option<CxRef<'a>> = None;
            for x in &self.parts {
                if let Some((_, c)) = x.src.cxs(p, Bound::Unbounded).find(|(_, c)| c.id() == id)
                    && best.is_none_or(|b| c.settled() > b.settled())
                {
                    best = Some(c);
                }
            }
            best.map(|c| c.render())
        })
    }
}

/// Every query of one partition goes through its [`View`].
impl Live {
    /// The query view of this one partition (active): every query reads through it, so one
    /// partition and many merged ones share one code path. It borrows the state.
    pub fn view(&self) -> View<'_> {
        View::of_live(self)
    }

    /// Valid, malformed, unattributed and duplicate events so far.
    pub fn totals(&self) -> (u64, u64, u64, u64) {
        self.view().totals()
    }

    /// The property's watermark: its greatest valid event time minus `allowed_lateness`
    /// (`EventTime::MIN` before any event, `EventTime::MAX` once closed). The view of this one
    /// partition, which is active.
    pub fn watermark(&self, p: usize) -> EventTime {
        self.view().watermark(p)
    }
}

/// Bounds per window merged ([`Obs::merge`]).
fn merge_obs(a: &mut BTreeMap<i64, Obs>, b: &BTreeMap<i64, Obs>) {
    for (k, o) in b {
        a.entry(*k).and_modify(|m| m.merge(o)).or_insert(*o);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Epoch, Event, Kind, Seq};
    use crate::live::LiveOptions;

    fn live() -> Live {
        let c = Contract::parse(
            "v.toml",
            "[[property]]\nname=\"p\"\nsubject=\"S\"\nstrategy=\"lease_epoch\"\nwindow=\"100ns\"\nclock_skew=\"5ns\"\nallowed_lateness=\"10ns\"\nroute_freshness=\"200ns\"\n[[property.route]]\nname=\"r1\"\n",
        )
        .unwrap();
        let mut l = Live::new(c, LiveOptions::default());
        let src = l.add_source("wal");
        for (i, (ts, epoch)) in [(100, 2), (200, 1)].into_iter().enumerate() {
            let mut e = Event::new(Kind::Commit, EventTime(ts));
            e.scope = Some("s");
            e.epoch = Some(Epoch(epoch));
            e.route = Some("r1");
            e.emitter = Some("e");
            e.seq = Some(Seq(i as u64));
            l.push(&e, src, i as u64, 1_000);
        }
        l
    }

    #[test]
    fn one_partition_is_borrowed_several_are_merged() {
        let l = live();
        let v = l.view();
        assert!(matches!(v.series(0), Cow::Borrowed(_)));
        assert!(matches!(v.route_obs(0, 0), Cow::Borrowed(_)));
        assert!(
            v.emitters()
                .iter()
                .all(|e| matches!(e.runs, Cow::Borrowed(_)))
        );
        // The counterexample is rendered only when a page holds it.
        assert!(matches!(
            v.cxs(0, Bound::Unbounded, |_| false, |_, _| true, 10)[..],
            [(_, CxRef::Kept(..))]
        ));
        let mut two = View::new(l.contract());
        two.add_live(&l, true).unwrap();
        two.add_live(&l, true).unwrap();
        assert!(matches!(two.series(0), Cow::Owned(_)));
        let obs = two.route_obs(0, 0);
        assert!(matches!(obs, Cow::Owned(_)));
        let o = obs.values().next().unwrap();
        assert_eq!((o.min, o.max, o.count), (100, 100, 2));
        assert_eq!(two.counterexample_count(0), 1);
    }

    #[test]
    fn absorbing_what_all_partitions_saw_joins_fragmented_runs_and_keeps_real_gaps() {
        let c = live().contract().clone();
        let (mut a, mut b) = (
            Live::new(c.clone(), LiveOptions::default()),
            Live::new(c.clone(), LiveOptions::default()),
        );
        let (sa, sb) = (a.add_source("t/0"), b.add_source("t/1"));
        // One emitter's seqs alternate between the partitions; seqs 50..=59 are lost.
        let scopes = ["s0", "s1"];
        for seq in (0..100u64).filter(|s| !(50..60).contains(s)) {
            let mut e = Event::new(Kind::Commit, EventTime(1_000 + seq as i64));
            e.scope = Some(scopes[(seq % 2) as usize]);
            e.epoch = Some(Epoch(1));
            e.route = Some("r1");
            e.emitter = Some("e");
            e.seq = Some(Seq(seq));
            let (l, src) = if seq % 2 == 0 {
                (&mut a, sa)
            } else {
                (&mut b, sb)
            };
            l.push(&e, src, seq, 1_000_000);
        }
        let runs = |l: &Live| {
            l.state
                .emitters
                .values()
                .map(|e| e.runs.len())
                .sum::<usize>()
        };
        assert_eq!((runs(&a), runs(&b)), (45, 45));
        let merged = |a: &Live, b: &Live| {
            let mut v = View::new(&c);
            v.add_live(a, true).unwrap();
            v.add_live(b, true).unwrap();
            (v.seq_runs(), v.unknown_counts(0), v.coverage(0).emitters)
        };
        let (seen, counts, emitters) = merged(&a, &b);
        assert_eq!(seen.len(), 2, "{seen:?}");
        a.absorb_seq_runs(&seen);
        b.absorb_seq_runs(&seen);
        assert_eq!((runs(&a), runs(&b)), (2, 2));
        // The merged answers are unchanged: one telemetry gap of 10 seqs.
        let (_, counts_after, emitters_after) = merged(&a, &b);
        assert_eq!(counts_after, counts);
        assert_eq!(emitters_after, emitters);
        assert_eq!(emitters_after[0].missing, 10);
        assert_eq!(counts_after.get(&Reason::TelemetryGap), Some(&1));
        // A seq another partition saw, delivered here again, is a duplicate delivery.
        let mut again = Event::new(Kind::Commit, EventTime(1_001));
        again.scope = Some("s1");
        again.epoch = Some(Epoch(1));
        again.route = Some("r1");
        again.emitter = Some("e");
        again.seq = Some(Seq(1));
        assert_eq!(
            a.push(&again, sa, 200, 1_000_000),
            crate::live::Pushed::Duplicate
        );
    }
}
