//! What a partition keeps per emitter: runs of contiguous seqs (what gaps are derived from)
//! and a window of recent deliveries (what duplicates by (emitter, seq) are settled against,
//! the `dups` module).
//!
//! Emitters are never forgotten (a later gap against a forgotten run would go unseen, a
//! conflicting re-send would be applied), so their number is bounded instead
//! ([`LiveOptions::max_emitters`](super::LiveOptions::max_emitters), default 1,000,000 per
//! partition): an event with a `seq` of an emitter beyond them is set aside and raises
//! `unknown(telemetry_gap)`, its seq being untracked. An idle emitter is kept compact: its
//! recent deliveries fall out with the horizon and give their allocation back, a single run of
//! seqs is kept inline, a single property too (`Live::emitters_bytes`).
//!
//! Runs beyond an emitter's first (its seqs' fragments, one per gap still open) are bounded
//! too, over the partition ([`Live::set_max_seq_fragments`](super::Live::set_max_seq_fragments), default
//! [`DEFAULT_MAX_SEQ_FRAGMENTS`](super::DEFAULT_MAX_SEQ_FRAGMENTS)): once they are reached, an
//! event whose seq would open yet another run (in none, adjacent to none) is set aside and
//! raises `unknown(telemetry_gap)` like an untracked emitter's; its seq stays missing, so the
//! gap it would have filled stays `unknown(telemetry_gap)` too. Seqs that extend or join runs
//! are taken as ever.

use crate::rules::{NONE, Reasons, UNATTRIBUTED};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};

/// A run of contiguous `seq`s of one emitter, with the times of the events at its ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Run {
    pub(super) end: u64,
    pub(super) start_ts: Times,
    pub(super) end_ts: Times,
}

/// The times of the deliveries of one seq: the earliest and the latest (equal when it was
/// delivered once, or only equally). A telemetry gap spans the times of every delivery of the
/// seqs around it, as `check` places it, whatever order they came in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Times {
    pub(super) lo: i64,
    pub(super) hi: i64,
}

impl Times {
    pub(super) fn at(ts: i64) -> Times {
        Times { lo: ts, hi: ts }
    }

    fn widen(&mut self, ts: i64) {
        self.lo = self.lo.min(ts);
        self.hi = self.hi.max(ts);
    }

    fn union(self, o: Times) -> Times {
        Times {
            lo: self.lo.min(o.lo),
            hi: self.hi.max(o.hi),
        }
    }

    /// The span of the gap between a run ending at `self` and the next starting at `next`.
    pub(super) fn to(self, next: Times) -> (i64, i64) {
        let u = self.union(next);
        (u.lo, u.hi)
    }
}

/// An emitter's runs of contiguous seqs, by first seq: one run inline (an emitter that lost
/// nothing, the common case, costs no allocation), more in a map. Serialized as the map.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Runs {
    One(u64, Run),
    Many(BTreeMap<u64, Run>),
}

pub(super) type RunsIter<'r> = std::iter::Chain<
    std::option::IntoIter<(&'r u64, &'r Run)>,
    std::iter::Flatten<std::option::IntoIter<std::collections::btree_map::Iter<'r, u64, Run>>>,
>;

impl Default for Runs {
    fn default() -> Runs {
        Runs::Many(BTreeMap::new())
    }
}

impl Runs {
    /// Runs from a map, one run kept inline.
    pub(super) fn from_map(m: BTreeMap<u64, Run>) -> Runs {
        if m.len() == 1 {
            let (&s, &r) = m.iter().next().expect("one");
            return Runs::One(s, r);
        }
        Runs::Many(m)
    }

    /// How many runs.
    pub(super) fn len(&self) -> usize {
        match self {
            Runs::One(..) => 1,
            Runs::Many(m) => m.len(),
        }
    }

    /// The runs by first seq.
    pub(super) fn iter(&self) -> RunsIter<'_> {
        let (one, many) = match self {
            Runs::One(s, r) => (Some((s, r)), None),
            Runs::Many(m) => (None, Some(m.iter())),
        };
        one.into_iter().chain(many.into_iter().flatten())
    }

    pub(super) fn contains(&self, seq: u64) -> bool {
        match self {
            Runs::One(s, r) => (*s..=r.end).contains(&seq),
            Runs::Many(m) => runs_contain(m, seq),
        }
    }

    /// Whether adding `seq` would open a run of its own: it is in no run and adjacent to none.
    pub(super) fn opens_run(&self, seq: u64) -> bool {
        let near = |s: Option<u64>| s.is_some_and(|s| self.contains(s));
        self.len() > 0
            && !self.contains(seq)
            && !near(seq.checked_sub(1))
            && !near(seq.checked_add(1))
    }

    /// Runs beyond the first (what fragmentation costs; [`Live::seq_fragments`](super::Live::seq_fragments)).
    pub(super) fn fragments(&self) -> usize {
        self.len().saturating_sub(1)
    }

    /// Notes another delivery, at `ts`, of `seq` (held): at either end of its run, the times
    /// a gap next to it spans.
    pub(super) fn widen(&mut self, seq: u64, ts: i64) {
        let (start, r) = match self {
            Runs::One(s, r) => (*s, r),
            Runs::Many(m) => match m.range_mut(..=seq).next_back() {
                Some((&s, r)) => (s, r),
                None => return,
            },
        };
        if seq == start {
            r.start_ts.widen(ts);
        }
        if seq == r.end {
            r.end_ts.widen(ts);
        }
    }

    /// Adds `seq` (not held yet) seen at `ts`.
    pub(super) fn add(&mut self, seq: u64, ts: i64) {
        if let Runs::One(s, r) = self {
            if r.end.checked_add(1) == Some(seq) {
                r.end = seq;
                r.end_ts = Times::at(ts);
                return;
            }
            if seq.checked_add(1) == Some(*s) {
                *s = seq;
                r.start_ts = Times::at(ts);
                return;
            }
            *self = Runs::Many(BTreeMap::from([(*s, *r)]));
        }
        let Runs::Many(m) = self else {
            unreachable!("made a map above")
        };
        add_to_runs(m, seq, ts);
        if m.len() == 1 {
            *self = Runs::from_map(std::mem::take(m));
        }
    }
}

impl<'r> IntoIterator for &'r Runs {
    type Item = (&'r u64, &'r Run);
    type IntoIter = RunsIter<'r>;
    fn into_iter(self) -> RunsIter<'r> {
        self.iter()
    }
}

impl IntoIterator for Runs {
    type Item = (u64, Run);
    type IntoIter = std::vec::IntoIter<(u64, Run)>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
            .map(|(&s, &r)| (s, r))
            .collect::<Vec<_>>()
            .into_iter()
    }
}

impl Serialize for Runs {
    fn serialize<S: serde::Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        // With its length first: postcard needs it, and the iterator does not know it.
        let mut m = ser.serialize_map(Some(self.len()))?;
        for (k, v) in self.iter() {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

impl<'de> Deserialize<'de> for Runs {
    fn deserialize<D: serde::Deserializer<'de>>(de: D) -> Result<Runs, D::Error> {
        BTreeMap::deserialize(de).map(Runs::from_map)
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Emitter {
    /// Runs by first seq.
    pub(super) runs: Runs,
    /// Recent deliveries by seq, for duplicate settlement inside the horizon.
    pub(super) recent: SeqWindow,
    /// Properties it fed.
    pub(super) props: Props,
    pub(super) events: u64,
}

/// The properties an emitter fed: one inline (the common case, no allocation), more in an
/// exactly sized list. Serialized as the list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Props {
    One(u16),
    Many(Vec<u16>),
}

impl Emitter {
    /// Approximate heap bytes: runs, recent deliveries, properties.
    pub(super) fn heap_bytes(&self) -> usize {
        let runs = match &self.runs {
            Runs::One(..) => 0,
            // A B-tree node holds up to 11 runs.
            Runs::Many(m) => m.len().div_ceil(11) * (11 * std::mem::size_of::<(u64, Run)>() + 16),
        };
        runs + self.recent.heap_bytes() + self.props.heap_bytes()
    }
}

impl Default for Props {
    fn default() -> Props {
        Props::Many(Vec::new())
    }
}

impl Props {
    pub(super) fn as_slice(&self) -> &[u16] {
        match self {
            Props::One(p) => std::slice::from_ref(p),
            Props::Many(v) => v,
        }
    }

    fn from_vec(mut v: Vec<u16>) -> Props {
        if let [p] = v[..] {
            return Props::One(p);
        }
        v.shrink_to_fit();
        Props::Many(v)
    }

    pub(super) fn insert(&mut self, p: u16) {
        if !self.as_slice().contains(&p) {
            let mut v = self.as_slice().to_vec();
            v.push(p);
            *self = Props::from_vec(v);
        }
    }

    fn heap_bytes(&self) -> usize {
        match self {
            Props::One(_) => 0,
            Props::Many(v) => v.capacity() * 2,
        }
    }
}

impl Serialize for Props {
    fn serialize<S: serde::Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        self.as_slice().serialize(ser)
    }
}

impl<'de> Deserialize<'de> for Props {
    fn deserialize<D: serde::Deserializer<'de>>(de: D) -> Result<Props, D::Error> {
        Vec::deserialize(de).map(Props::from_vec)
    }
}

/// One recent delivery of an (emitter, seq).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Delivery {
    pub(super) hash: u64,
    /// Event time; `i64::MIN` marks an empty slot.
    pub(super) ts: i64,
    /// The scope id it was kept under in its property, `NONE` when it was not kept.
    pub(super) scope: u32,
    /// Its property, [`UNATTRIBUTED`] when unattributed.
    pub(super) prop: u16,
    /// The per-event reasons it raised.
    pub(super) reasons: Reasons,
    /// Conflicting deliveries of this key were seen: all are set aside.
    pub(super) conflicted: bool,
}

pub(super) const EMPTY: Delivery = Delivery {
    hash: 0,
    ts: i64::MIN,
    scope: NONE,
    prop: UNATTRIBUTED,
    reasons: Reasons::EMPTY,
    conflicted: false,
};

/// One emitter's recent deliveries, by seq: a ring over the dense seq range (seqs rise by one
/// per event), so settling duplicates touches contiguous memory; the deliveries the ring cannot
/// hold (its seq jumped by more than [`SeqWindow::SPAN`]) in a map beside it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct SeqWindow {
    /// Seq of the first slot: seqs below it that the emitter's runs hold were folded, or are
    /// in `far`.
    pub(super) base: u64,
    slots: Slots,
    /// Deliveries whose seq is too far from the ring's to be a slot of it: the ring's own when
    /// the emitter's seq jumped ahead by more than [`SeqWindow::SPAN`] (the ring restarts at
    /// the new seq), and seqs as far behind the ring. Dropped with the horizon, each by its
    /// own time; at most [`SeqWindow::SPAN`] of them.
    far: Far,
    /// One past the highest seq forgotten with the horizon (0: none): a seq below it that the
    /// emitter's runs hold and the window does not may be one forgotten here, never taken for
    /// one seen elsewhere (the ring, emptied, restarts at whatever seq comes next, which may be
    /// below seqs it forgot).
    forgotten: u64,
}

/// A [`SeqWindow`]'s far deliveries by seq, and by time to be forgotten with the horizon
/// (their times need not rise with their seqs); boxed when there are any (most emitters never
/// jump: they cost one pointer). Serialized as the map by seq.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Far(Option<Box<FarMaps>>);

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct FarMaps {
    by_seq: BTreeMap<u64, Delivery>,
    by_ts: std::collections::BTreeSet<(i64, u64)>,
}

impl Far {
    fn len(&self) -> usize {
        self.0.as_ref().map_or(0, |m| m.by_seq.len())
    }

    fn get(&self, seq: u64) -> Option<Delivery> {
        self.0.as_ref()?.by_seq.get(&seq).copied()
    }

    /// To change what the delivery came to, not its time (which indexes it).
    fn get_mut(&mut self, seq: u64) -> Option<&mut Delivery> {
        self.0.as_mut()?.by_seq.get_mut(&seq)
    }

    fn contains(&self, seq: u64) -> bool {
        self.0.as_ref().is_some_and(|m| m.by_seq.contains_key(&seq))
    }

    fn insert(&mut self, seq: u64, d: Delivery) {
        let m = self.0.get_or_insert_with(Default::default);
        if let Some(old) = m.by_seq.insert(seq, d) {
            m.by_ts.remove(&(old.ts, seq));
        }
        m.by_ts.insert((d.ts, seq));
    }

    /// Takes out the deliveries older than `horizon`, oldest first; emptied, gives its
    /// allocation back.
    fn forget_before(&mut self, horizon: i64, mut dropped: impl FnMut(u64, Delivery)) {
        let Some(m) = self.0.as_mut() else { return };
        while let Some(&(ts, seq)) = m.by_ts.first() {
            if ts >= horizon {
                break;
            }
            m.by_ts.pop_first();
            let d = m.by_seq.remove(&seq).expect("indexed");
            dropped(seq, d);
        }
        if m.by_seq.is_empty() {
            self.0 = None;
        }
    }

    /// Heap bytes: the box, and an entry of each tree with its share of a node.
    fn heap_bytes(&self) -> usize {
        self.0.as_ref().map_or(0, |m| {
            std::mem::size_of::<FarMaps>()
                + m.by_seq.len() * (8 + std::mem::size_of::<Delivery>() + 16 + 16 + 12)
        })
    }

    fn from_map(by_seq: BTreeMap<u64, Delivery>) -> Far {
        if by_seq.is_empty() {
            return Far(None);
        }
        let by_ts = by_seq.iter().map(|(&s, d)| (d.ts, s)).collect();
        Far(Some(Box::new(FarMaps { by_seq, by_ts })))
    }
}

impl Serialize for Far {
    fn serialize<S: serde::Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        static NONE: BTreeMap<u64, Delivery> = BTreeMap::new();
        self.0.as_ref().map_or(&NONE, |m| &m.by_seq).serialize(ser)
    }
}

impl<'de> Deserialize<'de> for Far {
    fn deserialize<D: serde::Deserializer<'de>>(de: D) -> Result<Far, D::Error> {
        BTreeMap::<u64, Delivery>::deserialize(de).map(Far::from_map)
    }
}

/// A [`SeqWindow`]'s deliveries, boxed when there are any (an idle emitter's window costs
/// one pointer); serialized as the plain sequence.
// Boxed on purpose: one pointer per idle emitter instead of a 32-byte VecDeque header.
#[allow(clippy::box_collection)]
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Slots(Option<Box<VecDeque<Delivery>>>);

static NO_SLOTS: VecDeque<Delivery> = VecDeque::new();

impl std::ops::Deref for Slots {
    type Target = VecDeque<Delivery>;
    fn deref(&self) -> &VecDeque<Delivery> {
        self.0.as_deref().unwrap_or(&NO_SLOTS)
    }
}

impl std::ops::DerefMut for Slots {
    fn deref_mut(&mut self) -> &mut VecDeque<Delivery> {
        self.0.get_or_insert_with(Default::default)
    }
}

impl Serialize for Slots {
    fn serialize<S: serde::Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        (**self).serialize(ser)
    }
}

impl<'de> Deserialize<'de> for Slots {
    fn deserialize<D: serde::Deserializer<'de>>(de: D) -> Result<Slots, D::Error> {
        let q = VecDeque::<Delivery>::deserialize(de)?;
        Ok(Slots((!q.is_empty()).then(|| Box::new(q))))
    }
}

impl SeqWindow {
    /// Seqs further than this ahead of the oldest kept one are not kept (a jump in an
    /// emitter's counter must not allocate its size).
    const SPAN: u64 = 1 << 22;

    /// Approximate heap bytes of the window (its box and deliveries, and the far ones: a
    /// B-tree's entry with its share of a node).
    pub(super) fn heap_bytes(&self) -> usize {
        self.far.heap_bytes()
            + self.slots.0.as_ref().map_or(0, |q| {
                std::mem::size_of::<VecDeque<Delivery>>()
                    + q.capacity() * std::mem::size_of::<Delivery>()
            })
    }

    /// Whether no delivery is kept (in the ring or beside it).
    pub(super) fn is_empty(&self) -> bool {
        self.slots.is_empty() && self.far.len() == 0
    }

    fn slot(&self, seq: u64) -> Option<usize> {
        let i = usize::try_from(seq.checked_sub(self.base)?).ok()?;
        (i < self.slots.len() && self.slots[i].ts != i64::MIN).then_some(i)
    }

    pub(super) fn get(&self, seq: u64) -> Option<Delivery> {
        (self.slot(seq).map(|i| self.slots[i])).or_else(|| self.far.get(seq))
    }

    pub(super) fn get_mut(&mut self, seq: u64) -> Option<&mut Delivery> {
        match self.slot(seq) {
            Some(i) => Some(&mut self.slots[i]),
            None => self.far.get_mut(seq),
        }
    }

    /// Keeps `d` beside the ring, unless [`SeqWindow::SPAN`] are kept so already (then it is
    /// not kept: its re-delivery is taken as one of a seq seen elsewhere).
    fn keep_far(&mut self, seq: u64, d: Delivery) {
        if (self.far.len() as u64) < Self::SPAN || self.far.contains(seq) {
            self.far.insert(seq, d);
        }
    }

    pub(super) fn insert(&mut self, seq: u64, d: Delivery) {
        if self.slots.is_empty() {
            self.base = seq;
        }
        if seq < self.base {
            let grow = self.base - seq;
            if grow.saturating_add(self.slots.len() as u64) > Self::SPAN {
                return self.keep_far(seq, d);
            }
            for _ in 0..grow {
                self.slots.push_front(EMPTY);
            }
            self.base = seq;
        }
        let i = seq - self.base;
        if i >= Self::SPAN {
            // A jump ahead: what the ring holds moves beside it (if there is room), and the
            // ring restarts at this seq, where the emitter now counts from.
            let kept = self.slots.iter().filter(|d| d.ts != i64::MIN).count() as u64;
            if (self.far.len() as u64).saturating_add(kept) > Self::SPAN {
                return self.keep_far(seq, d);
            }
            let (base, slots) = (self.base, std::mem::take(&mut self.slots));
            for (i, d) in slots.iter().enumerate().filter(|(_, d)| d.ts != i64::MIN) {
                self.far.insert(base + i as u64, *d);
            }
            self.base = seq;
            self.slots.push_back(d);
            return;
        }
        let i = i as usize;
        if i >= self.slots.len() {
            self.slots.resize(i + 1, EMPTY);
        }
        self.slots[i] = d;
    }

    /// Whether `seq` may have been forgotten here with the horizon (u64::MAX once the mark
    /// saturated there).
    pub(super) fn may_have_forgotten(&self, seq: u64) -> bool {
        seq < self.forgotten || self.forgotten == u64::MAX
    }

    /// Drops the leading deliveries older than `horizon` (and empty slots before them), and
    /// the far ones older than it, each handed to `dropped` with its seq. An emptied window
    /// gives its allocation back (an idle emitter costs its runs only), a mostly emptied one
    /// shrinks.
    pub(super) fn forget_before(&mut self, horizon: i64, mut dropped: impl FnMut(u64, Delivery)) {
        let before = self.slots.len();
        while let Some(&d) = self.slots.front() {
            if d.ts >= horizon {
                break;
            }
            if d.ts != i64::MIN {
                dropped(self.base, d);
            }
            self.slots.pop_front();
            // (After u64::MAX the ring is empty: its base wraps, and is set again by the next
            // seq kept; the mark saturates, see `may_have_forgotten`.)
            self.forgotten = self.forgotten.max(self.base.saturating_add(1));
            self.base = self.base.wrapping_add(1);
        }
        let forgotten = &mut self.forgotten;
        self.far.forget_before(horizon, |seq, d| {
            *forgotten = (*forgotten).max(seq.saturating_add(1));
            dropped(seq, d);
        });
        if self.slots.len() == before {
            return;
        }
        if self.slots.is_empty() {
            self.slots = Slots::default();
        } else if self.slots.capacity() > 64 && self.slots.len() < self.slots.capacity() / 4 {
            let keep = self.slots.len() * 2;
            self.slots.shrink_to(keep);
        }
    }
}

/// Attestations' (emitter, seq) deliveries kept behind the lowest horizon, the newest this
/// many: attestations are never late (SPEC §10), so a conflicting re-delivery may come at any
/// time, and must still take back the support the first gave.
const LATE_ATTESTATIONS: usize = 1 << 16;

/// The applied attestations' deliveries that fell out of their emitters' [`SeqWindow`]s behind
/// the lowest horizon, by (emitter, seq), the newest [`LATE_ATTESTATIONS`]: what their
/// re-deliveries are settled against there (`dups::settle_seq`). Checkpointed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct LateAttests(BTreeMap<(u32, u64), Delivery>);

impl LateAttests {
    pub(super) fn get(&self, emitter: u32, seq: u64) -> Option<Delivery> {
        self.0.get(&(emitter, seq)).copied()
    }

    pub(super) fn get_mut(&mut self, emitter: u32, seq: u64) -> Option<&mut Delivery> {
        self.0.get_mut(&(emitter, seq))
    }

    pub(super) fn contains(&self, emitter: u32, seq: u64) -> bool {
        self.0.contains_key(&(emitter, seq))
    }

    pub(super) fn insert(&mut self, emitter: u32, seq: u64, d: Delivery) {
        self.0.insert((emitter, seq), d);
    }

    /// Keeps `n`: those holding support first (an applied attestation of a required premise,
    /// not conflicted: forgetting one would leave its support standing against a later
    /// conflict, the unsafe direction), then the newest (by time, then key). Ignored and
    /// conflicted ones go first, so that cheap attestations naming no required premise cannot
    /// push support out.
    /// `supports` tells the ones holding support.
    pub(super) fn trim(&mut self, n: usize, supports: impl Fn(&Delivery) -> bool) {
        let order: Vec<(bool, i64, (u32, u64))> = (self.0.iter())
            .map(|(&k, d)| (supports(d), d.ts, k))
            .collect();
        for (_, _, k) in super::spans::least_beyond(order, n) {
            self.0.remove(&k);
        }
    }

    /// Keeps [`LATE_ATTESTATIONS`] ([`LateAttests::trim`]).
    pub(super) fn bound(&mut self, supports: impl Fn(&Delivery) -> bool) {
        self.trim(LATE_ATTESTATIONS, supports);
    }

    /// Approximate heap bytes (B-tree nodes of up to 11 entries).
    pub(super) fn heap_bytes(&self) -> usize {
        self.0.len().div_ceil(11) * (11 * std::mem::size_of::<((u32, u64), Delivery)>() + 16)
    }
}

fn runs_contain(runs: &BTreeMap<u64, Run>, seq: u64) -> bool {
    runs.range(..=seq)
        .next_back()
        .is_some_and(|(_, r)| r.end >= seq)
}

fn add_to_runs(runs: &mut BTreeMap<u64, Run>, seq: u64, ts: i64) {
    let before = runs
        .range(..seq)
        .next_back()
        .filter(|(_, r)| r.end.checked_add(1) == Some(seq))
        .map(|(&s, _)| s);
    let after = seq.checked_add(1).and_then(|n| runs.get(&n).copied());
    match (before, after) {
        (Some(b), Some(a)) => {
            runs.remove(&(seq + 1));
            let r = runs.get_mut(&b).expect("run");
            r.end = a.end;
            r.end_ts = a.end_ts;
        }
        (Some(b), None) => {
            let r = runs.get_mut(&b).expect("run");
            r.end = seq;
            r.end_ts = Times::at(ts);
        }
        (None, Some(a)) => {
            runs.remove(&(seq + 1));
            runs.insert(
                seq,
                Run {
                    end: a.end,
                    start_ts: Times::at(ts),
                    end_ts: a.end_ts,
                },
            );
        }
        (None, None) => {
            runs.insert(
                seq,
                Run {
                    end: seq,
                    start_ts: Times::at(ts),
                    end_ts: Times::at(ts),
                },
            );
        }
    }
}

/// Every emitter's runs of seqs merged over a view's partitions: what all of them have seen.
/// Fed back to each partition with [`Live::absorb_seq_runs`](super::Live::absorb_seq_runs), it keeps the partitions' runs
/// compact when one emitter's events are spread over partitions (producers key by scope, not
/// by emitter): each partition alone sees every other seq, one run per event.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SeqRuns(pub(super) Vec<(String, Runs)>);

impl SeqRuns {
    /// Runs over all emitters.
    pub fn len(&self) -> usize {
        self.0.iter().map(|(_, r)| r.len()).sum()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// The union of runs of contiguous seqs: overlapping or adjacent runs join, the joined run
/// keeping the times of the events at its two ends (of every delivery there, when runs end
/// at the same seq).
pub(super) fn merge_runs<'r, M: IntoIterator<Item = (&'r u64, &'r Run)>>(
    maps: impl Iterator<Item = M>,
) -> Runs {
    let mut all: Vec<(u64, Run)> = maps
        .flat_map(|m| m.into_iter().map(|(&s, &r)| (s, r)))
        .collect();
    all.sort_by_key(|&(s, r)| (s, std::cmp::Reverse(r.end)));
    let mut out = BTreeMap::new();
    let mut cur: Option<(u64, Run)> = None;
    for (s, r) in all {
        match &mut cur {
            Some((cs, c)) if s <= c.end.saturating_add(1) => {
                if s == *cs {
                    c.start_ts = c.start_ts.union(r.start_ts);
                }
                if r.end > c.end {
                    c.end = r.end;
                    c.end_ts = r.end_ts;
                } else if r.end == c.end {
                    c.end_ts = c.end_ts.union(r.end_ts);
                }
            }
            _ => {
                if let Some((cs, c)) = cur.replace((s, r)) {
                    out.insert(cs, c);
                }
            }
        }
    }
    if let Some((cs, c)) = cur {
        out.insert(cs, c);
    }
    Runs::from_map(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn late_attestations_keep_support_then_the_newest() {
        let mut t = LateAttests::default();
        let attested = 7;
        let supports = |d: &Delivery| d.scope == attested && !d.conflicted;
        // An old one holding support outlives newer ones that hold none.
        t.insert(
            9,
            1,
            Delivery {
                ts: 1,
                scope: attested,
                ..EMPTY
            },
        );
        t.insert(9, 2, Delivery { ts: 60, ..EMPTY });
        t.insert(
            9,
            3,
            Delivery {
                ts: 70,
                scope: attested,
                conflicted: true,
                ..EMPTY
            },
        );
        t.trim(1, supports);
        assert!(t.contains(9, 1) && t.0.len() == 1, "{t:?}");
        let mut t = LateAttests::default();
        for (seq, ts) in [(1, 50), (2, 10), (3, 40), (4, 20), (5, 30)] {
            t.insert(7, seq, Delivery { ts, ..EMPTY });
        }
        t.trim(5, supports);
        assert_eq!(t.0.len(), 5);
        t.trim(3, supports);
        let mut left: Vec<u64> = t.0.keys().map(|&(_, s)| s).collect();
        left.sort_unstable();
        assert_eq!(left, [1, 3, 5], "the three newest");
        assert!(t.contains(7, 1) && !t.contains(7, 2) && !t.contains(8, 1));
        t.trim(0, supports);
        assert!(t.0.is_empty());
    }

    #[test]
    fn a_window_hands_over_what_it_forgets() {
        let mut w = SeqWindow::default();
        for (seq, ts) in [(10, 1), (11, 2), (13, 5), (14, 9)] {
            w.insert(seq, Delivery { ts, ..EMPTY });
        }
        let mut dropped = Vec::new();
        w.forget_before(6, |seq, d| dropped.push((seq, d.ts)));
        assert_eq!(
            dropped,
            [(10, 1), (11, 2), (13, 5)],
            "the empty slot 12 is not handed over"
        );
        assert_eq!(w.get(14).map(|d| d.ts), Some(9));
    }

    #[test]
    fn a_jump_beyond_the_span_keeps_both_sides() {
        let span = SeqWindow::SPAN;
        let mut w = SeqWindow::default();
        let at = |ts| Delivery { ts, ..EMPTY };
        w.insert(10, at(1));
        w.insert(12, at(2));
        // Ahead by more than the span: the ring restarts there, what it held kept beside it.
        w.insert(10 + span + 7, at(3));
        w.insert(10 + span + 8, at(4));
        // Far behind the ring now; a second jump ahead (the ring moves beside it again); far
        // behind its start before the first jump.
        w.insert(11, at(5));
        w.insert(5 + 3 * span, at(6));
        w.insert(2, at(7));
        for (seq, ts) in [
            (10, 1),
            (12, 2),
            (10 + span + 7, 3),
            (10 + span + 8, 4),
            (11, 5),
        ] {
            assert_eq!(w.get(seq).map(|d| d.ts), Some(ts), "seq {seq}");
        }
        assert_eq!(w.get(5 + 3 * span).map(|d| d.ts), Some(6));
        assert_eq!(w.get(2).map(|d| d.ts), Some(7));
        assert_eq!(w.get(13), None);
        w.get_mut(12).expect("kept").conflicted = true;
        assert!(w.get(12).is_some_and(|d| d.conflicted));
        assert!(w.heap_bytes() > 5 * std::mem::size_of::<Delivery>());
        // Checkpointed whole.
        let bytes = postcard::to_stdvec(&w).expect("encodes");
        assert_eq!(
            postcard::from_bytes::<SeqWindow>(&bytes).expect("decodes"),
            w
        );
        // Forgotten with the horizon, each handed over once: the ring's front (stopping at the
        // first delivery still within it), the far ones each by its own time (seq 2, newer,
        // does not hold back the older ones above it).
        assert!(!w.may_have_forgotten(0));
        let mut dropped = Vec::new();
        w.forget_before(6, |seq, d| dropped.push((seq, d.ts)));
        dropped.sort();
        assert_eq!(
            dropped,
            [
                (10, 1),
                (11, 5),
                (12, 2),
                (10 + span + 7, 3),
                (10 + span + 8, 4)
            ]
        );
        assert_eq!(w.get(2).map(|d| d.ts), Some(7));
        assert_eq!(w.get(5 + 3 * span).map(|d| d.ts), Some(6));
        assert!(w.may_have_forgotten(10 + span + 8) && !w.may_have_forgotten(10 + span + 9));
        w.forget_before(8, |_, _| {});
        assert!(w.may_have_forgotten(5 + 3 * span));
        assert_eq!(w.heap_bytes(), 0, "an emptied window holds nothing");
    }

    #[test]
    fn what_is_kept_beside_the_ring_is_bounded() {
        let span = SeqWindow::SPAN;
        let mut w = SeqWindow::default();
        w.insert(3 * span, Delivery { ts: 1, ..EMPTY });
        w.far = Far::from_map(
            (0..span)
                .map(|s| (s, Delivery { ts: 1, ..EMPTY }))
                .collect(),
        );
        // No room beside the ring: a jump ahead keeps the ring as it is, not the far seq.
        w.insert(5 * span, Delivery { ts: 2, ..EMPTY });
        assert_eq!(w.get(5 * span), None);
        assert_eq!(w.get(3 * span).map(|d| d.ts), Some(1));
        assert_eq!(w.far.len() as u64, span);
    }

    #[test]
    fn a_gap_spans_every_delivery_of_the_seqs_around_it() {
        let mut runs = Runs::default();
        for (seq, ts) in [(1, 10), (2, 20), (5, 50), (6, 60)] {
            runs.add(seq, ts);
        }
        // Delivered again at other times: 2 (an end), 5 (a start), 1 (a start) and 6 (an end);
        // an interior seq, or one held by no run, changes nothing.
        for (seq, ts) in [(2, 70), (5, 15), (1, 5), (6, 90), (9, 1), (0, 1)] {
            runs.widen(seq, ts);
        }
        let got: Vec<_> = runs.iter().map(|(&s, r)| (s, *r)).collect();
        let t = |lo, hi| Times { lo, hi };
        assert_eq!(
            got,
            [
                (
                    1,
                    Run {
                        end: 2,
                        start_ts: t(5, 10),
                        end_ts: t(20, 70)
                    }
                ),
                (
                    5,
                    Run {
                        end: 6,
                        start_ts: t(15, 50),
                        end_ts: t(60, 90)
                    }
                ),
            ]
        );
        assert_eq!(got[0].1.end_ts.to(got[1].1.start_ts), (15, 70));
        // One run, inline: both its ends are the one seq.
        let mut one = Runs::default();
        one.add(3, 30);
        one.widen(3, 35);
        let (_, r) = one.iter().next().expect("a run");
        assert_eq!((r.start_ts, r.end_ts), (t(30, 35), t(30, 35)));
        // Runs of two partitions ending or starting at the same seq keep both's times.
        let a = BTreeMap::from([(
            1,
            Run {
                end: 4,
                start_ts: t(10, 10),
                end_ts: t(40, 40),
            },
        )]);
        let b = BTreeMap::from([(
            1,
            Run {
                end: 4,
                start_ts: t(12, 12),
                end_ts: t(38, 45),
            },
        )]);
        let m: Vec<_> = merge_runs([&a, &b].into_iter()).into_iter().collect();
        assert_eq!(
            m,
            [(
                1,
                Run {
                    end: 4,
                    start_ts: t(10, 12),
                    end_ts: t(38, 45)
                }
            )]
        );
    }

    #[test]
    fn runs_join_when_adjacent_or_overlapping() {
        let run = |end, start_ts, end_ts| Run {
            end,
            start_ts: Times::at(start_ts),
            end_ts: Times::at(end_ts),
        };
        let a = BTreeMap::from([(1, run(2, 10, 20)), (8, run(9, 80, 90))]);
        let b = BTreeMap::from([
            (3, run(4, 30, 40)),
            (6, run(6, 60, 60)),
            (9, run(12, 90, 120)),
        ]);
        let m = merge_runs([&a, &b].into_iter());
        assert_eq!(
            m.into_iter().collect::<Vec<_>>(),
            [
                (1, run(4, 10, 40)),
                (6, run(6, 60, 60)),
                (8, run(12, 80, 120))
            ]
        );
        let top = BTreeMap::from([(u64::MAX - 1, run(u64::MAX, 1, 2))]);
        let m = merge_runs([&top, &top].into_iter());
        assert_eq!(m.len(), 1);
    }
}
