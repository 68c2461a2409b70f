//! What `finish` settles per event key before judging: duplicates by (emitter, seq) and by
//! (scope, incarnation, order, epoch) (SPEC §4 "Duplicates": equal deliveries keep one,
//! differing ones are all set aside), and telemetry gaps per emitter (sorting by seq only the
//! emitters whose seqs went back).

use super::acc::Acc;
use super::state::History;
use crate::finding::Reason;
use crate::report::{EmitterReport, Sample};
use crate::rules::{ASIDE, DUP, Rec, UNATTRIBUTED};
use crate::time::EventTime;

impl History {
    /// Indices of the events of emitters whose seqs did not arrive increasing, sorted by
    /// (emitter, seq, index): a stable counting sort by emitter, then each emitter's run sorted.
    pub(super) fn by_seq(&self) -> (Vec<u32>, Vec<u32>) {
        let recs = &self.recs;
        let n = self.strings.len();
        let back: Vec<bool> = (0..n)
            .map(|e| {
                self.seqs
                    .get(e)
                    .is_some_and(|t| t.events > 0 && !t.increasing)
            })
            .collect();
        if !back.contains(&true) {
            return (Vec::new(), vec![0; n + 1]);
        }
        let has = |r: &Rec| r.seq_key().is_some_and(|(e, _)| back[e as usize]);
        let mut starts = vec![0u32; n + 1];
        for r in recs.iter().filter(|r| has(r)) {
            starts[r.emitter as usize + 1] += 1;
        }
        for i in 0..n {
            starts[i + 1] += starts[i];
        }
        let mut fill = starts.clone();
        let mut out = vec![0u32; starts[n] as usize];
        for (i, r) in recs.iter().enumerate().filter(|(_, r)| has(r)) {
            out[fill[r.emitter as usize] as usize] = i as u32;
            fill[r.emitter as usize] += 1;
        }
        for e in 0..n {
            let run = &mut out[starts[e] as usize..starts[e + 1] as usize];
            if !run
                .windows(2)
                .all(|w| recs[w[0] as usize].seq <= recs[w[1] as usize].seq)
            {
                let mut keys: Vec<(u64, u32)> =
                    run.iter().map(|&i| (recs[i as usize].seq, i)).collect();
                keys.sort_unstable();
                for (slot, (_, i)) in run.iter_mut().zip(keys) {
                    *slot = i;
                }
            }
        }
        (out, starts)
    }

    pub(super) fn settle_duplicates(&mut self, accs: &mut [Acc], by_seq: &[u32]) -> u64 {
        // Keys settled outside: their conflicting deliveries come set aside, and a key with
        // one of them is not judged again here (some of its deliveries are elsewhere).
        let outside = self.seqs_outside.clone();
        if let Some(aside) = &outside {
            for r in self.recs.iter_mut() {
                if r.seq_key().is_some() && aside.contains(&(r.source, r.position)) {
                    r.flags |= ASIDE;
                }
            }
        }
        let recs = &mut self.recs;
        let scopes = &self.scopes;
        let attests = &self.attests;
        // Records with an order key, when reading noted any (`History::order_keys`).
        debug_assert!(self.order_keys || recs.iter().all(|r| r.order_key().is_none()));
        let mut by_order: Vec<u32> = if self.order_keys {
            (0..recs.len() as u32)
                .filter(|&i| recs[i as usize].order_key().is_some())
                .collect()
        } else {
            Vec::new()
        };
        by_order.sort_unstable_by_key(|&i| {
            let r = &recs[i as usize];
            (scopes.key(r), r.order_key(), i)
        });
        let mut equal_pairs: Vec<(u32, u32)> = Vec::new();
        let mut conflicts: Vec<Vec<u32>> = Vec::new();
        let mut groups = |idx: &[u32],
                          same_key: &dyn Fn(&Rec, &Rec) -> bool,
                          recs: &mut Vec<Rec>,
                          settled_outside: bool| {
            let mut a = 0;
            while a < idx.len() {
                let mut b = a + 1;
                while b < idx.len() && same_key(&recs[idx[a] as usize], &recs[idx[b] as usize]) {
                    b += 1;
                }
                let elsewhere =
                    || settled_outside && idx[a..b].iter().any(|&i| recs[i as usize].has(ASIDE));
                if b - a > 1 && !elsewhere() {
                    let first = recs[idx[a] as usize];
                    if idx[a + 1..b].iter().all(|&i| {
                        let r = &recs[i as usize];
                        r.same_content(&first)
                            && scopes.key(r) == scopes.key(&first)
                            && super::attest::same_attestation(attests, idx[a], i)
                    }) {
                        for &i in &idx[a + 1..b] {
                            recs[i as usize].flags |= DUP;
                            equal_pairs.push((idx[a], i));
                        }
                    } else {
                        for &i in &idx[a..b] {
                            recs[i as usize].flags |= ASIDE;
                        }
                        conflicts.push(idx[a..b].to_vec());
                    }
                }
                a = b;
            }
        };
        groups(
            by_seq,
            &|x, y| x.seq_key() == y.seq_key(),
            recs,
            outside.is_some(),
        );
        groups(
            &by_order,
            &|x, y| scopes.key(x) == scopes.key(y) && x.order_key() == y.order_key(),
            recs,
            false,
        );
        // A delivery equal to one set aside through its other key is set aside too.
        let mut changed = !conflicts.is_empty();
        while changed {
            changed = false;
            for &(a, b) in &equal_pairs {
                if recs[a as usize].has(ASIDE) != recs[b as usize].has(ASIDE) {
                    recs[a as usize].flags |= ASIDE;
                    recs[b as usize].flags |= ASIDE;
                    changed = true;
                }
            }
        }
        for members in &conflicts {
            let members: Vec<Delivery> = members
                .iter()
                .map(|&i| Delivery::of(&self.recs[i as usize]))
                .collect();
            hit_conflict(accs, &members, |d| self.shown(d.source, d.position));
        }
        if equal_pairs.is_empty() {
            return 0;
        }
        self.recs
            .iter()
            .filter(|r| r.has(DUP) && !r.has(ASIDE))
            .count() as u64
    }

    /// Gaps per emitter: from what reading noted for emitters whose seqs arrived increasing,
    /// else in one pass over the emitter's run of `by_seq` (bounded by `starts`, indexed by
    /// emitter id).
    pub(super) fn telemetry_gaps(
        &self,
        accs: &mut [Acc],
        by_seq: &[u32],
        starts: &[u32],
    ) -> Vec<EmitterReport> {
        let recs = &self.recs;
        let mut out = Vec::new();
        let mut found: Vec<(u32, u32, (i64, i64))> = Vec::new();
        let mut feeds = vec![false; accs.len()];
        for (emitter, track) in self.seqs.iter().enumerate() {
            if track.events == 0 {
                continue;
            }
            feeds.fill(false);
            found.clear();
            let (first_seq, last_seq, distinct) = if track.increasing {
                for &p in &track.props {
                    if let Some(f) = feeds.get_mut(p as usize) {
                        *f = true;
                    }
                }
                found.extend(
                    track
                        .gaps
                        .iter()
                        .map(|&(x, y)| (x, y, (recs[x as usize].ts, recs[y as usize].ts))),
                );
                (track.first, track.last, track.events)
            } else {
                let group = &by_seq[starts[emitter] as usize..starts[emitter + 1] as usize];
                for &i in group {
                    if let Some(f) = feeds.get_mut(recs[i as usize].prop as usize) {
                        *f = true;
                    }
                }
                let at = |k: usize| {
                    let r = &recs[group[k] as usize];
                    (r.seq, r.ts)
                };
                let distinct = seq_gaps(group.len(), at, |x, y, span| {
                    found.push((group[x], group[y], span));
                });
                let (first, last) = (
                    &recs[group[0] as usize],
                    &recs[group[group.len() - 1] as usize],
                );
                (first.seq, last.seq, distinct)
            };
            let name = self.strings.resolve(emitter as u32);
            let mut missing = 0;
            for &(xi, yi, span) in &found {
                let d = |i: u32| Delivery::of(&recs[i as usize]);
                let (x, y) = (d(xi), d(yi));
                missing += y.seq - x.seq - 1;
                hit_gap(accs, &feeds, name, (&x, &y, span), |d| {
                    self.shown(d.source, d.position)
                });
            }
            out.push(EmitterReport {
                emitter: name.to_string(),
                events: distinct,
                first_seq,
                last_seq,
                gaps: found.len() as u64,
                missing,
            });
        }
        out.sort_by(|a, b| a.emitter.cmp(&b.emitter));
        out
    }
}

/// What judging a duplicate key or a telemetry gap needs of one delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(super) struct Delivery {
    pub(super) seq: u64,
    pub(super) ts: i64,
    pub(super) source: u32,
    pub(super) position: u64,
    pub(super) prop: u16,
}

impl Delivery {
    pub(super) fn of(r: &Rec) -> Delivery {
        Delivery {
            seq: r.seq,
            ts: r.ts,
            source: r.source,
            position: r.position,
            prop: r.prop,
        }
    }
}

/// Counts the conflicting deliveries `members` of one key (in reading order) for each of their
/// properties, with the first one's sample naming the others (`shown`: `source:position`).
pub(super) fn hit_conflict(
    accs: &mut [Acc],
    members: &[Delivery],
    shown: impl Fn(&Delivery) -> String,
) {
    let mut props: Vec<u16> = members
        .iter()
        .map(|d| d.prop)
        .filter(|&p| p != UNATTRIBUTED)
        .collect();
    props.sort_unstable();
    props.dedup();
    let lo = members.iter().map(|d| d.ts).min().unwrap_or(0);
    let hi = members.iter().map(|d| d.ts).max().unwrap_or(0);
    let first = &members[0];
    let others: Vec<String> = members[1..].iter().map(&shown).collect();
    for p in props {
        let acc = &mut accs[p as usize];
        acc.hit(
            Reason::ConflictingDuplicate,
            1,
            (first.source, first.position),
            || Sample {
                source: shown(first),
                ts: Some(EventTime(first.ts).to_string()),
                detail: format!(
                    "differs from {} delivered under the same key",
                    others.join(", ")
                ),
            },
        );
        acc.series
            .add_time_span(lo, hi, Reason::ConflictingDuplicate);
    }
}

/// The gaps in one emitter's `n` deliveries sorted by seq (`at(k)`: the seq and time of the
/// k-th), each handed to `gap` as the positions of the last delivery before it and the first
/// after it, and the times it spans: those of every delivery of the two seqs around it (SPEC
/// §4: "over the windows between the events around the gap"), so that where a seq was delivered
/// more than once, at other times, the answer does not depend on the order they came in.
/// Returns how many distinct seqs there are.
pub(super) fn seq_gaps(
    n: usize,
    at: impl Fn(usize) -> (u64, i64),
    mut gap: impl FnMut(usize, usize, (i64, i64)),
) -> u64 {
    // The seq before, with the span of its deliveries' times and its last delivery's position.
    let mut before: Option<(u64, i64, i64, usize)> = None;
    let mut distinct = 0;
    let mut k = 0;
    while k < n {
        let (seq, ts) = at(k);
        let (mut lo, mut hi, mut end) = (ts, ts, k);
        while end + 1 < n {
            let (s, t) = at(end + 1);
            if s != seq {
                break;
            }
            (lo, hi, end) = (lo.min(t), hi.max(t), end + 1);
        }
        distinct += 1;
        if let Some((prev, plo, phi, last)) = before
            && seq > prev + 1
        {
            gap(last, k, (plo.min(lo), phi.max(hi)));
        }
        before = Some((seq, lo, hi, end));
        k = end + 1;
    }
    distinct
}

/// Counts emitter `name`'s gap between deliveries `x` and `y`, over the times `span`, for each
/// property it feeds.
pub(super) fn hit_gap(
    accs: &mut [Acc],
    feeds: &[bool],
    name: &str,
    (x, y, span): (&Delivery, &Delivery, (i64, i64)),
    shown: impl Fn(&Delivery) -> String,
) {
    for (p, _) in feeds.iter().enumerate().filter(|(_, f)| **f) {
        let acc = &mut accs[p];
        acc.hit(Reason::TelemetryGap, 1, (y.source, y.position), || Sample {
            source: shown(y),
            ts: Some(EventTime(y.ts).to_string()),
            detail: format!(
                "emitter `{name}` skipped seq {}..={} between {} and {}",
                x.seq + 1,
                y.seq - 1,
                shown(x),
                shown(y)
            ),
        });
        acc.series
            .add_time_span(span.0, span.1, Reason::TelemetryGap);
    }
}
