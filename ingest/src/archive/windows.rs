//! Window rows from the merged view (SPEC §9): a window is written when it becomes final
//! (revision 0) and again each time late evidence revises its verdict (revision 1, 2, …).
//!
//! Windows are a property of the merged view, not of one partition, so they are not tied to
//! offsets: per property the manifest records the range of windows whose revision 0 is
//! archived, and each revised window's last revision and its verdict. A revision is written
//! when the view marks a final window `revised` (late evidence lowered its verdict, a
//! counterexample was withdrawn) and its verdict differs from the last one written; a change
//! of counts that leaves the verdict as it was is not a revision. A late attestation (SPEC
//! §10) revises the final windows whose premise reasons it changed, in either direction: the
//! manifest keeps where each required premise raised a reason on the archived windows, and
//! every window where that placement differs now is written again (its `unknown` changed, its
//! verdict may have risen or fallen).

use super::manifest::{PremisePlacement, WindowsArchived};
use super::rows::WindowRows;
use fencewatch_assess::live::View;
use fencewatch_assess::premise::{WindowReasons, changed_windows};
use fencewatch_assess::window::WindowDetail;
use std::collections::BTreeMap;

/// Window rows written at most per tick (the rest on the next ones): a history spanning years
/// has millions of (mostly empty) windows.
pub(super) const TICK_ROWS: usize = 1_000_000;
/// Windows not yet archived shown per property in a query snapshot at most.
pub(super) const LIVE_ROWS: usize = 100_000;

/// Archives the windows of every property that became final or were revised since the last
/// tick, at most `budget` rows; returns the rows written.
pub(super) fn tick(
    view: &View<'_>,
    archived: &mut BTreeMap<String, WindowsArchived>,
    rows: &mut WindowRows,
    mut budget: usize,
) -> usize {
    let written = |rows: &WindowRows| super::rows::Rows::len(rows);
    let before = written(rows);
    for (p, prop) in view.contract().properties.iter().enumerate() {
        let Some(b) = view.window_bounds(p) else {
            continue;
        };
        let name = prop.name.as_str();
        let st = archived
            .entry(name.to_string())
            .or_insert_with(WindowsArchived::none);
        let hi_final = b.last_final.min(b.last);
        if hi_final < b.first || budget == 0 {
            continue;
        }
        let premised = !prop.premises.is_empty();
        if premised && !st.is_empty() {
            premise_revisions(view, p, name, st, &b.revised, rows);
        }
        let n = budget as i64;
        let mut ranges = Vec::new();
        if st.is_empty() {
            let to = hi_final.min(b.first.saturating_add(n - 1));
            ranges.push((b.first, to));
            st.lo = b.first;
            st.hi = to;
        } else {
            // A late event before the first window extends the range backwards: those windows
            // are final (the watermark passed a later one).
            if b.first < st.lo {
                let from = b.first.max(st.lo.saturating_sub(n));
                ranges.push((from, st.lo - 1));
                st.lo = from;
            }
            if hi_final > st.hi {
                let left = n - ranges.iter().map(|(a, b)| b - a + 1).sum::<i64>();
                if left > 0 {
                    let to = hi_final.min(st.hi.saturating_add(left));
                    ranges.push((st.hi + 1, to));
                    st.hi = to;
                }
            }
        }
        for (from, to) in ranges {
            view.windows(p, from, to, |d| {
                if b.revised.binary_search(&d.index).is_ok() {
                    st.revised
                        .insert(d.index, (0, d.verdict.as_str().to_string()));
                }
                rows.push(
                    name,
                    &WindowDetail {
                        is_final: true,
                        ..d
                    },
                    0,
                );
            });
        }
        // Revisions of windows archived before.
        let ks: Vec<i64> = b.revised.iter().copied().filter(|&k| st.holds(k)).collect();
        view.windows_at(p, &ks, |d| {
            let next = match st.revised.get(&d.index) {
                None => 1,
                Some((r, v)) if v != d.verdict.as_str() => r + 1,
                Some(_) => return,
            };
            st.revised
                .insert(d.index, (next, d.verdict.as_str().to_string()));
            let revision = next + st.premise_revisions_of(d.index);
            let d = WindowDetail {
                is_final: true,
                revised: true,
                ..d
            };
            rows.push(name, &d, revision);
        });
        if premised {
            st.premises = view
                .premise_placement(p, st.lo, st.hi)
                .into_iter()
                .map(|r| PremisePlacement {
                    failed: r.failed,
                    unattested: r.unattested,
                })
                .collect();
        }
        budget = budget.saturating_sub(written(rows) - before);
    }
    written(rows) - before
}

/// Writes again the archived windows of property `p` whose premise reasons differ from the
/// placement archived last (a late attestation, or one taken back, changed them).
fn premise_revisions(
    view: &View<'_>,
    p: usize,
    name: &str,
    st: &mut WindowsArchived,
    late: &[i64],
    rows: &mut WindowRows,
) {
    let now = view.premise_placement(p, st.lo, st.hi);
    if now.len() != st.premises.len() {
        // Nothing archived to compare with: the placement is recorded at the end of the tick.
        return;
    }
    let mut changed = Vec::new();
    for (before, after) in st.premises.iter().zip(&now) {
        let before = WindowReasons {
            failed: before.failed.clone(),
            unattested: before.unattested.clone(),
        };
        changed.extend(changed_windows(&before, after));
    }
    changed.sort_unstable();
    let mut spans: Vec<(i64, i64)> = Vec::with_capacity(changed.len());
    for (a, b) in changed {
        match spans.last_mut() {
            Some(l) if a <= l.1.saturating_add(1) => l.1 = l.1.max(b),
            _ => spans.push((a, b)),
        }
    }
    for (a, b) in spans {
        let (a, b) = (a.max(st.lo), b.min(st.hi));
        if a > b {
            continue;
        }
        view.windows(p, a, b, |d| {
            let verdict = d.verdict.as_str().to_string();
            let k = d.index;
            let lates = match st.revised.get_mut(&k) {
                Some(e) => {
                    // Its last row has this verdict now.
                    e.1.clone_from(&verdict);
                    e.0
                }
                None => {
                    if late.binary_search(&k).is_ok() {
                        // Late evidence lowered it too: this row shows that already.
                        st.revised.insert(k, (0, verdict));
                    }
                    0
                }
            };
            let revision = lates + st.premise_revisions_of(k) + 1;
            let d = WindowDetail {
                is_final: true,
                revised: true,
                ..d
            };
            rows.push(name, &d, revision);
        });
        st.add_premise_revision(a, b);
    }
}

/// The windows of every property not archived yet (provisional ones, and final ones the next
/// tick will write), as revision 0, at most [`LIVE_ROWS`] per property.
pub(super) fn unarchived(
    view: &View<'_>,
    archived: &BTreeMap<String, WindowsArchived>,
    rows: &mut WindowRows,
) {
    for (p, prop) in view.contract().properties.iter().enumerate() {
        let Some(b) = view.window_bounds(p) else {
            continue;
        };
        let none = WindowsArchived::none();
        let st = archived.get(&prop.name).unwrap_or(&none);
        let ranges = if st.is_empty() {
            vec![(b.first, b.last)]
        } else {
            vec![(b.first, st.lo - 1), (st.hi + 1, b.last)]
        };
        let mut left = LIVE_ROWS as i64;
        for (from, to) in ranges {
            if from > to || left <= 0 {
                continue;
            }
            // The newest windows matter most: cut the oldest when over the bound.
            let from = from.max(to.saturating_sub(left - 1));
            left -= to - from + 1;
            view.windows(p, from, to, |d| rows.push(&prop.name, &d, 0));
        }
    }
}
