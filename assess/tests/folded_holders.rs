//! Holders across a fold (hostile test, session 27: a false `holds`, fixed in session 28): an
//! epoch held by one holder whose commits all folded, then committed by another holder in time
//! order. `check` finds `epoch_reuse`; so does `serve` now, since the folded high-water mark
//! keeps its epoch's holder. When a conflicting re-delivery takes a folded commit of the mark's
//! epoch away, which holders used it is no longer known: another holder's commit of it is
//! `unknown(conflicting_duplicate)`, never `holds`; its own holder's stays as it was.

mod common;

use common::{E, check, commit_from, contract_with, event, live, seqs};
use fencewatch_assess::event::{Event, Kind};
use fencewatch_assess::live::{Live, LiveOptions, View};
use fencewatch_assess::{CounterexampleKind, EventTime, History, Reason, Verdict};

fn history() -> Vec<E> {
    let commit = |ts, scope, holder| E {
        holder: Some(holder),
        ..E::new(Kind::Commit, ts, scope, 1)
    };
    let mut evs = vec![commit(100, "s", "w1")];
    // Other scopes' traffic moves the watermark far past `s`'s commit, which folds.
    for i in 0..20 {
        evs.push(commit(1_000 + i * 100, "t", "w9"));
    }
    // Another holder of epoch 1 of `s`, in time order.
    evs.push(commit(3_100, "s", "w3"));
    evs
}

#[test]
fn a_second_holder_of_an_epoch_whose_first_holder_folded_is_epoch_reuse() {
    let c = contract_with(false, 5, "10ns", "1000000ns");
    let evs = history();
    let seqs = seqs(&evs);
    let events: Vec<_> = evs.iter().zip(&seqs).map(|(e, s)| event(e, *s)).collect();
    let r = check(&c, &events);
    assert_eq!(r.properties[0].verdict, Verdict::Refuted, "check");
    assert!(
        r.properties[0]
            .counterexamples
            .iter()
            .any(|x| x.kind == CounterexampleKind::EpochReuse),
        "check: {:?}",
        r.properties[0].counterexamples
    );
    let order: Vec<usize> = (0..evs.len()).collect();
    // Nothing folded: found.
    let mut whole = live(&c, &evs, &order, common::NEVER_FOLD);
    whole.close();
    assert_eq!(
        whole.view().counterexample_count(0),
        1,
        "serve, nothing folded"
    );
    // Folding as it goes (the default retention: the lateness).
    let mut l = live(&c, &evs, &order, None);
    l.close();
    let v: View<'_> = l.view();
    assert_eq!(v.counterexample_count(0), 1, "serve finds the reuse too");
}

/// A commit by `holder` (emitter `e`, seq `seq`).
fn by(ts: i64, epoch: u64, holder: &'static str, seq: u64) -> Event<'static> {
    let mut e = commit_from(ts, "s", epoch, "e", seq);
    e.holder = Some(holder);
    e
}

/// Runs `events` through `serve` (lateness 10 ns, retention 0, closed) and `check`.
fn serve_and_check(events: &[Event<'_>]) -> (Live, fencewatch_assess::Report) {
    let c = contract_with(false, 5, "10ns", "1000000ns");
    run(c, Some(0), 1_000_000_000, events)
}

/// Runs `events` through `serve` under `c` (keeping detail `retention` ns past the horizon,
/// each event received at `received_at`, closed) and `check`.
fn run(
    c: fencewatch_assess::contract::Contract,
    retention: Option<i64>,
    received_at: i64,
    events: &[Event<'_>],
) -> (Live, fencewatch_assess::Report) {
    let mut l = Live::new(
        c.clone(),
        LiveOptions {
            retention,
            ..LiveOptions::default()
        },
    );
    let src = l.add_source("wal");
    let mut h = History::new(c);
    let hs = h.add_source("wal");
    for (i, e) in events.iter().enumerate() {
        l.push(e, src, i as u64, received_at);
        h.push(e, hs, i as u64);
    }
    l.close();
    (l, h.finish())
}

/// [`serve_and_check`]: the conflicting-duplicate count and the verdict of each, and
/// `serve`'s counterexample count.
fn both(events: &[Event<'_>]) -> ((u64, Verdict, usize), (u64, Verdict)) {
    let (l, r) = serve_and_check(events);
    let v = l.view();
    let dup = |m: &std::collections::BTreeMap<Reason, u64>| {
        m.get(&Reason::ConflictingDuplicate).copied().unwrap_or(0)
    };
    let serve = (
        dup(&v.unknown_counts(0)),
        v.assurance(0, 100_000, 200_000, i64::MAX / 4).verdict,
        v.counterexample_count(0),
    );
    (
        serve,
        (dup(&r.properties[0].unknown), r.properties[0].verdict),
    )
}

/// Other scopes' traffic moving the horizon far past `s`'s first commits, with a heartbeat.
fn traffic() -> Vec<Event<'static>> {
    let mut beat = Event::new(Kind::Heartbeat, EventTime(0));
    beat.route = Some("r2");
    let mut out = vec![beat];
    for i in 0..10 {
        out.push(commit_from(1_000 + i * 100, "t", 1, "f", i as u64 + 1));
    }
    out
}

#[test]
fn a_taken_away_holder_of_the_marks_epoch_leaves_another_holders_commit_unknown() {
    // Epoch 1 of `s` used by w1 twice, folded; a re-delivery of (e, 1) with another epoch
    // takes the first away (the mark stands on the second, whose holder is not known apart).
    let mut events = vec![by(100, 1, "w1", 1), by(110, 1, "w1", 2)];
    events.extend(traffic());
    events.push(by(2_000, 7, "w1", 1));
    // The same holder again: nothing more.
    let mut same = events.clone();
    same.push(by(2_100, 1, "w1", 3));
    let ((dup, verdict, cxs), (check_dup, check_verdict)) = both(&same);
    assert_eq!(
        (dup, verdict, cxs),
        (1, Verdict::Unknown, 0),
        "the re-delivery only"
    );
    assert_eq!((check_dup, check_verdict), (1, Verdict::Unknown));
    // Another holder: `check` finds the reuse (w1's second commit stands); `serve` cannot
    // tell, and says so.
    events.push(by(2_100, 1, "w3", 3));
    let ((dup, verdict, cxs), (_, check_verdict)) = both(&events);
    assert_eq!(check_verdict, Verdict::Refuted);
    assert_eq!((dup, verdict, cxs), (2, Verdict::Unknown, 0));
}

#[test]
fn a_mark_fallen_back_by_a_taint_leaves_holders_of_the_epoch_below_unknown() {
    // Epoch 1 by w1, epoch 2 by w2 alone (the mark rests on it), both folded; the re-delivery
    // of (e, 2) takes epoch 2 away: the mark falls back to epoch 1, whose holders were not kept.
    let mut events = vec![by(100, 1, "w1", 1), by(150, 2, "w2", 2)];
    events.extend(traffic());
    events.push(by(2_000, 7, "w2", 2));
    events.push(by(2_100, 1, "w9", 3));
    let ((dup, verdict, cxs), (_, check_verdict)) = both(&events);
    assert_eq!(check_verdict, Verdict::Refuted, "w1 and w9 in epoch 1");
    assert_eq!((dup, verdict, cxs), (2, Verdict::Unknown, 0));
}

/// Hostile test, session 27: holders w1 and w2 of one epoch in window A, then w3 in window B.
/// The reuse's representative moves to B; A stays refuted on the timeline (it was found
/// there: the `cxs` module's former representatives). An assurance over A says what the
/// timeline says, whether A's events are still kept or folded.
#[test]
fn an_assurance_over_a_former_representatives_window_says_what_the_timeline_says() {
    for retention in [Some(600_000_000_000), None] {
        // Windows of 1 s; A = [10 s, 11 s), B = [85 s, 86 s).
        let c = contract_with(false, 5, "10ns", "1000000000000ns");
        let mut l = Live::new(
            c,
            LiveOptions {
                retention,
                ..LiveOptions::default()
            },
        );
        let src = l.add_source("wal");
        let s = 1_000_000_000i64;
        let mut events = vec![
            by(10 * s + 1, 1, "w1", 1),
            by(10 * s + 2, 1, "w2", 2),
            by(85 * s, 1, "w3", 3),
        ];
        // Other scopes' traffic past both, observing the route.
        for i in 0..20 {
            events.push(commit_from((90 + i) * s, "t", 1, "f", i as u64 + 1));
        }
        for (i, e) in events.iter().enumerate() {
            l.push(e, src, i as u64, 200 * s);
        }
        let v = l.view();
        let runs = v.timeline(0, 10 * s, 11 * s, 100);
        let a = runs
            .iter()
            .find(|r| r.start_ns == 10 * s)
            .expect("window A");
        // The range (at - window, at]: A's nanoseconds.
        let over_a = v.assurance(0, 11 * s - 1, s, 200 * s);
        assert_eq!(
            (a.verdict, over_a.verdict),
            (Verdict::Refuted, Verdict::Refuted),
            "retention {retention:?}: {:?}",
            over_a.unknown
        );
        let b = v.assurance(0, 86 * s - 1, s, 200 * s);
        assert_eq!(b.verdict, Verdict::Refuted, "B, retention {retention:?}");
    }
}

/// A grant of scope `s`'s `epoch` to `holder` (emitter `e`, seq `seq`).
fn grant(ts: i64, epoch: u64, holder: &'static str, seq: u64) -> Event<'static> {
    let mut e = by(ts, epoch, holder, seq);
    e.kind = Kind::Grant;
    e.route = None;
    e
}

/// [`serve_and_check`]: `serve`'s `late_evidence` count and counterexample count, `check`'s
/// verdict.
fn late(events: &[Event<'_>]) -> (Option<u64>, usize, Verdict) {
    let (l, r) = serve_and_check(events);
    let v = l.view();
    let n = v.unknown_counts(0).get(&Reason::LateEvidence).copied();
    (n, v.counterexample_count(0), r.properties[0].verdict)
}

/// `head`, then [`traffic`] moving the horizon past it, then `tail`.
fn with(mut head: Vec<Event<'static>>, tail: Event<'static>) -> Vec<Event<'static>> {
    head.extend(traffic());
    head.push(tail);
    head
}

/// Hostile test, session 28 (F1, F2): grants arriving in order whose checks need folded
/// detail read `holds` in serve where `check` refutes: another holder's grant of an epoch
/// below the mark (whose grants were dropped), and a grant of the mark's epoch to another
/// holder than its folded commits' (a holder mismatch on a folded commit). Now
/// `unknown(late_evidence)` at the grant, never `holds`; a grant to the folded commits'
/// holder stays quiet.
#[test]
fn grants_whose_checks_need_folded_detail_are_unknown_not_holds() {
    // F1: epoch 5 granted to A, epoch 6 committed by C (the mark), epoch 5 granted to B.
    let f1 = with(
        vec![grant(5, 5, "A", 1), by(20, 6, "C", 2)],
        grant(3_000, 5, "B", 3),
    );
    assert_eq!(late(&f1), (Some(1), 0, Verdict::Refuted), "F1");
    // F2: epoch 3 committed by C (the mark, holder C), then granted to B.
    let f2 = with(vec![by(4, 3, "C", 1)], grant(3_000, 3, "B", 2));
    assert_eq!(late(&f2), (Some(1), 0, Verdict::Refuted), "F2");
    // The same grant to C: nothing to say, as in check.
    let same = with(vec![by(4, 3, "C", 1)], grant(3_000, 3, "C", 2));
    assert_eq!(
        late(&same),
        (None, 0, Verdict::Holds),
        "the folded holder's grant"
    );
    // Second round (N3): a grant naming no holder, of an epoch below the mark, after grants
    // were dropped: a regression against the dropped epoch-5 grant in check.
    let mut n3 = with(
        vec![grant(5, 5, "A", 1), by(20, 6, "C", 2)],
        grant(3_000, 4, "A", 3),
    );
    n3.last_mut().unwrap().holder = None;
    assert_eq!(late(&n3), (Some(1), 0, Verdict::Refuted), "N3");
    // N2: a commit older than the horizon of an epoch between two folded ones, earlier than
    // both: it makes the folded epoch-1 commit stale in check.
    let n2 = with(
        vec![by(100, 1, "A", 1), by(300, 3, "A", 2)],
        by(10, 2, "B", 3),
    );
    assert_eq!(late(&n2), (Some(1), 0, Verdict::Refuted), "N2, both folded");
    // The same with epoch 3 still kept (the mark is epoch 1's): the late commit is above the
    // mark, which no judgement against it covered.
    let mut kept = vec![by(100, 1, "A", 1), by(300, 3, "A", 2), by(10, 2, "B", 3)];
    kept.extend(traffic());
    assert_eq!(
        late(&kept),
        (Some(1), 0, Verdict::Refuted),
        "N2, epoch 3 kept"
    );
    // N1: in time order, but by `order` the epoch-4 commit came before the folded epoch-3
    // one (stale in check).
    let ordered = |ts, epoch, holder, seq, order| {
        let mut e = by(ts, epoch, holder, seq);
        e.order = Some(fencewatch_assess::event::Order(order));
        e
    };
    let n1 = with(
        vec![ordered(5, 3, "A", 1, 200)],
        ordered(3_000, 4, "B", 2, 100),
    );
    assert_eq!(late(&n1), (Some(1), 0, Verdict::Refuted), "N1");
    // Orders rising with time: nothing.
    let rising = with(
        vec![ordered(5, 3, "A", 1, 100)],
        ordered(3_000, 4, "B", 2, 300),
    );
    assert_eq!(late(&rising), (None, 0, Verdict::Holds), "orders rising");
    // One older than the horizon but of the only folded epoch changes nothing folded: as in
    // check, nothing (the premises property test holds serve to exactness there too).
    let quiet = with(vec![by(5, 1, "A", 1), by(30, 1, "A", 2)], by(5, 1, "A", 3));
    assert_eq!(late(&quiet), (None, 0, Verdict::Holds), "the folded epoch");
}

/// Hostile test, session 29: a resource recreated (a new incarnation) whose `order` started
/// over read `unknown(late_evidence)` in time order, where `check` says `holds`: `order`
/// orders commits within one scope and incarnation (SPEC §1, §4), so a later incarnation's
/// commits are not compared with the folded ones' orders. Within the folded events' latest
/// incarnation they still are (N1's rule).
#[test]
fn a_new_incarnation_restarting_its_order_is_not_late() {
    let ordered = |ts, inc, epoch, seq, order| {
        let mut e = by(ts, epoch, "A", seq);
        e.incarnation = fencewatch_assess::event::Incarnation(inc);
        e.order = Some(fencewatch_assess::event::Order(order));
        e
    };
    // Incarnation 0 folded at order 200; incarnation 1 starts over at order 1.
    let reset = with(vec![ordered(5, 0, 3, 1, 200)], ordered(3_000, 1, 1, 2, 1));
    assert_eq!(late(&reset), (None, 0, Verdict::Holds), "a new incarnation");
    // Both incarnations folded, the later at order 50: its next commit above that is quiet,
    // one below it precedes the folded epoch-1 commit by order (stale in check).
    let both = vec![ordered(5, 0, 3, 1, 200), ordered(100, 1, 1, 2, 50)];
    let above = with(both.clone(), ordered(3_000, 1, 2, 3, 60));
    assert_eq!(
        late(&above),
        (None, 0, Verdict::Holds),
        "above the incarnation's orders"
    );
    let below = with(both, ordered(3_000, 1, 2, 3, 40));
    assert_eq!(late(&below), (Some(1), 0, Verdict::Refuted), "below them");
}

/// Difference test against `check` (session 34, `tools/difftest` mix C): epoch 2's earliest
/// commit, by x, folded into the mark with a fence of epoch 2 naming no holder; w2 then
/// commits epoch 2 — a reuse against the mark's holder, provisional — and a re-delivery of
/// x's commit with another epoch takes it away. The mark keeps epoch 2 (the fence), its
/// earliest time now only bounded, and which holders used it is no longer known: the reuse
/// rested on the mark's holders, not on its time, and is withdrawn (it stayed, and turned
/// final: `serve` refuted where `check`, setting both deliveries aside, finds no reuse).
#[test]
fn a_reuse_through_a_mark_whose_holder_was_taken_away_is_withdrawn() {
    let mut fence = Event::new(Kind::Fence, EventTime(300));
    fence.scope = Some("s");
    fence.epoch = Some(fencewatch_assess::Epoch(2));
    fence.route = Some("r1");
    let mut events = vec![by(100, 1, "w1", 1), by(150, 2, "x", 2), fence];
    events.extend(traffic());
    events.push(by(2_100, 2, "w2", 3));
    let ((_, verdict, cxs), _) = both(&events);
    assert_eq!((verdict, cxs), (Verdict::Refuted, 1), "the reuse, before");
    // x's commit delivered again with another epoch.
    events.push(by(150, 1, "x", 2));
    let ((_, verdict, cxs), (check_dup, check_verdict)) = both(&events);
    assert_eq!((check_dup, check_verdict), (1, Verdict::Unknown), "check");
    // `serve` reads the re-delivery, older than the horizon, as late evidence.
    assert_eq!((verdict, cxs), (Verdict::Unknown, 0), "serve");
}

/// [`serve_and_check`] under a contract that requires grants: `serve`'s verdict and
/// counterexample count, `check`'s conflicting duplicates and verdict.
fn both_granted(events: &[Event<'_>]) -> ((Verdict, usize), (u64, Verdict)) {
    let c = contract_with(true, 5, "10ns", "1000000ns");
    let (l, r) = run(c, Some(0), 1_000_000_000, events);
    let v = l.view();
    let check_dup = r.properties[0]
        .unknown
        .get(&Reason::ConflictingDuplicate)
        .copied()
        .unwrap_or(0);
    (
        (
            v.assurance(0, 100_000, 200_000, i64::MAX / 4).verdict,
            v.counterexample_count(0),
        ),
        (check_dup, r.properties[0].verdict),
    )
}

/// A grant of epoch 2 of `s` to w1, folded (grants outlive the horizon), then delivered again
/// with epoch 1 under the same (emitter, seq): `check` sets both deliveries aside, so w2's
/// commit of epoch 2 is ungranted (unknown). `serve` kept the folded grant and took w2's
/// commit for a holder mismatch against it, refuted where `check` is not (difference test
/// against `check`, session 35: mix C, seed 646, shrunk to five lines). Whether the commit
/// arrives before the re-delivery (a provisional counterexample, withdrawn) or after it, and
/// whether the emitter's window forgot the grant's delivery (emitter `e`: the `grants`
/// module) or still holds it (`f`, whose later seqs the traffic sends: the `dups` module).
/// An equal re-delivery is a duplicate, and the grant stands, also when its holder's name is
/// kept shortened (over 256 bytes).
#[test]
fn a_folded_grant_delivered_again_differently_grants_nothing() {
    let long: &'static str = "w".repeat(300).leak();
    for (emitter, seq, holder) in [("e", 1, "w1"), ("f", 11, "w1"), ("e", 1, long)] {
        let grant = |epoch: u64| {
            let mut g = commit_from(100, "s", epoch, emitter, seq);
            g.kind = Kind::Grant;
            g.holder = Some(holder);
            g
        };
        let mut events = vec![grant(2)];
        events.extend(traffic());
        let commit = by(2_000, 2, "w2", 2);
        let mut before = events.clone();
        before.push(commit.clone());
        assert_eq!(
            both_granted(&before),
            ((Verdict::Refuted, 1), (0, Verdict::Refuted)),
            "a holder mismatch, before the re-delivery ({emitter}, {})",
            holder.len()
        );
        let mut equal = before.clone();
        equal.push(grant(2));
        assert_eq!(
            both_granted(&equal),
            ((Verdict::Refuted, 1), (0, Verdict::Refuted)),
            "an equal re-delivery ({emitter}, {})",
            holder.len()
        );
        let (mut after, mut between) = (events.clone(), before);
        after.extend([grant(1), commit]);
        between.push(grant(1));
        for (name, events) in [("re-delivery first", after), ("commit first", between)] {
            let (serve, check) = both_granted(&events);
            assert_eq!(check, (1, Verdict::Unknown), "check, {name} ({emitter})");
            assert_eq!(serve, (Verdict::Unknown, 0), "serve, {name} ({emitter})");
        }
    }
}

/// Epoch 2 of `s` folded from two commits, each a re-send of an epoch-1 commit with its epoch
/// changed; both originals arrive after the fold. Taking away the event the mark's earliest
/// time rested on leaves it standing on the other, its earliest time bounded; taking the other
/// away first leaves it standing on the first. The second original takes the last away:
/// nothing proves epoch 2 any more (`check` sets all four deliveries aside). A late commit of
/// epoch 1 after the bound was refuted through the mark, final at once, where `check` finds
/// nothing stale (difference test against `check`, session 35: mix C, seed 640, 58 final
/// counterexamples, the other event's original first).
#[test]
fn a_mark_whose_last_evidence_is_taken_away_refutes_nothing() {
    for first in [0, 1] {
        mark_evidence_taken_away(first);
    }
}

fn mark_evidence_taken_away(first: usize) {
    let mut events = vec![by(100, 2, "w1", 1), by(110, 2, "w1", 2)];
    events.extend(traffic());
    let mut originals = vec![by(100, 1, "w1", 1), by(110, 1, "w1", 2)];
    originals.rotate_left(first);
    let more = (0..10).map(|i| commit_from(2_000 + i * 10, "t", 1, "f", 11 + i as u64));
    let stale = by(1_895, 1, "w1", 3);
    // One original: the mark stands on the other commit, and the late commit is stale.
    let mut one = events.clone();
    one.push(originals[0].clone());
    one.extend(more.clone());
    one.push(stale.clone());
    let ((_, verdict, cxs), (_, check_verdict)) = both(&one);
    assert_eq!(
        check_verdict,
        Verdict::Refuted,
        "check, one original ({first})"
    );
    assert_eq!(
        (verdict, cxs),
        (Verdict::Refuted, 1),
        "serve, one original ({first})"
    );
    // Both: nothing stale.
    events.extend(originals);
    events.extend(more);
    events.push(stale);
    let ((_, verdict, cxs), (dup, check_verdict)) = both(&events);
    assert_eq!(
        (dup, check_verdict),
        (2, Verdict::Unknown),
        "check ({first})"
    );
    assert_eq!((verdict, cxs), (Verdict::Unknown, 0), "serve ({first})");
}

/// The timing of `fencewatch simulate`'s contracts (1 s windows, 10 ms skew, 500 ms lateness),
/// under which the difference test's histories were shrunk.
fn simulated() -> fencewatch_assess::contract::Contract {
    fencewatch_assess::contract::Contract::parse(
        "simulated.toml",
        "[[property]]\nname=\"p\"\nsubject=\"S\"\nstrategy=\"lease_epoch\"\nwindow=\"1s\"\n\
         clock_skew=\"10ms\"\nallowed_lateness=\"500ms\"\nroute_freshness=\"5m\"\n\
         [[property.route]]\nname=\"r1\"\n",
    )
    .expect("a contract")
}

/// Conflicting re-sends of events still kept say nothing of the folded ones: a stale commit
/// against a folded epoch stays found (difference test against `check`, session 35: mix G,
/// seed 620, shrunk to these seven lines; a first version of the rule above doubted the mark
/// on every conflicting delivery naming the scope, even of a kept event, and withdrew it).
#[test]
fn conflicts_among_kept_events_leave_the_mark_standing() {
    let c = simulated();
    let at = |ms: i64, epoch: u64, holder: &'static str, em: &'static str, seq: u64| {
        let mut e = commit_from(1_000_000_000_000 + ms * 1_000_000, "s", epoch, em, seq);
        e.holder = Some(holder);
        e
    };
    let events = [
        at(144, 3, "w13", "e", 1906),
        at(332, 2, "w4", "e", 1797),
        at(1_088, 3, "w13", "e", 2048),
        at(1_220, 3, "w13", "f", 1870),
        at(1_088, 2, "w13", "e", 2048),
        at(1_824, 3, "w13", "e", 2140),
        at(1_824, 2, "w13", "e", 2140),
    ];
    let (l, r) = run(c, None, 2_000_000_000_000, &events);
    assert_eq!(r.properties[0].verdict, Verdict::Refuted, "check");
    let v = l.view();
    assert_eq!(
        (v.counterexample_count(0), v.withdrawn_count(0)),
        (1, 0),
        "serve: the stale commit, not withdrawn"
    );
}

/// A reuse through the mark rests on the holders of the epoch the mark had when it was found:
/// a conflicting delivery that takes a folded event away withdraws it even when the mark has
/// moved to a higher epoch since (difference test against `check`, session 35: mix C, seed
/// 739, where it stayed and turned final; shrunk to these seven lines). w19's epoch-4 commit
/// folds, w33 commits epoch 4 (a reuse through the mark), a late epoch-5 commit moves the mark
/// up (w33's commit is stale now, as `check` finds too), then w19's commit turns out to be a
/// re-send with its epoch changed: no reuse.
#[test]
fn a_reuse_through_a_mark_that_moved_up_is_withdrawn_with_its_holder() {
    let c = simulated();
    let at = |ms: i64, scope: &'static str, epoch: u64, holder: &'static str, seq: u64| {
        let mut e = commit_from(1_000_000_000_000 + ms * 1_000_000, scope, epoch, "e", seq);
        e.holder = Some(holder);
        e
    };
    let events = [
        at(6_772, "s", 4, "w19", 862),
        at(9_348, "t", 4, "w16", 1_261),
        at(9_480, "s", 4, "w33", 1_281),
        at(8_004, "s", 5, "w33", 1_013),
        at(10_372, "u", 2, "w15", 1_400),
        at(6_772, "s", 3, "w19", 862),
        at(12_124, "v", 5, "w47", 1_624),
    ];
    let (l, r) = run(c, None, 2_000_000_000_000, &events);
    let p = &r.properties[0];
    assert_eq!(p.verdict, Verdict::Refuted, "check");
    let kinds: Vec<_> = p.counterexamples.iter().map(|c| c.kind).collect();
    assert_eq!(
        kinds,
        [CounterexampleKind::StaleCommit],
        "check: the stale commit alone"
    );
    let v = l.view();
    assert_eq!(
        (v.counterexample_count(0), v.withdrawn_count(0)),
        (1, 1),
        "serve: the stale commit, the reuse withdrawn"
    );
}
