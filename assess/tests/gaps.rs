//! Telemetry gaps next to a seq delivered more than once, at other times (SPEC §4: a gap spans
//! "the windows between the events around the gap", every delivery of the two seqs around it):
//! `serve` against `check`, and `check` against itself read in another order or by parts.
//! Each test failed before session 26 (commit 8ff4612), where `check` placed a gap from the
//! delivery of a seq it read last and `serve` from the one it saw first.

mod common;

use common::check;
use common::keys::*;
use fencewatch_assess::event::Event;
use fencewatch_assess::history::{Batch, Spilled};
use fencewatch_assess::live::{Live, View};
use fencewatch_assess::{Contract, Report, SourceId, Verdict};

/// Property `p`'s answer in `check`'s report.
fn of_check_p(r: &Report) -> Answer {
    Answer {
        counterexamples: r.properties[0].counterexamples.len(),
        unknown: r.properties[0].unknown.clone(),
        windows: verdicts(&r.properties[0].windows),
    }
}

/// Property `p`'s answer in a view.
fn of_view_p(v: &View<'_>) -> Answer {
    Answer {
        counterexamples: v.counterexample_count(0),
        unknown: v.unknown_counts(0),
        windows: verdicts(&v.timeline(0, i64::MIN, i64::MAX, 1_000)),
    }
}

fn of_serve_p(l: &Live) -> Answer {
    of_view_p(&l.view())
}

/// `check --max-memory`'s report of `evs` read as [`check`] reads them, in `parts` parts with a
/// budget of one byte (each scope file assessed alone).
fn check_by_parts(c: &Contract, evs: &[Event<'static>], parts: usize) -> Report {
    let mut s = Spilled::new(c.clone(), Vec::<Vec<u8>>::new(), parts, 1);
    s.add_source("wal");
    let mut batch = Batch::new(SourceId(0));
    for (i, e) in evs.iter().enumerate() {
        batch.push(c, e, i as u64);
    }
    s.append(batch).unwrap();
    s.finish(&mut |_, _| {}).unwrap()
}

/// Every order of `items`.
fn permutations<T: Clone>(items: &[T]) -> Vec<Vec<T>> {
    if items.is_empty() {
        return vec![vec![]];
    }
    let mut out = Vec::new();
    for i in 0..items.len() {
        let mut rest = items.to_vec();
        let first = rest.remove(i);
        for mut tail in permutations(&rest) {
            tail.insert(0, first.clone());
            out.push(tail);
        }
    }
    out
}

/// p10b: both seqs around p's gaps delivered twice, differently (conflicts of q): e/1 at 150
/// and 210, e/5 at 320 and 420; e/3, p's commit at 100, between them (gaps e/2 and e/4, which
/// apply to p). p also commits at 210 and 450 (no key).
/// Every delivery counts: the gaps cover p's windows from 100 to 420 — windows [holds,
/// unknown × 4] — whatever order the five keyed deliveries come in (all 120), in `check`
/// read whole or by parts (1 and 3), in `serve` and in `serve` restored from a checkpoint
/// at two cuts.
#[test]
fn p10b_gaps_around_seqs_delivered_twice_in_any_order() {
    let c = two_props();
    let base = [
        of(beat(0, "r2"), "p"),
        of(beat(0, "r2"), "q"),
        of(commit(210, Some("s"), 1), "p"),
        of(commit(450, Some("s"), 1), "p"),
    ];
    let keyed_evs = [
        of(keyed(commit(150, Some("t"), 1), "e", 1), "q"),
        of(keyed(beat(210, "r1"), "e", 1), "q"),
        of(keyed(commit(100, Some("s"), 1), "e", 3), "p"),
        of(keyed(commit(320, Some("t"), 1), "e", 5), "q"),
        of(keyed(beat(420, "r1"), "e", 5), "q"),
    ];
    let mut first: Option<Answer> = None;
    for order in permutations(&[0, 1, 2, 3, 4]) {
        let evs: Vec<_> = (base.iter().cloned())
            .chain(order.iter().map(|&i| keyed_evs[i].clone()))
            .collect();
        let whole = check(&c, &evs);
        let want = of_check_p(&whole);
        let json = serde_json::to_string(&whole).unwrap();
        for parts in [1, 3] {
            let by_parts = serde_json::to_string(&check_by_parts(&c, &evs, parts)).unwrap();
            assert_eq!(by_parts, json, "{parts} parts, order {order:?}");
        }
        let pushed = no_spans(&evs);
        assert_eq!(of_serve_p(&serve(&c, &pushed)), want, "order {order:?}");
        for cut in [5, 7] {
            let got = of_serve_p(&serve_restoring(&c, &pushed, cut));
            assert_eq!(got, want, "restored at {cut}, order {order:?}");
        }
        match &first {
            None => first = Some(want),
            Some(f) => assert_eq!(&want, f, "check, order {order:?}"),
        }
    }
    let want = first.unwrap();
    use Verdict::{Holds, Unknown};
    assert_eq!(
        want.windows,
        [Holds, Unknown, Unknown, Unknown, Unknown],
        "{want:?}"
    );
}

/// p13: d2 (chains.rs) with e/1's two deliveries (q's commit of t at 150, q's heartbeat at
/// 210) sharing span 1, in either order: the second is set aside through its span first
/// (`settle_span` when the commit came first, kept in its scope; `settle_unkept_span` when the
/// heartbeat did, kept in none), its (emitter, seq) settled after. The gap e/2 (p's e/3 at
/// 100 above it) spans both times of e/1, as in `check` (which reads no span: both deliveries
/// conflict under e/1 there all the same): p's windows [holds, unknown, unknown].
#[test]
fn p13_a_boundary_seq_set_aside_through_its_span_widens_the_gap() {
    let c = two_props();
    for swapped in [false, true] {
        let mut e1 = [
            of(keyed(commit(150, Some("t"), 1), "e", 1), "q"),
            of(keyed(beat(210, "r1"), "e", 1), "q"),
        ];
        if swapped {
            e1.swap(0, 1);
        }
        let [a, b] = e1;
        let evs = vec![
            (of(beat(0, "r2"), "p"), None),
            (of(beat(0, "r2"), "q"), None),
            (a.clone(), Some(1)),
            (of(keyed(commit(100, Some("s"), 1), "e", 3), "p"), None),
            (of(commit(210, Some("s"), 1), "p"), None),
            (b.clone(), Some(1)),
        ];
        let plain: Vec<_> = evs.iter().map(|(e, _)| e.clone()).collect();
        let want = of_check_p(&check(&c, &plain));
        assert_eq!(
            want.windows,
            [Verdict::Holds, Verdict::Unknown, Verdict::Unknown],
            "{want:?}"
        );
        assert_eq!(of_serve_p(&serve(&c, &evs)), want, "swapped: {swapped}");
        let restored = serve_restoring(&c, &evs, 5);
        assert_eq!(of_serve_p(&restored), want, "restored, swapped: {swapped}");
    }
}

/// p14: d2 split over two partitions (by scope): A has p's events (e/3 at 100, the gap e/2
/// above it) and q's commit of t under e/1; B has another delivery of e/1, q's commit of u, at
/// another time (150 and 210, either way round). `check` over the union: the gap spans both
/// times of e/1 — p's windows [holds, unknown, unknown]. The view over both partitions says
/// so, before and after each absorbs the seq runs all saw (`Live::absorb_seq_runs`); and A
/// alone, once it has absorbed B's runs, holds every event of p and both times of e/1: it
/// says so too.
#[test]
fn p14_absorbed_seq_runs_keep_the_times_of_both_partitions() {
    let c = two_props();
    for (in_a, in_b) in [(150, 210), (210, 150)] {
        let a_evs = vec![
            of(beat(0, "r2"), "p"),
            of(beat(0, "r2"), "q"),
            of(keyed(commit(in_a, Some("t"), 1), "e", 1), "q"),
            of(keyed(commit(100, Some("s"), 1), "e", 3), "p"),
            of(commit(210, Some("s"), 1), "p"),
        ];
        let b_evs = vec![of(keyed(commit(in_b, Some("u"), 1), "e", 1), "q")];
        let union: Vec<_> = a_evs.iter().chain(&b_evs).cloned().collect();
        let want = of_check_p(&check(&c, &union));
        assert_eq!(
            want.windows,
            [Verdict::Holds, Verdict::Unknown, Verdict::Unknown],
            "{want:?}"
        );
        let (mut a, mut b) = (serve(&c, &no_spans(&a_evs)), serve(&c, &no_spans(&b_evs)));
        let both = |a: &Live, b: &Live| {
            let mut v = View::new(&c);
            v.add_live(a, true).unwrap();
            v.add_live(b, true).unwrap();
            (of_view_p(&v), v.seq_runs())
        };
        let (got, seen) = both(&a, &b);
        assert_eq!(got, want, "A at {in_a}, B at {in_b}: before absorbing");
        a.absorb_seq_runs(&seen);
        b.absorb_seq_runs(&seen);
        assert_eq!(both(&a, &b).0, want, "A at {in_a}, B at {in_b}: absorbed");
        assert_eq!(of_serve_p(&a), want, "A alone at {in_a}, B's runs absorbed");
    }
}

/// F3 (session 26's second review): a seq seen by another partition (its runs absorbed here)
/// delivered again here differently is dropped as a duplicate (it cannot be compared: README),
/// but its time still counts for the gap next to it, as in `check` over both partitions' events:
/// p's windows [holds, unknown, unknown], not [holds, unknown, holds].
#[test]
fn f3_a_seq_seen_elsewhere_delivered_again_widens_the_gap() {
    let c = two_props();
    let a1 = vec![
        of(beat(0, "r2"), "p"),
        of(beat(0, "r2"), "q"),
        of(keyed(commit(90, Some("t"), 1), "e", 0), "q"),
        of(keyed(commit(100, Some("s"), 1), "e", 3), "p"),
        of(commit(210, Some("s"), 1), "p"),
    ];
    let b_evs = vec![of(keyed(commit(150, Some("u"), 1), "e", 1), "q")];
    let a2 = of(keyed(commit(210, Some("t"), 1), "e", 1), "q");
    let union: Vec<_> = a1.iter().chain(&b_evs).chain([&a2]).cloned().collect();
    let want = of_check_p(&check(&c, &union));
    assert_eq!(
        want.windows,
        [Verdict::Holds, Verdict::Unknown, Verdict::Unknown],
        "{want:?}"
    );
    let (mut a, mut b) = (serve(&c, &no_spans(&a1)), serve(&c, &no_spans(&b_evs)));
    let seen = {
        let mut v = View::new(&c);
        v.add_live(&a, true).unwrap();
        v.add_live(&b, true).unwrap();
        v.seq_runs()
    };
    a.absorb_seq_runs(&seen);
    b.absorb_seq_runs(&seen);
    let src = a.add_source("wal");
    a.push(&a2, src, 100, 1_000_000);
    a.close();
    let mut v = View::new(&c);
    v.add_live(&a, true).unwrap();
    v.add_live(&b, true).unwrap();
    assert_eq!(of_view_p(&v).windows, want.windows);
}
