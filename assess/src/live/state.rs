//! The state of one partition's assessor: [`LiveState`] (what a checkpoint saves) and [`Live`]
//! around it, with their constructors and plain accessors. What changes the state is in the
//! sibling modules, each an `impl Live` of one concern.

use super::emitters::Emitter;
use super::scopes::Scopes;
use super::spans::Spans;
use super::tally::{Kept, Tally};
use crate::contract::{Compiled, Contract};
use crate::finding::CounterexampleKind;
use crate::rules::{OWN_PROVENANCE, Rec, RouteIds};
use crate::scope::{self, Slot};
use crate::time::EventTime;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};

/// Names (holders, routes, emitters) longer than this are kept shortened: their first bytes,
/// their length and a 128-bit hash of the whole (the `names` module).
pub const MAX_NAME_BYTES: usize = 256;
/// The name table is swept of names nothing retained refers to when it holds more than twice
/// the names alive after the last sweep, and at least this many.
pub(super) const NAMES_SWEEP_MIN: usize = 1 << 16;
/// The route id of a heartbeat on a route the contract lacks: not interned.
pub(super) const UNDECLARED: u32 = u32::MAX - 3;

/// Heap bytes a name costs: its string in the table and its copy in the lookup table, each
/// with the allocator's header, rounded as it rounds (16 bytes; none for an empty name).
pub(super) fn heap_of(name: &str) -> usize {
    if name.is_empty() {
        return 0;
    }
    2 * (name.len() + 8).next_multiple_of(16).max(32)
}

/// The default of [`LiveOptions::max_emitters`].
pub const DEFAULT_MAX_EMITTERS: usize = 1_000_000;
/// The default of [`Live::set_max_seq_fragments`]: runs of seqs beyond each emitter's first,
/// over a partition (a run costs about 48 bytes).
pub const DEFAULT_MAX_SEQ_FRAGMENTS: usize = 1_000_000;
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
    /// beyond them is set aside as lost telemetry (the `emitters` module).
    pub max_emitters: usize,
    /// Counterexamples kept in full per property (per partition); beyond, the oldest final
    /// ones lose their detail but still count (the `cxs` module).
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

/// A counterexample's key: (stale event time, id).
pub(super) type CxKey = (i64, String);

/// A counterexample as kept: events by value, rendered on query.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Cx {
    pub(super) id: String,
    pub(super) kind: CounterexampleKind,
    pub(super) scope: String,
    pub(super) stale: Rec,
    /// `None`: the scope's folded high-water mark.
    pub(super) witness: Option<Rec>,
    pub(super) mark: Option<crate::tracker::Mark>,
    pub(super) context: Vec<Rec>,
    /// See [`Counterexample::is_final`](crate::finding::Counterexample::is_final) and the `cxs` module.
    pub(super) is_final: bool,
    pub(super) withdrawn: Option<crate::finding::Withdrawal>,
    /// An epoch reuse's former representatives whose windows it still refutes, one per
    /// window, none in the stale event's window; emptied once final (the `cxs` module).
    pub(super) former: Vec<Rec>,
    /// Wall time (ns) of the batch in which it was found: the time the batch was received.
    pub(super) found_at: i64,
    /// An epoch reuse's: xxh3-64 of the ids its group settled under before this
    /// representative took over (the `cxs` module), so that no id settles twice.
    pub(super) settled_ids: Vec<u64>,
}

impl Cx {
    /// Every event it holds: stale, witness, context, former representatives.
    pub(super) fn events(&self) -> impl Iterator<Item = &Rec> {
        [&self.stale]
            .into_iter()
            .chain(self.witness.as_ref())
            .chain(&self.context)
            .chain(&self.former)
    }
}

/// One property's state in one partition: the mergeable [`Tally`] that queries read (and a
/// [`Summary`](super::Summary) exports), the counterexamples, and the per-scope state that stays local.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Prop {
    pub(super) scopes: Scopes,
    pub(super) tally: Tally,
    /// By (stale event time, id); rendered when queried (or exported in a [`Summary`](super::Summary)).
    pub(super) cxs: BTreeMap<CxKey, Cx>,
    /// Events older than this are folded.
    pub(super) horizon: i64,
    /// Holder mismatches waiting for the watermark to pass the commit (a matching grant may
    /// still arrive): (commit time, scope).
    pub(super) pending: std::collections::BTreeSet<(i64, String)>,
    /// Provisional counterexamples by (due time, key): final once the horizon passes the due
    /// time (see the `cxs` module).
    pub(super) provisional: std::collections::BTreeSet<(i64, CxKey)>,
    /// How many of `cxs` are withdrawn.
    pub(super) withdrawn: usize,
    /// Withdrawn counterexamples by (due time, key) until the horizon passes their due time:
    /// then they can no longer be found again and are settled (the `cxs` module).
    pub(super) withdrawn_due: std::collections::BTreeSet<(i64, CxKey)>,
    /// Final counterexamples whose detail was dropped ([`LiveOptions::max_counterexamples`])
    /// while their stale event may still be kept, so that finding one again changes nothing:
    /// (stale event time, xxh3-64 of the id) -> the epoch reuse group's hash (0 for other
    /// kinds). Pruned when the horizon folds their stale events (the `cxs` module).
    pub(super) dropped: BTreeMap<(i64, u64), u64>,
    /// Applied attestations with an (emitter, seq), by that key: what a conflicting later
    /// delivery takes back (the `premises` module). Pruned with the horizon.
    pub(super) keyed_attests: BTreeMap<(u32, u64), (u16, crate::premise::Attestation)>,
    /// Applied attestations delivered as spans without an (emitter, seq), by span id: their
    /// time, and their premise and support (`None`: ignored, no premise of the contract), what
    /// a conflicting later delivery of the span takes back. Pruned with the horizon.
    pub(super) span_attests:
        BTreeMap<super::spans::SpanId, (i64, Option<(u16, crate::premise::Attestation)>)>,
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
    /// A delivery of a kept span with other content (SPEC §8): assessed as `Assessed`'s
    /// conflicting deliveries are (both set aside, `conflicting_duplicate`), and not archived
    /// again, the span's source being the first delivery's.
    SpanAgain,
    /// Valid but naming no property of the contract.
    Unattributed,
    /// Malformed: counted as evidence (`malformed_event`).
    Malformed,
}

/// A counterexample as the archive writes it: rendered, with the wall time it was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settled {
    /// The counterexample (`is_final`, or `withdrawn`, once settled).
    pub counterexample: crate::finding::Counterexample,
    /// Wall time (ns) of the batch in which it was found (received).
    pub found_at: i64,
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
    pub(super) fingerprint: u64,
    pub(super) options: LiveOptions,
    /// Holder, route and emitter names by id; a freed slot is empty and listed in `free_names`.
    pub(super) names: Vec<String>,
    /// Ids of `names` freed by the last sweeps, reused first.
    pub(super) free_names: Vec<u32>,
    /// Sweep the name table when it holds more live names than this.
    pub(super) names_sweep_at: u64,
    pub(super) sources: Vec<String>,
    /// Per source, the greatest position pushed (file ingest resumes after it).
    pub(super) progress: Vec<u64>,
    /// The own provenance records refer to ([`Rec::span`]).
    pub(super) spans: Spans,
    pub(super) props: Vec<Prop>,
    pub(super) emitters: super::segmap::SegMap<u32, Emitter>,
    pub(super) max_ts: Option<i64>,
    pub(super) valid: u64,
    pub(super) malformed: u64,
    pub(super) unattributed: u64,
    pub(super) duplicates: u64,
    /// Unattributed events with a `seq` of emitters beyond [`LiveOptions::max_emitters`].
    pub(super) untracked_unattributed: u64,
    pub(super) malformed_samples: VecDeque<Kept>,
    /// The input ended: the end of input is the end of time, every window final.
    pub(super) closed: bool,
    /// The deliveries of spans no scope keeps, by span id (the `spans` module).
    pub(super) unkept_spans: super::spans::UnkeptSpans,
    /// The duplicate keys whose deliveries conflicted (the `conflicts` module).
    pub(super) conflicts: super::conflicts::Conflicts,
    /// The order keys of deliveries set aside on arrival (the `aside` module).
    pub(super) aside_orders: super::aside::AsideOrders,
    /// Deliveries dropped as equal to a kept event by one key, by their other keys (the
    /// `aside` module).
    pub(super) links: super::aside::Links,
    /// Applied attestations' (emitter, seq) deliveries behind the lowest horizon (the
    /// `emitters` module).
    pub(super) late_attests: super::emitters::LateAttests,
}

impl LiveState {
    /// The delivery of (`em`, `seq`) its re-deliveries are settled against: in its emitter's
    /// recent deliveries, or an attestation's behind the horizon.
    pub(super) fn delivery(&self, em: u32, seq: u64) -> Option<super::emitters::Delivery> {
        (self.emitters.get(&em))
            .and_then(|e| e.recent.get(seq))
            .or_else(|| self.late_attests.get(em, seq))
    }

    /// [`LiveState::delivery`], to change.
    pub(super) fn delivery_mut(
        &mut self,
        em: u32,
        seq: u64,
    ) -> Option<&mut super::emitters::Delivery> {
        let recent = (self.emitters.get(&em)).is_some_and(|e| e.recent.get(seq).is_some());
        if recent {
            return self.emitters.get_mut(&em)?.recent.get_mut(seq);
        }
        self.late_attests.get_mut(em, seq)
    }

    /// Whether one of the tables kept until the lowest horizon passes their entries (spans no
    /// scope keeps, links, noted order keys, conflicts) is due a sweep.
    pub(super) fn aged_sweep_due(&self) -> bool {
        self.unkept_spans.needs_sweep()
            || self.links.needs_sweep()
            || self.aside_orders.needs_sweep()
            || self.conflicts.needs_sweep()
    }

    /// Sweeps those of them that are due, `horizon` the lowest horizon of the properties.
    pub(super) fn sweep_aged(&mut self, horizon: i64) {
        if self.unkept_spans.needs_sweep() {
            self.unkept_spans.sweep(horizon);
        }
        if self.links.needs_sweep() {
            // A link of an attestation's (emitter, seq) kept behind the horizon stays with it.
            let late = &self.late_attests;
            self.links.sweep_keeping(horizon, |k| match *k {
                super::aside::LinkKey::Seq(em, seq) => late.contains(em, seq),
                super::aside::LinkKey::Span(_) => false,
            });
        }
        if self.aside_orders.needs_sweep() {
            self.aside_orders.sweep(horizon);
        }
        if self.conflicts.needs_sweep() {
            // So does the conflict of such a key (its later deliveries are placed by it).
            let late = &self.late_attests;
            self.conflicts.sweep_keeping(horizon, |k| match *k {
                super::conflicts::ConflictKey::Seq(em, seq) => late.contains(em, seq),
                _ => false,
            });
        }
    }
}

/// The live assessor of one partition.
#[derive(Debug)]
pub struct Live {
    pub(super) contract: Contract,
    pub(super) compiled: Compiled,
    pub(super) state: LiveState,
    pub(super) name_ids: super::segmap::SegMap<String, u32>,
    /// The front of `name_ids` for short names (the `names` module), cleared whenever a sweep
    /// frees a name.
    pub(super) name_cache: crate::intern::NameCache,
    /// Heap bytes of the names' strings, in the table and in `name_ids` (the `names` module).
    pub(super) name_heap: usize,
    pub(super) route_ids: RouteIds,
    pub(super) work: scope::Workspace,
    pub(super) slots: Vec<Slot>,
    pub(super) new_cxs: Vec<NewCounterexample>,
    pub(super) withdrawn_cxs: Vec<NewCounterexample>,
    /// Every change of a scope takes the full decision ([`Live::set_reference_decisions`]).
    pub(super) reference: bool,
    /// Full decisions made ([`Live::full_decisions`]).
    pub(super) full_decisions: u64,
    /// Runs of seqs beyond each emitter's first, over every emitter ([`Live::seq_fragments`]).
    pub(super) seq_fragments: usize,
    /// The bound on them ([`Live::set_max_seq_fragments`]).
    pub(super) max_seq_fragments: usize,
    /// Counterexamples settled (final, or withdrawn for good) since the last
    /// [`Live::take_settled_counterexamples`], when [`Live::collect_settled`] asked for them.
    pub(super) settled: Option<Vec<Settled>>,
    /// The receive time of the event being pushed (a counterexample's `found_at`).
    pub(super) received_at: i64,
    /// The kept deliveries of spans by span id (the `spans` module), built from the state.
    pub(super) span_index: super::spans::SpanIndex,
    /// The emitters whose recent window keeps deliveries, which the horizon's moves walk
    /// (`horizon.rs`; every emitter, idle ones included, took 18 ms at 1M emitters), built
    /// from the state: an emitter is added when a delivery goes into its empty window and
    /// dropped when the horizon empties it.
    pub(super) recent_emitters: Vec<u32>,
    /// Sweeps of the name table run ([`Live::name_sweeps`]).
    pub(super) name_sweeps: u64,
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
        // Only when declared, so contracts without premises keep their fingerprints.
        for q in &p.premises {
            s.push_str(&format!(
                "premise {}@{}:{};",
                q.name,
                q.route.as_deref().unwrap_or(""),
                q.max_age.0
            ));
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
                tally: Tally::new(p),
                cxs: BTreeMap::new(),
                horizon: i64::MIN,
                pending: Default::default(),
                provisional: Default::default(),
                withdrawn: 0,
                withdrawn_due: Default::default(),
                dropped: BTreeMap::new(),
                keyed_attests: BTreeMap::new(),
                span_attests: BTreeMap::new(),
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
            spans: Spans::default(),
            props,
            emitters: Default::default(),
            max_ts: None,
            valid: 0,
            malformed: 0,
            unattributed: 0,
            duplicates: 0,
            untracked_unattributed: 0,
            malformed_samples: VecDeque::new(),
            closed: false,
            unkept_spans: Default::default(),
            conflicts: Default::default(),
            aside_orders: Default::default(),
            links: Default::default(),
            late_attests: Default::default(),
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
        let name_ids: super::segmap::SegMap<String, u32> = state
            .names
            .iter()
            .enumerate()
            .filter(|&(i, _)| !free[i])
            .map(|(i, s)| (s.clone(), i as u32))
            .collect();
        let name_heap = name_ids.keys().map(|s| heap_of(s)).sum();
        let mut live = Live {
            contract,
            compiled,
            state,
            name_ids,
            name_cache: crate::intern::NameCache::new(),
            name_heap,
            route_ids: RouteIds::default(),
            work: scope::Workspace::default(),
            slots: Vec::new(),
            new_cxs: Vec::new(),
            withdrawn_cxs: Vec::new(),
            reference: false,
            full_decisions: 0,
            seq_fragments: 0,
            max_seq_fragments: DEFAULT_MAX_SEQ_FRAGMENTS,
            settled: None,
            received_at: 0,
            span_index: Default::default(),
            recent_emitters: Vec::new(),
            name_sweeps: 0,
        };
        live.index_spans();
        live.recent_emitters = (live.state.emitters.iter())
            .filter(|(_, e)| !e.recent.is_empty())
            .map(|(&em, _)| em)
            .collect();
        live.recent_emitters.sort_unstable();
        live.seq_fragments = (live.state.emitters.values())
            .map(|e| e.runs.fragments())
            .sum();
        let contract = live.contract.clone();
        live.route_ids = RouteIds::new(&contract, |name| Some(live.intern(name)));
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

    /// With `on`, every change of a scope takes the full decision (`scope::decide_group` over
    /// every event the scope keeps), never the fast path of the `fast` module: the reference
    /// the fast path is tested against, and a measure of what it saves. Not part of the state.
    pub fn set_reference_decisions(&mut self, on: bool) {
        self.reference = on;
    }

    /// Bounds the runs of seqs beyond each emitter's first, over this partition (the
    /// `emitters` module): once `max` are kept, an event whose seq would open another run is
    /// set aside as `unknown(telemetry_gap)`. Not part of the state (a restored assessor counts
    /// its runs again).
    pub fn set_max_seq_fragments(&mut self, max: usize) {
        self.max_seq_fragments = max;
    }

    /// Runs of seqs kept beyond each emitter's first (one per gap still open).
    pub fn seq_fragments(&self) -> usize {
        self.seq_fragments
    }

    /// How many full decisions of a scope this assessor made (since it was made or restored):
    /// what the fast path could not settle. Not part of the state.
    pub fn full_decisions(&self) -> u64 {
        self.full_decisions
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
        let id = u32::try_from(self.state.sources.len())
            .ok()
            .filter(|&i| i < OWN_PROVENANCE)
            .expect("fewer than 2^31 sources");
        self.state.sources.push(name.to_string());
        self.state.progress.push(0);
        id
    }

    /// Every source with the greatest position pushed from it (a file's last line read).
    pub fn sources_progress(&self) -> impl Iterator<Item = (&str, u64)> {
        let progress = self.state.progress.iter().copied();
        self.state.sources.iter().map(String::as_str).zip(progress)
    }

    pub(super) fn note_position(&mut self, source: u32, position: u64) {
        let p = &mut self.state.progress[source as usize];
        *p = (*p).max(position);
    }

    /// Counterexamples found since the last call.
    pub fn take_new_counterexamples(&mut self) -> Vec<NewCounterexample> {
        std::mem::take(&mut self.new_cxs)
    }

    /// Scopes with resident state, over all properties.
    pub fn active_scopes(&self) -> usize {
        self.state.props.iter().map(|p| p.scopes.len()).sum()
    }

    /// Approximate bytes of the resident state: per-scope state, the emitter table, the
    /// name table (holders, routes, emitters) and the span table and index. The emitters are
    /// summed over (at most [`LiveOptions::max_emitters`]); the rest is kept as totals.
    pub fn state_bytes(&self) -> usize {
        let scopes: usize = self.state.props.iter().map(|p| p.scopes.heap_bytes()).sum();
        let spans = self.state.spans.heap_bytes()
            + self.span_index.heap_bytes()
            + self.state.unkept_spans.heap_bytes()
            + self.state.conflicts.heap_bytes()
            + self.state.aside_orders.heap_bytes()
            + self.state.links.heap_bytes()
            + self.state.late_attests.heap_bytes();
        scopes + self.emitters_bytes() + self.names_bytes() + spans
    }

    /// Approximate heap bytes of the name table: its slots, the lookup table of names to ids
    /// (each name is held twice) and the strings.
    pub fn names_bytes(&self) -> usize {
        let entry = std::mem::size_of::<(String, u32)>() + 1;
        self.state.names.capacity() * std::mem::size_of::<String>()
            + self.name_ids.capacity() * entry
            + self.name_heap
    }

    /// This partition's own watermark of property `p`, as the assessor moves with it.
    pub(super) fn partition_watermark(&self, p: usize) -> EventTime {
        partition_watermark(
            self.state.max_ts,
            self.state.closed,
            self.contract.properties[p].allowed_lateness.0,
        )
    }

    /// Span ids held: those kept events and counterexamples refer to, up to twice that (the
    /// `spans` module).
    pub fn spans_held(&self) -> usize {
        self.state.spans.len()
    }

    /// Deliveries of spans no scope keeps held for their re-deliveries to be compared with:
    /// those at or after the lowest horizon, up to twice that (at least 65,536; the `spans`
    /// module).
    pub fn unkept_spans_held(&self) -> usize {
        self.state.unkept_spans.len()
    }

    /// Emitters tracked by this partition (at most [`LiveOptions::max_emitters`]).
    pub fn emitters_tracked(&self) -> usize {
        self.state.emitters.len()
    }

    /// Emitters listed as keeping deliveries in their recent window (those the horizon's
    /// moves walk).
    pub fn emitters_with_deliveries(&self) -> usize {
        self.recent_emitters.len()
    }

    /// Approximate resident bytes of the emitter table (entries, runs, recent deliveries,
    /// properties; names not included).
    pub fn emitters_bytes(&self) -> usize {
        let entry = std::mem::size_of::<(u32, Emitter)>() + 1;
        self.state.emitters.capacity() * entry
            + self
                .state
                .emitters
                .values()
                .map(Emitter::heap_bytes)
                .sum::<usize>()
    }
}

/// A partition's watermark of a property whose `allowed_lateness` is `lateness` (SPEC §4
/// "Watermark"): its greatest valid event time (over all properties) minus the lateness,
/// `EventTime::MIN` before any event, `EventTime::MAX` once the input ended.
pub(super) fn partition_watermark(max_ts: Option<i64>, closed: bool, lateness: i64) -> EventTime {
    if closed {
        return EventTime::MAX;
    }
    match max_ts {
        Some(t) => EventTime(t.saturating_sub(lateness)),
        None => EventTime::MIN,
    }
}
