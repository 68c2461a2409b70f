//! Queries over the live state: assurance at a time, the timeline, counterexamples, coverage
//! and one scope's history (SPEC §6 HTTP API), answered by a [`View`] over one or more
//! partitions. Everything that depends on the whole history (route silence, telemetry gaps) is
//! derived here, after the merge, from compact state.

use super::parts::{CxRef, EmitterRef};
use super::premises::{PremiseState, UnsupportedPremise};
use super::state::{CxKey, Live};
use super::tally::Obs;
use super::view::View;
use crate::finding::{Counterexample, Reason, Verdict};
use crate::report::EmitterReport;
use crate::scope;
use crate::time::{Duration, EventTime};
use crate::window::{Span, WindowDetail, WindowRun};
use serde::Serialize;
use std::collections::BTreeMap;
use std::ops::Bound;

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
    /// Counterexamples whose stale event lies in the window (first 100 by time), withdrawn
    /// ones left out.
    pub counterexamples: Vec<String>,
    /// How many counterexamples lie in the window (by their stale event: a window an epoch
    /// reuse's former representative keeps refuted makes the verdict `refuted`, not this).
    pub counterexample_count: u64,
    /// Unknown reasons in the settled part, with counts.
    pub unknown: BTreeMap<Reason, u64>,
    /// Routes silent at the end of the settled part.
    pub silent_routes: Vec<String>,
    /// Whether the settled part `(at - window, min(at, watermark)]` is empty.
    pub settled_empty: bool,
    /// Required premises unsupported somewhere in the settled part (SPEC §10).
    pub unsupported_premises: Vec<UnsupportedPremise>,
}

/// One page of counterexamples.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CxPage {
    /// The counterexamples, by stale event time then id, withdrawn ones included (marked).
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
    /// Routes seen on commits/fences that the contract lacks, with counts: the first 1,000
    /// names per partition ([`super::UNDECLARED_ROUTES_KEPT`]), the others counted under
    /// `"(other undeclared routes)"` ([`super::OTHER_UNDECLARED_ROUTES`]).
    pub undeclared_routes: BTreeMap<String, u64>,
    /// Heartbeats on routes the contract lacks (their names are not kept: a heartbeat's route
    /// matters only when declared).
    pub undeclared_heartbeats: u64,
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

/// A property's windows as [`View::window_bounds`] describes them (indices are start / width).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowBounds {
    /// The first window's index.
    pub first: i64,
    /// The last window's index.
    pub last: i64,
    /// Window width, ns.
    pub width: i64,
    /// Index of the last final window (below `first` when none is).
    pub last_final: i64,
    /// Indices of the final windows late evidence revised.
    pub revised: Vec<i64>,
}

/// Counterexamples listed in an assurance answer.
const ASSURANCE_CX_LIST: usize = 100;

impl<'a> View<'a> {
    /// Reason counts of a property over its whole history (like `check`, but with the view's
    /// watermark): for the overview and metrics.
    pub fn unknown_counts(&self, p: usize) -> BTreeMap<Reason, u64> {
        let pc = &self.contract().properties[p];
        let mut counts = self.counts(p);
        counts[Reason::TelemetryGap as usize] += gaps(self.emitters(), p).len() as u64;
        let series = self.series(p);
        let mut silent = 0u64;
        if let Some((first, last)) = series.range() {
            let last = last_decided_window(series.width(), self.watermark(p).0, last);
            for i in 0..pc.routes.len() {
                let obs = self.route_obs(p, i);
                silent += silent_spans(&obs, pc.route_freshness.0, series.width(), first, last)
                    .iter()
                    .map(|(a, b)| (b - a + 1) as u64)
                    .sum::<u64>();
            }
            for w in self.premise_windows(p, first, last) {
                let (failed, unattested) = w.counts();
                counts[Reason::PremiseFailed as usize] += failed;
                counts[Reason::PremiseUnattested as usize] += unattested;
            }
        } else {
            silent = pc.routes.len() as u64;
        }
        counts[Reason::RouteSilent as usize] += silent;
        Reason::ALL
            .iter()
            .filter(|&&r| counts[r as usize] > 0)
            .map(|&r| (r, counts[r as usize]))
            .collect()
    }

    /// The assessment of property `p` at `at` over the trailing `window` (ns), at wall time
    /// `wall` (ns).
    pub fn assurance(&self, p: usize, at: i64, window: i64, wall: i64) -> Assurance {
        let pc = &self.contract().properties[p];
        let wm = self.watermark(p);
        let lo = at.saturating_sub(window);
        // Withdrawn counterexamples refute nothing (of copies in several partitions, the merge
        // keeps the most settled: filter after it).
        let mut in_window = self.cxs(
            p,
            Bound::Included((lo.saturating_add(1), String::new())),
            |t| t > at,
            |_, _| true,
            usize::MAX,
        );
        in_window.retain(|(_, c)| !c.withdrawn());
        // Final counterexamples whose detail was dropped still refute (by their times).
        let (dropped, maybe_dropped) = self.dropped_between(p, lo, at);
        let series = self.series(p);
        let has_events = series.range().is_some();
        let stale_evidence =
            wm == EventTime::MIN || wall.saturating_sub(wm.0) > pc.route_freshness.0;
        let hi = at.min(wm.0);
        let settled_empty = wm == EventTime::MIN || hi <= lo || !has_events;
        let mut unknown: BTreeMap<Reason, u64> = BTreeMap::new();
        let mut silent_routes = Vec::new();
        let mut unsupported_premises = Vec::new();
        // Counterexamples the window series places in the windows wholly inside the range:
        // an epoch reuse's former representative keeps its window refuted after a later
        // event took over (the `cxs` module), as the timeline shows it, though the
        // counterexample's stale event is now outside the range.
        let mut in_windows = 0;
        if !settled_empty {
            let s = &series;
            let (w, f) = (s.width(), pc.route_freshness.0);
            let (k0, k1) = (s.index(lo.saturating_add(1)), s.index(hi));
            let (whole0, whole1) = (
                s.index(lo.saturating_add(w)),
                s.index(hi.saturating_add(1)) - 1,
            );
            if whole0 <= whole1 {
                in_windows = s.points_between(whole0, whole1).counterexamples;
            }
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
            for (a, b, _) in gaps(self.emitters(), p) {
                if s.index(a.min(b)) <= k1 && s.index(a.max(b)) >= k0 {
                    add(Reason::TelemetryGap, 1);
                }
            }
            let (first, last) = s.range().expect("has events");
            let decided = last_decided_window(w, wm.0, last).min(k1);
            for (i, r) in pc.routes.iter().enumerate() {
                let obs = self.route_obs(p, i);
                let spans = silent_spans(&obs, f, w, k0.max(first), decided);
                let n: i64 = spans.iter().map(|(a, b)| b - a + 1).sum();
                let now = silent_at(&obs, f, w, hi);
                if n > 0 || now {
                    add(Reason::RouteSilent, n.max(1) as u64);
                }
                if now {
                    silent_routes.push(r.name.clone());
                }
            }
            for u in self.unsupported_premises(p, lo, hi) {
                add(
                    match u.state {
                        PremiseState::Failed => Reason::PremiseFailed,
                        _ => Reason::PremiseUnattested,
                    },
                    1,
                );
                unsupported_premises.push(u);
            }
        }
        if stale_evidence {
            *unknown.entry(Reason::StaleEvidence).or_default() += 1;
        }
        if maybe_dropped && in_window.is_empty() && dropped == 0 {
            // A counterexample whose detail is no longer kept may lie in the range.
            *unknown.entry(Reason::LateEvidence).or_default() += 1;
        }
        let verdict = if !in_window.is_empty() || dropped > 0 || in_windows > 0 {
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
                .map(|(_, c)| c.id().to_string())
                .collect(),
            counterexample_count: in_window.len() as u64 + dropped,
            unknown,
            silent_routes,
            settled_empty,
            unsupported_premises,
        }
    }

    /// The window series of property `p` with derived reasons (route silence up to the
    /// watermark, telemetry gaps), as runs, restricted to windows intersecting `[from, to)`.
    pub fn timeline(&self, p: usize, from: i64, to: i64, max_windows: u64) -> Vec<WindowRun> {
        let (series, extra) = self.derived(p);
        let wm = self.watermark(p);
        // Bounded: beyond `max_windows` windows in the series' range, equal neighbours come as
        // runs (cut only where summaries or spans change), never one entry per window.
        let mut runs = series.timeline_with(&extra, wm, max_windows);
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

    /// The window series of property `p` with the spans derived at query time beside it (route
    /// silence up to the watermark, telemetry gaps, unsupported premises): the series is
    /// borrowed, not copied.
    fn derived(&self, p: usize) -> (std::borrow::Cow<'a, crate::window::WindowSeries>, Vec<Span>) {
        let pc = &self.contract().properties[p];
        let series = self.series(p);
        let wm = self.watermark(p);
        let mut extra: Vec<Span> = Vec::new();
        if let Some((first, last)) = series.range() {
            let w = series.width();
            let decided = last_decided_window(w, wm.0, last);
            for i in 0..pc.routes.len() {
                let obs = self.route_obs(p, i);
                for (a, b) in silent_spans(&obs, pc.route_freshness.0, w, first, decided) {
                    extra.push(Span {
                        from: a,
                        to: b,
                        reason: Reason::RouteSilent,
                    });
                }
            }
            for (a, b, _) in gaps(self.emitters(), p) {
                extra.push(series.time_span(a, b, Reason::TelemetryGap));
            }
            extra.extend(self.premise_spans(p, first, last));
        }
        (series, extra)
    }

    /// Property `p`'s windows: their range (first and last index), width, the index of the
    /// last final one (the watermark passed its end) and those whose final verdict late
    /// evidence lowered (`revised`). `None` while it has no events.
    pub fn window_bounds(&self, p: usize) -> Option<WindowBounds> {
        let series = self.series(p);
        let (first, last) = series.range()?;
        let wm = self.watermark(p);
        let last_final = if wm == EventTime::MAX {
            last
        } else {
            // Window k is final when wm >= start of k+1: k <= wm / width - 1.
            wm.0.div_euclid(series.width()) - 1
        };
        Some(WindowBounds {
            first,
            last,
            width: series.width(),
            last_final,
            revised: series.revised().collect(),
        })
    }

    /// Each window of property `p` with index in `from..=to` (clamped to its range), in
    /// order, with its counts: derived reasons placed as in [`View::timeline`].
    pub fn windows(&self, p: usize, from: i64, to: i64, each: impl FnMut(WindowDetail)) {
        let (series, extra) = self.derived(p);
        series.details_with(&extra, self.watermark(p), from, to, each);
    }

    /// Windows `ks` (indices, ascending) of property `p` one by one, as [`View::windows`]
    /// yields them (those outside its range are left out), deriving reasons once.
    pub fn windows_at(&self, p: usize, ks: &[i64], mut each: impl FnMut(WindowDetail)) {
        let (series, extra) = self.derived(p);
        let wm = self.watermark(p);
        for &k in ks {
            series.details_with(&extra, wm, k, k, &mut each);
        }
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
        let start = match cursor {
            Some((t, id)) => Bound::Excluded((t, id.to_string())),
            None => Bound::Included((from.unwrap_or(i64::MIN), String::new())),
        };
        let mut all: Vec<(usize, &CxKey, CxRef<'_>)> = Vec::new();
        for i in 0..self.contract().properties.len() {
            if p.is_some_and(|p| p != i) {
                continue;
            }
            // The first `limit + 1` of each property decide the page and whether one follows.
            let page = self.cxs(
                i,
                start.clone(),
                |t| to.is_some_and(|to| t >= to),
                |k, c| from.is_none_or(|f| k.0 >= f) && scope.is_none_or(|s| s == c.scope()),
                limit.saturating_add(1),
            );
            all.extend(
                page.into_iter()
                    .take(limit.saturating_add(1))
                    .map(|(k, c)| (i, k, c)),
            );
        }
        all.sort_by(|a, b| (a.1, a.0).cmp(&(b.1, b.0)));
        let next_cursor = (all.len() > limit && limit > 0).then(|| {
            let k = all[limit - 1].1;
            format!("{}.{}", k.0, k.1)
        });
        all.truncate(limit);
        CxPage {
            counterexamples: all.iter().map(|(_, _, c)| c.render()).collect(),
            next_cursor,
        }
    }

    /// One counterexample by id.
    pub fn counterexample(&self, id: &str) -> Option<Counterexample> {
        self.find_cx(id)
    }

    /// Routes, undeclared routes and emitters of property `p`.
    pub fn coverage(&self, p: usize) -> Coverage {
        let pc = &self.contract().properties[p];
        let wm = self.watermark(p).0;
        let (w, f) = (pc.window.0, pc.route_freshness.0);
        let routes = pc
            .routes
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let obs = self.route_obs(p, i);
                let last = obs.values().map(|o| o.max).max();
                RouteState {
                    name: r.name.clone(),
                    fenced: r.fenced,
                    observations: obs.values().map(|o| o.count).sum(),
                    last_seen: last.map(|t| EventTime(t).to_string()),
                    last_seen_ns: last,
                    silent: wm == i64::MIN || silent_at(&obs, f, w, wm),
                }
            })
            .collect();
        let mut emitters: Vec<EmitterCoverage> = self
            .emitters()
            .iter()
            .filter(|e| e.props.contains(&(p as u16)))
            .map(|e| {
                let first = e.runs.iter().next().map_or(0, |(&s, _)| s);
                let last = e.runs.iter().map(|(_, r)| r.end).max().unwrap_or(0);
                let present: u64 = e
                    .runs
                    .iter()
                    .map(|(s, r)| (r.end - s).saturating_add(1))
                    .fold(0u64, u64::saturating_add);
                EmitterReport {
                    emitter: e.name.to_string(),
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
            undeclared_routes: self.undeclared(p),
            undeclared_heartbeats: self.undeclared_heartbeats(p),
            emitters,
        }
    }
}

/// The last window whose silence can be decided: its end at or before the watermark.
fn last_decided_window(width: i64, wm: i64, last: i64) -> i64 {
    last.min(wm.div_euclid(width) - 1)
}

/// Silent window spans of a route within windows `first..=last`, from its observation bounds
/// per window (min and max per window decide silence exactly).
fn silent_spans(
    obs: &BTreeMap<i64, Obs>,
    freshness: i64,
    width: i64,
    first: i64,
    last: i64,
) -> Vec<(i64, i64)> {
    if first > last {
        return Vec::new();
    }
    // Observations that can end a silence inside the range start `freshness` before it, and
    // end with the window after it: one at the very start of that window is at the end of
    // window `last`, inside its `(end - freshness, end]` (SPEC §4; `check` counts it).
    let from = first
        .saturating_mul(width)
        .saturating_sub(freshness)
        .div_euclid(width);
    let mut bounds = Vec::new();
    for o in obs.range(from..=last.saturating_add(1)).map(|(_, o)| o) {
        bounds.push(o.min);
        if o.max != o.min {
            bounds.push(o.max);
        }
    }
    scope::silent_windows(&bounds, freshness, width, first, last)
}

/// Whether a route had no observation in `(t - freshness, t]`.
fn silent_at(obs: &BTreeMap<i64, Obs>, freshness: i64, width: i64, t: i64) -> bool {
    let lo = t.saturating_sub(freshness);
    let observed = |o: &Obs| (o.min > lo && o.min <= t) || (o.max > lo && o.max <= t);
    !obs.range(lo.div_euclid(width)..=t.div_euclid(width))
        .any(|(_, o)| observed(o))
}

/// Telemetry gaps of the emitters that fed property `p`: (from ts, to ts, missing seqs).
fn gaps(emitters: &[EmitterRef<'_>], p: usize) -> Vec<(i64, i64, u64)> {
    let mut out = Vec::new();
    for e in emitters {
        if !e.props.contains(&(p as u16)) {
            continue;
        }
        let mut runs = e.runs.iter();
        let Some((_, mut a)) = runs.next() else {
            continue;
        };
        for (&b_start, b) in runs {
            let (from, to) = a.end_ts.to(b.start_ts);
            out.push((from, to, b_start - a.end - 1));
            a = b;
        }
    }
    out
}

/// Queries that need one partition's resident events; every other query is [`Live::view`]'s.
impl Live {
    /// The resident history of one scope of property `p` (per-scope state stays in its
    /// partition: scopes are partitioned by key).
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
            events: events.iter().map(|e| self.event_view(e)).collect(),
            high_water: st.and_then(|s| s.high_water()).map(|m| HighWater {
                incarnation: m.incarnation,
                epoch: m.epoch,
                first: EventTime(m.first).to_string(),
            }),
            counterexamples: cxs,
        })
    }
}
