//! Conflicting deliveries of folded grants (SPEC §4 "Duplicates"; the `dups` module settles
//! the rest).
//!
//! Grants outlive the horizon: folding keeps them whole in their scope, with their (emitter,
//! seq) (the `scopes` module doc). So a delivery of a key whose earlier delivery was a grant
//! that folded can still be compared with it, though the emitter's window forgot the
//! delivery: equal, it is a duplicate; different, `check` sets both aside, so the grant grants
//! nothing any more. It is taken out of its scope, which is decided again, and the provisional
//! counterexamples resting on it are withdrawn. Before (difference test against `check`,
//! session 35), the grant stayed: a later commit of its epoch by another holder was a holder
//! mismatch in `serve`, refuted, where `check` has the epoch ungranted (unknown).
//!
//! A folded grant is the earliest of its (incarnation, epoch, holder): an equal grant folded
//! with it under another key is not kept, and goes with it (its epoch may then read as
//! ungranted, unknown either way; never a counterexample).

use super::dups::Seen;
use super::state::Live;
use crate::event::Event;
use crate::finding::Reason;
use crate::rules::{NONE, Rec};

impl Live {
    /// Takes the folded grants of `scope` (property `p`) that `is_it` accepts out of it and
    /// decides it again without them; returns whether there were any.
    pub(super) fn set_aside_folded_grants(
        &mut self,
        p: usize,
        scope: &str,
        is_it: &impl Fn(&Rec) -> bool,
    ) -> bool {
        // Folded grants are never set aside ones (folding keeps none).
        let taken = self.state.props[p].scopes.take_folded_grants(scope, is_it);
        if taken > 0 {
            let horizon = self.state.props[p].horizon;
            self.decide_scope(p, scope, None, horizon);
        }
        taken > 0
    }

    /// `rec` (of property `prop`, if attributed; `ev` decoded) is a delivery of an (emitter,
    /// seq) whose earlier delivery the emitter's window forgot, in one of the properties the
    /// emitter fed (`fed`): against the folded grants of `ev`'s scope that carry the key (see
    /// the module doc). `None` when none does.
    pub(super) fn settle_folded_grant(
        &mut self,
        prop: Option<usize>,
        rec: &Rec,
        ev: &Event<'_>,
        fed: &[usize],
    ) -> Option<Seen> {
        let scope = ev.scope?;
        let key = Some((rec.emitter, rec.seq));
        let mut found: Vec<(usize, Rec)> = fed
            .iter()
            .filter_map(|&q| Some((q, self.state.props[q].scopes.get(scope)?)))
            .flat_map(|(q, st)| {
                (st.folded_grants().iter())
                    .filter(|g| g.seq_key() == key)
                    .map(move |g| (q, *g))
            })
            .collect();
        let &[(_, g), ..] = found.as_slice() else {
            return None;
        };
        if found.len() == 1 && self.same_content(&g, rec, ev) {
            self.state.duplicates += 1;
            return Some(Seen::Duplicate);
        }
        // One `conflicting_duplicate` per key and property.
        found.dedup_by_key(|(q, _)| *q);
        let emitter = self.state.names[rec.emitter as usize].clone();
        let detail = move |_: &Live| {
            format!(
                "emitter `{emitter}` seq {} was delivered before as a grant of scope `{scope}`, \
                 kept past the horizon: this delivery differs from it",
                rec.seq
            )
        };
        let is_it = move |e: &Rec| e.seq_key() == key;
        for (q, g) in &found {
            if self.set_aside_folded_grants(*q, scope, &is_it) {
                self.withdraw_resting_on(*q, scope, is_it);
            }
            self.raise_span(*q, rec, g.ts, Reason::ConflictingDuplicate, detail.clone());
        }
        if let Some(p) = prop.filter(|p| !found.iter().any(|(q, _)| q == p)) {
            self.raise_span(p, rec, g.ts, Reason::ConflictingDuplicate, detail);
        }
        Some(Seen::Aside)
    }

    /// Whether the folded grant `g` and `rec` (decoded as `ev`), of the same scope, are equal in
    /// content ([`Rec::same_content`]): `rec`'s names are looked up as the grant's were kept
    /// (a long one shortened); one never kept differs.
    fn same_content(&self, g: &Rec, rec: &Rec, ev: &Event<'_>) -> bool {
        let id = |s: Option<&str>| s.map_or(Some(NONE), |s| self.name_id(s));
        let (Some(holder), Some(route)) = (id(ev.holder), id(ev.route)) else {
            return false;
        };
        Rec {
            holder,
            route,
            ..*rec
        }
        .same_content(g)
    }
}
