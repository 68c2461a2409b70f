//! The per-event rules are one set, so `check` (`History`) and `serve` (`Live`, input closed,
//! nothing folded) agree on the edges where their two copies had drifted (issue 12, item 2):
//! - the (scope, incarnation, order, epoch) duplicate key of commits without an `epoch`, and
//!   of events of different properties (the key does not name the property);
//! - a delivery that names the contract's only property and one that leaves it implicit are
//!   the same content (SPEC §2: `property` is required only under several properties).

mod common;

use common::{NEVER_FOLD, check, contract};
use fencewatch_assess::event::{Epoch, Event, Kind, Order, Seq};
use fencewatch_assess::live::{Live, LiveOptions};
use fencewatch_assess::{Contract, EventTime, Reason};
use std::collections::BTreeMap;

fn serve(c: &Contract, events: &[Event<'_>]) -> Live {
    let mut l = Live::new(
        c.clone(),
        LiveOptions {
            retention: NEVER_FOLD,
            ..LiveOptions::default()
        },
    );
    let src = l.add_source("wal");
    for (i, e) in events.iter().enumerate() {
        l.push(e, src, i as u64, 1_000_000_000);
    }
    l.close();
    l
}

/// `check`'s and `serve`'s reason counts, events and duplicates agree on `events` after
/// heartbeats of both routes (whose silence is not what is compared); returns `check`'s reason
/// counts.
fn agree(events: &[Event<'_>]) -> BTreeMap<Reason, u64> {
    let c = contract(false, 5);
    let mut all: Vec<Event<'_>> = ["r1", "r2"]
        .map(|r| {
            let mut hb = Event::new(Kind::Heartbeat, EventTime(10));
            hb.route = Some(r);
            hb
        })
        .to_vec();
    all.extend_from_slice(events);
    let report = check(&c, &all);
    let live = serve(&c, &all);
    let view = live.view();
    let prop = &report.properties[0];
    assert_eq!(view.unknown_counts(0), prop.unknown, "reason counts");
    assert_eq!(view.property_events(0), prop.events, "events");
    assert_eq!(view.totals().3, report.duplicates, "duplicates dropped");
    prop.unknown.clone()
}

fn commit(ts: i64, holder: &'static str) -> Event<'static> {
    let mut e = Event::new(Kind::Commit, EventTime(ts));
    e.scope = Some("s1");
    e.route = Some("r1");
    e.holder = Some(holder);
    e.order = Some(Order(7));
    e
}

#[test]
fn order_key_without_epoch_is_one_key_in_check_and_serve() {
    // Equal deliveries: one is kept, one `missing_epoch`.
    let same = [commit(10, "a"), commit(10, "a")];
    let r = agree(&same);
    assert_eq!(r.get(&Reason::MissingEpoch), Some(&1));
    assert_eq!(r.get(&Reason::ConflictingDuplicate), None);
    // Differing deliveries: both set aside, `conflicting_duplicate`, no `missing_epoch`.
    let differ = [commit(10, "a"), commit(10, "b")];
    let r = agree(&differ);
    assert_eq!(r.get(&Reason::ConflictingDuplicate), Some(&1));
    assert_eq!(r.get(&Reason::MissingEpoch), None);
    // With an epoch on one of them the keys differ: nothing is set aside.
    let mut with_epoch = commit(10, "b");
    with_epoch.epoch = Some(Epoch(1));
    let r = agree(&[commit(10, "a"), with_epoch]);
    assert_eq!(r.get(&Reason::ConflictingDuplicate), None);
    assert_eq!(r.get(&Reason::MissingEpoch), Some(&1));
}

#[test]
fn implicit_and_named_only_property_are_the_same_content() {
    let mut a = Event::new(Kind::Commit, EventTime(10));
    a.scope = Some("s1");
    a.epoch = Some(Epoch(1));
    a.route = Some("r1");
    a.emitter = Some("e1");
    a.seq = Some(Seq(1));
    let mut b = a.clone();
    b.property = Some("p");
    let r = agree(&[a, b]);
    assert_eq!(r.get(&Reason::ConflictingDuplicate), None);
}

#[test]
fn order_key_spans_properties_in_check_and_serve() {
    let c = Contract::parse(
        "c.toml",
        "[[property]]\nname=\"p\"\nsubject=\"S\"\nstrategy=\"lease_epoch\"\n[[property.route]]\nname=\"r1\"\n[[property]]\nname=\"q\"\nsubject=\"S\"\nstrategy=\"lease_epoch\"\n[[property.route]]\nname=\"r1\"\n",
    )
    .unwrap();
    let mut hb = Event::new(Kind::Heartbeat, EventTime(10));
    hb.route = Some("r1");
    let (mut hp, mut hq) = (hb.clone(), hb);
    hp.property = Some("p");
    hq.property = Some("q");
    // One (scope, incarnation, order, epoch) named by two properties: both set aside, in
    // either arrival order.
    let mut a = commit(10, "a");
    a.epoch = Some(Epoch(1));
    a.property = Some("p");
    let mut b = a.clone();
    b.property = Some("q");
    for events in [
        [hp.clone(), hq.clone(), a.clone(), b.clone()],
        [hp.clone(), hq.clone(), b.clone(), a.clone()],
    ] {
        let report = check(&c, &events);
        let live = serve(&c, &events);
        for p in 0..2 {
            let prop = &report.properties[p];
            assert_eq!(prop.unknown.get(&Reason::ConflictingDuplicate), Some(&1));
            assert_eq!(live.view().unknown_counts(p), prop.unknown, "property {p}");
            assert_eq!(live.view().property_events(p), prop.events);
        }
    }
}

#[test]
fn a_set_aside_delivery_observes_no_route_in_check_and_serve() {
    // The only observations of r1 are two conflicting deliveries of one order key: both set
    // aside, r1 is silent in check; serve, which applied the first before the second came,
    // takes its observation back.
    let c = contract(false, 5);
    let mut hb = Event::new(Kind::Heartbeat, EventTime(10));
    hb.route = Some("r2");
    let mut a = commit(10, "a");
    a.epoch = Some(Epoch(1));
    let mut b = a.clone();
    b.holder = Some("b");
    let events = [hb, a, b];
    let report = check(&c, &events);
    let live = serve(&c, &events);
    let prop = &report.properties[0];
    assert_eq!(prop.unknown.get(&Reason::RouteSilent), Some(&1));
    assert_eq!(live.view().unknown_counts(0), prop.unknown);
}
