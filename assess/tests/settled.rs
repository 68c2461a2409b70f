//! Settled counterexamples (SPEC §9: a counterexample is archived once, when final or
//! withdrawn): each id settles once, when final or when the horizon has passed a withdrawn
//! one, with the wall time of the batch that found it; replaying the same pushes settles the
//! same ones in the same pushes; the unsettled ones are the provisional and withdrawn-pending.

mod common;

use common::commit_from as commit;
use common::{arb_history_with_resends, contract, contract_with, event, seqs};
use fencewatch_assess::Withdrawal;
use fencewatch_assess::live::{Live, LiveOptions};
use proptest::prelude::*;
use std::collections::BTreeSet;

fn collecting(retention: Option<i64>) -> Live {
    let c = contract_with(false, 5, "10ns", "1000000ns");
    let mut l = Live::new(
        c,
        LiveOptions {
            retention,
            ..LiveOptions::default()
        },
    );
    l.collect_settled();
    l
}

#[test]
fn a_counterexample_settles_once_when_final_with_the_time_it_was_found() {
    let mut l = collecting(Some(0));
    let src = l.add_source("wal");
    l.push(&commit(100, "s", 2, "e", 1), src, 0, 7_000);
    l.push(&commit(200, "s", 1, "e", 2), src, 1, 8_000);
    assert!(l.take_settled_counterexamples().is_empty(), "provisional");
    let unsettled = l.unsettled_counterexamples();
    assert_eq!(unsettled.len(), 1);
    assert!(!unsettled[0].counterexample.is_final);
    assert_eq!(unsettled[0].found_at, 8_000);
    // Traffic on another scope moves the horizon past both events.
    let mut settled = Vec::new();
    for i in 0..20 {
        l.push(
            &commit(1_000 + i * 100, "t", 1, "f", i as u64 + 1),
            src,
            2 + i as u64,
            9_000,
        );
        settled.extend(l.take_settled_counterexamples());
    }
    assert_eq!(settled.len(), 1, "{settled:?}");
    let s = &settled[0];
    assert!(s.counterexample.is_final);
    assert_eq!(s.counterexample.withdrawn, None);
    assert_eq!(s.counterexample.id, unsettled[0].counterexample.id);
    assert_eq!(
        s.found_at, 8_000,
        "the batch that found it, not the one that settled it"
    );
    assert!(l.unsettled_counterexamples().is_empty());
}

#[test]
fn a_withdrawn_counterexample_settles_when_the_horizon_passes_it() {
    let mut l = collecting(Some(0));
    let src = l.add_source("wal");
    l.push(&commit(100, "s", 9, "e", 1), src, 0, 1);
    l.push(&commit(250, "s", 5, "g", 1), src, 1, 1);
    // The true delivery of e/1: the two conflict, the counterexample resting on them goes.
    l.push(&commit(100, "s", 3, "e", 1), src, 2, 1);
    assert_eq!(l.take_withdrawn_counterexamples().len(), 1);
    assert!(
        l.take_settled_counterexamples().is_empty(),
        "it could still be found again"
    );
    let pending = l.unsettled_counterexamples();
    assert_eq!(pending.len(), 1);
    assert_eq!(
        pending[0].counterexample.withdrawn,
        Some(Withdrawal::ConflictingDuplicate)
    );
    let mut settled = Vec::new();
    for i in 0..20 {
        l.push(
            &commit(1_000 + i * 100, "t", 1, "f", i as u64 + 1),
            src,
            3 + i as u64,
            1,
        );
        settled.extend(l.take_settled_counterexamples());
    }
    assert_eq!(settled.len(), 1);
    assert_eq!(
        settled[0].counterexample.withdrawn,
        Some(Withdrawal::ConflictingDuplicate)
    );
    assert!(!settled[0].counterexample.is_final);
    assert!(l.unsettled_counterexamples().is_empty());
}

#[test]
fn nothing_is_collected_unless_asked() {
    let c = contract(false, 5);
    let mut l = Live::new(c, LiveOptions::default());
    let src = l.add_source("wal");
    l.push(&commit(100, "s", 2, "e", 1), src, 0, 1);
    l.push(&commit(200, "s", 1, "e", 2), src, 1, 1);
    l.close();
    assert!(l.take_settled_counterexamples().is_empty());
    assert_eq!(l.view().counterexample_count(0), 1);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    /// Every id settles at most once; once the input is closed every counterexample listed has
    /// settled, as listed; a replay of the same pushes settles the same ones at the same pushes.
    #[test]
    fn each_id_settles_once_and_replays_settle_alike((evs, order) in arb_history_with_resends(), retention in 0i64..100) {
        let c = contract(false, 5);
        let seqs = seqs(&evs);
        let run = || {
            let mut l = Live::new(c.clone(), LiveOptions { retention: Some(retention), ..LiveOptions::default() });
            l.collect_settled();
            let src = l.add_source("wal");
            let mut at = Vec::new();
            for (n, &i) in order.iter().enumerate() {
                l.push(&event(&evs[i], seqs[i]), src, i as u64, n as i64);
                for s in l.take_settled_counterexamples() {
                    at.push((n, s.counterexample.id.clone(), s.counterexample.is_final, s.counterexample.withdrawn));
                }
            }
            l.close();
            for s in l.take_settled_counterexamples() {
                at.push((usize::MAX, s.counterexample.id.clone(), s.counterexample.is_final, s.counterexample.withdrawn));
            }
            (l, at)
        };
        let (l, at) = run();
        let ids: Vec<&String> = at.iter().map(|(_, id, _, _)| id).collect();
        let unique: BTreeSet<&String> = ids.iter().copied().collect();
        prop_assert_eq!(ids.len(), unique.len(), "an id settled twice: {:?}", at);
        prop_assert!(l.unsettled_counterexamples().is_empty());
        let listed = l.view().counterexamples(None, None, None, None, None, usize::MAX);
        for cx in &listed.counterexamples {
            let s = at.iter().find(|(_, id, _, _)| *id == cx.id);
            prop_assert!(s.is_some(), "{} listed but never settled", cx.id);
            let (_, _, fin, wd) = s.unwrap();
            prop_assert_eq!((*fin, *wd), (cx.is_final, cx.withdrawn));
        }
        let (_, again) = run();
        prop_assert_eq!(again, at);
    }
}
