//! Property tests of the live assessor against the exact offline one:
//! - with nothing folded, `Live` finds exactly `History`'s counterexamples (id, kind, stale and
//!   witness) and reason counts, for any arrival order;
//! - with folding, it never reports a counterexample `check` would not (no refutation on an
//!   uncertain order), and what it misses is accounted for as unknown;
//! - a checkpoint taken at any point and restored gives the same final state as an
//!   uninterrupted run;
//! - with conflicting deliveries (one (emitter, seq), another epoch) in random order and
//!   nothing folded, the final counterexamples that stand are exactly `check`'s, reason counts
//!   too, and so are the final windows but where a withdrawn counterexample was placed
//!   (`unknown` there, as SPEC §4 revises it, where `check` may say `holds`) — compared when
//!   route silence agrees and there is no epoch reuse (see the test);
//! - with leases (grants) held far longer than the horizon, arriving in time order, the final
//!   counterexamples and reason counts are exactly `check`'s, with no `late_evidence`.

mod common;

use common::{
    E, NEVER_FOLD, arb_history, arb_history_with_resends, contract, contract_with, event, live,
    seqs,
};
use fencewatch_assess::event::{Epoch, Event, Kind, Seq};
use fencewatch_assess::live::{Live, LiveOptions, LiveState};
use fencewatch_assess::{Contract, EventTime, History, Reason};
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};

type Cxs = BTreeSet<(String, String, String, String)>;

fn offline(c: &Contract, evs: &[E], order: &[usize]) -> (Cxs, BTreeMap<Reason, u64>) {
    let seqs = seqs(evs);
    let mut h = History::new(c.clone());
    let src = h.add_source("wal");
    for &i in order {
        h.push(&event(&evs[i], seqs[i]), src, i as u64);
    }
    let r = h.finish();
    let p = &r.properties[0];
    let cxs = p
        .counterexamples
        .iter()
        .map(|x| {
            (
                x.id.clone(),
                x.kind.as_str().to_string(),
                x.stale.source.clone(),
                x.superseding.source.clone(),
            )
        })
        .collect();
    (cxs, p.unknown.clone())
}

fn live_cxs(l: &Live) -> Cxs {
    l.view()
        .counterexamples(None, None, None, None, None, usize::MAX / 4)
        .counterexamples
        .into_iter()
        .filter(|x| x.withdrawn.is_none())
        .map(|x| {
            (
                x.id,
                x.kind.as_str().to_string(),
                x.stale.source,
                x.superseding.source,
            )
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1500))]

    #[test]
    fn exact_when_nothing_is_folded((evs, order) in arb_history(), grants in any::<bool>(), skew in 0i64..60) {
        // Lateness beyond the history: every arrival is in time, as in `check`.
        let c = contract_with(grants, skew, "1s", "2s");
        let (cxs, mut reasons) = offline(&c, &evs, &order);
        let mut l = live(&c, &evs, &order, NEVER_FOLD);
        l.close();
        prop_assert_eq!(live_cxs(&l), cxs);
        let mut got = l.view().unknown_counts(0);
        // Route silence is decided only up to the live watermark; `check` decides every window.
        reasons.remove(&Reason::RouteSilent);
        got.remove(&Reason::RouteSilent);
        prop_assert_eq!(got, reasons);
    }

    #[test]
    fn folding_never_refutes_what_check_does_not((evs, order) in arb_history(), grants in any::<bool>(), skew in 0i64..60, retention in 0i64..200) {
        let c = contract(grants, skew);
        let (cxs, _) = offline(&c, &evs, &order);
        let l = live(&c, &evs, &order, Some(retention));
        let got = live_cxs(&l);
        // Epoch reuse is one per (scope, incarnation, epoch) group, represented by its latest
        // event, which folding can hide: compare groups.
        let key = |x: &(String, String, String, String)| {
            let i: usize = x.2.trim_start_matches("wal:").parse().unwrap();
            let e = &evs[i];
            if x.1 == "epoch_reuse" {
                (x.1.clone(), format!("{:?}/{}/{:?}/{}", e.scope, e.inc, e.epoch, e.kind == Kind::Grant))
            } else {
                (x.1.clone(), x.2.clone())
            }
        };
        let ids: BTreeSet<(String, String)> = cxs.iter().map(key).collect();
        // A holder mismatch is decided when the watermark passes the commit; a matching grant
        // that arrives later than that is late evidence and does not withdraw it (documented).
        for x in got.iter().filter(|x| x.1 != "holder_mismatch") {
            prop_assert!(ids.contains(&key(x)), "live refuted {:?}, check did not: {:?}", x, cxs);
        }
    }

    #[test]
    fn checkpoint_and_restore_anywhere((evs, order) in arb_history(), cut in 0usize..40, retention in prop_oneof![Just(None), (0i64..200).prop_map(Some)]) {
        let c = contract(false, 30);
        let cut = cut.min(order.len());
        let mut whole = live(&c, &evs, &order[..cut], retention);
        whole.push_malformed(0, 9_999, None, "line 9999: not JSON".into());
        whole.push_malformed(0, 10_000, Some(EventTime(5)), "bad epoch".into());
        {
            let seqs = seqs(&evs);
            for &i in &order[cut..] {
                whole.push(&event(&evs[i], seqs[i]), 0, i as u64, 1_000_000);
            }
        }
        let mut first = live(&c, &evs, &order[..cut], retention);
        // Malformed events (with and without a time) are part of the state too.
        first.push_malformed(0, 9_999, None, "line 9999: not JSON".into());
        first.push_malformed(0, 10_000, Some(EventTime(5)), "bad epoch".into());
        let bytes = postcard::to_stdvec(first.state()).unwrap();
        let state: LiveState = postcard::from_bytes(&bytes).unwrap();
        let mut resumed = Live::restore(c.clone(), state).unwrap();
        let seqs = seqs(&evs);
        let src = resumed.add_source("wal");
        for &i in &order[cut..] {
            resumed.push(&event(&evs[i], seqs[i]), src, i as u64, 1_000_000);
        }
        prop_assert_eq!(resumed.state(), whole.state());
    }
}

/// Per window start, the verdict, of a `check` report's windows or a live timeline.
fn verdicts(runs: &[fencewatch_assess::window::WindowRun]) -> BTreeMap<i64, String> {
    let mut out = BTreeMap::new();
    for r in runs {
        for k in 0..r.windows as i64 {
            out.insert(r.start_ns + k * 100, r.verdict.as_str().to_string());
        }
    }
    out
}

/// A lease history over two scopes, in time order: each lease granted (to `a`, `b` or `c`),
/// then commits by its holder (no holder named, so folding loses nothing of epoch reuse), now
/// and then a commit by `x`, who was granted nothing (holder mismatch), and by the previous
/// lease's owner (stale). Steps are 5–15 ns apart: leases last far longer than the horizon.
fn arb_leases() -> impl Strategy<Value = Vec<E>> {
    prop::collection::vec((0usize..2, 1i64..4, 0u8..12), 1..80).prop_map(|steps| {
        let mut epoch = [0u64; 2];
        let mut t = 0;
        let mut evs = Vec::new();
        let ev = |kind, ts, scope, epoch, holder| E {
            holder,
            ..E::new(kind, ts, scope, epoch)
        };
        let mut beat = ev(Kind::Heartbeat, 0, "s1", 0, None);
        (beat.scope, beat.epoch, beat.route) = (None, None, Some("r2"));
        evs.push(beat);
        for (s, dt, action) in steps {
            t += dt * 5;
            let scope = ["s1", "s2"][s];
            let e = epoch[s];
            match action {
                0 | 1 => {
                    epoch[s] += 1;
                    let holder = ["a", "b", "c"][(epoch[s] % 3) as usize];
                    evs.push(ev(Kind::Grant, t, scope, epoch[s], Some(holder)));
                }
                2 if e >= 2 => evs.push(ev(Kind::Commit, t, scope, e - 1, None)),
                3 if e >= 1 => evs.push(ev(Kind::Commit, t, scope, e, Some("x"))),
                _ if e >= 1 => evs.push(ev(Kind::Commit, t, scope, e, None)),
                _ => {}
            }
        }
        evs
    })
}

/// Commits over two scopes in time order, each epoch used mostly by its owner (`a`, `b` or
/// `c`), now and then by another holder (epoch reuse), by none, or by the previous owner at
/// the previous epoch (stale); a route's heartbeat. Steps are 5–15 ns apart, so with a short
/// retention the first holders of an epoch fold before the next one commits in it.
fn arb_shared_epochs() -> impl Strategy<Value = Vec<E>> {
    prop::collection::vec((0usize..2, 1i64..4, 0u8..10, 0usize..3), 1..80).prop_map(|steps| {
        let mut epoch = [1u64; 2];
        let mut t = 0;
        let mut evs = Vec::new();
        let commit = |ts, scope, epoch, holder| E {
            holder,
            ..E::new(Kind::Commit, ts, scope, epoch)
        };
        let mut beat = E::new(Kind::Heartbeat, 0, "s1", 0);
        (beat.scope, beat.epoch, beat.route) = (None, None, Some("r2"));
        evs.push(beat);
        let owner = |e: u64| ["a", "b", "c"][(e % 3) as usize];
        for (s, dt, action, who) in steps {
            t += dt * 5;
            let scope = ["s1", "s2"][s];
            let e = epoch[s];
            match action {
                0 => epoch[s] += 1,
                1 => evs.push(commit(t, scope, e, Some(["a", "b", "c"][who]))),
                2 if e >= 2 => evs.push(commit(t, scope, e - 1, Some(owner(e - 1)))),
                3 => evs.push(commit(t, scope, e, None)),
                _ => evs.push(commit(t, scope, e, Some(owner(e)))),
            }
        }
        evs
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    /// An event arriving in order never needs folded detail (SPEC §4): a holder of an epoch
    /// whose earlier holders folded is an epoch reuse in `serve` as in `check` (the folded mark
    /// keeps its epoch's holder). `serve` may keep an earlier representative of a reuse (the
    /// `cxs` module) besides `check`'s, which is the group's latest, and finds a reuse of an
    /// epoch below the mark as the stale commit it also is: every other finding and every
    /// reason count is `check`'s.
    #[test]
    fn holders_sharing_an_epoch_across_a_fold_are_found_as_check_finds_them(evs in arb_shared_epochs(), skew in 0i64..20, extra in 0i64..40) {
        let c = contract_with(false, skew, "10ns", "100000ns");
        let order: Vec<usize> = (0..evs.len()).collect();
        let (cxs, reasons) = offline(&c, &evs, &order);
        let mut l = live(&c, &evs, &order, Some(skew + extra));
        l.close();
        let got = live_cxs(&l);
        let strip = |x: &(String, String, String, String)| (x.1.clone(), x.2.clone());
        let reuse = |x: &(String, String)| x.0 == "epoch_reuse";
        let got: BTreeSet<_> = got.iter().map(strip).collect();
        let want: BTreeSet<_> = cxs.iter().map(strip).collect();
        // An epoch below the folded mark keeps no holders: a reuse of it is found as the
        // stale commit it also is (the same event refuted).
        for x in &want {
            prop_assert!(got.contains(x) || reuse(x) && got.iter().any(|y| y.1 == x.1), "{:?}: check {:?}, serve {:?}", x, want, got);
        }
        let others = |s: &BTreeSet<(String, String)>| s.iter().filter(|x| !reuse(x)).cloned().collect::<BTreeSet<_>>();
        prop_assert_eq!(others(&got), others(&want));
        prop_assert_eq!(l.view().unknown_counts(0), reasons);
    }

    #[test]
    fn exact_with_conflicting_deliveries_in_any_order((evs, order) in arb_history_with_resends(), grants in any::<bool>(), skew in 0i64..60) {
        let c = contract_with(grants, skew, "1s", "2s");
        let (cxs, mut reasons) = offline(&c, &evs, &order);
        let mut l = live(&c, &evs, &order, NEVER_FOLD);
        l.close();
        prop_assert_eq!(live_cxs(&l), cxs.clone());
        prop_assert_eq!(l.provisional_counterexamples(), 0);
        let mut got = l.view().unknown_counts(0);
        // A delivery set aside keeps its route observation in `serve`: silence may differ.
        let silence_differs = reasons.remove(&Reason::RouteSilent) != got.remove(&Reason::RouteSilent);
        prop_assert_eq!(got, reasons);
        // An epoch reuse is placed at its group's latest event, which arrival order can change:
        // `serve`'s earlier representative keeps its window refuted (the `cxs` module).
        if silence_differs || cxs.iter().any(|x| x.1 == "epoch_reuse") {
            return Ok(());
        }
        // Final windows: equal, but where a withdrawn counterexample was placed.
        let seqs = seqs(&evs);
        let mut h = History::new(c.clone());
        let src = h.add_source("wal");
        for &i in &order {
            h.push(&event(&evs[i], seqs[i]), src, i as u64);
        }
        let want = verdicts(&h.finish().properties[0].windows);
        let have = verdicts(&l.view().timeline(0, i64::MIN, i64::MAX, 100_000));
        let withdrawn: BTreeSet<i64> = l
            .view()
            .counterexamples(None, None, None, None, None, usize::MAX / 4)
            .counterexamples
            .iter()
            .filter(|x| x.withdrawn.is_some())
            .map(|x| x.at.div_euclid(100) * 100)
            .collect();
        prop_assert_eq!(have.len(), want.len());
        for (k, v) in &want {
            let got = &have[k];
            if withdrawn.contains(k) {
                prop_assert!(got == "unknown" && v != "refuted" || got == v, "window {}: serve {}, check {}", k, got, v);
            } else {
                prop_assert_eq!(got, v, "window {}", k);
            }
        }
    }

    #[test]
    fn leases_that_outlive_the_horizon_are_checked_as_check_does(evs in arb_leases(), grants in any::<bool>(), skew in 0i64..40, extra in 0i64..60) {
        // Every event arrives in time order; the retention is at least the skew, so what folds
        // certainly precedes what arrives.
        let c = contract_with(grants, skew, "10ns", "100000ns");
        let mut order: Vec<usize> = (0..evs.len()).collect();
        order.sort_by_key(|&i| (evs[i].ts, i));
        let (cxs, reasons) = offline(&c, &evs, &order);
        let mut l = live(&c, &evs, &order, Some(skew + extra));
        let live_reasons = l.view().unknown_counts(0);
        prop_assert!(!live_reasons.contains_key(&Reason::LateEvidence), "{:?}", live_reasons);
        l.close();
        // The superseding event of a stale commit may be the folded mark in `serve`.
        let strip = |x: &(String, String, String, String)| (x.0.clone(), x.1.clone(), x.2.clone());
        let got: BTreeSet<_> = live_cxs(&l).iter().map(strip).collect();
        let want: BTreeSet<_> = cxs.iter().map(strip).collect();
        prop_assert_eq!(got, want);
        for x in live_cxs(&l).iter().filter(|x| x.3 != "folded high-water mark") {
            prop_assert!(cxs.contains(x), "{:?} not in {:?}", x, cxs);
        }
        prop_assert_eq!(l.view().unknown_counts(0), reasons);
    }
}

#[test]
fn a_resumed_old_owner_is_caught_after_its_epoch_was_folded() {
    let c = contract(false, 10);
    let mut l = Live::new(
        c,
        LiveOptions {
            retention: Some(0),
            ..LiveOptions::default()
        },
    );
    let src = l.add_source("wal");
    let push = |l: &mut Live, kind, ts: i64, epoch: u64, pos: u64| {
        let mut ev = Event::new(kind, EventTime(ts));
        ev.scope = Some("order-1");
        ev.epoch = Some(Epoch(epoch));
        ev.route = Some("r1");
        l.push(&ev, src, pos, 1_000_000_000);
    };
    push(&mut l, Kind::Commit, 100, 41, 1);
    push(&mut l, Kind::Commit, 200, 42, 2);
    // Much later, other traffic moves the watermark far past both.
    let mut hb = Event::new(Kind::Heartbeat, EventTime(100_000));
    hb.route = Some("r1");
    l.push(&hb, src, 3, 1_000_000_000);
    let scope = l.scope(0, "order-1").expect("remembered");
    assert!(scope.events.is_empty(), "folded: {scope:?}");
    assert_eq!(scope.high_water.as_ref().map(|h| h.epoch), Some(42));
    // The old owner resumes.
    push(&mut l, Kind::Commit, 100_050, 41, 4);
    let page = l.view().counterexamples(None, None, None, None, None, 10);
    assert_eq!(page.counterexamples.len(), 1);
    let cx = &page.counterexamples[0];
    assert_eq!(cx.stale.epoch, Some(41));
    assert_eq!(cx.superseding.epoch, Some(42));
    assert_eq!(cx.stale.source, "wal:4");
    // A late event from before the horizon whose order against folded epochs is unknown.
    push(&mut l, Kind::Commit, 150, 40, 5);
    let counts = l.view().unknown_counts(0);
    assert!(
        counts.contains_key(&Reason::LateEvidence) || l.view().counterexample_count(0) == 2,
        "{counts:?}"
    );
}

#[test]
fn assurance_follows_the_watermark_and_the_wall_clock() {
    let c = contract(false, 10);
    let mut l = Live::new(c, LiveOptions::default());
    let src = l.add_source("wal");
    for (i, t) in (0..50).map(|i| (i, i * 10)) {
        for r in ["r1", "r2"] {
            let mut ev = Event::new(Kind::Commit, EventTime(t));
            ev.scope = Some("s");
            ev.epoch = Some(Epoch(1));
            ev.route = Some(r);
            l.push(&ev, src, i as u64, 1_000);
        }
    }
    // r2 is unfenced: unknown. Assess only what the unfenced route does not touch? It touches
    // every window, so the verdict is unknown, final up to the watermark.
    let a = l.view().assurance(0, 400, 200, 500);
    assert_eq!(a.verdict, fencewatch_assess::Verdict::Unknown);
    assert!(a.unknown.contains_key(&Reason::UnfencedRoute));
    assert!(a.is_final);
    assert!(!a.stale_evidence);
    // The wall clock runs far ahead of the watermark: stale evidence, never holds.
    let b = l.view().assurance(0, 10_000, 200, 10_000);
    assert!(b.stale_evidence);
    assert_eq!(b.verdict, fencewatch_assess::Verdict::Unknown);
    assert!(b.unknown.contains_key(&Reason::StaleEvidence));
}

fn heartbeat(ts: i64, emitter: &'static str, seq: u64) -> Event<'static> {
    let mut e = Event::new(Kind::Heartbeat, EventTime(ts));
    e.route = Some("r1");
    e.emitter = Some(emitter);
    e.seq = Some(Seq(seq));
    e
}

#[test]
fn extreme_seqs_neither_panic_nor_allocate() {
    let mut l = Live::new(contract(false, 5), LiveOptions::default());
    let src = l.add_source("http");
    l.push(&heartbeat(10, "e", u64::MAX), src, 0, 1_000);
    l.push(&heartbeat(11, "e", 0), src, 1, 1_000);
    l.push(&heartbeat(12, "e", 1 << 40), src, 2, 1_000);
    let cov = l.view().coverage(0);
    assert_eq!(cov.emitters[0].gaps, 2);
    assert!(cov.emitters[0].missing > 0);
}

#[test]
fn a_commit_whose_grant_was_folded_is_checked_against_it() {
    // Grant epoch 2 to `b`, fold it away, then `c` commits with epoch 2 in order: check says
    // holder_mismatch, and so does serve once the watermark passes the commit: the grant kept
    // its holder (SPEC §4), and the commit, not older than the horizon, is no late evidence.
    let c = contract(false, 5);
    let mut l = Live::new(
        c,
        LiveOptions {
            retention: Some(0),
            ..LiveOptions::default()
        },
    );
    let src = l.add_source("http");
    let mut g = Event::new(Kind::Grant, EventTime(3000));
    g.scope = Some("s");
    g.epoch = Some(Epoch(2));
    g.holder = Some("b");
    l.push(&g, src, 0, 1_000_000);
    l.push(&heartbeat(3990, "e", 1), src, 1, 1_000_000);
    assert!(
        l.scope(0, "s").unwrap().events.is_empty(),
        "the grant was folded"
    );
    let mut cm = Event::new(Kind::Commit, EventTime(4000));
    cm.scope = Some("s");
    cm.epoch = Some(Epoch(2));
    cm.route = Some("r1");
    cm.holder = Some("c");
    l.push(&cm, src, 2, 1_000_000);
    l.push(&heartbeat(4100, "e", 2), src, 3, 1_000_000);
    let counts = l.view().unknown_counts(0);
    assert!(!counts.contains_key(&Reason::LateEvidence), "{counts:?}");
    let page = l.view().counterexamples(None, None, None, None, None, 10);
    assert_eq!(page.counterexamples.len(), 1, "{counts:?}");
    let cx = &page.counterexamples[0];
    assert_eq!(cx.kind.as_str(), "holder_mismatch");
    assert_eq!(
        (cx.stale.source.as_str(), cx.superseding.source.as_str()),
        ("http:2", "http:0")
    );
    let a = l.view().assurance(0, 4000, 2000, 4000);
    assert_ne!(a.verdict, fencewatch_assess::Verdict::Holds, "{a:?}");
}

/// A lease held far longer than the horizon (issue 11, item 6): its grant outlives the
/// folding, so the holder's commits hold, under `grants = "required"` too, exactly as in
/// `check`; a late commit older than the horizon whose grant was dropped is late evidence.
#[test]
fn a_lease_outlives_the_horizon() {
    for required in [false, true] {
        let c = contract_with(required, 5, "10ns", "100000ns");
        let mut l = Live::new(
            c.clone(),
            LiveOptions {
                retention: Some(20),
                ..LiveOptions::default()
            },
        );
        let src = l.add_source("wal");
        let mut events = Vec::new();
        let ev = |kind, ts: i64, epoch: u64, holder: &'static str| {
            let mut e = Event::new(kind, EventTime(ts));
            e.scope = Some("s");
            e.epoch = Some(Epoch(epoch));
            e.route = Some("r1");
            e.holder = Some(holder);
            e
        };
        events.push(ev(Kind::Grant, 1_000, 1, "a"));
        // Route r2 is observed once: with a long freshness it is never silent.
        let mut beat = Event::new(Kind::Heartbeat, EventTime(1_000));
        beat.route = Some("r2");
        events.push(beat);
        for i in 0..100 {
            events.push(ev(Kind::Commit, 1_010 + i * 10, 1, "a"));
        }
        // The lease passes to `b`, who commits for as long again.
        events.push(ev(Kind::Grant, 2_100, 2, "b"));
        for i in 0..100 {
            events.push(ev(Kind::Commit, 2_110 + i * 10, 2, "b"));
        }
        let mut h = History::new(c);
        let hs = h.add_source("wal");
        for (i, e) in events.iter().enumerate() {
            l.push(e, src, i as u64, 1_000_000);
            h.push(e, hs, i as u64);
        }
        let counts = l.view().unknown_counts(0);
        assert_eq!(counts, BTreeMap::new(), "required: {required}");
        assert_eq!(l.view().counterexample_count(0), 0);
        let a = l.view().assurance(0, 3_000, 1_500, 3_000);
        assert_eq!(a.verdict, fencewatch_assess::Verdict::Holds, "{a:?}");
        l.close();
        assert_eq!(l.view().unknown_counts(0), h.finish().properties[0].unknown);
        // Late, older than the horizon: `a` commits with epoch 1, whose grant went when the
        // higher epoch 2 folded.
        let late = ev(Kind::Commit, 1_500, 1, "c");
        let mut l2 = live_of_events(&contract_with(required, 5, "10ns", "100000ns"), &events, 20);
        l2.push(&late, 0, 999, 1_000_000);
        let counts = l2.view().unknown_counts(0);
        assert!(counts.contains_key(&Reason::LateEvidence), "{counts:?}");
    }
}

fn live_of_events(c: &Contract, events: &[Event<'_>], retention: i64) -> Live {
    let mut l = Live::new(
        c.clone(),
        LiveOptions {
            retention: Some(retention),
            ..LiveOptions::default()
        },
    );
    let src = l.add_source("wal");
    for (i, e) in events.iter().enumerate() {
        l.push(e, src, i as u64, 1_000_000);
    }
    l
}

#[test]
fn other_properties_traffic_settles_a_pending_holder_mismatch() {
    let src = "[[property]]\nname=\"p\"\nsubject=\"S\"\nstrategy=\"lease_epoch\"\nwindow=\"100ns\"\nclock_skew=\"5ns\"\nallowed_lateness=\"10ns\"\nroute_freshness=\"1000000ns\"\n[[property.route]]\nname=\"r1\"\n[[property]]\nname=\"q\"\nsubject=\"S\"\nstrategy=\"lease_epoch\"\nwindow=\"100ns\"\nclock_skew=\"5ns\"\nallowed_lateness=\"10ns\"\nroute_freshness=\"1000000ns\"\n[[property.route]]\nname=\"r1\"\n";
    let c = Contract::parse("two.toml", src).unwrap();
    let mut l = Live::new(c, LiveOptions::default());
    let s = l.add_source("http");
    let ev = |k, ts: i64, prop: &'static str, holder: &'static str| {
        let mut e = Event::new(k, EventTime(ts));
        e.property = Some(prop);
        e.scope = Some("s");
        e.epoch = Some(Epoch(1));
        e.route = Some("r1");
        e.holder = Some(holder);
        e
    };
    l.push(&ev(Kind::Grant, 1000, "p", "a"), s, 0, 1_000_000);
    l.push(&ev(Kind::Commit, 1020, "p", "b"), s, 1, 1_000_000);
    l.push(&ev(Kind::Commit, 5000, "q", "a"), s, 2, 1_000_000);
    assert_eq!(
        l.view().counterexample_count(0),
        1,
        "the mismatch of p is decided"
    );
}

#[test]
fn the_timeline_stays_bounded_over_a_long_range() {
    let mut l = Live::new(contract(false, 5), LiveOptions::default());
    let src = l.add_source("http");
    let mut a = Event::new(Kind::Commit, EventTime(0));
    a.scope = Some("s");
    a.epoch = Some(Epoch(1));
    a.route = Some("r1");
    l.push(&a, src, 0, i64::MAX / 2);
    let mut b = a.clone();
    b.ts = EventTime(1_000_000_000_000); // 10^10 windows of 100 ns later
    l.push(&b, src, 1, i64::MAX / 2);
    let started = std::time::Instant::now();
    let runs = l.view().timeline(0, 0, i64::MAX, 10_000);
    assert!(runs.len() <= 10, "{}", runs.len());
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
}
