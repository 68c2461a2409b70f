//! The fast path of a hot scope's decision against the full decision on every event
//! (`Live::set_reference_decisions`): on hot-scope-shaped histories — long same-epoch runs by
//! one holder, hand-offs (a new grant, the next holder's first commits, sometimes within the
//! skew of the last ones), renewals, stale commits of the previous holder, commits by a holder
//! never granted, new incarnations, `order`s, rejected commits, conflicting re-sends, late
//! events, pauses that fold the scope — the whole state (counterexamples with their witnesses
//! and context, flags, reason counts and samples, windows, pending decisions) is identical
//! after every event, and so are the counterexamples reported found and withdrawn; also when
//! the fast one is checkpointed and restored on the way, and when it warms the next events'
//! scopes (`Live::warm`) before taking them. And a hot scope does take the fast
//! path: its full decisions do not grow with its events.

mod common;

use common::{E, contract_with, event, seqs};
use fencewatch_assess::event::Kind;
use fencewatch_assess::live::{Live, LiveOptions, LiveState};
use proptest::prelude::*;

const HOLDERS: [&str; 3] = ["a", "b", "c"];

/// One step of a hot-scope history: (action, scope, time step, emitter, extra).
type Step = (u8, u8, u8, u8, u8);

fn arb_step() -> impl Strategy<Value = Step> {
    (0u8..100, 0u8..8, 0u8..20, 0u8..4, any::<u8>())
}

/// How a history's commits carry `order`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ordered {
    No,
    /// Rising with time, unique.
    ByTime,
    /// Rising with arrival (late events get high orders), one commit in four without one.
    ByArrival,
}

/// Events of two scopes, most of them in time order at the scope's current epoch: see the
/// module doc. `calm`: without stale commits, holders never granted, and re-sends, so that
/// scopes stay calm (nothing found) for long runs, as most do. The second scope's events are
/// `lag` behind the first's (a slower producer: older than the watermark, in time order).
fn history(
    steps: &[Step],
    ordered: Ordered,
    unit: i64,
    calm: bool,
    (lag, lagging_hot): (i64, bool),
    names: [&'static str; 2],
) -> Vec<E> {
    let mut epoch = [1u64; 2];
    let mut inc = [0u64; 2];
    let mut holder = [0usize; 2];
    let mut t = 0i64;
    let mut evs: Vec<E> = Vec::new();
    let ev = |kind, ts, scope: usize, epoch, holder, inc| E {
        holder,
        inc,
        ..E::new(kind, ts, names[scope], epoch)
    };
    // A lease on each scope to begin with, and a route r2 observed once.
    evs.push(ev(Kind::Grant, 0, 0, 1, Some("a"), 0));
    evs.push(ev(Kind::Grant, 0, 1, 1, Some("a"), 0));
    let mut beat = ev(Kind::Heartbeat, 0, 0, 0, None, 0);
    (beat.scope, beat.epoch, beat.route) = (None, None, Some("r2"));
    evs.push(beat);
    for &(action, s, dt, emitter, extra) in steps {
        // The first scope is the hot one, unless `lagging_hot`.
        let s = usize::from(s >= if lagging_hot { 2 } else { 6 });
        let action = match action {
            71..=77 | 84..=87 if calm => 0,
            // Leases outlive the horizon: the scope is calm again when the next one comes.
            60..=67 if calm && extra % 4 != 0 => 0,
            a => a,
        };
        t += unit * [1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 2, 2, 2, 2, 5, 5, 20, 80][dt as usize];
        let t = if s == 1 { (t - lag).max(0) } else { t };
        let h = Some(HOLDERS[holder[s]]);
        let (e, i) = (epoch[s], inc[s]);
        let mut x = match action {
            // The holder's commits (and fences), now and then without naming it.
            0..=59 => {
                let mut x = ev(Kind::Commit, t, s, e, h, i);
                if extra % 7 == 0 {
                    x.kind = Kind::Fence;
                }
                if extra % 5 == 0 {
                    x.holder = None;
                }
                x
            }
            // A hand-off: the next epoch granted to the next holder.
            60..=64 => {
                epoch[s] += 1;
                holder[s] = (holder[s] + 1) % 3;
                ev(Kind::Grant, t, s, epoch[s], Some(HOLDERS[holder[s]]), i)
            }
            // A hand-off without a grant.
            65..=67 => {
                epoch[s] += 1;
                holder[s] = (holder[s] + 1) % 3;
                ev(Kind::Commit, t, s, epoch[s], Some(HOLDERS[holder[s]]), i)
            }
            // A renewal: the current epoch granted again (sometimes naming no holder, now and
            // then another holder: two holders in one epoch).
            68..=70 => {
                let h = match extra % 6 {
                    0 | 1 => None,
                    2 => Some(HOLDERS[(holder[s] + 1) % 3]),
                    _ => h,
                };
                ev(Kind::Grant, t, s, e, h, i)
            }
            // The previous holder, still committing: stale, or ambiguous within the skew.
            // (or one two epochs back, or one of the previous incarnation).
            71..=74 => match extra % 4 {
                1 => ev(
                    Kind::Commit,
                    t,
                    s,
                    e.saturating_sub(2),
                    Some(HOLDERS[(holder[s] + 1) % 3]),
                    i,
                ),
                2 if i > 0 => ev(Kind::Commit, t, s, e, h, i - 1),
                _ => ev(
                    Kind::Commit,
                    t,
                    s,
                    e.saturating_sub(1),
                    Some(HOLDERS[(holder[s] + 2) % 3]),
                    i,
                ),
            },
            // A holder that was never granted this epoch.
            75..=77 => ev(Kind::Commit, t, s, e, Some("x"), i),
            // A rejected commit, a commit without an epoch, a heartbeat.
            78..=79 => {
                let mut x = ev(Kind::Commit, t, s, e, h, i);
                x.rejected = true;
                x
            }
            80 => {
                let mut x = ev(Kind::Commit, t, s, e, h, i);
                x.epoch = None;
                x
            }
            81..=82 => {
                let mut x = ev(Kind::Heartbeat, t, s, e, None, i);
                (x.scope, x.epoch) = (None, None);
                x
            }
            // A new incarnation of the resource.
            83 => {
                inc[s] += 1;
                ev(Kind::Commit, t, s, e, h, inc[s])
            }
            // A conflicting re-send of an earlier event with an emitter.
            84..=87 => {
                let picked = (0..evs.len())
                    .rev()
                    .filter(|&j| evs[j].emitter.is_some() && evs[j].resend_of.is_none())
                    .nth(extra as usize % 8);
                match picked {
                    Some(j) if !evs.iter().any(|o| o.resend_of == Some(j)) => {
                        let mut x = evs[j].clone();
                        x.epoch = Some(x.epoch.map_or(1, |e| e + 1 + u64::from(extra % 2)));
                        x.resend_of = Some(j);
                        evs.push(x);
                    }
                    _ => {}
                }
                continue;
            }
            // A late commit (or grant): older by up to a few horizons.
            88..=93 => {
                let back = unit * i64::from(extra % 64);
                let kind = if extra % 9 == 0 {
                    Kind::Grant
                } else {
                    Kind::Commit
                };
                let e = if extra % 4 == 0 && !calm {
                    e.saturating_sub(1)
                } else {
                    e
                };
                let h = if extra % 5 == 1 && !calm {
                    Some("x")
                } else {
                    h
                };
                ev(kind, (t - back).max(0), s, e, h, i)
            }
            // Another delivery of a commit without an emitter: by its (scope, incarnation,
            // order, epoch) when ordered, equal or, with another holder, conflicting.
            94 if extra % 2 == 0 => {
                let j = (0..evs.len()).rev().find(|&j| {
                    evs[j].kind == Kind::Commit
                        && evs[j].resend_of.is_none()
                        && evs[j].emitter.is_none()
                });
                if let Some(j) = j {
                    let mut x = evs[j].clone();
                    if extra % 4 == 2 {
                        x.holder = Some("x");
                    }
                    x.resend_of = Some(j);
                    evs.push(x);
                }
                continue;
            }
            // Equal re-delivery of the last event.
            94..=95 => match evs.last() {
                Some(last) if last.emitter.is_some() => {
                    let mut x = last.clone();
                    x.resend_of = Some(evs.len() - 1);
                    x.epoch = last.epoch;
                    // Same content: a duplicate (the seq is the original's).
                    evs.push(x);
                    continue;
                }
                _ => continue,
            },
            // A commit at the same time as the last event (ties).
            _ => ev(Kind::Commit, evs.last().map_or(t, |l| l.ts), s, e, h, i),
        };
        if emitter > 0 {
            x.emitter = Some(["e1", "e2", "e3"][emitter as usize - 1]);
        }
        evs.push(x);
    }
    if ordered != Ordered::No {
        // Unique per event, for commits and fences.
        let mut idx: Vec<usize> = (0..evs.len())
            .filter(|&i| evs[i].kind.is_mutation() && evs[i].resend_of.is_none())
            .collect();
        if ordered == Ordered::ByTime {
            idx.sort_by_key(|&i| (evs[i].ts, i));
        }
        for (rank, &i) in idx.iter().enumerate() {
            if ordered == Ordered::ByTime || rank % 4 != 3 {
                evs[i].order = Some(rank as u64);
            }
        }
        for i in 0..evs.len() {
            if let Some(j) = evs[i].resend_of {
                evs[i].order = evs[j].order;
            }
        }
    }
    evs
}

fn new_live(c: &fencewatch_assess::Contract, retention: Option<i64>, reference: bool) -> Live {
    let mut l = Live::new(
        c.clone(),
        LiveOptions {
            retention,
            ..LiveOptions::default()
        },
    );
    l.set_reference_decisions(reference);
    l.add_source("wal");
    l
}

fn restored(l: &Live) -> Live {
    let bytes = postcard::to_stdvec(l.state()).unwrap();
    let state: LiveState = postcard::from_bytes(&bytes).unwrap();
    Live::restore(l.contract().clone(), state).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn the_fast_path_decides_as_the_full_decision(
        steps in prop::collection::vec(arb_step(), 20..300),
        ordered in prop_oneof![6 => Just(Ordered::No), 1 => Just(Ordered::ByTime), 1 => Just(Ordered::ByArrival)],
        grants in any::<bool>(),
        skew in prop_oneof![Just(0i64), 1i64..40],
        unit in 1i64..4,
        retention in prop_oneof![Just(None), (0i64..300).prop_map(Some)],
        cut in prop::option::weighted(0.3, 0usize..240),
        calm in any::<bool>(),
        lag in prop_oneof![Just(0i64), 0i64..300],
        lagging_hot in any::<bool>(),
        swap in any::<bool>(),
        spans in prop::bool::weighted(0.3),
    ) {
        let names = if swap { ["s2", "s1"] } else { ["s1", "s2"] };
        let evs = history(&steps, ordered, unit, calm, (lag, lagging_hot), names);
        let seqs = seqs(&evs);
        let c = contract_with(grants, skew, "20ns", "100000ns");
        let mut fast = new_live(&c, retention, false);
        let mut full = new_live(&c, retention, true);
        for (i, e) in evs.iter().enumerate() {
            if cut == Some(i) {
                fast = restored(&fast);
            }
            // The fast one warms the next events' scopes first, as the WAL's applier does
            // (`Live::warm`, `Live::warm_all`, which reads at most 32): nothing it reads changes.
            if i % 6 == 0 {
                for (j, w) in evs.iter().enumerate().skip(i).take(4) {
                    fast.warm(&event(w, seqs[j]));
                }
            } else if i % 6 == 3 {
                fast.warm_all(evs.iter().enumerate().skip(i).take(40).map(|(j, w)| event(w, seqs[j])));
            }
            let ev = event(e, seqs[i]);
            // As OTLP spans: their own provenance, one more duplicate key (a re-send shares it).
            let mut span = [0u8; 24];
            let j = e.resend_of.unwrap_or(i) as u64;
            span[..8].copy_from_slice(&j.to_le_bytes());
            // Now and then two traces share a span id (the record's span key).
            span[16..].copy_from_slice(&(j / 2).to_le_bytes());
            let (a, b) = if spans {
                (fast.push_span(&ev, &span, 0, i as u64, 1_000_000), full.push_span(&ev, &span, 0, i as u64, 1_000_000))
            } else {
                (fast.push(&ev, 0, i as u64, 1_000_000), full.push(&ev, 0, i as u64, 1_000_000))
            };
            prop_assert_eq!(a, b, "event {}: {:?}", i, e);
            prop_assert!(fast.state() == full.state(), "event {}: {:?}\nfast: {:#?}\nfull: {:#?}", i, e, fast.state(), full.state());
            prop_assert_eq!(fast.take_new_counterexamples(), full.take_new_counterexamples(), "event {}", i);
            prop_assert_eq!(fast.take_withdrawn_counterexamples(), full.take_withdrawn_counterexamples(), "event {}", i);
        }
        fast.close();
        full.close();
        prop_assert!(fast.state() == full.state());
        let page = |l: &Live| serde_json::to_string(&l.view().counterexamples(None, None, None, None, None, usize::MAX / 4)).unwrap();
        prop_assert_eq!(page(&fast), page(&full));
        let windows = |l: &Live| serde_json::to_string(&l.view().timeline(0, i64::MIN, i64::MAX, 100_000)).unwrap();
        prop_assert_eq!(windows(&fast), windows(&full));
        prop_assert_eq!(fast.view().unknown_counts(0), full.view().unknown_counts(0));
    }
}

/// The shapes of the module doc, each as one long history of one scope: the fast path takes
/// all but a few events (its full decisions stay bounded however long the scope runs), and
/// finds what the full decision finds.
#[test]
fn a_hot_scope_takes_the_fast_path() {
    let c = contract_with(true, 10, "500ns", "100000000ns");
    let commit = |ts, epoch, holder| E {
        holder,
        ..E::new(Kind::Commit, ts, "hot", epoch)
    };
    // Leases of 2,000 events 1 ns apart, each granted, the next holder's first commits within
    // the skew of the last ones (ambiguous order); 500 ns of lateness fold the scope as it
    // goes.
    let mut evs = Vec::new();
    for i in 0..20_000i64 {
        let lease = (i / 2_000) as u64;
        let h = Some(HOLDERS[lease as usize % 3]);
        if i % 2_000 == 0 {
            let mut g = commit(i, 1 + lease, h);
            g.kind = Kind::Grant;
            evs.push(g);
        } else {
            evs.push(commit(i, 1 + lease, h));
        }
    }
    let seqs = seqs(&evs);
    let mut fast = new_live(&c, None, false);
    let mut full = new_live(&c, None, true);
    for (i, e) in evs.iter().enumerate() {
        fast.push(&event(e, seqs[i]), 0, i as u64, 1_000_000);
        if i < 3_000 {
            full.push(&event(e, seqs[i]), 0, i as u64, 1_000_000);
        }
        if i + 1 == 3_000 {
            assert!(fast.state() == full.state());
        }
    }
    assert!(
        fast.full_decisions() < 2_000,
        "{} full decisions for {} events",
        fast.full_decisions(),
        evs.len()
    );
    // Every hand-off's partners within the skew are ambiguous.
    assert!(
        fast.view()
            .unknown_counts(0)
            .contains_key(&fencewatch_assess::Reason::AmbiguousOrder)
    );
    assert_eq!(fast.view().counterexample_count(0), 0);
}

/// A conflicting re-delivery sets its kept delivery aside; in a scope whose last decision
/// found nothing, that takes no full decision (a hot scope's re-sends each took one, O(n log
/// n) in what it keeps): a run of them, then new commits of another emitter, then re-sends
/// interleaved with new commits, decide what deciding every change in full decides, and the
/// first two phases take no full decision at all.
#[test]
fn conflicting_re_deliveries_into_a_calm_hot_scope_take_no_full_decision() {
    let c = contract_with(false, 10, "100000ns", "100000000ns");
    let commit = |ts, emitter, holder| E {
        emitter: Some(emitter),
        holder,
        ..E::new(Kind::Commit, ts, "hot", 1)
    };
    let mut evs: Vec<E> = (0..2_000).map(|i| commit(i, "e1", Some("a"))).collect();
    let resend = |i: usize| E {
        resend_of: Some(i),
        ..commit(i as i64, "e1", Some("b"))
    };
    // A run of conflicting re-sends, then new commits of another emitter.
    evs.extend((0..50).map(|k| resend(k * 37)));
    evs.extend((0..50).map(|k| commit(2_000 + k, "e2", Some("a"))));
    // Re-sends interleaved with new commits.
    for k in 0..50 {
        evs.push(resend(1 + k * 31));
        evs.push(commit(2_050 + k as i64, "e2", Some("a")));
    }
    let seqs = seqs(&evs);
    let mut fast = new_live(&c, None, false);
    let mut full = new_live(&c, None, true);
    let mut decisions = Vec::new();
    for (i, e) in evs.iter().enumerate() {
        if i == 2_000 || i == 2_100 {
            decisions.push(fast.full_decisions());
        }
        let a = fast.push(&event(e, seqs[i]), 0, i as u64, 1_000_000);
        let b = full.push(&event(e, seqs[i]), 0, i as u64, 1_000_000);
        assert_eq!(a, b, "event {i}");
    }
    decisions.push(fast.full_decisions());
    assert!(fast.state() == full.state());
    assert_eq!(
        fast.take_new_counterexamples(),
        full.take_new_counterexamples()
    );
    let unknown = fast.view().unknown_counts(0);
    assert_eq!(unknown, full.view().unknown_counts(0));
    assert!(unknown.contains_key(&fencewatch_assess::Reason::ConflictingDuplicate));
    // No full decision in the run of re-sends nor in the new commits after it; the
    // interleaved ones may take one after each re-send, but no more.
    assert_eq!(decisions[1], decisions[0], "{decisions:?}");
    assert!(decisions[2] - decisions[1] <= 50, "{decisions:?}");
    let scope = fast.scope(0, "hot").expect("kept");
    assert_eq!(
        scope
            .events
            .iter()
            .filter(|e| e.holder.as_deref() == Some("b"))
            .count(),
        0
    );
}

/// Folding keeps a calm scope clean only while every kept commit is at or above the new mark:
/// an `order`ed commit of epoch 1 that is clear (the epoch-2 commit earlier in time has a
/// higher order) but ungranted stays kept while epoch 2 and the only grant (of epoch 0) fold;
/// the dropped grant makes epoch 1's grants unknown, so the full decision withdraws its
/// `ungranted_epoch`, and so must the fast path.
#[test]
fn folding_below_a_kept_commit_takes_the_full_decision() {
    let c = contract_with(true, 0, "10ns", "100000ns");
    let mk = |kind, ts, epoch, order| E {
        order,
        ..E::new(kind, ts, "s", epoch)
    };
    let mut evs = vec![
        mk(Kind::Grant, 0, 0, None),
        mk(Kind::Commit, 100, 1, Some(5)),
        mk(Kind::Commit, 50, 2, Some(10)),
    ];
    for i in 0..20 {
        evs.push(mk(Kind::Commit, 110 + i, 2, Some(11 + i as u64)));
    }
    evs.push(mk(Kind::Commit, 200, 2, Some(40)));
    evs.push(mk(Kind::Commit, 210, 2, Some(41)));
    let fast = both_with(&c, &evs, Some(120));
    let scope = fast.scope(0, "s").unwrap();
    assert_eq!(scope.high_water.as_ref().map(|h| h.epoch), Some(2));
    assert!(scope.events.iter().any(|e| e.epoch == Some(1)), "{scope:?}");
}

/// A tainted mark (its epoch rested on one folded event, which a conflicting re-send took
/// away) falls back to the epoch below it, whose grant was dropped: commits of that epoch are
/// never ungranted (their grant is not known to be missing), on the fast path as in the full
/// decision.
#[test]
fn commits_below_a_tainted_mark_are_not_ungranted() {
    let c = contract_with(true, 0, "10ns", "100000ns");
    let mk = |kind, ts, epoch: Option<u64>, emitter| E {
        epoch,
        emitter,
        ..E::new(kind, ts, "s", 0)
    };
    let mut evs = vec![
        mk(Kind::Grant, 0, Some(0), None),
        mk(Kind::Commit, 10, Some(1), Some("m")),
        mk(Kind::Commit, 20, Some(2), Some("m")),
    ];
    // Everything folds: the mark is epoch 2, resting on the last commit alone; the grant of
    // epoch 0 is dropped.
    let mut beat = mk(Kind::Heartbeat, 1_000, None, None);
    beat.scope = None;
    evs.push(beat);
    // A re-send of (m, 2) with another epoch taints the mark.
    let mut resend = mk(Kind::Commit, 1_000, Some(5), Some("m"));
    resend.resend_of = Some(2);
    evs.push(resend);
    for i in 0..30 {
        evs.push(mk(Kind::Commit, 1_001 + i, Some(1), None));
    }
    let fast = both_with(&c, &evs, Some(0));
    let counts = fast.view().unknown_counts(0);
    assert!(
        counts.contains_key(&fencewatch_assess::Reason::ConflictingDuplicate),
        "{counts:?}"
    );
    // Only the first two commits (epochs 1 and 2, before any folding) are ungranted.
    assert_eq!(
        counts.get(&fencewatch_assess::Reason::UngrantedEpoch),
        Some(&2),
        "{counts:?}"
    );
    assert!(fast.full_decisions() < 25, "{}", fast.full_decisions());
}

/// A hot scope's events one by one, fast path against full decision, with the full decisions
/// the fast one took.
fn both(c: &fencewatch_assess::Contract, evs: &[E]) -> Live {
    both_with(c, evs, None)
}

fn both_with(c: &fencewatch_assess::Contract, evs: &[E], retention: Option<i64>) -> Live {
    both_each(c, evs, retention, |_, _| {})
}

/// [`both_with`], `each` seeing the fast one after event i.
fn both_each(
    c: &fencewatch_assess::Contract,
    evs: &[E],
    retention: Option<i64>,
    mut each: impl FnMut(usize, &Live),
) -> Live {
    let seqs = seqs(evs);
    let mut fast = new_live(c, retention, false);
    let mut full = new_live(c, retention, true);
    for (i, e) in evs.iter().enumerate() {
        let a = fast.push(&event(e, seqs[i]), 0, i as u64, 1_000_000);
        let b = full.push(&event(e, seqs[i]), 0, i as u64, 1_000_000);
        assert_eq!(a, b, "event {i}");
        assert!(fast.state() == full.state(), "event {i}: {e:?}");
        assert_eq!(
            fast.take_new_counterexamples(),
            full.take_new_counterexamples()
        );
        each(i, &fast);
    }
    fast
}

fn commit(ts: i64, inc: u64, epoch: u64, order: Option<u64>) -> E {
    E {
        holder: Some("a"),
        inc,
        order,
        ..E::new(Kind::Commit, ts, "s", epoch)
    }
}

/// A grant of epoch 1 and commits of it at 1..n: a grant kept, the scope takes the full
/// decision until it is hot.
fn granted_run(n: i64) -> Vec<E> {
    let mut grant = commit(0, 0, 1, None);
    grant.kind = Kind::Grant;
    let mut evs = vec![grant];
    evs.extend((1..n).map(|t| commit(t, 0, 1, None)));
    evs
}

/// The old incarnation's writer goes on after the new one began: ambiguous within the skew,
/// then stale, each decided on the fast path as the full decision does.
#[test]
fn an_old_incarnation_in_a_hot_scope() {
    let c = contract_with(false, 5, "1000ns", "100000ns");
    let mut evs = granted_run(20);
    evs.push(commit(30, 1, 1, None));
    evs.push(commit(32, 0, 1, None));
    evs.push(commit(33, 1, 1, None));
    evs.push(commit(40, 0, 1, None));
    evs.push(commit(41, 0, 1, None));
    let fast = both(&c, &evs);
    let cxs = fast
        .view()
        .counterexamples(None, None, None, None, None, 10)
        .counterexamples;
    assert_eq!(cxs.len(), 2, "{cxs:?}");
    assert!(cxs.iter().all(|x| x.kind.as_str() == "stale_incarnation"));
    assert_eq!(cxs[0].superseding.source, "wal:20");
    assert!(
        fast.view()
            .unknown_counts(0)
            .contains_key(&fencewatch_assess::Reason::AmbiguousOrder)
    );
    // The first 16 events (until it is hot), and no other, take the full decision.
    assert_eq!(fast.full_decisions(), 16);
}

/// Deliveries of a hot scope's ordered commit that share its (incarnation, order, epoch):
/// an equal one is a duplicate, another one sets both aside; a new order is not compared.
#[test]
fn order_keys_in_a_hot_scope() {
    let c = contract_with(false, 5, "1000ns", "100000ns");
    let mut evs: Vec<E> = (0..20).map(|t| commit(t, 0, 1, Some(t as u64))).collect();
    evs.push(commit(10, 0, 1, Some(10)));
    let mut other = commit(12, 0, 1, Some(12));
    other.holder = Some("b");
    evs.push(other);
    evs.push(commit(25, 0, 1, Some(25)));
    let fast = both(&c, &evs);
    let (_, _, _, duplicates) = fast.totals();
    assert_eq!(duplicates, 1);
    assert!(
        fast.view()
            .unknown_counts(0)
            .contains_key(&fencewatch_assess::Reason::ConflictingDuplicate)
    );
}

/// A hot scope's events older than the horizon, in time order among themselves (a producer
/// far behind the others): judged against the folded mark as the full decision judges them
/// — `late_evidence` where the mark cannot decide, stale where it does — and one of the mark's
/// own epoch earlier than the mark's time takes the full decision (it lowers that epoch's
/// earliest time: the late commits within the skew before it become ambiguous).
#[test]
fn late_events_in_a_hot_scope() {
    let c = contract_with(false, 20, "10ns", "100000ns");
    let mut evs = vec![commit(500, 0, 2, None), commit(510, 0, 2, None)];
    // Another scope moves the horizon far ahead: epoch 2 folds, its earliest time 500.
    let mut other = commit(2_000, 0, 1, None);
    other.scope = Some("other");
    evs.push(other);
    // Epoch 1, later than the mark's time by less than the skew: late evidence (and
    // ambiguous); by more: stale against the mark.
    evs.extend((0..18).map(|i| commit(100 + i, 0, 1, None)));
    evs.push(commit(119, 0, 2, None));
    evs.extend((0..6).map(|i| commit(505 + i * 10, 0, 1, None)));
    let fast = both_with(&c, &evs, Some(0));
    let counts = fast.view().unknown_counts(0);
    assert!(
        counts.contains_key(&fencewatch_assess::Reason::LateEvidence),
        "{counts:?}"
    );
    assert!(
        counts.contains_key(&fencewatch_assess::Reason::AmbiguousOrder),
        "{counts:?}"
    );
    assert!(fast.view().counterexample_count(0) > 0);
}

/// Events arriving out of time order at a hot scope's highest epoch: decided on the fast path
/// when they can change nothing else, and not when their `order` makes an earlier epoch's
/// commit stale (it precedes it by order).
#[test]
fn out_of_order_at_the_highest_epoch() {
    let c = contract_with(false, 5, "1000ns", "100000ns");
    let mut evs = granted_run(18);
    evs.push(commit(30, 0, 2, None));
    evs.push(commit(40, 0, 2, None));
    evs.push(commit(35, 0, 2, None));
    evs.push(commit(31, 0, 2, None));
    let fast = both(&c, &evs);
    assert_eq!(fast.full_decisions(), 16);
    // With orders: epoch 1's last commit (order 45) precedes epoch 2's (50, 51), until one of
    // epoch 2 arrives, earlier in time, with order 40.
    let mut evs: Vec<E> = evs[..18].to_vec();
    for (i, e) in evs.iter_mut().enumerate().skip(1) {
        e.order = Some(i as u64);
    }
    evs.push(commit(20, 0, 1, Some(45)));
    evs.push(commit(30, 0, 2, Some(50)));
    evs.push(commit(40, 0, 2, Some(51)));
    evs.push(commit(35, 0, 2, Some(40)));
    let fast = both(&c, &evs);
    let cxs = fast
        .view()
        .counterexamples(None, None, None, None, None, 10)
        .counterexamples;
    assert_eq!(cxs.len(), 1, "{cxs:?}");
    assert_eq!(
        (
            cxs[0].stale.source.as_str(),
            cxs[0].superseding.source.as_str()
        ),
        ("wal:18", "wal:21")
    );
}

/// A reuse through the mark left to `late_evidence` still rests on kept events: a scope whose
/// last decision found only that is not calm, so setting its representative aside (a
/// conflicting re-send) decides the scope again, which finds the reuse between kept events
/// that it replaced, and setting aside an event of that reuse's context takes it out of the
/// context. (Found by the property test above, session 34: the fast path kept the set-aside
/// fence in the context.)
#[test]
fn a_reuse_left_to_the_mark_keeps_the_scope_from_calm() {
    let c = contract_with(false, 0, "20ns", "100000ns");
    let resend = |of: &E, at: usize, epoch| E {
        epoch: Some(epoch),
        resend_of: Some(at),
        ..of.clone()
    };
    let e1 = Some("e1");
    let mut evs = with_a_mark();
    evs.extend([
        // x reuses it: a reuse between kept events (b's fence at 142 against x's commit).
        ev(Kind::Commit, 139, "s2", 2, Some("x"), None),
        ev(Kind::Fence, 140, "s2", 2, None, e1),
        ev(Kind::Fence, 196, "s1", 1, None, e1),
        ev(Kind::Fence, 142, "s2", 2, Some("b"), e1),
        // x's later commit takes the reuse over, through the mark: left to late_evidence.
        ev(Kind::Commit, 143, "s2", 2, Some("x"), e1),
        ev(Kind::Fence, 199, "s1", 1, None, e1),
    ]);
    // Conflicting re-sends of x's later commit, then of the fence in the reuse's context.
    evs.push(resend(&evs[10], 10, 4));
    evs.push(ev(Kind::Fence, 201, "s1", 1, None, e1));
    evs.push(resend(&evs[7], 7, 3));
    let fast = both(&c, &evs);
    assert_eq!(fast.view().counterexample_count(0), 1);
}

/// The same, where no decision had recorded the reuse between kept events: its representative
/// (the latest) came first and was left to the mark each time; set aside, the full decision
/// finds the reuse between the others, a counterexample the fast path must not miss (before
/// the fix it did: no counterexample where the full decision has one).
#[test]
fn a_reuse_left_to_the_mark_is_found_between_kept_events_once_its_representative_goes() {
    let c = contract_with(false, 0, "20ns", "100000ns");
    let e1 = Some("e1");
    let mut evs = with_a_mark();
    evs.extend([
        ev(Kind::Fence, 196, "s1", 1, None, None),
        // The latest first, then the earlier ones of both holders.
        ev(Kind::Commit, 143, "s2", 2, Some("x"), e1),
        ev(Kind::Fence, 142, "s2", 2, Some("b"), None),
        ev(Kind::Commit, 139, "s2", 2, Some("x"), None),
        ev(Kind::Fence, 199, "s1", 1, None, None),
    ]);
    evs.push(E {
        epoch: Some(4),
        resend_of: Some(7),
        ..evs[7].clone()
    });
    let last = evs.len() - 1;
    both_each(&c, &evs, None, |i, fast| {
        // Found only once the representative is set aside.
        let found = usize::from(i == last);
        assert_eq!(fast.view().counterexample_count(0), found, "event {i}");
    });
}

/// An event of the two tests above.
fn ev(
    kind: Kind,
    ts: i64,
    scope: &'static str,
    epoch: u64,
    holder: Option<&'static str>,
    emitter: Option<&'static str>,
) -> E {
    E {
        holder,
        emitter,
        ..E::new(kind, ts, scope, epoch)
    }
}

/// Leases on s1 and s2, and epoch 2 of s2 by b, which folds into s2's mark as s1 moves on.
fn with_a_mark() -> Vec<E> {
    vec![
        ev(Kind::Grant, 0, "s1", 1, Some("a"), None),
        ev(Kind::Grant, 0, "s2", 1, Some("a"), None),
        ev(Kind::Fence, 84, "s1", 1, None, None),
        ev(Kind::Commit, 24, "s2", 2, Some("b"), None),
        ev(Kind::Fence, 49, "s2", 2, None, None),
        ev(Kind::Fence, 184, "s1", 1, None, None),
    ]
}
