//! Exact assessment of a whole history, in any arrival order (SPEC §4 "Offline check").
//!
//! Events are pushed in reading order (one by one, or as [`Batch`]es that decoding threads
//! build) and kept as compact fixed-size records with interned strings; a scope is kept as its
//! name and a 128-bit hash, with no table to look it up in while reading. Reading also notes
//! each emitter's seqs. Nothing is decided until [`History::finish`], when the end of input is
//! the end of time. `finish` then
//! 1. settles duplicates by `(emitter, seq)` and `(scope, incarnation, order, epoch)`: equal
//!    deliveries keep one, differing ones are all set aside as `conflicting_duplicate`;
//! 2. finds telemetry gaps per emitter (sorting by seq only emitters whose seqs went back);
//! 3. raises per-event reasons, groups events by `(property, scope)` and runs the supersession
//!    sweeps of the `scope` module over each group, on all threads;
//! 4. places route silence and malformed events in windows.

use crate::contract::{Compiled, Contract, Grants};
use crate::event::{Event, Kind, Outcome};
use crate::finding::{Counterexample, EventView, Provenance, Reason, Verdict, counterexample_id};
use crate::intern::Interner;
use crate::report::{
    ContractSummary, EmitterReport, PropertyReport, Report, RouteCoverage, Sample, UndeclaredRoute,
};
use crate::scope::{self, Slot};
use crate::time::EventTime;
use crate::window::WindowSeries;
use std::collections::BTreeMap;

const NONE: u32 = u32::MAX;
const UNATTRIBUTED: u16 = u16::MAX;
const HAS_EPOCH: u8 = 1;
const HAS_ORDER: u8 = 2;
const HAS_SEQ: u8 = 4;
const REJECTED: u8 = 8;
const DUP: u8 = 16;
const ASIDE: u8 = 32;
const HAS_SCOPE: u8 = 64;

/// Samples kept per (property, reason).
pub const SAMPLES_PER_REASON: usize = 3;
/// Malformed events whose message is kept.
pub const MALFORMED_SAMPLES: usize = 100;
/// Events shown as a counterexample's context.
pub const CONTEXT_EVENTS: usize = 5;
/// Windows listed one by one before the timeline is shown as runs.
pub const MAX_LISTED_WINDOWS: u64 = 10_000;

/// One valid event, 72 bytes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rec {
    pub(crate) ts: i64,
    pub(crate) epoch: u64,
    pub(crate) order: u64,
    pub(crate) incarnation: u64,
    pub(crate) seq: u64,
    pub(crate) position: u64,
    pub(crate) scope: u32,
    pub(crate) holder: u32,
    pub(crate) route: u32,
    pub(crate) emitter: u32,
    pub(crate) source: u32,
    pub(crate) prop: u16,
    pub(crate) kind: Kind,
    pub(crate) flags: u8,
}

impl Rec {
    fn has(&self, f: u8) -> bool {
        self.flags & f != 0
    }
    fn epoch(&self) -> Option<u64> {
        self.has(HAS_EPOCH).then_some(self.epoch)
    }
    fn order(&self) -> Option<u64> {
        self.has(HAS_ORDER).then_some(self.order)
    }
    fn committed_mutation(&self) -> bool {
        self.kind.is_mutation() && !self.has(REJECTED)
    }
    fn live(&self) -> bool {
        !self.has(DUP | ASIDE)
    }
    /// Equal as deliveries of one event (SPEC §4 "Duplicates"); `scopes` holds their scopes.
    fn same_content(&self, o: &Rec, scopes: &ScopeTexts) -> bool {
        self.kind == o.kind
            && self.has(REJECTED) == o.has(REJECTED)
            && self.prop == o.prop
            && scopes.key(self) == scopes.key(o)
            && self.incarnation == o.incarnation
            && self.epoch() == o.epoch()
            && self.order() == o.order()
            && self.holder == o.holder
            && self.route == o.route
            && self.ts == o.ts
    }
}

#[derive(Debug)]
struct MalformedRec {
    ts: Option<i64>,
    prior: Option<i64>,
}

/// Where a sample comes from, (source, position): samples are the smallest ones.
type SampleKey = (u32, u64);

/// Keeps `sample` if it is among the [`SAMPLES_PER_REASON`] smallest keys seen.
fn keep_sample(
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
struct Acc {
    counts: [u64; Reason::COUNT],
    /// The samples with the smallest provenance, which does not depend on processing order.
    samples: BTreeMap<Reason, Vec<(SampleKey, Sample)>>,
    series: WindowSeries,
    cxs: Vec<Counterexample>,
    events: u64,
    stale_rejections: u64,
    route_obs: Vec<Vec<i64>>,
    undeclared: BTreeMap<u32, u64>,
}

impl Acc {
    /// An empty accumulator over the same window range.
    fn empty_like(&self) -> Acc {
        let mut series = WindowSeries::new(self.series.width());
        if let Some((f, l)) = self.series.range() {
            series.cover(series.start_of(f));
            series.cover(series.start_of(l));
        }
        Acc {
            counts: [0; Reason::COUNT],
            samples: BTreeMap::new(),
            series,
            cxs: Vec::new(),
            events: 0,
            stale_rejections: 0,
            route_obs: vec![Vec::new(); self.route_obs.len()],
            undeclared: BTreeMap::new(),
        }
    }

    /// Adds what another accumulator found after this one (samples keep reading order).
    fn absorb(&mut self, other: Acc) {
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
        for (route, n) in other.undeclared {
            *self.undeclared.entry(route).or_default() += n;
        }
    }

    fn hit(&mut self, reason: Reason, count: u64, key: SampleKey, sample: impl FnOnce() -> Sample) {
        self.counts[reason as usize] += count;
        keep_sample(self.samples.entry(reason).or_default(), key, sample);
    }
}

/// Counts every reader keeps: valid events, unattributed ones, the greatest valid event time.
#[derive(Debug, Default, Clone, Copy)]
struct Tally {
    valid: u64,
    unattributed: u64,
    max_valid_ts: Option<i64>,
}

impl Tally {
    fn add(&mut self, other: Tally) {
        self.valid += other.valid;
        self.unattributed += other.unattributed;
        self.max_valid_ts = later(self.max_valid_ts, other.max_valid_ts);
    }
}

fn later(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

/// The scope hash: XXH3's 128-bit variant.
fn scope_hash(s: &str) -> u128 {
    xxhash_rust::xxh3::xxh3_128(s.as_bytes())
}

/// The scope of every scoped event, in reading order (a record's `scope` indexes it): the names
/// in one arena, each with its 128-bit hash, which is what tells scopes apart.
#[derive(Debug, Default)]
struct ScopeTexts {
    hashes: Vec<u128>,
    text: String,
    ends: Vec<u64>,
}

impl ScopeTexts {
    fn push(&mut self, s: &str) -> u32 {
        let i = u32::try_from(self.hashes.len()).expect("fewer than 2^32 scoped events");
        self.hashes.push(scope_hash(s));
        self.text.push_str(s);
        self.ends.push(self.text.len() as u64);
        i
    }

    /// The hash of a record's scope, which tells scopes apart (see [`History::assess_events`]).
    fn key(&self, r: &Rec) -> Option<u128> {
        r.has(HAS_SCOPE).then(|| self.hashes[r.scope as usize])
    }

    fn get(&self, i: u32) -> &str {
        let i = i as usize;
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.text[start as usize..self.ends[i] as usize]
    }

    /// Appends `other`'s strings; returns the index its first one gets.
    fn append(&mut self, other: ScopeTexts) -> u32 {
        let base = u32::try_from(self.hashes.len()).expect("fewer than 2^32 scoped events");
        u32::try_from(self.hashes.len() + other.hashes.len())
            .expect("fewer than 2^32 scoped events");
        let offset = self.text.len() as u64;
        self.hashes.extend_from_slice(&other.hashes);
        self.text.push_str(&other.text);
        self.ends.extend(other.ends.iter().map(|e| e + offset));
        base
    }

    fn heap_bytes(&self) -> usize {
        self.hashes.capacity() * 16 + self.text.capacity() + self.ends.capacity() * 8
    }
}

/// Turns a decoded event into a record (`Ok(None)`: valid but not kept), or says why it is
/// malformed. Events that break a contract-level rule (no `property` under a multi-property
/// contract) or a per-kind rule are malformed.
fn admit(
    contract: &Contract,
    ev: &Event<'_>,
    source: u32,
    position: u64,
    tally: &mut Tally,
    strings: &mut Interner,
    scopes: &mut ScopeTexts,
) -> Result<Option<Rec>, String> {
    if let Err((field, why)) = ev.validate() {
        return Err(format!("field `{field}`: {why}"));
    }
    let prop = match ev.property {
        Some(name) => match contract.property_index(name) {
            Some(i) => i as u16,
            None => UNATTRIBUTED,
        },
        None if contract.properties.len() == 1 => 0,
        None => {
            return Err(
                "field `property`: required when the contract declares more than one property"
                    .into(),
            );
        }
    };
    tally.valid += 1;
    tally.max_valid_ts = later(tally.max_valid_ts, Some(ev.ts.0));
    if prop == UNATTRIBUTED {
        tally.unattributed += 1;
        // Unattributed events count for emitter seq tracking only.
        if ev.emitter.is_none() || ev.seq.is_none() {
            return Ok(None);
        }
    }
    let mut flags = 0;
    let mut put = |cond: bool, f: u8| {
        if cond {
            flags |= f;
        }
    };
    put(ev.epoch.is_some(), HAS_EPOCH);
    put(ev.order.is_some(), HAS_ORDER);
    put(ev.seq.is_some(), HAS_SEQ);
    put(ev.outcome == Outcome::Rejected, REJECTED);
    put(ev.scope.is_some(), HAS_SCOPE);
    let mut opt = |s: Option<&str>| s.map_or(NONE, |s| strings.intern(s));
    Ok(Some(Rec {
        ts: ev.ts.0,
        epoch: ev.epoch.map_or(0, |e| e.0),
        order: ev.order.map_or(0, |o| o.0),
        incarnation: ev.incarnation.0,
        seq: ev.seq.map_or(0, |s| s.0),
        position,
        scope: ev.scope.map_or(NONE, |s| scopes.push(s)),
        holder: opt(ev.holder),
        route: opt(ev.route),
        emitter: opt(ev.emitter),
        source,
        prop,
        kind: ev.kind,
        flags,
    }))
}

/// What reading saw of one emitter's seqs. While they arrive increasing, which is the usual
/// case, this is all `finish` needs to know of the emitter: it has no duplicate by seq and its
/// gaps are listed here, so only emitters whose seqs went back are sorted by seq.
#[derive(Debug, Clone, Default)]
struct SeqTrack {
    events: u64,
    first: u64,
    last: u64,
    last_idx: u32,
    /// Every seq was greater than the one read before it.
    increasing: bool,
    /// While increasing: the record indices on either side of each gap.
    gaps: Vec<(u32, u32)>,
    /// Properties of the events (`UNATTRIBUTED` included).
    props: Vec<u16>,
}

impl SeqTrack {
    /// Notes record `idx`, read after every other one noted.
    fn note(tracks: &mut Vec<SeqTrack>, r: &Rec, idx: u32) {
        if r.emitter == NONE || !r.has(HAS_SEQ) {
            return;
        }
        let e = r.emitter as usize;
        if e >= tracks.len() {
            tracks.resize_with(e + 1, Default::default);
        }
        let t = &mut tracks[e];
        if t.events == 0 {
            t.first = r.seq;
            t.increasing = true;
        } else if t.increasing {
            if r.seq <= t.last {
                t.increasing = false;
                t.gaps = Vec::new();
            } else if r.seq > t.last + 1 {
                t.gaps.push((t.last_idx, idx));
            }
        }
        t.events += 1;
        t.last = r.seq;
        t.last_idx = idx;
        if !t.props.contains(&r.prop) {
            t.props.push(r.prop);
        }
    }
}

#[derive(Debug)]
struct BatchMalformed {
    position: u64,
    ts: Option<EventTime>,
    /// The greatest valid event time of the batch before it.
    prior: Option<i64>,
    message: String,
}

/// Events of one source decoded off the caller's thread (a chunk of a file, by a worker), for
/// [`History::append`], which adds them exactly as if each had been pushed in order. Building
/// a batch does the per-event work (validation, string and scope keys) so that appending is
/// little more than a copy.
#[derive(Debug)]
pub struct Batch {
    source: SourceId,
    recs: Vec<Rec>,
    strings: Interner,
    scopes: ScopeTexts,
    malformed: Vec<BatchMalformed>,
    tally: Tally,
}

impl Batch {
    /// An empty batch of events read from `source`.
    pub fn new(source: SourceId) -> Batch {
        Batch::with_capacity(source, 0)
    }

    /// An empty batch with room for `events` events.
    pub fn with_capacity(source: SourceId, events: usize) -> Batch {
        Batch {
            source,
            recs: Vec::with_capacity(events),
            strings: Interner::new(),
            scopes: ScopeTexts {
                hashes: Vec::with_capacity(events),
                text: String::new(),
                ends: Vec::with_capacity(events),
            },
            malformed: Vec::new(),
            tally: Tally::default(),
        }
    }

    /// Adds a decoded event read at `position`, checked against `contract` (the history's).
    pub fn push(&mut self, contract: &Contract, ev: &Event<'_>, position: u64) {
        match admit(
            contract,
            ev,
            self.source.0,
            position,
            &mut self.tally,
            &mut self.strings,
            &mut self.scopes,
        ) {
            Ok(Some(rec)) => self.recs.push(rec),
            Ok(None) => {}
            Err(message) => self.push_malformed(position, Some(ev.ts), message),
        }
    }

    /// Adds a malformed event (see [`History::push_malformed`]).
    pub fn push_malformed(&mut self, position: u64, ts: Option<EventTime>, message: String) {
        self.malformed.push(BatchMalformed {
            position,
            ts,
            prior: self.tally.max_valid_ts,
            message,
        });
    }
}

/// A history being read for offline assessment.
#[derive(Debug)]
pub struct History {
    contract: Contract,
    compiled: Compiled,
    sources: Vec<String>,
    strings: Interner,
    scopes: ScopeTexts,
    recs: Vec<Rec>,
    malformed: Vec<MalformedRec>,
    malformed_samples: Vec<Sample>,
    tally: Tally,
    /// By emitter (string id).
    seqs: Vec<SeqTrack>,
    threads: usize,
}

/// A source of events (a file, stdin): its index in [`History`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SourceId(pub u32);

impl History {
    /// An empty history under `contract`.
    pub fn new(contract: Contract) -> History {
        let compiled = contract.compile();
        History {
            contract,
            compiled,
            sources: Vec::new(),
            strings: Interner::new(),
            scopes: ScopeTexts::default(),
            recs: Vec::new(),
            malformed: Vec::new(),
            malformed_samples: Vec::new(),
            tally: Tally::default(),
            seqs: Vec::new(),
            threads: 1,
        }
    }

    /// The contract.
    pub fn contract(&self) -> &Contract {
        &self.contract
    }

    /// Registers a source such as a file name; provenance is `(source, position)`.
    pub fn add_source(&mut self, name: &str) -> SourceId {
        self.sources.push(name.to_string());
        SourceId(u32::try_from(self.sources.len() - 1).expect("fewer than 2^32 sources"))
    }

    /// Threads `finish` may use for the per-scope sweeps (default 1). The result does not
    /// depend on it.
    pub fn set_threads(&mut self, threads: usize) {
        self.threads = threads.max(1);
    }

    /// Reserves room for about `events` more events (e.g. estimated from input sizes), which
    /// saves the copies of a growing buffer.
    pub fn reserve(&mut self, events: usize) {
        self.recs.reserve(events);
        self.scopes.hashes.reserve(events);
        self.scopes.ends.reserve(events);
    }

    /// Number of valid events pushed.
    pub fn valid_events(&self) -> u64 {
        self.tally.valid
    }

    /// Number of malformed events pushed.
    pub fn malformed_events(&self) -> u64 {
        self.malformed.len() as u64
    }

    /// Approximate heap bytes held.
    pub fn heap_bytes(&self) -> usize {
        self.recs.capacity() * std::mem::size_of::<Rec>()
            + self.strings.heap_bytes()
            + self.scopes.heap_bytes()
    }

    /// Adds a decoded event read at `position` of `source`. Events that break a contract-level
    /// rule (no `property` under a multi-property contract) or a per-kind rule become malformed.
    pub fn push(&mut self, ev: &Event<'_>, source: SourceId, position: u64) {
        match admit(
            &self.contract,
            ev,
            source.0,
            position,
            &mut self.tally,
            &mut self.strings,
            &mut self.scopes,
        ) {
            Ok(Some(rec)) => {
                SeqTrack::note(&mut self.seqs, &rec, self.recs.len() as u32);
                self.recs.push(rec);
            }
            Ok(None) => {}
            Err(message) => self.push_malformed(source, position, Some(ev.ts), message),
        }
    }

    /// Adds the events of `batch` after those read so far, as if each had been pushed.
    pub fn append(&mut self, batch: Batch) {
        let Batch {
            source,
            recs,
            strings,
            scopes,
            malformed,
            tally,
        } = batch;
        let prior = self.tally.max_valid_ts;
        for m in malformed {
            self.note_malformed(source, m.position, m.ts, later(prior, m.prior), m.message);
        }
        self.tally.add(tally);
        let ids: Vec<u32> = (0..strings.len() as u32)
            .map(|i| self.strings.intern(strings.resolve(i)))
            .collect();
        let id = |i: u32| if i == NONE { NONE } else { ids[i as usize] };
        let base = self.scopes.append(scopes);
        self.recs.reserve(recs.len());
        for mut r in recs {
            r.holder = id(r.holder);
            r.route = id(r.route);
            r.emitter = id(r.emitter);
            if r.has(HAS_SCOPE) {
                r.scope += base;
            }
            SeqTrack::note(&mut self.seqs, &r, self.recs.len() as u32);
            self.recs.push(r);
        }
    }

    /// Adds a malformed event: counted, kept as a sample, placed at its `ts` if that parsed,
    /// else at the greatest valid event time read before it.
    pub fn push_malformed(
        &mut self,
        source: SourceId,
        position: u64,
        ts: Option<EventTime>,
        message: String,
    ) {
        self.note_malformed(source, position, ts, self.tally.max_valid_ts, message);
    }

    fn note_malformed(
        &mut self,
        source: SourceId,
        position: u64,
        ts: Option<EventTime>,
        prior: Option<i64>,
        message: String,
    ) {
        if self.malformed_samples.len() < MALFORMED_SAMPLES {
            self.malformed_samples.push(Sample {
                source: format!("{}:{position}", self.sources[source.0 as usize]),
                ts: ts.map(|t| t.to_string()),
                detail: message,
            });
        }
        self.malformed.push(MalformedRec {
            ts: ts.map(|t| t.0),
            prior,
        });
    }

    fn prov(&self, r: &Rec) -> Provenance {
        Provenance {
            source: self.sources[r.source as usize].clone(),
            position: r.position,
        }
    }

    fn view(&self, r: &Rec) -> EventView {
        let s = |id: u32| (id != NONE).then(|| self.strings.resolve(id).to_string());
        EventView {
            kind: r.kind.as_str(),
            ts: EventTime(r.ts).to_string(),
            epoch: r.epoch(),
            incarnation: r.incarnation,
            order: r.order(),
            route: s(r.route),
            holder: s(r.holder),
            outcome: if r.has(REJECTED) {
                Outcome::Rejected.as_str()
            } else {
                Outcome::Committed.as_str()
            },
            emitter: s(r.emitter),
            seq: r.has(HAS_SEQ).then_some(r.seq),
            source: self.prov(r).to_string(),
        }
    }

    fn sample(&self, r: &Rec, detail: String) -> Sample {
        Sample {
            source: self.prov(r).to_string(),
            ts: Some(EventTime(r.ts).to_string()),
            detail,
        }
    }

    /// Assesses the history: the end of input is the end of time, every window is final.
    pub fn finish(mut self) -> Report {
        let mut accs: Vec<Acc> = self
            .contract
            .properties
            .iter()
            .map(|p| Acc {
                counts: [0; Reason::COUNT],
                samples: BTreeMap::new(),
                series: WindowSeries::new(p.window.0),
                cxs: Vec::new(),
                events: 0,
                stale_rejections: 0,
                route_obs: vec![Vec::new(); p.routes.len()],
                undeclared: BTreeMap::new(),
            })
            .collect();
        // Window ranges first: every valid attributed event, duplicates included.
        for r in &self.recs {
            if r.prop != UNATTRIBUTED {
                accs[r.prop as usize].series.cover(r.ts);
            }
        }
        let (by_seq, emitter_starts) = self.by_seq();
        let duplicates = self.settle_duplicates(&mut accs, &by_seq);
        let emitters = self.telemetry_gaps(&mut accs, &by_seq, &emitter_starts);
        drop(by_seq);
        self.assess_events(&mut accs);
        self.place_malformed(&mut accs);
        let properties = self.conclude(accs);
        let verdict = properties
            .iter()
            .map(|p| p.verdict)
            .max()
            .unwrap_or(Verdict::Unknown);
        Report {
            verdict,
            contract: ContractSummary::from(&self.compiled),
            unattributed: self.tally.unattributed,
            malformed: self.malformed.len() as u64,
            events: self.tally.valid,
            duplicates,
            properties,
            malformed_events: std::mem::take(&mut self.malformed_samples),
            emitters,
        }
    }

    /// Indices of the events of emitters whose seqs did not arrive increasing, sorted by
    /// (emitter, seq, index): a stable counting sort by emitter, then each emitter's run sorted.
    fn by_seq(&self) -> (Vec<u32>, Vec<u32>) {
        let recs = &self.recs;
        let n = self.strings.len();
        let back: Vec<bool> = (0..n)
            .map(|e| {
                self.seqs
                    .get(e)
                    .is_some_and(|t| t.events > 0 && !t.increasing)
            })
            .collect();
        if !back.contains(&true) {
            return (Vec::new(), vec![0; n + 1]);
        }
        let has = |r: &Rec| r.emitter != NONE && r.has(HAS_SEQ) && back[r.emitter as usize];
        let mut starts = vec![0u32; n + 1];
        for r in recs.iter().filter(|r| has(r)) {
            starts[r.emitter as usize + 1] += 1;
        }
        for i in 0..n {
            starts[i + 1] += starts[i];
        }
        let mut fill = starts.clone();
        let mut out = vec![0u32; starts[n] as usize];
        for (i, r) in recs.iter().enumerate().filter(|(_, r)| has(r)) {
            out[fill[r.emitter as usize] as usize] = i as u32;
            fill[r.emitter as usize] += 1;
        }
        for e in 0..n {
            let run = &mut out[starts[e] as usize..starts[e + 1] as usize];
            if !run
                .windows(2)
                .all(|w| recs[w[0] as usize].seq <= recs[w[1] as usize].seq)
            {
                let mut keys: Vec<(u64, u32)> =
                    run.iter().map(|&i| (recs[i as usize].seq, i)).collect();
                keys.sort_unstable();
                for (slot, (_, i)) in run.iter_mut().zip(keys) {
                    *slot = i;
                }
            }
        }
        (out, starts)
    }

    fn settle_duplicates(&mut self, accs: &mut [Acc], by_seq: &[u32]) -> u64 {
        let recs = &mut self.recs;
        let scopes = &self.scopes;
        let mut by_order: Vec<u32> = (0..recs.len() as u32)
            .filter(|&i| {
                let r = &recs[i as usize];
                r.prop != UNATTRIBUTED
                    && r.kind.is_mutation()
                    && r.has(HAS_SCOPE)
                    && r.has(HAS_ORDER)
            })
            .collect();
        by_order.sort_unstable_by_key(|&i| {
            let r = &recs[i as usize];
            (scopes.key(r), r.incarnation, r.order, r.epoch(), i)
        });
        let mut equal_pairs: Vec<(u32, u32)> = Vec::new();
        let mut conflicts: Vec<Vec<u32>> = Vec::new();
        let mut groups = |idx: &[u32],
                          same_key: &dyn Fn(&Rec, &Rec) -> bool,
                          recs: &mut Vec<Rec>| {
            let mut a = 0;
            while a < idx.len() {
                let mut b = a + 1;
                while b < idx.len() && same_key(&recs[idx[a] as usize], &recs[idx[b] as usize]) {
                    b += 1;
                }
                if b - a > 1 {
                    let first = recs[idx[a] as usize];
                    if idx[a + 1..b]
                        .iter()
                        .all(|&i| recs[i as usize].same_content(&first, scopes))
                    {
                        for &i in &idx[a + 1..b] {
                            recs[i as usize].flags |= DUP;
                            equal_pairs.push((idx[a], i));
                        }
                    } else {
                        for &i in &idx[a..b] {
                            recs[i as usize].flags |= ASIDE;
                        }
                        conflicts.push(idx[a..b].to_vec());
                    }
                }
                a = b;
            }
        };
        groups(
            by_seq,
            &|x, y| x.emitter == y.emitter && x.seq == y.seq,
            recs,
        );
        groups(
            &by_order,
            &|x, y| {
                scopes.key(x) == scopes.key(y)
                    && x.incarnation == y.incarnation
                    && x.order == y.order
                    && x.epoch() == y.epoch()
            },
            recs,
        );
        // A delivery equal to one set aside through its other key is set aside too.
        let mut changed = !conflicts.is_empty();
        while changed {
            changed = false;
            for &(a, b) in &equal_pairs {
                if recs[a as usize].has(ASIDE) != recs[b as usize].has(ASIDE) {
                    recs[a as usize].flags |= ASIDE;
                    recs[b as usize].flags |= ASIDE;
                    changed = true;
                }
            }
        }
        for members in &conflicts {
            let mut props: Vec<u16> = members
                .iter()
                .map(|&i| self.recs[i as usize].prop)
                .filter(|&p| p != UNATTRIBUTED)
                .collect();
            props.sort_unstable();
            props.dedup();
            let lo = members
                .iter()
                .map(|&i| self.recs[i as usize].ts)
                .min()
                .unwrap_or(0);
            let hi = members
                .iter()
                .map(|&i| self.recs[i as usize].ts)
                .max()
                .unwrap_or(0);
            let first = self.recs[members[0] as usize];
            let others: Vec<String> = members[1..]
                .iter()
                .map(|&i| self.prov(&self.recs[i as usize]).to_string())
                .collect();
            for p in props {
                let sample = self.sample(
                    &first,
                    format!(
                        "differs from {} delivered under the same key",
                        others.join(", ")
                    ),
                );
                let acc = &mut accs[p as usize];
                acc.hit(
                    Reason::ConflictingDuplicate,
                    1,
                    (first.source, first.position),
                    || sample,
                );
                acc.series
                    .add_time_span(lo, hi, Reason::ConflictingDuplicate);
            }
        }
        if equal_pairs.is_empty() {
            return 0;
        }
        self.recs
            .iter()
            .filter(|r| r.has(DUP) && !r.has(ASIDE))
            .count() as u64
    }

    /// Gaps per emitter: from what reading noted for emitters whose seqs arrived increasing,
    /// else in one pass over the emitter's run of `by_seq` (bounded by `starts`, indexed by
    /// emitter id).
    fn telemetry_gaps(
        &self,
        accs: &mut [Acc],
        by_seq: &[u32],
        starts: &[u32],
    ) -> Vec<EmitterReport> {
        let recs = &self.recs;
        let mut out = Vec::new();
        let mut found: Vec<(u32, u32)> = Vec::new();
        let mut feeds = vec![false; accs.len()];
        for (emitter, track) in self.seqs.iter().enumerate() {
            if track.events == 0 {
                continue;
            }
            feeds.fill(false);
            found.clear();
            let (first_seq, last_seq, distinct) = if track.increasing {
                for &p in &track.props {
                    if let Some(f) = feeds.get_mut(p as usize) {
                        *f = true;
                    }
                }
                found.extend_from_slice(&track.gaps);
                (track.first, track.last, track.events)
            } else {
                let group = &by_seq[starts[emitter] as usize..starts[emitter + 1] as usize];
                let mut prev = &recs[group[0] as usize];
                let first_seq = prev.seq;
                let mut distinct = 1;
                if let Some(f) = feeds.get_mut(prev.prop as usize) {
                    *f = true;
                }
                for pair in group.windows(2) {
                    let y = &recs[pair[1] as usize];
                    if let Some(f) = feeds.get_mut(y.prop as usize) {
                        *f = true;
                    }
                    if y.seq != prev.seq {
                        distinct += 1;
                        if y.seq > prev.seq + 1 {
                            found.push((pair[0], pair[1]));
                        }
                    }
                    prev = y;
                }
                (first_seq, prev.seq, distinct)
            };
            let name = self.strings.resolve(emitter as u32);
            let mut missing = 0;
            for &(xi, yi) in &found {
                let (x, y) = (&recs[xi as usize], &recs[yi as usize]);
                missing += y.seq - x.seq - 1;
                for (p, _) in feeds.iter().enumerate().filter(|(_, f)| **f) {
                    let detail = format!(
                        "emitter `{name}` skipped seq {}..={} between {} and {}",
                        x.seq + 1,
                        y.seq - 1,
                        self.prov(x),
                        self.prov(y)
                    );
                    let acc = &mut accs[p];
                    acc.hit(Reason::TelemetryGap, 1, (y.source, y.position), || Sample {
                        source: self.prov(y).to_string(),
                        ts: Some(EventTime(y.ts).to_string()),
                        detail,
                    });
                    acc.series.add_time_span(x.ts, y.ts, Reason::TelemetryGap);
                }
            }
            out.push(EmitterReport {
                emitter: name.to_string(),
                events: distinct,
                first_seq,
                last_seq,
                gaps: found.len() as u64,
                missing,
            });
        }
        out.sort_by(|a, b| a.emitter.cmp(&b.emitter));
        out
    }

    fn per_event(&self, recs: &[Rec], accs: &mut [Acc]) {
        let routes: Vec<Vec<(u32, usize)>> = self
            .contract
            .properties
            .iter()
            .map(|p| {
                p.routes
                    .iter()
                    .enumerate()
                    .filter_map(|(i, r)| self.strings.get(&r.name).map(|id| (id, i)))
                    .collect()
            })
            .collect();
        for r in recs {
            if r.prop == UNATTRIBUTED || r.has(DUP) {
                continue;
            }
            let p = r.prop as usize;
            let acc = &mut accs[p];
            acc.series.add_event(r.ts);
            acc.events += 1;
            if r.has(ASIDE) {
                continue;
            }
            let route_idx = (r.route != NONE).then(|| {
                routes[p]
                    .iter()
                    .find(|(id, _)| *id == r.route)
                    .map(|&(_, i)| i)
            });
            if r.kind == Kind::Heartbeat || r.kind.is_mutation() {
                match route_idx {
                    Some(Some(i)) => acc.route_obs[i].push(r.ts),
                    Some(None) if r.kind.is_mutation() => {
                        *acc.undeclared.entry(r.route).or_default() += 1
                    }
                    _ => {}
                }
            }
            if r.kind.is_mutation() && r.has(REJECTED) {
                acc.stale_rejections += 1;
            }
            if !r.committed_mutation() {
                continue;
            }
            let prop = &self.contract.properties[p];
            let mut raise = |reason: Reason, detail: String| {
                acc.hit(reason, 1, (r.source, r.position), || self.sample(r, detail));
                acc.series.add_reason(r.ts, reason);
            };
            if !r.has(HAS_SCOPE) {
                raise(
                    Reason::MissingScope,
                    format!("{} without `scope`", r.kind.as_str()),
                );
            }
            if !r.has(HAS_EPOCH) {
                raise(
                    Reason::MissingEpoch,
                    format!("{} without `epoch`", r.kind.as_str()),
                );
            }
            match route_idx {
                None => raise(
                    Reason::MissingRoute,
                    format!("{} without `route`", r.kind.as_str()),
                ),
                Some(None) => raise(
                    Reason::UndeclaredRoute,
                    format!(
                        "route `{}` is not in the contract",
                        self.strings.resolve(r.route)
                    ),
                ),
                Some(Some(i)) if !prop.routes[i].fenced => {
                    raise(
                        Reason::UnfencedRoute,
                        format!(
                            "route `{}` is declared `fenced = false`",
                            prop.routes[i].name
                        ),
                    );
                }
                Some(Some(_)) => {}
            }
        }
    }

    /// The per-event reasons ([`History::per_event`]) and the per-scope sweeps over every
    /// (property, scope) group, on up to `threads` threads.
    ///
    /// Scopes are told apart by their 128-bit hash (XXH3) rather than by comparing names: for a
    /// billion distinct scopes the chance that any two share one is about 10^-21, far below
    /// that of a memory error, while a table of names costs a random memory access per event,
    /// which was most of the time of a large check.
    ///
    /// First each thread takes a contiguous range of records: it raises their per-event
    /// reasons and buckets the scope group members among them by the hash's top bits (a
    /// counting sort of 24-byte (hash, index) entries, in record order). Then each thread takes
    /// a range of buckets: it gathers each bucket's entries from every first-phase part (about
    /// a thousand, in cache) and sorts them by scope; for each scope it builds the members'
    /// slots from their records, sorts them by [`Slot::sort_key`] and sweeps each property's
    /// group. Full slots in the buckets were measured slower: three times the bytes to write,
    /// fault in and sort, against one record read per member. Every part has its own
    /// accumulators, merged at the end; nothing depends on the split, so the output is that of
    /// a single thread.
    fn assess_events(&self, accs: &mut [Acc]) {
        /// A group member: its scope's hash and its record.
        #[derive(Clone, Copy, Default)]
        struct Keyed {
            scope: [u64; 2],
            idx: u32,
        }
        struct Part {
            accs: Vec<Acc>,
            starts: Vec<u32>,
            keyed: Vec<Keyed>,
        }
        let recs = &self.recs;
        let hashes = &self.scopes.hashes;
        let member = |r: &Rec| {
            r.prop != UNATTRIBUTED && r.has(HAS_SCOPE) && r.live() && r.kind != Kind::Heartbeat
        };
        // About 1024 events per bucket.
        let bits = (usize::BITS - (recs.len() / 1024).leading_zeros()).min(16);
        let nbuckets = 1usize << bits;
        let bucket = |h: u128| {
            if bits == 0 {
                0
            } else {
                (h >> (128 - bits)) as usize
            }
        };
        let first = |lo: usize, hi: usize, mut accs: Vec<Acc>| -> Part {
            let recs = &recs[lo..hi];
            self.per_event(recs, &mut accs);
            let mut starts = vec![0u32; nbuckets + 1];
            for r in recs.iter().filter(|r| member(r)) {
                starts[bucket(hashes[r.scope as usize]) + 1] += 1;
            }
            for b in 0..nbuckets {
                starts[b + 1] += starts[b];
            }
            let mut fill = starts.clone();
            let mut keyed = vec![Keyed::default(); starts[nbuckets] as usize];
            for (i, r) in (lo..).zip(recs) {
                if !member(r) {
                    continue;
                }
                let h = hashes[r.scope as usize];
                let at = &mut fill[bucket(h)];
                keyed[*at as usize] = Keyed {
                    scope: [(h >> 64) as u64, h as u64],
                    idx: i as u32,
                };
                *at += 1;
            }
            Part {
                accs,
                starts,
                keyed,
            }
        };
        let second = |lo: usize, hi: usize, parts: &[Part], accs: &mut [Acc]| {
            let mut work = scope::Workspace::default();
            let mut bucket: Vec<Keyed> = Vec::new();
            let mut group: Vec<Slot> = Vec::new();
            for b in lo..hi {
                bucket.clear();
                for part in parts {
                    let (from, to) = (part.starts[b] as usize, part.starts[b + 1] as usize);
                    bucket.extend_from_slice(&part.keyed[from..to]);
                }
                bucket.sort_unstable_by_key(|k| k.scope);
                let mut a = 0;
                while a < bucket.len() {
                    let scope = bucket[a].scope;
                    let len = bucket[a..].iter().take_while(|k| k.scope == scope).count();
                    group.clear();
                    group.extend(bucket[a..a + len].iter().map(|k| {
                        let r = &recs[k.idx as usize];
                        Slot {
                            inc: r.incarnation,
                            epoch: r.epoch,
                            ts: r.ts,
                            order: r.order(),
                            idx: k.idx,
                            holder: r.holder,
                            prop: r.prop,
                            class: if r.committed_mutation() && r.has(HAS_EPOCH) {
                                0
                            } else if r.kind == Kind::Grant {
                                1
                            } else {
                                2
                            },
                        }
                    }));
                    group.sort_unstable_by_key(Slot::sort_key);
                    let mut p = 0;
                    while p < group.len() {
                        let prop = group[p].prop;
                        let n = group[p..].iter().take_while(|x| x.prop == prop).count();
                        self.assess_group(&group[p..p + n], &mut accs[prop as usize], &mut work);
                        p += n;
                    }
                    a += len;
                }
            }
        };
        let threads = self.threads.clamp(1, 16);
        let empty = || accs.iter().map(Acc::empty_like).collect::<Vec<Acc>>();
        let mut parts: Vec<Part> = if threads == 1 {
            vec![first(0, recs.len(), empty())]
        } else {
            let per = recs.len().div_ceil(threads).max(1);
            std::thread::scope(|sc| {
                let handles: Vec<_> = (0..recs.len())
                    .step_by(per)
                    .map(|lo| {
                        let (first, local) = (&first, empty());
                        sc.spawn(move || first(lo, (lo + per).min(recs.len()), local))
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|h| h.join().expect("event thread"))
                    .collect()
            })
        };
        let mut locals: Vec<Vec<Acc>> = parts
            .iter_mut()
            .map(|p| std::mem::take(&mut p.accs))
            .collect();
        // Bucket ranges of about equal numbers of slots.
        let mut sizes = vec![0u64; nbuckets + 1];
        for b in 0..nbuckets {
            let n: u32 = parts.iter().map(|p| p.starts[b + 1] - p.starts[b]).sum();
            sizes[b + 1] = sizes[b] + u64::from(n);
        }
        let total = sizes[nbuckets];
        let mut cuts = vec![0usize];
        for t in 1..threads {
            let target = total * t as u64 / threads as u64;
            cuts.push(sizes.partition_point(|&x| x < target).min(nbuckets));
        }
        cuts.push(nbuckets);
        if threads == 1 {
            let mut local = empty();
            second(0, nbuckets, &parts, &mut local);
            locals.push(local);
        } else {
            let parts = &parts;
            locals.extend(std::thread::scope(|sc| {
                let handles: Vec<_> = cuts
                    .windows(2)
                    .map(|w| {
                        let (second, mut local) = (&second, empty());
                        sc.spawn(move || {
                            second(w[0], w[1], parts, &mut local);
                            local
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|h| h.join().expect("scope group thread"))
                    .collect::<Vec<_>>()
            }));
        }
        drop(parts);
        for local in locals {
            for (acc, part) in accs.iter_mut().zip(local) {
                acc.absorb(part);
            }
        }
    }

    fn assess_group(&self, group: &[Slot], acc: &mut Acc, work: &mut scope::Workspace) {
        let recs = &self.recs;
        let prop = &self.contract.properties[group[0].prop as usize];
        let mut found = scope::decide_group(group, prop.clock_skew.0, work);
        let group_scope = recs[group[0].idx as usize].scope;
        let scope_name = || self.scopes.get(group_scope).to_string();
        for &i in found.ambiguous() {
            let r = &recs[i as usize];
            acc.hit(Reason::AmbiguousOrder, 1, (r.source, r.position), || {
                self.sample(r, format!("epoch {} of scope `{}` has a higher-epoch or higher-incarnation partner within the clock skew and no `order` to decide", r.epoch, scope_name()))
            });
            acc.series.add_reason(r.ts, Reason::AmbiguousOrder);
        }
        if prop.grants == Grants::Required {
            for &i in &found.ungranted {
                let r = &recs[i as usize];
                acc.hit(Reason::UngrantedEpoch, 1, (r.source, r.position), || {
                    self.sample(
                        r,
                        format!(
                            "epoch {} of scope `{}` was never granted",
                            r.epoch,
                            scope_name()
                        ),
                    )
                });
                acc.series.add_reason(r.ts, Reason::UngrantedEpoch);
            }
        }
        if found.cxs.is_empty() {
            return;
        }
        let mut by_time: Vec<u32> = group.iter().map(|x| x.idx).collect();
        by_time.sort_unstable_by_key(|&i| (recs[i as usize].ts, i));
        let scope = scope_name();
        for &(kind, stale, witness) in &found.cxs {
            let (s, w) = (&recs[stale as usize], &recs[witness as usize]);
            let upto = by_time.partition_point(|&i| (recs[i as usize].ts, i) <= (s.ts, stale));
            let context = by_time[upto.saturating_sub(CONTEXT_EVENTS)..upto]
                .iter()
                .map(|&i| self.view(&recs[i as usize]))
                .collect();
            let cx = Counterexample {
                id: counterexample_id(&prop.name, kind, &scope, s.incarnation, &self.prov(s)),
                kind,
                property: prop.name.clone(),
                scope: scope.clone(),
                incarnation: s.incarnation,
                explanation: scope::explain(kind, &scope, &self.view(s), &self.view(w)),
                stale: self.view(s),
                superseding: self.view(w),
                context,
                is_final: true,
                withdrawn: None,
                at: s.ts,
            };
            acc.series.add_counterexample(s.ts);
            acc.cxs.push(cx);
        }
    }

    fn place_malformed(&self, accs: &mut [Acc]) {
        for m in &self.malformed {
            for acc in accs.iter_mut() {
                acc.counts[Reason::MalformedEvent as usize] += 1;
                let at =
                    m.ts.or(m.prior)
                        .or_else(|| acc.series.range().map(|(f, _)| acc.series.start_of(f)));
                if let Some(t) = at {
                    acc.series.add_reason(t, Reason::MalformedEvent);
                }
            }
        }
        if let Some(first) = self.malformed_samples.first() {
            for acc in accs.iter_mut() {
                acc.samples
                    .entry(Reason::MalformedEvent)
                    .or_default()
                    .push(((0, 0), first.clone()));
            }
        }
    }

    fn conclude(&self, accs: Vec<Acc>) -> Vec<PropertyReport> {
        self.contract
            .properties
            .iter()
            .zip(accs)
            .map(|(prop, mut acc)| {
                let mut routes = Vec::with_capacity(prop.routes.len());
                let range = acc.series.range();
                for (i, route) in prop.routes.iter().enumerate() {
                    let mut obs = std::mem::take(&mut acc.route_obs[i]);
                    obs.sort_unstable();
                    let silent = match range {
                        Some((first, last)) => {
                            let spans = scope::silent_windows(
                                &obs,
                                prop.route_freshness.0,
                                acc.series.width(),
                                first,
                                last,
                            );
                            let n: i64 = spans.iter().map(|(a, b)| b - a + 1).sum();
                            for &(a, b) in &spans {
                                acc.series.add_span(a, b, Reason::RouteSilent);
                            }
                            n as u64
                        }
                        None => 1,
                    };
                    if silent > 0 {
                        let detail = match obs.last() {
                            Some(&t) => format!(
                                "route `{}` silent in {silent} window(s); last observed {}",
                                route.name,
                                EventTime(t)
                            ),
                            None => format!("route `{}` was never observed", route.name),
                        };
                        acc.hit(Reason::RouteSilent, silent, (u32::MAX, i as u64), || {
                            Sample {
                                source: "contract".into(),
                                ts: None,
                                detail,
                            }
                        });
                    }
                    routes.push(RouteCoverage {
                        name: route.name.clone(),
                        fenced: route.fenced,
                        observations: obs.len() as u64,
                        last_seen: obs.last().map(|&t| EventTime(t).to_string()),
                        silent_windows: silent,
                    });
                }
                acc.cxs.sort_by(|a, b| (a.at, &a.id).cmp(&(b.at, &b.id)));
                let unknown: BTreeMap<Reason, u64> = Reason::ALL
                    .iter()
                    .filter(|&&r| acc.counts[r as usize] > 0)
                    .map(|&r| (r, acc.counts[r as usize]))
                    .collect();
                let verdict = if !acc.cxs.is_empty() {
                    Verdict::Refuted
                } else if !unknown.is_empty() {
                    Verdict::Unknown
                } else {
                    Verdict::Holds
                };
                PropertyReport {
                    property: prop.name.clone(),
                    verdict,
                    counterexamples: acc.cxs,
                    unknown,
                    unknown_samples: acc
                        .samples
                        .into_iter()
                        .map(|(r, v)| (r, v.into_iter().map(|(_, s)| s).collect()))
                        .collect(),
                    events: acc.events,
                    stale_rejections: acc.stale_rejections,
                    routes,
                    undeclared_routes: acc
                        .undeclared
                        .iter()
                        .map(|(&id, &n)| UndeclaredRoute {
                            name: self.strings.resolve(id).to_string(),
                            events: n,
                        })
                        .collect(),
                    windows: acc.series.timeline(EventTime::MAX, MAX_LISTED_WINDOWS),
                }
            })
            .collect()
    }
}
