//! A delivery belongs to the group of every key it carries (SPEC §4 "Duplicates", §8 spans):
//! `serve` against `check`, from a second review of `serve`'s duplicate settlement (each test
//! failed before its fix; its doc comment says what `check` answers). Where a span takes part (which `check` cannot read), `check` is run on the
//! same history with the span written as another duplicate key of the same deliveries (an
//! (emitter, seq) or an order key), as `conflicts.rs` does.

mod common;

use common::keys::*;

use common::check;
use common::contract_with;
use fencewatch_assess::Reason;
use fencewatch_assess::event::Event;

// ---------------------------------------------------------------------------------------
// A. A delivery dropped as equal to a kept event by one key, whose other key then conflicts:
//    `check` links the equal deliveries (`equal_pairs`, settle.rs) and sets the kept event
//    aside with the conflicting group; `serve` forgot the dropped delivery's other keys.
// ---------------------------------------------------------------------------------------

/// The history of [`a1_order_equal_then_seq_conflict_sets_the_kept_event_aside`]: X (epoch 1,
/// order 7, stale against epoch 2 at order 6) kept; Y equal to X by its order key, carrying
/// e/1; Z another event under e/1.
fn a1_history() -> Vec<Event<'static>> {
    vec![
        beat(0, "r2"),
        ord(commit(50, Some("s"), 2), 6),
        ord(commit(110, Some("s"), 1), 7),
        keyed(ord(commit(110, Some("s"), 1), 7), "e", 1),
        keyed(commit(200, Some("t"), 1), "e", 1),
    ]
}

/// X kept; Y equal to X by (s, 0, 7, 1) and carrying e/1; Z differs from Y under e/1.
/// check: e/1's group {Y, Z} conflicts, so both are set aside, and X, equal to Y (set aside
/// through its other key), is set aside too: 0 counterexamples, conflicting_duplicate 1,
/// windows [holds, unknown, unknown].
/// serve, before its fix: Y is dropped as a duplicate of X by its order key (its e/1 delivery noted with no
/// scope), so Z's conflict sets nothing kept aside: X stays and refutes — 1 counterexample,
/// window 1 `refuted`. (Most serious: serve refutes where check does not.)
#[test]
fn a1_order_equal_then_seq_conflict_sets_the_kept_event_aside() {
    let c = contract();
    let evs = a1_history();
    let want = of_check(&check(&c, &evs));
    assert_eq!(want.counterexamples, 0, "check: {want:?}");
    let got = of_serve(&serve(&c, &no_spans(&evs)));
    assert_eq!(got, want);
}

/// The same through a span: X kept (order 7, no span); Y equal to X, span A (dropped by its
/// order key: `Attributed::Duplicate`, the span noted nowhere); Z span A, another event
/// (scope t, commit at 200).
/// check (span A written as (emitter `e`, seq 1): `a1_history`): 0 counterexamples,
/// conflicting_duplicate 1, X set aside.
/// serve, before its fix: Z is applied as a new event (settle_span and settle_unkept_span find nothing), X stays
/// kept: 1 counterexample, conflicting_duplicate 0. (Serious: refutes, misses the reason.)
#[test]
fn a2_order_equal_then_span_conflict_sets_the_kept_event_aside() {
    let c = contract();
    let want = of_check(&check(&c, &a1_history()));
    let evs = vec![
        (beat(0, "r2"), None),
        (ord(commit(50, Some("s"), 2), 6), None),
        (ord(commit(110, Some("s"), 1), 7), None),
        (ord(commit(110, Some("s"), 1), 7), Some(1)),
        (commit(200, Some("t"), 1), Some(1)),
    ];
    let got = of_serve(&serve(&c, &evs));
    assert_eq!(got, want);
}

/// The same through (emitter, seq) then span: X kept with e/1 (order 7, no span); Y equal to
/// X with e/1 and span A (dropped by e/1: `Seen::Duplicate` returns before the span is
/// noted); Z span A, another event.
/// check (e/1 written as the order key (s, 0, 7, 1) and span A as (emitter `e`, seq 1):
/// `a1_history`): 0 counterexamples, conflicting_duplicate 1.
/// serve, before its fix: Z applied, X kept: 1 counterexample, conflicting_duplicate 0. (Serious.)
#[test]
fn a3_seq_equal_then_span_conflict_sets_the_kept_event_aside() {
    let c = contract();
    let want = of_check(&check(&c, &a1_history()));
    let evs = vec![
        (beat(0, "r2"), None),
        (ord(commit(50, Some("s"), 2), 6), None),
        (keyed(ord(commit(110, Some("s"), 1), 7), "e", 1), None),
        (keyed(ord(commit(110, Some("s"), 1), 7), "e", 1), Some(1)),
        (commit(200, Some("t"), 1), Some(1)),
    ];
    let got = of_serve(&serve(&c, &evs));
    assert_eq!(got, want);
}

// ---------------------------------------------------------------------------------------
// B. A span whose delivery is set aside by its ORDER key (not its (emitter, seq)) is noted
//    nowhere: a later, different delivery of the span is applied.
// ---------------------------------------------------------------------------------------

/// X kept (s, order 5, ts 30); Y span A, same order key, ts 35 (differs: both set aside);
/// Z span A again, another event: epoch 1 in scope t at 110, stale against epoch 2 at 50.
/// check (span A written as (emitter `sp`, seq 1)): order group {X, Y} and sp/1 group {Y, Z}
/// both conflict: 0 counterexamples, conflicting_duplicate 2.
/// serve, before its fix: Y goes `Attributed::Aside` through settle_order, its span neither indexed nor noted
/// unkept; Z is applied and refutes: 1 counterexample, conflicting_duplicate 1. (Serious.)
#[test]
fn b1_span_set_aside_by_its_order_key_sets_aside_its_redelivery() {
    let c = contract();
    let base = vec![
        beat(0, "r2"),
        ord(commit(50, Some("t"), 2), 6),
        ord(commit(30, Some("s"), 1), 5),
    ];
    let mut for_check = base.clone();
    for_check.push(keyed(ord(commit(35, Some("s"), 1), 5), "sp", 1));
    for_check.push(keyed(ord(commit(110, Some("t"), 1), 7), "sp", 1));
    let want = of_check(&check(&c, &for_check));
    assert_eq!(want.counterexamples, 0, "check: {want:?}");
    let mut evs = no_spans(&base);
    evs.push((ord(commit(35, Some("s"), 1), 5), Some(1)));
    evs.push((ord(commit(110, Some("t"), 1), 7), Some(1)));
    let got = of_serve(&serve(&c, &evs));
    assert_eq!(got, want);
}

// ---------------------------------------------------------------------------------------
// C. A key marked conflicted because ANOTHER key of its first delivery conflicted: a later
//    different delivery of it finds no entry in the conflicts table, and `place_conflict_again`
//    (resettle.rs) only places a reason, never counting the key's own conflict.
// ---------------------------------------------------------------------------------------

/// D1 (span B, e/1, no scope, ts 50) and D2 (span A, e/1, no scope, ts 60) conflict by e/1;
/// D3 (span A, scope s, ts 100) differs from D2 by span A.
/// check counts once per key group whose deliveries differ (settle.rs `hit_conflict` per
/// group): e/1 {D1, D2} and span A {D2, D3} — conflicting_duplicate 2, as it does when the
/// second key is an order key (serve agrees there, through the `aside` table). `check` reads
/// no spans and an event carries one (emitter, seq), so the count is asserted directly.
/// serve, before its fix: D2's span is noted `conflicted` by its e/1 conflict, with no `Span(A)` entry in the
/// conflicts table; D3 takes the fallback of place_conflict_again: conflicting_duplicate 1.
#[test]
fn c1_span_marked_conflicted_by_its_seq_counts_its_own_conflict() {
    let c = contract();
    let evs = vec![
        (beat(0, "r2"), None),
        (keyed(commit(50, None, 1), "e", 1), Some(2)),
        (keyed(commit(60, None, 1), "e", 1), Some(1)),
        (commit(100, Some("s"), 1), Some(1)),
    ];
    let l = serve(&c, &evs);
    let counts = l.view().unknown_counts(0);
    assert_eq!(
        counts.get(&Reason::ConflictingDuplicate),
        Some(&2),
        "{counts:?}"
    );
}

/// The seq side: X a heartbeat with span A and e/1 (kept in no scope); Y span A, another
/// route (differs: conflict on span A, which marks X's e/1 delivery conflicted in
/// take_back_unkept); Z e/1, no span, a different heartbeat at 150.
/// check (per key group): span A {X, Y} and e/1 {X, Z} both conflict — conflicting_duplicate
/// 2, the second over [100, 150].
/// serve, before its fix: Z finds e/1 `conflicted` with no `Seq(e, 1)` entry in the conflicts table: placed,
/// not counted — conflicting_duplicate 1.
#[test]
fn c2_seq_marked_conflicted_by_its_span_counts_its_own_conflict() {
    let c = contract();
    let evs = vec![
        (keyed(beat(100, "r1"), "e", 1), Some(1)),
        (beat(100, "r2"), Some(1)),
        (keyed(beat(150, "r1"), "e", 1), None),
    ];
    let l = serve(&c, &evs);
    let counts = l.view().unknown_counts(0);
    assert_eq!(
        counts.get(&Reason::ConflictingDuplicate),
        Some(&2),
        "{counts:?}"
    );
}

// ---------------------------------------------------------------------------------------
// D. A set-aside delivery kept in no scope keeps its route observation in `serve` (README
//    "Re-sends and conflicting deliveries" documents it); `check` sets it aside whole.
// ---------------------------------------------------------------------------------------

// ---------------------------------------------------------------------------------------
// D. A delivery kept in no scope, set aside, observes no route (`check` sets it aside whole;
//    `serve` kept its route observation).
// ---------------------------------------------------------------------------------------

/// Route r2's only observations are two heartbeats under e/1 at 150 and 160 (they differ:
/// both set aside); commits on r1 at 10, 110, 210, 310; freshness 200ns, windows 100ns.
/// check: the heartbeats observe nothing, r2 is silent everywhere: windows [unknown, unknown,
/// unknown, unknown], route_silent 4, conflicting_duplicate 1.
/// serve kept the first heartbeat's observation: window 2 ([200, 300), r2 seen at 150) was
/// `holds`, route_silent 2.
#[test]
fn d1_a_heartbeat_set_aside_by_its_seq_observes_no_route() {
    let c = contract_with(false, 5, "10ns", "200ns");
    let evs = vec![
        commit(10, Some("s"), 1),
        commit(110, Some("s"), 1),
        keyed(beat(150, "r2"), "e", 1),
        keyed(beat(160, "r2"), "e", 1),
        commit(210, Some("s"), 1),
        commit(310, Some("s"), 1),
    ];
    let want = of_check(&check(&c, &evs));
    let got = of_serve(&serve(&c, &no_spans(&evs)));
    assert_eq!(got, want);
}

/// The same through span A (`check` reading it as e/1): the first heartbeat, a span kept in no
/// scope, is set aside by the second delivery of its span and observes nothing either.
#[test]
fn d2_a_heartbeat_set_aside_by_its_span_observes_no_route() {
    let c = contract_with(false, 5, "10ns", "200ns");
    let evs = vec![
        commit(10, Some("s"), 1),
        commit(110, Some("s"), 1),
        keyed(beat(150, "r2"), "e", 1),
        keyed(beat(160, "r2"), "e", 1),
        commit(210, Some("s"), 1),
        commit(310, Some("s"), 1),
    ];
    let want = of_check(&check(&c, &evs));
    let spanned: Vec<(Event<'static>, Option<u8>)> = evs
        .iter()
        .map(|e| match e.seq {
            Some(_) => {
                let mut e = e.clone();
                (e.emitter, e.seq) = (None, None);
                (e, Some(1))
            }
            None => (e.clone(), None),
        })
        .collect();
    assert_eq!(of_serve(&serve(&c, &spanned)), want);
}
