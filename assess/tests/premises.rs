//! Premises (SPEC §10) against a brute-force model: random histories of commits and
//! attestations (required and unrequired premises, per-route and property-wide, `failed` ones,
//! capped and default `valid_for`, re-sends under one (emitter, seq)) in random arrival order.
//!
//! The model reads the definitions instant by instant, sharing no code with the core. `check`
//! must place exactly its `premise_failed` / `premise_unattested` windows and count the
//! ignored attestations; `serve` (closed, any arrival order, one partition or two merged, and
//! through a checkpoint taken mid-history) must say what `check` says.

use fencewatch_assess::event::{Epoch, Event, Kind, Outcome, Seq};
use fencewatch_assess::live::{Live, LiveOptions, LiveState, View};
use fencewatch_assess::time::Duration;
use fencewatch_assess::{Contract, EventTime, History, Reason, Verdict};
use proptest::prelude::*;
use std::collections::BTreeMap;

const WINDOW: i64 = 100;
const BASE: i64 = 1_000_000;
/// (premise, route, max_age) required by [`contract`].
const REQUIRED: [(&str, Option<&str>, i64); 2] = [
    ("durable_fence", None, 120),
    ("conditional_commit", Some("r1"), 200),
];

fn contract() -> Contract {
    let src = "[[property]]\nname=\"p\"\nsubject=\"S\"\nstrategy=\"lease_epoch\"\nwindow=\"100ns\"\nclock_skew=\"5ns\"\nallowed_lateness=\"10ns\"\nroute_freshness=\"100000ns\"\n[[property.route]]\nname=\"r1\"\n[[property.route]]\nname=\"r2\"\n[[property.premise]]\nname=\"durable_fence\"\nmax_age=\"120ns\"\n[[property.premise]]\nname=\"conditional_commit\"\nroute=\"r1\"\nmax_age=\"200ns\"\n";
    Contract::parse("premises.toml", src).unwrap()
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct E {
    kind: Kind,
    ts: i64,
    route: Option<&'static str>,
    premise: Option<&'static str>,
    valid_for: Option<i64>,
    failed: bool,
    seq: Option<u64>,
}

impl E {
    fn content(&self) -> impl PartialEq + '_ {
        (
            self.kind,
            self.ts,
            self.route,
            self.premise,
            self.valid_for,
            self.failed,
        )
    }
}

fn arb_event() -> impl Strategy<Value = E> {
    let commit = (0i64..12, prop_oneof![Just("r1"), Just("r2")]).prop_map(|(t, r)| E {
        kind: Kind::Commit,
        ts: 100 + t * 80,
        route: Some(r),
        premise: None,
        valid_for: None,
        failed: false,
        seq: None,
    });
    let attestation = (
        0i64..60,
        prop_oneof![
            3 => Just(("durable_fence", None)),
            3 => Just(("conditional_commit", Some("r1"))),
            1 => Just(("conditional_commit", Some("r2"))),
            1 => Just(("conditional_commit", None)),
            1 => Just(("durable_fence", Some("r1"))),
            1 => Just(("linearizable_lease", None)),
        ],
        prop_oneof![2 => Just(None), 3 => (1i64..300).prop_map(Some)],
        prop::bool::weighted(0.2),
        prop_oneof![3 => Just(None), 1 => (0u64..6).prop_map(Some)],
    )
        .prop_map(|(t, (premise, route), valid_for, failed, seq)| E {
            kind: Kind::Attestation,
            ts: t * 23,
            route,
            premise: Some(premise),
            valid_for,
            failed,
            seq,
        });
    prop_oneof![2 => commit, 3 => attestation]
}

fn event(e: &E) -> Event<'_> {
    let mut ev = Event::new(e.kind, EventTime(BASE + e.ts));
    ev.route = e.route;
    match e.kind {
        Kind::Attestation => {
            ev.premise = e.premise;
            ev.valid_for = e.valid_for.map(Duration);
            ev.attester = Some("ci");
            if e.failed {
                ev.outcome = Outcome::Failed;
            }
        }
        _ => {
            ev.scope = Some("s1");
            ev.epoch = Some(Epoch(1));
        }
    }
    if let Some(s) = e.seq {
        ev.emitter = Some("ci");
        ev.seq = Some(Seq(s));
    }
    ev
}

/// What the model and the core are compared on.
#[derive(Debug, PartialEq, Eq)]
struct Premises {
    failed_windows: u64,
    unattested_windows: u64,
    ignored: u64,
}

/// SPEC §10's definition, instant by instant, after §4's Duplicates rule.
fn model(evs: &[E]) -> Premises {
    let mut groups: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
    for (i, e) in evs.iter().enumerate() {
        if let Some(s) = e.seq {
            groups.entry(s).or_default().push(i);
        }
    }
    let mut live = vec![true; evs.len()];
    for g in groups.values().filter(|g| g.len() > 1) {
        let equal = g.iter().all(|&i| evs[i].content() == evs[g[0]].content());
        for &i in if equal { &g[1..] } else { &g[..] } {
            live[i] = false;
        }
    }
    let commits: Vec<i64> = evs
        .iter()
        .filter(|e| e.kind == Kind::Commit)
        .map(|e| e.ts)
        .collect();
    let mut out = Premises {
        failed_windows: 0,
        unattested_windows: 0,
        ignored: 0,
    };
    let attestations: Vec<&E> = evs
        .iter()
        .zip(&live)
        .filter(|(e, l)| **l && e.kind == Kind::Attestation)
        .map(|(e, _)| e)
        .collect();
    out.ignored = attestations
        .iter()
        .filter(|a| {
            !REQUIRED
                .iter()
                .any(|(n, r, _)| a.premise == Some(*n) && a.route == *r)
        })
        .count() as u64;
    let (Some(&lo), Some(&hi)) = (commits.iter().min(), commits.iter().max()) else {
        return out;
    };
    for (name, route, max_age) in REQUIRED {
        let mine: Vec<(i64, i64, bool)> = attestations
            .iter()
            .filter(|a| a.premise == Some(name) && a.route == route)
            .map(|a| {
                let v = a.valid_for.unwrap_or(max_age).min(max_age);
                (a.ts, a.ts + v, a.failed)
            })
            .collect();
        let state = |t: i64| -> u8 {
            let supported = mine.iter().any(|&(s, e, f)| {
                !f && s <= t && t < e && !mine.iter().any(|&(x, _, g)| g && s <= x && x <= t)
            });
            if supported {
                return 0;
            }
            match mine.iter().filter(|a| a.0 <= t).map(|a| a.0).max() {
                Some(ts) if mine.iter().any(|a| a.0 == ts && a.2) => 2,
                _ => 1,
            }
        };
        for k in (BASE + lo).div_euclid(WINDOW)..=(BASE + hi).div_euclid(WINDOW) {
            let worst = (k * WINDOW - BASE..(k + 1) * WINDOW - BASE)
                .map(state)
                .max()
                .unwrap();
            match worst {
                2 => out.failed_windows += 1,
                1 => out.unattested_windows += 1,
                _ => {}
            }
        }
    }
    out
}

fn check(evs: &[E]) -> fencewatch_assess::Report {
    let mut h = History::new(contract());
    let src = h.add_source("m");
    for (i, e) in evs.iter().enumerate() {
        h.push(&event(e), src, i as u64);
    }
    h.finish()
}

fn premises_of(r: &fencewatch_assess::Report) -> Premises {
    let u = &r.properties[0].unknown;
    Premises {
        failed_windows: u.get(&Reason::PremiseFailed).copied().unwrap_or(0),
        unattested_windows: u.get(&Reason::PremiseUnattested).copied().unwrap_or(0),
        ignored: r.attestations_ignored,
    }
}

fn push_all(l: &mut Live, evs: &[E], order: impl IntoIterator<Item = usize>) {
    let src = l.add_source("m");
    for i in order {
        l.push(&event(&evs[i]), src, i as u64, i64::MAX / 2);
    }
}

/// Window verdicts of a timeline, one per window.
fn verdicts(runs: &[fencewatch_assess::window::WindowRun]) -> Vec<Verdict> {
    runs.iter()
        .flat_map(|r| std::iter::repeat_n(r.verdict, r.windows as usize))
        .collect()
}

fn view_counts(v: &View<'_>) -> (BTreeMap<Reason, u64>, u64) {
    (v.unknown_counts(0), v.attestations_ignored(0))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1500, ..ProptestConfig::default() })]

    #[test]
    fn check_agrees_with_the_model(evs in prop::collection::vec(arb_event(), 0..16)) {
        let r = check(&evs);
        prop_assert_eq!(premises_of(&r), model(&evs));
        let p = &r.properties[0];
        // A failed premise is unknown, never refuted.
        prop_assert!(p.counterexamples.is_empty());
    }

    /// Within the horizon (nothing folded), whatever the arrival order, the partitioning and
    /// a checkpoint taken on the way.
    #[test]
    fn serve_says_what_check_says_in_any_arrival_order_and_partitioning(
        evs in prop::collection::vec(arb_event(), 0..16),
        order in prop::collection::vec(any::<u32>(), 16),
        split in prop::collection::vec(any::<bool>(), 16),
        cut in 0usize..16,
    ) {
        agree(&evs, &order, &split, cut, NEVER_FOLD)?;
    }

    /// With the default horizon, attestations without a seq (what `fencewatch attest` sends):
    /// their support is never folded, so late ones still count exactly.
    #[test]
    fn support_is_never_folded(
        evs in prop::collection::vec(arb_event(), 0..16),
        order in prop::collection::vec(any::<u32>(), 16),
        split in prop::collection::vec(any::<bool>(), 16),
        cut in 0usize..16,
    ) {
        let evs: Vec<E> = evs.into_iter().map(|e| E { seq: None, ..e }).collect();
        agree(&evs, &order, &split, cut, None)?;
    }
}

/// A retention beyond any history: nothing is folded.
const NEVER_FOLD: Option<i64> = Some(i64::MAX / 4);

fn agree(
    evs: &[E],
    order: &[u32],
    split: &[bool],
    cut: usize,
    retention: Option<i64>,
) -> Result<(), TestCaseError> {
    let options = LiveOptions {
        retention,
        ..LiveOptions::default()
    };
    let r = check(evs);
    let want = (r.properties[0].unknown.clone(), r.attestations_ignored);
    let want_windows = verdicts(&r.properties[0].windows);
    let mut idx: Vec<usize> = (0..evs.len()).collect();
    idx.sort_by_key(|&i| (order[i], i));
    // One partition, a checkpoint taken after `cut` events.
    let mut l = Live::new(contract(), options);
    let cut = cut.min(idx.len());
    push_all(&mut l, evs, idx[..cut].iter().copied());
    let bytes = postcard::to_stdvec(l.state()).unwrap();
    let state: LiveState = postcard::from_bytes(&bytes).unwrap();
    let mut l = Live::restore(contract(), state).unwrap();
    push_all(&mut l, evs, idx[cut..].iter().copied());
    l.close();
    prop_assert_eq!(view_counts(&l.view()), want.clone());
    let t = l.view().timeline(0, i64::MIN, i64::MAX, 1_000);
    prop_assert_eq!(verdicts(&t), want_windows);
    // Two partitions: the commits (one scope) and keyed attestations in one, the others
    // spread; merged per query.
    let (mut a, mut b) = (
        Live::new(contract(), options),
        Live::new(contract(), options),
    );
    let to_b = |i: usize| evs[i].kind == Kind::Attestation && evs[i].seq.is_none() && split[i];
    push_all(&mut a, evs, idx.iter().copied().filter(|&i| !to_b(i)));
    push_all(&mut b, evs, idx.iter().copied().filter(|&i| to_b(i)));
    a.close();
    b.close();
    let c = contract();
    let mut v = View::new(&c);
    v.add_live(&a, true).unwrap();
    v.add_live(&b, true).unwrap();
    prop_assert_eq!(view_counts(&v), want);
    Ok(())
}

fn attest(premise: &'static str, route: Option<&'static str>, ts: i64, valid: Option<i64>) -> E {
    E {
        kind: Kind::Attestation,
        ts,
        route,
        premise: Some(premise),
        valid_for: valid,
        failed: false,
        seq: None,
    }
}

fn commit(ts: i64) -> E {
    E {
        kind: Kind::Commit,
        ts,
        route: Some("r1"),
        premise: None,
        valid_for: None,
        failed: false,
        seq: None,
    }
}

#[test]
fn a_late_attestation_raises_a_final_window_and_marks_it_revised() {
    let c = contract();
    let mut l = Live::new(c.clone(), LiveOptions::default());
    let src = l.add_source("m");
    let mut pos = 0;
    let mut push = |l: &mut Live, e: E| {
        l.push(&event(&e), src, pos, i64::MAX / 2);
        pos += 1;
    };
    for t in [0, 50, 150, 250, 350, 450] {
        push(&mut l, commit(t));
        let mut other = commit(t + 1);
        other.route = Some("r2");
        push(&mut l, other);
    }
    // Windows 10000..=10004 of 100 ns; the watermark (451 - 10) makes the first four final.
    let before = l.view().timeline(0, i64::MIN, i64::MAX, 100);
    assert!(
        before
            .iter()
            .all(|r| r.verdict == Verdict::Unknown && !r.revised)
    );
    // Late attestations of both premises cover the first two windows (120 and 200 ns).
    push(&mut l, attest("durable_fence", None, 0, None));
    push(&mut l, attest("durable_fence", None, 100, None));
    push(&mut l, attest("conditional_commit", Some("r1"), 0, None));
    let after = l.view().timeline(0, i64::MIN, i64::MAX, 100);
    let got: Vec<(Verdict, bool, bool)> = after
        .iter()
        .map(|r| (r.verdict, r.is_final, r.revised))
        .collect();
    assert_eq!(
        got,
        [
            (Verdict::Holds, true, true),
            (Verdict::Holds, true, true),
            (Verdict::Unknown, true, false),
            (Verdict::Unknown, true, false),
            (Verdict::Unknown, false, false),
        ]
    );
    // Attestations moved no watermark and extended no window.
    assert_eq!(l.watermark(0), EventTime(BASE + 441));
    assert_eq!(after.len(), 5);
    // A failed one lowers them again, also revised.
    let mut f = attest("durable_fence", None, 60, None);
    f.failed = true;
    push(&mut l, f);
    let v = l.view();
    let again = v.timeline(0, i64::MIN, i64::MAX, 100);
    assert_eq!(again[0].verdict, Verdict::Unknown);
    let a = v.assurance(0, BASE + 99, 99, BASE + 450);
    assert_eq!(a.unsupported_premises.len(), 1, "{a:?}");
    assert_eq!(a.unsupported_premises[0].premise, "durable_fence");
    assert!(a.unknown.contains_key(&Reason::PremiseFailed));
    let p = v.premises(0, BASE + 10);
    assert_eq!(p[0].state, fencewatch_assess::live::PremiseState::Supported);
    assert_eq!(p[0].supported_until_ns, Some(BASE + 60));
    assert_eq!(p[1].supported_until_ns, Some(BASE + 200));
    assert_eq!(p[0].premise.attestations, 3);
}

#[test]
fn a_checkpoint_in_the_middle_of_a_support_interval_keeps_it() {
    let c = contract();
    let evs = [
        attest("durable_fence", None, 0, None),
        attest("conditional_commit", Some("r1"), 0, Some(150)),
        commit(10),
        commit(90),
        commit(110),
    ];
    let mut l = Live::new(c.clone(), LiveOptions::default());
    push_all(&mut l, &evs, 0..3);
    let bytes = postcard::to_stdvec(l.state()).unwrap();
    let mut r = Live::restore(c.clone(), postcard::from_bytes(&bytes).unwrap()).unwrap();
    let mut straight = Live::new(c, LiveOptions::default());
    push_all(&mut straight, &evs, 0..evs.len());
    push_all(&mut r, &evs, 3..evs.len());
    let at = BASE + 100;
    assert_eq!(r.view().premises(0, at), straight.view().premises(0, at));
    assert_eq!(
        r.view().premises(0, at)[1].supported_until_ns,
        Some(BASE + 150)
    );
    assert_eq!(
        r.view().unknown_counts(0),
        straight.view().unknown_counts(0)
    );
}

#[test]
fn a_contract_without_premises_ignores_attestations() {
    let plain = Contract::parse(
        "c.toml",
        "[[property]]\nname=\"p\"\nsubject=\"S\"\nstrategy=\"lease_epoch\"\n[[property.route]]\nname=\"r1\"\n",
    )
    .unwrap();
    // Requiring premises changes what a checkpoint holds: another fingerprint.
    assert_ne!(
        fencewatch_assess::live::fingerprint(&plain),
        fencewatch_assess::live::fingerprint(&contract())
    );
    let mut l = Live::new(plain, LiveOptions::default());
    push_all(
        &mut l,
        &[commit(0), attest("durable_fence", None, 0, None)],
        0..2,
    );
    assert_eq!(l.view().attestations_ignored(0), 1);
    assert!(l.view().premises(0, BASE).is_empty());
}
