//! Premises in `check` (SPEC §10): attestations are kept beside the records (they take part in
//! duplicate settlement and seq tracking like any event, but extend no window and move no
//! watermark), and at the end each required premise's support is computed from its live
//! attestations and placed on the property's windows as at most one reason per window.

use super::acc::Acc;
use super::state::History;
use crate::finding::Reason;
use crate::premise::{self, Attestation, Last, Support};
use crate::report::{Conformance, PremiseReport, Sample};
use crate::rules::{HAS_EPOCH, HAS_ORDER, NONE, REJECTED, Rec, UNATTRIBUTED};

/// An `order` as an `i64` of the same rank (u64 order preserved).
fn rank(order: u64) -> i64 {
    (order as i64) ^ i64::MIN
}

impl History {
    /// What a conformance run exercised (SPEC §10): per property and declared route, the
    /// rejected commits/fences that certainly follow (§4) a committed higher epoch of their
    /// scope and incarnation. One sort of the scoped mutations by (property, scope,
    /// incarnation), then per group the highest committed epoch before each rejection, by
    /// `order` where both have one, else by time beyond the clock skew.
    pub(super) fn exercised(&self) -> Conformance {
        let props = &self.contract.properties;
        let mut out = Conformance {
            last_event_time: self.tally.max_valid_ts,
            fenced_rejections: props.iter().map(|p| vec![0; p.routes.len()]).collect(),
        };
        for (idx, _) in &self.attests {
            let t = self.recs[*idx as usize].ts;
            out.last_event_time = Some(out.last_event_time.map_or(t, |m| m.max(t)));
        }
        let recs = &self.recs;
        let scopes = &self.scopes;
        let mut idx: Vec<u32> = (0..recs.len() as u32)
            .filter(|&i| {
                let r = &recs[i as usize];
                r.prop != UNATTRIBUTED
                    && r.applied()
                    && r.kind.is_mutation()
                    && r.has_scope()
                    && r.has(HAS_EPOCH)
            })
            .collect();
        if !idx.iter().any(|&i| recs[i as usize].has(REJECTED)) {
            return out;
        }
        let key = |r: &Rec| (r.prop, scopes.hash(r.scope), r.inc);
        idx.sort_unstable_by_key(|&i| key(&recs[i as usize]));
        for group in idx.chunk_by(|&a, &b| key(&recs[a as usize]) == key(&recs[b as usize])) {
            let first = &recs[group[0] as usize];
            let prop = &props[first.prop as usize];
            let skew = prop.clock_skew.0;
            // Committed: (ts, epoch) of all, and (order, epoch) of those with an order; each
            // sorted with the running maximum epoch.
            let running = |mut v: Vec<(i64, u64)>| {
                v.sort_unstable();
                let mut m = 0;
                for x in &mut v {
                    m = m.max(x.1);
                    x.1 = m;
                }
                v
            };
            let committed = |ordered: Option<bool>| {
                running(
                    group
                        .iter()
                        .map(|&i| &recs[i as usize])
                        .filter(|r| !r.has(REJECTED))
                        .filter(|r| ordered.is_none_or(|o| r.has(HAS_ORDER) == o))
                        .map(|r| {
                            let at = if ordered == Some(true) {
                                rank(r.order)
                            } else {
                                r.ts
                            };
                            (at, r.epoch)
                        })
                        .collect(),
                )
            };
            let (all, by_order, unordered) = (
                committed(None),
                committed(Some(true)),
                committed(Some(false)),
            );
            // The highest epoch among entries strictly before `at`.
            let below = |v: &[(i64, u64)], at: i64| {
                let n = v.partition_point(|x| x.0 < at);
                n.checked_sub(1).map(|k| v[k].1)
            };
            for &i in group {
                let r = &recs[i as usize];
                if !r.has(REJECTED) || r.route == NONE {
                    continue;
                }
                let higher = if r.has(HAS_ORDER) {
                    below(&by_order, rank(r.order))
                        .max(below(&unordered, r.ts.saturating_sub(skew)))
                } else {
                    below(&all, r.ts.saturating_sub(skew))
                };
                if higher.is_some_and(|e| e > r.epoch)
                    && let Some(k) = prop.route_index(self.strings.resolve(r.route))
                {
                    out.fenced_rejections[r.prop as usize][k] += 1;
                }
            }
        }
        out
    }

    /// Places every required premise's reasons on its property's windows; returns the
    /// attestations ignored (naming no required premise or route) and, per property, its
    /// premises' reports.
    pub(super) fn assess_premises(&self, accs: &mut [Acc]) -> (u64, Vec<Vec<PremiseReport>>) {
        let props = &self.contract.properties;
        let mut per: Vec<Vec<(Vec<Attestation>, Option<Last>)>> = props
            .iter()
            .map(|p| vec![(Vec::new(), None); p.premises.len()])
            .collect();
        let mut ignored = 0;
        for (idx, a) in &self.attests {
            let r = &self.recs[*idx as usize];
            if r.prop == UNATTRIBUTED || !r.applied() {
                continue;
            }
            let prop = &props[r.prop as usize];
            let route = (r.route != NONE).then(|| self.strings.resolve(r.route));
            let Some(i) = prop.premise_index(&a.premise, route) else {
                ignored += 1;
                continue;
            };
            let at = Attestation::new(r.ts, a.valid_for, prop.premises[i].max_age.0, a.failed);
            let (list, last) = &mut per[r.prop as usize][i];
            list.push(at);
            let l = Last::new(at, a.attester.as_deref(), a.evidence.as_deref());
            if last.as_ref().is_none_or(|x| l > *x) {
                *last = Some(l);
            }
        }
        let mut reports = Vec::with_capacity(props.len());
        for ((prop, acc), lists) in props.iter().zip(accs.iter_mut()).zip(per) {
            let mut out = Vec::with_capacity(lists.len());
            for (decl, (list, last)) in prop.premises.iter().zip(lists) {
                let mut support = Support::from_attestations(list);
                if let Some(l) = last {
                    support.note_last(l);
                }
                let regions = support.regions();
                let windows = match acc.series.range() {
                    Some((first, last)) => regions.window_reasons(acc.series.width(), first, last),
                    None => Default::default(),
                };
                let (failed, unattested) = windows.counts();
                for (spans, reason, n) in [
                    (&windows.failed, Reason::PremiseFailed, failed),
                    (&windows.unattested, Reason::PremiseUnattested, unattested),
                ] {
                    if n == 0 {
                        continue;
                    }
                    for &(a, b) in spans {
                        acc.series.add_span(a, b, reason);
                    }
                    let detail = premise::describe(decl, reason, n, support.last());
                    acc.hit(
                        reason,
                        n,
                        (u32::MAX, u64::from(u32::MAX) + out.len() as u64),
                        || Sample {
                            source: "contract".into(),
                            ts: None,
                            detail,
                        },
                    );
                }
                out.push(premise::report(decl, &support, &regions, &windows));
            }
            reports.push(out);
        }
        (ignored, reports)
    }
}
