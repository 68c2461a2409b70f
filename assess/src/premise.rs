//! Premise support (SPEC §10): from the attestations of one required premise (and route), in
//! any arrival order, the instants at which it is *supported*, *failed* or *unattested*, and
//! the reasons that places on windows and on an assessment at a time.
//!
//! A [`Support`] keeps the attestations themselves: `holds` ones as `(start, end)`, `failed`
//! ones as their times (a multiset, so that one taken back is removed exactly). That is what
//! makes it exactly mergeable across partitions: a `failed` attestation in one partition cuts
//! the support of a `holds` one in another, and coalesced intervals could not say where a
//! later `holds` restarts it. [`Support::regions`] derives the coalesced intervals when asked
//! (ordered by `ts`, never by arrival; a `failed` one wins a tie).
//!
//! `serve` bounds a support to [`MAX_ATTESTATIONS`] entries ([`Support::cap`]): beyond, the
//! oldest are merged away conservatively, as unsupported — every instant before the oldest
//! kept entry (the *floor*) reads as unattested, whatever it read before. Merging two
//! supports takes the union of their entries above the higher floor, so the merge of capped
//! supports never claims support the exact one lacks.

use crate::contract::Premise;
use crate::finding::Reason;
use crate::report::{AttestationView, Interval, PREMISE_INTERVALS, PremiseReport};
use crate::time::EventTime;
use serde::{Deserialize, Serialize};

/// Entries (`holds` starts plus `failed` times) a support keeps in `serve` per (property,
/// premise, route); the oldest beyond are merged away as unsupported.
pub const MAX_ATTESTATIONS: usize = 10_000;

/// Bytes of an attester or evidence string kept for display.
pub const MAX_NOTE_BYTES: usize = 256;

/// One attestation as the support rule reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Attestation {
    /// Its event time (ns).
    pub ts: i64,
    /// Where the support of a `holds` one ends (exclusive): `ts + valid_for`, saturating.
    pub end: i64,
    /// Whether the premise failed.
    pub failed: bool,
}

impl Attestation {
    /// An attestation at `ts`: `valid_for` defaults to `max_age` and is capped at it.
    pub fn new(ts: i64, valid_for: Option<i64>, max_age: i64, failed: bool) -> Attestation {
        let valid = valid_for.map_or(max_age, |v| v.min(max_age)).max(0);
        Attestation {
            ts,
            end: ts.saturating_add(valid),
            failed,
        }
    }
}

/// The latest attestation of a premise (greatest `ts`, a `failed` one winning a tie), for
/// display: who attested, with what evidence.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Last {
    /// Its event time (ns).
    pub ts: i64,
    /// Whether the premise failed.
    pub failed: bool,
    /// End of its support (exclusive) when it holds.
    pub end: i64,
    /// Who attested (at most [`MAX_NOTE_BYTES`]).
    pub attester: Option<String>,
    /// A URL or digest of the evidence (at most [`MAX_NOTE_BYTES`]).
    pub evidence: Option<String>,
}

impl Last {
    /// The note of attestation `a`, its strings cut to [`MAX_NOTE_BYTES`].
    pub fn new(a: Attestation, attester: Option<&str>, evidence: Option<&str>) -> Last {
        Last {
            ts: a.ts,
            failed: a.failed,
            end: a.end,
            attester: attester.map(note),
            evidence: evidence.map(note),
        }
    }
}

/// `s` cut to [`MAX_NOTE_BYTES`] at a character boundary, marked with `…` when cut.
fn note(s: &str) -> String {
    if s.len() <= MAX_NOTE_BYTES {
        return s.to_string();
    }
    let mut end = MAX_NOTE_BYTES;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// The attestations of one required premise and route (see the module doc).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Support {
    /// `holds` attestations as (start, end), sorted.
    holds: Vec<(i64, i64)>,
    /// `failed` attestations' times, sorted.
    failed: Vec<i64>,
    /// Instants before this are unsupported: older entries were merged away. `i64::MIN`: none.
    floor: i64,
    /// The latest attestation.
    last: Option<Last>,
    /// Attestations taken, deliveries of equal ones included.
    taken: u64,
}

impl Default for Support {
    fn default() -> Support {
        Support {
            holds: Vec::new(),
            failed: Vec::new(),
            floor: i64::MIN,
            last: None,
            taken: 0,
        }
    }
}

/// The state of a premise at an instant, or over a stretch of time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    /// Some `holds` attestation covers it and no later `failed` one cut it.
    Supported,
    /// Unsupported, and no attestation (or only an expired `holds`) is the latest before it.
    Unattested,
    /// Unsupported, and the latest attestation at or before it failed.
    Failed,
}

/// A support's coalesced intervals over the whole time line, half-open `[start, end)`;
/// `i64::MAX` as an end means open-ended. Failed intervals lie inside the unsupported ones.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Regions {
    /// Where the premise is supported, sorted and disjoint.
    pub supported: Vec<(i64, i64)>,
    /// Where it is failed, sorted and disjoint.
    pub failed: Vec<(i64, i64)>,
}

/// Window index spans `(from, to)` (inclusive) on which one premise raises a reason: at most
/// one per window (SPEC §10).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WindowReasons {
    /// Windows with a failed instant: `premise_failed`.
    pub failed: Vec<(i64, i64)>,
    /// Windows with an unsupported instant and no failed one: `premise_unattested`.
    pub unattested: Vec<(i64, i64)>,
}

impl WindowReasons {
    /// Windows raising `premise_failed` and `premise_unattested`.
    pub fn counts(&self) -> (u64, u64) {
        let n = |v: &[(i64, i64)]| v.iter().map(|(a, b)| (b - a + 1) as u64).sum();
        (n(&self.failed), n(&self.unattested))
    }
}

impl Support {
    /// An empty support: unattested everywhere.
    pub fn new() -> Support {
        Support::default()
    }

    /// The support of `attestations`, in any order (no cap: `check`).
    pub fn from_attestations(attestations: impl IntoIterator<Item = Attestation>) -> Support {
        let mut s = Support::new();
        for a in attestations {
            s.taken += 1;
            if a.failed {
                s.failed.push(a.ts);
            } else {
                s.holds.push((a.ts, a.end));
            }
        }
        s.holds.sort_unstable();
        s.failed.sort_unstable();
        s
    }

    /// Takes one attestation, in any arrival order. Returns whether it was kept (one older
    /// than the floor is merged away at once).
    pub fn insert(&mut self, a: Attestation) -> bool {
        self.taken += 1;
        if a.ts < self.floor {
            return false;
        }
        if a.failed {
            let i = self.failed.partition_point(|&t| t <= a.ts);
            self.failed.insert(i, a.ts);
        } else {
            let i = self.holds.partition_point(|&h| h <= (a.ts, a.end));
            self.holds.insert(i, (a.ts, a.end));
        }
        true
    }

    /// Takes back one attestation taken before (a delivery found to conflict with another
    /// one of its key, SPEC §4 "Duplicates"). Returns whether it was still kept.
    pub fn remove(&mut self, a: Attestation) -> bool {
        let found = if a.failed {
            self.failed.binary_search(&a.ts).map(|i| {
                self.failed.remove(i);
            })
        } else {
            self.holds.binary_search(&(a.ts, a.end)).map(|i| {
                self.holds.remove(i);
            })
        };
        if found.is_ok() {
            self.taken = self.taken.saturating_sub(1);
        }
        found.is_ok()
    }

    /// Notes `last` as the latest attestation if it is later (by time, a `failed` one winning
    /// a tie, then by its other fields, so that any merge order keeps the same one).
    pub fn note_last(&mut self, last: Last) {
        if self.last.as_ref().is_none_or(|l| last > *l) {
            self.last = Some(last);
        }
    }

    /// The latest attestation.
    pub fn last(&self) -> Option<&Last> {
        self.last.as_ref()
    }

    /// Attestations taken.
    pub fn taken(&self) -> u64 {
        self.taken
    }

    /// Entries kept (`holds` starts plus `failed` times).
    pub fn len(&self) -> usize {
        self.holds.len() + self.failed.len()
    }

    /// Whether no attestation is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Instants before this read as unsupported (older entries were merged away), if any.
    pub fn floor(&self) -> Option<i64> {
        (self.floor != i64::MIN).then_some(self.floor)
    }

    /// Keeps at most `max` entries: beyond, the oldest (by time, all entries of one time
    /// together) are merged away and the floor rises to the oldest time kept. Returns whether
    /// anything was merged away.
    pub fn cap(&mut self, max: usize) -> bool {
        if self.len() <= max {
            return false;
        }
        // The entries' times from the newest, to find the oldest time whose entries (and all
        // newer ones) fit in `max`.
        let (mut h, mut f) = (self.holds.len(), self.failed.len());
        let mut kept = 0;
        let mut cutoff: Option<i64> = None;
        loop {
            let next = match (h.checked_sub(1), f.checked_sub(1)) {
                (Some(i), Some(j)) => self.holds[i].0.max(self.failed[j]),
                (Some(i), None) => self.holds[i].0,
                (None, Some(j)) => self.failed[j],
                (None, None) => break,
            };
            let mut group = 0;
            while h > 0 && self.holds[h - 1].0 == next {
                h -= 1;
                group += 1;
            }
            while f > 0 && self.failed[f - 1] == next {
                f -= 1;
                group += 1;
            }
            if kept + group > max {
                // This time's entries do not fit: the floor is just after it.
                cutoff = Some(cutoff.unwrap_or(next.saturating_add(1)));
                break;
            }
            kept += group;
            cutoff = Some(next);
        }
        let cutoff = cutoff.expect("over the cap, so some entry exists");
        self.raise_floor(cutoff);
        true
    }

    fn raise_floor(&mut self, floor: i64) {
        if floor <= self.floor {
            return;
        }
        self.floor = floor;
        self.holds.retain(|h| h.0 >= floor);
        self.failed.retain(|&t| t >= floor);
    }

    /// Adds another partition's support of the same premise and route: the union of their
    /// entries above the higher floor. Merging is commutative and associative.
    pub fn merge(&mut self, other: &Support) {
        self.taken += other.taken;
        if let Some(l) = &other.last {
            self.note_last(l.clone());
        }
        let floor = self.floor.max(other.floor);
        let mut holds: Vec<(i64, i64)> = self.holds.iter().chain(&other.holds).copied().collect();
        holds.sort_unstable();
        let mut failed: Vec<i64> = self.failed.iter().chain(&other.failed).copied().collect();
        failed.sort_unstable();
        self.holds = holds;
        self.failed = failed;
        self.floor = i64::MIN;
        self.raise_floor(floor);
    }

    /// The coalesced supported and failed intervals (SPEC §10 "Support"): a `holds`
    /// attestation h supports `[h.ts, h.end)` up to the first `failed` one at or after h.ts;
    /// a `failed` one f makes `[f.ts, next holds start after f.ts)` failed.
    pub fn regions(&self) -> Regions {
        let mut supported: Vec<(i64, i64)> = Vec::new();
        let mut fi = 0;
        for &(s, e) in &self.holds {
            while fi < self.failed.len() && self.failed[fi] < s {
                fi += 1;
            }
            let end = e.min(self.failed.get(fi).copied().unwrap_or(i64::MAX));
            if end > s {
                push_coalesced(&mut supported, s, end);
            }
        }
        let mut failed: Vec<(i64, i64)> = Vec::new();
        let mut hi = 0;
        for &f in &self.failed {
            while hi < self.holds.len() && self.holds[hi].0 <= f {
                hi += 1;
            }
            let end = self.holds.get(hi).map_or(i64::MAX, |h| h.0);
            push_coalesced(&mut failed, f, end);
        }
        Regions { supported, failed }
    }
}

fn push_coalesced(v: &mut Vec<(i64, i64)>, s: i64, e: i64) {
    match v.last_mut() {
        Some(last) if s <= last.1 => last.1 = last.1.max(e),
        _ => v.push((s, e)),
    }
}

impl Regions {
    /// The state at instant `t`, and when supported, the end of its support interval.
    pub fn at(&self, t: i64) -> (State, Option<i64>) {
        let holding = |v: &[(i64, i64)]| {
            let i = v.partition_point(|iv| iv.0 <= t);
            i.checked_sub(1).map(|i| v[i]).filter(|iv| t < iv.1)
        };
        if let Some((_, end)) = holding(&self.supported) {
            return (State::Supported, Some(end));
        }
        if holding(&self.failed).is_some() {
            return (State::Failed, None);
        }
        (State::Unattested, None)
    }

    /// The worst state over `[a, b)` (`a < b`): failed if any instant is, else unattested if
    /// any is unsupported, else supported.
    pub fn over(&self, a: i64, b: i64) -> State {
        if a >= b {
            return State::Supported;
        }
        if self.failed.iter().any(|&(s, e)| s < b && e > a) {
            return State::Failed;
        }
        let i = self.supported.partition_point(|iv| iv.0 <= a);
        let covered = i.checked_sub(1).is_some_and(|i| self.supported[i].1 >= b);
        if covered {
            State::Supported
        } else {
            State::Unattested
        }
    }

    /// The windows `first..=last` (of `width` ns, aligned to the Unix epoch) on which the
    /// premise raises a reason: `premise_failed` where a failed instant lies, else
    /// `premise_unattested` where an unsupported one does. Computed from the intervals, never
    /// by enumerating windows.
    pub fn window_reasons(&self, width: i64, first: i64, last: i64) -> WindowReasons {
        if first > last {
            return WindowReasons::default();
        }
        let lo = first.saturating_mul(width);
        let hi = last.saturating_add(1).saturating_mul(width);
        let windows = |a: i64, b: i64| -> Option<(i64, i64)> {
            let (a, b) = (a.max(lo), b.min(hi));
            (a < b).then(|| (a.div_euclid(width), (b - 1).div_euclid(width)))
        };
        let failed = crate::window::coalesce(
            self.failed
                .iter()
                .filter_map(|&(a, b)| windows(a, b))
                .collect(),
        );
        // Unsupported stretches: the gaps between supported intervals within [lo, hi).
        let mut gaps = Vec::new();
        let mut at = lo;
        for &(s, e) in &self.supported {
            if e <= at {
                continue;
            }
            if s >= hi {
                break;
            }
            if s > at {
                gaps.extend(windows(at, s));
            }
            at = e;
            if at >= hi {
                break;
            }
        }
        if at < hi {
            gaps.extend(windows(at, hi));
        }
        let unsupported = crate::window::coalesce(gaps);
        WindowReasons {
            unattested: subtract(&unsupported, &failed),
            failed,
        }
    }
}

/// The latest attestation as shown.
pub fn view_last(l: &Last) -> AttestationView {
    AttestationView {
        ts: EventTime(l.ts).to_string(),
        outcome: if l.failed { "failed" } else { "holds" },
        valid_until: (!l.failed && l.end != i64::MAX).then(|| EventTime(l.end).to_string()),
        attester: l.attester.clone(),
        evidence: l.evidence.clone(),
    }
}

/// Intervals as shown: the last [`PREMISE_INTERVALS`], RFC 3339.
pub fn view_intervals(v: &[(i64, i64)]) -> Vec<Interval> {
    v[v.len().saturating_sub(PREMISE_INTERVALS)..]
        .iter()
        .map(|&(s, e)| Interval {
            start: EventTime(s).to_string(),
            end: (e != i64::MAX).then(|| EventTime(e).to_string()),
        })
        .collect()
}

/// The report of one required premise.
pub fn report(
    decl: &Premise,
    support: &Support,
    regions: &Regions,
    windows: &WindowReasons,
) -> PremiseReport {
    let (failed_windows, unattested_windows) = windows.counts();
    PremiseReport {
        name: decl.name.clone(),
        route: decl.route.clone(),
        max_age: decl.max_age.to_string(),
        attestations: support.taken(),
        supported: view_intervals(&regions.supported),
        failed: view_intervals(&regions.failed),
        failed_windows,
        unattested_windows,
        last: support.last().map(view_last),
    }
}

/// The sample detail of a premise's reason over `windows` windows.
pub fn describe(decl: &Premise, reason: Reason, windows: u64, last: Option<&Last>) -> String {
    let on = decl
        .route
        .as_deref()
        .map(|r| format!(" on route `{r}`"))
        .unwrap_or_default();
    let latest = match last {
        None => "never attested".to_string(),
        Some(l) => format!(
            "last attested {} at {}{}",
            if l.failed { "failed" } else { "holds" },
            EventTime(l.ts),
            l.attester
                .as_deref()
                .map(|a| format!(" by {a}"))
                .unwrap_or_default()
        ),
    };
    let what = if reason == Reason::PremiseFailed {
        "failed"
    } else {
        "unsupported by any attestation"
    };
    format!(
        "premise `{}`{on} {what} in {windows} window(s); {latest}",
        decl.name
    )
}

/// The windows whose reason differs between two placements of one premise (revised by the
/// attestation that made the difference), as inclusive spans.
pub fn changed_windows(before: &WindowReasons, after: &WindowReasons) -> Vec<(i64, i64)> {
    let mut out = Vec::new();
    for (x, y) in [
        (&before.failed, &after.failed),
        (&before.unattested, &after.unattested),
    ] {
        out.extend(subtract(x, y));
        out.extend(subtract(y, x));
    }
    crate::window::coalesce(out)
}

/// Inclusive spans of `a` less those of `b` (both sorted, disjoint).
fn subtract(a: &[(i64, i64)], b: &[(i64, i64)]) -> Vec<(i64, i64)> {
    let mut out = Vec::new();
    for &(mut s, e) in a {
        for &(bs, be) in b {
            if be < s || bs > e {
                continue;
            }
            if bs > s {
                out.push((s, bs - 1));
            }
            s = be.saturating_add(1);
            if s > e {
                break;
            }
        }
        if s <= e {
            out.push((s, e));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn h(ts: i64, valid: i64) -> Attestation {
        Attestation::new(ts, Some(valid), i64::MAX, false)
    }

    fn f(ts: i64) -> Attestation {
        Attestation::new(ts, None, i64::MAX, true)
    }

    /// SPEC §10's definition, instant by instant.
    fn model_state(all: &[Attestation], t: i64) -> State {
        let supported = all.iter().any(|a| {
            !a.failed
                && a.ts <= t
                && t < a.end
                && !all.iter().any(|x| x.failed && a.ts <= x.ts && x.ts <= t)
        });
        if supported {
            return State::Supported;
        }
        let latest = all.iter().filter(|a| a.ts <= t).map(|a| a.ts).max();
        match latest {
            Some(ts) if all.iter().any(|a| a.ts == ts && a.failed) => State::Failed,
            _ => State::Unattested,
        }
    }

    fn model_windows(all: &[Attestation], width: i64, first: i64, last: i64) -> Vec<State> {
        (first..=last)
            .map(|k| {
                (k * width..(k + 1) * width)
                    .map(|t| model_state(all, t))
                    .max_by_key(|s| match s {
                        State::Supported => 0,
                        State::Unattested => 1,
                        State::Failed => 2,
                    })
                    .expect("a window has instants")
            })
            .collect()
    }

    fn windows_of(r: &WindowReasons, first: i64, last: i64) -> Vec<State> {
        let inside = |v: &[(i64, i64)], k: i64| v.iter().any(|&(a, b)| a <= k && k <= b);
        (first..=last)
            .map(|k| {
                assert!(!(inside(&r.failed, k) && inside(&r.unattested, k)));
                if inside(&r.failed, k) {
                    State::Failed
                } else if inside(&r.unattested, k) {
                    State::Unattested
                } else {
                    State::Supported
                }
            })
            .collect()
    }

    #[test]
    fn holds_expires_failed_cuts_and_a_later_holds_restores() {
        let s = Support::from_attestations([h(10, 20), f(15), h(18, 5)]);
        let r = s.regions();
        assert_eq!(r.supported, [(10, 15), (18, 23)]);
        assert_eq!(r.failed, [(15, 18)]);
        assert_eq!(r.at(12), (State::Supported, Some(15)));
        assert_eq!(r.at(15).0, State::Failed);
        assert_eq!(r.at(23).0, State::Unattested, "expired after a holds");
        assert_eq!(r.at(9).0, State::Unattested);
        assert_eq!(r.over(10, 15), State::Supported);
        assert_eq!(r.over(10, 16), State::Failed);
        assert_eq!(r.over(18, 24), State::Unattested);
    }

    #[test]
    fn failed_wins_a_tie_and_overlapping_holds_coalesce() {
        let r = Support::from_attestations([h(10, 5), f(10)]).regions();
        assert!(r.supported.is_empty());
        assert_eq!(r.failed, [(10, i64::MAX)]);
        let r = Support::from_attestations([h(0, 10), h(5, 10), h(15, 1)]).regions();
        assert_eq!(r.supported, [(0, 16)]);
    }

    #[test]
    fn valid_for_defaults_to_max_age_and_is_capped_at_it() {
        assert_eq!(Attestation::new(100, None, 50, false).end, 150);
        assert_eq!(Attestation::new(100, Some(500), 50, false).end, 150);
        assert_eq!(Attestation::new(100, Some(20), 50, false).end, 120);
        assert_eq!(
            Attestation::new(i64::MAX - 1, None, 50, false).end,
            i64::MAX
        );
    }

    #[test]
    fn window_reasons_are_one_per_window_failed_first() {
        // Windows of 10: [0,10) supported; [10,20) supported then failed at 15; [20,30)
        // failed until the holds at 25, then supported; [30,40) supported until 32.
        let r = Support::from_attestations([h(0, 100), f(15), h(25, 7)]).regions();
        let w = r.window_reasons(10, 0, 4);
        assert_eq!(w.failed, [(1, 2)]);
        assert_eq!(w.unattested, [(3, 4)]);
        assert_eq!(w.counts(), (2, 2));
        // A span of years costs no enumeration.
        let r = Support::from_attestations([h(0, 5)]).regions();
        let w = r.window_reasons(1, 0, 1 << 40);
        assert_eq!(w.unattested, [(5, 1 << 40)]);
        assert!(w.failed.is_empty());
    }

    #[test]
    fn cap_merges_the_oldest_away_as_unsupported() {
        let mut s = Support::new();
        for i in 0..10 {
            s.insert(h(i * 10, 15));
        }
        s.insert(f(95));
        let exact = s.regions();
        assert!(s.cap(4));
        assert_eq!(s.len(), 4);
        assert_eq!(s.floor(), Some(70));
        let r = s.regions();
        assert_eq!(r.supported, [(70, 95)]);
        assert_eq!(r.failed, exact.failed);
        // An attestation older than the floor is merged away at once.
        assert!(!s.insert(h(10, 100)));
        // Entries of one time go together.
        let mut s = Support::from_attestations([h(5, 1), h(9, 3), f(9)]);
        assert!(s.cap(1));
        assert_eq!((s.len(), s.floor()), (0, Some(10)));
    }

    fn arb_attestations() -> impl Strategy<Value = Vec<Attestation>> {
        prop::collection::vec(
            (0i64..60, 1i64..25, prop::bool::weighted(0.25))
                .prop_map(|(ts, v, failed)| if failed { f(ts) } else { h(ts, v) }),
            0..14,
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

        #[test]
        fn agrees_with_the_definition_in_any_arrival_order(
            all in arb_attestations(),
            order in prop::collection::vec(any::<u32>(), 14),
            width in 1i64..9,
        ) {
            let mut shuffled: Vec<(u32, Attestation)> =
                all.iter().copied().zip(order.iter().copied()).map(|(a, k)| (k, a)).collect();
            shuffled.sort_by_key(|x| x.0);
            let mut s = Support::new();
            for (_, a) in &shuffled {
                s.insert(*a);
            }
            prop_assert_eq!(&s, &Support::from_attestations(all.iter().copied()));
            let r = s.regions();
            for t in -2..95 {
                prop_assert_eq!(r.at(t).0, model_state(&all, t), "t = {}", t);
            }
            let (first, last) = (0, 90 / width);
            prop_assert_eq!(
                windows_of(&r.window_reasons(width, first, last), first, last),
                model_windows(&all, width, first, last)
            );
            for (a, b) in [(0, 7), (3, 30), (20, 21), (55, 90)] {
                let want = (a..b).map(|t| model_state(&all, t)).max_by_key(|s| match s {
                    State::Supported => 0, State::Unattested => 1, State::Failed => 2,
                }).unwrap();
                prop_assert_eq!(r.over(a, b), want);
            }
        }

        #[test]
        fn partitions_merge_to_the_whole(
            all in arb_attestations(),
            split in prop::collection::vec(0usize..3, 14),
        ) {
            let mut parts = [Support::new(), Support::new(), Support::new()];
            for (a, &p) in all.iter().zip(&split) {
                parts[p].insert(*a);
                parts[p].note_last(Last::new(*a, Some("x"), None));
            }
            let mut ab = parts[0].clone();
            ab.merge(&parts[1]);
            ab.merge(&parts[2]);
            let mut ba = parts[2].clone();
            ba.merge(&parts[1]);
            ba.merge(&parts[0]);
            let whole = Support::from_attestations(all.iter().copied());
            prop_assert_eq!(ab.regions(), whole.regions());
            prop_assert_eq!(&ab, &ba);
            let latest = all.iter().map(|a| (a.ts, a.failed, a.end)).max();
            prop_assert_eq!(ab.last().map(|l| (l.ts, l.failed, l.end)), latest);
        }

        #[test]
        fn capped_supports_never_claim_more_and_merge_the_same(
            all in arb_attestations(),
            split in prop::collection::vec(0usize..2, 14),
            max in 1usize..6,
        ) {
            let whole = Support::from_attestations(all.iter().copied()).regions();
            let mut parts = [Support::new(), Support::new()];
            for (a, &p) in all.iter().zip(&split) {
                parts[p].insert(*a);
                parts[p].cap(max);
            }
            let mut m = parts[0].clone();
            m.merge(&parts[1]);
            m.cap(max);
            let r = m.regions();
            for t in 0..90 {
                if r.at(t).0 == State::Supported {
                    prop_assert_eq!(whole.at(t).0, State::Supported, "t = {}", t);
                }
            }
            prop_assert!(m.len() <= max);
            // Above the floor, the capped merge reads as the exact history does.
            let floor = m.floor().unwrap_or(i64::MIN);
            let oldest_kept_everywhere = parts.iter().filter_map(Support::floor).max();
            if oldest_kept_everywhere.is_none() && m.floor().is_none() {
                prop_assert_eq!(r, whole);
            } else {
                for t in floor.max(0)..90 {
                    if r.at(t).0 == State::Failed {
                        prop_assert_eq!(whole.at(t).0, State::Failed, "t = {}", t);
                    }
                }
            }
        }
    }

    #[test]
    fn changed_windows_are_the_symmetric_difference() {
        let before = WindowReasons {
            failed: vec![(2, 4)],
            unattested: vec![(0, 1), (5, 9)],
        };
        let after = WindowReasons {
            failed: vec![(3, 4)],
            unattested: vec![(0, 2), (8, 9)],
        };
        // 2 turned failed -> unattested; 5..=7 unattested -> supported.
        assert_eq!(changed_windows(&before, &after), [(2, 2), (5, 7)]);
        assert!(changed_windows(&after, &after).is_empty());
    }

    #[test]
    fn an_attestation_taken_back_leaves_the_others() {
        let mut s = Support::from_attestations([h(0, 10), h(0, 10), f(5)]);
        assert!(s.remove(f(5)));
        assert!(!s.remove(f(5)));
        assert_eq!(s.regions().supported, [(0, 10)]);
        assert!(s.remove(h(0, 10)));
        assert_eq!(
            s.regions().supported,
            [(0, 10)],
            "one equal delivery remains"
        );
        assert!(s.remove(h(0, 10)));
        assert!(s.regions().supported.is_empty() && s.is_empty());
    }

    #[test]
    fn serde_round_trip() {
        let mut s = Support::from_attestations([h(1, 5), f(3)]);
        s.note_last(Last::new(f(3), Some("ci"), Some(&"e".repeat(1000))));
        assert_eq!(s.last().unwrap().evidence.as_ref().unwrap().len(), 256 + 3);
        let json = serde_json::to_string(&s).unwrap();
        assert_eq!(serde_json::from_str::<Support>(&json).unwrap(), s);
        let bin = postcard::to_allocvec(&s).unwrap();
        assert_eq!(postcard::from_bytes::<Support>(&bin).unwrap(), s);
    }
}
