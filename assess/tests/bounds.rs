//! Per-name structures fed by input are bounded (issue 11, item 7), and the bounds never make
//! an answer claim more than is known:
//! - a heartbeat's route is not interned unless declared; heartbeats on undeclared routes are
//!   counted per property (coverage);
//! - undeclared routes of commits/fences are counted by name for the first 1,000 per property,
//!   the rest under one bucket; `undeclared_route` is still raised per event;
//! - the name table (holders, routes, emitters) is swept of names no retained state refers to;
//! - names longer than 256 bytes are kept shortened, and still compared exactly.

mod common;

use common::contract_with;
use fencewatch_assess::event::{Epoch, Event, Kind};
use fencewatch_assess::live::{
    Live, LiveOptions, MAX_NAME_BYTES, OTHER_UNDECLARED_ROUTES, UNDECLARED_ROUTES_KEPT,
};
use fencewatch_assess::{EventTime, History, Reason};

fn live(retention: Option<i64>) -> Live {
    Live::new(
        contract_with(false, 5, "10ns", "1000000000ns"),
        LiveOptions {
            retention,
            ..LiveOptions::default()
        },
    )
}

#[test]
fn heartbeats_on_made_up_routes_are_counted_not_kept() {
    let mut l = live(None);
    let src = l.add_source("http");
    let names_before = l.names_interned();
    for i in 0..100_000u64 {
        let route = format!("made-up-{i}");
        let mut hb = Event::new(Kind::Heartbeat, EventTime(i as i64));
        hb.route = Some(&route);
        l.push(&hb, src, i, i64::MAX / 2);
    }
    let mut hb = Event::new(Kind::Heartbeat, EventTime(100_000));
    hb.route = Some("r1");
    l.push(&hb, src, 100_000, i64::MAX / 2);
    assert_eq!(l.names_interned(), names_before, "no name was kept");
    let bytes = postcard::to_stdvec(l.state()).unwrap().len();
    assert!(bytes < 20_000, "checkpoint of {bytes} bytes");
    let cov = l.view().coverage(0);
    assert_eq!(cov.undeclared_heartbeats, 100_000);
    assert!(cov.undeclared_routes.is_empty());
    assert_eq!(cov.routes[0].observations, 1);
}

#[test]
fn undeclared_routes_are_counted_by_name_up_to_a_bound() {
    let mut l = live(Some(0));
    let src = l.add_source("http");
    let n = 5_000u64;
    for i in 0..n {
        let route = format!("made-up-{i}");
        let mut c = Event::new(Kind::Commit, EventTime(i as i64 * 10));
        c.scope = Some("s");
        c.epoch = Some(Epoch(1));
        c.route = Some(&route);
        l.push(&c, src, i, i64::MAX / 2);
    }
    let cov = l.view().coverage(0);
    assert_eq!(cov.undeclared_routes.len(), UNDECLARED_ROUTES_KEPT + 1);
    assert_eq!(
        cov.undeclared_routes[OTHER_UNDECLARED_ROUTES],
        n - UNDECLARED_ROUTES_KEPT as u64
    );
    assert_eq!(cov.undeclared_routes.values().sum::<u64>(), n);
    assert_eq!(cov.undeclared_routes["made-up-0"], 1);
    // The verdict is unaffected: every event still raises `undeclared_route`.
    assert_eq!(l.view().unknown_counts(0)[&Reason::UndeclaredRoute], n);
    // The names themselves go once their events fold.
    assert!(l.names_interned() < 70_000);
}

#[test]
fn names_nothing_refers_to_are_swept() {
    // Every commit names a new holder and a new undeclared route; everything folds behind a
    // horizon of 100 ns. The table holds what retained state refers to, up to twice that.
    let mut l = live(Some(100));
    let src = l.add_source("http");
    let n = 300_000u64;
    let mut peak = 0;
    for i in 0..n {
        let holder = format!("holder-{i}");
        let route = format!("route-{i}");
        let mut c = Event::new(Kind::Commit, EventTime(i as i64 * 10));
        c.scope = Some(["a", "b", "c"][i as usize % 3]);
        c.epoch = Some(Epoch(1 + i / 1000));
        c.holder = Some(&holder);
        c.route = Some(&route);
        l.push(&c, src, i, i64::MAX / 2);
        peak = peak.max(l.names_interned());
    }
    assert!(peak <= 2 * 65_536 + 2, "{peak} names at most");
    // Sweeping changed no answer: as check, but for what folding loses (nothing here: every
    // epoch reuse group is found while its events are kept).
    assert_eq!(
        l.view().unknown_counts(0)[&Reason::UndeclaredRoute],
        n,
        "per event"
    );
}

#[test]
fn sweeping_keeps_every_name_still_referred_to() {
    // Holders of a lease granted long ago (kept as a folded grant above the mark) and of a
    // counterexample survive any number of sweeps; the answers equal check's (an epoch reuse's
    // witness may differ: the earliest one folded).
    let c = contract_with(false, 5, "10ns", "1000000000ns");
    let mut l = Live::new(
        c.clone(),
        LiveOptions {
            retention: Some(100),
            ..LiveOptions::default()
        },
    );
    let mut h = History::new(c);
    let src = l.add_source("wal");
    let hs = h.add_source("wal");
    let mut events: Vec<(Kind, i64, &str, u64, String, String)> = Vec::new();
    events.push((Kind::Grant, 0, "lease", 7, "owner".into(), "r1".into()));
    events.push((Kind::Commit, 5, "x", 3, "old".into(), "r1".into()));
    events.push((Kind::Commit, 50, "x", 2, "older".into(), "r1".into()));
    for i in 0..200_000i64 {
        events.push((
            Kind::Commit,
            100 + i * 10,
            "busy",
            1,
            format!("h{i}"),
            format!("u{i}"),
        ));
        if i % 50_000 == 0 {
            // The lease's holder commits; `intruder` commits with the lease's epoch.
            let t = 100 + i * 10 + 5;
            events.push((Kind::Commit, t, "lease", 7, "owner".into(), "r1".into()));
            events.push((
                Kind::Commit,
                t + 1,
                "lease",
                7,
                "intruder".into(),
                "r1".into(),
            ));
        }
    }
    for (i, (kind, ts, scope, epoch, holder, route)) in events.iter().enumerate() {
        let mut e = Event::new(*kind, EventTime(*ts));
        e.scope = Some(scope);
        e.epoch = Some(Epoch(*epoch));
        e.holder = Some(holder);
        e.route = Some(route);
        l.push(&e, src, i as u64, i64::MAX / 2);
        h.push(&e, hs, i as u64);
    }
    l.close();
    let r = h.finish();
    let want: std::collections::BTreeSet<(String, String, String)> = r.properties[0]
        .counterexamples
        .iter()
        .map(|x| {
            (
                x.id.clone(),
                x.stale.holder.clone().unwrap_or_default(),
                x.kind.as_str().to_string(),
            )
        })
        .collect();
    let got: std::collections::BTreeSet<(String, String, String)> = l
        .view()
        .counterexamples(None, None, None, None, None, 1_000)
        .counterexamples
        .iter()
        .map(|x| {
            (
                x.id.clone(),
                x.stale.holder.clone().unwrap_or_default(),
                x.kind.as_str().to_string(),
            )
        })
        .collect();
    assert!(!want.is_empty());
    assert_eq!(got, want);
    assert_eq!(l.view().unknown_counts(0), r.properties[0].unknown);
    assert!(
        l.names_interned() < 2 * 65_536 + 10,
        "{}",
        l.names_interned()
    );
}

#[test]
fn long_names_are_kept_short_and_compared_exactly() {
    let mut l = live(None);
    let src = l.add_source("http");
    let a = "a".repeat(1 << 20);
    let b = format!("{}b", "a".repeat((1 << 20) - 1));
    for (i, (ts, holder)) in [(100, &a), (200, &a)].into_iter().enumerate() {
        let mut c = Event::new(Kind::Commit, EventTime(ts));
        c.scope = Some("s");
        c.epoch = Some(Epoch(1));
        c.route = Some("r1");
        c.holder = Some(holder);
        l.push(&c, src, i as u64, i64::MAX / 2);
    }
    assert_eq!(l.view().counterexample_count(0), 0, "one holder");
    let mut c = Event::new(Kind::Commit, EventTime(300));
    c.scope = Some("s");
    c.epoch = Some(Epoch(1));
    c.route = Some("r1");
    c.holder = Some(&b);
    l.push(&c, src, 2, i64::MAX / 2);
    l.close();
    let page = l.view().counterexamples(None, None, None, None, None, 10);
    assert_eq!(
        page.counterexamples.len(),
        1,
        "two holders sharing a long prefix"
    );
    let shown = page.counterexamples[0].stale.holder.clone().unwrap();
    assert!(shown.len() < MAX_NAME_BYTES + 64, "{} bytes", shown.len());
    assert!(
        shown.contains(&format!("[{} bytes, xxh3-128 ", b.len())),
        "{shown:.300}"
    );
    let bytes = postcard::to_stdvec(l.state()).unwrap().len();
    assert!(bytes < 10_000, "{bytes}");
}
