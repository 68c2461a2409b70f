//! Property and unit tests of the merged query view (SPEC §5: verdicts derived by merging
//! per-partition summaries, one code path for one partition and many):
//! - a history split by scope over 1–4 partitions, each fed to its own `Live`, answers through
//!   a `View` exactly like one `Live` fed the whole history, whether the partitions are added
//!   as `Live`s or as `Summary`s that went through postcard;
//! - the watermark is the minimum over active partitions, idle ones left out;
//! - a counterexample present in two summaries (a handover) counts once.

mod common;

use common::{E, NEVER_FOLD, arb_history, event, seqs};
use fencewatch_assess::event::{Epoch, Event, Kind, Seq};
use fencewatch_assess::live::{Live, LiveOptions, Summary, View};
use fencewatch_assess::{Contract, EventTime, Reason, Verdict};
use proptest::prelude::*;
use std::hash::{Hash, Hasher};

/// Two properties (`p`, `q`), each with routes `r1` (fenced) and `r2` (unfenced).
fn two_properties(skew: i64, lateness: &str, freshness: &str) -> Contract {
    let prop = |name: &str| {
        format!(
            "[[property]]\nname=\"{name}\"\nsubject=\"S\"\nstrategy=\"lease_epoch\"\nwindow=\"100ns\"\nclock_skew=\"{skew}ns\"\nallowed_lateness=\"{lateness}\"\nroute_freshness=\"{freshness}\"\n[[property.route]]\nname=\"r1\"\n[[property.route]]\nname=\"r2\"\nfenced=false\n"
        )
    };
    Contract::parse("merge.toml", &(prop("p") + &prop("q"))).unwrap()
}

/// Histories over four scopes and two properties (and a name the contract lacks).
fn arb_split_history() -> impl Strategy<Value = (Vec<E>, Vec<usize>)> {
    (
        arb_history(),
        prop::collection::vec((0u8..10, 0usize..4), 40),
    )
        .prop_map(|((mut evs, order), picks)| {
            for (e, (prop, scope)) in evs.iter_mut().zip(picks) {
                e.property = Some(match prop {
                    0..=5 => "p",
                    6..=8 => "q",
                    _ => "zz",
                });
                if e.scope.is_some() {
                    e.scope = Some(["s1", "s2", "s3", "s4"][scope]);
                }
            }
            (evs, order)
        })
}

/// The partition of event `i`: a hash of its scope (the Kafka key), of its index when it has
/// none.
fn partition(e: &E, i: usize, n: usize, salt: u64) -> usize {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    salt.hash(&mut h);
    match e.scope {
        Some(s) => s.hash(&mut h),
        None => i.hash(&mut h),
    }
    (h.finish() % n as u64) as usize
}

/// A closed live assessor fed the events of `order` that `keep` accepts, in that order.
fn fed(c: &Contract, evs: &[E], order: &[usize], keep: impl Fn(usize) -> bool) -> Live {
    let seqs = seqs(evs);
    let mut l = Live::new(
        c.clone(),
        LiveOptions {
            retention: NEVER_FOLD,
            ..LiveOptions::default()
        },
    );
    let src = l.add_source("wal");
    for &i in order.iter().filter(|&&i| keep(i)) {
        l.push(&event(&evs[i], seqs[i]), src, i as u64, 1_000_000);
    }
    l.close();
    l
}

/// Every page of counterexamples, following cursors.
fn pages(
    v: &View<'_>,
    p: Option<usize>,
    scope: Option<&str>,
    range: (Option<i64>, Option<i64>),
    limit: usize,
) -> Vec<fencewatch_assess::live::CxPage> {
    let mut out = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let cur = cursor.as_deref().map(|c| {
            let (t, id) = c.split_once('.').expect("cursor is time.id");
            (t.parse::<i64>().expect("time"), id)
        });
        let page = v.counterexamples(p, scope, range.0, range.1, cur, limit);
        cursor = page.next_cursor.clone();
        out.push(page);
        if cursor.is_none() || out.len() > 100 {
            return out;
        }
    }
}

/// Checks that `got` answers every query like `want`.
fn same_answers(c: &Contract, want: &View<'_>, got: &View<'_>) -> Result<(), TestCaseError> {
    prop_assert_eq!(got.totals(), want.totals());
    for p in 0..c.properties.len() {
        prop_assert_eq!(got.watermark(p), want.watermark(p));
        prop_assert_eq!(got.unknown_counts(p), want.unknown_counts(p));
        prop_assert_eq!(got.coverage(p), want.coverage(p));
        prop_assert_eq!(got.counterexample_count(p), want.counterexample_count(p));
        prop_assert_eq!(got.property_events(p), want.property_events(p));
        prop_assert_eq!(got.stale_rejections(p), want.stale_rejections(p));
        for max in [1000, 3] {
            prop_assert_eq!(
                got.timeline(p, i64::MIN, i64::MAX, max),
                want.timeline(p, i64::MIN, i64::MAX, max)
            );
        }
        prop_assert_eq!(
            got.timeline(p, 150, 620, 1000),
            want.timeline(p, 150, 620, 1000)
        );
        for at in [-1, 0, 99, 100, 137, 500, 975, 2_000, i64::MAX / 2] {
            for window in [1, 100, 250, 10_000] {
                for wall in [at, 1_000_000] {
                    prop_assert_eq!(
                        got.assurance(p, at, window, wall),
                        want.assurance(p, at, window, wall)
                    );
                }
            }
        }
    }
    let props = std::iter::once(None).chain((0..c.properties.len()).map(Some));
    for p in props {
        for limit in [1, 2, 7] {
            prop_assert_eq!(
                pages(got, p, None, (None, None), limit),
                pages(want, p, None, (None, None), limit)
            );
        }
        prop_assert_eq!(
            pages(got, p, Some("s1"), (None, None), 2),
            pages(want, p, Some("s1"), (None, None), 2)
        );
        prop_assert_eq!(
            pages(got, p, None, (Some(200), Some(700)), 2),
            pages(want, p, None, (Some(200), Some(700)), 2)
        );
    }
    let all = want.counterexamples(None, None, None, None, None, usize::MAX / 4);
    for cx in &all.counterexamples {
        prop_assert_eq!(got.counterexample(&cx.id), Some(cx.clone()));
    }
    prop_assert_eq!(got.counterexample("cx-none"), None);
    Ok(())
}

/// Splits the history over `n` partitions and checks both views (partitions as `Live`s, and as
/// summaries after a postcard round trip) against one `Live` fed the whole history.
fn check_split(
    c: &Contract,
    evs: &[E],
    order: &[usize],
    n: usize,
    salt: u64,
    active: &[bool],
) -> Result<(), TestCaseError> {
    let whole = fed(c, evs, order, |_| true);
    let parts: Vec<Live> = (0..n)
        .map(|k| fed(c, evs, order, |i| partition(&evs[i], i, n, salt) == k))
        .collect();
    let mut by_live = View::new(c);
    for (l, &a) in parts.iter().zip(active) {
        by_live.add_live(l, a).unwrap();
    }
    same_answers(c, &whole.view(), &by_live)?;
    let summaries: Vec<Summary> = parts
        .iter()
        .map(|l| {
            let bytes = postcard::to_stdvec(&l.summary()).unwrap();
            postcard::from_bytes(&bytes).unwrap()
        })
        .collect();
    for (s, l) in summaries.iter().zip(&parts) {
        prop_assert_eq!(s, &l.summary());
    }
    let mut by_summary = View::new(c);
    for (s, &a) in summaries.iter().zip(active) {
        by_summary.add_summary(s, a).unwrap();
    }
    same_answers(c, &whole.view(), &by_summary)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Any arrival order, lateness beyond the history (nothing final before the end, as in
    /// `check`): the merge is exact.
    #[test]
    fn merged_partitions_answer_like_one((evs, order) in arb_split_history(), skew in 0i64..60, n in 1usize..=4, salt in any::<u64>(), active in prop::collection::vec(any::<bool>(), 4)) {
        let c = two_properties(skew, "1000ns", "1100ns");
        check_split(&c, &evs, &order, n, salt, &active)?;
    }

    /// Arrival in time order with a short lateness and freshness: windows become final and
    /// routes fall silent while events arrive, partitions' watermarks differ, and the merge is
    /// still exact (no grants, so no holder mismatch waits for the watermark).
    #[test]
    fn merged_partitions_answer_like_one_in_time_order((mut evs, _) in arb_split_history(), skew in 0i64..40, n in 1usize..=4, salt in any::<u64>(), active in prop::collection::vec(any::<bool>(), 4)) {
        for e in &mut evs {
            if e.kind == Kind::Grant {
                e.kind = Kind::Commit;
            }
            e.order = None;
        }
        let mut order: Vec<usize> = (0..evs.len()).collect();
        order.sort_by_key(|&i| (evs[i].ts, i));
        let c = two_properties(skew, "50ns", "200ns");
        check_split(&c, &evs, &order, n, salt, &active)?;
    }
}

fn contract() -> Contract {
    two_properties(5, "10ns", "200ns")
}

fn commit(ts: i64, scope: &'static str, epoch: u64) -> Event<'static> {
    let mut e = Event::new(Kind::Commit, EventTime(ts));
    e.property = Some("p");
    e.scope = Some(scope);
    e.epoch = Some(Epoch(epoch));
    e.route = Some("r1");
    e
}

/// A live assessor fed `events` (positions in order).
fn live_of(c: &Contract, events: &[Event<'_>]) -> Live {
    let mut l = Live::new(c.clone(), LiveOptions::default());
    let src = l.add_source("wal");
    for (i, e) in events.iter().enumerate() {
        l.push(e, src, i as u64, 1_000_000);
    }
    l
}

#[test]
fn the_watermark_is_the_minimum_over_active_partitions() {
    let c = contract();
    let a = live_of(&c, &[commit(100, "a", 1)]);
    let b = live_of(&c, &[commit(500, "b", 1)]);
    let empty = live_of(&c, &[]);
    let mut closed = live_of(&c, &[commit(50, "c", 1)]);
    closed.close();
    let wm = |parts: &[(&Live, bool)]| {
        let mut v = View::new(&c);
        for &(l, active) in parts {
            v.add_live(l, active).unwrap();
        }
        let s: Vec<Summary> = parts.iter().map(|(l, _)| l.summary()).collect();
        let mut w = View::new(&c);
        for (s, &(_, active)) in s.iter().zip(parts) {
            w.add_summary(s, active).unwrap();
        }
        assert_eq!(v.watermark(0), w.watermark(0), "summaries agree with lives");
        v.watermark(0)
    };
    assert_eq!(wm(&[]), EventTime::MIN, "no partition");
    assert_eq!(wm(&[(&a, true)]), EventTime(90));
    assert_eq!(
        wm(&[(&a, true), (&b, true)]),
        EventTime(90),
        "min over active"
    );
    assert_eq!(
        wm(&[(&a, false), (&b, true)]),
        EventTime(490),
        "idle left out"
    );
    assert_eq!(wm(&[(&a, true), (&b, false)]), EventTime(90));
    assert_eq!(
        wm(&[(&a, false), (&b, false)]),
        EventTime(490),
        "all idle: max"
    );
    assert_eq!(
        wm(&[(&a, true), (&empty, true)]),
        EventTime::MIN,
        "an active partition without events holds it back"
    );
    assert_eq!(wm(&[(&a, true), (&empty, false)]), EventTime(90));
    assert_eq!(
        wm(&[(&closed, true)]),
        EventTime::MAX,
        "closed: end of time"
    );
    assert_eq!(wm(&[(&closed, true), (&b, true)]), EventTime(490));
    assert_eq!(wm(&[(&closed, false), (&a, false)]), EventTime::MAX);
    // The watermark decides finality: at 95 is final with `b` alone, not once `a` is active.
    let mut v = View::new(&c);
    v.add_live(&b, true).unwrap();
    assert!(v.assurance(0, 95, 50, 500).is_final);
    v.add_live(&a, true).unwrap();
    assert!(!v.assurance(0, 95, 50, 500).is_final);
}

#[test]
fn a_counterexample_in_two_summaries_counts_once() {
    let c = contract();
    let mut l = live_of(&c, &[commit(100, "s", 2), commit(200, "s", 1)]);
    l.close();
    assert_eq!(l.view().counterexample_count(0), 1);
    let id = l
        .view()
        .counterexamples(None, None, None, None, None, 10)
        .counterexamples[0]
        .id
        .clone();
    // A handover: the old owner's last summary and the new owner's both hold it.
    let (s1, s2) = (l.summary(), l.summary());
    let mut v = View::new(&c);
    v.add_summary(&s1, true).unwrap();
    v.add_summary(&s2, true).unwrap();
    v.add_live(&l, true).unwrap();
    assert_eq!(v.counterexample_count(0), 1);
    let page = v.counterexamples(None, None, None, None, None, 10);
    assert_eq!(page.counterexamples.len(), 1);
    assert_eq!(page.counterexamples[0].id, id);
    assert_eq!(page.next_cursor, None);
    let a = v.assurance(0, 1_000, 10_000, 1_000);
    assert_eq!(
        (a.counterexample_count, a.counterexamples.clone()),
        (1, vec![id.clone()])
    );
    assert_eq!(a.verdict, Verdict::Refuted);
    assert_eq!(v.counterexample(&id), l.view().counterexample(&id));
    // One per page too: with limit 1 there is no second page holding the copy.
    let first = v.counterexamples(Some(0), None, None, None, None, 1);
    assert_eq!(first.counterexamples.len(), 1);
    assert_eq!(first.next_cursor, None);
}

#[test]
fn an_emitters_runs_join_across_partitions() {
    let c = contract();
    let beat = |ts: i64, seq: u64| {
        let mut e = Event::new(Kind::Heartbeat, EventTime(ts));
        e.property = Some("p");
        e.route = Some("r1");
        e.emitter = Some("e");
        e.seq = Some(Seq(seq));
        e
    };
    // Seqs 1..=6 alternate between partitions, then 9 on the first: one gap (7, 8).
    let odd = live_of(&c, &[beat(10, 1), beat(30, 3), beat(50, 5), beat(90, 9)]);
    let even = live_of(&c, &[beat(20, 2), beat(40, 4), beat(60, 6)]);
    assert_eq!(
        odd.view().coverage(0).emitters[0].gaps,
        3,
        "alone, each partition has gaps"
    );
    let (so, se) = (odd.summary(), even.summary());
    for by_summary in [false, true] {
        let mut v = View::new(&c);
        if by_summary {
            v.add_summary(&so, true).unwrap();
            v.add_summary(&se, true).unwrap();
        } else {
            v.add_live(&odd, true).unwrap();
            v.add_live(&even, true).unwrap();
        }
        let e = &v.coverage(0).emitters[0];
        assert_eq!(
            (e.events, e.first_seq, e.last_seq, e.gaps, e.missing),
            (7, 1, 9, 1, 2)
        );
        assert_eq!(v.unknown_counts(0).get(&Reason::TelemetryGap), Some(&1));
        // The gap spans the events around it, 60 (seq 6) to 90 (seq 9): window 0 only.
        let a = v.assurance(0, 99, 100, 99);
        assert_eq!(a.unknown.get(&Reason::TelemetryGap), Some(&1), "{a:?}");
        assert!(v.coverage(1).emitters.is_empty(), "e fed only p");
    }
}

#[test]
fn summaries_round_trip_through_json_and_postcard() {
    let c = contract();
    let mut holder = commit(300, "h", 3);
    holder.holder = Some("x");
    let mut unrouted = commit(310, "u", 1);
    unrouted.route = Some("nowhere");
    let mut l = live_of(
        &c,
        &[commit(100, "s", 2), commit(200, "s", 1), holder, unrouted],
    );
    l.push_malformed(0, 99, None, "line 99: not JSON".into());
    let s = l.summary();
    let bytes = postcard::to_stdvec(&s).unwrap();
    assert_eq!(postcard::from_bytes::<Summary>(&bytes).unwrap(), s);
    let json = serde_json::to_string(&s).unwrap();
    assert_eq!(serde_json::from_str::<Summary>(&json).unwrap(), s);
    assert_eq!(s.fingerprint(), fencewatch_assess::live::fingerprint(&c));
    assert_eq!(s.max_ts(), Some(EventTime(310)));
    assert!(!s.closed());
    let mut v = View::new(&c);
    v.add_summary(&s, true).unwrap();
    assert_eq!(v.malformed_samples(), l.view().malformed_samples());
    assert_eq!(v.last_malformed(), Some("line 99: not JSON"));
    assert_eq!(v.samples(0), l.view().samples(0));
    assert_eq!(v.coverage(0).undeclared_routes.get("nowhere"), Some(&1));
}

#[test]
fn a_partition_of_another_contract_is_refused() {
    let c = contract();
    let other = two_properties(7, "10ns", "200ns");
    let l = live_of(&other, &[commit(100, "a", 1)]);
    let s = l.summary();
    let mut v = View::new(&c);
    assert!(v.add_live(&l, true).is_err());
    assert!(v.add_summary(&s, true).is_err());
    assert_eq!(v.partitions(), 0);
}
