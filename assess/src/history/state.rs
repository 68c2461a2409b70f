//! The history being read: its records, names, sources and malformed events; [`History::finish`]
//! runs the assessment over them.

use super::acc::Acc;
use super::ahead::{Ahead, Populate};
use super::input::{self, Batch, ScopeTexts, SeqTrack, SourceId, Tally, later};
use crate::contract::{Compiled, Contract};
use crate::event::{Event, Kind};
use crate::finding::{EventView, Provenance, Verdict};
use crate::intern::{Interner, NameCache};
use crate::report::{ContractSummary, Report, Sample};
use crate::rules::{MALFORMED_SAMPLES, NONE, OWN_PROVENANCE, Rec, Resolve, UNATTRIBUTED};
use crate::time::EventTime;

/// Windows listed one by one before the timeline is shown as runs.
pub const MAX_LISTED_WINDOWS: u64 = 10_000;

/// A malformed event: placed at its time, else at the greatest valid event time before it.
#[derive(Debug)]
pub(super) struct MalformedRec {
    pub(super) ts: Option<i64>,
    pub(super) prior: Option<i64>,
}

/// A history being read for offline assessment.
#[derive(Debug)]
pub struct History {
    pub(super) contract: Contract,
    pub(super) compiled: Compiled,
    pub(super) sources: Vec<String>,
    pub(super) strings: Interner,
    /// The front of `strings` for names read by [`History::push`].
    pub(super) names: NameCache,
    pub(super) scopes: ScopeTexts,
    pub(super) recs: Vec<Rec>,
    pub(super) malformed: Vec<MalformedRec>,
    pub(super) malformed_samples: Vec<Sample>,
    pub(super) tally: Tally,
    /// By emitter (string id).
    pub(super) seqs: Vec<SeqTrack>,
    pub(super) threads: usize,
    /// The attestations among `recs`, by record index (SPEC §10).
    pub(super) attests: Vec<(u32, super::attest::AttestRec)>,
    /// Report what a conformance run exercised ([`History::note_conformance`]).
    pub(super) conformance: bool,
    /// Set when the (emitter, seq) keys are settled outside ([`History::settle_seqs_outside`]).
    pub(super) seqs_outside: Option<std::sync::Arc<AsideSet>>,
    /// By property: the least and greatest time of its records that extend a window (see
    /// [`History::accs`]), kept as records are added rather than read back from them all.
    pub(super) ranges: Vec<Option<(i64, i64)>>,
    /// Whether any record has a (scope, incarnation, order, epoch) key ([`Rec::order_key`]),
    /// noted as records are added: without one, settling duplicates skips a serial pass over
    /// every record (~3% of a large `check`, with the other core idle).
    pub(super) order_keys: bool,
    /// Makes the arrays' pages resident ahead of the copies ([`History::populate_with`]).
    pub(super) populate: Option<Populate>,
    /// How far `recs` was made resident.
    pub(super) recs_ahead: Ahead,
}

impl History {
    /// An empty history under `contract`.
    pub fn new(contract: Contract) -> History {
        let compiled = contract.compile();
        let ranges = vec![None; contract.properties.len()];
        History {
            contract,
            compiled,
            sources: Vec::new(),
            strings: Interner::new(),
            names: NameCache::new(),
            scopes: ScopeTexts::default(),
            recs: Vec::new(),
            malformed: Vec::new(),
            malformed_samples: Vec::new(),
            tally: Tally::default(),
            seqs: Vec::new(),
            threads: 1,
            attests: Vec::new(),
            conformance: false,
            seqs_outside: None,
            ranges,
            order_keys: false,
            populate: None,
            recs_ahead: Ahead::default(),
        }
    }

    /// Asks [`History::finish`] for what a conformance run exercised ([`Report::conformance`]:
    /// per fenced route, the stale writes the fence rejected), for `check --attestations-out`.
    pub fn note_conformance(&mut self) {
        self.conformance = true;
    }

    /// The contract.
    pub fn contract(&self) -> &Contract {
        &self.contract
    }

    /// Registers a source such as a file name; provenance is `(source, position)`.
    pub fn add_source(&mut self, name: &str) -> SourceId {
        let id = u32::try_from(self.sources.len())
            .ok()
            .filter(|&i| i < OWN_PROVENANCE)
            .expect("fewer than 2^31 sources");
        self.sources.push(name.to_string());
        SourceId(id)
    }

    /// Threads `finish` may use for the per-scope sweeps (default 1). The result does not
    /// depend on it.
    pub fn set_threads(&mut self, threads: usize) {
        self.threads = threads.max(1);
    }

    /// Has the pages of the arrays that [`History::append`] copies batches into made
    /// resident a few megabytes ahead of the copies by `hook` (`MADV_POPULATE_WRITE`, say),
    /// rather than faulted in a page at a time by them.
    pub fn populate_with(&mut self, hook: Populate) {
        self.populate = Some(hook);
    }

    /// Reserves room for about `events` more events (e.g. estimated from input sizes), which
    /// saves the copies of a growing buffer.
    pub fn reserve(&mut self, events: usize) {
        self.recs.reserve(events);
        self.scopes.reserve(events);
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
        match input::admit(
            &self.contract,
            ev,
            source.0,
            position,
            &mut self.tally,
            (&mut self.strings, &mut self.names),
            &mut self.scopes,
        ) {
            Ok(Some(rec)) => {
                self.note_added(&rec);
                super::attest::keep(&mut self.recs, &mut self.attests, rec, ev);
            }
            Ok(None) => {}
            Err(why) => self.push_malformed(source, position, Some(ev.ts), why.to_string()),
        }
    }

    /// Adds the events of `batch` after those read so far, as if each had been pushed.
    pub fn append(&mut self, batch: Batch) {
        let Batch {
            source,
            mut recs,
            strings,
            names: _,
            scopes,
            malformed,
            tally,
            attests,
            shift,
        } = batch;
        self.note_counts(source, malformed, tally, shift);
        let ids: Vec<u32> = (0..strings.len() as u32)
            .map(|i| self.strings.intern(strings.resolve(i)))
            .collect();
        let id = |i: u32| if i == NONE { NONE } else { ids[i as usize] };
        let base = self.scopes.append(scopes, self.populate);
        let first = self.recs.len() as u32;
        self.attests
            .extend(attests.into_iter().map(|(i, a)| (first + i, a)));
        // Changed in place in the batch, then copied whole: moved one by one through the
        // stack, each record's fields were reloaded from the copy just stored (perf: most of
        // this function's samples, on one load).
        let (seqs, ranges) = (&mut self.seqs, &mut self.ranges);
        let mut order_keys = false;
        for (idx, r) in (first..).zip(recs.iter_mut()) {
            r.holder = id(r.holder);
            r.route = id(r.route);
            r.emitter = id(r.emitter);
            if r.has_scope() {
                r.scope += base;
            }
            r.position += shift;
            order_keys |= note(seqs, ranges, r, idx);
        }
        self.order_keys |= order_keys;
        let cap = self.recs.capacity();
        self.recs_ahead
            .before_append(self.populate, (&self.recs, cap), &recs);
        self.recs.extend_from_slice(&recs);
    }

    /// Notes record `r`, about to be added as the next record, wherever records are added
    /// (`push`, `append`, a spilled part's `load`): its emitter's seqs, its property's time
    /// range, whether it has an order key.
    pub(super) fn note_added(&mut self, r: &Rec) {
        let idx = self.recs.len() as u32;
        self.order_keys |= note(&mut self.seqs, &mut self.ranges, r, idx);
    }

    /// Takes a batch's malformed events (their positions shifted by `shift`) and counts, read
    /// after everything so far.
    pub(super) fn note_counts(
        &mut self,
        source: SourceId,
        malformed: Vec<super::input::BatchMalformed>,
        tally: Tally,
        shift: u64,
    ) {
        let prior = self.tally.max_valid_ts;
        for m in malformed {
            let (position, prior) = (m.position + shift, later(prior, m.prior));
            self.note_malformed(source, position, m.ts, prior, m.message);
        }
        self.tally.add(tally);
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

    pub(super) fn note_malformed(
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

    /// `source:position` of a delivery read from a source of this history.
    pub(super) fn shown(&self, source: u32, position: u64) -> String {
        format!("{}:{position}", self.sources[source as usize])
    }

    pub(super) fn prov(&self, r: &Rec) -> Provenance {
        r.provenance(self)
    }

    pub(super) fn view(&self, r: &Rec) -> EventView {
        r.view(self)
    }

    pub(super) fn sample(&self, r: &Rec, detail: String) -> Sample {
        r.sample(self, detail)
    }

    /// Assesses the history: the end of input is the end of time, every window is final.
    pub fn finish(mut self) -> Report {
        let mut accs = self.accs();
        let judged = self.judge(&mut accs);
        self.report(accs, judged)
    }

    /// One empty accumulator per property, its window range covering every valid attributed
    /// event, duplicates included.
    pub(super) fn accs(&self) -> Vec<Acc> {
        accs_covering(&self.contract, &self.ranges)
    }

    /// Judges the records into `accs`: duplicates settled, telemetry gaps found (unless the
    /// (emitter, seq) keys are settled outside, [`History::settle_seqs_outside`]), what a
    /// conformance run exercised, every applied event and (property, scope) group.
    pub(super) fn judge(&mut self, accs: &mut [Acc]) -> Judged {
        let (by_seq, emitter_starts) = self.by_seq();
        let duplicates = self.settle_duplicates(accs, &by_seq);
        let emitters = if self.seqs_outside.is_some() {
            Vec::new()
        } else {
            self.telemetry_gaps(accs, &by_seq, &emitter_starts)
        };
        drop(by_seq);
        let conformance = self.conformance.then(|| self.exercised());
        self.assess_events(accs);
        Judged {
            duplicates,
            emitters,
            conformance,
        }
    }

    /// The report from judged accumulators: malformed events, premises and route silence
    /// placed, each property concluded.
    pub(super) fn report(mut self, mut accs: Vec<Acc>, judged: Judged) -> Report {
        self.place_malformed(&mut accs);
        let (attestations_ignored, premises) = self.assess_premises(&mut accs);
        let mut properties = self.conclude(accs);
        for (p, list) in properties.iter_mut().zip(premises) {
            p.premises = list;
        }
        let verdict = properties
            .iter()
            .map(|p| p.verdict)
            .max()
            .unwrap_or(Verdict::Unknown);
        Report {
            verdict,
            contract: ContractSummary::from(&self.compiled),
            unattributed: self.tally.unattributed,
            attestations_ignored,
            malformed: self.malformed.len() as u64,
            events: self.tally.valid,
            duplicates: judged.duplicates,
            properties,
            malformed_events: std::mem::take(&mut self.malformed_samples),
            emitters: judged.emitters,
            conformance: judged.conformance,
        }
    }

    /// Leaves the (emitter, seq) keys to be settled outside this history, which holds only
    /// some of them (`check --max-memory`, by scope): the records at `aside` (source,
    /// position) are conflicting deliveries set aside there, and no telemetry gap is looked
    /// for here. A key whose deliveries are all here and equal is settled here as usual: equal
    /// deliveries share their scope.
    pub(super) fn settle_seqs_outside(&mut self, aside: std::sync::Arc<AsideSet>) {
        self.seqs_outside = Some(aside);
    }
}

/// One empty accumulator per property of `contract`, its window range covering its time range
/// in `ranges` ([`note_range`]).
pub(super) fn accs_covering(contract: &Contract, ranges: &[Option<(i64, i64)>]) -> Vec<Acc> {
    let mut accs: Vec<Acc> = contract.properties.iter().map(Acc::new).collect();
    for (acc, range) in accs.iter_mut().zip(ranges) {
        if let Some((lo, hi)) = *range {
            acc.series.cover(lo);
            acc.series.cover(hi);
        }
    }
    accs
}

/// [`History::note_added`] for record `r` at index `idx`: whether it has an order key.
fn note(seqs: &mut Vec<SeqTrack>, ranges: &mut [Option<(i64, i64)>], r: &Rec, idx: u32) -> bool {
    SeqTrack::note(seqs, r, idx);
    note_range(ranges, r);
    r.order_key().is_some()
}

/// Notes record `r` in the time range of its property ([`History::ranges`]): every valid
/// attributed record but attestations, which extend no window (SPEC §10).
pub(super) fn note_range(ranges: &mut [Option<(i64, i64)>], r: &Rec) {
    if r.prop != UNATTRIBUTED && r.kind != Kind::Attestation {
        let range = &mut ranges[r.prop as usize];
        *range = Some(range.map_or((r.ts, r.ts), |(a, b)| (a.min(r.ts), b.max(r.ts))));
    }
}

/// (source, position) of conflicting deliveries set aside by a settlement outside a history.
pub(super) type AsideSet = std::collections::HashSet<(u32, u64)>;

/// What [`History::judge`] found beside the accumulators.
#[derive(Debug, Default)]
pub(super) struct Judged {
    pub(super) duplicates: u64,
    pub(super) emitters: Vec<crate::report::EmitterReport>,
    pub(super) conformance: Option<crate::report::Conformance>,
}

impl Resolve for History {
    fn resolve_name(&self, id: u32) -> Option<&str> {
        (id != NONE).then(|| self.strings.resolve(id))
    }

    fn resolve_source(&self, i: u32) -> &str {
        &self.sources[i as usize]
    }

    fn resolve_own(&self, n: u32) -> String {
        unreachable!("check reads no spans (own provenance {n})")
    }
}
