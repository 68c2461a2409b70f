//! Queries over the live state: assurance at a time, the timeline, counterexamples, coverage
//! and one scope's history (SPEC §6 HTTP API). Everything that depends on the whole history
//! (route silence, telemetry gaps) is derived here from compact state.

use super::{Cx, Live, Obs, Run};
use crate::finding::{Counterexample, Reason, Verdict};
use crate::report::{EmitterReport, Sample};
use crate::scope;
use crate::time::{Duration, EventTime};
use crate::window::{WindowRun, WindowSeries};
use serde::Serialize;
use std::collections::BTreeMap;

/// The verdict of one property at a time over a trailing window (SPEC §4 "Assessment at a
/// time").
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Assurance {
    /// The property.
    pub property: String,
    /// refuted, unknown or holds.
    pub verdict: Verdict,
    /// Whether `at` is at or before the watermark (the verdict will not change).
    #[serde(rename = "final")]
    pub is_final: bool,
    /// The time assessed.
    pub at: String,
    /// The trailing window.
    pub window: String,
    /// Start of the trailing window (exclusive).
    pub from: String,
    /// The evidence watermark, if any event arrived.
    pub watermark: Option<String>,
    /// Wall time minus watermark, in seconds.
    pub lag_seconds: Option<f64>,
    /// Whether the wall clock ran more than `route_freshness` ahead of the watermark.
    pub stale_evidence: bool,
    /// Counterexamples whose stale event lies in the window (first 100 by time).
    pub counterexamples: Vec<String>,
    /// How many counterexamples lie in the window.
    pub counterexample_count: u64,
    /// Unknown reasons in the settled part, with counts.
    pub unknown: BTreeMap<Reason, u64>,
    /// Routes silent at the end of the settled part.
    pub silent_routes: Vec<String>,
    /// Whether the settled part `(at - window, min(at, watermark)]` is empty.
    pub settled_empty: bool,
}

/// One page of counterexamples.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CxPage {
    /// The counterexamples, by stale event time then id.
    pub counterexamples: Vec<Counterexample>,
    /// Pass as `cursor` for the next page; absent on the last page.
    pub next_cursor: Option<String>,
}

/// One declared route's coverage.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RouteState {
    /// The route.
    pub name: String,
    /// Declared `fenced`.
    pub fenced: bool,
    /// Observations (commit/fence of either outcome, heartbeats).
    pub observations: u64,
    /// The latest observation.
    pub last_seen: Option<String>,
    /// Latest observation, ns.
    #[serde(skip)]
    pub last_seen_ns: Option<i64>,
    /// Whether it is silent at the watermark.
    pub silent: bool,
}

/// One emitter's telemetry.
pub type EmitterCoverage = EmitterReport;

/// Routes, undeclared routes and emitters of one property.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Coverage {
    /// The property.
    pub property: String,
    /// Declared routes.
    pub routes: Vec<RouteState>,
    /// Routes seen on commits/fences that the contract lacks, with counts.
    pub undeclared_routes: BTreeMap<String, u64>,
    /// Emitters that fed the property.
    pub emitters: Vec<EmitterCoverage>,
}

/// One scope's resident history and findings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ScopeView {
    /// The property.
    pub property: String,
    /// The scope.
    pub scope: String,
    /// Events still inside the horizon, by time.
    pub events: Vec<crate::finding::EventView>,
    /// The folded high-water mark: highest (incarnation, epoch) and its earliest time.
    pub high_water: Option<HighWater>,
    /// Counterexamples of this scope.
    pub counterexamples: Vec<Counterexample>,
}

/// A folded high-water mark as shown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HighWater {
    /// Incarnation.
    pub incarnation: u64,
    /// Epoch.
    pub epoch: u64,
    /// Earliest time of that epoch.
    pub first: String,
}

/// Counterexamples listed in an assurance answer.
const ASSURANCE_CX_LIST: usize = 100;

impl Live {
    /// Reason counts and the verdict of a property over its whole history (like `check`, but
    /// with the live watermark): for the overview and metrics.
    pub fn unknown_counts(&self, p: usize) -> BTreeMap<Reason, u64> {
        let prop = &self.state.props[p];
        let mut counts = prop.counts;
        counts[Reason::TelemetryGap as usize] += self.gaps(p).len() as u64;
        let mut silent = 0u64;
        if let Some((first, last)) = prop.series.range() {
            let last = self.last_decided_window(p, last);
            for i in 0..prop.routes.len() {
                silent += self
                    .silent_spans(p, i, first, last)
                    .iter()
                    .map(|(a, b)| (b - a + 1) as u64)
                    .sum::<u64>();
            }
        } else {
            silent = prop.routes.len() as u64;
        }
        counts[Reason::RouteSilent as usize] += silent;
        Reason::ALL
            .iter()
            .filter(|&&r| counts[r as usize] > 0)
            .map(|&r| (r, counts[r as usize]))
            .collect()
    }

    /// Samples of unknown reasons of a property (the first few of each).
    pub fn samples(&self, p: usize) -> BTreeMap<Reason, Vec<Sample>> {
        self.state.props[p]
            .samples
            .iter()
            .map(|(r, v)| (*r, v.iter().map(|k| k.sample()).collect()))
            .collect()
    }

    /// Counterexamples of a property so far.
    pub fn counterexample_count(&self, p: usize) -> usize {
        self.state.props[p].cxs.len()
    }

    /// The most recent malformed events.
    pub fn malformed_samples(&self) -> Vec<Sample> {
        self.state
            .malformed_samples
            .iter()
            .map(|k| k.sample())
            .collect()
    }

    /// The message of the last malformed event.
    pub fn last_malformed(&self) -> Option<&str> {
        self.state
            .malformed_samples
            .back()
            .map(|k| k.detail.as_str())
    }

    /// The last window whose silence can be decided: its end at or before the watermark.
    fn last_decided_window(&self, p: usize, last: i64) -> i64 {
        let prop = &self.state.props[p];
        let wm = self.watermark(p).0;
        let w = prop.series.width();
        last.min(wm.div_euclid(w) - 1)
    }

    /// Sorted observation bounds of route `i` (per window min and max: enough for silence).
    fn observation_bounds(&self, p: usize, i: usize, from: i64, to: i64) -> Vec<i64> {
        let mut obs = Vec::new();
        for o in self.state.props[p].routes[i]
            .range(from..=to)
            .map(|(_, o)| o)
        {
            obs.push(o.min);
            if o.max != o.min {
                obs.push(o.max);
            }
        }
        obs
    }

    /// Silent window spans of route `i` within windows `first..=last`.
    fn silent_spans(&self, p: usize, i: usize, first: i64, last: i64) -> Vec<(i64, i64)> {
        if first > last {
            return Vec::new();
        }
        let prop = &self.state.props[p];
        let f = self.contract.properties[p].route_freshness.0;
        let w = prop.series.width();
        // Observations that can end a silence inside the range start `freshness` before it.
        let from = prop
            .series
            .index(prop.series.start_of(first).saturating_sub(f));
        let obs = self.observation_bounds(p, i, from, last);
        scope::silent_windows(&obs, f, w, first, last)
    }

    /// Whether route `i` had no observation in `(t - freshness, t]`.
    fn silent_at(&self, p: usize, i: usize, t: i64) -> bool {
        let prop = &self.state.props[p];
        let f = self.contract.properties[p].route_freshness.0;
        let lo = t.saturating_sub(f);
        let observed = |o: &Obs| (o.min > lo && o.min <= t) || (o.max > lo && o.max <= t);
        !prop.routes[i]
            .range(prop.series.index(lo)..=prop.series.index(t))
            .any(|(_, o)| observed(o))
    }

    /// Telemetry gaps of emitters that fed property `p`: (from ts, to ts, missing seqs).
    fn gaps(&self, p: usize) -> Vec<(i64, i64, u64)> {
        let mut out = Vec::new();
        for e in self.state.emitters.values() {
            if !e.props.contains(&(p as u16)) {
                continue;
            }
            let runs: Vec<(&u64, &Run)> = e.runs.iter().collect();
            for pair in runs.windows(2) {
                let (_, a) = pair[0];
                let (&b_start, b) = pair[1];
                out.push((a.end_ts, b.start_ts, b_start - a.end - 1));
            }
        }
        out
    }

    /// The assessment of property `p` at `at` over the trailing `window` (ns), at wall time
    /// `wall` (ns).
    pub fn assurance(&self, p: usize, at: i64, window: i64, wall: i64) -> Assurance {
        let prop = &self.state.props[p];
        let pc = &self.contract.properties[p];
        let wm = self.watermark(p);
        let lo = at.saturating_sub(window);
        let in_window: Vec<&Cx> = prop
            .cxs
            .range((lo.saturating_add(1), String::new())..)
            .take_while(|((t, _), _)| *t <= at)
            .map(|(_, c)| c)
            .collect();
        let has_events = prop.series.range().is_some();
        let stale_evidence =
            wm == EventTime::MIN || wall.saturating_sub(wm.0) > pc.route_freshness.0;
        let hi = at.min(wm.0);
        let settled_empty = wm == EventTime::MIN || hi <= lo || !has_events;
        let mut unknown: BTreeMap<Reason, u64> = BTreeMap::new();
        let mut silent_routes = Vec::new();
        if !settled_empty {
            let s = &prop.series;
            let (k0, k1) = (s.index(lo.saturating_add(1)), s.index(hi));
            let mut add = |r: Reason, n: u64| {
                if n > 0 {
                    *unknown.entry(r).or_default() += n;
                }
            };
            let points = s.points_between(k0, k1);
            for r in Reason::ALL {
                add(r, points.unknown[r as usize]);
            }
            for sp in s.spans() {
                if sp.from <= k1 && sp.to >= k0 {
                    add(sp.reason, 1);
                }
            }
            for (a, b, _) in self.gaps(p) {
                if s.index(a.min(b)) <= k1 && s.index(a.max(b)) >= k0 {
                    add(Reason::TelemetryGap, 1);
                }
            }
            let (first, last) = prop.series.range().expect("has events");
            let decided = self.last_decided_window(p, last).min(k1);
            for (i, r) in pc.routes.iter().enumerate() {
                let spans = self.silent_spans(p, i, k0.max(first), decided);
                let n: i64 = spans.iter().map(|(a, b)| b - a + 1).sum();
                let now = self.silent_at(p, i, hi);
                if n > 0 || now {
                    add(Reason::RouteSilent, n.max(1) as u64);
                }
                if now {
                    silent_routes.push(r.name.clone());
                }
            }
        }
        if stale_evidence {
            *unknown.entry(Reason::StaleEvidence).or_default() += 1;
        }
        let verdict = if !in_window.is_empty() {
            Verdict::Refuted
        } else if settled_empty || !unknown.is_empty() {
            Verdict::Unknown
        } else {
            Verdict::Holds
        };
        Assurance {
            property: pc.name.clone(),
            verdict,
            is_final: at <= wm.0,
            at: EventTime(at).to_string(),
            window: Duration(window).to_string(),
            from: EventTime(lo).to_string(),
            watermark: (wm != EventTime::MIN).then(|| wm.to_string()),
            lag_seconds: (wm != EventTime::MIN).then(|| wall.saturating_sub(wm.0) as f64 / 1e9),
            stale_evidence,
            counterexamples: in_window
                .iter()
                .take(ASSURANCE_CX_LIST)
                .map(|c| c.id.clone())
                .collect(),
            counterexample_count: in_window.len() as u64,
            unknown,
            silent_routes,
            settled_empty,
        }
    }

    /// The window series of property `p` with derived reasons (route silence up to the
    /// watermark, telemetry gaps), as runs, restricted to windows intersecting `[from, to)`.
    pub fn timeline(&self, p: usize, from: i64, to: i64, max_windows: u64) -> Vec<WindowRun> {
        let prop = &self.state.props[p];
        let mut series: WindowSeries = prop.series.clone();
        if let Some((first, last)) = series.range() {
            let decided = self.last_decided_window(p, last);
            for i in 0..prop.routes.len() {
                for (a, b) in self.silent_spans(p, i, first, decided) {
                    series.add_span(a, b, Reason::RouteSilent);
                }
            }
            for (a, b, _) in self.gaps(p) {
                series.add_time_span(a, b, Reason::TelemetryGap);
            }
        }
        let wm = self.watermark(p);
        // Bounded: beyond `max_windows` windows in the series' range, equal neighbours come as
        // runs (cut only where summaries or spans change), never one entry per window.
        let mut runs = series.timeline(wm, max_windows);
        runs.retain(|r| {
            let end = r
                .start_ns
                .saturating_add(series.width().saturating_mul(r.windows as i64));
            end > from && r.start_ns < to
        });
        if runs.len() as u64 > max_windows {
            // Merge equal neighbours to stay within the limit.
            let mut merged: Vec<WindowRun> = Vec::new();
            for r in runs {
                match merged.last_mut() {
                    Some(m)
                        if m.verdict == r.verdict
                            && m.is_final == r.is_final
                            && !m.revised
                            && !r.revised =>
                    {
                        m.windows += r.windows;
                        m.end = r.end;
                    }
                    _ => merged.push(r),
                }
            }
            runs = merged;
        }
        runs
    }

    /// Counterexamples of property `p` (every property when `None`), optionally of one scope
    /// and with stale event time in `[from, to)`, after `cursor`, at most `limit`.
    pub fn counterexamples(
        &self,
        p: Option<usize>,
        scope: Option<&str>,
        from: Option<i64>,
        to: Option<i64>,
        cursor: Option<(i64, &str)>,
        limit: usize,
    ) -> CxPage {
        let mut all: Vec<(usize, &(i64, String), &Cx)> = Vec::new();
        for (i, prop) in self.state.props.iter().enumerate() {
            if p.is_some_and(|p| p != i) {
                continue;
            }
            let start = match cursor {
                Some((t, id)) => std::ops::Bound::Excluded((t, id.to_string())),
                None => std::ops::Bound::Included((from.unwrap_or(i64::MIN), String::new())),
            };
            for (k, c) in prop.cxs.range((start, std::ops::Bound::Unbounded)) {
                if to.is_some_and(|to| k.0 >= to) {
                    break;
                }
                if from.is_some_and(|f| k.0 < f) || scope.is_some_and(|s| s != c.scope) {
                    continue;
                }
                all.push((i, k, c));
                if all.len() > limit * (i + 1) {
                    break;
                }
            }
        }
        all.sort_by(|a, b| (a.1, a.0).cmp(&(b.1, b.0)));
        let next_cursor = (all.len() > limit).then(|| {
            let k = all[limit - 1].1;
            format!("{}.{}", k.0, k.1)
        });
        all.truncate(limit);
        CxPage {
            counterexamples: all.iter().map(|(i, _, c)| self.render(*i, c)).collect(),
            next_cursor,
        }
    }

    /// One counterexample by id.
    pub fn counterexample(&self, id: &str) -> Option<Counterexample> {
        self.state.props.iter().enumerate().find_map(|(i, prop)| {
            prop.cxs
                .values()
                .find(|c| c.id == id)
                .map(|c| self.render(i, c))
        })
    }

    /// Routes, undeclared routes and emitters of property `p`.
    pub fn coverage(&self, p: usize) -> Coverage {
        let prop = &self.state.props[p];
        let pc = &self.contract.properties[p];
        let wm = self.watermark(p).0;
        let routes = pc
            .routes
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let obs = &prop.routes[i];
                let last = obs.values().map(|o| o.max).max();
                RouteState {
                    name: r.name.clone(),
                    fenced: r.fenced,
                    observations: obs.values().map(|o| o.count).sum(),
                    last_seen: last.map(|t| EventTime(t).to_string()),
                    last_seen_ns: last,
                    silent: wm == i64::MIN || self.silent_at(p, i, wm),
                }
            })
            .collect();
        let mut emitters: Vec<EmitterCoverage> = self
            .state
            .emitters
            .iter()
            .filter(|(_, e)| e.props.contains(&(p as u16)))
            .map(|(&id, e)| {
                let first = e.runs.keys().next().copied().unwrap_or(0);
                let last = e.runs.values().map(|r| r.end).max().unwrap_or(0);
                let present: u64 = e
                    .runs
                    .iter()
                    .map(|(s, r)| (r.end - s).saturating_add(1))
                    .fold(0u64, u64::saturating_add);
                EmitterReport {
                    emitter: self.state.names[id as usize].clone(),
                    events: e.events,
                    first_seq: first,
                    last_seq: last,
                    gaps: e.runs.len().saturating_sub(1) as u64,
                    missing: (last - first).saturating_add(1).saturating_sub(present),
                }
            })
            .collect();
        emitters.sort_by(|a, b| a.emitter.cmp(&b.emitter));
        Coverage {
            property: pc.name.clone(),
            routes,
            undeclared_routes: prop
                .undeclared
                .iter()
                .map(|(&id, &n)| (self.state.names[id as usize].clone(), n))
                .collect(),
            emitters,
        }
    }

    /// The resident history of one scope of property `p`.
    pub fn scope(&self, p: usize, scope: &str) -> Option<ScopeView> {
        let prop = &self.state.props[p];
        let st = prop.scopes.get(scope);
        let cxs: Vec<Counterexample> = prop
            .cxs
            .values()
            .filter(|c| c.scope == scope)
            .map(|c| self.render(p, c))
            .collect();
        if st.is_none() && cxs.is_empty() {
            return None;
        }
        let mut events: Vec<_> = st.map(|s| s.events().to_vec()).unwrap_or_default();
        events.sort_by_key(|e| (e.ts, e.source, e.position));
        Some(ScopeView {
            property: self.contract.properties[p].name.clone(),
            scope: scope.to_string(),
            events: events.iter().map(|e| self.view(e)).collect(),
            high_water: st.and_then(|s| s.tracker.high_water()).map(|m| HighWater {
                incarnation: m.incarnation,
                epoch: m.epoch,
                first: EventTime(m.first).to_string(),
            }),
            counterexamples: cxs,
        })
    }

    /// Events assessed per property.
    pub fn property_events(&self, p: usize) -> u64 {
        self.state.props[p].events
    }

    /// Stale rejections (rejected commits/fences: the fence worked) per property.
    pub fn stale_rejections(&self, p: usize) -> u64 {
        self.state.props[p].stale_rejections
    }
}
