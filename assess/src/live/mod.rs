//! The service's incremental assessor (SPEC §4 "`serve` is exact within the lateness horizon",
//! §5): `(state, event) -> findings`, pure and deterministic, checkpointable with serde.
//!
//! [`Live`] takes events one at a time from one ordered partition (the WAL or a Kafka
//! partition). Per (property, scope) it keeps the events still inside the retention horizon
//! (`watermark - retention`) and re-runs the same per-scope procedures as `check`
//! (`scope::decide_group`) over them when the scope changes, so inside the horizon the
//! findings are exactly `check`'s, whatever the arrival order. Older events are folded into a
//! [`crate::tracker::Tracker`] high-water mark that is never forgotten: a late event is judged against the kept
//! events and the mark, `refuted` where certain, `unknown(late_evidence)` where the exact answer
//! would need folded detail.
//!
//! Reasons that depend on the whole history are derived when queried, from compact state:
//! route silence from per-window observation bounds (min and max per window decide silence
//! exactly), telemetry gaps from per-emitter runs of contiguous `seq`s. Reasons that later
//! evidence can resolve (`ambiguous_order`, `ungranted_epoch`) are withdrawn from provisional
//! windows when resolved; final windows only ever get worse (`revised`). A counterexample is
//! provisional until the horizon has passed its stale and superseding events, and is withdrawn
//! if one of them turns out to be one of conflicting deliveries (the `cxs` and `dups`
//! modules); a final one is never withdrawn. Grants at or above the folded mark outlive the
//! horizon with their holders (the `scopes` module).
//!
//! **Bounds on what input names** (issue 11, item 7). Names (holders, routes, emitters) are
//! interned in one table of the state, and only what is kept is interned: not a heartbeat's
//! route unless declared (heartbeats on undeclared routes are counted per property, shown in
//! [`Coverage::undeclared_heartbeats`]), nor an unattributed event's holder and route. The
//! table is swept when it holds twice the names alive after the last sweep (at least 65,536):
//! every name no kept event, folded grant, counterexample, emitter or declared route refers to
//! is freed and its id reused, so it holds what retained state refers to, up to twice that.
//! Sweeping changes no answer. A name longer than [`MAX_NAME_BYTES`] (256) is kept as its first
//! 256 bytes, its length and a 128-bit hash (`…[N bytes, xxh3-128 H]`): distinct names stay
//! distinct but for a hash collision, and a shortened name never equals one kept whole.
//! Undeclared routes of commits/fences are counted by name for the first
//! [`UNDECLARED_ROUTES_KEPT`] (1,000) per property and partition, the rest under
//! [`OTHER_UNDECLARED_ROUTES`]; `undeclared_route` is still raised per event, so no verdict
//! depends on the bound.
//!
//! **Emitters** are never forgotten (a later gap against a forgotten run would go unseen, a
//! conflicting re-send would be applied), so the table is bounded instead: at most
//! [`LiveOptions::max_emitters`] (default 1,000,000) distinct emitters are tracked per
//! partition. An event with a `seq` of an emitter beyond them (a new id when the table is full)
//! is *set aside*, not applied — it can neither refute nor help `holds` — and raises
//! `unknown(telemetry_gap)` for its property in the window of its time, with the sample
//! "emitter `X` not tracked: more than max_emitters (N) emitters": its seq cannot be tracked,
//! which is lost telemetry as far as `serve` can tell. It counts as an event of its property
//! (as in `check`) and in [`View::untracked_emitter_events`]; an unattributed one only in
//! [`View::untracked_unattributed_events`] (and the unattributed total). Nothing of it is
//! interned. An emitter tracked once stays tracked. Emitters churn (a source that restarts its
//! counter uses a new id, every pod restart), so an idle emitter is kept compact: its recent
//! deliveries fall out with the horizon and give their allocation back (the window is one
//! pointer when empty), a single run of seqs is kept inline (no map), a single property too:
//! about 110 bytes per idle emitter in its table (`Live::emitters_bytes`), plus its name.
//!
//! **Counterexamples** are kept in full (events, context) up to
//! [`LiveOptions::max_counterexamples`] (default 100,000) per property and partition. Beyond,
//! the oldest *final* ones lose their detail first, then the oldest withdrawn ones; a
//! provisional one never does (it may still be withdrawn, which needs its windows), so the
//! bound is exceeded only by provisional ones, until they are final. A counterexample whose
//! detail is dropped still stands: its window stays refuted, it was reported by
//! [`Live::take_new_counterexamples`] when found, [`View::counterexample_count`] counts it and
//! [`View::counterexamples_dropped`] says how many are not listed. Per window, the earliest and
//! latest stale event times and the count of dropped ones are kept, so an assurance over any
//! range is `refuted` when one certainly lies in it, and `unknown(late_evidence)` when the
//! range lies strictly between two of one window's dropped ones (present or not, it cannot be
//! told), never `holds`. Finding a dropped one again changes nothing (the `cxs` module).
//!
//! Wall time enters only as a parameter: the time a batch was received (recorded in the WAL, so
//! replay decides `future timestamp` the same way) and the time of a query.
//!
//! **Partitions, summaries and the merge** (SPEC §5). Producers key events by scope, so all
//! per-scope state of a scope lives in one partition, and one `Live` runs per partition.
//! What the queries read is kept apart from the per-scope state: per property a mergeable
//! tally (window series, reason counts and samples, route observation bounds per window,
//! undeclared routes by name, event counts) plus its counterexamples; per emitter, by name, its
//! runs of contiguous seqs (one emitter's seqs are spread over partitions, so gaps are derived
//! only after the merge); the partition's greatest event time (its watermark), totals and
//! malformed samples. [`Live::summary`] exports exactly that as a [`Summary`] (plain serde data
//! with counterexamples rendered, for JSON or postcard between processes). A [`View`] merges
//! any set of local `Live`s and remote `Summary`s and answers every query (assurance,
//! timeline, counterexamples, coverage, reason counts, samples, totals, watermark); `Live`'s
//! own query methods are [`Live::view`] of its one partition, so one partition and many share
//! one code path. With one partition the view borrows; with several it merges per query:
//! series and counts added, route observations per window by min, max and count (silence stays
//! exact), counterexamples united by id (deterministic, so a handover counts each once),
//! emitter runs united. The view's watermark is the minimum over active partitions, idle ones
//! left out, the maximum when all are idle. Per-scope detail ([`Live::scope`]) stays local to
//! its partition.

mod cxs;
mod dups;
mod query;
mod scopes;
mod spans;
mod summary;
mod view;

pub use query::{Assurance, Coverage, CxPage, EmitterCoverage, RouteState, ScopeView};
pub use spans::SpanId;
pub use summary::Summary;
pub use view::{ContractMismatch, SeqRuns, View};

use crate::contract::{Compiled, Contract, Grants};
use crate::event::{Event, Kind, Outcome};
use crate::finding::{
    Counterexample, CounterexampleKind, EventView, Provenance, Reason, counterexample_id,
};
use crate::report::Sample;
use crate::scope::{self, Slot};
use crate::time::EventTime;
use crate::tracker::Judgement;
use crate::window::WindowSeries;
use dups::{Attributed, Seen};
use scopes::Scopes;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, VecDeque};
use summary::Tally;

const NONE: u32 = u32::MAX;
const HAS_EPOCH: u8 = 1;
const HAS_ORDER: u8 = 2;
const HAS_SEQ: u8 = 4;
const REJECTED: u8 = 8;
const ASIDE: u8 = 16;
const AMBIGUOUS: u8 = 32;
const UNGRANTED: u8 = 64;
/// The synthetic index of a scope's folded high-water mark in a sweep.
const MARK_IDX: u32 = u32::MAX - 1;
/// Synthetic indices of a scope's folded grants in a sweep start here (kept events' indices
/// are below it).
const FOLDED_IDX: u32 = 1 << 31;
/// Malformed events whose message is kept (the most recent).
pub const MALFORMED_SAMPLES: usize = 100;
/// Samples kept per (property, reason): the first ones seen.
pub const SAMPLES_PER_REASON: usize = 3;
/// Undeclared routes of commits/fences counted by name per property and partition; the others
/// are counted under [`OTHER_UNDECLARED_ROUTES`].
pub const UNDECLARED_ROUTES_KEPT: usize = 1_000;
/// The bucket of undeclared routes beyond [`UNDECLARED_ROUTES_KEPT`].
pub const OTHER_UNDECLARED_ROUTES: &str = "(other undeclared routes)";
/// Names (holders, routes, emitters) longer than this are kept shortened: their first bytes,
/// their length and a 128-bit hash of the whole (the module doc).
pub const MAX_NAME_BYTES: usize = 256;
/// The name table is swept of names nothing retained refers to when it holds more than twice
/// the names alive after the last sweep, and at least this many.
const NAMES_SWEEP_MIN: usize = 1 << 16;
/// The route id of a heartbeat on a route the contract lacks: not interned.
const UNDECLARED: u32 = u32::MAX - 3;

/// The default of [`LiveOptions::max_emitters`].
pub const DEFAULT_MAX_EMITTERS: usize = 1_000_000;
/// The default of [`LiveOptions::max_counterexamples`].
pub const DEFAULT_MAX_COUNTEREXAMPLES: usize = 100_000;

/// Options of the live assessor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveOptions {
    /// How far behind the watermark events are kept exactly, in ns; older ones are folded.
    /// `None`: each property's `allowed_lateness`.
    pub retention: Option<i64>,
    /// An event more than this ahead of the batch's receive time is malformed
    /// (`future timestamp`), in ns.
    pub future_tolerance: i64,
    /// Distinct emitters tracked at most (per partition); an event with a `seq` of an emitter
    /// beyond them is set aside as lost telemetry (the module doc, "Bounds").
    pub max_emitters: usize,
    /// Counterexamples kept in full per property (per partition); beyond, the oldest final
    /// ones lose their detail but still count (the module doc, "Bounds").
    pub max_counterexamples: usize,
}

impl Default for LiveOptions {
    fn default() -> LiveOptions {
        LiveOptions {
            retention: None,
            future_tolerance: 300_000_000_000,
            max_emitters: DEFAULT_MAX_EMITTERS,
            max_counterexamples: DEFAULT_MAX_COUNTEREXAMPLES,
        }
    }
}

/// One retained event, compact. Strings are ids into [`Live`]'s name table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct Ev {
    ts: i64,
    epoch: u64,
    order: u64,
    inc: u64,
    seq: u64,
    position: u64,
    holder: u32,
    route: u32,
    emitter: u32,
    source: u32,
    /// The event's own provenance when it has one (an OTLP span's ids, rendered
    /// `source:<trace_id>/<span_id>`), a slot of the span table, else `NONE`: then it is
    /// `source:position`. In the record's padding (72 bytes either way).
    span: u32,
    kind: u8,
    flags: u8,
}

impl Ev {
    fn has(&self, f: u8) -> bool {
        self.flags & f != 0
    }
    fn kind(&self) -> Kind {
        [Kind::Commit, Kind::Fence, Kind::Grant, Kind::Heartbeat][self.kind as usize]
    }
    fn epoch(&self) -> Option<u64> {
        self.has(HAS_EPOCH).then_some(self.epoch)
    }
    fn order(&self) -> Option<u64> {
        self.has(HAS_ORDER).then_some(self.order)
    }
    fn committed_mutation(&self) -> bool {
        self.kind().is_mutation() && !self.has(REJECTED)
    }
    /// Equal as deliveries of one event (SPEC §4 "Duplicates"); scope and property are equal
    /// by construction where this is used.
    fn same_content(&self, o: &Ev) -> bool {
        self.kind == o.kind
            && self.has(REJECTED) == o.has(REJECTED)
            && self.inc == o.inc
            && self.epoch() == o.epoch()
            && self.order() == o.order()
            && self.holder == o.holder
            && self.route == o.route
            && self.ts == o.ts
    }
    /// The sweep class: 0 committed commit/fence with an epoch, 1 grant, 2 other.
    fn class(&self) -> u8 {
        if self.committed_mutation() && self.has(HAS_EPOCH) {
            0
        } else if self.kind() == Kind::Grant {
            1
        } else {
            2
        }
    }
}

/// A sample as kept in the state and in a [`Summary`]. [`Sample`] skips absent fields when
/// serialized, which a non-self-describing format (checkpoints, summaries) cannot read back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Kept {
    source: String,
    ts: Option<String>,
    detail: String,
}

impl Kept {
    fn sample(&self) -> Sample {
        Sample {
            source: self.source.clone(),
            ts: self.ts.clone(),
            detail: self.detail.clone(),
        }
    }
}

/// A counterexample as kept: events by value, rendered on query.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Cx {
    id: String,
    kind: CounterexampleKind,
    scope: String,
    stale: Ev,
    /// `None`: the scope's folded high-water mark.
    witness: Option<Ev>,
    mark: Option<crate::tracker::Mark>,
    context: Vec<Ev>,
    /// See [`Counterexample::is_final`] and the `cxs` module.
    is_final: bool,
    withdrawn: Option<crate::finding::Withdrawal>,
    /// An epoch reuse's former representatives whose windows it still refutes, one per
    /// window, none in the stale event's window; emptied once final (the `cxs` module).
    former: Vec<Ev>,
}

impl Cx {
    /// Every event it holds: stale, witness, context, former representatives.
    fn events(&self) -> impl Iterator<Item = &Ev> {
        [&self.stale]
            .into_iter()
            .chain(self.witness.as_ref())
            .chain(&self.context)
            .chain(&self.former)
    }
}

/// Observation bounds of one route in one window: enough to decide silence exactly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct Obs {
    min: i64,
    max: i64,
    count: u64,
}

/// One property's state in one partition: the mergeable [`Tally`] that queries read (and a
/// [`Summary`] exports), the counterexamples, and the per-scope state that stays local.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Prop {
    scopes: Scopes,
    tally: Tally,
    /// By (stale event time, id); rendered when queried (or exported in a [`Summary`]).
    cxs: BTreeMap<(i64, String), Cx>,
    /// Events older than this are folded.
    horizon: i64,
    /// Holder mismatches waiting for the watermark to pass the commit (a matching grant may
    /// still arrive): (commit time, scope).
    pending: std::collections::BTreeSet<(i64, String)>,
    /// Provisional counterexamples by (due time, key): final once the horizon passes the due
    /// time (see the `cxs` module).
    provisional: std::collections::BTreeSet<(i64, cxs::Key)>,
    /// How many of `cxs` are withdrawn.
    withdrawn: usize,
    /// Final counterexamples whose detail was dropped ([`LiveOptions::max_counterexamples`])
    /// while their stale event may still be kept, so that finding one again changes nothing:
    /// (stale event time, xxh3-64 of the id) -> the epoch reuse group's hash (0 for other
    /// kinds). Pruned when the horizon folds their stale events (the `cxs` module).
    dropped: BTreeMap<(i64, u64), u64>,
}

/// A run of contiguous `seq`s of one emitter, with the times of the events at its ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct Run {
    end: u64,
    start_ts: i64,
    end_ts: i64,
}

/// An emitter's runs of contiguous seqs, by first seq: one run inline (an emitter that lost
/// nothing, the common case, costs no allocation), more in a map. Serialized as the map.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Runs {
    One(u64, Run),
    Many(BTreeMap<u64, Run>),
}

type RunsIter<'r> = std::iter::Chain<
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

    fn contains(&self, seq: u64) -> bool {
        match self {
            Runs::One(s, r) => (*s..=r.end).contains(&seq),
            Runs::Many(m) => runs_contain(m, seq),
        }
    }

    /// Adds `seq` (not held yet) seen at `ts`.
    fn add(&mut self, seq: u64, ts: i64) {
        if let Runs::One(s, r) = self {
            if r.end.checked_add(1) == Some(seq) {
                r.end = seq;
                r.end_ts = ts;
                return;
            }
            if seq.checked_add(1) == Some(*s) {
                *s = seq;
                r.start_ts = ts;
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
struct Emitter {
    /// Runs by first seq.
    runs: Runs,
    /// Recent deliveries by seq, for duplicate settlement inside the horizon.
    recent: dups::SeqWindow,
    /// Properties it fed.
    props: Props,
    events: u64,
}

/// The properties an emitter fed: one inline (the common case, no allocation), more in an
/// exactly sized list. Serialized as the list.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Props {
    One(u16),
    Many(Vec<u16>),
}

impl Default for Props {
    fn default() -> Props {
        Props::Many(Vec::new())
    }
}

impl Props {
    fn as_slice(&self) -> &[u16] {
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

    fn insert(&mut self, p: u16) {
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

/// What one pushed event came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pushed {
    /// Assessed. A conflicting delivery (SPEC §4 "Duplicates"), or a re-send of a folded
    /// event's (emitter, seq), is assessed as evidence (`conflicting_duplicate` or
    /// `late_evidence`) and set aside, not applied: it is not a duplicate.
    Assessed,
    /// An equal delivery of an event already assessed: dropped.
    Duplicate,
    /// Valid but naming no property of the contract.
    Unattributed,
    /// Malformed: counted as evidence (`malformed_event`).
    Malformed,
}

/// A counterexample found by the last pushes, for metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewCounterexample {
    /// The property's index in the contract.
    pub property: usize,
    /// Its kind.
    pub kind: CounterexampleKind,
    /// The stale event's route (empty when it had none).
    pub route: String,
    /// Its id.
    pub id: String,
}

/// Serializable state of [`Live`] (everything but the contract).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveState {
    fingerprint: u64,
    options: LiveOptions,
    /// Holder, route and emitter names by id; a freed slot is empty and listed in `free_names`.
    names: Vec<String>,
    /// Ids of `names` freed by the last sweeps, reused first.
    free_names: Vec<u32>,
    /// Sweep the name table when it holds more live names than this.
    names_sweep_at: u64,
    sources: Vec<String>,
    /// Per source, the greatest position pushed (file ingest resumes after it).
    progress: Vec<u64>,
    /// The span ids records refer to (`Ev::span`).
    spans: spans::Spans,
    props: Vec<Prop>,
    emitters: HashMap<u32, Emitter, foldhash::fast::FixedState>,
    max_ts: Option<i64>,
    valid: u64,
    malformed: u64,
    unattributed: u64,
    duplicates: u64,
    /// Unattributed events with a `seq` of emitters beyond [`LiveOptions::max_emitters`].
    untracked_unattributed: u64,
    malformed_samples: VecDeque<Kept>,
    /// The input ended: the end of input is the end of time, every window final.
    closed: bool,
}

/// The live assessor of one partition.
#[derive(Debug)]
pub struct Live {
    contract: Contract,
    compiled: Compiled,
    state: LiveState,
    name_ids: HashMap<String, u32, foldhash::fast::FixedState>,
    route_ids: Vec<Vec<(u32, usize)>>,
    work: scope::Workspace,
    slots: Vec<Slot>,
    new_cxs: Vec<NewCounterexample>,
    withdrawn_cxs: Vec<NewCounterexample>,
}

/// A checkpoint that does not belong to this contract.
#[derive(Debug, thiserror::Error)]
#[error(
    "the checkpoint was taken under another contract (fingerprint {found:016x}, this one is {expected:016x})"
)]
pub struct ContractChanged {
    /// The checkpoint's contract fingerprint.
    pub found: u64,
    /// This contract's.
    pub expected: u64,
}

/// A fingerprint of what the live state depends on in a contract: property names, windows,
/// skews, lateness and routes.
pub fn fingerprint(contract: &Contract) -> u64 {
    let mut s = String::new();
    for p in &contract.properties {
        s.push_str(&format!(
            "{}|{}|{}|{}|{}|{:?}|",
            p.name, p.window.0, p.clock_skew.0, p.allowed_lateness.0, p.route_freshness.0, p.grants
        ));
        for r in &p.routes {
            s.push_str(&format!("{}:{};", r.name, r.fenced));
        }
        s.push('\n');
    }
    xxhash_rust::xxh3::xxh3_64(s.as_bytes())
}

impl Live {
    /// An empty assessor under `contract`.
    pub fn new(contract: Contract, options: LiveOptions) -> Live {
        let props = contract
            .properties
            .iter()
            .map(|p| Prop {
                scopes: Scopes::default(),
                tally: Tally {
                    series: WindowSeries::new(p.window.0),
                    counts: [0; Reason::COUNT],
                    samples: BTreeMap::new(),
                    routes: vec![BTreeMap::new(); p.routes.len()],
                    undeclared: BTreeMap::new(),
                    undeclared_heartbeats: 0,
                    untracked_emitter_events: 0,
                    cxs_dropped: 0,
                    withdrawn_dropped: 0,
                    dropped_at: BTreeMap::new(),
                    events: 0,
                    stale_rejections: 0,
                    max_ts: None,
                },
                cxs: BTreeMap::new(),
                horizon: i64::MIN,
                pending: Default::default(),
                provisional: Default::default(),
                withdrawn: 0,
                dropped: BTreeMap::new(),
            })
            .collect();
        let state = LiveState {
            fingerprint: fingerprint(&contract),
            options,
            names: Vec::new(),
            free_names: Vec::new(),
            names_sweep_at: NAMES_SWEEP_MIN as u64,
            sources: Vec::new(),
            progress: Vec::new(),
            spans: spans::Spans::default(),
            props,
            emitters: HashMap::default(),
            max_ts: None,
            valid: 0,
            malformed: 0,
            unattributed: 0,
            duplicates: 0,
            untracked_unattributed: 0,
            malformed_samples: VecDeque::new(),
            closed: false,
        };
        Live::from_parts(contract, state)
    }

    /// Restores a checkpointed state under `contract`.
    pub fn restore(contract: Contract, state: LiveState) -> Result<Live, ContractChanged> {
        let expected = fingerprint(&contract);
        if state.fingerprint != expected {
            return Err(ContractChanged {
                found: state.fingerprint,
                expected,
            });
        }
        Ok(Live::from_parts(contract, state))
    }

    fn from_parts(contract: Contract, state: LiveState) -> Live {
        let compiled = contract.compile();
        let mut free = vec![false; state.names.len()];
        for &i in &state.free_names {
            if let Some(f) = free.get_mut(i as usize) {
                *f = true;
            }
        }
        let name_ids = state
            .names
            .iter()
            .enumerate()
            .filter(|&(i, _)| !free[i])
            .map(|(i, s)| (s.clone(), i as u32))
            .collect();
        let mut live = Live {
            contract,
            compiled,
            state,
            name_ids,
            route_ids: Vec::new(),
            work: scope::Workspace::default(),
            slots: Vec::new(),
            new_cxs: Vec::new(),
            withdrawn_cxs: Vec::new(),
        };
        let names: Vec<Vec<String>> = live
            .contract
            .properties
            .iter()
            .map(|p| p.routes.iter().map(|r| r.name.clone()).collect())
            .collect();
        live.route_ids = names
            .iter()
            .map(|routes| {
                routes
                    .iter()
                    .enumerate()
                    .map(|(i, r)| (live.intern(r), i))
                    .collect()
            })
            .collect();
        live
    }

    /// The state to checkpoint.
    pub fn state(&self) -> &LiveState {
        &self.state
    }

    /// The options in force.
    pub fn options(&self) -> LiveOptions {
        self.state.options
    }

    /// Puts new options in force (after a restart with another configuration): a longer
    /// retention keeps more from now on (what was folded stays folded), a shorter one folds
    /// more at the next watermark move; the future tolerance applies to the next events.
    pub fn set_options(&mut self, options: LiveOptions) {
        self.state.options = options;
    }

    /// The contract.
    pub fn contract(&self) -> &Contract {
        &self.contract
    }

    /// The compiled contract (status and obligations).
    pub fn compiled(&self) -> &Compiled {
        &self.compiled
    }

    /// Registers a source (a partition name such as `wal`); provenance is `(source, position)`.
    pub fn add_source(&mut self, name: &str) -> u32 {
        if let Some(i) = self.state.sources.iter().position(|s| s == name) {
            return i as u32;
        }
        self.state.sources.push(name.to_string());
        self.state.progress.push(0);
        (self.state.sources.len() - 1) as u32
    }

    /// The greatest position pushed from source `name` (a file's last line read), if any.
    pub fn source_progress(&self, name: &str) -> Option<u64> {
        let i = self.state.sources.iter().position(|s| s == name)?;
        Some(self.state.progress[i])
    }

    fn note_position(&mut self, source: u32, position: u64) {
        let p = &mut self.state.progress[source as usize];
        *p = (*p).max(position);
    }

    /// The id of name `s`, adding it when new. A name longer than [`MAX_NAME_BYTES`] is kept
    /// as [`shortened`]: distinct long names stay distinct but for a 128-bit hash collision, and
    /// a shortened name is longer than any name kept whole, so never equal to one. A declared
    /// route is kept whole (interned at start, found exactly first).
    fn intern(&mut self, s: &str) -> u32 {
        if let Some(&id) = self.name_ids.get(s) {
            return id;
        }
        if s.len() > MAX_NAME_BYTES {
            let short = shortened(s);
            if let Some(&id) = self.name_ids.get(short.as_str()) {
                return id;
            }
            return self.add_name(short);
        }
        self.add_name(s.to_string())
    }

    fn add_name(&mut self, s: String) -> u32 {
        let id = match self.state.free_names.pop() {
            Some(id) => {
                self.state.names[id as usize] = s.clone();
                id
            }
            None => {
                let id = self.state.names.len() as u32;
                assert!(id < UNDECLARED, "name table full");
                self.state.names.push(s.clone());
                id
            }
        };
        self.name_ids.insert(s, id);
        id
    }

    /// The id of a name already interned (a declared route is), without adding it.
    fn name_id(&self, s: &str) -> Option<u32> {
        if let Some(&id) = self.name_ids.get(s) {
            return Some(id);
        }
        (s.len() > MAX_NAME_BYTES)
            .then(|| self.name_ids.get(shortened(s).as_str()).copied())
            .flatten()
    }

    fn name(&self, id: u32) -> Option<&str> {
        self.state.names.get(id as usize).map(String::as_str)
    }

    /// Where `e` was read: its span's provenance, or `source:position`.
    fn provenance(&self, e: &Ev) -> String {
        let source = &self.state.sources[e.source as usize];
        match self.state.spans.get(e.span) {
            Some(id) if e.span != NONE => spans::render(source, id),
            _ => format!("{source}:{}", e.position),
        }
    }

    /// Names interned and not freed.
    pub fn names_interned(&self) -> usize {
        self.state.names.len() - self.state.free_names.len()
    }

    /// Sweeps the name table when it doubled since the last sweep: frees every name that no
    /// retained event, folded grant, counterexample, emitter or declared route refers to, for
    /// its id to be reused. Run between events, never while one is being built.
    fn sweep_names(&mut self) {
        if (self.names_interned() as u64) <= self.state.names_sweep_at {
            return;
        }
        let mut live = vec![false; self.state.names.len()];
        let mut mark = |id: u32| {
            if let Some(l) = live.get_mut(id as usize) {
                *l = true;
            }
        };
        let mark_ev = |e: &Ev, mark: &mut dyn FnMut(u32)| {
            mark(e.holder);
            mark(e.route);
            mark(e.emitter);
        };
        for routes in &self.route_ids {
            for &(id, _) in routes {
                mark(id);
            }
        }
        for &id in self.state.emitters.keys() {
            mark(id);
        }
        for prop in &self.state.props {
            prop.scopes.for_each_name(&mut mark);
            for c in prop.cxs.values() {
                for e in c.events() {
                    mark_ev(e, &mut mark);
                }
            }
        }
        let mut free = vec![false; self.state.names.len()];
        for &i in &self.state.free_names {
            free[i as usize] = true;
        }
        for (i, alive) in live.iter().enumerate() {
            if !alive && !free[i] {
                let name = std::mem::take(&mut self.state.names[i]);
                self.name_ids.remove(&name);
                self.state.free_names.push(i as u32);
            }
        }
        // Free slots at the table's end go; the others are reused lowest first.
        let free = &mut self.state.free_names;
        free.sort_unstable();
        while let Some(&last) = free.last()
            && last as usize + 1 == self.state.names.len()
        {
            free.pop();
            self.state.names.pop();
        }
        free.reverse();
        self.state.names.shrink_to(self.state.names.len() * 2);
        self.state.names_sweep_at = (2 * self.names_interned()).max(NAMES_SWEEP_MIN) as u64;
    }

    /// Counterexamples found since the last call.
    pub fn take_new_counterexamples(&mut self) -> Vec<NewCounterexample> {
        std::mem::take(&mut self.new_cxs)
    }

    /// Valid, malformed, unattributed and duplicate events so far.
    pub fn totals(&self) -> (u64, u64, u64, u64) {
        self.view().totals()
    }

    /// Scopes with resident state, over all properties.
    pub fn active_scopes(&self) -> usize {
        self.state.props.iter().map(|p| p.scopes.len()).sum()
    }

    /// Approximate bytes of resident per-scope state.
    pub fn state_bytes(&self) -> usize {
        self.state.props.iter().map(|p| p.scopes.heap_bytes()).sum()
    }

    /// The property's watermark: its greatest valid event time minus `allowed_lateness`
    /// (`EventTime::MIN` before any event, `EventTime::MAX` once closed). The view of this one
    /// partition, which is active.
    pub fn watermark(&self, p: usize) -> EventTime {
        self.view().watermark(p)
    }

    /// This partition's own watermark of property `p`, as the assessor moves with it.
    fn partition_watermark(&self, p: usize) -> EventTime {
        partition_watermark(
            self.state.max_ts,
            self.state.closed,
            self.contract.properties[p].allowed_lateness.0,
        )
    }

    /// The query view of this one partition (active): every query reads through it, so one
    /// partition and many merged ones share one code path. It borrows the state.
    pub fn view(&self) -> View<'_> {
        View::of_live(self)
    }

    /// Adds a malformed event at `position` of `source` (`ts` if it parsed).
    pub fn push_malformed(
        &mut self,
        source: u32,
        position: u64,
        ts: Option<EventTime>,
        message: String,
    ) {
        self.malformed_at(None, source, position, ts, message);
    }

    /// Adds a malformed event that has a provenance of its own (an OTLP span, see
    /// [`Live::push_span`]), read at `position` of `source`.
    pub fn push_malformed_span(
        &mut self,
        span: &SpanId,
        source: u32,
        position: u64,
        ts: Option<EventTime>,
        message: String,
    ) {
        self.malformed_at(Some(span), source, position, ts, message);
    }

    fn malformed_at(
        &mut self,
        span: Option<&SpanId>,
        source: u32,
        position: u64,
        ts: Option<EventTime>,
        message: String,
    ) {
        self.note_position(source, position);
        let s = &mut self.state;
        s.malformed += 1;
        if s.malformed_samples.len() >= MALFORMED_SAMPLES {
            s.malformed_samples.pop_front();
        }
        let name = &s.sources[source as usize];
        let where_ = span.map_or_else(
            || format!("{name}:{position}"),
            |id| spans::render(name, id),
        );
        s.malformed_samples.push_back(Kept {
            source: where_.clone(),
            ts: ts.map(|t| t.to_string()),
            detail: message.clone(),
        });
        let at = ts.map(|t| t.0).or(s.max_ts);
        for p in &mut s.props {
            let p = &mut p.tally;
            p.counts[Reason::MalformedEvent as usize] += 1;
            let at = at.or_else(|| p.series.range().map(|(f, _)| p.series.start_of(f)));
            if let Some(t) = at {
                p.series.add_reason(t, Reason::MalformedEvent);
            }
            let samples = p.samples.entry(Reason::MalformedEvent).or_default();
            if samples.len() < SAMPLES_PER_REASON {
                samples.push(Kept {
                    source: where_.clone(),
                    ts: ts.map(|t| t.to_string()),
                    detail: message.clone(),
                });
            }
        }
    }

    /// Joins seqs that other partitions saw (from [`View::seq_runs`]) into this partition's
    /// runs, for the emitters it knows: their union is what was seen, so gaps and duplicate
    /// settlement stay as they were, and runs fragmented by the partitioning join up. Returns
    /// the runs removed.
    pub fn absorb_seq_runs(&mut self, seen: &SeqRuns) -> usize {
        let mut removed = 0;
        for (name, runs) in &seen.0 {
            let Some(&id) = self.name_ids.get(name.as_str()) else {
                continue;
            };
            let Some(e) = self.state.emitters.get_mut(&id) else {
                continue;
            };
            let before = e.runs.len();
            e.runs = view::merge_runs([&e.runs, runs].into_iter());
            removed += before.saturating_sub(e.runs.len());
        }
        removed
    }

    /// Records that the assessed event `ev` at `position` of `source` arrived under the Kafka
    /// key `key`, which is not its scope (`misrouted_partition`, SPEC §4): with partitioning by
    /// scope, its scope's other events may be on another partition, out of this one's sight.
    pub fn note_misrouted(&mut self, ev: &Event<'_>, source: u32, position: u64, key: &str) {
        let p = match ev.property {
            Some(name) => self.contract.property_index(name),
            None if self.contract.properties.len() == 1 => Some(0),
            None => None,
        };
        let Some(p) = p else { return };
        let where_ = format!("{}:{position}", self.state.sources[source as usize]);
        let t = &mut self.state.props[p].tally;
        t.counts[Reason::MisroutedPartition as usize] += 1;
        t.series.add_reason(ev.ts.0, Reason::MisroutedPartition);
        let samples = t.samples.entry(Reason::MisroutedPartition).or_default();
        if samples.len() < SAMPLES_PER_REASON {
            samples.push(Kept {
                source: where_,
                ts: Some(ev.ts.to_string()),
                detail: format!(
                    "message key `{key}` is not the event's scope `{}`",
                    ev.scope.unwrap_or_default()
                ),
            });
        }
    }

    /// Adds a decoded event received at wall time `received_at` (ns), read at `position` of
    /// `source`.
    pub fn push(&mut self, ev: &Event<'_>, source: u32, position: u64, received_at: i64) -> Pushed {
        self.push_from(ev, None, source, position, received_at)
    }

    /// Adds a decoded event that has a provenance of its own, `span` (an OTLP span's trace and
    /// span ids, SPEC §8), read at `position` of `source`. Its provenance,
    /// `<source>:<trace_id>/<span_id>`, names it in findings and keys its counterexample ids, so
    /// they are the same however often it is delivered, and it is one more duplicate key (SPEC
    /// §4 "Duplicates"): a delivery equal to a kept event of its scope with the same span is
    /// dropped, a different one sets both aside (the `dups` module).
    pub fn push_span(
        &mut self,
        ev: &Event<'_>,
        span: &SpanId,
        source: u32,
        position: u64,
        received_at: i64,
    ) -> Pushed {
        self.push_from(ev, Some(span), source, position, received_at)
    }

    fn push_from(
        &mut self,
        ev: &Event<'_>,
        span: Option<&SpanId>,
        source: u32,
        position: u64,
        received_at: i64,
    ) -> Pushed {
        self.note_position(source, position);
        if let Err((field, why)) = ev.validate() {
            self.malformed_at(
                span,
                source,
                position,
                Some(ev.ts),
                format!("field `{field}`: {why}"),
            );
            return Pushed::Malformed;
        }
        if ev.ts.0 > received_at.saturating_add(self.state.options.future_tolerance) {
            self.malformed_at(
                span,
                source,
                position,
                Some(ev.ts),
                format!(
                    "field `ts`: future timestamp {} is more than {} ahead of the time it was received ({})",
                    ev.ts,
                    crate::time::Duration(self.state.options.future_tolerance),
                    EventTime(received_at)
                ),
            );
            return Pushed::Malformed;
        }
        let prop = match ev.property {
            Some(name) => self.contract.property_index(name),
            None if self.contract.properties.len() == 1 => Some(0),
            None => {
                self.malformed_at(
                    span,
                    source,
                    position,
                    Some(ev.ts),
                    "field `property`: required when the contract declares more than one property"
                        .into(),
                );
                return Pushed::Malformed;
            }
        };
        self.state.valid += 1;
        self.state.max_ts = Some(self.state.max_ts.map_or(ev.ts.0, |m| m.max(ev.ts.0)));
        let mut flags = 0;
        for (cond, f) in [
            (ev.epoch.is_some(), HAS_EPOCH),
            (ev.order.is_some(), HAS_ORDER),
            (ev.seq.is_some(), HAS_SEQ),
            (ev.outcome == Outcome::Rejected, REJECTED),
        ] {
            if cond {
                flags |= f;
            }
        }
        // Only what is kept is interned: an unattributed event's holder and route are not, nor
        // a heartbeat's route (it matters only when declared: a declared route is interned at
        // start, an undeclared one is [`UNDECLARED`]).
        let opt = |live: &mut Live, s: Option<&str>| match s {
            Some(s) if prop.is_some() => live.intern(s),
            _ => NONE,
        };
        // An event with a `seq` of an emitter beyond `max_emitters`: set aside (module doc).
        let untracked = match (ev.emitter, ev.seq) {
            (Some(name), Some(_)) => {
                self.state.emitters.len() >= self.state.options.max_emitters
                    && !self
                        .name_id(name)
                        .is_some_and(|id| self.state.emitters.contains_key(&id))
            }
            _ => false,
        };
        // A span is kept only for an attributed event (as its names are). Its record's
        // position is its span id's 8 bytes (its WAL position is not its provenance), which
        // finds its other deliveries without reading the span table.
        let (span, position) = match span {
            Some(id) if prop.is_some() => (self.state.spans.add(id), spans::span_key(id)),
            _ => (NONE, position),
        };
        if untracked {
            return self.push_untracked(prop, ev, source, position, span);
        }
        let route = match ev.route {
            Some(r) if ev.kind == Kind::Heartbeat => self.name_id(r).unwrap_or(UNDECLARED),
            r => opt(self, r),
        };
        let rec = Ev {
            ts: ev.ts.0,
            epoch: ev.epoch.map_or(0, |e| e.0),
            order: ev.order.map_or(0, |o| o.0),
            inc: ev.incarnation.0,
            seq: ev.seq.map_or(0, |s| s.0),
            position,
            holder: opt(self, ev.holder),
            route,
            emitter: ev.emitter.map_or(NONE, |e| self.intern(e)),
            source,
            span,
            kind: ev.kind as u8,
            flags,
        };
        // Duplicates by (emitter, seq), over every valid event (the `dups` module).
        let keyed = rec.emitter != NONE && rec.has(HAS_SEQ);
        let seen = if keyed {
            self.settle_seq(prop, &rec, ev)
        } else {
            Seen::New
        };
        let outcome = match (seen, prop) {
            (Seen::Duplicate, _) => return Pushed::Duplicate,
            (_, None) => {
                self.state.unattributed += 1;
                Pushed::Unattributed
            }
            (Seen::Aside, Some(p)) => {
                self.count_aside(p, &rec);
                Pushed::Assessed
            }
            (Seen::New, Some(p)) => match self.push_attributed(p, rec, ev.scope) {
                Attributed::Applied { scope, reasons } => {
                    if keyed {
                        self.note_applied(&rec, scope, reasons);
                    }
                    Pushed::Assessed
                }
                Attributed::Duplicate => Pushed::Duplicate,
                Attributed::Aside => Pushed::Assessed,
            },
        };
        // The watermark is shared: every property moves with any valid event (their pending
        // decisions, finality and folding too).
        for p in 0..self.state.props.len() {
            self.advance(p);
        }
        self.sweep_names();
        self.sweep_spans();
        outcome
    }

    /// Sets aside a valid event with a `seq` of an emitter beyond [`LiveOptions::max_emitters`]:
    /// not applied, counted, and `unknown(telemetry_gap)` for its property in the window of its
    /// time (its seq cannot be tracked: lost telemetry as far as this partition can tell).
    /// Nothing of it is interned.
    fn push_untracked(
        &mut self,
        prop: Option<usize>,
        ev: &Event<'_>,
        source: u32,
        position: u64,
        span: u32,
    ) -> Pushed {
        let outcome = match prop {
            None => {
                self.state.unattributed += 1;
                self.state.untracked_unattributed += 1;
                Pushed::Unattributed
            }
            Some(p) => {
                let rec = Ev {
                    ts: ev.ts.0,
                    epoch: 0,
                    order: 0,
                    inc: ev.incarnation.0,
                    seq: ev.seq.map_or(0, |s| s.0),
                    position,
                    holder: NONE,
                    route: NONE,
                    emitter: NONE,
                    source,
                    span,
                    kind: ev.kind as u8,
                    flags: HAS_SEQ,
                };
                self.count_aside(p, &rec);
                self.state.props[p].tally.untracked_emitter_events += 1;
                let name = ev.emitter.unwrap_or_default();
                let max = self.state.options.max_emitters;
                self.raise(p, &rec, Reason::TelemetryGap, |_| {
                    let name = if name.len() > MAX_NAME_BYTES {
                        shortened(name)
                    } else {
                        name.to_string()
                    };
                    format!(
                        "emitter `{name}` not tracked: more than max_emitters ({max}) emitters; its events are set aside"
                    )
                });
                Pushed::Assessed
            }
        };
        for p in 0..self.state.props.len() {
            self.advance(p);
        }
        self.sweep_names();
        self.sweep_spans();
        outcome
    }

    /// Emitters tracked by this partition (at most [`LiveOptions::max_emitters`]).
    pub fn emitters_tracked(&self) -> usize {
        self.state.emitters.len()
    }

    /// Approximate resident bytes of the emitter table (entries, runs, recent deliveries,
    /// properties; names not included).
    pub fn emitters_bytes(&self) -> usize {
        let entry = std::mem::size_of::<(u32, Emitter)>() + 1;
        let heap = |e: &Emitter| {
            let runs = match &e.runs {
                Runs::One(..) => 0,
                // A B-tree node holds up to 11 runs.
                Runs::Many(m) => {
                    m.len().div_ceil(11) * (11 * std::mem::size_of::<(u64, Run)>() + 16)
                }
            };
            runs + e.recent.heap_bytes() + e.props.heap_bytes()
        };
        self.state.emitters.capacity() * entry
            + self.state.emitters.values().map(heap).sum::<usize>()
    }

    /// Counts `reason` for `rec`; the sample's detail is worded only while samples are kept.
    fn raise(&mut self, p: usize, rec: &Ev, reason: Reason, detail: impl FnOnce(&Live) -> String) {
        let wanted = self.state.props[p]
            .tally
            .samples
            .get(&reason)
            .is_none_or(|v| v.len() < SAMPLES_PER_REASON);
        let sample = wanted.then(|| Kept {
            source: self.provenance(rec),
            ts: Some(EventTime(rec.ts).to_string()),
            detail: detail(self),
        });
        let prop = &mut self.state.props[p].tally;
        prop.counts[reason as usize] += 1;
        prop.series.add_reason(rec.ts, reason);
        if let Some(sample) = sample {
            prop.samples.entry(reason).or_default().push(sample);
        }
    }

    /// Counts `reason` once for `rec`, placed on every window from `other` (the time of
    /// another delivery of its key) to `rec`'s.
    fn raise_span(
        &mut self,
        p: usize,
        rec: &Ev,
        other: i64,
        reason: Reason,
        detail: impl FnOnce(&Live) -> String,
    ) {
        self.raise(p, rec, reason, detail);
        let series = &mut self.state.props[p].tally.series;
        series.retract_reason(rec.ts, reason);
        // Its window is in the range already, as `check` has it, for the span not to be cut.
        series.cover(rec.ts);
        series.add_reason_span(other, rec.ts, reason);
    }

    fn withdraw(&mut self, p: usize, ts: i64, reason: Reason) {
        let prop = &mut self.state.props[p].tally;
        prop.counts[reason as usize] = prop.counts[reason as usize].saturating_sub(1);
        prop.series.retract_reason(ts, reason);
    }

    /// A route's index in property `p`'s declared routes: `None` without a route,
    /// `Some(None)` for an undeclared one.
    fn route_index(&self, p: usize, route: u32) -> Option<Option<usize>> {
        (route != NONE).then(|| {
            self.route_ids[p]
                .iter()
                .find(|(id, _)| *id == route)
                .map(|&(_, i)| i)
        })
    }

    /// The [`dups::STATIC_REASONS`] applying `rec` raises, by bit (`scoped`: it has a scope).
    fn static_reasons(&self, p: usize, rec: &Ev, scoped: bool) -> u8 {
        if !rec.committed_mutation() {
            return 0;
        }
        let mut m = u8::from(!scoped) | (u8::from(!rec.has(HAS_EPOCH)) << 1);
        match self.route_index(p, rec.route) {
            None => m |= 4,
            Some(None) => m |= 8,
            Some(Some(i)) if !self.contract.properties[p].routes[i].fenced => m |= 16,
            Some(Some(_)) => {}
        }
        m
    }

    fn push_attributed(&mut self, p: usize, rec: Ev, scope: Option<&str>) -> Attributed {
        let kind = rec.kind();
        // Duplicates by (scope, incarnation, order, epoch) among commit/fence events, first: a
        // delivery set aside takes no part (the `dups` module).
        if let Some(scope) = scope
            && kind.is_mutation()
            && rec.has(HAS_ORDER)
            && rec.has(HAS_EPOCH)
            && let Some(settled) = self.settle_order(p, &rec, scope)
        {
            return settled;
        }
        if let Some(scope) = scope
            && rec.span != NONE
            && kind != Kind::Heartbeat
            && let Some(settled) = self.settle_span(p, &rec, scope)
        {
            return settled;
        }
        {
            let prop = &mut self.state.props[p].tally;
            prop.max_ts = Some(prop.max_ts.map_or(rec.ts, |m| m.max(rec.ts)));
            prop.series.add_event(rec.ts);
            prop.events += 1;
            if kind.is_mutation() && rec.has(REJECTED) {
                prop.stale_rejections += 1;
            }
        }
        // Route observation.
        let route_idx = self.route_index(p, rec.route);
        if kind == Kind::Heartbeat || kind.is_mutation() {
            let prop = &mut self.state.props[p].tally;
            match route_idx {
                Some(Some(i)) => {
                    let k = prop.series.index(rec.ts);
                    let o = prop.routes[i].entry(k).or_insert(Obs {
                        min: rec.ts,
                        max: rec.ts,
                        count: 0,
                    });
                    o.min = o.min.min(rec.ts);
                    o.max = o.max.max(rec.ts);
                    o.count += 1;
                }
                Some(None) if kind.is_mutation() => {
                    // By name, as a summary carries it, the first ones (the others in one
                    // bucket): the verdict does not depend on it (`undeclared_route` is raised
                    // per event).
                    let name = &self.state.names[rec.route as usize];
                    count_undeclared(&mut prop.undeclared, name, 1);
                }
                Some(None) => prop.undeclared_heartbeats += 1,
                _ => {}
            }
        }
        let reasons = self.static_reasons(p, &rec, scope.is_some());
        if reasons != 0 {
            let k = kind.as_str();
            for (bit, reason) in dups::STATIC_REASONS.into_iter().enumerate() {
                if reasons & (1 << bit) == 0 {
                    continue;
                }
                self.raise(p, &rec, reason, |l| match reason {
                    Reason::MissingScope => format!("{k} without `scope`"),
                    Reason::MissingEpoch => format!("{k} without `epoch`"),
                    Reason::MissingRoute => format!("{k} without `route`"),
                    Reason::UndeclaredRoute => format!(
                        "route `{}` is not in the contract",
                        l.state.names[rec.route as usize]
                    ),
                    _ => format!(
                        "route `{}` is declared `fenced = false`",
                        l.state.names[rec.route as usize]
                    ),
                });
            }
        }
        let not_kept = Attributed::Applied {
            scope: NONE,
            reasons,
        };
        let Some(scope) = scope else { return not_kept };
        if kind == Kind::Heartbeat {
            return not_kept;
        }
        let horizon = self.state.props[p].horizon;
        let (scope_id, st) = self.state.props[p].scopes.get_or_insert(scope);
        let skew = self.contract.properties[p].clock_skew.0;
        let grants_required = self.contract.properties[p].grants == Grants::Required;
        let quiet = changes_nothing(st, &rec, skew, horizon)
            && grant_settled(st.folded_grants(), &rec, grants_required);
        let new = st.push(rec);
        // A commit older than the horizon whose holder check or grant requirement would need
        // grants dropped below the mark (an event arriving in order never does: SPEC §4).
        let needs_dropped_grants = rec.class() == 0
            && rec.ts < horizon
            && st.grants_unknown(rec.inc, rec.epoch)
            && ((rec.holder != NONE && !st.has_grant(rec.inc, rec.epoch, Some(rec.holder)))
                || (grants_required && !st.has_grant(rec.inc, rec.epoch, None)));
        self.state.props[p].scopes.note_kept();
        if rec.class() < 2 && !quiet {
            self.decide_scope(p, scope, Some(new), horizon);
        }
        if needs_dropped_grants {
            self.raise(p, &rec, Reason::LateEvidence, |_| {
                format!(
                    "epoch {} of scope `{scope}` arrived older than the retained horizon, and grants of that epoch were folded: whether it was granted to this holder is not known",
                    rec.epoch
                )
            });
        }
        Attributed::Applied {
            scope: scope_id,
            reasons,
        }
    }

    /// Re-decides one scope after a change; `new` is the index of the event just added.
    fn decide_scope(&mut self, p: usize, scope: &str, new: Option<usize>, horizon: i64) {
        let skew = self.contract.properties[p].clock_skew.0;
        let grants_required = self.contract.properties[p].grants == Grants::Required;
        let st = self.state.props[p].scopes.get(scope).expect("scope exists");
        self.slots.clear();
        for (i, e) in st.events().iter().enumerate() {
            if e.has(ASIDE) || e.class() == 2 {
                continue;
            }
            self.slots.push(Slot {
                inc: e.inc,
                epoch: e.epoch,
                ts: e.ts,
                order: e.order(),
                idx: i as u32,
                holder: e.holder,
                prop: 0,
                class: e.class(),
            });
        }
        // Folded grants at or above the mark take part as the kept events do.
        for (j, g) in st.folded_grants().iter().enumerate() {
            self.slots.push(Slot {
                inc: g.inc,
                epoch: g.epoch,
                ts: g.ts,
                order: g.order(),
                idx: FOLDED_IDX + j as u32,
                holder: g.holder,
                prop: 0,
                class: 1,
            });
        }
        let mark = st.evidence();
        if let Some(m) = mark {
            // The folded mark takes part as the earliest event of the highest folded epoch.
            self.slots.push(Slot {
                inc: m.incarnation,
                epoch: m.epoch,
                ts: m.first,
                order: st.mark_order(),
                idx: MARK_IDX,
                holder: NONE,
                prop: 0,
                class: 0,
            });
        }
        self.slots.sort_unstable_by_key(Slot::sort_key);
        let mut found = scope::decide_group(&self.slots, skew, &mut self.work);
        let ambiguous: Vec<u32> = found.ambiguous().to_vec();
        let ungranted = std::mem::take(&mut found.ungranted);
        let mut cxs = std::mem::take(&mut found.cxs);
        // Late events against the folded mark: where the sweep cannot be certain and the
        // exact answer needs folded detail.
        let mut late = Vec::new();
        if let Some(n) = new {
            let e = st.events()[n];
            if e.class() == 0 && e.ts < horizon.saturating_add(skew) && mark.is_some() {
                let j = st.judge(e.inc, e.epoch, e.ts, skew, horizon);
                if j == Judgement::Late && !cxs.iter().any(|c| c.1 == n as u32) {
                    late.push(n);
                }
            }
        }
        // Folded grants and the mark were decided when they were kept.
        cxs.retain(|c| c.1 < FOLDED_IDX);
        // A holder mismatch is final only once the watermark passed the commit: until then a
        // grant to its holder may still arrive.
        let wm = self.partition_watermark(p).0;
        let mut pending = Vec::new();
        cxs.retain(|c| {
            let waiting =
                c.0 == CounterexampleKind::HolderMismatch && st.events()[c.1 as usize].ts >= wm;
            if waiting {
                pending.push(st.events()[c.1 as usize].ts);
            }
            !waiting
        });
        for t in pending {
            self.state.props[p].pending.insert((t, scope.to_string()));
        }
        // Dynamic per-event reasons.
        let mut changes: Vec<(Ev, Reason, bool)> = Vec::new();
        let st = self.state.props[p]
            .scopes
            .get_mut(scope)
            .expect("scope exists");
        let mut toggles: Vec<(usize, u8)> = Vec::new();
        for (i, e) in st.events().iter().enumerate() {
            let amb = ambiguous.binary_search(&(i as u32)).is_ok();
            // Below the mark, with grants dropped, a missing grant is not known to be missing.
            let ungr = grants_required
                && !st.grants_unknown(e.inc, e.epoch)
                && e.class() == 0
                && ungranted.contains(&(i as u32));
            for (now, flag, reason) in [
                (amb, AMBIGUOUS, Reason::AmbiguousOrder),
                (ungr, UNGRANTED, Reason::UngrantedEpoch),
            ] {
                if now != e.has(flag) {
                    toggles.push((i, flag));
                    let mut after = *e;
                    after.flags ^= flag;
                    changes.push((after, reason, now));
                }
            }
        }
        for (i, flag) in toggles {
            st.toggle_flag(i, flag);
        }
        for (e, reason, now) in changes {
            if now {
                self.raise(p, &e, reason, |_| match reason {
                    Reason::AmbiguousOrder => format!(
                        "epoch {} of scope `{scope}` has a higher-epoch or higher-incarnation partner within the clock skew and no `order` to decide",
                        e.epoch
                    ),
                    _ => format!("epoch {} of scope `{scope}` was never granted", e.epoch),
                });
            } else {
                self.withdraw(p, e.ts, reason);
            }
        }
        for n in late {
            let e = self.state.props[p].scopes[scope].events()[n];
            self.raise(p, &e, Reason::LateEvidence, |_| format!(
                "epoch {} of scope `{scope}` arrived older than the retained horizon; its order against folded epochs is not known", e.epoch
            ));
        }
        if cxs.is_empty() {
            return;
        }
        let prop_name = self.contract.properties[p].name.clone();
        let events = self.state.props[p].scopes[scope].events();
        let folded = self.state.props[p].scopes[scope].folded_grants();
        let mut by_time: Vec<u32> = (0..events.len() as u32).collect();
        by_time.sort_unstable_by_key(|&i| (events[i as usize].ts, i));
        let mut out = Vec::new();
        for (kind, stale, witness) in cxs {
            let s = events[stale as usize];
            let prov = match self.state.spans.get(s.span) {
                // The span alone: the same id however often, and wherever, it is delivered.
                Some(_) if s.span != NONE => Provenance {
                    source: self.provenance(&s),
                    position: 0,
                },
                _ => Provenance {
                    source: self.state.sources[s.source as usize].clone(),
                    position: s.position,
                },
            };
            let id = counterexample_id(&prop_name, kind, scope, s.inc, &prov);
            let upto = by_time.partition_point(|&i| (events[i as usize].ts, i) <= (s.ts, stale));
            let context = by_time[upto.saturating_sub(crate::history::CONTEXT_EVENTS)..upto]
                .iter()
                .map(|&i| events[i as usize])
                .collect();
            let (witness, m) = match witness {
                MARK_IDX => (None, mark),
                w if w >= FOLDED_IDX => (Some(folded[(w - FOLDED_IDX) as usize]), None),
                w => (Some(events[w as usize]), None),
            };
            out.push(Cx {
                id,
                kind,
                scope: scope.to_string(),
                stale: s,
                witness,
                mark: m,
                context,
                is_final: false,
                withdrawn: None,
                former: Vec::new(),
            });
        }
        for cx in out {
            self.record_cx(p, cx);
        }
    }

    /// Moves the property's horizon with its watermark and folds what fell behind it. Folding
    /// visits every scope, so it runs only when the horizon moved by a window or more.
    fn advance(&mut self, p: usize) {
        let wm = self.partition_watermark(p).0;
        self.settle_pending(p, wm);
        let prop_c = &self.contract.properties[p];
        let retention = self
            .state
            .options
            .retention
            .unwrap_or(prop_c.allowed_lateness.0);
        let width = prop_c.window.0;
        let horizon = wm.saturating_sub(retention);
        let prop = &mut self.state.props[p];
        prop.tally.series.advance_watermark(EventTime(wm));
        if horizon == i64::MIN || horizon.saturating_sub(prop.horizon) < width {
            return;
        }
        prop.horizon = horizon;
        let skew = prop_c.clock_skew.0;
        let names = &self.state.names;
        let key_of = |e: &Ev| {
            if e.emitter == NONE || !e.has(HAS_SEQ) {
                return 0;
            }
            names
                .get(e.emitter as usize)
                .map_or(0, |n| scopes::key_hash(n, e.seq))
        };
        prop.scopes.fold(horizon, skew, &key_of);
        // No kept event is older than the horizon now: a dropped counterexample's stale event
        // older than it can no longer be found again.
        prop.dropped = prop.dropped.split_off(&(horizon, 0));
        self.finalize_cxs(p);
        // Per-emitter content hashes fall out with the horizon too.
        let min_horizon = self
            .state
            .props
            .iter()
            .map(|p| p.horizon)
            .min()
            .unwrap_or(i64::MIN);
        for e in self.state.emitters.values_mut() {
            e.recent.forget_before(min_horizon);
        }
    }

    /// Decides the holder mismatches whose commit the watermark passed.
    fn settle_pending(&mut self, p: usize, wm: i64) {
        let prop = &mut self.state.props[p];
        if prop.pending.first().is_none_or(|(t, _)| *t >= wm) {
            return;
        }
        let rest = prop.pending.split_off(&(wm, String::new()));
        let due = std::mem::replace(&mut prop.pending, rest);
        let mut scopes: Vec<String> = due.into_iter().map(|(_, s)| s).collect();
        scopes.sort_unstable();
        scopes.dedup();
        let horizon = self.state.props[p].horizon;
        for scope in scopes {
            if self.state.props[p].scopes.contains(&scope) {
                self.decide_scope(p, &scope, None, horizon);
            }
        }
    }

    /// Ends the input: the end of input is the end of time (as in `check`), every window is
    /// final and pending decisions are made. For finite inputs such as `serve --ingest-file`
    /// without `--follow`, and tests.
    pub fn close(&mut self) {
        self.state.closed = true;
        for p in 0..self.state.props.len() {
            self.settle_pending(p, i64::MAX);
            self.finalize_cxs(p);
            self.state.props[p]
                .tally
                .series
                .advance_watermark(EventTime::MAX);
        }
    }

    fn event_view(&self, e: &Ev) -> EventView {
        let s = |id: u32| self.name(id).map(str::to_string);
        EventView {
            kind: e.kind().as_str(),
            ts: EventTime(e.ts).to_string(),
            epoch: e.epoch(),
            incarnation: e.inc,
            order: e.order(),
            route: s(e.route),
            holder: s(e.holder),
            outcome: if e.has(REJECTED) {
                Outcome::Rejected.as_str()
            } else {
                Outcome::Committed.as_str()
            },
            emitter: s(e.emitter),
            seq: e.has(HAS_SEQ).then_some(e.seq),
            source: self.provenance(e),
        }
    }

    fn render(&self, p: usize, cx: &Cx) -> Counterexample {
        let stale = self.event_view(&cx.stale);
        let superseding = match (&cx.witness, cx.mark) {
            (Some(w), _) => self.event_view(w),
            (None, Some(m)) => EventView {
                kind: "commit",
                ts: EventTime(m.first).to_string(),
                epoch: Some(m.epoch),
                incarnation: m.incarnation,
                order: None,
                route: None,
                holder: None,
                outcome: Outcome::Committed.as_str(),
                emitter: None,
                seq: None,
                source: "folded high-water mark".into(),
            },
            (None, None) => unreachable!("a counterexample has a witness or a mark"),
        };
        Counterexample {
            id: cx.id.clone(),
            kind: cx.kind,
            property: self.contract.properties[p].name.clone(),
            scope: cx.scope.clone(),
            incarnation: cx.stale.inc,
            explanation: scope::explain(cx.kind, &cx.scope, &stale, &superseding),
            stale,
            superseding,
            context: cx.context.iter().map(|e| self.event_view(e)).collect(),
            is_final: cx.is_final,
            withdrawn: cx.withdrawn,
            at: cx.stale.ts,
        }
    }
}

/// A partition's watermark of a property whose `allowed_lateness` is `lateness` (SPEC §4
/// "Watermark"): its greatest valid event time (over all properties) minus the lateness,
/// `EventTime::MIN` before any event, `EventTime::MAX` once the input ended.
fn partition_watermark(max_ts: Option<i64>, closed: bool, lateness: i64) -> EventTime {
    if closed {
        return EventTime::MAX;
    }
    match max_ts {
        Some(t) => EventTime(t.saturating_sub(lateness)),
        None => EventTime::MIN,
    }
}

/// Whether adding `rec` to the scope can change no finding, so the scope need not be decided
/// again: the steady case of an owner committing with the highest epoch, later than everything
/// the scope holds by more than the skew. Then `rec` has no higher partner (neither stale nor
/// ambiguous), precedes nothing (supersedes no one, witnesses nothing), and shares its epoch with
/// no other holder (no reuse). Grants and `order` take the full path.
fn changes_nothing(st: &scopes::ScopeState, rec: &Ev, skew: i64, horizon: i64) -> bool {
    if rec.class() != 0 || rec.has(HAS_ORDER) || rec.ts < horizon.saturating_add(skew) {
        return false;
    }
    let key = (rec.inc, rec.epoch);
    let before = |ts: i64| ts.saturating_add(skew) < rec.ts;
    if let Some(m) = st.evidence()
        && ((m.incarnation, m.epoch) > key || !before(m.first))
    {
        return false;
    }
    let Some(s) = st.summary() else {
        return true;
    };
    !s.grants
        && !s.ordered
        && match s.top {
            None => true,
            Some(top) => {
                top <= key
                    && before(s.max_ts)
                    && (top != key
                        || rec.holder == NONE
                        || s.top_holder == NONE
                        || s.top_holder == rec.holder)
            }
        }
}

/// Whether the folded grants settle the grant checks of `rec` (a commit that
/// [`changes_nothing`] lets through, with no grant among the kept events): no holder mismatch
/// and, when grants are required, granted.
fn grant_settled(folded: &[Ev], rec: &Ev, required: bool) -> bool {
    let mut granted = false;
    let mut holders = false;
    let mut matched = false;
    for g in folded
        .iter()
        .filter(|g| (g.inc, g.epoch) == (rec.inc, rec.epoch))
    {
        granted = true;
        holders |= g.holder != NONE;
        matched |= g.holder != NONE && g.holder == rec.holder;
    }
    let no_mismatch = rec.holder == NONE || !holders || matched;
    no_mismatch && (granted || !required)
}

fn content_hash(ev: &Event<'_>) -> u64 {
    let mut h = xxhash_rust::xxh3::Xxh3Default::new();
    let mut put = |b: &[u8]| {
        h.update(&(b.len() as u32).to_le_bytes());
        h.update(b);
    };
    put(ev.kind.as_str().as_bytes());
    put(ev.outcome.as_str().as_bytes());
    put(ev.property.unwrap_or("\u{0}").as_bytes());
    put(ev.scope.unwrap_or("\u{0}").as_bytes());
    put(&ev.incarnation.0.to_le_bytes());
    put(&ev.epoch.map_or([0xff; 9], |e| widen(e.0)));
    put(&ev.order.map_or([0xff; 9], |o| widen(o.0)));
    put(ev.holder.unwrap_or("\u{0}").as_bytes());
    put(ev.route.unwrap_or("\u{0}").as_bytes());
    put(&ev.ts.0.to_le_bytes());
    h.digest()
}

/// Counts `n` events on undeclared route `name` in `table`: by name for the first
/// [`UNDECLARED_ROUTES_KEPT`] names, under [`OTHER_UNDECLARED_ROUTES`] after.
pub(super) fn count_undeclared(table: &mut BTreeMap<String, u64>, name: &str, n: u64) {
    if let Some(m) = table.get_mut(name) {
        *m += n;
        return;
    }
    let named = table.len() - usize::from(table.contains_key(OTHER_UNDECLARED_ROUTES));
    let key = if named < UNDECLARED_ROUTES_KEPT {
        name
    } else {
        OTHER_UNDECLARED_ROUTES
    };
    *table.entry(key.to_string()).or_default() += n;
}

/// A name longer than [`MAX_NAME_BYTES`] as kept: its first [`MAX_NAME_BYTES`] bytes (to a
/// character boundary), then `…[N bytes, xxh3-128 HASH]` — always longer than
/// [`MAX_NAME_BYTES`], so never equal to a name kept whole.
fn shortened(s: &str) -> String {
    let mut end = MAX_NAME_BYTES;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!(
        "{}…[{} bytes, xxh3-128 {:032x}]",
        &s[..end],
        s.len(),
        xxhash_rust::xxh3::xxh3_128(s.as_bytes())
    )
}

fn widen(v: u64) -> [u8; 9] {
    let mut out = [0u8; 9];
    out[..8].copy_from_slice(&v.to_le_bytes());
    out
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
            r.end_ts = ts;
        }
        (None, Some(a)) => {
            runs.remove(&(seq + 1));
            runs.insert(
                seq,
                Run {
                    end: a.end,
                    start_ts: ts,
                    end_ts: a.end_ts,
                },
            );
        }
        (None, None) => {
            runs.insert(
                seq,
                Run {
                    end: seq,
                    start_ts: ts,
                    end_ts: ts,
                },
            );
        }
    }
}
