//! Events with a provenance of their own (OTLP spans, SPEC §8 "Provenance"): the span names the
//! event in findings, keys its counterexample id whatever its WAL position, and is one more
//! duplicate key (SPEC §4 "Duplicates"): an equal re-delivery is dropped, a different one
//! (another scope included) sets both aside.

mod common;

use common::contract_with;
use fencewatch_assess::event::{Epoch, Event, Kind};
use fencewatch_assess::live::{Live, LiveOptions, Pushed, SpanId};
use fencewatch_assess::{EventTime, Reason, Verdict};

const A: &str = "otlp:0af7651916cd43dd8448eb211c80319c/b7ad6b7169203331";
const B: &str = "otlp:0af7651916cd43dd8448eb211c80319c/00f067aa0ba902b7";

/// The ids `otlp:<trace>/<span>` names.
fn id(s: &str) -> SpanId {
    let hex = s.strip_prefix("otlp:").unwrap().replace('/', "");
    let mut out = [0u8; 24];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap();
    }
    out
}

fn commit(ts: i64, epoch: u64) -> Event<'static> {
    let mut e = Event::new(Kind::Commit, EventTime(ts));
    e.scope = Some("s");
    e.epoch = Some(Epoch(epoch));
    e.route = Some("r1");
    e
}

fn live() -> Live {
    Live::new(
        contract_with(false, 5, "1000ns", "1000000ns"),
        LiveOptions::default(),
    )
}

/// A resumed old owner: epoch 2 commits at 10 (span B), epoch 1 at 100 (span A, stale).
fn resumed(l: &mut Live, first: u64) -> Vec<Pushed> {
    let src = l.add_source("otlp");
    vec![
        l.push_span(&commit(10, 2), &id(B), src, first, 1_000_000),
        l.push_span(&commit(100, 1), &id(A), src, first + 1, 1_000_000),
    ]
}

fn cxs(l: &Live) -> Vec<fencewatch_assess::Counterexample> {
    l.view()
        .counterexamples(Some(0), None, None, None, None, 100)
        .counterexamples
}

#[test]
fn a_span_names_its_counterexample_and_keys_its_id_whatever_its_position() {
    let (mut a, mut b) = (live(), live());
    resumed(&mut a, 0);
    resumed(&mut b, 7_000);
    let (ca, cb) = (cxs(&a), cxs(&b));
    assert_eq!(ca.len(), 1);
    assert_eq!(ca[0].stale.source, A);
    assert_eq!(ca[0].superseding.source, B);
    assert_eq!(
        ca[0].id, cb[0].id,
        "the id hashes the span, not the WAL offset"
    );
    // The same events by position get another id.
    let mut c = live();
    let src = c.add_source("otlp");
    c.push(&commit(10, 2), src, 0, 1_000_000);
    c.push(&commit(100, 1), src, 1, 1_000_000);
    let cc = cxs(&c);
    assert_eq!(cc[0].stale.source, "otlp:1");
    assert_ne!(cc[0].id, ca[0].id);
}

#[test]
fn a_span_delivered_twice_is_one_event() {
    let mut l = live();
    resumed(&mut l, 0);
    let again = resumed(&mut l, 2);
    assert_eq!(again, vec![Pushed::Duplicate, Pushed::Duplicate]);
    assert_eq!(cxs(&l).len(), 1);
    assert_eq!(l.totals().3, 2, "two duplicates counted");
    assert_eq!(
        l.view()
            .unknown_counts(0)
            .get(&Reason::ConflictingDuplicate),
        None
    );
}

#[test]
fn a_span_delivered_again_with_other_content_sets_both_aside() {
    let mut l = live();
    resumed(&mut l, 0);
    let src = l.add_source("otlp");
    // Span A again, another epoch: which is true is not known.
    let other = l.push_span(&commit(100, 3), &id(A), src, 2, 1_000_000);
    assert_eq!(other, Pushed::SpanAgain);
    set_aside(&l);
}

/// Both deliveries of span A set aside: `conflicting_duplicate` once, the counterexample that
/// rested on it still listed but withdrawn, nothing refuted.
fn set_aside(l: &Live) {
    let counts = l.view().unknown_counts(0);
    assert_eq!(counts.get(&Reason::ConflictingDuplicate), Some(&1));
    let c = cxs(l);
    assert_eq!(c.len(), 1, "still listed");
    assert!(
        c[0].withdrawn.is_some(),
        "the counterexample rested on span A"
    );
    let a = l.view().assurance(0, 200, 1_000, 200);
    assert_ne!(a.verdict, Verdict::Refuted);
}

#[test]
fn a_span_delivered_again_naming_another_scope_sets_both_aside() {
    let mut l = live();
    resumed(&mut l, 0);
    let src = l.add_source("otlp");
    // Span A again, as the same commit of another scope: scope is content (SPEC §4).
    let mut elsewhere = commit(100, 1);
    elsewhere.scope = Some("t");
    let other = l.push_span(&elsewhere, &id(A), src, 2, 1_000_000);
    assert_eq!(other, Pushed::SpanAgain, "not taken as a second event");
    set_aside(&l);
    // A third delivery, in a third scope, is set aside too; the first scope's equal one also.
    elsewhere.scope = Some("u");
    assert_eq!(
        l.push_span(&elsewhere, &id(A), src, 3, 1_000_000),
        Pushed::SpanAgain
    );
    assert_ne!(
        l.push_span(&commit(100, 1), &id(A), src, 4, 1_000_000),
        Pushed::Assessed
    );
    set_aside(&l);
}

#[test]
fn a_span_with_a_seq_or_an_order_delivered_again_is_settled_as_a_span() {
    // Its (emitter, seq) or order key, being its first delivery's too, would find that
    // delivery as well, but take this one as another event (archived again: hostile test,
    // session 21).
    for keyed in ["seq", "order"] {
        let mut l = live();
        let src = l.add_source("otlp");
        let mut first = commit(10, 2);
        first.emitter = Some("em");
        if keyed == "seq" {
            first.seq = Some(fencewatch_assess::event::Seq(1));
        } else {
            first.order = Some(fencewatch_assess::event::Order(5));
        }
        assert_eq!(
            l.push_span(&first, &id(B), src, 0, 1_000_000),
            Pushed::Assessed
        );
        assert_eq!(
            l.push_span(&first, &id(B), src, 1, 1_000_000),
            Pushed::Duplicate,
            "{keyed}"
        );
        let mut elsewhere = first.clone();
        elsewhere.scope = Some("t");
        assert_eq!(
            l.push_span(&elsewhere, &id(B), src, 2, 1_000_000),
            Pushed::SpanAgain,
            "{keyed}: not taken as another event"
        );
        let mut other_holder = first.clone();
        other_holder.holder = Some("h2");
        assert_eq!(
            l.push_span(&other_holder, &id(B), src, 3, 1_000_000),
            Pushed::SpanAgain,
            "{keyed}"
        );
        let counts = l.view().unknown_counts(0);
        assert!(
            counts.contains_key(&Reason::ConflictingDuplicate),
            "{keyed}"
        );
    }
}

#[test]
fn a_span_delivered_again_as_an_event_not_kept_in_a_scope_sets_both_aside() {
    // As a heartbeat, without a scope, naming a property the contract lacks: each differs in
    // content from the kept commit of span A (hostile test, session 21: the counterexample
    // stood, and the re-delivery was archived again).
    type Change = (&'static str, fn(&mut Event<'static>));
    let changes: [Change; 3] = [
        ("heartbeat", |e| e.kind = Kind::Heartbeat),
        ("no scope", |e| e.scope = None),
        ("another property", |e| e.property = Some("nope")),
    ];
    for (what, change) in changes {
        let mut l = live();
        resumed(&mut l, 0);
        let src = l.add_source("otlp");
        let mut again = commit(100, 1);
        change(&mut again);
        let pushed = l.push_span(&again, &id(A), src, 2, 1_000_000);
        assert_eq!(pushed, Pushed::SpanAgain, "{what}");
        let c = cxs(&l);
        assert!(c[0].withdrawn.is_some(), "{what}: span A is set aside");
        let a = l.view().assurance(0, 200, 1_000, 200);
        assert_ne!(a.verdict, Verdict::Refuted, "{what}");
    }
}

/// Events no scope keeps, each as the delivery of span A.
fn unkept() -> [(&'static str, Event<'static>); 3] {
    let mut beat = Event::new(Kind::Heartbeat, EventTime(100));
    beat.route = Some("r2");
    let mut scopeless = commit(100, 1);
    scopeless.scope = None;
    let mut unattributed = commit(100, 1);
    unattributed.property = Some("nope");
    [
        ("heartbeat", beat),
        ("no scope", scopeless),
        ("another property", unattributed),
    ]
}

#[test]
fn a_span_no_scope_keeps_delivered_twice_is_one_event() {
    // SPEC §8: the span source is a duplicate key whatever the event is (hostile test,
    // session 21: such a span delivered twice was applied, counted and archived twice).
    for (what, ev) in unkept() {
        let mut l = live();
        let src = l.add_source("otlp");
        let first = l.push_span(&ev, &id(A), src, 0, 1_000_000);
        assert_ne!(first, Pushed::Duplicate, "{what}");
        assert_eq!(
            l.push_span(&ev, &id(A), src, 1, 1_000_000),
            Pushed::Duplicate,
            "{what}"
        );
        assert_eq!(l.totals().3, 1, "{what}: one duplicate counted");
        let counts = l.view().unknown_counts(0);
        assert_eq!(counts.get(&Reason::ConflictingDuplicate), None, "{what}");
        let missing = counts.get(&Reason::MissingScope).copied();
        assert_eq!(missing, (what == "no scope").then_some(1), "{what}");
        // Another span with the same content is another event.
        assert_eq!(l.push_span(&ev, &id(B), src, 2, 1_000_000), first, "{what}");
    }
}

#[test]
fn a_span_no_scope_keeps_delivered_again_differently_sets_both_aside() {
    for (what, ev) in unkept() {
        let mut l = live();
        let src = l.add_source("otlp");
        // Epoch 2 of scope s (span B), then span A as an event no scope keeps.
        l.push_span(&commit(10, 2), &id(B), src, 0, 1_000_000);
        l.push_span(&ev, &id(A), src, 1, 1_000_000);
        // Span A again as epoch 1 of scope s: stale if it were taken, but which delivery is
        // true is not known.
        let again = l.push_span(&commit(100, 1), &id(A), src, 2, 1_000_000);
        assert_eq!(again, Pushed::SpanAgain, "{what}");
        assert!(cxs(&l).is_empty(), "{what}: set aside, refutes nothing");
        let counts = l.view().unknown_counts(0);
        assert_eq!(
            counts.get(&Reason::ConflictingDuplicate),
            Some(&1),
            "{what}: {counts:?}"
        );
        assert_eq!(
            counts.get(&Reason::MissingScope),
            None,
            "{what}: the first delivery's reasons are taken back"
        );
        // A third delivery, equal to the first: set aside as well, counted once.
        assert_eq!(
            l.push_span(&ev, &id(A), src, 3, 1_000_000),
            Pushed::SpanAgain,
            "{what}"
        );
        let counts = l.view().unknown_counts(0);
        assert_eq!(
            counts.get(&Reason::ConflictingDuplicate),
            Some(&1),
            "{what}"
        );
        let a = l.view().assurance(0, 200, 1_000, 200);
        assert_ne!(a.verdict, Verdict::Refuted, "{what}");
    }
}

#[test]
fn a_kept_span_is_found_again_after_a_restore() {
    let mut l = live();
    resumed(&mut l, 0);
    let state = l.state().clone();
    let restored = |state| Live::restore(contract_with(false, 5, "1000ns", "1000000ns"), state);
    let mut r = restored(state.clone()).expect("the same contract");
    let src = r.add_source("otlp");
    assert_eq!(
        r.push_span(&commit(100, 1), &id(A), src, 2, 1_000_000),
        Pushed::Duplicate
    );
    let mut r = restored(state).expect("the same contract");
    let src = r.add_source("otlp");
    let mut elsewhere = commit(100, 1);
    elsewhere.scope = Some("t");
    assert_eq!(
        r.push_span(&elsewhere, &id(A), src, 2, 1_000_000),
        Pushed::SpanAgain
    );
}

#[test]
fn a_span_no_scope_keeps_is_found_again_after_a_checkpoint() {
    // CI, session 23's build: a heartbeat's span re-delivered differently after a restore was
    // taken as another event (the deliveries no scope keeps were not checkpointed).
    for (what, ev) in unkept() {
        let mut l = live();
        let src = l.add_source("otlp");
        l.push_span(&ev, &id(A), src, 0, 1_000_000);
        let bytes = postcard::to_stdvec(l.state()).unwrap();
        let state = postcard::from_bytes(&bytes).unwrap();
        assert!(&state == l.state(), "{what}: the state round-trips");
        let restored = |state| Live::restore(contract_with(false, 5, "1000ns", "1000000ns"), state);
        let mut r = restored(state).expect("the same contract");
        assert_eq!(r.unkept_spans_held(), 1, "{what}");
        let src = r.add_source("otlp");
        assert_eq!(
            r.push_span(&ev, &id(A), src, 1, 1_000_000),
            Pushed::Duplicate,
            "{what}"
        );
        assert_eq!(
            r.push_span(&commit(100, 1), &id(A), src, 2, 1_000_000),
            Pushed::SpanAgain,
            "{what}"
        );
        let counts = r.view().unknown_counts(0);
        assert_eq!(
            counts.get(&Reason::ConflictingDuplicate),
            Some(&1),
            "{what}"
        );
    }
}

#[test]
fn different_spans_with_equal_content_are_two_events() {
    let mut l = live();
    let src = l.add_source("otlp");
    l.push_span(&commit(10, 2), &id(B), src, 0, 1_000_000);
    let x = l.push_span(&commit(10, 2), &id(A), src, 1, 1_000_000);
    assert_eq!(x, Pushed::Assessed);
    assert_eq!(l.totals().3, 0);
}

#[test]
fn a_malformed_span_is_named_by_its_span() {
    let mut l = live();
    let src = l.add_source("otlp");
    let mut g = Event::new(Kind::Grant, EventTime(5));
    g.scope = Some("s");
    assert_eq!(
        l.push_span(&g, &id(A), src, 0, 1_000_000),
        Pushed::Malformed
    );
    l.push_malformed_span(&id(B), src, 1, None, "span status ERROR".into());
    let samples = l.view().malformed_samples();
    let sources: Vec<&str> = samples.iter().map(|s| s.source.as_str()).collect();
    assert_eq!(sources, vec![A, B]);
}

/// Span `i` of a long run: its span id, and its scope's name.
fn nth(i: u64) -> (SpanId, String) {
    let mut span = [1u8; 24];
    span[16..].copy_from_slice(&(i + 1).to_be_bytes());
    (span, format!("s{}", i % 1000))
}

#[test]
fn span_ids_fall_out_with_the_horizon() {
    // Lateness 10 ns: every event folds soon after the next ones arrive.
    let mut l = Live::new(
        contract_with(false, 5, "10ns", "1000000ns"),
        LiveOptions::default(),
    );
    let src = l.add_source("otlp");
    let last = 299_999u64;
    for i in 0..=last {
        let (span, scope) = nth(i);
        let mut e = commit(1_000 + i as i64 * 100, 1);
        e.scope = Some(&scope);
        assert_eq!(
            l.push_span(&e, &span, src, i, i64::MAX / 2),
            Pushed::Assessed
        );
    }
    assert!(
        l.spans_held() <= 2 * 65_536,
        "{} span ids held",
        l.spans_held()
    );
    // The span table was swept over and over (the index's entries of freed slots dropped
    // each time): the latest span, still kept, is found.
    let (span, scope) = nth(last);
    let mut e = commit(1_000 + last as i64 * 100, 1);
    e.scope = Some(&scope);
    assert_eq!(
        l.push_span(&e, &span, src, last + 1, i64::MAX / 2),
        Pushed::Duplicate
    );
    e.scope = Some("elsewhere");
    assert_eq!(
        l.push_span(&e, &span, src, last + 2, i64::MAX / 2),
        Pushed::SpanAgain
    );
}

/// Spans kept by events inside the horizon are never swept (a sweep would free nothing: it is
/// put off, session 29), every one still found; once those events fold, the table is swept
/// back to what is kept.
#[test]
fn span_ids_kept_through_growth_then_fall_out() {
    let mut l = Live::new(
        contract_with(false, 5, "1ms", "1000000000ns"),
        LiveOptions::default(),
    );
    let src = l.add_source("otlp");
    let kept = 200_000u64;
    // 1 ns apart: all inside the 1 ms lateness.
    for i in 0..kept {
        let (span, scope) = nth(i);
        let mut e = commit(1_000 + i as i64, 1);
        e.scope = Some(&scope);
        assert_eq!(
            l.push_span(&e, &span, src, i, i64::MAX / 2),
            Pushed::Assessed
        );
    }
    assert_eq!(l.spans_held(), kept as usize, "every kept event's span");
    let (span, scope) = nth(0);
    let mut e = commit(1_000, 1);
    e.scope = Some(&scope);
    assert_eq!(
        l.push_span(&e, &span, src, kept, i64::MAX / 2),
        Pushed::Duplicate
    );
    // Then 10 µs apart, far past the lateness: the first ones fold, and so on.
    let last = 2 * kept;
    for i in kept..=last {
        let (span, scope) = nth(i);
        let mut e = commit(1_000_000_000 + i as i64 * 10_000, 1);
        e.scope = Some(&scope);
        assert_eq!(
            l.push_span(&e, &span, src, i + 1, i64::MAX / 2),
            Pushed::Assessed
        );
    }
    assert!(
        l.spans_held() <= 2 * 65_536,
        "{} span ids held",
        l.spans_held()
    );
}

#[test]
fn spans_no_scope_keeps_fall_out_with_the_horizon() {
    let mut l = Live::new(
        contract_with(false, 5, "10ns", "1000000ns"),
        LiveOptions::default(),
    );
    let src = l.add_source("otlp");
    let beat = |i: u64| {
        let mut e = Event::new(Kind::Heartbeat, EventTime(1_000 + i as i64 * 100));
        e.route = Some("r2");
        e
    };
    let last = 299_999u64;
    for i in 0..=last {
        let (span, _) = nth(i);
        assert_eq!(
            l.push_span(&beat(i), &span, src, i, i64::MAX / 2),
            Pushed::Assessed
        );
    }
    assert!(
        l.unkept_spans_held() <= 2 * 65_536,
        "{} deliveries held",
        l.unkept_spans_held()
    );
    assert!(l.state_bytes() < 16 << 20, "{} bytes", l.state_bytes());
    // The latest is still compared; the first, behind the horizon, is forgotten.
    let (span, _) = nth(last);
    assert_eq!(
        l.push_span(&beat(last), &span, src, last + 1, i64::MAX / 2),
        Pushed::Duplicate
    );
    let (span, _) = nth(0);
    assert_ne!(
        l.push_span(&beat(0), &span, src, last + 2, i64::MAX / 2),
        Pushed::Duplicate
    );
}

/// `e` with no scope, as the delivery of emitter `em`'s `seq`.
fn scopeless(ts: i64, epoch: u64, em: &'static str, seq: u64) -> Event<'static> {
    let mut e = commit(ts, epoch);
    e.scope = None;
    e.emitter = Some(em);
    e.seq = Some(fencewatch_assess::event::Seq(seq));
    e
}

const C: &str = "otlp:0af7651916cd43dd8448eb211c80319c/00000000000000c0";

#[test]
fn a_delivery_set_aside_by_its_span_and_its_seq_is_taken_back_once() {
    // X (no scope: missing_scope; span A; e/1) conflicts by its span and by its (emitter,
    // seq), in either order: its missing_scope is withdrawn once, and Y's stays (a second
    // reading of session 23's change found Y's withdrawn too).
    for span_first in [true, false] {
        let mut l = live();
        let src = l.add_source("otlp");
        let x = scopeless(100, 1, "e", 1);
        assert_eq!(l.push_span(&x, &id(A), src, 0, 1_000_000), Pushed::Assessed);
        let mut y = commit(300, 1);
        y.scope = None;
        assert_eq!(l.push_span(&y, &id(C), src, 1, 1_000_000), Pushed::Assessed);
        let by_span = |l: &mut Live| l.push_span(&commit(100, 1), &id(A), src, 2, 1_000_000);
        let by_seq =
            |l: &mut Live| l.push_span(&scopeless(100, 2, "e", 1), &id(B), src, 3, 1_000_000);
        if span_first {
            assert_eq!(by_span(&mut l), Pushed::SpanAgain);
            by_seq(&mut l);
        } else {
            by_seq(&mut l);
            assert_eq!(by_span(&mut l), Pushed::SpanAgain);
        }
        let counts = l.view().unknown_counts(0);
        assert_eq!(
            counts.get(&Reason::MissingScope),
            Some(&1),
            "span first: {span_first}: {counts:?}"
        );
    }
}

#[test]
fn a_span_set_aside_by_its_seq_sets_its_re_deliveries_aside() {
    let mut l = live();
    let src = l.add_source("otlp");
    l.push_span(&commit(10, 2), &id(C), src, 0, 1_000_000);
    // D1 (span B, e/1), D2 (span A, e/1, differing): both set aside by e/1.
    l.push_span(&scopeless(50, 1, "e", 1), &id(B), src, 1, 1_000_000);
    l.push_span(&scopeless(60, 1, "e", 1), &id(A), src, 2, 1_000_000);
    // Span A again as epoch 1 of scope s: one more delivery of a key set aside, not a stale
    // commit (check groups it with D2).
    assert_eq!(
        l.push_span(&commit(100, 1), &id(A), src, 3, 1_000_000),
        Pushed::SpanAgain
    );
    assert!(cxs(&l).is_empty());
}

#[test]
fn a_keyed_attestation_span_delivered_again_differently_takes_back_its_support() {
    // As the same deliveries keyed by their (emitter, seq) alone do (and `check`): the first
    // attestation supports the premise no more. An attestation span without a seq keeps its
    // support (README, OTLP ingest: a known gap).
    let contract = fencewatch_assess::Contract::parse(
        "premises.toml",
        "[[property]]\nname=\"p\"\nsubject=\"S\"\nstrategy=\"lease_epoch\"\nwindow=\"100ns\"\nclock_skew=\"5ns\"\nallowed_lateness=\"10ns\"\nroute_freshness=\"100000ns\"\n[[property.route]]\nname=\"r1\"\n[[property.premise]]\nname=\"durable_fence\"\nmax_age=\"120ns\"\n",
    )
    .unwrap();
    let base = 1_000_000;
    let attest = |failed: bool| {
        let mut e = Event::new(Kind::Attestation, EventTime(base));
        e.premise = Some("durable_fence");
        e.valid_for = Some(fencewatch_assess::Duration(100));
        e.attester = Some("ci");
        e.emitter = Some("k");
        e.seq = Some(fencewatch_assess::event::Seq(1));
        if failed {
            e.outcome = fencewatch_assess::event::Outcome::Failed;
        }
        e
    };
    let commits = [commit(base + 10, 1), commit(base + 90, 1)];
    let mut h = fencewatch_assess::History::new(contract.clone());
    let hs = h.add_source("wal");
    for (i, e) in commits
        .iter()
        .chain(&[attest(false), attest(true)])
        .enumerate()
    {
        h.push(e, hs, i as u64);
    }
    let want = h.finish().properties[0].unknown.clone();
    assert!(want.contains_key(&Reason::PremiseUnattested), "{want:?}");
    let mut l = Live::new(contract, LiveOptions::default());
    let src = l.add_source("otlp");
    for (i, e) in commits.iter().enumerate() {
        l.push(e, src, i as u64, i64::MAX / 2);
    }
    assert_eq!(
        l.push_span(&attest(false), &id(A), src, 10, i64::MAX / 2),
        Pushed::Assessed
    );
    // Span A again, failed, under another seq: only its span is its first delivery's.
    let mut again = attest(true);
    again.seq = Some(fencewatch_assess::event::Seq(2));
    assert_eq!(
        l.push_span(&again, &id(A), src, 11, i64::MAX / 2),
        Pushed::SpanAgain
    );
    l.close();
    assert_eq!(l.view().unknown_counts(0), want);
}
