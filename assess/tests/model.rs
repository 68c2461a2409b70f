//! Property tests: the core against a brute-force model of SPEC §4, over random histories in
//! random arrival order with timestamps dense enough that clock skew matters.
//!
//! The model is written from the spec's definitions, pair by pair (O(n²)), sharing no code with
//! the core. It checks every counterexample (kind, stale event, witness), every unknown reason
//! count, and that every `stale_commit` really is certain.

use fencewatch_assess::event::{Epoch, Event, Incarnation, Kind, Order, Outcome, Seq};
use fencewatch_assess::history::Batch;
use fencewatch_assess::{EventTime, History, Reason};
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};

mod common;

use common::contract;

/// The window and route freshness of [`common::contract`], in ns.
const WINDOW: i64 = 100;
const FRESHNESS: i64 = 200;
const ROUTES: [&str; 2] = ["r1", "r2"];

#[derive(Debug, Clone, PartialEq, Eq)]
struct E {
    kind: Kind,
    ts: i64,
    scope: Option<&'static str>,
    epoch: Option<u64>,
    route: Option<&'static str>,
    rejected: bool,
    holder: Option<&'static str>,
    inc: u64,
    order: Option<u64>,
    emitter: Option<&'static str>,
    seq: Option<u64>,
}

impl E {
    fn content(&self) -> impl PartialEq + '_ {
        (
            self.kind,
            self.ts,
            self.scope,
            self.epoch,
            self.route,
            self.rejected,
            self.holder,
            self.inc,
            self.order,
        )
    }
    fn committed(&self) -> bool {
        matches!(self.kind, Kind::Commit | Kind::Fence) && !self.rejected
    }
}

fn arb_event() -> impl Strategy<Value = E> {
    (
        prop_oneof![4 => Just(Kind::Commit), 2 => Just(Kind::Fence), 2 => Just(Kind::Grant), 1 => Just(Kind::Heartbeat)],
        0i64..16,
        prop_oneof![1 => Just(None), 6 => Just(Some("s1")), 3 => Just(Some("s2"))],
        prop_oneof![1 => Just(None), 8 => (0u64..5).prop_map(Some)],
        prop_oneof![1 => Just(None), 6 => Just(Some("r1")), 2 => Just(Some("r2")), 1 => Just(Some("rx"))],
        prop_oneof![9 => Just(false), 1 => Just(true)],
        prop_oneof![2 => Just(None), 2 => Just(Some("a")), 1 => Just(Some("b"))],
        prop_oneof![5 => Just(0u64), 1 => Just(1u64)],
        prop_oneof![3 => Just(None), 2 => (0u64..5).prop_map(Some)],
        prop_oneof![3 => Just(None), 1 => Just(Some("e1")), 1 => Just(Some("e2"))],
        1u64..8,
    )
        .prop_map(|(kind, t, scope, epoch, route, rejected, holder, inc, order, emitter, seq)| {
            let mut e = E { kind, ts: t * 25, scope, epoch, route, rejected, holder, inc, order, emitter, seq: emitter.map(|_| seq) };
            match kind {
                Kind::Grant => {
                    e.scope = e.scope.or(Some("s1"));
                    e.epoch = e.epoch.or(Some(1));
                }
                Kind::Heartbeat => e.route = e.route.or(Some("r1")),
                _ => {}
            }
            e
        })
}

fn precedes(a: &E, b: &E, skew: i64) -> bool {
    match (a.order, b.order) {
        (Some(x), Some(y)) if a.inc == b.inc => x < y,
        _ => a.ts + skew < b.ts,
    }
}

#[derive(Debug, Default, PartialEq, Eq)]
struct Findings {
    /// (kind, stale position, witness position)
    cxs: BTreeSet<(String, usize, usize)>,
    reasons: BTreeMap<Reason, u64>,
}

fn model(evs: &[E], grants_required: bool, skew: i64) -> Findings {
    let n = evs.len();
    // Duplicates: key groups, equal groups keep the first, differing groups set aside.
    let mut keys: BTreeMap<(u8, String), Vec<usize>> = BTreeMap::new();
    for (i, e) in evs.iter().enumerate() {
        if let (Some(em), Some(s)) = (e.emitter, e.seq) {
            keys.entry((0, format!("{em}/{s}"))).or_default().push(i);
        }
        if matches!(e.kind, Kind::Commit | Kind::Fence)
            && let (Some(sc), Some(o)) = (e.scope, e.order)
        {
            keys.entry((1, format!("{sc}/{}/{o}/{:?}", e.inc, e.epoch)))
                .or_default()
                .push(i);
        }
    }
    let mut aside = vec![false; n];
    let mut dropped = vec![false; n];
    let mut conflicts = 0u64;
    for g in keys.values().filter(|g| g.len() > 1) {
        if g.iter().all(|&i| evs[i].content() == evs[g[0]].content()) {
            for &i in &g[1..] {
                dropped[i] = true;
            }
        } else {
            conflicts += 1;
            for &i in g {
                aside[i] = true;
            }
        }
    }
    loop {
        let mut changed = false;
        for g in keys.values().filter(|g| g.len() > 1) {
            if g.iter().all(|&i| evs[i].content() == evs[g[0]].content())
                && g.iter().any(|&i| aside[i])
                && !g.iter().all(|&i| aside[i])
            {
                for &i in g {
                    aside[i] = true;
                }
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    let live = |i: usize| !aside[i] && !dropped[i];
    let mut f = Findings::default();
    let mut reason = |r: Reason, k: u64| {
        if k > 0 {
            *f.reasons.entry(r).or_default() += k;
        }
    };
    reason(Reason::ConflictingDuplicate, conflicts);
    let c: Vec<usize> = (0..n)
        .filter(|&i| {
            live(i) && evs[i].committed() && evs[i].scope.is_some() && evs[i].epoch.is_some()
        })
        .collect();
    let g: Vec<usize> = (0..n)
        .filter(|&i| live(i) && evs[i].kind == Kind::Grant)
        .collect();
    let mut cxs = BTreeSet::new();
    let mut ambiguous = BTreeSet::new();
    let best = |cands: Vec<usize>| {
        cands
            .into_iter()
            .min_by_key(|&a| (std::cmp::Reverse(evs[a].epoch), evs[a].ts, a))
    };
    for (set, kind) in [(&c, "stale_commit"), (&g, "grant_regression")] {
        for &b in set {
            let eb = &evs[b];
            let higher: Vec<usize> = set
                .iter()
                .copied()
                .filter(|&a| {
                    evs[a].scope == eb.scope && evs[a].inc == eb.inc && evs[a].epoch > eb.epoch
                })
                .collect();
            let pre: Vec<usize> = higher
                .iter()
                .copied()
                .filter(|&a| precedes(&evs[a], eb, skew))
                .collect();
            if let Some(w) = best(pre) {
                cxs.insert((kind.to_string(), b, w));
            } else if higher.iter().any(|&a| !precedes(eb, &evs[a], skew)) {
                ambiguous.insert(b);
            }
        }
    }
    for &b in &c {
        let eb = &evs[b];
        let higher: Vec<usize> = c
            .iter()
            .copied()
            .filter(|&a| evs[a].scope == eb.scope && evs[a].inc > eb.inc)
            .collect();
        let pre: Vec<usize> = higher
            .iter()
            .copied()
            .filter(|&a| evs[a].ts + skew < eb.ts)
            .collect();
        if let Some(w) = pre
            .into_iter()
            .min_by_key(|&a| (std::cmp::Reverse((evs[a].inc, evs[a].epoch)), evs[a].ts, a))
        {
            cxs.insert(("stale_incarnation".to_string(), b, w));
        } else if higher.iter().any(|&a| eb.ts + skew >= evs[a].ts) {
            ambiguous.insert(b);
        }
    }
    for (set, _) in [(&c, 0), (&g, 1)] {
        let mut groups: BTreeMap<(&str, u64, u64), Vec<usize>> = BTreeMap::new();
        for &i in set.iter().filter(|&&i| evs[i].holder.is_some()) {
            groups
                .entry((evs[i].scope.unwrap(), evs[i].inc, evs[i].epoch.unwrap()))
                .or_default()
                .push(i);
        }
        for members in groups.values() {
            let holders: BTreeSet<_> = members.iter().map(|&i| evs[i].holder).collect();
            if holders.len() > 1 {
                let stale = *members.iter().max_by_key(|&&i| (evs[i].ts, i)).unwrap();
                let w = *members
                    .iter()
                    .filter(|&&i| evs[i].holder != evs[stale].holder)
                    .min_by_key(|&&i| (evs[i].ts, i))
                    .unwrap();
                cxs.insert(("epoch_reuse".to_string(), stale, w));
            }
        }
    }
    for &i in &c {
        let e = &evs[i];
        let granted: Vec<usize> = g
            .iter()
            .copied()
            .filter(|&j| evs[j].scope == e.scope && evs[j].inc == e.inc && evs[j].epoch == e.epoch)
            .collect();
        if granted.is_empty() && grants_required {
            reason(Reason::UngrantedEpoch, 1);
        }
        let with_holder: Vec<usize> = granted
            .iter()
            .copied()
            .filter(|&j| evs[j].holder.is_some())
            .collect();
        if let (Some(h), false) = (e.holder, with_holder.is_empty())
            && !with_holder.iter().any(|&j| evs[j].holder == Some(h))
        {
            let w = *with_holder.iter().min_by_key(|&&j| (evs[j].ts, j)).unwrap();
            cxs.insert(("holder_mismatch".to_string(), i, w));
        }
    }
    reason(Reason::AmbiguousOrder, ambiguous.len() as u64);
    for (i, e) in evs.iter().enumerate() {
        if !live(i) || !e.committed() {
            continue;
        }
        reason(Reason::MissingScope, u64::from(e.scope.is_none()));
        reason(Reason::MissingEpoch, u64::from(e.epoch.is_none()));
        reason(Reason::MissingRoute, u64::from(e.route.is_none()));
        reason(Reason::UndeclaredRoute, u64::from(e.route == Some("rx")));
        reason(Reason::UnfencedRoute, u64::from(e.route == Some("r2")));
    }
    // Telemetry gaps: maximal runs of missing seqs per emitter, over every valid event.
    for em in ["e1", "e2"] {
        let seqs: BTreeSet<u64> = evs
            .iter()
            .filter(|e| e.emitter == Some(em))
            .filter_map(|e| e.seq)
            .collect();
        let v: Vec<u64> = seqs.into_iter().collect();
        let fed = evs.iter().any(|e| e.emitter == Some(em));
        if fed {
            reason(
                Reason::TelemetryGap,
                v.windows(2).filter(|w| w[1] > w[0] + 1).count() as u64,
            );
        }
    }
    // Route silence, window by window.
    if !evs.is_empty() {
        let first = evs.iter().map(|e| e.ts).min().unwrap().div_euclid(WINDOW);
        let last = evs.iter().map(|e| e.ts).max().unwrap().div_euclid(WINDOW);
        for r in ROUTES {
            let obs: Vec<i64> = (0..n)
                .filter(|&i| live(i) && evs[i].route == Some(r) && evs[i].kind != Kind::Grant)
                .map(|i| evs[i].ts)
                .collect();
            for k in first..=last {
                let end = (k + 1) * WINDOW;
                reason(
                    Reason::RouteSilent,
                    u64::from(!obs.iter().any(|&o| end - FRESHNESS < o && o <= end)),
                );
            }
        }
    } else {
        reason(Reason::RouteSilent, 2);
    }
    f.cxs = cxs;
    f
}

/// The core's view of a model event.
fn event(e: &E) -> Event<'static> {
    Event {
        kind: e.kind,
        ts: EventTime(1_000_000 + e.ts),
        property: None,
        scope: e.scope,
        epoch: e.epoch.map(Epoch),
        route: e.route,
        outcome: if e.rejected {
            Outcome::Rejected
        } else {
            Outcome::Committed
        },
        holder: e.holder,
        op_id: None,
        incarnation: Incarnation(e.inc),
        order: e.order.map(Order),
        emitter: e.emitter,
        seq: e.seq.map(Seq),
        premise: None,
        valid_for: None,
        attester: None,
        evidence: None,
    }
}

fn core(evs: &[E], grants_required: bool, skew: i64) -> (Findings, fencewatch_assess::Report) {
    let mut h = History::new(contract(grants_required, skew));
    let src = h.add_source("m");
    for (i, e) in evs.iter().enumerate() {
        h.push(&event(e), src, i as u64);
    }
    let report = h.finish();
    let p = &report.properties[0];
    let pos = |s: &str| s.strip_prefix("m:").unwrap().parse::<usize>().unwrap();
    let cxs = p
        .counterexamples
        .iter()
        .map(|c| {
            (
                c.kind.as_str().to_string(),
                pos(&c.stale.source),
                pos(&c.superseding.source),
            )
        })
        .collect();
    (
        Findings {
            cxs,
            reasons: p.unknown.clone(),
        },
        report,
    )
}

/// Shifts model times like the core's input (the core requires non-negative, aligned times).
fn shifted(evs: &[E]) -> Vec<E> {
    evs.iter()
        .map(|e| E {
            ts: e.ts + 1_000_000,
            ..e.clone()
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn core_agrees_with_the_model(evs in prop::collection::vec(arb_event(), 0..14).prop_shuffle(), required in any::<bool>(), skew in prop_oneof![Just(0i64), Just(24), Just(25), Just(50), Just(80), 0i64..400]) {
        let (got, report) = core(&evs, required, skew);
        let want = model(&shifted(&evs), required, skew);
        prop_assert_eq!(&got, &want);
        // Nothing is refuted unless certain.
        for (kind, stale, witness) in &got.cxs {
            if kind == "stale_commit" || kind == "grant_regression" {
                prop_assert!(precedes(&evs[*witness], &evs[*stale], skew));
                prop_assert!(evs[*witness].epoch > evs[*stale].epoch);
            }
        }
        let p = &report.properties[0];
        let expect = if !got.cxs.is_empty() { "refuted" } else if !got.reasons.is_empty() { "unknown" } else { "holds" };
        prop_assert_eq!(p.verdict.as_str(), expect);
    }

    #[test]
    fn arrival_order_changes_nothing_but_positions(evs in prop::collection::vec(arb_event(), 0..14), seed in any::<u64>()) {
        let mut shuffled: Vec<(usize, E)> = evs.iter().cloned().enumerate().collect();
        let mut x = seed | 1;
        for i in (1..shuffled.len()).rev() {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            shuffled.swap(i, (x % (i as u64 + 1)) as usize);
        }
        // Duplicate settling keeps the first delivery read, so compare histories without exact
        // duplicates: there the findings are a function of the set of events alone.
        let has_dups = evs.iter().enumerate().any(|(i, a)| evs[..i].iter().any(|b| b.content() == a.content()));
        prop_assume!(!has_dups);
        let (a, _) = core(&evs, false, 50);
        let (b, _) = core(&shuffled.iter().map(|(_, e)| e.clone()).collect::<Vec<_>>(), false, 50);
        let map = |f: &Findings, perm: Option<&[(usize, E)]>| -> BTreeSet<(String, usize, usize)> {
            f.cxs.iter().map(|(k, s, w)| match perm { Some(p) => (k.clone(), p[*s].0, p[*w].0), None => (k.clone(), *s, *w) }).collect()
        };
        // The stale event of epoch_reuse is the group's latest, ties broken by reading order, so
        // only its count is order-independent; every other stale event is.
        let stale = |f: &Findings, perm: Option<&[(usize, E)]>| -> (BTreeSet<(String, usize)>, usize) {
            let m = map(f, perm);
            (m.iter().filter(|x| x.0 != "epoch_reuse").map(|x| (x.0.clone(), x.1)).collect(), m.iter().filter(|x| x.0 == "epoch_reuse").count())
        };
        prop_assert_eq!(stale(&a, None), stale(&b, Some(&shuffled)));
        prop_assert_eq!(a.reasons, b.reasons);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

    /// Reading in batches (as `check`'s decoding threads do, malformed lines among them) and
    /// assessing on several threads give the report of pushing one by one on one thread; and
    /// what is said of emitters does not depend on arrival order, whether their seqs arrive
    /// increasing (noted while reading) or not (sorted at the end).
    #[test]
    fn batches_threads_and_seq_order_change_nothing(
        evs in prop::collection::vec(arb_event(), 0..40),
        cuts in prop::collection::vec(0usize..40, 0..4),
        bad in prop::collection::vec(0usize..40, 0..3),
        threads in 2usize..5,
    ) {
        let contract = contract(false, 50);
        let mut one = History::new(contract.clone());
        let src = one.add_source("m");
        let mut batched = History::new(contract.clone());
        batched.add_source("m");
        batched.set_threads(threads);
        // A batch's positions are relative to its first event's, shifted as it is appended.
        let mut batch = Batch::new(src);
        let mut start = 0u64;
        for (i, e) in evs.iter().enumerate() {
            if cuts.contains(&i) {
                batch.shift_positions(start);
                batched.append(std::mem::replace(&mut batch, Batch::new(src)));
                start = i as u64;
            }
            if bad.contains(&i) {
                one.push_malformed(src, 10_000 + i as u64, None, "not JSON".into());
                batch.push_malformed(10_000 + i as u64 - start, None, "not JSON".into());
            }
            one.push(&event(e), src, i as u64);
            batch.push(&contract, &event(e), i as u64 - start);
        }
        batch.shift_positions(start);
        batched.append(batch);
        let a = serde_json::to_string(&one.finish()).unwrap();
        let b = serde_json::to_string(&batched.finish()).unwrap();
        prop_assert_eq!(&a, &b);
        // Emitters in reverse order: seqs that arrived increasing now go back.
        let mut reversed = History::new(contract);
        reversed.add_source("m");
        for (i, e) in evs.iter().enumerate().rev() {
            reversed.push(&event(e), src, i as u64);
        }
        let emitters = |json: &str| serde_json::from_str::<serde_json::Value>(json).unwrap()["emitters"].clone();
        let c = serde_json::to_string(&reversed.finish()).unwrap();
        prop_assert_eq!(emitters(&a), emitters(&c));
    }
}

#[test]
fn window_placement_of_malformed_events_uses_prior_time() {
    let mut h = History::new(contract(false, 50));
    let src = h.add_source("m");
    let mut e = Event::new(Kind::Heartbeat, EventTime(1_000_000));
    e.route = Some("r1");
    h.push(&e, src, 1);
    h.push_malformed(src, 2, None, "bad".into());
    let r = h.finish();
    assert_eq!(r.malformed, 1);
    assert_eq!(r.properties[0].unknown[&Reason::MalformedEvent], 1);
    assert_eq!(r.properties[0].windows[0].verdict.as_str(), "unknown");
}
