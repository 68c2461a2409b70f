//! The end of `finish`: malformed events and route silence placed in windows, and each
//! property's report.

use super::acc::Acc;
use super::state::{History, MAX_LISTED_WINDOWS};
use crate::finding::{Reason, Verdict};
use crate::report::{PropertyReport, RouteCoverage, Sample, UndeclaredRoute};
use crate::rules;
use crate::scope;
use crate::time::EventTime;
use std::collections::BTreeMap;

impl History {
    pub(super) fn place_malformed(&self, accs: &mut [Acc]) {
        for m in &self.malformed {
            for acc in accs.iter_mut() {
                acc.counts[Reason::MalformedEvent as usize] += 1;
                rules::place_malformed(&mut acc.series, m.ts, m.prior);
            }
        }
        if let Some(first) = self.malformed_samples.first() {
            for acc in accs.iter_mut() {
                acc.samples
                    .entry(Reason::MalformedEvent)
                    .or_default()
                    .push(((0, 0), first.clone()));
            }
        }
    }

    pub(super) fn conclude(&self, accs: Vec<Acc>) -> Vec<PropertyReport> {
        self.contract
            .properties
            .iter()
            .zip(accs)
            .map(|(prop, mut acc)| {
                let mut routes = Vec::with_capacity(prop.routes.len());
                let range = acc.series.range();
                let freshness = prop.route_freshness.0;
                acc.compact_routes(freshness);
                for (i, route) in prop.routes.iter().enumerate() {
                    let runs = std::mem::take(&mut acc.route_runs[i]);
                    let count: u64 = runs.iter().map(|r| r.n).sum();
                    let last_seen = runs.last().map(|r| r.to);
                    let silent = match range {
                        Some((first, last)) => {
                            let ends: Vec<(i64, i64)> =
                                runs.iter().map(|r| (r.from, r.to)).collect();
                            let spans = scope::silent_windows_of_runs(
                                &ends,
                                freshness,
                                acc.series.width(),
                                first,
                                last,
                            );
                            let n: i64 = spans.iter().map(|(a, b)| b - a + 1).sum();
                            for &(a, b) in &spans {
                                acc.series.add_span(a, b, Reason::RouteSilent);
                            }
                            n as u64
                        }
                        None => 1,
                    };
                    if silent > 0 {
                        let detail = match last_seen {
                            Some(t) => format!(
                                "route `{}` silent in {silent} window(s); last observed {}",
                                route.name,
                                EventTime(t)
                            ),
                            None => format!("route `{}` was never observed", route.name),
                        };
                        acc.hit(Reason::RouteSilent, silent, (u32::MAX, i as u64), || {
                            Sample {
                                source: "contract".into(),
                                ts: None,
                                detail,
                            }
                        });
                    }
                    routes.push(RouteCoverage {
                        name: route.name.clone(),
                        fenced: route.fenced,
                        observations: count,
                        last_seen: last_seen.map(|t| EventTime(t).to_string()),
                        silent_windows: silent,
                    });
                }
                acc.cxs.sort_by(|a, b| (a.at, &a.id).cmp(&(b.at, &b.id)));
                let unknown: BTreeMap<Reason, u64> = Reason::ALL
                    .iter()
                    .filter(|&&r| acc.counts[r as usize] > 0)
                    .map(|&r| (r, acc.counts[r as usize]))
                    .collect();
                let verdict = if !acc.cxs.is_empty() {
                    Verdict::Refuted
                } else if !unknown.is_empty() {
                    Verdict::Unknown
                } else {
                    Verdict::Holds
                };
                PropertyReport {
                    property: prop.name.clone(),
                    verdict,
                    counterexamples: acc.cxs,
                    unknown,
                    unknown_samples: acc
                        .samples
                        .into_iter()
                        .map(|(r, v)| (r, v.into_iter().map(|(_, s)| s).collect()))
                        .collect(),
                    events: acc.events,
                    stale_rejections: acc.stale_rejections,
                    routes,
                    undeclared_routes: acc
                        .undeclared
                        .iter()
                        .map(|(&id, &n)| UndeclaredRoute {
                            name: self.strings.resolve(id).to_string(),
                            events: n,
                        })
                        .collect(),
                    windows: acc.series.timeline(EventTime::MAX, MAX_LISTED_WINDOWS),
                    premises: Vec::new(),
                }
            })
            .collect()
    }
}
