//! The fast path of a scope's decision (issue 11: a hot scope must not stall ingest).
//!
//! The full decision (`Live::decide_scope`) sorts and sweeps every event a scope keeps, so
//! deciding it after each of its events costs O(n log n) per event, quadratic over the events
//! the horizon keeps. Most events of a hot scope cannot change any other event's outcome, and
//! their own is known from a few aggregates: the earliest time of each epoch kept (the mark's
//! included), the holders of each, what each granted epoch's grants say. For those the fast
//! path applies exactly what the full decision would change — the new event's flags (ambiguous,
//! ungranted, late), its counterexamples (stale, stale incarnation, holder mismatch, waiting or
//! recorded with its context), the hand-off's partners within the clock skew turned ambiguous
//! — and nothing else:
//! - a commit in time order at the highest (incarnation, epoch), by its holder or none;
//! - one that opens a new highest epoch (a hand-off; within the skew of the last ones only
//!   while the scope is calm and its events in time order);
//! - one below the highest epoch, in time order, of an epoch kept already (a stale writer);
//! - one out of time order at the highest epoch that is not its epoch's earliest and enters no
//!   counterexample's context (or anything, at the only epoch of a calm scope);
//! - a grant in time order of the highest granted epoch or of a new one.
//!
//! Any other event takes the full decision: two holders in one epoch, grants out of order,
//! events out of time order below the highest epoch, `order`s out of step with time. A
//! property test compares the two event by event (`assess/tests/fast.rs`;
//! [`Live::set_reference_decisions`] forces the full one). The duplicate key a hot scope's
//! event is settled by is looked up in it too: an `order` above every kept one is new (the
//! `dups` module; spans are found by the span index, the `spans` module).
//!
//! **Clean.** The fast path is exact only when what is stored (counterexamples with their
//! witnesses and context, flags, pending holder mismatches) is what a full decision would give
//! now: the scope is *clean*. A full decision makes it clean, an exact fast step keeps it
//! clean. A withdrawal or an event that takes no part but enters a counterexample's context
//! makes it dirty, and so can folding — a counterexample's context or witness may fold away,
//! and the full decision would record it again without them — except when the scope is
//! *calm*: its last decision found nothing about its kept events (no counterexample — not
//! even one it left to the folded detail, such as a reuse through the mark judged late: its
//! representative is a kept event — no ambiguous order), and every kept commit is at or
//! above the new high-water mark. Then each kept event stays clear (folding only takes
//! partners away; the mark, at or below every kept commit, is no partner of theirs; the grants
//! of their epochs keep their holders), so a full decision would change nothing. A dirty
//! scope takes the full decision at its next event. An idle scope (nothing kept) is clean and
//! calm.
//!
//! **What it costs.** Cleanliness is two booleans in the padding of the scope's summary; a hot
//! scope (one decided with at least [`HOT_EVENTS`] events kept) keeps a [`Fast`] (its own
//! allocation: about 200 bytes, an entry per epoch kept and per epoch granted), pointed to
//! from the slack of the scope's allocation (80 bytes either way), dropped when it cools. Neither is checkpointed: a restored scope takes the full
//! decision at its next event, which gives what the fast path would (restore + replay finds the
//! same). An idle scope costs nothing more. Per event: binary searches over the epochs kept and
//! granted (a stale one also scans the epochs above it); a hand-off also visits the events
//! within the clock skew before it. A hot scope that is not calm when the horizon folds (it
//! found something) takes one full decision at its next event: once per window, not per event.

use super::{FOLDED_IDX, MARK_IDX, MIXED, ScopeState};
use crate::rules::{ASIDE, HAS_ORDER, NONE, Rec};
use crate::tracker::Judgement;

/// A scope decided with at least this many events kept gets a [`Fast`]; a smaller one takes
/// the full decision where the summary alone does not settle an event (it costs little).
pub(in crate::live) const HOT_EVENTS: usize = 16;

/// Whether a scope is clean and calm (the module doc). Derived: a checkpoint does not carry it
/// (a restored scope is neither), and states compare equal whatever it says.
#[derive(Debug, Clone, Copy, Default)]
pub(in crate::live) struct Clean {
    /// What is stored is what the full decision gives now.
    pub(in crate::live) clean: bool,
    /// The last decision found nothing about the kept events.
    pub(in crate::live) calm: bool,
}

impl Clean {
    /// Clean and calm: a scope that keeps nothing.
    pub(in crate::live) const CALM: Clean = Clean {
        clean: true,
        calm: true,
    };
}

impl PartialEq for Clean {
    fn eq(&self, _: &Clean) -> bool {
        true
    }
}

impl Eq for Clean {}

/// A hot scope's [`Fast`], if any. Derived like [`Clean`].
#[derive(Debug, Clone, Default)]
pub(in crate::live) struct FastSlot(pub(in crate::live) Option<Box<Fast>>);

impl PartialEq for FastSlot {
    fn eq(&self, _: &FastSlot) -> bool {
        true
    }
}

impl Eq for FastSlot {}

/// What the grants of one (incarnation, epoch), kept or folded, say to its commits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Granted {
    key: (u64, u64),
    /// The holder of its holder-bearing grants: `NONE` when none has one, [`MIXED`] when
    /// they differ.
    holder: u32,
    /// The first holder-bearing grant in sweep order (time, then sweep index: a kept event's
    /// index, a folded grant's from [`FOLDED_IDX`]).
    first: Option<(i64, u32)>,
}

/// The commits of one (incarnation, epoch) as the sweeps see them: kept ones and the mark.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Epoch {
    key: (u64, u64),
    /// The earliest in sweep order, (time, sweep index: [`MARK_IDX`] for the mark): the
    /// epoch's minimum time and the witness of what it supersedes.
    first: (i64, u32),
    /// The holder of its kept commits and the mark's (`NONE`, one, or [`MIXED`]; an unsure
    /// mark's is [`MIXED`]).
    holder: u32,
    /// Whether one carries no `order`.
    unordered: bool,
    /// Whether one is kept (else it is the mark alone).
    kept: bool,
}

/// What the fast path knows of a hot scope's decision inputs: the participants of the sweeps
/// (kept events not set aside that are committed commits/fences with an epoch, or grants; the
/// folded grants; the mark as evidence), maintained as events are kept, rebuilt when decided
/// or folded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::live) struct Fast {
    /// Every kept event (any class) is no earlier than the one kept before it: arrival order
    /// is time order, so the events before one by time are the ones before it in the list.
    sorted: bool,
    /// The earliest of its holder mismatches waiting for the watermark (`i64::MAX`: none).
    pub(in crate::live) pending_min: i64,
    /// The latest stale event of its counterexamples found (recorded or waiting) with their
    /// stale event kept (`i64::MIN`: none): a later event enters no context.
    pub(in crate::live) cx_max: i64,
    /// Per (incarnation, epoch) of the commits and the mark, ascending.
    epochs: Vec<Epoch>,
    /// The highest (incarnation, epoch) of the kept commits.
    kept_top: Option<(u64, u64)>,
    /// The greatest `order` of any participant.
    max_order: Option<u64>,
    /// The greatest `order` of any kept commit/fence, committed or not, set aside or not: a
    /// greater one shares its (scope, incarnation, order, epoch) key with none.
    max_order_key: Option<u64>,
    /// The latest time of any participant (the mark excepted: it is older than the horizon).
    max_ts: i64,
    /// The latest time of the kept commits.
    commit_max_ts: i64,
    /// The highest (incarnation, epoch) granted, kept or folded.
    gtop: Option<(u64, u64)>,
    /// Whether a grant of `gtop` carries no `order`.
    gtop_unordered: bool,
    /// The latest time of the grants, kept or folded.
    grant_max_ts: i64,
    /// Per granted (incarnation, epoch), ascending.
    granted: Vec<Granted>,
}

impl Fast {
    fn empty(d: &Decided) -> Fast {
        Fast {
            sorted: true,
            pending_min: d.pending_min,
            cx_max: d.cx_max,
            epochs: Vec::new(),
            kept_top: None,
            max_order: None,
            max_order_key: None,
            max_ts: i64::MIN,
            commit_max_ts: i64::MIN,
            gtop: None,
            gtop_unordered: false,
            grant_max_ts: i64::MIN,
            granted: Vec::new(),
        }
    }

    /// From scratch: O(n) over the kept events, plus the folded grants.
    fn build(st: &ScopeState, d: &Decided) -> Fast {
        let mut f = Fast::empty(d);
        let events = st.events();
        for (i, e) in events.iter().enumerate() {
            f.add(e, i as u32, i.checked_sub(1).map(|j| &events[j]));
        }
        for (j, g) in st.folded_grants().iter().enumerate() {
            f.add_grant(g, FOLDED_IDX + j as u32);
        }
        if let Some(m) = st.evidence() {
            let order = st.mark_order();
            let e = f.epoch_mut((m.incarnation, m.epoch), (m.first, MARK_IDX));
            e.unordered |= order.is_none();
            // The mark's holder takes part in the epoch reuse; an unsure one sends every
            // holder-bearing commit of its epoch to the full decision.
            let h = if st.holder_unsure() {
                MIXED
            } else {
                st.mark_holder()
            };
            e.holder = merge_holder(e.holder, h);
            f.max_order = f.max_order.max(order);
        }
        f
    }

    /// The entry of `key` in `epochs`, made if new, with `first` taken into its earliest.
    fn epoch_mut(&mut self, key: (u64, u64), first: (i64, u32)) -> &mut Epoch {
        let i = match self.epochs.binary_search_by_key(&key, |x| x.key) {
            Ok(i) => i,
            Err(i) => {
                self.epochs.insert(
                    i,
                    Epoch {
                        key,
                        first,
                        holder: NONE,
                        unordered: false,
                        kept: false,
                    },
                );
                i
            }
        };
        let e = &mut self.epochs[i];
        e.first = e.first.min(first);
        e
    }

    /// Notes one more kept event at index `idx`, after `last`.
    pub(in crate::live) fn add(&mut self, e: &Rec, idx: u32, last: Option<&Rec>) {
        self.sorted &= last.is_none_or(|l| l.ts <= e.ts);
        if e.order_key().is_some() {
            self.max_order_key = self.max_order_key.max(e.order());
        }
        if e.has(ASIDE) {
            return;
        }
        match e.class() {
            0 => {
                let key = (e.inc, e.epoch);
                self.max_ts = self.max_ts.max(e.ts);
                self.commit_max_ts = self.commit_max_ts.max(e.ts);
                self.max_order = self.max_order.max(e.order());
                self.kept_top = self.kept_top.max(Some(key));
                let x = self.epoch_mut(key, (e.ts, idx));
                x.unordered |= !e.has(HAS_ORDER);
                x.holder = merge_holder(x.holder, e.holder);
                x.kept = true;
            }
            1 => {
                self.max_ts = self.max_ts.max(e.ts);
                self.add_grant(e, idx);
            }
            _ => {}
        }
    }

    fn add_grant(&mut self, g: &Rec, idx: u32) {
        let key = (g.inc, g.epoch);
        self.grant_max_ts = self.grant_max_ts.max(g.ts);
        self.max_order = self.max_order.max(g.order());
        let unordered = !g.has(HAS_ORDER);
        match self.gtop {
            Some(t) if t > key => {}
            Some(t) if t == key => self.gtop_unordered |= unordered,
            _ => (self.gtop, self.gtop_unordered) = (Some(key), unordered),
        }
        let i = match self.granted.binary_search_by_key(&key, |x| x.key) {
            Ok(i) => i,
            Err(i) => {
                self.granted.insert(
                    i,
                    Granted {
                        key,
                        holder: NONE,
                        first: None,
                    },
                );
                i
            }
        };
        if g.holder != NONE {
            let x = &mut self.granted[i];
            x.holder = merge_holder(x.holder, g.holder);
            x.first = Some(x.first.map_or((g.ts, idx), |f| f.min((g.ts, idx))));
        }
    }

    fn granted(&self, key: (u64, u64)) -> Option<&Granted> {
        self.granted
            .binary_search_by_key(&key, |x| x.key)
            .ok()
            .map(|i| &self.granted[i])
    }

    /// Whether no kept commit/fence can share the (incarnation, order, epoch) of `rec`, which
    /// carries `order`: its order is above all of theirs.
    pub(in crate::live) fn order_is_new(&self, rec: &Rec) -> bool {
        self.max_order_key.is_none_or(|m| rec.order > m)
    }

    /// The plan for commit `rec` (`clean` holds, `rec` is no older than the horizon plus the
    /// skew), or `None` for the full decision.
    fn commit(
        &self,
        st: &ScopeState,
        rec: &Rec,
        skew: i64,
        required: bool,
        (horizon, wm): (i64, i64),
    ) -> Option<Plan> {
        let key = (rec.inc, rec.epoch);
        let mut calm = st.clean().calm;
        let mut plan = Plan::quiet(st);
        let top = self.epochs.last();
        // In time order (and `order`): it certainly precedes no participant, so it supersedes
        // no one and witnesses nothing, and enters no counterexample's context; nor is it
        // the earliest of its epoch (the mark included), whose minimum stays.
        let idx = st.events().len() as u32;
        let in_order = rec.ts >= self.max_ts
            && rec
                .order()
                .is_none_or(|o| self.max_order.is_none_or(|m| o > m))
            && match self.epochs.binary_search_by_key(&key, |x| x.key) {
                Ok(i) => self.epochs[i].first < (rec.ts, idx),
                Err(_) => true,
            };
        // The holder of its epoch: a second one moves the epoch reuse's representative.
        let holder_fits = |h: u32| rec.holder == NONE || h == NONE || h == rec.holder;
        match top {
            // Out of order, at the highest epoch: it must precede nothing of another epoch,
            // and enter no counterexample's context. At the only epoch of the kept commits of a
            // calm scope, anything goes. Else, with no `order` anywhere, it must not be its
            // epoch's earliest (whose minimum stays); then anything of another epoch later than
            // it by more than the skew is stale already, a counterexample later than it.
            Some(t) if !in_order => {
                if t.key != key || !holder_fits(t.holder) {
                    return None;
                }
                let alone = self.epochs.iter().all(|e| e.key == key || !e.kept);
                if !(calm && alone)
                    && (rec.has(HAS_ORDER)
                        || self.max_order.is_some()
                        || t.first >= (rec.ts, idx)
                        || rec.ts < self.cx_max)
                {
                    return None;
                }
            }
            Some(t) if key < t.key => {
                // Below the highest epoch, in time order: it changes no other outcome when its
                // epoch has an earlier commit (or the mark) already; its own is decided against
                // the epochs above by their earliest time (`scope::supersession` and
                // `scope::incarnations`), with no `order` anywhere.
                if rec.has(HAS_ORDER) || self.max_order.is_some() {
                    return None;
                }
                let i = self.epochs.binary_search_by_key(&key, |x| x.key).ok()?;
                if !holder_fits(self.epochs[i].holder) {
                    return None;
                }
                let before = rec.ts.saturating_sub(skew);
                // (The mark may be later than an event older than the horizon.)
                let near = |e: &Epoch| e.first.0 <= rec.ts.saturating_add(skew);
                let above = &self.epochs[i + 1..];
                let same = above.iter().take_while(|e| e.key.0 == key.0).count();
                match above[..same].iter().rev().find(|e| e.first.0 < before) {
                    Some(w) => plan.stale = Some(w.first.1),
                    None => plan.ambiguous_self |= above[..same].iter().any(near),
                }
                // Higher incarnations, highest first: the first whose earliest commit precedes
                // it supersedes it, by its highest epoch that has one.
                let mut higher = &above[same..];
                while let Some(last) = higher.last() {
                    let start = higher.partition_point(|e| e.key.0 < last.key.0);
                    let inc = &higher[start..];
                    if let Some(w) = inc.iter().rev().find(|e| e.first.0 < before) {
                        plan.stale_incarnation = Some(w.first.1);
                        break;
                    }
                    higher = &higher[..start];
                }
                plan.ambiguous_self |=
                    plan.stale_incarnation.is_none() && above[same..].iter().any(near);
            }
            Some(t) if key == t.key => {
                // Its epoch's earliest time (and smallest order) stay; an `order`ed partner
                // below would see a first unordered event of the top epoch.
                if !rec.has(HAS_ORDER) && !t.unordered && self.max_order.is_some() {
                    return None;
                }
                if !holder_fits(t.holder) {
                    return None;
                }
            }
            _ => {
                // A new highest epoch (a hand-off): every kept commit within the skew before
                // it now has a higher partner in ambiguous order; a calm scope's were clear.
                if self.commit_max_ts.saturating_add(skew) >= rec.ts {
                    if !calm || !self.sorted || rec.has(HAS_ORDER) {
                        return None;
                    }
                    let events = st.events();
                    for (i, e) in events.iter().enumerate().rev() {
                        if e.ts.saturating_add(skew) < rec.ts {
                            break;
                        }
                        if e.class() == 0 && !e.has(ASIDE) {
                            plan.ambiguous.push(i);
                        }
                    }
                    plan.ambiguous.reverse();
                }
            }
        }
        // Its grant checks, as `scope::grant_checks` makes them.
        let ungranted = match self.granted(key) {
            None => true,
            Some(g) => {
                if let Some((_, w)) = g.first
                    && rec.holder != NONE
                    && g.holder != rec.holder
                {
                    if g.holder == MIXED {
                        return None;
                    }
                    plan.mismatch = Some(w);
                }
                false
            }
        };
        plan.ungranted = ungranted && required && !st.grants_unknown(rec.inc, rec.epoch);
        // Older than the horizon plus the skew, and found nothing against: judged against
        // the mark, as the full decision judges it.
        plan.late = rec.ts < horizon.saturating_add(skew)
            && st.evidence().is_some()
            && plan.stale.is_none()
            && plan.stale_incarnation.is_none()
            && plan.mismatch.is_none()
            && ((rec.ts < horizon && st.late_may_change_folded(rec.inc, rec.epoch))
                || st.judge(rec.inc, rec.epoch, rec.ts, skew, horizon) == Judgement::Late);
        // A counterexample recorded now (a mismatch waits while the watermark has not passed
        // it) has the events before it by time as its context.
        let records = plan.stale.is_some()
            || plan.stale_incarnation.is_some()
            || (plan.mismatch.is_some() && rec.ts < wm);
        if records && !(self.sorted && st.events().last().is_none_or(|l| l.ts <= rec.ts)) {
            return None;
        }
        calm &= plan.ambiguous.is_empty()
            && !plan.ambiguous_self
            && plan.stale.is_none()
            && plan.stale_incarnation.is_none()
            && plan.mismatch.is_none();
        plan.calm = calm;
        Some(plan)
    }

    /// The plan for grant `rec`, or `None` for the full decision.
    fn grant(&self, st: &ScopeState, rec: &Rec, skew: i64) -> Option<Plan> {
        let key = (rec.inc, rec.epoch);
        // Its checks may need folded detail (`ScopeState::grant_needs_folded`).
        if st.grant_needs_folded(rec.inc, rec.epoch, rec.holder) {
            return None;
        }
        if rec.ts < self.max_ts
            || rec.ts < self.grant_max_ts
            || rec
                .order()
                .is_some_and(|o| self.max_order.is_some_and(|m| o <= m))
        {
            return None;
        }
        // Commits of its epoch are kept: their grant checks may change.
        let commits_of = self.kept_top.is_some_and(|t| key <= t);
        match self.gtop {
            Some(t) if key < t => return None,
            Some(t) if key == t => {
                let g = self.granted(key)?;
                if !rec.has(HAS_ORDER) && !self.gtop_unordered && self.max_order.is_some() {
                    return None;
                }
                if rec.holder != NONE && g.holder != rec.holder && (g.holder != NONE || commits_of)
                {
                    return None;
                }
            }
            _ => {
                // A new granted epoch: no other grant within the skew before it (they would
                // be ambiguous), no commit of it kept (they would be granted now).
                if self.grant_max_ts.saturating_add(skew) >= rec.ts || commits_of {
                    return None;
                }
            }
        }
        Some(Plan::quiet(st))
    }
}

/// Two holders as one: `NONE` gives way, different ones are [`MIXED`].
pub(in crate::live) fn merge_holder(have: u32, h: u32) -> u32 {
    match (have, h) {
        (NONE, h) => h,
        (have, NONE) => have,
        (a, b) if a == b => a,
        _ => MIXED,
    }
}

mod plan;
pub(in crate::live) use plan::{Decided, Plan, decided, folded, plan};
