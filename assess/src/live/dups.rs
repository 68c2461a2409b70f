//! Duplicate settlement in `serve` (SPEC §4 "Duplicates", and "`serve` is exact within the
//! lateness horizon" on re-sends of folded events).
//!
//! Events sharing (emitter, seq), or commit/fence events sharing (scope, incarnation, order,
//! epoch), or events sharing their own provenance (a span's, found by the span index wherever
//! it is kept: the `spans` module), are one event delivered twice when equal in content
//! ([`crate::rules`] defines the keys and the content): one is kept. A key names no property, so a kept event of another property can share it.
//! When they differ, **all** of them are set aside, whatever the arrival order: the later
//! delivery is not applied; the earlier one, already applied, has its per-event reasons
//! withdrawn and, if kept in a scope, is set aside there (its route observation taken back,
//! the scope decided again without it); the provisional counterexamples that rested on it are
//! withdrawn (the `cxs` module). `conflicting_duplicate` is raised once per key and property
//! named, over the windows from the earliest to the latest delivery, as `check` places it.
//! Further deliveries of a key already set aside are set aside too.
//!
//! To find the earlier delivery of an (emitter, seq), each emitter keeps a [`SeqWindow`](super::emitters::SeqWindow) of its
//! recent deliveries: per seq a content hash, the event time, and where it went (property and
//! scope id, and the per-event reasons it raised), 24 bytes, dropped with the horizon. An
//! (emitter, seq) whose delivery was dropped so (a *folded* event: its seq lies in the emitter's
//! runs, below the window) can no longer be compared: a re-send is never dropped as a
//! duplicate, nor applied; it is `unknown(late_evidence)` when itself older than the horizon,
//! else `unknown(conflicting_duplicate)` (its time differs from the folded event's, so its
//! content does). An emitter that restarts its seq without a new id is seen so. If the folded
//! event set the high-water mark of the scope the re-send names (in a property the emitter
//! fed), that mark is tainted (the `scopes` module doc, "Tainted marks"): it no longer refutes
//! on the event's behalf, and the provisional counterexamples resting on it are withdrawn. So
//! is it when the earlier delivery is still in the window but its event already folded. A seq at or
//! above the window's start that the emitter's runs hold but the window does not (seen by
//! another partition, through [`Live::absorb_seq_runs`], or beyond the window's span) is
//! dropped as a duplicate, as before: its content was never here to compare.
//!
//! A folded grant is kept whole, so a re-send of one is compared with it all the same (the
//! `grants` module).
//!
//! Of a (scope, incarnation, order, epoch) key, only kept events are compared: a delivery whose
//! order key belongs to a folded event is judged against the mark like any late event.

use super::aside::{LinkKey, Linked};
use super::conflicts::ConflictKey;
use super::emitters::{Delivery, EMPTY};
use super::scopes::fast::Fast;
use super::scopes::{Tainted, key_hash};
use super::spans::{KeptSpan, SpanId, Unkept, render};
use super::state::{Cx, Live, Pushed};
use crate::event::Event;
use crate::finding::{CounterexampleKind, Reason};
use crate::rules::{self, ASIDE, Applied, NONE, Observes, Reasons, Rec, UNATTRIBUTED};

/// The noted "scope" ([`Live::note_applied`], [`Unkept::route`]) of an applied event kept in
/// no scope that observed declared route `i`: `OBSERVED + i`, so that setting it aside takes
/// the observation back (`check` sets such an event aside whole).
pub(super) const OBSERVED: u32 = 0xFFF0_0000;

/// The declared route an applied event kept in no scope observed, from its noted scope.
pub(super) fn observed_route(scope: u32) -> Option<usize> {
    (OBSERVED..OBSERVED + 0x1_0000)
        .contains(&scope)
        .then(|| (scope - OBSERVED) as usize)
}

/// How an (emitter, seq) stands against the deliveries seen.
pub(super) enum Seen {
    /// A new key: apply the event.
    New,
    /// An equal delivery of a key seen: drop it.
    Duplicate,
    /// A delivery to set aside (conflicting, or of a folded key): not applied.
    Aside,
}

/// How an attributed event was taken by its property.
pub(super) enum Attributed {
    /// Applied: kept under scope id `scope` (`NONE` when not kept), having raised `reasons`.
    Applied { scope: u32, reasons: Reasons },
    /// An equal delivery of a kept event's order key: dropped.
    Duplicate,
    /// Set aside as a conflicting delivery of an order key.
    Aside,
    /// Set aside as a conflicting delivery of a kept span ([`Pushed::SpanAgain`]).
    SpanAgain,
}

impl Live {
    /// Settles the (emitter, seq) of `rec` (of property `prop`, if attributed): see the module
    /// doc. A new key is recorded. A delivery of a seq seen before (set aside, or dropped: an
    /// equal one has its time, one of a seq seen elsewhere may not) is one more time of its
    /// seq: a telemetry gap next to the seq spans it too, as `check` places gaps
    /// ([`Runs::widen`](super::emitters::Runs::widen)).
    pub(super) fn settle_seq(&mut self, prop: Option<usize>, rec: &Rec, ev: &Event<'_>) -> Seen {
        let seen = self.settle_seq_key(prop, rec, ev);
        if !matches!(seen, Seen::New)
            && let Some(e) = self.state.emitters.get_mut(&rec.emitter)
        {
            e.runs.widen(rec.seq, rec.ts);
        }
        seen
    }

    fn settle_seq_key(&mut self, prop: Option<usize>, rec: &Rec, ev: &Event<'_>) -> Seen {
        let hash = rules::content_hash(ev, prop.map_or(UNATTRIBUTED, |p| p as u16));
        let e = self.state.emitters.get_or_default(rec.emitter);
        if let Some(p) = prop {
            e.props.insert(p as u16);
        }
        let late = &self.state.late_attests;
        if let Some(d) = (e.recent.get(rec.seq)).or_else(|| late.get(rec.emitter, rec.seq)) {
            let key = ConflictKey::Seq(rec.emitter, rec.seq);
            if d.conflicted && self.state.conflicts.contains(&key) {
                // One more delivery of a key already set aside.
                if let Some(p) = prop {
                    let first = (usize::from(d.prop) == p).then_some(d.ts);
                    self.place_conflict_again(key, p, rec, first);
                }
                return Seen::Aside;
            }
            if d.conflicted {
                // Its first delivery was set aside by another of its keys: an equal one is set
                // aside with it, uncounted (`check` drops it as a duplicate of one set aside);
                // a different one conflicts under this key too.
                if d.hash == hash {
                    return Seen::Duplicate;
                }
                self.conflict_again(prop, rec, key, d.ts, d.prop, |l| {
                    let emitter = &l.state.names[rec.emitter as usize];
                    format!(
                        "two different events carry emitter `{emitter}` seq {}",
                        rec.seq
                    )
                });
                return Seen::Aside;
            }
            if d.hash == hash {
                self.state.duplicates += 1;
                return Seen::Duplicate;
            }
            (self.state.delivery_mut(rec.emitter, rec.seq))
                .expect("kept")
                .conflicted = true;
            self.conflicting_seq(prop, rec, d);
            return Seen::Aside;
        }
        if e.runs.contains(rec.seq) {
            if rec.seq >= e.recent.base && !e.recent.may_have_forgotten(rec.seq) {
                // Seen elsewhere (another partition) or beyond the window: never comparable.
                self.state.duplicates += 1;
                return Seen::Duplicate;
            }
            // The folded delivery it may differ from was of a property the emitter fed (this
            // one's among them), which one is forgotten: each is told (`check` raises
            // `conflicting_duplicate` in the properties both deliveries name: never `holds`
            // there), and the marks it may have set there are tainted.
            let fed: Vec<usize> = e.props.as_slice().iter().map(|&q| usize::from(q)).collect();
            if let Some(seen) = self.settle_folded_grant(prop, rec, ev, &fed) {
                return seen;
            }
            let mut tainted = Vec::new();
            if let Some(scope) = ev.scope {
                for &q in &fed {
                    if self.taint_mark(q, scope, rec) {
                        tainted.push(q);
                    }
                }
            }
            let emitter = self.state.names[rec.emitter as usize].clone();
            for p in fed {
                if tainted.contains(&p) && Some(p) != prop {
                    let scope = ev.scope.unwrap_or_default();
                    self.raise(p, rec, Reason::ConflictingDuplicate, |_| format!(
                        "emitter `{emitter}` seq {} was delivered before and folded into scope `{scope}`'s high-water mark: this delivery differs from it", rec.seq
                    ));
                } else if rec.ts < self.state.props[p].horizon {
                    self.raise(p, rec, Reason::LateEvidence, |_| format!(
                        "emitter `{emitter}` seq {} was delivered before and folded: this delivery, older than the retained horizon, can no longer be compared with it", rec.seq
                    ));
                } else {
                    self.raise(p, rec, Reason::ConflictingDuplicate, |_| format!(
                        "emitter `{emitter}` seq {} was delivered before, older than the retained horizon: this delivery differs from it (an emitter that restarted its seq without a new id?)", rec.seq
                    ));
                }
            }
            return Seen::Aside;
        }
        if e.recent.is_empty() {
            self.recent_emitters.push(rec.emitter);
        }
        e.recent.insert(
            rec.seq,
            Delivery {
                hash,
                ts: rec.ts,
                prop: prop.map_or(UNATTRIBUTED, |p| p as u16),
                ..EMPTY
            },
        );
        e.events += 1;
        let before = e.runs.fragments();
        e.runs.add(rec.seq, rec.ts);
        self.seq_fragments = self.seq_fragments + e.runs.fragments() - before;
        Seen::New
    }

    /// Notes where the applied delivery of (emitter, seq) went, for setting it aside later.
    pub(super) fn note_applied(&mut self, rec: &Rec, scope: u32, reasons: Reasons) {
        if let Some(d) = self
            .state
            .emitters
            .get_mut(&rec.emitter)
            .and_then(|e| e.recent.get_mut(rec.seq))
        {
            d.scope = scope;
            d.reasons = reasons;
        }
    }

    /// `rec` and the earlier delivery `first` of its (emitter, seq) differ: raise
    /// `conflicting_duplicate` for the properties they name and set `first` aside.
    fn conflicting_seq(&mut self, prop: Option<usize>, rec: &Rec, first: Delivery) {
        let first_prop = (first.prop != UNATTRIBUTED).then_some(first.prop as usize);
        let emitter = self.state.names[rec.emitter as usize].clone();
        let detail = |_: &Live| {
            format!(
                "two different events carry emitter `{emitter}` seq {}",
                rec.seq
            )
        };
        if let Some(p) = prop {
            self.raise_span(p, rec, first.ts, Reason::ConflictingDuplicate, detail);
        }
        if let Some(q) = first_prop.filter(|&f| Some(f) != prop) {
            // Shown as the first delivery, whose window its property covers already (this
            // one, of another property, extends no window of it: `check` clamps the span).
            let was = Rec {
                ts: first.ts,
                prop: first.prop,
                ..*rec
            };
            self.raise_span(q, &was, rec.ts, Reason::ConflictingDuplicate, detail);
        }
        let key = ConflictKey::Seq(rec.emitter, rec.seq);
        self.note_conflict(key, first.ts, rec.ts, prop.into_iter().chain(first_prop));
        self.follow_link(LinkKey::Seq(rec.emitter, rec.seq));
        let Some(p) = first_prop else { return };
        if let Some(scope) = self.undo_delivery(p, rec.emitter, rec.seq, &first) {
            // Its delivery outlived its event, which folded into the mark.
            let name = self.state.props[p].scopes.name(scope).to_string();
            self.taint_mark(p, &name, rec);
        }
    }

    /// Takes back what `first`, the applied delivery of (`em`, `seq`) of property `p`, did:
    /// its per-event reasons; the declared route it observed when kept in no scope; an
    /// attestation's support or count as ignored; or its place in its scope, whose id is
    /// returned when its event is no longer kept there (it folded: the caller's to judge).
    pub(super) fn undo_delivery(
        &mut self,
        p: usize,
        em: u32,
        seq: u64,
        first: &Delivery,
    ) -> Option<u32> {
        self.withdraw_reasons(p, first.ts, first.reasons);
        if let Some(i) = observed_route(first.scope) {
            self.state.props[p].tally.unobserve(i, first.ts);
            return None;
        }
        if self.take_back_premise(p, first.scope, em, seq) || first.scope == NONE {
            return None;
        }
        let kept = self.set_aside_kept(p, first.scope, move |e: &Rec| {
            e.seq_key() == Some((em, seq))
        });
        (!kept).then_some(first.scope)
    }

    /// `rec` conflicts with a folded delivery of its (emitter, seq): if the high-water mark of
    /// `scope` (property `p`) rests on that delivery, the mark falls back to what the other
    /// folded events prove ([`ScopeState::taint`]), the scope is decided again, and the
    /// provisional counterexamples resting on it — as their stale or superseding event, or
    /// through the mark as their witness — are withdrawn. When it rests on another folded event,
    /// the delivery may still have taken one of its others away: its holders are unsure, and a
    /// reuse through it is withdrawn. Returns whether the mark rested on it.
    ///
    /// [`ScopeState::taint`]: super::scopes::ScopeState::taint
    fn taint_mark(&mut self, p: usize, scope: &str, rec: &Rec) -> bool {
        let Some(emitter) = self.state.names.get(rec.emitter as usize) else {
            return false;
        };
        let key = key_hash(emitter, rec.seq);
        let horizon = self.state.props[p].horizon;
        let skew = self.contract.properties[p].clock_skew.0;
        let Some(t) = self.state.props[p].scopes.taint(scope, key, horizon) else {
            return false;
        };
        self.decide_scope(p, scope, None, horizon);
        let (em, seq) = (rec.emitter, rec.seq);
        let is_it = move |e: &Rec| e.seq_key() == Some((em, seq));
        let on_mark = move |c: &Cx| {
            let m = c.mark.map(|m| (m.incarnation, m.epoch));
            match t {
                Tainted::Top(top) => m == Some(top),
                // Certain only through the mark's earliest time, now merely bounded; a reuse
                // through it rests on its holders, no longer known apart (difference test
                // against `check`, session 34: such a reuse stayed, and turned final).
                Tainted::First(top, first) => {
                    m == Some(top)
                        && (c.kind == CounterexampleKind::EpochReuse
                            || c.stale.ts.saturating_sub(skew) <= first)
                }
                // Its earliest time stands; the holders of any epoch it had are unsure.
                Tainted::Other(_) => c.kind == CounterexampleKind::EpochReuse,
            }
        };
        self.withdraw_resting(p, scope, is_it, on_mark);
        !matches!(t, Tainted::Other(_))
    }

    /// Settles the (scope, incarnation, order, epoch) key of `rec` (of property `p`) against the
    /// kept events of `scope`: `None` when no kept event shares it.
    pub(super) fn settle_order(
        &mut self,
        p: usize,
        rec: &Rec,
        scope: &str,
        ev: &Event<'_>,
    ) -> Option<Attributed> {
        let key = rec.order_key();
        let is_new = |f: &Fast| f.order_is_new(rec);
        let Some((q, first)) =
            self.find_kept(p, rec.scope, scope, |e| e.order_key() == key, is_new)
        else {
            // None kept: a delivery of the key set aside on arrival, if one was noted (the
            // `aside` module).
            let aside = self.settle_order_aside(p, rec, ev)?;
            if aside {
                self.count_aside(p, rec);
                return Some(Attributed::Aside);
            }
            return Some(Attributed::Duplicate);
        };
        let conflict = ConflictKey::Order(first.source, first.position);
        Some(
            self.settle_kept(Some(p), rec, (q, first), (conflict, true), || {
                order_conflict(scope, rec)
            }),
        )
    }

    /// Settles span `id`, the own provenance of `rec` (a span, [`Live::push_span`]; of
    /// property `p`, `None` when unattributed; naming `scope`, if any), against the kept
    /// delivery of the span, wherever it is kept (the span index, the `spans` module): `None`
    /// when none is. A delivery naming another scope or property, or none, or of another kind,
    /// differs in content: both are set aside. A delivery of a folded event (judged against the
    /// mark like any late event, and the same counterexample id if stale) is taken as another
    /// event. Settled before the event's other keys, which its kept delivery shares.
    pub(super) fn settle_span(
        &mut self,
        p: Option<usize>,
        rec: &Rec,
        id: &SpanId,
        scope: Option<&str>,
    ) -> Option<Attributed> {
        let k = self.span_index.find(&self.state.spans, id)?;
        let q = usize::from(k.prop);
        let scopes = &self.state.props.get(q)?.scopes;
        let events = scopes.state(k.scope).events();
        // None: that delivery folded (its entry is replaced when this one is kept).
        let first = *events.iter().find(|e| e.span() == Some(k.slot))?;
        let same_scope = p == Some(q) && scope == Some(scopes.name(k.scope));
        // The first delivery's scope, when this one names another (or none).
        let other = (!same_scope).then(|| scopes.name(k.scope).to_string());
        let span = first.shown_source(self);
        let key = (ConflictKey::Span(*id), same_scope);
        let settled = self.settle_kept(p, rec, (q, first), key, || {
            let here = scope.map_or_else(
                || "without a scope".to_string(),
                |s| format!("of scope `{s}`"),
            );
            match other {
                None => format!("two different events {here} come from span `{span}`"),
                Some(o) => format!(
                    "two different events come from span `{span}`: one of scope `{o}`, one {here}"
                ),
            }
        });
        Some(match settled {
            Attributed::Aside => Attributed::SpanAgain,
            s => s,
        })
    }

    /// Settles span `id`, the own provenance of `rec` (of property `p`, `None` when
    /// unattributed; read from `source`), against its delivery that no scope keeps, if one was
    /// noted ([`Live::note_unkept_span`]): an equal delivery is a duplicate; a different one
    /// (another kind, scope, property, time...) sets both aside and raises
    /// `conflicting_duplicate` for the properties they name, taking back the per-event reasons
    /// the first raised. What else the first delivery did (a heartbeat's route observation, an
    /// unattributed event's count) stays, as for an (emitter, seq). `None` when none was noted.
    pub(super) fn settle_unkept_span(
        &mut self,
        p: Option<usize>,
        rec: &Rec,
        ev: &Event<'_>,
        id: &SpanId,
        source: u32,
    ) -> Option<Pushed> {
        if self.state.unkept_spans.len() == 0 {
            return None;
        }
        let horizon = self.min_horizon();
        let noted = self.state.unkept_spans.get_mut(id, horizon)?;
        let first = *noted;
        let key = ConflictKey::Span(*id);
        let same = first.hash == rules::content_hash(ev, p.map_or(UNATTRIBUTED, |p| p as u16));
        if first.conflicted && self.state.conflicts.contains(&key) {
            if let Some(p) = p {
                self.count_aside(p, rec);
                let at = (usize::from(first.prop) == p).then_some(first.ts);
                self.place_conflict_again(key, p, rec, at);
            }
            return Some(Pushed::SpanAgain);
        }
        if first.conflicted {
            // Set aside by another of its keys: as for an (emitter, seq) (`settle_seq`).
            if same {
                return Some(Pushed::Duplicate);
            }
            if let Some(p) = p {
                self.count_aside(p, rec);
            }
            let shown = render(&self.state.sources[source as usize], id);
            self.conflict_again(p, rec, key, first.ts, first.prop, |_| {
                format!("two different events come from span `{shown}`")
            });
            return Some(Pushed::SpanAgain);
        }
        if same {
            // Its delivery was set aside through its (emitter, seq) since (that conflict marks
            // the key's delivery, not the span's entry): dropped with it, uncounted, as above.
            let aside = first.emitter != NONE
                && (self.state.delivery(first.emitter, first.seq))
                    .is_some_and(|d| d.conflicted && d.ts == first.ts && d.prop == first.prop);
            if !aside {
                self.state.duplicates += 1;
            }
            return Some(Pushed::Duplicate);
        }
        noted.conflicted = true;
        let shown = render(&self.state.sources[source as usize], id);
        let detail = format!(
            "two different events come from span `{shown}`: one a {} no scope keeps, one a {}",
            first.kind.as_str(),
            rec.kind.as_str()
        );
        if let Some(p) = p {
            self.count_aside(p, rec);
            self.raise_span(p, rec, first.ts, Reason::ConflictingDuplicate, |_| {
                detail.clone()
            });
        }
        let q = (first.prop != UNATTRIBUTED).then_some(usize::from(first.prop));
        if let Some(q) = q
            && p != Some(q)
        {
            // Shown as the first delivery: its time and kind, this one's provenance.
            let was = Rec {
                ts: first.ts,
                kind: first.kind,
                ..*rec
            };
            self.raise_span(q, &was, rec.ts, Reason::ConflictingDuplicate, |_| detail);
        }
        self.note_conflict(
            ConflictKey::Span(*id),
            first.ts,
            rec.ts,
            p.into_iter().chain(q),
        );
        self.take_back_unkept(q, &first);
        Some(Pushed::SpanAgain)
    }

    /// Takes back what the first delivery `first` of a span (of property `q`, if any) did that
    /// can be: its per-event reasons, and an attestation's support or ignored count when it
    /// carried an (emitter, seq) (kept by that key). Once: a delivery whose (emitter, seq) key
    /// conflicted already was taken back then; its key is marked conflicted now, so that a
    /// conflict on it later takes back nothing again.
    pub(super) fn take_back_unkept(&mut self, q: Option<usize>, first: &Unkept) {
        self.follow_link(LinkKey::Span(first.id));
        let seq = (first.emitter != NONE)
            .then(|| self.state.delivery_mut(first.emitter, first.seq))
            .flatten()
            .filter(|d| d.ts == first.ts && d.prop == first.prop);
        let scope = match seq {
            Some(d) if d.conflicted => return,
            Some(d) => {
                d.conflicted = true;
                d.reasons = Reasons::EMPTY;
                d.scope
            }
            None => NONE,
        };
        let Some(q) = q else { return };
        self.withdraw_reasons(q, first.ts, first.reasons);
        if let Some(i) = observed_route(first.route) {
            self.state.props[q].tally.unobserve(i, first.ts);
        }
        if first.kind == crate::event::Kind::Attestation && first.emitter == NONE {
            self.take_back_span_attestation(q, &first.id);
        } else {
            self.take_back_premise(q, scope, first.emitter, first.seq);
        }
    }

    /// Takes back what an attestation of property `p` did, applied under (`emitter`, `seq`)
    /// and noted as `scope` ([`Live::note_applied`]): its support (`ATTESTED`) or its count as
    /// ignored (`IGNORED`). Whether `scope` was one of those.
    pub(super) fn take_back_premise(
        &mut self,
        p: usize,
        scope: u32,
        emitter: u32,
        seq: u64,
    ) -> bool {
        if scope == super::premises::ATTESTED {
            self.take_back_attestation(p, emitter, seq);
        } else if scope == super::premises::IGNORED {
            self.uncount_ignored(p);
        } else {
            return false;
        }
        true
    }

    /// Notes `rec`, just applied without being kept in a scope (of property `p`, `None` when
    /// unattributed, having raised `reasons`), as the delivery of its span `id`, for its
    /// re-deliveries to be compared with ([`Live::settle_unkept_span`]).
    /// `conflicted`: it was set aside already (by its (emitter, seq)): every further
    /// delivery of the span is too.
    pub(super) fn note_unkept_span(
        &mut self,
        p: Option<usize>,
        rec: &Rec,
        ev: &Event<'_>,
        id: &SpanId,
        (reasons, route): (Reasons, u32),
        conflicted: bool,
    ) {
        let prop = p.map_or(UNATTRIBUTED, |p| p as u16);
        let (emitter, seq) = rec.seq_key().unwrap_or((NONE, 0));
        self.state.unkept_spans.insert(Unkept {
            route,
            id: *id,
            hash: rules::content_hash(ev, prop),
            ts: rec.ts,
            kind: rec.kind,
            prop,
            reasons,
            conflicted,
            emitter,
            seq,
        });
    }

    /// The lowest horizon of the properties: deliveries older than it are forgotten.
    pub(super) fn min_horizon(&self) -> i64 {
        (self.state.props.iter())
            .map(|p| p.horizon)
            .min()
            .unwrap_or(i64::MIN)
    }

    /// Indexes `rec`, about to be kept in property `p` (scope id `rec.scope`), as its span's
    /// delivery (in place of a folded one's).
    pub(super) fn index_span(&mut self, p: usize, rec: &Rec) {
        if let Some(k) = KeptSpan::of(p, rec) {
            self.span_index.insert(&self.state.spans, k);
        }
    }

    /// The first kept event of `scope` (its id `id` in property `p`) that `same_key` accepts,
    /// in property `p` first (by id: no second lookup of the name), then in the others (a key
    /// names no property, SPEC §4 "Duplicates"), with its property. A hot scope whose
    /// fast-path state says the key `is_new` is not read (the `fast` module).
    fn find_kept(
        &self,
        p: usize,
        id: u32,
        scope: &str,
        same_key: impl Fn(&Rec) -> bool,
        is_new: impl Fn(&Fast) -> bool,
    ) -> Option<(usize, Rec)> {
        let props = &self.state.props;
        let own = std::iter::once((p, Some(props[p].scopes.state(id))));
        let others = (0..props.len())
            .filter(|&q| q != p)
            .map(|q| (q, props[q].scopes.get(scope)));
        own.chain(others).find_map(|(q, st)| {
            let st = st?;
            if st.fast().is_some_and(&is_new) {
                return None;
            }
            let first = st.events().iter().find(|e| same_key(e))?;
            Some((q, *first))
        })
    }

    /// Settles a duplicate key `rec` (of property `p`, `None` when unattributed) shares with
    /// `first`, a kept event of property `q` (of the scope `rec` names if `same_scope`): an
    /// equal delivery makes `rec` a duplicate; a different one sets both aside and raises
    /// `conflicting_duplicate` (worded by `detail`) for the properties they name.
    fn settle_kept(
        &mut self,
        p: Option<usize>,
        rec: &Rec,
        (q, first): (usize, Rec),
        (key, same_scope): (ConflictKey, bool),
        detail: impl FnOnce() -> String,
    ) -> Attributed {
        // A further delivery of a key whose deliveries conflicted: set aside, even one equal
        // to the first (`check` sets aside every delivery of such a key).
        if first.has(ASIDE) && self.state.conflicts.contains(&key) {
            if let Some(p) = p {
                self.count_aside(p, rec);
                self.place_conflict_again(key, p, rec, (p == q).then_some(first.ts));
            }
            return Attributed::Aside;
        }
        if same_scope && first.same_content(rec) {
            self.state.duplicates += 1;
            // Its keys the kept event lacks link to it (the `aside` module).
            let seq = rec.seq_key().filter(|&k| first.seq_key() != Some(k));
            let span_of = |r: &Rec| r.span().and_then(|s| self.state.spans.get(s)).copied();
            let span = span_of(rec).filter(|&id| span_of(&first) != Some(id));
            let linked = Linked::Kept {
                prop: q as u16,
                scope: first.scope,
                source: first.source,
                position: first.position,
            };
            self.link_dropped(seq, span.as_ref(), rec.ts, linked);
            return Attributed::Duplicate;
        }
        if let Some(p) = p {
            self.count_aside(p, rec);
        }
        let detail = detail();
        if let Some(p) = p {
            self.raise_span(p, rec, first.ts, Reason::ConflictingDuplicate, |_| {
                detail.clone()
            });
        }
        if p != Some(q) {
            self.raise_span(q, &first, rec.ts, Reason::ConflictingDuplicate, |_| detail);
        }
        self.note_conflict(key, first.ts, rec.ts, p.into_iter().chain([q]));
        if first.has(ASIDE) {
            // Set aside already, by another of its keys: nothing of it to take back again.
            return Attributed::Aside;
        }
        self.set_aside_first(q, first);
        Attributed::Aside
    }

    /// `rec` (of property `p`, if attributed) differs from the first delivery of `key` (at
    /// `first_ts`, of property `first_prop`), which another of its keys set aside already:
    /// `conflicting_duplicate` for the properties they name, over both, as `check` counts
    /// each key's group; nothing of the first to take back again.
    fn conflict_again(
        &mut self,
        p: Option<usize>,
        rec: &Rec,
        key: ConflictKey,
        first_ts: i64,
        first_prop: u16,
        detail: impl Fn(&Live) -> String,
    ) {
        let q = (first_prop != UNATTRIBUTED).then_some(usize::from(first_prop));
        if let Some(p) = p {
            self.raise_span(p, rec, first_ts, Reason::ConflictingDuplicate, &detail);
        }
        if let Some(q) = q.filter(|&q| Some(q) != p) {
            let was = Rec {
                ts: first_ts,
                prop: first_prop,
                ..*rec
            };
            self.raise_span(q, &was, rec.ts, Reason::ConflictingDuplicate, &detail);
        }
        self.note_conflict(key, first_ts, rec.ts, p.into_iter().chain(q));
    }

    /// Counts a delivery set aside as an event of property `p` (as `check` does), nothing more.
    /// An attestation extends no window and counts as no event of its property (SPEC §10).
    pub(super) fn count_aside(&mut self, p: usize, rec: &Rec) {
        if rec.kind == crate::event::Kind::Attestation {
            return;
        }
        self.state.props[p].tally.add_event(rec.ts);
    }

    /// Sets aside the kept event of scope `scope` (property `p`) that `is_it` accepts (or else
    /// the folded grants it accepts: the `grants` module), decides the scope again without it
    /// and withdraws the provisional counterexamples resting on it; returns whether there was
    /// one (else its event folded into the mark, or was never kept).
    pub(super) fn set_aside_kept(
        &mut self,
        p: usize,
        scope: u32,
        is_it: impl Fn(&Rec) -> bool,
    ) -> bool {
        let name = self.state.props[p].scopes.name(scope).to_string();
        let st = self.state.props[p].scopes.get_mut(&name).expect("known");
        let found = st.events().iter().position(|e| !e.has(ASIDE) && is_it(e));
        let set_aside = if let Some(i) = found {
            let e = st.events()[i];
            let was = st.clean();
            // A scope whose last decision found nothing about its kept events (and still
            // holds) finds nothing without one of its commits either (the module doc): it is
            // not decided again in full.
            let calm = was.clean && was.calm && e.class() != 1 && !self.reference;
            st.set_aside(i);
            // It counts as an event of its property, and for nothing else any more (its
            // reasons are the caller's to withdraw).
            let route = self.route_ids.route(p, e.route);
            let applied = Applied::of(&e, route, &self.contract.properties[p]);
            let t = &mut self.state.props[p].tally;
            if applied.stale_rejection {
                t.stale_rejections = t.stale_rejections.saturating_sub(1);
            }
            if let Observes::Declared(r) = applied.observes {
                t.unobserve(r, e.ts);
            }
            if calm {
                self.set_aside_calm(p, &name, i);
            } else {
                let horizon = self.state.props[p].horizon;
                self.decide_scope(p, &name, None, horizon);
            }
            true
        } else {
            self.set_aside_folded_grants(p, &name, &is_it)
        };
        self.withdraw_resting_on(p, &name, is_it);
        set_aside
    }

    /// What deciding `scope` (property `p`) again in full gives once its kept event `i` (a
    /// commit, a fence or an event that takes no part, not a grant) is set aside, when its
    /// last decision found nothing about its kept events and still holds (clean and calm):
    /// nothing. The sweeps only lose a participant: every earliest time and least `order`
    /// of the higher epochs and incarnations stays or rises, so no event becomes stale or
    /// ambiguous; an epoch's holders only thin out (no reuse); the grant checks of the other
    /// commits read the grants alone (their `ungranted` stays). So the set-aside event's own
    /// flags are cleared and their reasons withdrawn, and the scope is clean and calm again:
    /// without the sort and sweeps of the full decision and the rebuilding of its fast-path
    /// state (a conflicting re-delivery into a hot scope cost one each: ~3.5 ms at 100,000
    /// kept events). The property test of the fast path
    /// (`tests/fast.rs`), whose reference decides every change in full, holds it to that.
    fn set_aside_calm(&mut self, p: usize, scope: &str, i: usize) {
        use super::scopes::fast;
        use crate::rules::{AMBIGUOUS, UNGRANTED};
        let st = self.state.props[p].scopes.get_mut(scope).expect("known");
        let e = st.events()[i];
        let mut cleared = Vec::new();
        for (flag, reason) in [
            (AMBIGUOUS, Reason::AmbiguousOrder),
            (UNGRANTED, Reason::UngrantedEpoch),
        ] {
            if e.has(flag) {
                st.toggle_flag(i, flag);
                cleared.push(reason);
            }
        }
        // Its fast-path state (dropped with the event) is rebuilt by the scope's next full
        // decision, if one is needed: until then its events are settled from its summary, or
        // decided in full. A run of conflicts costs no rebuild each.
        st.set_clean(fast::Clean::CALM);
        for reason in cleared {
            self.withdraw(p, e.ts, reason);
        }
    }

    /// Withdraws the per-event `reasons` raised at `ts`.
    pub(super) fn withdraw_reasons(&mut self, p: usize, ts: i64, reasons: Reasons) {
        for r in reasons.iter() {
            self.withdraw(p, ts, r);
        }
    }
}

/// The detail of a conflict of `rec`'s order key in `scope`.
pub(super) fn order_conflict(scope: &str, rec: &Rec) -> String {
    let epoch = rec
        .epoch()
        .map_or_else(|| "no epoch".to_string(), |e| format!("epoch {e}"));
    format!(
        "two different events of scope `{scope}` carry incarnation {}, order {} and {epoch}",
        rec.inc, rec.order
    )
}
