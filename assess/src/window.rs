//! Mergeable per-window summaries and the verdicts derived from them (SPEC §4 "Windows").
//!
//! A [`WindowSeries`] holds sparse point summaries (events, counterexamples, unknown reasons
//! per window) and spans (a reason that covers a range of windows, such as route silence or a
//! telemetry gap), so a history spanning years costs memory in proportion to its findings,
//! not to its number of windows. Two series of the same property (two partitions, two
//! processes) merge by adding counts; verdicts are always derived from the merged summaries.
//!
//! Findings are kept at their own window even when it lies outside the range of windows with
//! events (an attestation's duplicate before the first commit, say), and are read in the edge
//! window nearest to them, the range as it is when read: so where a finding counts does not
//! depend on whether it arrived before or after the events that widen the range (`serve` sees
//! the range grow, `check` places after every event; both must say the same).

use crate::finding::{Reason, Verdict};
use crate::time::EventTime;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What one window holds, from one partition or merged from several.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WindowSummary {
    /// Valid events of the property in the window.
    pub events: u64,
    /// Counterexamples whose stale event lies in the window.
    pub counterexamples: u64,
    /// Unknown reasons placed in the window, by [`Reason`] index.
    pub unknown: [u64; Reason::COUNT],
}

impl WindowSummary {
    /// Adds another summary of the same window.
    pub fn merge(&mut self, other: &WindowSummary) {
        self.events += other.events;
        self.counterexamples += other.counterexamples;
        for (a, b) in self.unknown.iter_mut().zip(other.unknown.iter()) {
            *a += b;
        }
    }

    /// The verdict this summary alone supports.
    pub fn verdict(&self) -> Verdict {
        if self.counterexamples > 0 {
            Verdict::Refuted
        } else if self.unknown.iter().any(|&n| n > 0) {
            Verdict::Unknown
        } else {
            Verdict::Holds
        }
    }
}

/// A reason covering windows `from..=to` (window indices).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Span {
    /// First window index.
    pub from: i64,
    /// Last window index, inclusive.
    pub to: i64,
    /// The reason.
    pub reason: Reason,
}

/// One property's windows: sparse summaries plus spans.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WindowSeries {
    width: i64,
    points: BTreeMap<i64, WindowSummary>,
    spans: Vec<Span>,
    first: Option<i64>,
    last: Option<i64>,
    watermark: EventTime,
    revised: std::collections::BTreeSet<i64>,
    /// Runs of final windows a late attestation revised (SPEC §10: premise reasons, in either
    /// direction), as inclusive index spans, sorted and disjoint: one attestation can turn
    /// years of windows, which a set of indices would hold one by one.
    revised_spans: Vec<(i64, i64)>,
}

/// A run of consecutive windows with the same verdict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WindowRun {
    /// Start of the first window.
    pub start: String,
    /// End of the last window (exclusive).
    pub end: String,
    /// How many windows the run covers.
    pub windows: u64,
    /// The derived verdict.
    pub verdict: Verdict,
    /// Whether the watermark passed the run's end.
    #[serde(rename = "final")]
    pub is_final: bool,
    /// Whether late evidence lowered a final verdict.
    pub revised: bool,
    /// Start of the first window, ns.
    #[serde(skip)]
    pub start_ns: i64,
}

/// One window with its counts, as [`WindowSeries::details_with`] yields it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowDetail {
    /// Its index (start / width).
    pub index: i64,
    /// Start, ns.
    pub start: i64,
    /// End (exclusive), ns.
    pub end: i64,
    /// The derived verdict.
    pub verdict: Verdict,
    /// Whether the watermark passed its end.
    pub is_final: bool,
    /// Whether late evidence lowered its final verdict, or a late attestation changed its
    /// premise reasons.
    pub revised: bool,
    /// Its counts, spans included.
    pub summary: WindowSummary,
}

impl WindowSeries {
    /// An empty series of windows `width` ns wide (must be > 0).
    pub fn new(width: i64) -> WindowSeries {
        assert!(width > 0, "window width must be positive");
        WindowSeries {
            width,
            points: BTreeMap::new(),
            spans: Vec::new(),
            first: None,
            last: None,
            watermark: EventTime::MIN,
            revised: Default::default(),
            revised_spans: Vec::new(),
        }
    }

    /// The window index holding `t` (floor division, aligned to the Unix epoch).
    pub fn index(&self, t: i64) -> i64 {
        t.div_euclid(self.width)
    }

    /// Start of window `k` in ns.
    pub fn start_of(&self, k: i64) -> i64 {
        k.saturating_mul(self.width)
    }

    /// Window width in ns.
    pub fn width(&self) -> i64 {
        self.width
    }

    /// First and last window index, if the property has events.
    pub fn range(&self) -> Option<(i64, i64)> {
        Some((self.first?, self.last?))
    }

    /// Extends the range to hold the window of `t`.
    pub fn cover(&mut self, t: i64) {
        let k = self.index(t);
        self.first = Some(self.first.map_or(k, |f| f.min(k)));
        self.last = Some(self.last.map_or(k, |l| l.max(k)));
    }

    /// Counts a valid event at `t` (and extends the range).
    pub fn add_event(&mut self, t: i64) {
        self.add_events(t, 1);
    }

    /// Counts `n` valid events in the window of `t` (and extends the range).
    pub fn add_events(&mut self, t: i64, n: u64) {
        self.cover(t);
        let k = self.index(t);
        self.points.entry(k).or_default().events += n;
    }

    /// Places a counterexample whose stale event is at `t`.
    pub fn add_counterexample(&mut self, t: i64) {
        let k = self.index(t);
        self.lower(k, |s| s.counterexamples += 1);
    }

    /// Places a reason at `t`.
    pub fn add_reason(&mut self, t: i64, reason: Reason) {
        let k = self.index(t);
        self.lower(k, |s| s.unknown[reason as usize] += 1);
    }

    /// Withdraws a reason placed at `t` that later evidence resolved (an ambiguity a certain
    /// order now decides, a grant that arrived). Only provisional windows change: a final
    /// window's verdict never rises.
    pub fn retract_reason(&mut self, t: i64, reason: Reason) {
        let k = self.index(t);
        if self.is_final(self.clamp(k)) {
            return;
        }
        if let Some(p) = self.placed(k, |p| p.unknown[reason as usize] > 0) {
            let n = &mut p.unknown[reason as usize];
            *n = n.saturating_sub(1);
        }
    }

    /// The point where a finding at window `k` was placed: its own window, or (in a series
    /// restored from a checkpoint written before findings kept their own window) the edge
    /// window it was clamped to then.
    fn placed(
        &mut self,
        k: i64,
        has: impl Fn(&WindowSummary) -> bool,
    ) -> Option<&mut WindowSummary> {
        let k = if self.points.get(&k).is_some_and(&has) {
            k
        } else {
            self.clamp(k)
        };
        self.points.get_mut(&k)
    }

    /// Withdraws a counterexample placed at `t` (SPEC §4 "Provisional counterexamples"): its
    /// window gets `reason` instead, and a final window whose verdict changes (`refuted` →
    /// `unknown`) is marked `revised` — one of the two exceptions to "verdicts only drop".
    pub fn withdraw_counterexample(&mut self, t: i64, reason: Reason) {
        let k = self.index(t);
        let e = self.clamp(k);
        let before = self.summary(e).verdict();
        if let Some(p) = self.placed(k, |p| p.counterexamples > 0) {
            p.counterexamples -= 1;
        }
        self.points.entry(k).or_default().unknown[reason as usize] += 1;
        if self.is_final(e) && self.summary(e).verdict() != before {
            self.revised.insert(e);
        }
    }

    /// Takes back a counterexample placed at `t` from a provisional window, which then reads
    /// as its own evidence says; a final window keeps it (use
    /// [`WindowSeries::withdraw_counterexample`] there).
    pub fn retract_counterexample(&mut self, t: i64) {
        let k = self.index(t);
        if self.is_final(self.clamp(k)) {
            return;
        }
        if let Some(p) = self.placed(k, |p| p.counterexamples > 0) {
            p.counterexamples -= 1;
        }
    }

    /// Places a reason on every window intersecting `[a, b]` (times in ns, either order), as
    /// late evidence: the windows of `a` and `b` as points (a final one whose verdict drops is
    /// `revised`), those between as a span.
    pub fn add_reason_span(&mut self, a: i64, b: i64, reason: Reason) {
        let (a, b) = (a.min(b), a.max(b));
        self.add_reason(a, reason);
        let (ka, kb) = (self.index(a), self.index(b));
        if kb != ka {
            self.add_reason(b, reason);
            self.add_span(ka + 1, kb - 1, reason);
        }
    }

    /// Sum of the point summaries of windows `from..=to` (spans excluded), findings outside
    /// the range read in its edge windows.
    pub fn points_between(&self, from: i64, to: i64) -> WindowSummary {
        let mut s = WindowSummary::default();
        if from > to {
            return s;
        }
        let Some((first, last)) = self.range() else {
            for p in self.points.range(from..=to).map(|(_, p)| p) {
                s.merge(p);
            }
            return s;
        };
        let (a, b) = (from.max(first), to.min(last));
        if a <= b {
            for p in self.points.range(a..=b).map(|(_, p)| p) {
                s.merge(p);
            }
            let (below, above) = self.outside();
            if a == first {
                s.merge(&below);
            }
            if b == last {
                s.merge(&above);
            }
        }
        s
    }

    /// Sums of the point summaries below and above the range (see the module's note).
    fn outside(&self) -> (WindowSummary, WindowSummary) {
        let (mut below, mut above) = (WindowSummary::default(), WindowSummary::default());
        if let Some((first, last)) = self.range() {
            for p in self.points.range(..first).map(|(_, p)| p) {
                below.merge(p);
            }
            for p in self.points.range(last.saturating_add(1)..).map(|(_, p)| p) {
                above.merge(p);
            }
        }
        (below, above)
    }

    /// The point summary of window `k` as read: with the findings outside the range when `k`
    /// is an edge window (`outside` is [`WindowSeries::outside`]).
    fn point(
        &self,
        k: i64,
        outside: &(WindowSummary, WindowSummary),
    ) -> Option<std::borrow::Cow<'_, WindowSummary>> {
        self.with_outside(k, self.points.get(&k), outside)
    }

    /// `own`, window `k`'s point summary, with the findings outside the range added when `k`
    /// is an edge window.
    fn with_outside<'s>(
        &self,
        k: i64,
        own: Option<&'s WindowSummary>,
        outside: &(WindowSummary, WindowSummary),
    ) -> Option<std::borrow::Cow<'s, WindowSummary>> {
        use std::borrow::Cow;
        let Some((first, last)) = self.range() else {
            return own.map(Cow::Borrowed);
        };
        let edge = |v: &WindowSummary| *v != WindowSummary::default();
        let add_below = k == first && edge(&outside.0);
        let add_above = k == last && edge(&outside.1);
        if !add_below && !add_above {
            return own.map(Cow::Borrowed);
        }
        let mut s = own.cloned().unwrap_or_default();
        if add_below {
            s.merge(&outside.0);
        }
        if add_above {
            s.merge(&outside.1);
        }
        Some(Cow::Owned(s))
    }

    /// The spans, each as read: clamped to the range (see the module's note).
    pub fn spans(&self) -> impl Iterator<Item = Span> + '_ {
        self.spans.iter().map(|sp| self.clamp_span(*sp))
    }

    fn clamp_span(&self, sp: Span) -> Span {
        Span {
            from: self.clamp(sp.from),
            to: self.clamp(sp.to),
            reason: sp.reason,
        }
    }

    /// Advances the watermark (it never goes back): windows ending at or before it are final.
    pub fn advance_watermark(&mut self, wm: EventTime) {
        self.watermark = self.watermark.max(wm);
    }

    /// The watermark.
    pub fn watermark(&self) -> EventTime {
        self.watermark
    }

    /// Whether window `k` is final.
    pub fn is_final(&self, k: i64) -> bool {
        self.watermark.0 >= self.start_of(k.saturating_add(1))
    }

    /// Windows whose final verdict late evidence lowered.
    pub fn revised(&self) -> impl Iterator<Item = i64> + '_ {
        self.revised.iter().copied()
    }

    /// Marks final windows `from..=to` revised by a late attestation (SPEC §10).
    pub fn mark_revised(&mut self, from: i64, to: i64) {
        if from > to {
            return;
        }
        let mut all = std::mem::take(&mut self.revised_spans);
        all.push((from, to));
        self.revised_spans = coalesce(all);
    }

    /// Runs of windows a late attestation revised, inclusive index spans.
    pub fn revised_spans(&self) -> &[(i64, i64)] {
        &self.revised_spans
    }

    fn in_revised_span(&self, a: i64, b: i64) -> bool {
        let i = self.revised_spans.partition_point(|sp| sp.0 <= a);
        i.checked_sub(1)
            .is_some_and(|i| self.revised_spans[i].1 >= b - 1)
    }

    /// Applies late evidence to window `k`, marking a final window `revised` when its verdict
    /// drops (holds → unknown → refuted). Verdicts only ever drop: nothing is retracted.
    fn lower(&mut self, k: i64, f: impl FnOnce(&mut WindowSummary)) {
        let e = self.clamp(k);
        let before = self.summary(e).verdict();
        f(self.points.entry(k).or_default());
        if self.is_final(e) && self.summary(e).verdict() > before {
            self.revised.insert(e);
        }
    }

    /// Places a reason on windows `from..=to` (indices).
    pub fn add_span(&mut self, from: i64, to: i64, reason: Reason) {
        if from <= to {
            self.spans.push(Span { from, to, reason });
        }
    }

    /// Places a reason on every window intersecting `[a, b]` (times in ns).
    pub fn add_time_span(&mut self, a: i64, b: i64, reason: Reason) {
        let sp = self.time_span(a, b, reason);
        self.add_span(sp.from, sp.to, reason);
    }

    /// The span of every window intersecting `[a, b]` (times in ns, either order): what
    /// [`WindowSeries::add_time_span`] places, read clamped to the range like any span.
    pub fn time_span(&self, a: i64, b: i64, reason: Reason) -> Span {
        let (a, b) = (a.min(b), a.max(b));
        Span {
            from: self.index(a),
            to: self.index(b),
            reason,
        }
    }

    fn clamp(&self, k: i64) -> i64 {
        match (self.first, self.last) {
            (Some(f), Some(l)) => k.clamp(f, l),
            _ => k,
        }
    }

    /// Merges another series of the same property and width: counts are added, ranges and
    /// revised windows united. The watermark is not merged: it is the caller's to decide (the
    /// minimum over active partitions), and is passed to [`WindowSeries::timeline`].
    pub fn merge(&mut self, other: &WindowSeries) {
        assert_eq!(
            self.width, other.width,
            "merging series of different widths"
        );
        for (k, s) in &other.points {
            self.points.entry(*k).or_default().merge(s);
        }
        self.spans.extend_from_slice(&other.spans);
        // A window late evidence lowered in one partition is revised in the merge.
        self.revised.extend(other.revised.iter().copied());
        if !other.revised_spans.is_empty() {
            let mut all = std::mem::take(&mut self.revised_spans);
            all.extend_from_slice(&other.revised_spans);
            self.revised_spans = coalesce(all);
        }
        if let Some((f, l)) = other.range() {
            self.cover(self.start_of(f));
            self.cover(self.start_of(l));
        }
    }

    /// The summary of window `k`, spans included, as read (see the module's note).
    pub fn summary(&self, k: i64) -> WindowSummary {
        let outside = self.outside();
        let mut s = self
            .point(k, &outside)
            .map(|p| p.into_owned())
            .unwrap_or_default();
        for sp in self.spans() {
            if sp.from <= k && k <= sp.to {
                s.unknown[sp.reason as usize] += 1;
            }
        }
        s
    }

    /// The derived timeline over the series' range: every window when there are at most
    /// `max_windows`, else runs of consecutive windows with equal verdicts. `watermark` decides
    /// finality (`EventTime::MAX` = the end of input, every window final).
    pub fn timeline(&self, watermark: EventTime, max_windows: u64) -> Vec<WindowRun> {
        self.timeline_with(&[], watermark, max_windows)
    }

    /// [`WindowSeries::timeline`] with `extra` spans placed as well, without copying the
    /// series (reasons derived at query time: route silence, telemetry gaps).
    pub fn timeline_with(
        &self,
        extra: &[Span],
        watermark: EventTime,
        max_windows: u64,
    ) -> Vec<WindowRun> {
        let Some((first, last)) = self.range() else {
            return Vec::new();
        };
        let spans = || {
            self.spans
                .iter()
                .chain(extra.iter().filter(|sp| sp.from <= sp.to))
                .map(|sp| self.clamp_span(*sp))
        };
        let outside = self.outside();
        let n_spans = self.spans.len() + extra.len();
        let total = (last - first) as u64 + 1;
        let merge_runs = total > max_windows;
        let mut cuts: Vec<i64> = Vec::with_capacity(self.points.len() + 2 * n_spans + 2);
        cuts.push(first);
        cuts.push(last + 1);
        cuts.extend(
            self.points
                .keys()
                .copied()
                .filter(|&k| k >= first && k <= last),
        );
        cuts.extend(
            self.points
                .keys()
                .map(|k| k + 1)
                .filter(|&k| k > first && k <= last),
        );
        for sp in spans() {
            cuts.push(sp.from.clamp(first, last + 1));
            cuts.push((sp.to + 1).clamp(first, last + 1));
        }
        for &(a, b) in &self.revised_spans {
            cuts.push(a.clamp(first, last + 1));
            cuts.push((b + 1).clamp(first, last + 1));
        }
        cuts.sort_unstable();
        cuts.dedup();
        let mut bounds: Vec<(i64, i32, usize)> = Vec::with_capacity(n_spans * 2);
        for sp in spans() {
            bounds.push((sp.from, 1, sp.reason as usize));
            bounds.push((sp.to.saturating_add(1), -1, sp.reason as usize));
        }
        bounds.sort_unstable();
        let mut active = [0i64; Reason::COUNT];
        let mut bi = 0;
        let mut out: Vec<WindowRun> = Vec::new();
        for pair in cuts.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            while bi < bounds.len() && bounds[bi].0 <= a {
                active[bounds[bi].2] += i64::from(bounds[bi].1);
                bi += 1;
            }
            let span_unknown = active.iter().any(|&n| n > 0);
            let verdict = match self.point(a, &outside).as_deref() {
                Some(p) if p.verdict() == Verdict::Refuted => Verdict::Refuted,
                Some(p) if p.verdict() == Verdict::Unknown || span_unknown => Verdict::Unknown,
                _ if span_unknown => Verdict::Unknown,
                _ => Verdict::Holds,
            };
            let fin = |k: i64| watermark.0 >= self.start_of(k + 1) || watermark == EventTime::MAX;
            // Only point windows can be revised, and each is its own cut.
            if (b - a) == 1 || (merge_runs && fin(b - 1) == fin(a)) {
                self.push_run(&mut out, a, b, verdict, fin(b - 1), merge_runs);
            } else {
                for k in a..b {
                    self.push_run(&mut out, k, k + 1, verdict, fin(k), merge_runs);
                }
            }
        }
        out
    }

    /// Every window `from..=to` (indices, clamped to the series' range) one by one, in order,
    /// with its reasons counted, `extra` spans placed as in [`WindowSeries::timeline_with`]:
    /// what the evidence archive writes per window. Spans are swept, never looked up per window.
    pub fn details_with(
        &self,
        extra: &[Span],
        watermark: EventTime,
        from: i64,
        to: i64,
        mut each: impl FnMut(WindowDetail),
    ) {
        let Some((first, last)) = self.range() else {
            return;
        };
        let (from, to) = (from.max(first), to.min(last));
        if from > to {
            return;
        }
        let mut bounds: Vec<(i64, i64, usize)> = Vec::new();
        let outside = self.outside();
        for sp in self.spans.iter().chain(extra) {
            if sp.from > sp.to {
                continue;
            }
            let sp = self.clamp_span(*sp);
            if sp.to >= from && sp.from <= to {
                bounds.push((sp.from.max(from), 1, sp.reason as usize));
                bounds.push((sp.to.saturating_add(1), -1, sp.reason as usize));
            }
        }
        bounds.sort_unstable();
        let mut active = [0i64; Reason::COUNT];
        let mut bi = 0;
        let mut points = self.points.range(from..=to).peekable();
        for k in from..=to {
            while bi < bounds.len() && bounds[bi].0 <= k {
                active[bounds[bi].2] += bounds[bi].1;
                bi += 1;
            }
            let point = match points.peek() {
                Some((pk, _)) if **pk == k => points.next().map(|(_, p)| p),
                _ => None,
            };
            let mut s = self
                .with_outside(k, point, &outside)
                .map_or_else(WindowSummary::default, std::borrow::Cow::into_owned);
            for (u, a) in s.unknown.iter_mut().zip(active) {
                *u += a.max(0) as u64;
            }
            each(WindowDetail {
                index: k,
                start: self.start_of(k),
                end: self.start_of(k.saturating_add(1)),
                verdict: s.verdict(),
                is_final: watermark.0 >= self.start_of(k.saturating_add(1))
                    || watermark == EventTime::MAX,
                revised: self.revised.contains(&k) || self.in_revised_span(k, k + 1),
                summary: s,
            });
        }
    }

    fn push_run(
        &self,
        out: &mut Vec<WindowRun>,
        a: i64,
        b: i64,
        verdict: Verdict,
        is_final: bool,
        merge: bool,
    ) {
        let revised = ((b - a) == 1 && self.revised.contains(&a)) || self.in_revised_span(a, b);
        if merge
            && !revised
            && let Some(prev) = out.last_mut()
            && prev.verdict == verdict
            && !prev.revised
            && prev.is_final == is_final
        {
            prev.windows += (b - a) as u64;
            prev.end = EventTime(self.start_of(b)).to_string();
            return;
        }
        out.push(WindowRun {
            start: EventTime(self.start_of(a)).to_string(),
            end: EventTime(self.start_of(b)).to_string(),
            windows: (b - a) as u64,
            verdict,
            is_final,
            revised,
            start_ns: self.start_of(a),
        });
    }
}

/// Inclusive spans sorted and joined where they overlap or touch.
pub(crate) fn coalesce(mut v: Vec<(i64, i64)>) -> Vec<(i64, i64)> {
    v.sort_unstable();
    let mut out: Vec<(i64, i64)> = Vec::with_capacity(v.len());
    for (a, b) in v {
        match out.last_mut() {
            Some(last) if a <= last.1.saturating_add(1) => last.1 = last.1.max(b),
            _ => out.push((a, b)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: i64 = 60_000_000_000;

    #[test]
    fn derives_verdicts_per_window() {
        let mut s = WindowSeries::new(MIN);
        s.add_event(0);
        s.add_event(3 * MIN + 5);
        s.add_counterexample(MIN + 1);
        s.add_reason(2 * MIN, Reason::MissingEpoch);
        let t = s.timeline(EventTime::MAX, 100);
        let v: Vec<Verdict> = t.iter().map(|r| r.verdict).collect();
        assert_eq!(
            v,
            [
                Verdict::Holds,
                Verdict::Refuted,
                Verdict::Unknown,
                Verdict::Holds
            ]
        );
        assert!(t.iter().all(|r| r.is_final));
        assert_eq!(t[1].start, "1970-01-01T00:01:00.000000000Z");
    }

    #[test]
    fn spans_cover_long_ranges_without_enumeration() {
        let mut s = WindowSeries::new(MIN);
        s.add_event(0);
        let year = 525_600;
        s.add_event(year * MIN);
        s.add_span(10, year - 10, Reason::RouteSilent);
        let t = s.timeline(EventTime::MAX, 1000);
        assert_eq!(t.len(), 3);
        assert_eq!(t[1].windows, (year - 19) as u64);
        assert_eq!(t[1].verdict, Verdict::Unknown);
        assert_eq!(t.iter().map(|r| r.windows).sum::<u64>(), year as u64 + 1);
    }

    #[test]
    fn merge_adds_counts_and_refuted_wins() {
        let mut a = WindowSeries::new(MIN);
        a.add_event(0);
        a.add_reason(0, Reason::TelemetryGap);
        let mut b = WindowSeries::new(MIN);
        b.add_event(10);
        b.add_counterexample(10);
        a.merge(&b);
        let sum = a.summary(0);
        assert_eq!(sum.events, 2);
        assert_eq!(sum.verdict(), Verdict::Refuted);
    }

    #[test]
    fn late_evidence_revises_final_windows_downwards_only() {
        let mut s = WindowSeries::new(MIN);
        s.add_event(0);
        s.add_event(2 * MIN);
        s.add_reason(0, Reason::MissingEpoch);
        s.advance_watermark(EventTime(MIN));
        s.advance_watermark(EventTime(5));
        assert!(s.is_final(0) && !s.is_final(1));
        // A counterexample arriving late lowers final window 0 from unknown to refuted.
        s.add_counterexample(10);
        // One in a provisional window is not a revision.
        s.add_counterexample(2 * MIN);
        // A further reason in an already-refuted final window changes nothing.
        s.add_reason(1, Reason::TelemetryGap);
        let t = s.timeline(s.watermark(), 100);
        assert_eq!(
            t.iter()
                .map(|r| (r.verdict, r.is_final, r.revised))
                .collect::<Vec<_>>(),
            [
                (Verdict::Refuted, true, true),
                (Verdict::Holds, false, false),
                (Verdict::Refuted, false, false),
            ]
        );
        assert_eq!(s.revised().collect::<Vec<_>>(), [0]);
    }

    #[test]
    fn extra_spans_place_like_added_ones() {
        let mut s = WindowSeries::new(MIN);
        s.add_event(0);
        s.add_event(9 * MIN);
        s.add_counterexample(4 * MIN);
        let extra = [
            Span {
                from: 2,
                to: 3,
                reason: Reason::RouteSilent,
            },
            s.time_span(7 * MIN + 1, 5 * MIN, Reason::TelemetryGap),
            // Empty: ignored, as `add_span` ignores it.
            Span {
                from: 6,
                to: 5,
                reason: Reason::RouteSilent,
            },
        ];
        let mut copy = s.clone();
        for sp in extra {
            copy.add_span(sp.from, sp.to, sp.reason);
        }
        for max in [100, 2] {
            let with = s.timeline_with(&extra, EventTime(3 * MIN), max);
            assert_eq!(with, copy.timeline(EventTime(3 * MIN), max));
            assert!(with.iter().any(|r| r.verdict == Verdict::Unknown));
        }
    }

    #[test]
    fn merge_unites_revised_windows() {
        let mut a = WindowSeries::new(MIN);
        a.add_event(0);
        a.add_event(2 * MIN);
        a.advance_watermark(EventTime(MIN));
        a.add_reason(5, Reason::MissingEpoch);
        let mut b = WindowSeries::new(MIN);
        b.add_event(3 * MIN);
        b.merge(&a);
        assert_eq!(b.revised().collect::<Vec<_>>(), [0]);
        assert_eq!(b.range(), Some((0, 3)));
    }

    #[test]
    fn windows_a_late_attestation_revised_read_as_revised_runs() {
        let mut s = WindowSeries::new(MIN);
        s.add_event(0);
        s.add_event(100 * MIN);
        s.mark_revised(10, 20);
        s.mark_revised(21, 30);
        assert_eq!(s.revised_spans(), [(10, 30)]);
        let t = s.timeline(EventTime::MAX, 5);
        let revised: Vec<(u64, bool)> = t.iter().map(|r| (r.windows, r.revised)).collect();
        assert_eq!(revised, [(10, false), (21, true), (70, false)]);
        let mut other = WindowSeries::new(MIN);
        other.merge(&s);
        assert_eq!(other.revised_spans(), [(10, 30)]);
    }

    #[test]
    fn details_count_reasons_per_window_as_the_timeline_derives_them() {
        let mut s = WindowSeries::new(MIN);
        s.add_event(0);
        s.add_event(9 * MIN);
        s.add_counterexample(4 * MIN);
        s.add_reason(5 * MIN, Reason::MissingEpoch);
        s.add_span(2, 6, Reason::RouteSilent);
        let extra = [s.time_span(7 * MIN + 1, 5 * MIN, Reason::TelemetryGap)];
        let mut got = Vec::new();
        s.details_with(&extra, EventTime(3 * MIN), -5, 100, |d| got.push(d));
        assert_eq!(got.len(), 10, "clamped to the range");
        let t = s.timeline_with(&extra, EventTime(3 * MIN), 100);
        for (d, r) in got.iter().zip(&t) {
            assert_eq!(
                (d.verdict, d.is_final, d.start),
                (r.verdict, r.is_final, r.start_ns)
            );
        }
        let w5 = &got[5].summary;
        assert_eq!(w5.unknown[Reason::MissingEpoch as usize], 1);
        assert_eq!(w5.unknown[Reason::RouteSilent as usize], 1);
        assert_eq!(w5.unknown[Reason::TelemetryGap as usize], 1);
        assert_eq!(got[4].summary.counterexamples, 1);
        assert_eq!(got[4].verdict, Verdict::Refuted);
        assert_eq!(got[8].verdict, Verdict::Holds);
        assert!(got[1].is_final && !got[3].is_final);
        let mut part = Vec::new();
        s.details_with(&extra, EventTime(3 * MIN), 5, 6, |d| part.push(d));
        assert_eq!(part, got[5..=6]);
    }

    #[test]
    fn a_finding_outside_the_range_reads_at_the_edge_until_the_range_reaches_it() {
        // `serve`: the reason arrives while the range is [2, 2], then events widen it.
        let mut early = WindowSeries::new(MIN);
        early.add_event(2 * MIN);
        early.add_reason(0, Reason::ConflictingDuplicate);
        early.add_time_span(-MIN, 0, Reason::TelemetryGap);
        assert_eq!(
            early.summary(2).verdict(),
            Verdict::Unknown,
            "read at the edge"
        );
        assert_eq!(early.points_between(2, 2).unknown.iter().sum::<u64>(), 1);
        early.add_event(MIN);
        // `check`: every event first.
        let mut late = WindowSeries::new(MIN);
        late.add_event(2 * MIN);
        late.add_event(MIN);
        late.add_reason(0, Reason::ConflictingDuplicate);
        late.add_time_span(-MIN, 0, Reason::TelemetryGap);
        for s in [&early, &late] {
            let t = s.timeline(EventTime::MAX, 100);
            assert_eq!(
                t.iter().map(|r| r.verdict).collect::<Vec<_>>(),
                [Verdict::Unknown, Verdict::Holds]
            );
            let mut d = Vec::new();
            s.details_with(&[], EventTime::MAX, 0, 5, |w| d.push(w.summary));
            assert_eq!(d[0].unknown[Reason::ConflictingDuplicate as usize], 1);
            assert_eq!(d[0].unknown[Reason::TelemetryGap as usize], 1);
            assert_eq!(d[1].verdict(), Verdict::Holds);
            assert_eq!(s.spans().next().map(|sp| (sp.from, sp.to)), Some((1, 1)));
        }
        // Once the range reaches the finding's own window, it is read there.
        early.add_event(0);
        let t = early.timeline(EventTime::MAX, 100);
        assert_eq!(
            t.iter().map(|r| r.verdict).collect::<Vec<_>>(),
            [Verdict::Unknown, Verdict::Holds, Verdict::Holds]
        );
    }

    #[test]
    fn a_reason_clamped_by_an_older_checkpoint_is_still_retracted() {
        let mut s = WindowSeries::new(MIN);
        s.add_event(2 * MIN);
        // As a series restored from a layout that clamped at insertion holds it.
        s.points.entry(2).or_default().unknown[Reason::MissingEpoch as usize] += 1;
        s.retract_reason(0, Reason::MissingEpoch);
        assert_eq!(s.summary(2).verdict(), Verdict::Holds);
    }

    #[test]
    fn finality_follows_the_watermark() {
        let mut s = WindowSeries::new(MIN);
        s.add_event(0);
        s.add_event(2 * MIN);
        let t = s.timeline(EventTime(MIN + 1), 100);
        assert_eq!(
            t.iter().map(|r| r.is_final).collect::<Vec<_>>(),
            [true, false, false]
        );
    }
}
