//! Conflicting deliveries of duplicate keys in `serve` against `check` (SPEC §4 "Duplicates",
//! §8 spans): `conflicting_duplicate` counted once per key and property named, over every
//! window from the earliest delivery to the latest; a delivery's per-event reasons taken back
//! once, whichever of its keys conflicts first. Found by reading `serve`'s duplicate
//! settlement against `check`'s (session 23's review).

mod common;

use common::keys::*;

use common::contract_with;
use common::{check, commit_from};
use fencewatch_assess::event::{Event, Kind, Order, Outcome};
use fencewatch_assess::live::Pushed;
use fencewatch_assess::{Contract, Duration, EventTime, Reason, Verdict};

// ---------------------------------------------------------------------------------------
// 1. An attestation delivered as a span without an (emitter, seq), set aside by a differing
//    re-delivery of the span, supports its premise no more (as when its (emitter, seq) conflicts).
// ---------------------------------------------------------------------------------------

fn premises_contract() -> Contract {
    let src = "[[property]]\nname=\"p\"\nsubject=\"S\"\nstrategy=\"lease_epoch\"\nwindow=\"100ns\"\nclock_skew=\"5ns\"\nallowed_lateness=\"10ns\"\nroute_freshness=\"100000ns\"\n[[property.route]]\nname=\"r1\"\n[[property.premise]]\nname=\"durable_fence\"\nmax_age=\"120ns\"\n";
    Contract::parse("premises.toml", src).unwrap()
}

fn attest(ts: i64, valid: i64) -> Event<'static> {
    let mut e = Event::new(Kind::Attestation, EventTime(ts));
    e.premise = Some("durable_fence");
    e.valid_for = Some(Duration(valid));
    e.attester = Some("ci");
    e
}

#[test]
fn r1_attestation_span_conflict_takes_back_its_support() {
    let c = premises_contract();
    let base = 1_000_000;
    let commits = [
        commit(base + 10, Some("s"), 1),
        commit(base + 90, Some("s"), 1),
    ];
    // First delivery supports window 0; the second (same key) differs (failed).
    let first = attest(base, 100);
    let mut second = attest(base, 100);
    second.outcome = Outcome::Failed;
    // check, the key being an (emitter, seq).
    let mut evs: Vec<Event> = commits.to_vec();
    evs.push(keyed(first.clone(), "k", 1));
    evs.push(keyed(second.clone(), "k", 1));
    let want = check(&c, &evs).properties[0].unknown.clone();
    // serve, the same key as an (emitter, seq): agrees with check.
    let mut s = live(&c);
    let src = s.add_source("wal");
    for (i, e) in evs.iter().enumerate() {
        s.push(e, src, i as u64, i64::MAX / 2);
    }
    s.close();
    assert_eq!(s.view().unknown_counts(0), want, "seq path");
    // serve, the key as a span id.
    let mut l = live(&c);
    let src = l.add_source("otlp");
    for (i, e) in commits.iter().enumerate() {
        l.push(e, src, i as u64, i64::MAX / 2);
    }
    assert_eq!(
        l.push_span(&first, &span(1), src, 10, i64::MAX / 2),
        Pushed::Assessed
    );
    assert_eq!(
        l.push_span(&second, &span(1), src, 11, i64::MAX / 2),
        Pushed::SpanAgain
    );
    l.close();
    assert_eq!(l.view().unknown_counts(0), want, "span path");
}

// ---------------------------------------------------------------------------------------
// 2. A delivery set aside by its span and then again by its (emitter, seq) has its per-event
//    reasons withdrawn twice: another event's missing_scope disappears.
// ---------------------------------------------------------------------------------------

#[test]
fn r2_span_then_seq_conflict_withdraws_reasons_once() {
    let c = contract_with(false, 5, "1000ns", "1000000ns");
    let mut l = live(&c);
    let src = l.add_source("otlp");
    // X: no scope (missing_scope), span A, e/1.
    let x = keyed(commit(100, None, 1), "e", 1);
    assert_eq!(
        l.push_span(&x, &span(1), src, 0, 1_000_000),
        Pushed::Assessed
    );
    // Y: another event without a scope, in another window: missing_scope, kept.
    assert_eq!(
        l.push_span(&commit(300, None, 1), &span(3), src, 1, 1_000_000),
        Pushed::Assessed
    );
    // Span A again, with a scope: differs from X, both set aside (X's missing_scope withdrawn).
    assert_eq!(
        l.push_span(&commit(100, Some("s"), 1), &span(1), src, 2, 1_000_000),
        Pushed::SpanAgain
    );
    // e/1 again under span B, differing from X: X is set aside again, by its other key.
    l.push_span(
        &keyed(commit(100, None, 2), "e", 1),
        &span(2),
        src,
        3,
        1_000_000,
    );
    let counts = l.view().unknown_counts(0);
    assert_eq!(
        counts.get(&Reason::MissingScope),
        Some(&1),
        "Y's missing_scope: {counts:?}"
    );
}

/// The same double withdrawal without spans (pre-existing): order key, then (emitter, seq).
#[test]
fn r2b_order_then_seq_conflict_withdraws_reasons_once() {
    let c = contract_with(false, 5, "1000ns", "1000000ns");
    let mut x = keyed(commit(100, Some("s"), 1), "e", 1);
    x.order = Some(Order(5));
    x.route = Some("rx"); // undeclared_route
    let mut y = commit(300, Some("t"), 1);
    y.route = Some("rx"); // undeclared_route, another event
    let mut x1 = commit(105, Some("s"), 1);
    x1.order = Some(Order(5)); // order key of x, differs (ts, route)
    let x2 = keyed(commit(110, Some("u"), 1), "e", 1); // e/1, differs
    let evs = vec![beat(0, "r2"), x, y, x1, x2];
    let want = check(&c, &evs).properties[0].unknown.clone();
    let mut l = live(&c);
    let src = l.add_source("wal");
    for (i, e) in evs.iter().enumerate() {
        l.push(e, src, i as u64, 1_000_000);
    }
    l.close();
    assert_eq!(l.view().unknown_counts(0), want);
}

// ---------------------------------------------------------------------------------------
// 3. place_conflict_again: a further delivery naming a third property places the reason
//    there but never counts it (check counts one per key and property named).
// ---------------------------------------------------------------------------------------

fn two_props() -> Contract {
    let one = |n: &str| {
        format!(
            "[[property]]\nname=\"{n}\"\nsubject=\"S\"\nstrategy=\"lease_epoch\"\nwindow=\"100ns\"\nclock_skew=\"5ns\"\nallowed_lateness=\"1000ns\"\nroute_freshness=\"1000000ns\"\n[[property.route]]\nname=\"r1\"\n"
        )
    };
    Contract::parse("two.toml", &(one("p") + &one("q"))).unwrap()
}

#[test]
fn r3_a_third_property_counts_conflicting_duplicate() {
    let c = two_props();
    let of = |mut e: Event<'static>, p: &'static str| {
        e.property = Some(p);
        e
    };
    let evs = vec![
        of(keyed(commit(100, Some("s"), 1), "e", 1), "p"),
        of(keyed(commit(100, Some("s"), 2), "e", 1), "p"),
        of(keyed(commit(100, Some("s"), 1), "e", 1), "q"),
    ];
    let r = check(&c, &evs);
    let mut l = live(&c);
    let src = l.add_source("wal");
    for (i, e) in evs.iter().enumerate() {
        l.push(e, src, i as u64, 1_000_000);
    }
    l.close();
    for p in 0..2 {
        assert_eq!(
            l.view().unknown_counts(p),
            r.properties[p].unknown,
            "property {p}"
        );
    }
}

/// The same through the new unkept-span path: heartbeat of p, commit of p, heartbeat of q.
#[test]
fn r3b_a_third_property_counts_conflicting_duplicate_span() {
    let c = two_props();
    let mut l = live(&c);
    let src = l.add_source("otlp");
    let mut b = beat(100, "r1");
    b.property = Some("p");
    l.push_span(&b, &span(1), src, 0, 1_000_000);
    let mut k = commit(100, Some("s"), 1);
    k.property = Some("p");
    assert_eq!(
        l.push_span(&k, &span(1), src, 1, 1_000_000),
        Pushed::SpanAgain
    );
    let mut b2 = beat(100, "r1");
    b2.property = Some("q");
    assert_eq!(
        l.push_span(&b2, &span(1), src, 2, 1_000_000),
        Pushed::SpanAgain
    );
    l.close();
    assert_eq!(
        l.view()
            .unknown_counts(1)
            .get(&Reason::ConflictingDuplicate),
        Some(&1)
    );
}

// ---------------------------------------------------------------------------------------
// 4. place_conflict_again: a further delivery beyond the first two places only its own
//    window; check places one span over all deliveries (windows between stay `holds`).
// ---------------------------------------------------------------------------------------

#[test]
fn r4_a_further_delivery_widens_the_span_as_check() {
    let c = contract_with(false, 5, "1000ns", "1000000ns");
    let mut evs = vec![
        beat(0, "r2"),
        commit_from(100, "s", 1, "e", 1),
        commit_from(150, "s", 2, "e", 1),
        commit_from(750, "s", 3, "e", 1),
    ];
    for (i, t) in [250, 350, 450, 550, 650, 850].into_iter().enumerate() {
        evs.push(commit_from(t, "t", 1, "f", i as u64 + 1));
    }
    let r = check(&c, &evs);
    let mut l = live(&c);
    let src = l.add_source("wal");
    for (i, e) in evs.iter().enumerate() {
        l.push(e, src, i as u64, 1_000_000);
    }
    l.close();
    let got = verdicts(&l.view().timeline(0, i64::MIN, i64::MAX, 1_000));
    let want: Vec<Verdict> = r.properties[0].windows.iter().map(|w| w.verdict).collect();
    assert_eq!(got, want);
}

// ---------------------------------------------------------------------------------------
// 6. A delivery set aside by its (emitter, seq) is not noted under its span: a later,
//    different delivery of that span is applied (and here refutes).
// ---------------------------------------------------------------------------------------

#[test]
fn r6_a_span_first_set_aside_by_its_seq_still_sets_aside_its_redelivery() {
    let c = contract_with(false, 5, "1000ns", "1000000ns");
    let mut l = live(&c);
    let src = l.add_source("otlp");
    l.push_span(&commit(10, Some("s"), 2), &span(9), src, 0, 1_000_000);
    // D1 (span B, e/1), D2 (span A, e/1, differs): both set aside by e/1.
    l.push_span(
        &keyed(commit(50, None, 1), "e", 1),
        &span(2),
        src,
        1,
        1_000_000,
    );
    l.push_span(
        &keyed(commit(60, None, 1), "e", 1),
        &span(1),
        src,
        2,
        1_000_000,
    );
    // D3: span A again, differing from D2: SPEC §4/§8 set it aside too.
    let d3 = l.push_span(&commit(100, Some("s"), 1), &span(1), src, 3, 1_000_000);
    let cxs = l
        .view()
        .counterexamples(Some(0), None, None, None, None, 100)
        .counterexamples;
    assert_eq!(d3, Pushed::SpanAgain);
    assert!(cxs.is_empty(), "{cxs:?}");
}

// ---------------------------------------------------------------------------------------
// 7. The order key of a delivery set aside on arrival by its (emitter, seq): `check` groups
//    every delivery of that key with it (the `aside` module).
// ---------------------------------------------------------------------------------------

/// `serve`'s counterexamples and unknown counts of `evs` are `check`'s.
fn as_check(evs: &[Event<'static>]) {
    let c = contract_with(false, 5, "1000ns", "1000000ns");
    let r = check(&c, evs);
    let mut l = live(&c);
    let src = l.add_source("wal");
    for (i, e) in evs.iter().enumerate() {
        l.push(e, src, i as u64, 1_000_000);
    }
    l.close();
    // Those found and withdrawn on the way are listed as withdrawn, not counted.
    let found = l.view().counterexample_count(0);
    assert_eq!(found, r.properties[0].counterexamples.len());
    assert_eq!(l.view().unknown_counts(0), r.properties[0].unknown);
    let windows: Vec<Verdict> = r.properties[0].windows.iter().map(|w| w.verdict).collect();
    assert_eq!(
        verdicts(&l.view().timeline(0, i64::MIN, i64::MAX, 1_000)),
        windows
    );
}

#[test]
fn a_later_delivery_of_the_order_key_of_a_delivery_set_aside_is_set_aside() {
    // Epoch 2 at 50; e/1 twice, differing (both set aside), the second with order 7; then
    // epoch 1 at 110 with order 7: stale if applied (serve refuted), set aside by `check`.
    as_check(&[
        beat(0, "r2"),
        ord(commit(50, Some("s"), 2), 6),
        ord(keyed(commit(100, Some("s"), 1), "e", 1), 5),
        ord(keyed(commit(105, Some("s"), 1), "e", 1), 7),
        ord(commit(110, Some("s"), 1), 7),
    ]);
}

#[test]
fn a_kept_delivery_of_the_order_key_of_a_later_delivery_set_aside_is_set_aside() {
    // The other way round: epoch 1 at 110 with order 7 kept (and stale), then e/1 twice,
    // differing, the second with order 7: the kept one is set aside with them.
    as_check(&[
        beat(0, "r2"),
        ord(commit(50, Some("s"), 2), 6),
        ord(commit(110, Some("s"), 1), 7),
        ord(keyed(commit(100, Some("s"), 1), "e", 1), 5),
        ord(keyed(commit(105, Some("s"), 1), "e", 1), 7),
    ]);
}

#[test]
fn an_equal_delivery_of_the_order_key_of_a_delivery_set_aside_is_dropped() {
    // The later delivery equals the one set aside (but for its (emitter, seq), which is no
    // part of the content): `check` drops it uncounted, and so does `serve`.
    as_check(&[
        beat(0, "r2"),
        ord(commit(50, Some("s"), 2), 6),
        ord(keyed(commit(100, Some("s"), 1), "e", 1), 5),
        ord(keyed(commit(105, Some("s"), 1), "e", 1), 7),
        ord(commit(105, Some("s"), 1), 7),
        ord(commit(107, Some("s"), 1), 7),
    ]);
}
