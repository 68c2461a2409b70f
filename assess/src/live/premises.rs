//! Premises in `serve` (SPEC §10): per property, each required premise's [`Support`] lives in
//! the mergeable tally (so a [`super::Summary`] carries it and a checkpoint keeps it). It is
//! never folded: bounded instead to [`MAX_ATTESTATIONS`] entries, the oldest merged away as
//! unsupported. Attestations extend no window, move no watermark and observe no route; one
//! naming a premise or route the property does not require is counted
//! ([`View::attestations_ignored`]) and otherwise ignored.
//!
//! Premise reasons are derived when queried, from the support merged over the view's
//! partitions, as route silence is: so a late attestation changes a final window's verdict in
//! either direction, premise reasons only, and `serve` reads as `check` does. The partition
//! that takes an attestation marks the final windows whose premise reason it changed
//! `revised`, as spans. An attestation with an (emitter, seq) is settled as any event; if a
//! conflicting delivery of its key arrives later, it is taken back out of the support.

use super::spans::SpanId;
use super::state::Live;
use super::view::View;
use crate::event::{Event, Outcome};
use crate::finding::Reason;
use crate::premise::{self, Attestation, Last, MAX_ATTESTATIONS, Regions, Support, WindowReasons};
use crate::report::PremiseReport;
use crate::rules::{Reasons, Rec};
use crate::time::EventTime;
use crate::window::Span;
use serde::Serialize;
use std::borrow::Cow;

/// [`super::dups`]' delivery scope of an applied attestation: not kept in a scope, taken back
/// from its support when its key conflicts.
pub(super) const ATTESTED: u32 = u32::MAX - 4;
/// Likewise of an attestation that was ignored: a conflicting delivery uncounts it.
pub(super) const IGNORED: u32 = u32::MAX - 5;

pub use crate::premise::State as PremiseState;

/// One required premise as `/v1/premises` shows it: its report (name, route, `max_age`, the
/// latest attestation, the intervals, the windows raising each reason) and its state at a time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PremiseView {
    /// The property.
    pub property: String,
    /// The premise's support over the history.
    #[serde(flatten)]
    pub premise: PremiseReport,
    /// Its state at `at`.
    pub state: PremiseState,
    /// The time assessed.
    pub at: String,
    /// When its support ends (exclusive), if supported at `at` (absent: no end).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub supported_until: Option<String>,
    /// [`PremiseView::supported_until`] in ns (`i64::MAX`: no end).
    #[serde(skip)]
    pub supported_until_ns: Option<i64>,
    /// Attestations older than this were merged away as unsupported (the bound of SPEC §10).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub merged_before: Option<String>,
}

/// A required premise unsupported somewhere in an assurance's settled part.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UnsupportedPremise {
    /// The premise.
    pub premise: String,
    /// Its route, for a per-route premise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub route: Option<String>,
    /// `failed` or `unattested`.
    pub state: PremiseState,
}

impl Live {
    /// Applies a new attestation of property `p` (`keyed`: it has an emitter and seq).
    pub(super) fn push_attestation(
        &mut self,
        p: usize,
        rec: &Rec,
        ev: &Event<'_>,
        keyed: bool,
        span: Option<&SpanId>,
    ) {
        // Delivered as a span without an (emitter, seq): kept by its span id instead.
        let by_span = span.filter(|_| !keyed);
        let pc = &self.contract.properties[p];
        let Some(i) = pc.premise_index(ev.premise.unwrap_or_default(), ev.route) else {
            self.state.props[p].tally.attestations_ignored += 1;
            if keyed {
                self.note_applied(rec, IGNORED, Reasons::EMPTY);
            }
            if let Some(id) = by_span {
                self.state.props[p].span_attests.insert(*id, (rec.ts, None));
            }
            return;
        };
        let a = Attestation::new(
            ev.ts.0,
            ev.valid_for.map(|d| d.0),
            pc.premises[i].max_age.0,
            ev.outcome == Outcome::Failed,
        );
        let last = Last::new(a, ev.attester, ev.evidence);
        self.change_support(p, i, |s| {
            s.insert(a);
            s.note_last(last);
            s.cap(MAX_ATTESTATIONS);
        });
        if keyed {
            let kept = &mut self.state.props[p].keyed_attests;
            kept.insert((rec.emitter, rec.seq), (i as u16, a));
            self.note_applied(rec, ATTESTED, Reasons::EMPTY);
        }
        if let Some(id) = by_span {
            let kept = &mut self.state.props[p].span_attests;
            kept.insert(*id, (rec.ts, Some((i as u16, a))));
        }
    }

    /// Takes back the applied attestation of property `p` delivered as span `id` without an
    /// (emitter, seq) (its support, or its count as ignored): a conflicting delivery of the
    /// span arrived.
    pub(super) fn take_back_span_attestation(&mut self, p: usize, id: &SpanId) {
        match self.state.props[p].span_attests.remove(id) {
            Some((_, Some((i, a)))) => self.change_support(p, usize::from(i), |s| {
                s.remove(a);
            }),
            Some((_, None)) => self.uncount_ignored(p),
            None => {}
        }
    }

    /// Uncounts the ignored attestation of a key a conflicting delivery arrived for.
    pub(super) fn uncount_ignored(&mut self, p: usize) {
        let t = &mut self.state.props[p].tally;
        t.attestations_ignored = t.attestations_ignored.saturating_sub(1);
    }

    /// Takes back the applied attestation of (emitter, seq): a conflicting delivery of its key
    /// arrived (SPEC §4 "Duplicates": all of them are set aside).
    pub(super) fn take_back_attestation(&mut self, p: usize, emitter: u32, seq: u64) {
        if let Some((i, a)) = self.state.props[p].keyed_attests.remove(&(emitter, seq)) {
            self.change_support(p, usize::from(i), |s| {
                s.remove(a);
            });
        }
    }

    /// Changes premise `i`'s support of property `p` with `f`, marking `revised` the final
    /// windows whose premise reason changed.
    fn change_support(&mut self, p: usize, i: usize, f: impl FnOnce(&mut Support)) {
        let wm = self.partition_watermark(p).0;
        let t = &mut self.state.props[p].tally;
        let before = t.premises[i].regions();
        f(&mut t.premises[i]);
        let after = t.premises[i].regions();
        let Some((first, last)) = t.series.range() else {
            return;
        };
        if before == after || wm == i64::MIN {
            return;
        }
        let w = t.series.width();
        let last_final = last.min(wm.div_euclid(w).saturating_sub(1));
        let place = |r: &Regions| r.window_reasons(w, first, last_final);
        for (a, b) in premise::changed_windows(&place(&before), &place(&after)) {
            t.series.mark_revised(a, b);
        }
    }
}

impl<'a> View<'a> {
    /// The support of each required premise of property `p`, merged over the partitions.
    // A `Cow` of the tally's own `Vec`, as `View::merged` hands out.
    #[allow(clippy::owned_cow)]
    pub(super) fn supports(&self, p: usize) -> Cow<'a, Vec<Support>> {
        let n = self.contract().properties[p].premises.len();
        self.merged(
            |s| &s.tally(p).premises,
            |a: &mut Vec<Support>, b: &Vec<Support>| {
                for (x, y) in a.iter_mut().zip(b) {
                    x.merge(y);
                    x.cap(MAX_ATTESTATIONS);
                }
            },
            || vec![Support::new(); n],
        )
    }

    /// Attestations of property `p` naming a premise or route it does not require, over all
    /// partitions (`fencewatch_attestations_ignored_total`).
    pub fn attestations_ignored(&self, p: usize) -> u64 {
        self.tallies(p).map(|t| t.attestations_ignored).sum()
    }

    /// Each required premise's placement on property `p`'s windows `first..=last`.
    pub(super) fn premise_windows(&self, p: usize, first: i64, last: i64) -> Vec<WindowReasons> {
        let w = self.contract().properties[p].window.0;
        self.supports(p)
            .iter()
            .map(|s| s.regions().window_reasons(w, first, last))
            .collect()
    }

    /// Where each required premise of property `p` raises a reason on its windows
    /// `first..=last` (merged over the partitions): what the evidence archive compares to find
    /// the final windows a late attestation revised ([`premise::changed_windows`]).
    pub fn premise_placement(&self, p: usize, first: i64, last: i64) -> Vec<WindowReasons> {
        self.premise_windows(p, first, last)
    }

    /// The premise reasons of property `p` as spans over its windows (for the timeline).
    pub(super) fn premise_spans(&self, p: usize, first: i64, last: i64) -> Vec<Span> {
        let mut out = Vec::new();
        for w in self.premise_windows(p, first, last) {
            for (spans, reason) in [
                (&w.failed, Reason::PremiseFailed),
                (&w.unattested, Reason::PremiseUnattested),
            ] {
                out.extend(spans.iter().map(|&(from, to)| Span { from, to, reason }));
            }
        }
        out
    }

    /// The required premises of property `p` unsupported anywhere in `(lo, hi]`.
    pub(super) fn unsupported_premises(
        &self,
        p: usize,
        lo: i64,
        hi: i64,
    ) -> Vec<UnsupportedPremise> {
        let pc = &self.contract().properties[p];
        let mut out = Vec::new();
        for (decl, s) in pc.premises.iter().zip(self.supports(p).iter()) {
            let state = s.regions().over(lo.saturating_add(1), hi.saturating_add(1));
            if state != PremiseState::Supported {
                out.push(UnsupportedPremise {
                    premise: decl.name.clone(),
                    route: decl.route.clone(),
                    state,
                });
            }
        }
        out
    }

    /// Each required premise of property `p` at time `at` (ns): its state, until when it is
    /// supported, its latest attestation and its intervals (SPEC §10, `GET /v1/premises`).
    pub fn premises(&self, p: usize, at: i64) -> Vec<PremiseView> {
        let pc = &self.contract().properties[p];
        let series = self.series(p);
        let supports = self.supports(p);
        pc.premises
            .iter()
            .zip(supports.iter())
            .map(|(decl, s)| {
                let regions = s.regions();
                let windows = match series.range() {
                    Some((first, last)) => regions.window_reasons(series.width(), first, last),
                    None => WindowReasons::default(),
                };
                let (state, until) = regions.at(at);
                PremiseView {
                    property: pc.name.clone(),
                    premise: premise::report(decl, s, &regions, &windows),
                    state,
                    at: EventTime(at).to_string(),
                    supported_until: until
                        .filter(|&e| e != i64::MAX)
                        .map(|e| EventTime(e).to_string()),
                    supported_until_ns: until,
                    merged_before: s.floor().map(|f| EventTime(f).to_string()),
                }
            })
            .collect()
    }
}
