//! Time in one partition: the watermark moves with the greatest event time, pending holder
//! checks are decided once it passes them, and the horizon (the watermark minus the retention
//! margin) folds what falls behind it into the scopes' high-water marks and makes
//! counterexamples final. Closing the input makes every window final.

use super::aside::{LinkKey, Linked};
use super::emitters::Delivery;
use super::scopes::key_hash;
use super::state::Live;
use crate::rules::Rec;
use crate::time::EventTime;

impl Live {
    /// Moves the property's horizon with its watermark and folds what fell behind it. Folding
    /// visits every scope, so it runs only when the horizon moved by a window or more.
    pub(super) fn advance(&mut self, p: usize) {
        let wm = self.partition_watermark(p).0;
        self.settle_pending(p, wm);
        let prop_c = &self.contract.properties[p];
        let retention = self
            .state
            .options
            .retention
            .unwrap_or(prop_c.allowed_lateness.0);
        let width = prop_c.window.0;
        let horizon = wm.saturating_sub(retention);
        let prop = &mut self.state.props[p];
        prop.tally.series.advance_watermark(EventTime(wm));
        if horizon == i64::MIN || horizon.saturating_sub(prop.horizon) < width {
            return;
        }
        prop.horizon = horizon;
        let skew = prop_c.clock_skew.0;
        let names = &self.state.names;
        let key_of = |e: &Rec| {
            e.seq_key().map_or(0, |(emitter, seq)| {
                names.get(emitter as usize).map_or(0, |n| key_hash(n, seq))
            })
        };
        prop.scopes.fold(horizon, skew, &key_of);
        // No kept event is older than the horizon now: a dropped counterexample's stale event
        // older than it can no longer be found again.
        prop.dropped = prop.dropped.split_off(&(horizon, 0));
        self.finalize_cxs(p);
        // Per-emitter content hashes fall out with the horizon too.
        let min_horizon = self.min_horizon();
        // Except an applied attestation's, which is kept behind the horizon (attestations are
        // never late: a conflicting re-delivery must still find it), the newest 65,536.
        // So is a delivery dropped as equal to an attestation by its span (linked to it): a
        // conflict on its (emitter, seq) must still reach the attestation.
        let state = &mut self.state;
        let (links, unkept) = (&state.links, &state.unkept_spans);
        let attestation = |em: u32, seq: u64, d: &Delivery| {
            matches!(
                d.scope,
                super::premises::ATTESTED | super::premises::IGNORED
            ) || matches!(
                links.map.get(&LinkKey::Seq(em, seq)).map(|l| l.linked),
                Some(Linked::Unkept(id)) if unkept.holds_attestation(&id)
            )
        };
        let (late, emitters) = (&mut state.late_attests, &mut state.emitters);
        // Only the emitters whose window keeps deliveries: an idle one has nothing to forget.
        self.recent_emitters.retain(|&em| {
            let Some(e) = emitters.get_mut(&em) else {
                return false;
            };
            e.recent.forget_before(min_horizon, |seq, d| {
                if attestation(em, seq, &d) {
                    late.insert(em, seq, d);
                }
            });
            !e.recent.is_empty()
        });
        (state.late_attests).bound(|d| d.scope == super::premises::ATTESTED && !d.conflicted);
        // With the deliveries they were keyed by, as long as those are kept: an attestation's
        // span stays noted behind the horizon (`UnkeptSpans`), and so does what it did, to be
        // taken back.
        for prop in &mut state.props {
            if prop.keyed_attests.first_key_value().is_some() {
                // An old attestation behind a newer seq stays in its emitter's recent window
                // (which drops from its front only): its support entry stays with it.
                let (late, emitters) = (&state.late_attests, &state.emitters);
                let delivered = |em: u32, seq: u64| {
                    late.contains(em, seq)
                        || emitters
                            .get(&em)
                            .is_some_and(|e| e.recent.get(seq).is_some())
                };
                prop.keyed_attests
                    .retain(|&(em, seq), (_, a)| a.ts >= min_horizon || delivered(em, seq));
            }
            if prop.span_attests.first_key_value().is_some() {
                let unkept = &state.unkept_spans;
                prop.span_attests
                    .retain(|id, (ts, _)| *ts >= min_horizon || unkept.holds_attestation(id));
            }
        }
    }

    /// Decides the holder mismatches whose commit the watermark passed.
    fn settle_pending(&mut self, p: usize, wm: i64) {
        let prop = &mut self.state.props[p];
        if prop.pending.first().is_none_or(|(t, _)| *t >= wm) {
            return;
        }
        let rest = prop.pending.split_off(&(wm, String::new()));
        let due = std::mem::replace(&mut prop.pending, rest);
        let mut scopes: Vec<String> = due.into_iter().map(|(_, s)| s).collect();
        scopes.sort_unstable();
        scopes.dedup();
        let horizon = self.state.props[p].horizon;
        for scope in scopes {
            if self.state.props[p].scopes.contains(&scope) {
                self.decide_scope(p, &scope, None, horizon);
            }
        }
    }

    /// Ends the input: the end of input is the end of time (as in `check`), every window is
    /// final and pending decisions are made. For finite inputs such as `serve --ingest-file`
    /// without `--follow`, and tests.
    pub fn close(&mut self) {
        self.state.closed = true;
        for p in 0..self.state.props.len() {
            self.settle_pending(p, i64::MAX);
            self.finalize_cxs(p);
            self.state.props[p]
                .tally
                .series
                .advance_watermark(EventTime::MAX);
        }
    }
}
