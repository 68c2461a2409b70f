//! Conflicting deliveries and re-sends in `serve` (issue 11, item 5; SPEC §4 "Duplicates",
//! "`serve` is exact within the lateness horizon" and "Provisional counterexamples"):
//! - a re-send whose (emitter, seq) belongs to a folded event is never dropped as a duplicate,
//!   nor applied: `late_evidence` when itself older than the horizon, else
//!   `conflicting_duplicate`; an emitter that restarts its seq shows as conflicting, as in
//!   `check`;
//! - differing deliveries of one key are all set aside, whatever the arrival order: a
//!   provisional counterexample resting on the earlier one is withdrawn (listed, marked, its
//!   window revised to unknown), a final one never is;
//! - `check`'s JSON carries neither `final` nor `withdrawn`.

mod common;

use common::commit_from as commit;
use common::contract_with;
use fencewatch_assess::event::{Event, Kind};
use fencewatch_assess::live::{Live, LiveOptions, Pushed, View};
use fencewatch_assess::{Contract, EventTime, History, Reason, Verdict, Withdrawal};
use std::collections::BTreeMap;

/// A commit of scope `o` (epoch 1, route r1) without an emitter: it observes r1.
fn route_commit(ts: i64) -> Event<'static> {
    let mut e = Event::new(Kind::Commit, EventTime(ts));
    e.scope = Some("o");
    e.epoch = Some(fencewatch_assess::event::Epoch(1));
    e.route = Some("r1");
    e
}

fn beat(ts: i64, route: &'static str) -> Event<'static> {
    let mut e = Event::new(Kind::Heartbeat, EventTime(ts));
    e.route = Some(route);
    e
}

/// A contract whose routes stay observed (long freshness) and a live assessor with
/// `retention`: lateness 10 ns, or 1000 ns without a retention (nothing folds in these tests
/// then).
fn setup(retention: Option<i64>) -> (Contract, Live) {
    let lateness = if retention.is_some() {
        "10ns"
    } else {
        "1000ns"
    };
    let c = contract_with(false, 5, lateness, "1000000ns");
    let l = Live::new(
        c.clone(),
        LiveOptions {
            retention,
            ..LiveOptions::default()
        },
    );
    (c, l)
}

fn check(c: &Contract, events: &[Event<'_>]) -> fencewatch_assess::Report {
    let mut h = History::new(c.clone());
    let src = h.add_source("wal");
    for (i, e) in events.iter().enumerate() {
        h.push(e, src, i as u64);
    }
    h.finish()
}

fn push_all(l: &mut Live, events: &[Event<'_>]) -> Vec<Pushed> {
    let src = l.add_source("wal");
    events
        .iter()
        .enumerate()
        .map(|(i, e)| l.push(e, src, i as u64, 1_000_000_000))
        .collect()
}

#[test]
fn a_resend_of_a_folded_seq_is_conflicting_not_a_duplicate() {
    let (c, mut l) = setup(Some(0));
    let mut events = vec![beat(0, "r2"), commit(100, "s", 1, "e", 1)];
    // Traffic moves the horizon far past seq 1, which folds.
    for i in 0..10 {
        events.push(commit(1_000 + i * 100, "t", 1, "f", i as u64 + 1));
    }
    // The re-send: same emitter and seq, another time (and epoch): its content differs.
    events.push(commit(2_000, "s", 7, "e", 1));
    let pushed = push_all(&mut l, &events);
    assert_eq!(pushed.last(), Some(&Pushed::Assessed));
    let counts = l.view().unknown_counts(0);
    assert_eq!(
        counts.get(&Reason::ConflictingDuplicate),
        Some(&1),
        "{counts:?}"
    );
    assert_eq!(l.view().totals().3, 0, "not counted as a duplicate");
    // Not applied: scope `s` holds nothing of epoch 7.
    let s = l.scope(0, "s").unwrap();
    assert!(s.events.iter().all(|e| e.epoch != Some(7)), "{s:?}");
    assert_eq!(s.high_water.map(|h| h.epoch), Some(1));
    // As in check.
    let r = check(&c, &events);
    assert_eq!(
        r.properties[0].unknown.get(&Reason::ConflictingDuplicate),
        Some(&1)
    );
}

#[test]
fn a_resend_of_a_folded_seq_older_than_the_horizon_is_late_evidence() {
    let (_, mut l) = setup(Some(0));
    let mut events = vec![beat(0, "r2"), commit(100, "s", 1, "e", 1)];
    for i in 0..10 {
        events.push(commit(1_000 + i * 100, "t", 1, "f", i as u64 + 1));
    }
    // Older than the horizon: it cannot be compared with the folded event any more.
    events.push(commit(150, "s", 1, "e", 1));
    push_all(&mut l, &events);
    let counts = l.view().unknown_counts(0);
    assert_eq!(counts.get(&Reason::LateEvidence), Some(&1), "{counts:?}");
    assert_eq!(
        counts.get(&Reason::ConflictingDuplicate),
        None,
        "{counts:?}"
    );
    assert_eq!(l.view().totals().3, 0);
}

/// A re-send of a folded seq naming a property the contract lacks (unattributed) is
/// `unknown` in the property the emitter fed (hostile test, session 27: serve said `holds`,
/// `check` `conflicting_duplicate`): `conflicting_duplicate` within the horizon, and older
/// than it too when, as here, the folded delivery set the mark of the scope the re-send names
/// (the mark is tainted; else `late_evidence`).
#[test]
fn an_unattributed_resend_of_a_folded_seq_is_unknown_where_the_emitter_fed() {
    for (at, reason) in [
        (2_000, Reason::ConflictingDuplicate),
        (150, Reason::ConflictingDuplicate),
    ] {
        let (c, mut l) = setup(Some(0));
        let mut events = vec![beat(0, "r2"), commit(100, "s", 1, "e", 1)];
        for i in 0..10 {
            events.push(commit(1_000 + i * 100, "t", 1, "f", i as u64 + 1));
        }
        let mut resend = commit(at, "s", 7, "e", 1);
        resend.property = Some("nope");
        events.push(resend);
        let pushed = push_all(&mut l, &events);
        assert_eq!(pushed.last(), Some(&Pushed::Unattributed), "{at}");
        let counts = l.view().unknown_counts(0);
        assert_eq!(counts.get(&reason), Some(&1), "{at}: {counts:?}");
        l.close();
        let a = l.view().assurance(0, 0, i64::MAX / 4, i64::MAX / 4);
        assert_eq!(a.verdict, Verdict::Unknown, "{at}");
        // `check` finds the conflict in the first delivery's property.
        let r = check(&c, &events);
        assert_eq!(
            r.properties[0].unknown.get(&Reason::ConflictingDuplicate),
            Some(&1),
            "{at}"
        );
        assert_eq!(r.properties[0].verdict, Verdict::Unknown);
    }
}

/// A re-send of a folded seq naming another property than the folded delivery's is `unknown`
/// in the folded delivery's property too (hostile test, session 27: `p` read `holds`, `check`
/// `conflicting_duplicate`): which property that was is forgotten, so every property the
/// emitter fed is told.
#[test]
fn a_resend_of_a_folded_seq_naming_another_property_is_unknown_where_the_emitter_fed() {
    let prop = |n: &str| {
        format!(
            "[[property]]\nname=\"{n}\"\nsubject=\"S\"\nstrategy=\"lease_epoch\"\nwindow=\"100ns\"\nclock_skew=\"5ns\"\nallowed_lateness=\"10ns\"\nroute_freshness=\"1000000ns\"\n[[property.route]]\nname=\"r1\"\n"
        )
    };
    let c = Contract::parse("two.toml", &(prop("p") + &prop("q"))).unwrap();
    let mut l = Live::new(
        c.clone(),
        LiveOptions {
            retention: Some(0),
            ..LiveOptions::default()
        },
    );
    let named = |mut e: Event<'static>, p: &'static str| {
        e.property = Some(p);
        e
    };
    let mut events = vec![
        named(beat(0, "r1"), "p"),
        named(beat(0, "r1"), "q"),
        named(commit(100, "s", 1, "e", 1), "p"),
    ];
    for i in 0..10 {
        events.push(named(
            commit(1_000 + i * 100, "t", 1, "f", i as u64 + 1),
            "p",
        ));
        events.push(named(
            commit(1_000 + i * 100, "t", 1, "g", i as u64 + 1),
            "q",
        ));
    }
    // Seq 1 of `e` folded in `p`; delivered again, otherwise, naming `q`.
    events.push(named(commit(2_000, "u", 7, "e", 1), "q"));
    push_all(&mut l, &events);
    l.close();
    let r = check(&c, &events);
    for p in [0, 1] {
        assert_eq!(
            r.properties[p].unknown.get(&Reason::ConflictingDuplicate),
            Some(&1),
            "check, property {p}"
        );
        let counts = l.view().unknown_counts(p);
        assert_eq!(
            counts.get(&Reason::ConflictingDuplicate),
            Some(&1),
            "serve, property {p}: {counts:?}"
        );
    }
}

#[test]
fn an_emitter_that_restarts_its_seq_shows_as_conflicting() {
    let (c, mut l) = setup(Some(0));
    let mut events = vec![beat(0, "r2")];
    for i in 0..20 {
        events.push(commit(100 + i * 100, "s", 2, "e", i as u64 + 1));
    }
    // The emitter restarts its counter without a new id, and its new events would refute:
    // epoch 1 after epoch 2.
    for i in 0..5 {
        events.push(commit(5_000 + i * 100, "s", 1, "e", i as u64 + 1));
    }
    push_all(&mut l, &events);
    l.close();
    let r = check(&c, &events);
    let counts = l.view().unknown_counts(0);
    assert_eq!(
        counts.get(&Reason::ConflictingDuplicate),
        Some(&5),
        "{counts:?}"
    );
    // The first deliveries were folded before the restart, so their route observations stay
    // (check, setting them aside, finds route r1 silent before the first one it keeps).
    let mut want = r.properties[0].unknown.clone();
    want.remove(&Reason::RouteSilent);
    assert_eq!(counts, want);
    // Set aside, as in check: nothing refuted, nothing dropped silently.
    assert_eq!(l.view().counterexample_count(0), 0);
    assert!(r.properties[0].counterexamples.is_empty());
    assert_eq!(l.view().totals().3, 0);
}

#[test]
fn a_seq_that_jumped_beyond_the_window_is_still_compared() {
    // Emitter e's counter jumps by more than its recent window spans (2^22): the commits on
    // both sides of the jump stay comparable, so the conflicting re-deliveries below set both
    // deliveries aside (the stale epoch-1 commit refutes nothing), as in `check`. Before,
    // the jumped seqs were not kept and their re-deliveries were dropped as duplicates.
    let (c, mut l) = setup(None);
    let far = (1u64 << 22) + 100;
    let events = vec![
        beat(0, "r2"),
        commit(100, "s", 2, "e", 1),
        commit(200, "s", 1, "e", far),
        commit(300, "t", 3, "e", far + 1),
        // Re-deliveries of the three that differ from them.
        commit(200, "s", 4, "e", far),
        commit(300, "t", 5, "e", far + 1),
        commit(100, "s", 6, "e", 1),
    ];
    let pushed = push_all(&mut l, &events);
    assert!(
        !pushed.contains(&Pushed::Duplicate),
        "no re-delivery dropped as a duplicate: {pushed:?}"
    );
    l.close();
    let r = check(&c, &events);
    assert!(r.properties[0].counterexamples.is_empty());
    assert_eq!(l.view().counterexample_count(0), 0);
    let counts = l.view().unknown_counts(0);
    assert_eq!(
        counts.get(&Reason::ConflictingDuplicate),
        Some(&3),
        "{counts:?}"
    );
    assert_eq!(counts, r.properties[0].unknown);
    assert_eq!(l.view().totals().3, r.duplicates);
}

#[test]
fn a_ring_restarted_below_forgotten_seqs_does_not_take_them_for_duplicates() {
    // e/5 and e/6 fall behind the horizon and are forgotten (the emitter's window empties);
    // then a new, lower seq e/4 restarts the window below them, and a different delivery of
    // e/5 comes within the horizon. It was dropped as a duplicate of a seq "seen elsewhere"
    // (every window `holds`); it is a re-send of a folded seq: `conflicting_duplicate` in its
    // window, as `check` finds there (found by session 26's review, p09b).
    let (c, mut l) = setup(Some(0));
    let events = vec![
        beat(0, "r2"),
        route_commit(100),
        commit(100, "s", 1, "e", 5),
        commit(150, "s", 1, "e", 6),
        route_commit(500),
        commit(495, "s", 1, "e", 4),
        commit(496, "s", 1, "e", 5),
    ];
    let pushed = push_all(&mut l, &events);
    assert_eq!(pushed.last(), Some(&Pushed::Assessed), "{pushed:?}");
    l.close();
    let r = check(&c, &events);
    assert_eq!(l.view().totals().3, r.duplicates, "no duplicate counted");
    let counts = l.view().unknown_counts(0);
    assert_eq!(
        counts.get(&Reason::ConflictingDuplicate),
        Some(&1),
        "{counts:?}"
    );
    // Within the horizon (windows from [400, 500) on) serve reads as check.
    let serve_windows = common::keys::verdicts(&l.view().timeline(0, i64::MIN, i64::MAX, 1_000));
    let check_windows = common::keys::verdicts(&r.properties[0].windows);
    assert_eq!(serve_windows.len(), check_windows.len());
    assert_eq!(serve_windows[4..], check_windows[4..]);
    assert_eq!(serve_windows[4], Verdict::Unknown, "{serve_windows:?}");
}

#[test]
fn the_last_seq_forgotten_then_delivered_again_differently() {
    // Seq u64::MAX falls behind the horizon (the window's base wrapped: a debug build
    // panicked on the overflow, a release build took the seq for one never forgotten), then
    // comes again, differently, within the horizon: a re-send of a folded seq, not a duplicate.
    let (_, mut l) = setup(Some(0));
    let events = vec![
        beat(0, "r2"),
        commit(100, "s", 1, "e", u64::MAX),
        route_commit(500),
        commit(496, "s", 1, "e", u64::MAX),
    ];
    let pushed = push_all(&mut l, &events);
    assert_eq!(pushed.last(), Some(&Pushed::Assessed), "{pushed:?}");
    let counts = l.view().unknown_counts(0);
    assert_eq!(
        counts.get(&Reason::ConflictingDuplicate),
        Some(&1),
        "{counts:?}"
    );
    assert_eq!(l.view().totals().3, 0);
}

#[test]
fn a_counterexample_resting_on_a_conflicting_delivery_is_withdrawn() {
    let (c, mut l) = setup(None);
    let events = vec![
        beat(0, "r2"),
        // A bogus delivery of emitter e seq 1 arrives first: epoch 9.
        commit(100, "s", 9, "e", 1),
        // Epoch 5 after it looks stale.
        commit(250, "s", 5, "g", 1),
        // The true delivery of e/1, epoch 3: the two conflict, both are set aside.
        commit(100, "s", 3, "e", 1),
    ];
    let src = l.add_source("wal");
    for (i, e) in events[..3].iter().enumerate() {
        l.push(e, src, i as u64, 1_000_000);
    }
    let found = l.take_new_counterexamples();
    assert_eq!(found.len(), 1);
    assert_eq!(l.provisional_counterexamples(), 1);
    let page = l.view().counterexamples(None, None, None, None, None, 10);
    assert!(!page.counterexamples[0].is_final);
    assert_eq!(page.counterexamples[0].withdrawn, None);
    let json = serde_json::to_value(&page.counterexamples[0]).unwrap();
    assert_eq!(json["final"], false);
    assert!(json.get("withdrawn").is_none(), "{json}");
    l.push(&events[3], src, 3, 1_000_000);
    let gone = l.take_withdrawn_counterexamples();
    assert_eq!(gone.len(), 1);
    assert_eq!(gone[0].id, found[0].id);
    assert_eq!(l.provisional_counterexamples(), 0);
    let v = l.view();
    assert_eq!(v.counterexample_count(0), 0);
    assert_eq!(v.withdrawn_count(0), 1);
    // Still listed, marked.
    let page = v.counterexamples(None, None, None, None, None, 10);
    assert_eq!(page.counterexamples.len(), 1);
    let cx = &page.counterexamples[0];
    assert_eq!(cx.withdrawn, Some(Withdrawal::ConflictingDuplicate));
    let json = serde_json::to_value(cx).unwrap();
    assert_eq!(json["withdrawn"], "conflicting_duplicate");
    assert_eq!(v.counterexample(&cx.id).unwrap().withdrawn, cx.withdrawn);
    // Its window is unknown(conflicting_duplicate), not refuted.
    let a = v.assurance(0, 299, 300, 299);
    assert_ne!(a.verdict, Verdict::Refuted, "{a:?}");
    assert!(a.counterexamples.is_empty());
    let runs = v.timeline(0, 0, 1_000, 100);
    assert!(
        runs.iter().all(|r| r.verdict != Verdict::Refuted),
        "{runs:?}"
    );
    // The earlier delivery is set aside: its per-event reasons go with it.
    let counts = v.unknown_counts(0);
    assert_eq!(
        counts.get(&Reason::ConflictingDuplicate),
        Some(&1),
        "{counts:?}"
    );
    // As in check, which has no counterexample.
    l.close();
    let r = check(&c, &events);
    assert!(r.properties[0].counterexamples.is_empty());
    assert_eq!(
        without_silence(l.view().unknown_counts(0)),
        without_silence(r.properties[0].unknown.clone())
    );
    assert_eq!(l.view().counterexample_count(0), 0);
}

/// Reason counts without route silence: a delivery set aside keeps its route observation in
/// `serve` (observation bounds per window cannot be taken back), not in `check`.
fn without_silence(mut counts: BTreeMap<Reason, u64>) -> BTreeMap<Reason, u64> {
    counts.remove(&Reason::RouteSilent);
    counts
}

#[test]
fn the_earlier_delivery_is_set_aside_when_it_was_itself_the_stale_event() {
    let (c, mut l) = setup(None);
    let events = vec![
        beat(0, "r2"),
        commit(100, "s", 5, "g", 1),
        // e/1 with epoch 1 after epoch 5: stale.
        commit(250, "s", 1, "e", 1),
        // Another delivery of e/1, differing: both set aside.
        commit(250, "s", 6, "e", 1),
    ];
    push_all(&mut l, &events);
    assert_eq!(l.take_withdrawn_counterexamples().len(), 1);
    assert_eq!(l.view().counterexample_count(0), 0);
    l.close();
    let r = check(&c, &events);
    assert!(r.properties[0].counterexamples.is_empty());
    assert_eq!(
        without_silence(l.view().unknown_counts(0)),
        without_silence(r.properties[0].unknown.clone())
    );
}

fn held(
    ts: i64,
    epoch: u64,
    holder: &'static str,
    emitter: &'static str,
    seq: u64,
) -> Event<'static> {
    let mut e = commit(ts, "s", epoch, emitter, seq);
    e.holder = Some(holder);
    e
}

/// Per window start (100 ns windows), the verdict and whether it was revised.
fn windows(runs: &[fencewatch_assess::window::WindowRun]) -> BTreeMap<i64, (Verdict, bool)> {
    let mut out = BTreeMap::new();
    for r in runs {
        for k in 0..r.windows as i64 {
            out.insert(r.start_ns + k * 100, (r.verdict, r.revised));
        }
    }
    out
}

/// An epoch reuse is placed at its group's latest event; when a later event of the group takes
/// over, the former representative's window stays refuted (a `refuted` is retracted only when
/// its counterexample is withdrawn). So the withdrawal of the reuse takes that window back too:
/// a provisional one to what its own evidence says (as `check`), a final one to
/// `unknown(conflicting_duplicate)`, marked revised — never left refuted with nothing standing
/// there.
#[test]
fn an_epoch_reuse_withdrawn_takes_back_its_former_representatives_windows() {
    let events = vec![
        beat(0, "r2"),
        // A bogus delivery of e/1: epoch 4, holder a.
        held(50, 4, "a", "e", 1),
        // `b` holds epoch 4: a reuse with `a`, represented at 450, then at 750.
        held(450, 4, "b", "g", 1),
        held(750, 4, "b", "g", 2),
        // The true delivery of e/1: both set aside, and the reuse with them.
        held(50, 0, "a", "e", 1),
    ];
    // Nothing final: the former window reads as `check` has it.
    let (c, mut l) = setup(None);
    push_all(&mut l, &events[..4]);
    let before = windows(&l.view().timeline(0, 0, 1_000, 100));
    assert_eq!(before[&400].0, Verdict::Refuted, "{before:?}");
    assert_eq!(before[&700].0, Verdict::Refuted, "{before:?}");
    l.push(&events[4], 0, 4, 1_000_000);
    assert_eq!(l.take_withdrawn_counterexamples().len(), 1);
    l.close();
    let have = windows(&l.view().timeline(0, 0, 1_000, 100));
    let r = check(&c, &events);
    assert!(r.properties[0].counterexamples.is_empty());
    let want = windows(&r.properties[0].windows);
    assert!(have.values().all(|w| w.0 != Verdict::Refuted), "{have:?}");
    assert_eq!(have[&400], want[&400], "{have:?}");
    // The withdrawn counterexample's own window, still provisional: as `check` has it too.
    assert_eq!(have[&700], want[&700], "{have:?}");

    // The former window final, its event still kept: unknown, revised.
    let (_, mut l) = setup(Some(1_000));
    push_all(&mut l, &events[..4]);
    assert!(l.view().timeline(0, 400, 499, 1)[0].is_final);
    l.push(&events[4], 0, 4, 1_000_000);
    assert_eq!(l.take_withdrawn_counterexamples().len(), 1);
    let have = windows(&l.view().timeline(0, 0, 1_000, 100));
    assert!(have.values().all(|w| w.0 != Verdict::Refuted), "{have:?}");
    assert_eq!(have[&400], (Verdict::Unknown, true), "{have:?}");
}

/// The representative of an epoch reuse turns out to be one of conflicting deliveries: the
/// reuse stands on the earlier representative, as in `check`, and the window of the one set
/// aside is not left refuted; nor is the earlier one counted twice (withdrawing the reuse then
/// leaves no window refuted).
#[test]
fn an_epoch_reuse_representative_set_aside_takes_its_window_with_it() {
    let events = [
        beat(0, "r2"),
        held(50, 4, "a", "e", 1),
        held(450, 4, "b", "g", 1),
        held(750, 4, "b", "h", 1),
        // Another delivery of h/1, differing: both set aside.
        held(750, 2, "b", "h", 1),
        // Another delivery of e/1, differing: the reuse's witness goes.
        held(50, 0, "a", "e", 1),
    ];
    for upto in [5, 6] {
        let (c, mut l) = setup(None);
        push_all(&mut l, &events[..upto]);
        l.close();
        let r = check(&c, &events[..upto]);
        let want = windows(&r.properties[0].windows);
        let have = windows(&l.view().timeline(0, 0, 1_000, 100));
        assert_eq!(
            l.view().counterexample_count(0),
            r.properties[0].counterexamples.len(),
            "upto {upto}"
        );
        assert_eq!(have[&700], want[&700], "upto {upto}: {have:?}");
        assert_eq!(
            have[&400].0 == Verdict::Refuted,
            want[&400].0 == Verdict::Refuted,
            "upto {upto}: {have:?}"
        );
        assert!(
            upto == 5 || have.values().all(|w| w.0 != Verdict::Refuted),
            "{have:?}"
        );
    }
}

#[test]
fn a_final_counterexample_is_never_withdrawn() {
    let (_, mut l) = setup(Some(0));
    let mut events = vec![
        beat(0, "r2"),
        commit(100, "s", 9, "e", 1),
        commit(250, "s", 5, "g", 1),
    ];
    // The horizon passes both events: the counterexample is final.
    for i in 0..10 {
        events.push(commit(1_000 + i * 100, "t", 1, "f", i as u64 + 1));
    }
    let pushed = push_all(&mut l, &events);
    assert!(pushed.iter().all(|p| *p == Pushed::Assessed));
    assert_eq!(l.provisional_counterexamples(), 0);
    let page = l.view().counterexamples(None, None, None, None, None, 10);
    assert!(page.counterexamples[0].is_final, "{page:?}");
    // A conflicting delivery of the witness's key, in order: conflicting, but the
    // counterexample stands.
    l.push(&commit(2_100, "s", 3, "e", 1), 0, 99, 1_000_000);
    assert!(l.take_withdrawn_counterexamples().is_empty());
    assert_eq!(l.view().counterexample_count(0), 1);
    let counts = l.view().unknown_counts(0);
    assert_eq!(
        counts.get(&Reason::ConflictingDuplicate),
        Some(&1),
        "{counts:?}"
    );
}

/// A conflicting delivery whose window is already final counts once there, as in `check`
/// (it was placed at its own time, then again by the span from the first delivery, and the
/// final window refused to take the first back: 1,000 such keys read 1,500), and a further
/// differing delivery of the key in that window adds nothing (`check` places one span per key).
#[test]
fn a_conflict_in_a_final_window_counts_once_there() {
    let (c, mut l) = setup(Some(1_000_000));
    let mut events = vec![beat(0, "r2"), commit(100, "s", 3, "e", 1)];
    // The watermark passes window [100, 200) by far; nothing folds (long retention).
    for i in 0..10 {
        events.push(commit(1_000 + i * 100, "t", 1, "f", i as u64 + 1));
    }
    let pushed = push_all(&mut l, &events);
    assert!(pushed.iter().all(|p| *p == Pushed::Assessed));
    let finals = l.view().timeline(0, 0, 2_000, 100);
    let first = finals
        .iter()
        .find(|r| r.start_ns <= 100 && r.start_ns + 100 * r.windows as i64 > 100);
    assert!(first.is_some_and(|r| r.is_final), "{finals:?}");
    // Two more deliveries of e/1 in that window, each differing from the others.
    let again = [commit(150, "s", 4, "e", 1), commit(160, "s", 5, "e", 1)];
    for (i, e) in again.iter().enumerate() {
        assert_eq!(l.push(e, 0, 50 + i as u64, 1_000_000), Pushed::Assessed);
        events.push(e.clone());
        let a = l.view().assurance(0, 1_999, 2_000, 1_999);
        assert_eq!(
            a.unknown.get(&Reason::ConflictingDuplicate),
            Some(&1),
            "after delivery {} of the key: {:?}",
            i + 2,
            a.unknown
        );
    }
    let v = l.view();
    let mut placed = 0;
    v.windows(0, 0, 20, |w| {
        placed += w.summary.unknown[Reason::ConflictingDuplicate as usize];
    });
    assert_eq!(placed, 1, "one window holds the key's reason, once");
    assert_eq!(
        v.unknown_counts(0).get(&Reason::ConflictingDuplicate),
        Some(&1)
    );
    let r = check(&c, &events);
    assert_eq!(
        r.properties[0].unknown.get(&Reason::ConflictingDuplicate),
        Some(&1)
    );
}

#[test]
fn the_merge_keeps_the_most_settled_copy_of_a_counterexample() {
    let (c, mut provisional) = setup(None);
    let events = vec![
        beat(0, "r2"),
        commit(100, "s", 9, "e", 1),
        commit(250, "s", 5, "g", 1),
    ];
    push_all(&mut provisional, &events);
    let mut withdrawn = Live::new(c.clone(), provisional.options());
    let mut more = events.clone();
    more.push(commit(100, "s", 3, "e", 1));
    push_all(&mut withdrawn, &more);
    let mut closed = Live::new(c.clone(), provisional.options());
    push_all(&mut closed, &events);
    closed.close();
    let (sp, sw, sf) = (provisional.summary(), withdrawn.summary(), closed.summary());
    let one = |v: &View<'_>| {
        let page = v.counterexamples(None, None, None, None, None, 10);
        assert_eq!(page.counterexamples.len(), 1);
        let cx = page.counterexamples[0].clone();
        assert_eq!(v.counterexample(&cx.id).as_ref(), Some(&cx));
        (cx.is_final, cx.withdrawn.is_some())
    };
    for order in [[&sp, &sw], [&sw, &sp]] {
        let mut v = View::new(&c);
        for s in order {
            v.add_summary(s, true).unwrap();
        }
        assert_eq!(one(&v), (false, true), "withdrawn beats provisional");
        assert_eq!(v.counterexample_count(0), 0);
        assert_eq!(v.withdrawn_count(0), 1);
        assert_eq!(v.provisional_count(0), 0);
    }
    let mut v = View::new(&c);
    v.add_summary(&sw, true).unwrap();
    v.add_summary(&sf, true).unwrap();
    assert_eq!(one(&v), (true, false), "final is never withdrawn");
    let mut v = View::new(&c);
    v.add_summary(&sp, true).unwrap();
    assert_eq!(v.provisional_count(0), 1);
    // Summaries carry both marks through postcard and JSON.
    let back: fencewatch_assess::live::Summary =
        postcard::from_bytes(&postcard::to_stdvec(&sw).unwrap()).unwrap();
    assert_eq!(back, sw);
    let back: fencewatch_assess::live::Summary =
        serde_json::from_str(&serde_json::to_string(&sw).unwrap()).unwrap();
    assert_eq!(back, sw);
}

#[test]
fn checks_json_carries_neither_final_nor_withdrawn() {
    let c = contract_with(false, 5, "10ns", "1000000ns");
    let r = check(
        &c,
        &[
            beat(0, "r2"),
            commit(100, "s", 9, "e", 1),
            commit(250, "s", 5, "g", 1),
        ],
    );
    assert!(r.properties[0].counterexamples[0].is_final);
    let json = serde_json::to_value(&r).unwrap();
    let cx = &json["properties"][0]["counterexamples"][0];
    assert!(
        cx.get("final").is_none() && cx.get("withdrawn").is_none(),
        "{cx}"
    );
    assert!(cx.get("id").is_some() && cx.get("explanation").is_some());
}

/// `(b, 1)` arrives in order with epoch 2 and the epoch-1 commits after it are refuted; it
/// folds into the mark. Then its other delivery (epoch 1) arrives, older than the horizon:
/// `late_evidence`, not applied, and — as in `check`, which sets both aside — the mark no
/// longer rests on it: the provisional counterexamples resting on it (through the mark) are
/// withdrawn, the final ones stay, and the epoch-1 commits arriving in order after it are not
/// refuted (the mark fell back to epoch 1, the highest other folded epoch).
#[test]
fn a_folded_mark_resting_on_a_conflicting_delivery_falls_back() {
    let (c, mut l) = setup(Some(0));
    let mut events = vec![
        beat(0, "r2"),
        commit(50, "s", 1, "a", 1),
        commit(100, "s", 2, "b", 1),
    ];
    for (i, t) in [150, 250, 350, 450, 550].into_iter().enumerate() {
        events.push(commit(t, "s", 1, "a", i as u64 + 2));
    }
    let conflict = events.len();
    events.push(commit(100, "s", 1, "b", 1));
    for (i, t) in [650, 750, 850, 950].into_iter().enumerate() {
        events.push(commit(t, "s", 1, "a", i as u64 + 7));
    }
    let src = l.add_source("wal");
    let push = |l: &mut Live, i: usize| l.push(&events[i], src, i as u64, 1_000_000_000);
    for i in 0..conflict {
        push(&mut l, i);
    }
    assert_eq!(
        l.take_new_counterexamples().len(),
        5,
        "each epoch-1 commit is stale"
    );
    assert!(l.provisional_counterexamples() > 0);
    let standing = l.view().counterexample_count(0) - l.provisional_counterexamples();
    push(&mut l, conflict);
    let counts = l.view().unknown_counts(0);
    assert_eq!(counts.get(&Reason::LateEvidence), Some(&1), "{counts:?}");
    assert!(!l.take_withdrawn_counterexamples().is_empty());
    assert_eq!(l.provisional_counterexamples(), 0, "all withdrawn");
    assert_eq!(
        l.view().counterexample_count(0),
        standing,
        "final ones stay"
    );
    // The mark is never forgotten: shown still, no longer evidence.
    let s = l.scope(0, "s").unwrap();
    assert_eq!(s.high_water.as_ref().map(|h| h.epoch), Some(2), "{s:?}");
    for i in conflict + 1..events.len() {
        push(&mut l, i);
    }
    l.close();
    assert_eq!(
        l.take_new_counterexamples().len(),
        0,
        "nothing refuted against the set-aside delivery"
    );
    assert_eq!(l.view().counterexample_count(0), standing);
    // check sets both deliveries aside: nothing is stale.
    assert!(check(&c, &events).properties[0].counterexamples.is_empty());
}
