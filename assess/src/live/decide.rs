//! Deciding a scope: an applied event is kept in its scope, and the scope is decided again by
//! the per-scope sweeps of [`crate::scope`] over its kept events, its folded grants and its
//! folded high-water mark, unless the fast path settles the event alone (the `fast` module:
//! most events of a hot scope). The decision raises and withdraws the reasons the sweeps find
//! (`ambiguous_order`, `ungranted_epoch`, `late_evidence` against the mark) and records the
//! counterexamples (the `cxs` module).

use super::dups::Attributed;
use super::scopes::fast::{self, Clean, Plan};
use super::scopes::{FOLDED_IDX, MARK_IDX};
use super::state::{Cx, Live};
use crate::contract::Grants;
use crate::finding::{CounterexampleKind, Reason, counterexample_id};
use crate::rules::{self, AMBIGUOUS, ASIDE, NONE, Reasons, Rec, UNGRANTED};
use crate::scope::{self, Slot};
use crate::tracker::Judgement;

impl Live {
    /// Keeps the applied event `rec` (which raised `reasons`) in `scope` of property `p` and
    /// decides the scope again unless that can change nothing.
    pub(super) fn keep_in_scope(
        &mut self,
        p: usize,
        rec: Rec,
        scope: &str,
        reasons: Reasons,
    ) -> Attributed {
        let horizon = self.state.props[p].horizon;
        let wm = self.partition_watermark(p).0;
        let due = self.state.props[p]
            .pending
            .first()
            .is_some_and(|(t, _)| *t < wm);
        let st = self.state.props[p].scopes.state_mut(rec.scope);
        let skew = self.contract.properties[p].clock_skew.0;
        let grants_required = self.contract.properties[p].grants == Grants::Required;
        // Planned before the event is kept: the fast path reads the scope as it was.
        let plan = if self.reference || rec.class() == 2 {
            None
        } else {
            fast::plan(st, &rec, skew, horizon, grants_required, (wm, due))
        };
        let new = st.push(rec);
        // A commit older than the horizon whose holder check or grant requirement would need
        // grants dropped below the mark (an event arriving in order never does: SPEC §4).
        let needs_dropped_grants = rec.class() == 0
            && rec.ts < horizon
            && st.grants_unknown(rec.inc, rec.epoch)
            && ((rec.holder != NONE && !st.has_grant(rec.inc, rec.epoch, Some(rec.holder)))
                || (grants_required && !st.has_grant(rec.inc, rec.epoch, None)));
        self.state.props[p].scopes.note_kept(rec.scope, new == 0);
        if rec.class() < 2 {
            match plan {
                Some(plan) => self.apply_plan(p, (rec.scope, scope), new, plan, wm),
                None => self.decide_scope(p, scope, Some(new), horizon),
            }
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
            scope: rec.scope,
            reasons,
        }
    }

    /// Re-decides one scope after a change; `new` is the index of the event just added.
    pub(super) fn decide_scope(&mut self, p: usize, scope: &str, new: Option<usize>, horizon: i64) {
        self.full_decisions += 1;
        let skew = self.contract.properties[p].clock_skew.0;
        let grants_required = self.contract.properties[p].grants == Grants::Required;
        let st = self.state.props[p].scopes.get(scope).expect("scope exists");
        self.slots.clear();
        for (i, e) in st.events().iter().enumerate() {
            if e.has(ASIDE) || e.class() == 2 {
                continue;
            }
            self.slots.push(e.slot(i as u32));
        }
        // Folded grants at or above the mark take part as the kept events do.
        for (j, g) in st.folded_grants().iter().enumerate() {
            self.slots.push(g.slot(FOLDED_IDX + j as u32));
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
                holder: st.mark_slot_holder(),
                prop: p as u16,
                class: 0,
            });
        }
        scope::sort_slots(&mut self.slots);
        let mut found = scope::decide_group(&self.slots, skew, grants_required, &mut self.work);
        let ambiguous: Vec<u32> = found.ambiguous().to_vec();
        let ungranted = std::mem::take(&mut found.ungranted);
        let mut cxs = std::mem::take(&mut found.cxs);
        // Whether the sweeps found any counterexample, also one dropped below (a reuse through
        // the mark left to `late_evidence`, one of the folded detail): a scope is calm only if
        // not (`fast::Decided::calm`). A reuse left to the mark rests on kept events all the
        // same: setting aside its representative brings back the reuse between kept events
        // it replaced (the fast path's property test, a seed of session 34).
        let found_any = !cxs.is_empty();
        // Late events against the folded mark: where the sweep cannot be certain and the
        // exact answer needs folded detail.
        let mut late = Vec::new();
        // An epoch reuse through the mark with a kept event older than the horizon: which
        // event `check` takes as the reuse's representative (the latest holder-bearing one)
        // needs the folded events' times. The late event, if it is the new one, is late.
        cxs.retain(|c| {
            if c.0 != CounterexampleKind::EpochReuse || (c.1 != MARK_IDX && c.2 != MARK_IDX) {
                return true;
            }
            let kept = if c.1 == MARK_IDX { c.2 } else { c.1 };
            if c.1 != MARK_IDX && st.events()[c.1 as usize].ts >= horizon {
                return true;
            }
            if new == Some(kept as usize) {
                late.push(kept as usize);
            }
            false
        });
        // Whether the new event is the stale one of a counterexample found now.
        let refuted = new.is_some_and(|n| cxs.iter().any(|c| c.1 == n as u32));
        // And a commit older than the horizon that nothing refutes and that may change what
        // folded events are (hostile test, session 28: it may precede folded events of lower
        // epochs, or come before an epoch's earliest time, making folded events stale or
        // ambiguous, which `check` finds and the folded detail would be needed to place).
        if let Some(n) = new {
            let e = st.events()[n];
            if e.class() == 0
                && e.ts < horizon.saturating_add(skew)
                && mark.is_some()
                && late.is_empty()
                && !refuted
            {
                let j = st.judge(e.inc, e.epoch, e.ts, skew, horizon);
                if j == Judgement::Late
                    || (e.ts < horizon && st.late_may_change_folded(e.inc, e.epoch))
                {
                    late.push(n);
                }
            }
        }
        // A commit whose `order` is not above every folded one's, in time order or not: by
        // `order` it may precede folded events (hostile test, session 28).
        let order_late = new.filter(|&n| {
            let e = st.events()[n];
            e.class() == 0
                && late.is_empty()
                && !refuted
                && e.order()
                    .is_some_and(|o| st.order_may_precede_folded(e.inc, o))
        });
        // A commit by another holder of the evidence's epoch, whose folded holders are not
        // all known (a conflicting delivery took one of them away): reuse or not is unknown.
        let reuse_unknown = new.filter(|&n| {
            let e = st.events()[n];
            e.class() == 0 && st.reuse_unknown(e.inc, e.epoch, e.holder) && !refuted
        });
        // A grant whose checks need folded detail (hostile test, session 28): of an epoch
        // below the mark, whose commits' holders and grants folded (another holder's grant
        // of it, or a commit of it by another holder, is a counterexample `check` finds); or
        // of the mark's epoch, whose folded commits name another holder (or several, or
        // unknown ones) no grant of it names (a holder mismatch `check` finds on a folded
        // commit). Not refuted here: its stale event is folded.
        let grant_late = new.filter(|&n| {
            let e = st.events()[n];
            e.class() == 1 && !refuted && st.grant_needs_folded(e.inc, e.epoch, e.holder)
        });
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
        // What the fast path needs of this decision (the `fast` module).
        let decided = fast::Decided {
            calm: !found_any && pending.is_empty() && ambiguous.iter().all(|&i| i >= FOLDED_IDX),
            pending_min: pending.iter().copied().min().unwrap_or(i64::MAX),
            cx_max: (cxs.iter().map(|c| st.events()[c.1 as usize].ts))
                .chain(pending.iter().copied())
                .max()
                .unwrap_or(i64::MIN),
        };
        for t in pending {
            self.state.props[p].pending.insert((t, scope.to_string()));
        }
        // Dynamic per-event reasons.
        let mut changes: Vec<(Rec, Reason, bool)> = Vec::new();
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
        fast::decided(st, decided);
        for (e, reason, now) in changes {
            if now {
                self.raise(p, &e, reason, |_| {
                    rules::sweep_detail(reason, e.epoch, scope)
                });
            } else {
                self.withdraw(p, e.ts, reason);
            }
        }
        for n in late {
            let e = self.state.props[p].scopes[scope].events()[n];
            self.raise_late(p, scope, &e);
        }
        let told = [
            (order_late, Unsure::Order),
            (grant_late, Unsure::Grant),
            (reuse_unknown, Unsure::Holders),
        ];
        for (n, why) in told.into_iter().filter_map(|(n, w)| Some((n?, w))) {
            let e = self.state.props[p].scopes[scope].events()[n];
            self.raise(p, &e, why.reason(), |live| why.detail(live, &e, scope));
        }
        if cxs.is_empty() {
            return;
        }
        let events = self.state.props[p].scopes[scope].events();
        // The context is of applied events, as in `check`.
        let mut by_time: Vec<u32> = (0..events.len() as u32)
            .filter(|&i| !events[i as usize].has(ASIDE))
            .collect();
        by_time.sort_unstable_by_key(|&i| (events[i as usize].ts, i));
        let mut out = Vec::new();
        for (kind, stale, witness) in cxs {
            let context = rules::context(&by_time, |i| events[i as usize].ts, stale)
                .iter()
                .map(|&i| events[i as usize])
                .collect();
            out.push(self.new_cx(p, scope, kind, (stale, witness, mark), context));
        }
        for cx in out {
            self.record_cx(p, cx);
        }
    }

    /// Counts `late_evidence` for `e`, judged late against the folded mark.
    pub(super) fn raise_late(&mut self, p: usize, scope: &str, e: &Rec) {
        self.raise(p, e, Reason::LateEvidence, |_| format!(
            "epoch {} of scope `{scope}` arrived older than the retained horizon; its order against folded epochs is not known", e.epoch
        ));
    }

    /// The counterexample a decision of `scope` found: its stale event and witness are sweep
    /// indices (a kept event's, a folded grant's from [`FOLDED_IDX`], or [`MARK_IDX`] for the
    /// mark as evidence, `mark`).
    pub(super) fn new_cx(
        &self,
        p: usize,
        scope: &str,
        kind: CounterexampleKind,
        (stale, witness, mark): (u32, u32, Option<crate::tracker::Mark>),
        context: Vec<Rec>,
    ) -> Cx {
        let st = &self.state.props[p].scopes[scope];
        let s = st.events()[stale as usize];
        let prov = s.provenance(self);
        let id = counterexample_id(&self.contract.properties[p].name, kind, scope, s.inc, &prov);
        let (witness, mark) = match witness {
            MARK_IDX => (None, mark),
            w if w >= FOLDED_IDX => (Some(st.folded_grants()[(w - FOLDED_IDX) as usize]), None),
            w => (Some(st.events()[w as usize]), None),
        };
        Cx {
            id,
            kind,
            scope: scope.to_string(),
            stale: s,
            witness,
            mark,
            context,
            is_final: false,
            withdrawn: None,
            former: Vec::new(),
            found_at: self.received_at,
            settled_ids: Vec::new(),
        }
    }
}

impl Live {
    /// Applies the fast path's `plan` for event `new` of `scope` (id `id` in property `p`),
    /// just kept, as the full decision would, in its order: the holder mismatch waiting, the
    /// flags (by index), the counterexamples found (stale, holder mismatch, stale incarnation).
    pub(in crate::live) fn apply_plan(
        &mut self,
        p: usize,
        (id, scope): (u32, &str),
        new: usize,
        plan: Plan,
        wm: i64,
    ) {
        let st = self.state.props[p].scopes.state_mut(id);
        st.set_clean(Clean {
            clean: true,
            calm: plan.calm,
        });
        if plan.ambiguous.is_empty()
            && !plan.ambiguous_self
            && !plan.ungranted
            && !plan.late
            && plan.stale.is_none()
            && plan.mismatch.is_none()
            && plan.stale_incarnation.is_none()
        {
            return;
        }
        let rec = st.events()[new];
        let record = plan.mismatch.filter(|_| rec.ts < wm);
        if let Some(f) = st.fast_mut()
            && (plan.stale.is_some() || plan.mismatch.is_some() || plan.stale_incarnation.is_some())
        {
            f.cx_max = f.cx_max.max(rec.ts);
        }
        if plan.mismatch.is_some() && record.is_none() {
            if let Some(f) = st.fast_mut() {
                f.pending_min = f.pending_min.min(rec.ts);
            }
            self.state.props[p]
                .pending
                .insert((rec.ts, scope.to_string()));
        }
        let st = self.state.props[p].scopes.state_mut(id);
        let mut changes = Vec::with_capacity(plan.ambiguous.len() + 2);
        for &i in &plan.ambiguous {
            st.toggle_flag(i, AMBIGUOUS);
            changes.push((st.events()[i], Reason::AmbiguousOrder));
        }
        for (on, flag, reason) in [
            (plan.ambiguous_self, AMBIGUOUS, Reason::AmbiguousOrder),
            (plan.ungranted, UNGRANTED, Reason::UngrantedEpoch),
        ] {
            if on {
                st.toggle_flag(new, flag);
                changes.push((st.events()[new], reason));
            }
        }
        for (e, reason) in changes {
            self.raise(p, &e, reason, |_| {
                rules::sweep_detail(reason, e.epoch, scope)
            });
        }
        if plan.late {
            let e = self.state.props[p].scopes.state(id).events()[new];
            self.raise_late(p, scope, &e);
        }
        let found = [
            (CounterexampleKind::StaleCommit, plan.stale),
            (CounterexampleKind::HolderMismatch, record),
            (CounterexampleKind::StaleIncarnation, plan.stale_incarnation),
        ];
        if found.iter().all(|(_, w)| w.is_none()) {
            return;
        }
        let st = self.state.props[p].scopes.state(id);
        let mark = st.evidence();
        // In time order: the applied events before it by time are the last ones kept.
        let mut context: Vec<Rec> = (st.events()[..=new].iter().rev())
            .filter(|e| !e.has(ASIDE))
            .take(rules::CONTEXT_EVENTS)
            .copied()
            .collect();
        context.reverse();
        for (kind, w) in found {
            if let Some(w) = w {
                let cx = self.new_cx(p, scope, kind, (new as u32, w, mark), context.clone());
                self.record_cx(p, cx);
            }
        }
    }
}

/// Why a decision leaves an event's own answer unknown beside the sweeps' reasons (hostile
/// tests, session 28): what it would need of folded events.
#[derive(Debug, Clone, Copy)]
enum Unsure {
    /// A commit whose `order` is not above every folded event's.
    Order,
    /// A grant whose checks need folded commits' holders or dropped grants.
    Grant,
    /// A commit by another holder of an epoch whose folded holders are not all known.
    Holders,
}

impl Unsure {
    fn reason(self) -> Reason {
        match self {
            Unsure::Order | Unsure::Grant => Reason::LateEvidence,
            Unsure::Holders => Reason::ConflictingDuplicate,
        }
    }

    fn detail(self, live: &Live, e: &Rec, scope: &str) -> String {
        let epoch = e.epoch;
        match self {
            Unsure::Order => format!(
                "epoch {epoch} of scope `{scope}` carries an `order` not above every folded event's: its order against them is not known"
            ),
            Unsure::Grant => format!(
                "a grant of epoch {epoch} of scope `{scope}` arrived after that epoch's commits folded (or grants below the folded high-water mark were dropped): whether they were granted to their holders is not known"
            ),
            Unsure::Holders => format!(
                "epoch {epoch} of scope `{scope}` was used by a folded commit that turned out to be one of conflicting deliveries, so which holders used it is not known: whether `{}` reuses it is unknown",
                live.name(e.holder).unwrap_or_default()
            ),
        }
    }
}
