//! The per-property scope table of the live assessor: scope ids interned in one arena, states
//! in one dense vector by id, and the list of scopes that keep events, which is all folding
//! visits. An idle scope costs its id bytes, 14–23 bytes of interner overhead and one
//! [`ScopeState`] (64 bytes): no per-scope allocation unless it folded an `order` or grants
//! (SPEC §7, at most 150 bytes per idle scope; `cargo run --release -p fencewatch-assess
//! --example idle_live_scopes`). A scope is never removed: its high-water mark is never
//! forgotten.
//!
//! **Grants outlive the horizon** (SPEC §4 "`serve` is exact within the lateness horizon"): a
//! lease may be held far longer than the retention margin, and its commits must still be
//! checked against its grant. So folding keeps, per scope, the grants whose (incarnation,
//! epoch) is at or above the folded high-water mark, whole (holder, time, provenance), and
//! they take part in every later decision as the kept events do. Grants below the mark go (a
//! commit of such an epoch arriving in order is stale against the mark anyway); that some
//! went is remembered, so a commit that would need one of them is `late_evidence` when it is
//! itself older than the horizon and is never called ungranted. What is kept is bounded per
//! scope by the epochs granted above the highest folded commit.
//!
//! **The mark's holder.** An epoch may be held longer than the horizon, and a second holder's
//! commit arriving in order must still be found to reuse it (SPEC §4: an event arriving in
//! order never needs folded detail). So the mark keeps the holder of its epoch's folded
//! commits (`NONE`, one name id, or [`MIXED`]), and takes part in the epoch reuse sweep with
//! it (the mark's slot in `Live::decide_scope`, the fast path's epoch entry). Holders of the
//! epochs below it are not kept: a commit there is stale against the mark already. The name
//! table keeps each mark's holder alive (`Scopes` counts them per name). After a taint (below)
//! the holders of the evidence's epoch may not all be known ([`UNSURE`]): a commit of it by
//! another holder is unknown, never taken as no reuse.
//!
//! **Tainted marks** (SPEC §4 "Duplicates" and "Provisional counterexamples"). A conflicting
//! delivery can show, after the fact, that a folded event was one of conflicting deliveries:
//! `check` sets it aside, so the mark must stop being evidence for it. So the mark knows what
//! it rests on: a 32-bit hash of the (emitter, seq) of the folded event that set its earliest
//! time, whether its (incarnation, epoch) rests on that event alone, and the highest other
//! folded (incarnation, epoch) below it (exact while it rests on one event), 24 bytes. When a
//! delivery conflicting with a folded (emitter, seq) names a scope whose mark rests on it, the
//! mark is *tainted*: it stays (it is never forgotten, and is shown) but its earliest time is
//! only bounded by the horizon now, and if its (incarnation, epoch) rested on that event alone
//! it is no longer evidence: the scope is judged against the highest other folded
//! (incarnation, epoch), with that bounded earliest time (or against no mark), until events of
//! the tainted epoch fold again. The scope is then decided again and the provisional
//! counterexamples resting on the event (as stale or superseding event, or through the mark)
//! are withdrawn (the `dups` and `cxs` modules); final ones stay. A later earliest time is
//! never more certain than the evidence (fewer events certainly follow it). A mark left
//! standing on other folded events does not know them apart, nor one a conflicting delivery
//! of another folded event named (that event may have been one of them: its holders are then
//! unsure): any later conflicting delivery naming the scope may take the last of them away,
//! so it taints the mark, which then falls back to nothing (what lies below it is not known
//! either). An (order, epoch) key of a
//! folded event, and an (emitter, seq) whose conflicting delivery names another scope, are
//! not tracked.

use crate::rules::{ASIDE, HAS_ORDER, NONE, Rec};
use crate::tracker::{Judgement, Mark, Tracker};
use serde::{Deserialize, Serialize};

pub(super) mod fast;
mod taint;
use taint::FELL_BACK;

/// The most scopes [`ScopeState::warm_all`] reads ahead at once.
pub(super) const WARM_MAX: usize = 32;
use fast::{Clean, Fast, FastSlot, merge_holder};

/// The synthetic index of a scope's folded high-water mark in a sweep.
pub(super) const MARK_IDX: u32 = u32::MAX - 1;
/// Synthetic indices of a scope's folded grants in a sweep start here (kept events' indices
/// are below it).
pub(super) const FOLDED_IDX: u32 = 1 << 31;

/// What one (property, scope) keeps.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct ScopeState {
    /// The folded high-water mark, if [`HAS_MARK`] (zero otherwise); recent events are not in it.
    mark: Mark,
    /// The highest (incarnation, epoch) of the folded events below the mark's, if
    /// [`HAS_BELOW`]; kept exact while [`SOLO`] holds (what a tainted mark falls back to).
    below: (u64, u64),
    /// What folding keeps besides the mark; `None` (a null pointer) while there is nothing.
    cold: Option<Box<Cold>>,
    /// Events of the scope (not heartbeats) inside the horizon, in arrival order, with their
    /// summary; `None` when there are none, so an idle scope holds a null pointer.
    recent: Option<Box<Active>>,
    /// A 32-bit hash, never 0, of the emitter and seq of the folded event that set the mark's
    /// earliest time (see [`key_hash`]); 0 when none is known.
    top_key: u32,
    /// The mark's flags ([`HAS_MARK`], [`SOLO`], [`HAS_BELOW`], [`TAINTED`], [`UNSURE`]) in the
    /// top [`FLAG_BITS`] bits, and below them the holder of the folded commits of the mark's
    /// (incarnation, epoch) as evidence ([`ScopeState::mark_holder`]): a name id,
    /// [`HOLDER_NONE`] or [`HOLDER_MIXED`] (a name id `h` as `h + 2`). Packed so an idle scope
    /// stays 64 bytes.
    bits: u32,
}

/// Flags take the top bits of [`ScopeState::bits`].
const FLAG_BITS: u32 = 5;
/// The holder's bits in [`ScopeState::bits`].
const HOLDER_MASK: u32 = (1 << (32 - FLAG_BITS)) - 1;
/// No folded commit of the mark's (incarnation, epoch) named a holder (so a default state has
/// none); a name id `h` is kept as `h + 2`.
const HOLDER_NONE: u32 = 0;
/// They named different holders.
const HOLDER_MIXED: u32 = 1;
/// Flag: anything folded, `mark` holds the high-water mark.
const HAS_MARK: u8 = 8;
/// Flag: the mark's (incarnation, epoch) rests on one folded event, the one
/// [`ScopeState::top_key`] names.
const SOLO: u8 = 1;
/// Flag: [`ScopeState::below`] holds a folded (incarnation, epoch).
const HAS_BELOW: u8 = 2;
/// Flag: the mark's (incarnation, epoch) rested on one folded event alone, which turned out to
/// be one of conflicting deliveries: it is no evidence (see [`ScopeState::evidence`]) until
/// events of it fold again.
const TAINTED: u8 = 4;
/// Flag: the holders of the evidence's folded commits are not all known (a taint took one
/// away, or fell back to an epoch whose holders were not kept, or a name id did not fit): a
/// commit of that (incarnation, epoch) by a holder other than [`ScopeState::mark_holder`] may
/// or may not reuse it ([`ScopeState::reuse_unknown`]).
const UNSURE: u8 = 16;

/// The 32-bit hash (never 0) of an (emitter name, seq) key, as a mark remembers the event it
/// rests on.
pub(super) fn key_hash(emitter: &str, seq: u64) -> u32 {
    let mut h = crate::rules::Hasher::new();
    h.array((emitter.len() as u64).to_le_bytes());
    h.raw(emitter.as_bytes());
    h.array(seq.to_le_bytes());
    (h.digest() as u32).max(1)
}

/// What [`ScopeState::taint`] did to the mark.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Tainted {
    /// The mark's (incarnation, epoch) rested on that event alone: it is [`TAINTED`], evidence
    /// falls back to the highest folded one below it (or to none).
    Top((u64, u64)),
    /// Other folded events share the mark's (incarnation, epoch): it stands, but its earliest
    /// time is now only bounded (by the horizon).
    First((u64, u64), i64),
    /// The mark did not rest on that event, which may still have been one of the others: the
    /// mark stands, its holders unsure, and the next conflicting delivery naming the scope
    /// taints it ([`FELL_BACK`]).
    Other((u64, u64)),
}

/// What a scope keeps of its folded events besides the high-water mark.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Cold {
    /// The smallest `order` among the folded events of the mark's (incarnation, epoch);
    /// `u64::MAX` when none.
    mark_order: u64,
    /// The greatest incarnation of the folded commits and fences with an `order`, and their
    /// greatest `order` in it: a commit of it not above that (or of an earlier incarnation)
    /// may precede folded events by `order` (SPEC §4: `order` decides where given, within a
    /// scope and incarnation), which needs their detail; one of a later incarnation cannot.
    max_order: Option<(u64, u64)>,
    /// Whether grants below the mark were dropped: a commit of such an epoch can then not be
    /// told ungranted, and its holder not checked.
    grants_dropped: bool,
    /// Folded grants at or above the mark, the earliest per (incarnation, epoch, holder).
    grants: Vec<Rec>,
}

impl Cold {
    fn is_empty(&self) -> bool {
        self.mark_order == u64::MAX
            && self.max_order.is_none()
            && !self.grants_dropped
            && self.grants.is_empty()
    }
}

/// The kept events of an active scope and a summary of them, on one cache line with the
/// vector's header, so the steady case decides without reading the events; a hot scope's
/// [`Fast`] state (the `fast` module) in the allocator's slack (80 bytes either way).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Active {
    summary: Summary,
    events: Vec<Rec>,
    /// Derived: not checkpointed, not compared (the `fast` module).
    #[serde(skip)]
    fast: FastSlot,
}

/// What the fast path's summary-only check (`fast::quiet`) needs to know about the kept
/// events (not set aside).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Summary {
    /// The highest (incarnation, epoch) of committed events with an epoch.
    pub(super) top: Option<(u64, u64)>,
    /// The holder of the `top` events: `NONE` when none has one, [`MIXED`] when they differ.
    pub(super) top_holder: u32,
    /// The latest time of committed events with an epoch.
    pub(super) max_ts: i64,
    /// Whether a grant is kept.
    pub(super) grants: bool,
    /// Whether a committed event with an epoch carries `order`.
    pub(super) ordered: bool,
    /// Derived: not checkpointed, not compared (the `fast` module).
    #[serde(skip)]
    pub(super) clean: Clean,
}

/// [`Summary::top_holder`] when the top epoch's events name different holders.
pub(super) const MIXED: u32 = u32::MAX - 2;

impl Default for Summary {
    fn default() -> Summary {
        Summary {
            top: None,
            top_holder: NONE,
            max_ts: i64::MIN,
            grants: false,
            ordered: false,
            clean: Clean::default(),
        }
    }
}

impl Summary {
    fn add(&mut self, e: &Rec) {
        if e.has(ASIDE) {
            return;
        }
        match e.class() {
            0 => {
                self.ordered |= e.has(HAS_ORDER);
                self.max_ts = self.max_ts.max(e.ts);
                let key = (e.inc, e.epoch);
                match self.top {
                    Some(t) if t > key => {}
                    Some(t) if t == key => {
                        if self.top_holder == NONE {
                            self.top_holder = e.holder;
                        } else if e.holder != NONE && e.holder != self.top_holder {
                            self.top_holder = MIXED;
                        }
                    }
                    _ => {
                        self.top = Some(key);
                        self.top_holder = e.holder;
                    }
                }
            }
            1 => self.grants = true,
            _ => {}
        }
    }

    /// Whether this summary of `events` stays that of `events` once `e` (one of them, just
    /// flagged [`ASIDE`] there) is set aside, as far as telling it costs less than summing
    /// them again (a hot scope's conflicting re-deliveries each set one aside): an event
    /// that takes no part; or a commit without `order`, earlier than the latest, below the
    /// top epoch or beside another of it that keeps its holder (found from the newest).
    fn stays_without(&self, e: &Rec, events: &[Rec]) -> bool {
        match e.class() {
            0 => {}
            1 => return false,
            _ => return true,
        }
        if e.has(HAS_ORDER) || e.ts >= self.max_ts {
            return false;
        }
        let key = (e.inc, e.epoch);
        match self.top {
            Some(t) if t > key => true,
            Some(t) if t == key && self.top_holder != MIXED => {
                let keeps = |x: &Rec| {
                    !x.has(ASIDE)
                        && x.class() == 0
                        && (x.inc, x.epoch) == key
                        && (e.holder == NONE || x.holder == e.holder)
                };
                events.iter().rev().any(keeps)
            }
            _ => false,
        }
    }

    fn of(events: &[Rec]) -> Summary {
        let mut s = Summary::default();
        for e in events {
            s.add(e);
        }
        s
    }
}

impl ScopeState {
    /// The folded high-water mark.
    pub(super) fn high_water(&self) -> Option<Mark> {
        (self.flags() & HAS_MARK != 0).then_some(self.mark)
    }

    fn set_mark(&mut self, mark: Option<Mark>) {
        let has = if mark.is_some() { HAS_MARK } else { 0 };
        self.set_flags((self.flags() & !HAS_MARK) | has);
        self.mark = mark.unwrap_or_default();
    }

    fn flags(&self) -> u8 {
        (self.bits >> (32 - FLAG_BITS)) as u8
    }

    fn set_flags(&mut self, f: u8) {
        self.bits = (self.bits & HOLDER_MASK) | (u32::from(f) << (32 - FLAG_BITS));
    }

    /// The holder of the folded commits of the evidence's (incarnation, epoch) (see
    /// [`ScopeState::evidence`]): a name id, `NONE` when none named one, [`MIXED`] when they
    /// differ; see [`ScopeState::holder_unsure`]. A scope that never folded has `NONE`.
    pub(super) fn mark_holder(&self) -> u32 {
        match self.bits & HOLDER_MASK {
            HOLDER_NONE => NONE,
            HOLDER_MIXED => MIXED,
            h => h - 2,
        }
    }

    /// Whether the evidence's folded holders are not all known (see [`UNSURE`]).
    pub(super) fn holder_unsure(&self) -> bool {
        self.flags() & UNSURE != 0
    }

    /// Sets the mark's holder (a name id, `NONE` or [`MIXED`]) and whether it is unsure; a
    /// name id beyond [`HOLDER_MASK`]'s range (over 134 million names alive) is kept as an
    /// unsure `NONE`.
    fn set_mark_holder(&mut self, h: u32, unsure: bool) {
        let (code, unsure) = match h {
            NONE => (HOLDER_NONE, unsure),
            MIXED => (HOLDER_MIXED, unsure),
            h if h < HOLDER_MASK - 1 => (h + 2, unsure),
            _ => (HOLDER_NONE, true),
        };
        let f = (self.flags() & !UNSURE) | if unsure { UNSURE } else { 0 };
        self.bits = code;
        self.set_flags(f);
    }

    /// Whether a commit of (`inc`, `epoch`) by `holder` would reuse the epoch against the
    /// evidence's folded commits if their holders were all known, and they are not: whether it
    /// does is unknown (the caller raises that).
    pub(super) fn reuse_unknown(&self, inc: u64, epoch: u64, holder: u32) -> bool {
        holder != NONE
            && self.holder_unsure()
            && self
                .evidence()
                .is_some_and(|m| (m.incarnation, m.epoch) == (inc, epoch))
            && self.mark_holder() != holder
    }

    /// Whether a grant of (`inc`, `epoch`) to `holder` (or none), arriving now, has checks
    /// that need folded detail: its (incarnation, epoch) is below the mark as evidence and it
    /// names a holder (its commits' holders and its grants may have folded) or grants were
    /// dropped (a dropped higher grant would make it a grant regression); or it is the mark's,
    /// and the folded commits name another holder than `holder` (or several, or unknown ones)
    /// that no grant of it kept names.
    pub(super) fn grant_needs_folded(&self, inc: u64, epoch: u64, holder: u32) -> bool {
        let Some(m) = self.evidence() else {
            return false;
        };
        let key = (inc, epoch);
        let mark = (m.incarnation, m.epoch);
        if key < mark {
            return holder != NONE || self.cold.as_deref().is_some_and(|c| c.grants_dropped);
        }
        if key > mark || holder == NONE {
            return false;
        }
        match self.mark_holder() {
            _ if self.holder_unsure() => true,
            NONE => false,
            h if h == holder => false,
            MIXED => true,
            h => !self.has_grant(inc, epoch, Some(h)),
        }
    }

    /// Whether a commit of (`inc`, `epoch`) older than the horizon may change what folded
    /// events are (stale, ambiguous): when events of epochs below the mark's folded too (it may
    /// precede them, or lower the earliest time of an epoch above them), the mark is tainted,
    /// or it is above the mark. Folded events are all of the mark's (incarnation, epoch)
    /// otherwise, and one of it or below changes none of them.
    pub(super) fn late_may_change_folded(&self, inc: u64, epoch: u64) -> bool {
        self.high_water().is_some_and(|m| {
            self.flags() & (HAS_BELOW | TAINTED) != 0 || (inc, epoch) > (m.incarnation, m.epoch)
        })
    }

    /// The mark's holder as a sweep sees it: `NONE` while unsure (an unknown holder is none
    /// that [`crate::scope::reuse`] could pair with; [`ScopeState::reuse_unknown`] covers it).
    pub(super) fn mark_slot_holder(&self) -> u32 {
        if self.holder_unsure() {
            NONE
        } else {
            self.mark_holder()
        }
    }

    /// The smallest `order` of the mark's folded events, if any carried one.
    pub(super) fn mark_order(&self) -> Option<u64> {
        self.cold
            .as_deref()
            .map(|c| c.mark_order)
            .filter(|&o| o != u64::MAX)
    }

    /// Whether a commit of incarnation `inc` with `order` may precede folded commits or fences
    /// by `order` (`Cold::max_order`): of the folded ones' greatest incarnation and not above
    /// their greatest `order`, or of an earlier incarnation.
    pub(super) fn order_may_precede_folded(&self, inc: u64, order: u64) -> bool {
        match self.cold.as_deref().and_then(|c| c.max_order) {
            Some((folded_inc, max)) => inc < folded_inc || (inc == folded_inc && order <= max),
            None => false,
        }
    }

    /// The folded grants kept (at or above the mark).
    pub(super) fn folded_grants(&self) -> &[Rec] {
        self.cold.as_deref().map_or(&[], |c| c.grants.as_slice())
    }

    /// Whether the grants of (`inc`, `epoch`) may be incomplete: grants below the mark were
    /// dropped and (`inc`, `epoch`) is below it.
    pub(super) fn grants_unknown(&self, inc: u64, epoch: u64) -> bool {
        self.cold.as_deref().is_some_and(|c| c.grants_dropped)
            && self
                .high_water()
                .is_some_and(|m| (inc, epoch) < (m.incarnation, m.epoch))
    }

    /// Whether a grant of (`inc`, `epoch`), kept or folded, is known; with `holder`, one to
    /// that holder.
    pub(super) fn has_grant(&self, inc: u64, epoch: u64, holder: Option<u32>) -> bool {
        self.events()
            .iter()
            .filter(|e| e.class() == 1 && !e.has(ASIDE))
            .chain(self.folded_grants())
            .any(|e| (e.inc, e.epoch) == (inc, epoch) && holder.is_none_or(|h| e.holder == h))
    }

    /// Events inside the horizon.
    pub(super) fn events(&self) -> &[Rec] {
        self.recent.as_deref().map_or(&[], |a| a.events.as_slice())
    }

    /// The summary of the kept events, if any are kept.
    pub(super) fn summary(&self) -> Option<&Summary> {
        self.recent.as_deref().map(|a| &a.summary)
    }

    /// Keeps one more event; returns its index. A scope that kept nothing is clean and calm
    /// (the `fast` module): no finding rests on a kept event.
    pub(super) fn push(&mut self, e: Rec) -> usize {
        let a = self.recent.get_or_insert_with(|| {
            Box::new(Active {
                summary: Summary {
                    clean: Clean::CALM,
                    ..Summary::default()
                },
                events: Vec::with_capacity(4),
                fast: FastSlot::default(),
            })
        });
        // An event that takes no part (a rejected commit, one without an epoch) but is earlier
        // than a kept commit, or a grant, may enter a counterexample's context.
        let s = &mut a.summary;
        if e.class() == 2 && !s.clean.calm && (s.grants || s.max_ts > e.ts) {
            s.clean.clean = false;
        }
        a.summary.add(&e);
        if let Some(f) = a.fast.0.as_deref_mut() {
            f.add(&e, a.events.len() as u32, a.events.last());
        }
        a.events.push(e);
        a.events.len() - 1
    }

    /// What taking one more event reads first of this scope (the kept events' summary, the
    /// last of them, the fast-path state), for [`crate::live::Live::warm`]: a value to pass to
    /// [`std::hint::black_box`], nothing more.
    pub(super) fn warm(&self) -> i64 {
        let Some(a) = self.recent.as_deref() else {
            return self.mark.first;
        };
        let last = a.events.last().map_or(0, |e| e.ts);
        let fast = a.fast.0.as_deref().map_or(0, |f| f.pending_min);
        a.summary.max_ts ^ last ^ fast
    }

    /// [`ScopeState::warm`] of up to [`WARM_MAX`] scopes, and their folded grants, one level
    /// of pointers at a time across all of them: each loop's loads depend on the loop before,
    /// not on one another, so the processor has all of them in flight at once, where one
    /// scope after another it followed each chain of misses (state, boxes, last event) alone.
    pub(super) fn warm_all<'s>(states: impl Iterator<Item = &'s ScopeState>) -> i64 {
        let mut out = 0i64;
        let mut boxes: [(Option<&Active>, Option<&Cold>); WARM_MAX] = [(None, None); WARM_MAX];
        let mut n = 0;
        for (b, st) in boxes.iter_mut().zip(states) {
            *b = (st.recent.as_deref(), st.cold.as_deref());
            out ^= st.mark.first;
            n += 1;
        }
        let mut inner: [(&[Rec], Option<&fast::Fast>, &[Rec]); WARM_MAX] =
            [(&[], None, &[]); WARM_MAX];
        for (i, (a, c)) in inner.iter_mut().zip(&boxes[..n]) {
            if let Some(a) = a {
                out ^= a.summary.max_ts;
                (i.0, i.1) = (a.events.as_slice(), a.fast.0.as_deref());
            }
            if let Some(c) = c {
                i.2 = c.grants.as_slice();
            }
        }
        for (events, fast, grants) in &inner[..n] {
            out ^= events.last().map_or(0, |e| e.ts)
                ^ fast.map_or(0, |f| f.pending_min)
                ^ grants.first().map_or(0, |g| g.ts);
        }
        out
    }

    /// Whether the stored findings are what the full decision gives now, and whether it found
    /// nothing about the kept events (the `fast` module); a scope that keeps nothing is both.
    pub(super) fn clean(&self) -> Clean {
        self.recent
            .as_deref()
            .map_or(Clean::CALM, |a| a.summary.clean)
    }

    /// Sets what [`ScopeState::clean`] says (while events are kept).
    pub(super) fn set_clean(&mut self, c: Clean) {
        if let Some(a) = self.recent.as_mut() {
            a.summary.clean = c;
        }
    }

    /// A hot scope's fast-path state, if it has one.
    pub(super) fn fast(&self) -> Option<&Fast> {
        self.recent.as_deref().and_then(|a| a.fast.0.as_deref())
    }

    /// Likewise, to update.
    pub(super) fn fast_mut(&mut self) -> Option<&mut Fast> {
        self.recent
            .as_deref_mut()
            .and_then(|a| a.fast.0.as_deref_mut())
    }

    /// Replaces the fast-path state (while events are kept).
    pub(super) fn set_fast(&mut self, f: Option<Box<Fast>>) {
        if let Some(a) = self.recent.as_mut() {
            a.fast.0 = f;
        }
    }

    /// Sets `flag` on event `i` (the per-event reason flags, not `ASIDE`).
    pub(super) fn toggle_flag(&mut self, i: usize, flag: u8) {
        debug_assert_ne!(flag, ASIDE, "use set_aside");
        if let Some(a) = self.recent.as_mut() {
            a.events[i].flags ^= flag;
        }
    }

    /// Sets event `i` aside (a conflicting duplicate): it no longer takes part, and the scope
    /// must be decided again.
    pub(super) fn set_aside(&mut self, i: usize) {
        if let Some(a) = self.recent.as_mut() {
            a.events[i].flags |= ASIDE;
            let e = a.events[i];
            if !a.summary.stays_without(&e, &a.events) {
                a.summary = Summary::of(&a.events);
            }
            debug_assert_eq!(a.summary, Summary::of(&a.events), "set aside: {e:?}");
            a.summary.clean = Clean::default();
            a.fast.0 = None;
        }
    }

    /// Keeps the events `keep` accepts; frees the list when none is left.
    pub(super) fn retain_events(&mut self, keep: impl FnMut(&Rec) -> bool) {
        if let Some(a) = self.recent.as_mut() {
            a.events.retain(keep);
            if a.events.is_empty() {
                self.recent = None;
            } else {
                a.summary = Summary::of(&a.events);
            }
        }
    }

    /// The mark as evidence: the folded high-water mark, or, when it is [`TAINTED`], the
    /// highest other folded (incarnation, epoch) (earliest time bounded by the horizon at the
    /// taint), if any.
    pub(super) fn evidence(&self) -> Option<Mark> {
        let m = self.high_water()?;
        if self.flags() & TAINTED == 0 {
            return Some(m);
        }
        (self.flags() & HAS_BELOW != 0).then_some(Mark {
            incarnation: self.below.0,
            epoch: self.below.1,
            first: m.first,
        })
    }

    /// [`Tracker::judge`] against the mark as evidence ([`ScopeState::evidence`]).
    pub(super) fn judge(
        &self,
        inc: u64,
        epoch: u64,
        ts: i64,
        skew: i64,
        horizon: i64,
    ) -> Judgement {
        let mut t = Tracker::default();
        t.set_mark(self.evidence());
        t.judge(inc, epoch, ts, skew, horizon)
    }

    /// Keeps what the mark rests on up to date after folding `folded` (older than `horizon`)
    /// into it: `m` is the new mark, `old` the one before.
    fn note_mark<'a>(
        &mut self,
        m: Mark,
        old: Option<Mark>,
        horizon: i64,
        folded: impl Iterator<Item = &'a Rec>,
        key_of: &dyn Fn(&Rec) -> u32,
    ) {
        let top = (m.incarnation, m.epoch);
        let same = old.is_some_and(|o| (o.incarnation, o.epoch) == top);
        let tainted = self.flags() & TAINTED != 0;
        let had_below = (self.flags() & HAS_BELOW != 0).then_some(self.below);
        // The highest certain (incarnation, epoch) below the top: a tainted old top is none.
        let mut below = if same || tainted {
            had_below
        } else {
            old.map(|o| (o.incarnation, o.epoch))
        };
        let mut earliest: Option<&Rec> = None;
        let mut n = 0;
        let mut others = false;
        let mut holder = NONE;
        for e in folded {
            if (e.inc, e.epoch) != top {
                below = below.max(Some((e.inc, e.epoch)));
                others = true;
            } else {
                n += 1;
                holder = merge_holder(holder, e.holder);
                if earliest.is_none_or(|f| e.ts < f.ts) {
                    earliest = Some(e);
                }
            }
        }
        let solo = if n == 1 { SOLO } else { 0 };
        let mut flags = self.flags() & (SOLO | TAINTED);
        if let Some(f) = earliest {
            if !same || tainted {
                // A new top, or the first certain events of a tainted one: the mark rests on
                // them, from the earliest, and its holder is theirs.
                if same {
                    self.set_mark(Some(Mark { first: f.ts, ..m }));
                }
                flags = solo;
                self.top_key = key_of(f);
                self.set_mark_holder(holder, false);
            } else {
                flags &= !SOLO;
                // Once its other events are not known apart, they stay so.
                if old.is_some_and(|o| f.ts < o.first) && self.top_key != FELL_BACK {
                    self.top_key = key_of(f);
                }
                let h = merge_holder(self.mark_holder(), holder);
                self.set_mark_holder(h, self.holder_unsure());
            }
        }
        if flags & TAINTED != 0 && others {
            // The fallback's earliest time stays a bound on every folded event's.
            let first = m.first.max(horizon.saturating_sub(1));
            self.set_mark(Some(Mark { first, ..m }));
        }
        self.below = below.unwrap_or_default();
        let kept = self.flags() & (HAS_MARK | UNSURE);
        self.set_flags(kept | flags | if below.is_some() { HAS_BELOW } else { 0 });
    }

    /// Folds the committed events older than `horizon` into the high-water mark, keeps the
    /// older grants at or above the new mark (see the module doc) and drops every other event
    /// older than it. `key_of` gives an event's [`key_hash`] (0 without a seq), so the mark
    /// knows the event it rests on.
    pub(super) fn fold(&mut self, horizon: i64, skew: i64, key_of: &dyn Fn(&Rec) -> u32) {
        let Some(events) = self.recent.as_ref().map(|a| &a.events) else {
            return;
        };
        if events.iter().all(|e| e.ts >= horizon) {
            return;
        }
        let old = self.high_water();
        let before = old.map(|m| (m.incarnation, m.epoch));
        let folding = |e: &&Rec| e.ts < horizon && e.class() == 0 && !e.has(ASIDE);
        let mut tracker = Tracker::default();
        tracker.set_mark(old);
        for e in events.iter().filter(folding) {
            tracker.observe(e.inc, e.epoch, e.ts, skew, i64::MIN);
        }
        tracker.fold(i64::MAX);
        self.set_mark(tracker.high_water());
        if let Some(m) = self.high_water() {
            let recent = self.recent.take();
            let events = recent.as_deref().map_or(&[][..], |a| a.events.as_slice());
            self.note_mark(m, old, horizon, events.iter().filter(folding), key_of);
            self.recent = recent;
        }
        let events = self
            .recent
            .as_ref()
            .map_or(&[][..], |a| a.events.as_slice());
        let mark = self.high_water();
        let cold = self.cold.get_or_insert_with(|| {
            Box::new(Cold {
                mark_order: u64::MAX,
                max_order: None,
                grants_dropped: false,
                grants: Vec::new(),
            })
        });
        // Folding commits sets the mark: with none, nothing folded.
        if let Some(m) = mark {
            if before != Some((m.incarnation, m.epoch)) {
                cold.mark_order = u64::MAX;
            }
            for e in events.iter().filter(folding) {
                cold.max_order = cold.max_order.max(e.order().map(|o| (e.inc, o)));
                if (e.inc, e.epoch) == (m.incarnation, m.epoch)
                    && let Some(o) = e.order()
                {
                    cold.mark_order = cold.mark_order.min(o);
                }
            }
        }
        let at_or_above =
            |e: &Rec| mark.is_none_or(|m| (e.inc, e.epoch) >= (m.incarnation, m.epoch));
        let kept = cold.grants.len();
        cold.grants.retain(|g| at_or_above(g));
        cold.grants_dropped |= cold.grants.len() < kept;
        for g in events
            .iter()
            .filter(|e| e.ts < horizon && e.class() == 1 && !e.has(ASIDE))
        {
            if !at_or_above(g) {
                cold.grants_dropped = true;
                continue;
            }
            let same = |o: &Rec| (o.inc, o.epoch, o.holder) == (g.inc, g.epoch, g.holder);
            match cold.grants.iter_mut().find(|o| same(o)) {
                Some(o) if (g.ts, g.source, g.position) < (o.ts, o.source, o.position) => *o = *g,
                Some(_) => {}
                None => cold.grants.push(*g),
            }
        }
        if cold.is_empty() {
            self.cold = None;
        }
        let clean = self.clean();
        self.retain_events(|e| e.ts >= horizon);
        fast::folded(self, clean);
    }
}

mod table;
pub(super) use table::Scopes;

#[cfg(test)]
mod tests {
    use super::*;

    /// A key's hash is what the streaming XXH3 gave (marks keep it in checkpoints), for
    /// emitter names inside and beyond the hasher's buffer.
    #[test]
    fn a_key_hash_is_the_streaming_xxh3() {
        for (emitter, seq) in [
            ("", 0),
            ("bench-order-3", 17),
            (&*"e".repeat(300), u64::MAX),
        ] {
            let mut h = xxhash_rust::xxh3::Xxh3Default::new();
            h.update(&(emitter.len() as u64).to_le_bytes());
            h.update(emitter.as_bytes());
            h.update(&seq.to_le_bytes());
            assert_eq!(key_hash(emitter, seq), (h.digest() as u32).max(1), "{seq}");
        }
    }

    #[test]
    fn what_a_scope_costs() {
        // An idle scope: its state and nothing else.
        assert_eq!(std::mem::size_of::<ScopeState>(), 64);
        // An active one's allocation: with malloc's 8-byte header, the 80-byte chunk it took
        // before it had a fast-path pointer (the `fast` module).
        assert!(std::mem::size_of::<Summary>() <= 40);
        assert!(std::mem::size_of::<Active>() <= 72);
    }
}
