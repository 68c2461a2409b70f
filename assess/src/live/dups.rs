//! Duplicate settlement in `serve` (SPEC §4 "Duplicates", and "`serve` is exact within the
//! lateness horizon" on re-sends of folded events).
//!
//! Events sharing (emitter, seq), or commit/fence events sharing (scope, incarnation, order,
//! epoch), are one event delivered twice when equal in content: one is kept. When they differ,
//! **all** of them are set aside, whatever the arrival order: the later delivery is not
//! applied; the earlier one, already applied, is set aside in its scope (its per-event reasons
//! withdrawn, the scope decided again without it) and the provisional counterexamples that
//! rested on it are withdrawn (the `cxs` module). `conflicting_duplicate` is raised once per key
//! and property named, over the windows from the earliest to the latest delivery, as `check`
//! places it. Further deliveries of a key already set aside are set aside too.
//!
//! To find the earlier delivery of an (emitter, seq), each emitter keeps a [`SeqWindow`] of its
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
//! Of a (scope, incarnation, order, epoch) key, only kept events are compared: a delivery whose
//! order key belongs to a folded event is judged against the mark like any late event.

use super::scopes::Tainted;
use super::{ASIDE, Ev, HAS_EPOCH, HAS_SEQ, Live, NONE, REJECTED, content_hash};
use crate::event::Event;
use crate::finding::Reason;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

/// [`Delivery::prop`] of an unattributed event.
const NO_PROP: u16 = u16::MAX;

/// The per-event reasons a committed commit/fence can raise when applied, by bit.
pub(super) const STATIC_REASONS: [Reason; 5] = [
    Reason::MissingScope,
    Reason::MissingEpoch,
    Reason::MissingRoute,
    Reason::UndeclaredRoute,
    Reason::UnfencedRoute,
];

/// One recent delivery of an (emitter, seq).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Delivery {
    hash: u64,
    /// Event time; `i64::MIN` marks an empty slot.
    ts: i64,
    /// The scope id it was kept under in its property, `NONE` when it was not kept.
    scope: u32,
    /// Its property, [`NO_PROP`] when unattributed.
    prop: u16,
    /// The [`STATIC_REASONS`] it raised, by bit.
    reasons: u8,
    /// Conflicting deliveries of this key were seen: all are set aside.
    conflicted: bool,
}

const EMPTY: Delivery = Delivery {
    hash: 0,
    ts: i64::MIN,
    scope: NONE,
    prop: NO_PROP,
    reasons: 0,
    conflicted: false,
};

/// One emitter's recent deliveries, by seq: a ring over the dense seq range (seqs rise by one
/// per event), so settling duplicates touches contiguous memory.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct SeqWindow {
    /// Seq of the first slot: seqs below it that the emitter's runs hold were folded.
    base: u64,
    slots: Slots,
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

    /// Approximate heap bytes of the window (its box and deliveries).
    pub(super) fn heap_bytes(&self) -> usize {
        self.slots.0.as_ref().map_or(0, |q| {
            std::mem::size_of::<VecDeque<Delivery>>()
                + q.capacity() * std::mem::size_of::<Delivery>()
        })
    }

    fn slot(&self, seq: u64) -> Option<usize> {
        let i = usize::try_from(seq.checked_sub(self.base)?).ok()?;
        (i < self.slots.len() && self.slots[i].ts != i64::MIN).then_some(i)
    }

    fn get(&self, seq: u64) -> Option<Delivery> {
        self.slot(seq).map(|i| self.slots[i])
    }

    fn get_mut(&mut self, seq: u64) -> Option<&mut Delivery> {
        self.slot(seq).map(|i| &mut self.slots[i])
    }

    fn insert(&mut self, seq: u64, d: Delivery) {
        if self.slots.is_empty() {
            self.base = seq;
        }
        if seq < self.base {
            let grow = self.base - seq;
            if grow.saturating_add(self.slots.len() as u64) > Self::SPAN {
                return;
            }
            for _ in 0..grow {
                self.slots.push_front(EMPTY);
            }
            self.base = seq;
        }
        let i = seq - self.base;
        if i >= Self::SPAN {
            return;
        }
        let i = i as usize;
        if i >= self.slots.len() {
            self.slots.resize(i + 1, EMPTY);
        }
        self.slots[i] = d;
    }

    /// Drops the leading deliveries older than `horizon` (and empty slots before them). An
    /// emptied window gives its allocation back (an idle emitter costs its runs only), a mostly
    /// emptied one shrinks.
    pub(super) fn forget_before(&mut self, horizon: i64) {
        let before = self.slots.len();
        while let Some(d) = self.slots.front() {
            if d.ts >= horizon {
                break;
            }
            self.slots.pop_front();
            self.base += 1;
        }
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
    Applied { scope: u32, reasons: u8 },
    /// An equal delivery of a kept event's order key: dropped.
    Duplicate,
    /// Set aside as a conflicting delivery of an order key.
    Aside,
}

impl Live {
    /// Settles the (emitter, seq) of `rec` (of property `prop`, if attributed): see the module
    /// doc. A new key is recorded.
    pub(super) fn settle_seq(&mut self, prop: Option<usize>, rec: &Ev, ev: &Event<'_>) -> Seen {
        let hash = content_hash(ev);
        let e = self.state.emitters.entry(rec.emitter).or_default();
        if let Some(p) = prop {
            e.props.insert(p as u16);
        }
        if let Some(d) = e.recent.get(rec.seq) {
            if d.conflicted {
                // One more delivery of a key already set aside.
                if let Some(p) = prop {
                    let t = &mut self.state.props[p].tally;
                    t.series.add_reason(rec.ts, Reason::ConflictingDuplicate);
                }
                return Seen::Aside;
            }
            if d.hash == hash {
                self.state.duplicates += 1;
                return Seen::Duplicate;
            }
            e.recent.get_mut(rec.seq).expect("kept").conflicted = true;
            self.conflicting_seq(prop, rec, d);
            return Seen::Aside;
        }
        if e.runs.contains(rec.seq) {
            if rec.seq >= e.recent.base {
                // Seen elsewhere (another partition) or beyond the window: never comparable.
                self.state.duplicates += 1;
                return Seen::Duplicate;
            }
            let fed = e.props.as_slice().to_vec();
            if let Some(p) = prop {
                let emitter = self.state.names[rec.emitter as usize].clone();
                if rec.ts < self.state.props[p].horizon {
                    self.raise(p, rec, Reason::LateEvidence, |_| format!(
                        "emitter `{emitter}` seq {} was delivered before and folded: this delivery, older than the retained horizon, can no longer be compared with it", rec.seq
                    ));
                } else {
                    self.raise(p, rec, Reason::ConflictingDuplicate, |_| format!(
                        "emitter `{emitter}` seq {} was delivered before, older than the retained horizon: this delivery differs from it (an emitter that restarted its seq without a new id?)", rec.seq
                    ));
                }
            }
            if let Some(scope) = ev.scope {
                for q in fed {
                    let q = usize::from(q);
                    if self.taint_mark(q, scope, rec) && Some(q) != prop {
                        let emitter = self.state.names[rec.emitter as usize].clone();
                        self.raise(q, rec, Reason::ConflictingDuplicate, |_| format!(
                            "emitter `{emitter}` seq {} was delivered before and folded into scope `{scope}`'s high-water mark: this delivery differs from it", rec.seq
                        ));
                    }
                }
            }
            return Seen::Aside;
        }
        e.recent.insert(
            rec.seq,
            Delivery {
                hash,
                ts: rec.ts,
                prop: prop.map_or(NO_PROP, |p| p as u16),
                ..EMPTY
            },
        );
        e.events += 1;
        e.runs.add(rec.seq, rec.ts);
        Seen::New
    }

    /// Notes where the applied delivery of (emitter, seq) went, for setting it aside later.
    pub(super) fn note_applied(&mut self, rec: &Ev, scope: u32, reasons: u8) {
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
    fn conflicting_seq(&mut self, prop: Option<usize>, rec: &Ev, first: Delivery) {
        let first_prop = (first.prop != NO_PROP).then_some(first.prop as usize);
        let emitter = self.state.names[rec.emitter as usize].clone();
        for p in [prop, first_prop.filter(|&f| Some(f) != prop)]
            .into_iter()
            .flatten()
        {
            self.raise_span(p, rec, first.ts, Reason::ConflictingDuplicate, |_| {
                format!(
                    "two different events carry emitter `{emitter}` seq {}",
                    rec.seq
                )
            });
        }
        let Some(p) = first_prop else { return };
        self.withdraw_reasons(p, first.ts, first.reasons);
        if first.scope != NONE {
            let (em, seq) = (rec.emitter, rec.seq);
            self.set_aside_kept(p, first.scope, move |e: &Ev| {
                e.emitter == em && e.has(HAS_SEQ) && e.seq == seq
            });
            // Its delivery outlived its event, which folded into the mark.
            let name = self.state.props[p].scopes.name(first.scope).to_string();
            self.taint_mark(p, &name, rec);
        }
    }

    /// `rec` conflicts with a folded delivery of its (emitter, seq): if the high-water mark of
    /// `scope` (property `p`) rests on that delivery, the mark falls back to what the other
    /// folded events prove ([`ScopeState::taint`]), the scope is decided again, and the
    /// provisional counterexamples resting on it — as their stale or superseding event, or
    /// through the mark as their witness — are withdrawn. Returns whether the mark rested on it.
    ///
    /// [`ScopeState::taint`]: super::scopes::ScopeState::taint
    fn taint_mark(&mut self, p: usize, scope: &str, rec: &Ev) -> bool {
        let Some(emitter) = self.state.names.get(rec.emitter as usize) else {
            return false;
        };
        let key = super::scopes::key_hash(emitter, rec.seq);
        let horizon = self.state.props[p].horizon;
        let skew = self.contract.properties[p].clock_skew.0;
        let Some(st) = self.state.props[p].scopes.get_mut(scope) else {
            return false;
        };
        let Some(t) = st.taint(key, horizon) else {
            return false;
        };
        self.decide_scope(p, scope, None, horizon);
        let (em, seq) = (rec.emitter, rec.seq);
        let is_it = move |e: &Ev| e.emitter == em && e.has(HAS_SEQ) && e.seq == seq;
        let on_mark = move |c: &super::Cx| {
            let m = c.mark.map(|m| (m.incarnation, m.epoch));
            match t {
                Tainted::Top(top) => m == Some(top),
                // Certain only through the mark's earliest time, now merely bounded.
                Tainted::First(top, first) => {
                    m == Some(top) && c.stale.ts.saturating_sub(skew) <= first
                }
            }
        };
        self.withdraw_resting(p, scope, is_it, on_mark);
        true
    }

    /// Settles the (scope, incarnation, order, epoch) key of `rec` against the kept events of
    /// `scope`: `None` when no kept event shares it.
    pub(super) fn settle_order(&mut self, p: usize, rec: &Ev, scope: &str) -> Option<Attributed> {
        let st = self.state.props[p].scopes.get(scope)?;
        let first = *st.events().iter().find(|e| {
            e.kind().is_mutation()
                && e.has(super::HAS_ORDER)
                && e.has(HAS_EPOCH)
                && (e.inc, e.order, e.epoch) == (rec.inc, rec.order, rec.epoch)
        })?;
        Some(self.settle_kept(p, rec, scope, first, || {
            format!(
                "two different events of scope `{scope}` carry incarnation {}, order {} and epoch {}",
                rec.inc, rec.order, rec.epoch
            )
        }))
    }

    /// Settles the span key of `rec` (its own provenance, [`Live::push_span`]) against the kept
    /// events of `scope`, as an order key is: `None` when no kept event has it. A span is
    /// compared with its scope's kept events only: a delivery naming another scope or property,
    /// or one of a folded event (judged against the mark like any late event, and the same
    /// counterexample id if stale), is taken as another event.
    pub(super) fn settle_span(&mut self, p: usize, rec: &Ev, scope: &str) -> Option<Attributed> {
        let spans = &self.state.spans;
        let id = spans.get(rec.span)?;
        let st = self.state.props[p].scopes.get(scope)?;
        let first = *st.events().iter().find(|e| {
            e.position == rec.position && e.span != NONE && spans.get(e.span) == Some(id)
        })?;
        let span = self.provenance(rec);
        Some(self.settle_kept(p, rec, scope, first, || {
            format!("two different events of scope `{scope}` come from span `{span}`")
        }))
    }

    /// Settles a duplicate key `rec` shares with `first`, a kept event of `scope`: an equal
    /// delivery makes `rec` a duplicate; a different one sets both aside and raises
    /// `conflicting_duplicate` (worded by `detail`).
    fn settle_kept(
        &mut self,
        p: usize,
        rec: &Ev,
        scope: &str,
        first: Ev,
        detail: impl FnOnce() -> String,
    ) -> Attributed {
        if first.same_content(rec) {
            self.state.duplicates += 1;
            return Attributed::Duplicate;
        }
        self.count_aside(p, rec);
        if first.has(ASIDE) {
            let t = &mut self.state.props[p].tally;
            t.series.add_reason(rec.ts, Reason::ConflictingDuplicate);
            return Attributed::Aside;
        }
        self.raise_span(p, rec, first.ts, Reason::ConflictingDuplicate, |_| detail());
        let reasons = self.static_reasons(p, &first, true);
        self.withdraw_reasons(p, first.ts, reasons);
        let id = self.state.props[p].scopes.id(scope).expect("kept");
        let (src, pos, span) = (first.source, first.position, first.span);
        self.set_aside_kept(p, id, move |e: &Ev| {
            (e.source, e.position, e.span) == (src, pos, span)
        });
        Attributed::Aside
    }

    /// Counts a delivery set aside as an event of property `p` (as `check` does), nothing more.
    pub(super) fn count_aside(&mut self, p: usize, rec: &Ev) {
        let t = &mut self.state.props[p].tally;
        t.max_ts = Some(t.max_ts.map_or(rec.ts, |m| m.max(rec.ts)));
        t.series.add_event(rec.ts);
        t.events += 1;
    }

    /// Sets aside the kept event of scope `scope` (property `p`) that `is_it` accepts, decides
    /// the scope again without it and withdraws the provisional counterexamples resting on it.
    fn set_aside_kept(&mut self, p: usize, scope: u32, is_it: impl Fn(&Ev) -> bool) {
        let name = self.state.props[p].scopes.name(scope).to_string();
        let st = self.state.props[p].scopes.get_mut(&name).expect("known");
        if let Some(i) = st.events().iter().position(|e| !e.has(ASIDE) && is_it(e)) {
            let e = st.events()[i];
            st.set_aside(i);
            if e.kind().is_mutation() && e.has(REJECTED) {
                let t = &mut self.state.props[p].tally;
                t.stale_rejections = t.stale_rejections.saturating_sub(1);
            }
            let horizon = self.state.props[p].horizon;
            self.decide_scope(p, &name, None, horizon);
        }
        self.withdraw_resting_on(p, &name, is_it);
    }

    /// Withdraws the [`STATIC_REASONS`] in `mask` raised at `ts`.
    fn withdraw_reasons(&mut self, p: usize, ts: i64, mask: u8) {
        for (bit, r) in STATIC_REASONS.iter().enumerate() {
            if mask & (1 << bit) != 0 {
                self.withdraw(p, ts, *r);
            }
        }
    }
}
