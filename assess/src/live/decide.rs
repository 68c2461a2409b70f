//! Deciding a scope: an applied event is kept in its scope, and the scope is decided again by
//! the per-scope sweeps of [`crate::scope`] over its kept events, its folded grants and its
//! folded high-water mark, unless the event can change no finding (the steady case of an owner
//! committing with the highest epoch). The decision raises and withdraws the reasons the sweeps
//! find (`ambiguous_order`, `ungranted_epoch`, `late_evidence` against the mark) and records the
//! counterexamples (the `cxs` module).

use super::dups::Attributed;
use super::scopes::ScopeState;
use super::state::{Cx, FOLDED_IDX, Live, MARK_IDX};
use crate::contract::Grants;
use crate::finding::{CounterexampleKind, Reason, counterexample_id};
use crate::rules::{self, AMBIGUOUS, ASIDE, HAS_ORDER, NONE, Reasons, Rec, UNGRANTED};
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
        let st = self.state.props[p].scopes.state_mut(rec.scope);
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
            scope: rec.scope,
            reasons,
        }
    }

    /// Re-decides one scope after a change; `new` is the index of the event just added.
    pub(super) fn decide_scope(&mut self, p: usize, scope: &str, new: Option<usize>, horizon: i64) {
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
                holder: NONE,
                prop: p as u16,
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
        // The context is of applied events, as in `check`.
        let mut by_time: Vec<u32> = (0..events.len() as u32)
            .filter(|&i| !events[i as usize].has(ASIDE))
            .collect();
        by_time.sort_unstable_by_key(|&i| (events[i as usize].ts, i));
        let mut out = Vec::new();
        for (kind, stale, witness) in cxs {
            let s = events[stale as usize];
            let prov = s.provenance(self);
            let id = counterexample_id(&prop_name, kind, scope, s.inc, &prov);
            let context = rules::context(&by_time, |i| events[i as usize].ts, stale)
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
}

/// Whether adding `rec` to the scope can change no finding, so the scope need not be decided
/// again: the steady case of an owner committing with the highest epoch, later than everything
/// the scope holds by more than the skew. Then `rec` has no higher partner (neither stale nor
/// ambiguous), precedes nothing (supersedes no one, witnesses nothing), and shares its epoch with
/// no other holder (no reuse). Grants and `order` take the full path.
fn changes_nothing(st: &ScopeState, rec: &Rec, skew: i64, horizon: i64) -> bool {
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
fn grant_settled(folded: &[Rec], rec: &Rec, required: bool) -> bool {
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
