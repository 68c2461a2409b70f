//! Taking one event in: admission by the per-event rules ([`crate::rules`]), interning what is
//! kept, duplicate settlement (the `dups` module), what the event counts for in its property's
//! tally, and handing it to its scope (the `decide` module); malformed and misrouted events.

use super::aside::Linked;
use super::dups::{Attributed, Seen};
use super::emitters::{SeqRuns, merge_runs};
use super::names::shortened;
use super::spans::{SpanId, render, span_key};
use super::state::{Live, MAX_NAME_BYTES, Pushed, UNDECLARED};
use super::tally::{Kept, count_undeclared};
use crate::event::{Event, Kind};
use crate::finding::Reason;
use crate::rules::{
    self, Applied, MALFORMED_SAMPLES, NONE, OWN_PROVENANCE, Observes, Reasons, Rec, Received,
    UNATTRIBUTED,
};
use crate::time::EventTime;

impl Live {
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

    /// Reads, changing nothing, the memory that pushing `ev` reads first: its scope's entry in
    /// its property's table and the scope's state. Called for a few events in a row ahead of
    /// pushing them, it lets the processor fetch those scopes' memory at once (their loads do
    /// not depend on one another) rather than stall on one cache miss after another while each
    /// event is applied; at a few hundred thousand scopes those misses are most of a push. No
    /// answer depends on it.
    pub fn warm(&self, ev: &Event<'_>) {
        if let Some(st) = self.kept_state(ev) {
            std::hint::black_box(st.warm());
        }
    }

    /// [`Live::warm`] for a span's own provenance: the part of the span index its lookup reads
    /// first. No answer depends on it.
    pub fn warm_span(&self, span: &SpanId) {
        self.span_index.warm(span);
    }

    /// [`Live::warm`] for the next events, up to 32 of them, a level of memory at a time
    /// across all of them (their scope table entries, then their states, then what those
    /// point to): no answer depends on it.
    pub fn warm_all<'e, E: std::borrow::Borrow<Event<'e>>>(&self, events: impl Iterator<Item = E>) {
        const MAX: usize = super::scopes::WARM_MAX;
        // The scope ids' table lookups first, all of them, a level at a time (control
        // bytes, entries, strings: `Interner::warm_level`), before any state is read.
        let mut keys: [(usize, &str, u64); MAX] = [(0, "", 0); MAX];
        let mut n = 0;
        for ev in events.take(MAX) {
            let ev = ev.borrow();
            let Ok(p) = rules::property_of(&self.contract, ev) else {
                continue;
            };
            let (Some(scope), Some(prop)) = (ev.scope, self.state.props.get(p as usize)) else {
                continue;
            };
            keys[n] = (p as usize, scope, prop.scopes.ids().hash(scope));
            n += 1;
        }
        let keys = &keys[..n];
        let mut seen = 0;
        for level in 0..3 {
            for &(p, _, hash) in keys {
                seen ^= self.state.props[p].scopes.ids().warm_level(hash, level);
            }
        }
        std::hint::black_box(seen);
        let mut states = [None; MAX];
        for (slot, &(p, scope, hash)) in states.iter_mut().zip(keys) {
            *slot = self.state.props[p].scopes.get_hashed(scope, hash);
        }
        let states = states.iter().flatten().copied();
        std::hint::black_box(super::scopes::ScopeState::warm_all(states));
    }

    /// The state of `ev`'s scope in its property, if the scope is kept.
    fn kept_state(&self, ev: &Event<'_>) -> Option<&super::scopes::ScopeState> {
        let p = rules::property_of(&self.contract, ev).ok()?;
        self.state.props.get(p as usize)?.scopes.get(ev.scope?)
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
        self.received_at = received_at;
        let received = Received {
            at: received_at,
            tolerance: self.state.options.future_tolerance,
        };
        let p = match rules::admit(&self.contract, ev, Some(received)) {
            Ok(p) => p,
            Err(why) => {
                self.malformed_at(span, source, position, Some(ev.ts), why.to_string());
                return Pushed::Malformed;
            }
        };
        let prop = (p != UNATTRIBUTED).then_some(p as usize);
        self.state.valid += 1;
        // Attestations move no watermark (SPEC §10).
        if ev.kind != Kind::Attestation {
            self.state.max_ts = Some(self.state.max_ts.map_or(ev.ts.0, |m| m.max(ev.ts.0)));
        }
        let mut rec = Rec::of(ev, p, source, position);
        // An event with a `seq` of an emitter beyond `max_emitters`: set aside (the `emitters`
        // module).
        let untracked = match (ev.emitter, ev.seq) {
            (Some(name), Some(_)) => {
                self.state.emitters.len() >= self.state.options.max_emitters
                    && !self
                        .name_id(name)
                        .is_some_and(|id| self.state.emitters.contains_key(&id))
            }
            _ => false,
        };
        // Or one whose seq would open another run of seqs beyond `max_seq_fragments` (the
        // `emitters` module).
        let fragmenting = !untracked
            && self.seq_fragments >= self.max_seq_fragments
            && match (ev.emitter, ev.seq) {
                (Some(name), Some(seq)) => self
                    .name_id(name)
                    .and_then(|id| self.state.emitters.get(&id))
                    .is_some_and(|e| e.runs.opens_run(seq.0)),
                _ => false,
            };
        // A span is kept only for an attributed event (as its names are). Its record's
        // position is its span id's 8 bytes (its WAL position is not its provenance), which
        // finds its other deliveries without reading the span table.
        if let Some(id) = span.filter(|_| prop.is_some()) {
            rec.source = OWN_PROVENANCE | self.state.spans.add(id, source);
            rec.position = span_key(id);
        }
        if untracked || fragmenting {
            return self.push_untracked(prop, ev, &rec, fragmenting);
        }
        // Only what is kept is interned: an unattributed event's holder and route are not, nor
        // a heartbeat's route (it matters only when declared: a declared route is interned at
        // start, an undeclared one is [`UNDECLARED`]), nor an attestation's (its support is
        // kept apart, the `premises` module).
        let keeps_names = prop.is_some() && ev.kind != Kind::Attestation;
        let opt = |live: &mut Live, s: Option<&str>| match s {
            Some(s) if keeps_names => live.intern(s),
            _ => NONE,
        };
        rec.route = match ev.route {
            Some(r) if ev.kind == Kind::Heartbeat => self.name_id(r).unwrap_or(UNDECLARED),
            r => opt(self, r),
        };
        rec.holder = opt(self, ev.holder);
        rec.emitter = ev.emitter.map_or(NONE, |e| self.intern(e));
        // A span delivered again, whatever this delivery is (to be kept or not: a heartbeat,
        // no scope, unattributed), is settled against its kept delivery first, wherever that
        // is kept: its (emitter, seq) and order keys, being that delivery's too, would find it
        // as well, but as another event, archived again (the `dups` module).
        if let Some(id) = span
            && let Some(settled) = self.settle_span(prop, &rec, id, ev.scope)
        {
            if let (Attributed::SpanAgain, Some(p)) = (&settled, prop) {
                self.settle_aside_order(p, &rec, ev);
            }
            // Its (emitter, seq) too: `check` groups it under each of its keys.
            let dropped = matches!(settled, Attributed::Duplicate);
            self.settle_seq_of_span(prop, &rec, ev, dropped, None);
            self.after_push();
            return match settled {
                Attributed::Duplicate => Pushed::Duplicate,
                _ => Pushed::SpanAgain,
            };
        }
        // Or against its delivery that no scope keeps (a heartbeat, an event without a scope
        // or a property, an attestation).
        if let Some(id) = span
            && let Some(settled) = self.settle_unkept_span(prop, &rec, ev, id, source)
        {
            if let (Pushed::SpanAgain, Some(p)) = (settled, prop) {
                self.settle_aside_order(p, &rec, ev);
            }
            let dropped = settled == Pushed::Duplicate;
            let linked = dropped.then_some(Linked::Unkept(*id));
            self.settle_seq_of_span(prop, &rec, ev, dropped, linked);
            self.after_push();
            return settled;
        }
        // Duplicates by (emitter, seq), over every valid event (the `dups` module).
        let keyed = rec.seq_key().is_some();
        let seen = if keyed {
            self.settle_seq(prop, &rec, ev)
        } else {
            Seen::New
        };
        // A span kept in no scope is noted for its re-deliveries; one its (emitter, seq) set
        // aside, as set aside (its re-deliveries are too, as `check` groups them).
        // `route`: the declared route it observed (`dups::OBSERVED`), or `NONE`.
        let unkept = |live: &mut Live, reasons, route, aside| {
            if let Some(id) = span {
                live.note_unkept_span(prop, &rec, ev, id, (reasons, route), aside);
            }
        };
        let outcome = match (seen, prop) {
            (Seen::Duplicate, _) => {
                // Equal to the delivery of its (emitter, seq): its span, if that delivery lacks
                // it, links the two (the `aside` module).
                if let (Some(id), Some((em, seq))) = (span, rec.seq_key()) {
                    self.link_dropped(None, Some(id), rec.ts, Linked::Seq(em, seq));
                    unkept(self, Reasons::EMPTY, NONE, false);
                }
                return Pushed::Duplicate;
            }
            (seen, None) => {
                self.state.unattributed += 1;
                unkept(self, Reasons::EMPTY, NONE, matches!(seen, Seen::Aside));
                Pushed::Unattributed
            }
            (Seen::Aside, Some(p)) => {
                self.count_aside(p, &rec);
                self.settle_aside_order(p, &rec, ev);
                unkept(self, Reasons::EMPTY, NONE, true);
                Pushed::Assessed
            }
            (Seen::New, Some(p)) if ev.kind == Kind::Attestation => {
                self.push_attestation(p, &rec, ev, keyed, span);
                unkept(self, Reasons::EMPTY, NONE, false);
                Pushed::Assessed
            }
            (Seen::New, Some(p)) => match self.push_attributed(p, rec, ev) {
                Attributed::Applied { scope, reasons } => {
                    if keyed {
                        self.note_applied(&rec, scope, reasons);
                    }
                    if scope == NONE || super::dups::observed_route(scope).is_some() {
                        unkept(self, reasons, scope, false);
                    }
                    Pushed::Assessed
                }
                Attributed::Duplicate => {
                    // Dropped as equal to a kept event (linked by `settle_kept`): its span's
                    // re-deliveries are compared with it.
                    unkept(self, Reasons::EMPTY, NONE, false);
                    Pushed::Duplicate
                }
                Attributed::Aside => {
                    // Set aside by its order key: its span's re-deliveries are compared with it.
                    unkept(self, Reasons::EMPTY, NONE, true);
                    Pushed::Assessed
                }
                Attributed::SpanAgain => Pushed::SpanAgain,
            },
        };
        self.after_push();
        outcome
    }

    /// The watermark is shared: every property moves with any valid event (their pending
    /// decisions, finality and folding too); then the name and span tables may be swept.
    fn after_push(&mut self) {
        for p in 0..self.state.props.len() {
            self.advance(p);
        }
        self.sweep_names();
        self.sweep_spans();
        if self.state.aged_sweep_due() {
            let horizon = self.min_horizon();
            self.state.sweep_aged(horizon);
        }
    }

    /// Sets aside a valid event with a `seq` of an emitter beyond [`super::LiveOptions::max_emitters`]:
    /// not applied, counted, and `unknown(telemetry_gap)` for its property in the window of its
    /// time (its seq cannot be tracked: lost telemetry as far as this partition can tell).
    /// Nothing of it is interned.
    /// `fragmenting`: its emitter is tracked, but its seq would open a run beyond
    /// `max_seq_fragments`.
    fn push_untracked(
        &mut self,
        prop: Option<usize>,
        ev: &Event<'_>,
        rec: &Rec,
        fragmenting: bool,
    ) -> Pushed {
        let outcome = match prop {
            None => {
                self.state.unattributed += 1;
                self.state.untracked_unattributed += 1;
                Pushed::Unattributed
            }
            Some(p) => {
                self.count_aside(p, rec);
                self.state.props[p].tally.untracked_emitter_events += 1;
                let name = ev.emitter.unwrap_or_default();
                let max = self.state.options.max_emitters;
                let max_runs = self.max_seq_fragments;
                self.raise(p, rec, Reason::TelemetryGap, |_| {
                    let name = if name.len() > MAX_NAME_BYTES {
                        shortened(name)
                    } else {
                        name.to_string()
                    };
                    if fragmenting {
                        format!(
                            "emitter `{name}`: its seqs are fragmented beyond {max_runs} runs in this partition; an event whose seq would open another is set aside"
                        )
                    } else {
                        format!(
                            "emitter `{name}` not tracked: more than max_emitters ({max}) emitters; its events are set aside"
                        )
                    }
                });
                Pushed::Assessed
            }
        };
        self.after_push();
        outcome
    }

    /// Applies a new attributed event of property `p` (its (emitter, seq) settled): settles its
    /// (scope, incarnation, order, epoch), counts what it counts for ([`Applied`]) and keeps it
    /// in its scope.
    fn push_attributed(&mut self, p: usize, mut rec: Rec, ev: &Event<'_>) -> Attributed {
        let scope = ev.scope;
        // Every scoped event but a heartbeat is kept in its scope.
        let kept_in = scope.filter(|_| rec.kind != Kind::Heartbeat);
        if let Some(s) = kept_in {
            rec.scope = self.state.props[p].scopes.get_or_insert(s).0;
        }
        // Duplicates by (scope, incarnation, order, epoch) first: a delivery set aside takes no
        // part (the `dups` module).
        if let Some(s) = kept_in
            && rec.order_key().is_some()
            && let Some(settled) = self.settle_order(p, &rec, s, ev)
        {
            return settled;
        }
        // A span kept: its delivery (the span was settled before its other keys).
        if kept_in.is_some() && rec.span().is_some() {
            self.index_span(p, &rec);
        }
        let route = self.route_ids.route(p, rec.route);
        let applied = Applied::of(&rec, route, &self.contract.properties[p]);
        let state = &mut self.state;
        let t = &mut state.props[p].tally;
        t.add_event(rec.ts);
        if applied.stale_rejection {
            t.stale_rejections += 1;
        }
        let mut observed = NONE;
        match applied.observes {
            Observes::Declared(i) => {
                observed = super::dups::OBSERVED + i as u32;
                let k = t.series.index(rec.ts);
                t.routes[i].entry(k).or_default().add(rec.ts);
            }
            // By name, as a summary carries it, the first ones (the others in one bucket): no
            // verdict depends on it (`undeclared_route` is raised per event).
            Observes::UndeclaredByMutation => {
                count_undeclared(&mut t.undeclared, &state.names[rec.route as usize], 1);
            }
            Observes::UndeclaredByHeartbeat => t.undeclared_heartbeats += 1,
            Observes::Nothing => {}
        }
        for reason in applied.reasons.iter() {
            self.raise(p, &rec, reason, |l| {
                rules::detail(reason, rec.kind, l.name(rec.route))
            });
        }
        let reasons = applied.reasons;
        match kept_in {
            Some(s) => self.keep_in_scope(p, rec, s, reasons),
            // Kept in no scope: noted as the route it observed, if any (`dups::OBSERVED`).
            None => Attributed::Applied {
                scope: observed,
                reasons,
            },
        }
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
        let sample = Kept {
            source: span.map_or_else(
                || format!("{}:{position}", s.sources[source as usize]),
                |id| render(&s.sources[source as usize], id),
            ),
            ts: ts.map(|t| t.to_string()),
            detail: message,
        };
        if s.malformed_samples.len() >= MALFORMED_SAMPLES {
            s.malformed_samples.pop_front();
        }
        for p in &mut s.props {
            let t = &mut p.tally;
            t.counts[Reason::MalformedEvent as usize] += 1;
            rules::place_malformed(&mut t.series, ts.map(|t| t.0), s.max_ts);
            t.keep_sample(Reason::MalformedEvent, || sample.clone());
        }
        s.malformed_samples.push_back(sample);
    }

    /// Joins seqs that other partitions saw (from [`super::View::seq_runs`]) into this
    /// partition's runs, for the emitters it knows: their union is what was seen, so gaps and
    /// duplicate settlement stay as they were, and runs fragmented by the partitioning join up.
    /// Returns the runs removed.
    pub fn absorb_seq_runs(&mut self, seen: &SeqRuns) -> usize {
        let mut removed = 0;
        for (name, runs) in &seen.0 {
            let Some(&id) = self.name_ids.get(name.as_str()) else {
                continue;
            };
            let Some(e) = self.state.emitters.get_mut(&id) else {
                continue;
            };
            let (before, fragments) = (e.runs.len(), e.runs.fragments());
            e.runs = merge_runs([&e.runs, runs].into_iter());
            removed += before.saturating_sub(e.runs.len());
            self.seq_fragments = self.seq_fragments - fragments + e.runs.fragments();
        }
        removed
    }

    /// Records that the assessed event `ev` at `position` of `source` arrived under the Kafka
    /// key `key`, which is not its scope (`misrouted_partition`, SPEC §4): with partitioning by
    /// scope, its scope's other events may be on another partition, out of this one's sight.
    pub fn note_misrouted(&mut self, ev: &Event<'_>, source: u32, position: u64, key: &str) {
        let Some(p) = rules::property_of(&self.contract, ev)
            .ok()
            .filter(|&p| p != UNATTRIBUTED)
        else {
            return;
        };
        let rec = Rec::of(ev, p, source, position);
        self.raise(p as usize, &rec, Reason::MisroutedPartition, |_| {
            format!(
                "message key `{key}` is not the event's scope `{}`",
                ev.scope.unwrap_or_default()
            )
        });
    }

    /// Counts `reason` for `rec`; the sample's detail is worded only while samples are kept.
    pub(super) fn raise(
        &mut self,
        p: usize,
        rec: &Rec,
        reason: Reason,
        detail: impl FnOnce(&Live) -> String,
    ) {
        self.count(p, rec, reason, detail);
        self.state.props[p].tally.series.add_reason(rec.ts, reason);
    }

    /// Counts `reason` once for `rec` (with a sample if one is still wanted), placed on no
    /// window: the caller's to place.
    pub(super) fn count(
        &mut self,
        p: usize,
        rec: &Rec,
        reason: Reason,
        detail: impl FnOnce(&Live) -> String,
    ) {
        let sample = (self.state.props[p].tally)
            .wants_sample(reason)
            .then(|| Kept::from(rec.sample(self, detail(self))));
        let t = &mut self.state.props[p].tally;
        t.counts[reason as usize] += 1;
        if let Some(sample) = sample {
            t.samples.entry(reason).or_default().push(sample);
        }
    }

    /// Counts `reason` once for `rec`, placed on every window from `other` (the time of
    /// another delivery of its key) to `rec`'s.
    pub(super) fn raise_span(
        &mut self,
        p: usize,
        rec: &Rec,
        other: i64,
        reason: Reason,
        detail: impl FnOnce(&Live) -> String,
    ) {
        // Placed once, by the span: not at `rec` first and then taken back, which a final
        // window refuses (it counted twice there).
        self.count(p, rec, reason, detail);
        let series = &mut self.state.props[p].tally.series;
        // Its window is in the range already, as `check` has it, for the span not to be cut
        // (an attestation's never is: it extends no window).
        if rec.kind != Kind::Attestation {
            series.cover(rec.ts);
        }
        series.add_reason_span(other, rec.ts, reason);
    }

    /// Takes back one `reason` raised at `ts`.
    pub(super) fn withdraw(&mut self, p: usize, ts: i64, reason: Reason) {
        let t = &mut self.state.props[p].tally;
        t.counts[reason as usize] = t.counts[reason as usize].saturating_sub(1);
        t.series.retract_reason(ts, reason);
    }
}
