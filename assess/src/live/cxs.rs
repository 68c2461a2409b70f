//! The life of a counterexample in `serve` (SPEC §4 "Provisional counterexamples"): found,
//! provisional, then final or withdrawn.
//!
//! A counterexample is recorded as soon as a scope's decision finds it, and is *provisional*
//! while a later conflicting delivery could still take away the evidence it rests on: until
//! the property's horizon (its watermark minus the retention margin) has passed both its stale
//! and its superseding event. Past that, both events are folded, a delivery of their keys can
//! no longer be compared with them, and the counterexample is *final*: never withdrawn. Each
//! property keeps its provisional ones by that due time, so finalizing costs nothing per event.
//!
//! When a duplicate key turns out to have conflicting deliveries, they are all set aside and
//! the scope is decided again. A provisional counterexample whose stale or superseding event
//! was one of them, and that the new decision does not find again with other evidence (the same
//! stale event with another witness keeps its id and stands), is *withdrawn*: its window, if
//! final, is revised to `unknown(conflicting_duplicate)` (`refuted` → `unknown`, never up to
//! `holds`); if still provisional it reads as its own evidence says, as in `check` (the
//! conflicting deliveries raise `conflicting_duplicate` in their own windows). It stays listed
//! with its [`Withdrawal`], and it is reported by
//! [`Live::take_withdrawn_counterexamples`]. Should later evidence find it again, it stands
//! again and is reported as found again.
//!
//! An epoch reuse is one counterexample per group, placed at the group's latest event, which
//! later evidence can change. When a new representative takes over, the old one's window stays
//! refuted (a `refuted` is retracted only when its counterexample is withdrawn) and the
//! counterexample keeps the old representative as a *former* one, one per window: every window
//! it refutes is owned by it, so nothing stays refuted once the evidence is gone. When it is
//! withdrawn, the windows of its former representatives are taken back with its own; when a
//! former representative itself turns out to be a conflicting delivery, its window is taken
//! back while the reuse stands on the others. A window taken back so reads as its own evidence
//! says while provisional (as in `check`), and is `unknown(conflicting_duplicate)`, revised,
//! once final. A former representative older than the horizon is dropped from the list: it is
//! folded, and so is the witness it had (earlier in its group), so that refutation is final.
//! Final counterexamples keep no former ones.
//!
//! **Bounded** ([`super::LiveOptions::max_counterexamples`], default 100,000 per property and
//! partition): beyond the bound, the oldest final counterexamples lose their detail first,
//! then the oldest withdrawn ones; a provisional one never does (its withdrawal needs its
//! windows), so only provisional ones exceed the bound, until final. A dropped one still
//! stands: its window stays refuted, it was reported when found, [`super::View`] counts it, and
//! per window the earliest and latest stale event times and the count of dropped ones are kept,
//! so an assurance over a range is `refuted` when one certainly lies in it and
//! `unknown(late_evidence)` when one may, never `holds`. The window series counts
//! each counterexample once per window, so finding a dropped one again must change nothing. A
//! decision finds a counterexample only with its stale event kept, and once the horizon folded
//! it the id can never be found again; so a dropped final one is remembered, as (stale event
//! time, 8-byte hash of its id) and its epoch reuse group's hash, only until the next fold
//! passes its stale event: in practice only late and closed-input ones (a counterexample made
//! final by the horizon has its stale event folded already), bounded by the events kept. Found
//! again by id, it is ignored (its window counted, it was reported). An epoch reuse's new
//! representative whose final old one was dropped takes it over as it would a kept one (final,
//! not reported again, its window shared when the same). Once the old one's stale event is
//! folded, a new representative is taken as a new counterexample (reported, provisional until
//! its own events fold): its window is refuted by it either way, only
//! `fencewatch_counterexamples_total` counts the group twice. A 64-bit hash collision between
//! two ids with the same stale event time would make the second one ignored; its window is
//! refuted by the first. A dropped withdrawn one is not remembered: found again it is new,
//! as a withdrawn one found again is.
//!
//! **Settled** (for the evidence archive, SPEC §9: a counterexample is archived once, when
//! final or withdrawn). A counterexample is *settled* when it becomes final, or when it was
//! withdrawn and the horizon has passed its due time (before that it could be found again with
//! the same id); a withdrawn one whose detail is dropped is settled then. Each settles once per
//! id, in the push that settles it, so replaying a log settles the same ones in the same
//! batches (an epoch reuse's representative that takes over a final one settles under its
//! own id, unless the group settled under that id before); [`Live::collect_settled`] turns the collection on (off by default: nothing is
//! rendered). The unsettled ones are [`Live::unsettled_counterexamples`].

use super::state::{Cx, CxKey, Live, NewCounterexample, Settled};
use crate::event::Kind;
use crate::finding::{CounterexampleKind, Withdrawal};
use crate::rules::Rec;

/// A counterexample id's hash, as a dropped one is remembered.
fn id_hash(id: &str) -> u64 {
    xxhash_rust::xxh3::xxh3_64(id.as_bytes())
}

impl Cx {
    /// The hash of an epoch reuse's group (scope, incarnation, epoch, commits or grants), never
    /// 0; 0 for other kinds.
    fn group_hash(&self) -> u64 {
        if self.kind != CounterexampleKind::EpochReuse {
            return 0;
        }
        let mut h = xxhash_rust::xxh3::Xxh3Default::new();
        h.update(&(self.scope.len() as u64).to_le_bytes());
        h.update(self.scope.as_bytes());
        h.update(&self.stale.inc.to_le_bytes());
        h.update(&self.stale.epoch.to_le_bytes());
        h.update(&[u8::from(self.stale.kind == Kind::Grant)]);
        h.digest().max(1)
    }

    /// The time past which the horizon makes it final: the later of its stale and its
    /// superseding event (the folded mark is folded already).
    pub(super) fn due(&self) -> i64 {
        self.witness
            .map_or(self.stale.ts, |w| w.ts.max(self.stale.ts))
    }

    fn note(&self, p: usize, live: &Live) -> NewCounterexample {
        NewCounterexample {
            property: p,
            kind: self.kind,
            route: live.name(self.stale.route).unwrap_or_default().to_string(),
            id: self.id.clone(),
        }
    }
}

impl Live {
    /// Records a counterexample a scope's decision found: new, found again (its witness may
    /// have changed), found again after a withdrawal, or an epoch reuse's new representative.
    pub(super) fn record_cx(&mut self, p: usize, mut cx: Cx) {
        let key = (cx.stale.ts, cx.id.clone());
        let horizon = self.state.props[p].horizon;
        let closed = self.state.closed;
        let prop = &mut self.state.props[p];
        if let Some(old) = prop.cxs.get(&key) {
            let (was_final, was_withdrawn, old_due) = (old.is_final, old.withdrawn, old.due());
            cx.former = old.former.clone();
            cx.settled_ids = old.settled_ids.clone();
            cx.is_final = was_final || closed || cx.due() < horizon;
            if was_withdrawn.is_none() {
                cx.found_at = old.found_at;
            }
            prop.provisional.remove(&(old_due, key.clone()));
            prop.withdrawn_due.remove(&(old_due, key.clone()));
            if cx.is_final {
                cx.former.clear();
            } else {
                prop.provisional.insert((cx.due(), key.clone()));
            }
            if was_withdrawn.is_some() {
                prop.withdrawn -= 1;
                prop.tally.series.add_counterexample(cx.stale.ts);
                let note = cx.note(p, self);
                self.new_cxs.push(note);
            }
            let settles = cx.is_final && !was_final;
            self.state.props[p].cxs.insert(key.clone(), cx);
            if settles {
                self.settle(p, &key);
            }
            return;
        }
        if prop.dropped.contains_key(&(key.0, id_hash(&cx.id))) {
            // Found again, a final one whose detail was dropped: its window is refuted by it
            // and it was reported when found; nothing changes.
            return;
        }
        cx.is_final = closed || cx.due() < horizon;
        let mut report = true;
        // The windows this counterexample refutes, each by one count in the series: the stale
        // event's, and an epoch reuse's former representatives'.
        let mut owned = Vec::new();
        let mut old_window = None;
        if cx.kind == CounterexampleKind::EpochReuse {
            // One per (scope, incarnation, epoch, commits or grants), represented by the group's
            // latest event, which later evidence can change: the new representative replaces
            // the old one. The old one's window stays refuted (a `refuted` is retracted only
            // when its counterexample is withdrawn, SPEC §4): the new one takes it over as a
            // former representative, so that a withdrawal, or the former representative turning
            // out to be a conflicting delivery, takes that window back too.
            let grant = cx.stale.kind == Kind::Grant;
            let group = cx.group_hash();
            let old = prop.cxs.iter().find(|(_, o)| {
                o.kind == CounterexampleKind::EpochReuse
                    && o.scope == cx.scope
                    && (o.stale.inc, o.stale.epoch) == (cx.stale.inc, cx.stale.epoch)
                    && (o.stale.kind == Kind::Grant) == grant
            });
            if let Some(k) = old.map(|(k, _)| k.clone()) {
                let old = prop.cxs.remove(&k).expect("found");
                prop.provisional.remove(&(old.due(), k.clone()));
                prop.withdrawn_due.remove(&(old.due(), k));
                cx.is_final |= old.is_final;
                // The ids the group settled under: the old one's too, once final.
                cx.settled_ids = old.settled_ids.clone();
                if old.is_final {
                    cx.settled_ids.push(id_hash(&old.id));
                }
                report = old.withdrawn.is_some();
                if report {
                    // Its windows were taken back when it was withdrawn.
                    prop.withdrawn -= 1;
                } else {
                    owned = old.former;
                    owned.push(old.stale);
                }
            } else if let Some(dk) = prop
                .dropped
                .iter()
                .find(|(_, g)| **g == group)
                .map(|(k, _)| *k)
            {
                // The old representative was final and its detail dropped: as above, the new
                // one takes over a final counterexample (not reported again), its window
                // shared when it is the same.
                prop.dropped.remove(&dk);
                let t = &mut prop.tally;
                t.cxs_dropped = t.cxs_dropped.saturating_sub(1);
                let k = t.series.index(dk.0);
                if let Some(o) = t.dropped_at.get_mut(&k)
                    && !o.take_back_enclosed(dk.0)
                {
                    t.dropped_at.remove(&k);
                }
                cx.is_final = true;
                cx.settled_ids = vec![dk.1];
                report = false;
                if dk.0 >= horizon {
                    old_window = Some(k);
                }
            }
        }
        // A former representative older than the horizon is folded, and so is the witness it
        // had (earlier in the group): that refutation is final evidence, kept for good.
        owned.retain(|f| f.ts >= horizon);
        let series = &mut prop.tally.series;
        let k = series.index(cx.stale.ts);
        match owned.iter().position(|f| series.index(f.ts) == k) {
            // Its window is refuted by this counterexample already.
            Some(i) => {
                owned.swap_remove(i);
            }
            None if old_window == Some(k) => {}
            None => series.add_counterexample(cx.stale.ts),
        }
        if cx.is_final {
            owned.clear();
        } else {
            prop.provisional.insert((cx.due(), key.clone()));
        }
        cx.former = owned;
        if report {
            let note = cx.note(p, self);
            self.new_cxs.push(note);
        }
        let settles = cx.is_final && !cx.settled_ids.contains(&id_hash(&cx.id));
        self.state.props[p].cxs.insert(key.clone(), cx);
        if settles {
            self.settle(p, &key);
        }
        self.bound_cxs(p);
    }

    /// Collects counterexamples as they settle (the module doc), for
    /// [`Live::take_settled_counterexamples`].
    pub fn collect_settled(&mut self) {
        self.settled.get_or_insert_with(Vec::new);
    }

    /// Counterexamples settled since the last call (none unless [`Live::collect_settled`]),
    /// in the order they settled.
    pub fn take_settled_counterexamples(&mut self) -> Vec<Settled> {
        self.settled
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// The counterexamples not settled yet: provisional ones, and withdrawn ones the horizon
    /// has not passed, in no particular order.
    pub fn unsettled_counterexamples(&self) -> Vec<Settled> {
        let mut out = Vec::new();
        for (p, prop) in self.state.props.iter().enumerate() {
            for (_, key) in prop.provisional.iter().chain(&prop.withdrawn_due) {
                if let Some(c) = prop.cxs.get(key) {
                    out.push(Settled {
                        counterexample: self.render(p, c),
                        found_at: c.found_at,
                    });
                }
            }
        }
        out
    }

    /// Renders counterexample `key` of property `p` into the settled ones, when collected.
    fn settle(&mut self, p: usize, key: &CxKey) {
        if self.settled.is_none() {
            return;
        }
        let Some(c) = self.state.props[p].cxs.get(key) else {
            return;
        };
        let s = Settled {
            counterexample: self.render(p, c),
            found_at: c.found_at,
        };
        self.settled.as_mut().expect("collected").push(s);
    }

    /// Keeps at most [`super::LiveOptions::max_counterexamples`] counterexamples of property
    /// `p` in full: beyond, the oldest final ones lose their detail (they still stand and
    /// count), then the oldest withdrawn ones; a provisional one never does (its withdrawal
    /// needs its windows), so the bound can be exceeded while the excess is provisional.
    pub(super) fn bound_cxs(&mut self, p: usize) {
        let max = self.state.options.max_counterexamples;
        while self.state.props[p].cxs.len() > max {
            let prop = &self.state.props[p];
            let pick = prop
                .cxs
                .iter()
                .find(|(_, c)| c.is_final)
                .or_else(|| prop.cxs.iter().find(|(_, c)| c.withdrawn.is_some()))
                .map(|(k, _)| k.clone());
            let Some(key) = pick else { break };
            let due = (prop.cxs[&key].due(), key.clone());
            if self.state.props[p].withdrawn_due.remove(&due) {
                // Its detail goes: it is settled now, as it stands.
                self.settle(p, &key);
            }
            let prop = &mut self.state.props[p];
            let c = prop.cxs.remove(&key).expect("found");
            let t = &mut prop.tally;
            if c.withdrawn.is_some() {
                prop.withdrawn -= 1;
                t.withdrawn_dropped += 1;
                continue;
            }
            t.cxs_dropped += 1;
            let k = t.series.index(key.0);
            t.dropped_at.entry(k).or_default().add(key.0);
            prop.dropped.insert((key.0, id_hash(&c.id)), c.group_hash());
        }
    }

    /// Makes final the provisional counterexamples of property `p` whose events the horizon
    /// passed (all of them once the input is closed).
    pub(super) fn finalize_cxs(&mut self, p: usize) {
        let closed = self.state.closed;
        let mut prop = &mut self.state.props[p];
        while let Some(first) = prop.provisional.first() {
            if !closed && first.0 >= prop.horizon {
                break;
            }
            let (_, key) = prop.provisional.pop_first().expect("first");
            if let Some(c) = prop.cxs.get_mut(&key) {
                c.is_final = true;
                c.former = Vec::new();
                self.settle(p, &key);
            }
            prop = &mut self.state.props[p];
        }
        // Withdrawn ones the horizon passed can no longer be found again: settled as they are.
        while let Some(first) = prop.withdrawn_due.first() {
            if !closed && first.0 >= prop.horizon {
                break;
            }
            let (_, key) = prop.withdrawn_due.pop_first().expect("first");
            self.settle(p, &key);
            prop = &mut self.state.props[p];
        }
        self.bound_cxs(p);
    }

    /// Withdraws the provisional counterexamples of `scope` (property `p`) whose stale or
    /// superseding event `set_aside` accepts (events just set aside as conflicting deliveries),
    /// after the scope was decided again without them, with the windows of their former
    /// representatives; and takes back the window of a standing epoch reuse's former
    /// representative that `set_aside` accepts.
    pub(super) fn withdraw_resting_on(
        &mut self,
        p: usize,
        scope: &str,
        set_aside: impl Fn(&Rec) -> bool,
    ) {
        self.withdraw_resting(p, scope, set_aside, |_| false);
    }

    /// As [`Live::withdraw_resting_on`], and also withdraws those whose witness is the folded
    /// mark when `on_mark` accepts them (the mark rested on a conflicting delivery).
    pub(super) fn withdraw_resting(
        &mut self,
        p: usize,
        scope: &str,
        set_aside: impl Fn(&Rec) -> bool,
        on_mark: impl Fn(&Cx) -> bool,
    ) {
        let by_mark = |c: &Cx| c.witness.is_none() && on_mark(c);
        let prop = &self.state.props[p];
        let keys: Vec<CxKey> = prop
            .cxs
            .iter()
            .filter(|(_, c)| {
                c.scope == scope
                    && !c.is_final
                    && c.withdrawn.is_none()
                    && (set_aside(&c.stale)
                        || c.witness.as_ref().is_some_and(&set_aside)
                        || by_mark(c)
                        || c.former.iter().any(&set_aside))
            })
            .map(|(k, _)| k.clone())
            .collect();
        let why = Withdrawal::ConflictingDuplicate;
        if !keys.is_empty()
            && let Some(st) = self.state.props[p].scopes.get_mut(scope)
        {
            // Not what a decision found: the fast path waits for the next full one (a folded
            // grant is never set aside, so that one may find it again).
            st.set_clean(super::scopes::fast::Clean::default());
        }
        for key in keys {
            let prop = &mut self.state.props[p];
            let c = prop.cxs.get_mut(&key).expect("listed");
            let whole =
                set_aside(&c.stale) || c.witness.as_ref().is_some_and(&set_aside) || by_mark(c);
            let mut gone = Vec::new();
            c.former.retain(|f| {
                let out = whole || set_aside(f);
                if out {
                    gone.push(f.ts);
                }
                !out
            });
            for t in gone {
                // A provisional window reads as its own evidence says (as `check` has it); a
                // final one must not rise to `holds`: unknown(conflicting_duplicate), revised.
                let series = &mut prop.tally.series;
                if series.is_final(series.index(t)) {
                    series.withdraw_counterexample(t, why.reason());
                } else {
                    series.retract_counterexample(t);
                }
            }
            if !whole {
                continue;
            }
            let c = prop.cxs.get_mut(&key).expect("listed");
            c.withdrawn = Some(why);
            let due = c.due();
            prop.provisional.remove(&(due, key.clone()));
            prop.withdrawn_due.insert((due, key.clone()));
            prop.withdrawn += 1;
            // Its own window as its former representatives' (above): a provisional one reads as
            // `check` has it, a final one becomes unknown(conflicting_duplicate), revised.
            let series = &mut prop.tally.series;
            if series.is_final(series.index(key.0)) {
                series.withdraw_counterexample(key.0, why.reason());
            } else {
                series.retract_counterexample(key.0);
            }
            let note = self.state.props[p].cxs[&key].note(p, self);
            self.withdrawn_cxs.push(note);
        }
    }

    /// Counterexamples withdrawn since the last call, for metrics
    /// (`fencewatch_counterexamples_withdrawn_total`): the same fields as
    /// [`Live::take_new_counterexamples`] reports when they were found.
    pub fn take_withdrawn_counterexamples(&mut self) -> Vec<NewCounterexample> {
        std::mem::take(&mut self.withdrawn_cxs)
    }

    /// Counterexamples not yet final and not withdrawn, over all properties (the gauge
    /// `fencewatch_counterexamples_provisional`). Per property, and over merged partitions:
    /// [`super::View::provisional_count`].
    pub fn provisional_counterexamples(&self) -> usize {
        self.state.props.iter().map(|p| p.provisional.len()).sum()
    }
}
