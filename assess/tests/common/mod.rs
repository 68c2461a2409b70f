//! Generators shared by the live tests: random histories of commits, fences, grants and
//! heartbeats over two scopes, with holders, incarnations, orders and emitters.

#![allow(dead_code)]

pub(crate) mod keys;

use fencewatch_assess::event::{Epoch, Event, Incarnation, Kind, Order, Outcome, Seq};
use fencewatch_assess::live::{Live, LiveOptions};
use fencewatch_assess::{Contract, EventTime};
use proptest::prelude::*;
use std::collections::BTreeMap;

/// A one-property contract (routes `r1` fenced, `r2` unfenced), lateness 10ns, freshness 200ns.
pub(crate) fn contract(grants_required: bool, skew: i64) -> Contract {
    contract_with(grants_required, skew, "10ns", "200ns")
}

/// [`contract`] with the given lateness and freshness.
pub(crate) fn contract_with(
    grants_required: bool,
    skew: i64,
    lateness: &str,
    freshness: &str,
) -> Contract {
    let src = format!(
        "[[property]]\nname=\"p\"\nsubject=\"S\"\nstrategy=\"lease_epoch\"\nwindow=\"100ns\"\nclock_skew=\"{skew}ns\"\nallowed_lateness=\"{lateness}\"\nroute_freshness=\"{freshness}\"\ngrants=\"{}\"\n[[property.route]]\nname=\"r1\"\n[[property.route]]\nname=\"r2\"\nfenced=false\n",
        if grants_required {
            "required"
        } else {
            "optional"
        }
    );
    Contract::parse("live.toml", &src).unwrap()
}

/// One generated event.
#[derive(Debug, Clone)]
pub(crate) struct E {
    pub(crate) kind: Kind,
    pub(crate) ts: i64,
    pub(crate) scope: Option<&'static str>,
    pub(crate) epoch: Option<u64>,
    pub(crate) route: Option<&'static str>,
    pub(crate) rejected: bool,
    pub(crate) holder: Option<&'static str>,
    pub(crate) inc: u64,
    pub(crate) order: Option<u64>,
    pub(crate) emitter: Option<&'static str>,
    pub(crate) skip_seq: bool,
    /// `None` in [`arb_event`]: the contract's only property.
    pub(crate) property: Option<&'static str>,
    /// Another delivery of event `i`'s (emitter, seq), differing from it
    /// ([`arb_history_with_resends`]).
    pub(crate) resend_of: Option<usize>,
}

impl E {
    /// A committed event of `kind` at `ts` in `scope` with `epoch`, on route `r1`: no holder,
    /// incarnation 0, no order, emitter or property.
    pub(crate) fn new(kind: Kind, ts: i64, scope: &'static str, epoch: u64) -> E {
        E {
            kind,
            ts,
            scope: Some(scope),
            epoch: Some(epoch),
            route: Some("r1"),
            rejected: false,
            holder: None,
            inc: 0,
            order: None,
            emitter: None,
            skip_seq: false,
            property: None,
            resend_of: None,
        }
    }
}

/// One random event.
pub(crate) fn arb_event() -> impl Strategy<Value = E> {
    (
        prop_oneof![4 => Just(Kind::Commit), 2 => Just(Kind::Fence), 2 => Just(Kind::Grant), 1 => Just(Kind::Heartbeat)],
        0i64..40,
        prop_oneof![1 => Just(None), 6 => Just(Some("s1")), 3 => Just(Some("s2"))],
        prop_oneof![1 => Just(None), 8 => (0u64..5).prop_map(Some)],
        prop_oneof![1 => Just(None), 6 => Just(Some("r1")), 2 => Just(Some("r2")), 1 => Just(Some("rx"))],
        prop_oneof![9 => Just(false), 1 => Just(true)],
        prop_oneof![2 => Just(None), 2 => Just(Some("a")), 1 => Just(Some("b"))],
        prop_oneof![5 => Just(0u64), 1 => Just(1u64)],
        prop::bool::weighted(0.3),
        prop_oneof![3 => Just(None), 1 => Just(Some("e1")), 1 => Just(Some("e2"))],
        prop::bool::weighted(0.1),
    )
        .prop_map(
            |(kind, t, scope, epoch, route, rejected, holder, inc, ordered, emitter, skip_seq)| {
                let mut e = E {
                    kind,
                    ts: t * 25,
                    scope,
                    epoch,
                    route,
                    rejected,
                    holder,
                    inc,
                    order: ordered.then_some(0),
                    emitter,
                    skip_seq,
                    property: None,
                    resend_of: None,
                };
                match kind {
                    Kind::Grant => {
                        e.scope = e.scope.or(Some("s1"));
                        e.epoch = e.epoch.or(Some(1));
                    }
                    Kind::Heartbeat => e.route = e.route.or(Some("r1")),
                    _ => {}
                }
                e
            },
        )
}

/// Events with unique duplicate keys (no conflicting duplicates, which `serve` settles by
/// arrival), orders rising with time within a scope, and seqs with optional gaps.
pub(crate) fn arb_history() -> impl Strategy<Value = (Vec<E>, Vec<usize>)> {
    prop::collection::vec(arb_event(), 1..40)
        .prop_map(|mut evs| {
            // Orders follow time (a resource's commit sequence), unique per event.
            let mut idx: Vec<usize> = (0..evs.len()).collect();
            idx.sort_by_key(|&i| (evs[i].ts, i));
            for (rank, &i) in idx.iter().enumerate() {
                if evs[i].order.is_some() {
                    evs[i].order = Some(rank as u64);
                }
            }
            evs
        })
        .prop_flat_map(|evs| {
            let n = evs.len();
            (Just(evs), Just((0..n).collect::<Vec<_>>()).prop_shuffle())
        })
}

/// [`arb_history`] with conflicting deliveries: up to three events with an emitter are each
/// delivered once again under the same (emitter, seq) with another epoch (sometimes at another
/// time too), the deliveries in random order.
pub(crate) fn arb_history_with_resends() -> impl Strategy<Value = (Vec<E>, Vec<usize>)> {
    (
        arb_history(),
        prop::collection::vec(
            (0usize..40, 1u64..5, prop::bool::weighted(0.3), 0i64..40),
            1..4,
        ),
    )
        .prop_flat_map(|((mut evs, _), picks)| {
            let n = evs.len();
            for (i, de, moved, t) in picks {
                let i = i % n;
                // One re-send per event (two re-sends of one event would share their order key
                // too, which `serve` does not compare among deliveries it set aside).
                if evs[i].emitter.is_none()
                    || evs[i].resend_of.is_some()
                    || evs.iter().any(|e| e.resend_of == Some(i))
                {
                    continue;
                }
                let mut copy = evs[i].clone();
                copy.epoch = Some(copy.epoch.map_or(de, |e| (e + de) % 5));
                if moved {
                    copy.ts = t * 25;
                }
                copy.resend_of = Some(i);
                evs.push(copy);
            }
            let n = evs.len();
            (Just(evs), Just((0..n).collect::<Vec<_>>()).prop_shuffle())
        })
}

/// Seqs of each event's emitter, rising by one (two after a `skip_seq`: a gap); a re-send
/// carries the seq of the event it re-sends.
pub(crate) fn seqs(evs: &[E]) -> Vec<Option<u64>> {
    let mut next: BTreeMap<&str, u64> = BTreeMap::new();
    let mut out: Vec<Option<u64>> = Vec::with_capacity(evs.len());
    for e in evs {
        let seq = match e.resend_of {
            Some(i) => out[i],
            None => e.emitter.map(|em| {
                let n = next.entry(em).or_insert(1);
                *n += if e.skip_seq { 2 } else { 1 };
                *n
            }),
        };
        out.push(seq);
    }
    out
}

/// The event to push.
pub(crate) fn event<'a>(e: &'a E, seq: Option<u64>) -> Event<'a> {
    let mut ev = Event::new(e.kind, EventTime(e.ts));
    ev.scope = e.scope;
    ev.epoch = e.epoch.map(Epoch);
    ev.route = e.route;
    ev.outcome = if e.rejected {
        Outcome::Rejected
    } else {
        Outcome::Committed
    };
    ev.holder = e.holder;
    ev.incarnation = Incarnation(e.inc);
    ev.order = e.order.map(Order);
    ev.emitter = e.emitter;
    ev.seq = seq.map(Seq);
    ev.property = e.property;
    ev
}

/// A live assessor fed `evs` in `order` from source `wal`, position = index in `evs`.
pub(crate) fn live(c: &Contract, evs: &[E], order: &[usize], retention: Option<i64>) -> Live {
    let seqs = seqs(evs);
    let mut l = Live::new(
        c.clone(),
        LiveOptions {
            retention,
            ..LiveOptions::default()
        },
    );
    let src = l.add_source("wal");
    for &i in order {
        l.push(&event(&evs[i], seqs[i]), src, i as u64, 1_000_000);
    }
    l
}

/// A retention beyond any history: nothing is folded.
pub(crate) const NEVER_FOLD: Option<i64> = Some(i64::MAX / 4);

/// A committed commit on route `r1` of `scope` at `ts` with `epoch`, from `emitter` at `seq`.
/// `check`'s report of `events`, read in order from one source (`wal`).
pub(crate) fn check(
    c: &Contract,
    events: &[fencewatch_assess::event::Event<'_>],
) -> fencewatch_assess::Report {
    let mut h = fencewatch_assess::History::new(c.clone());
    let src = h.add_source("wal");
    for (i, e) in events.iter().enumerate() {
        h.push(e, src, i as u64);
    }
    h.finish()
}

pub(crate) fn commit_from(
    ts: i64,
    scope: &'static str,
    epoch: u64,
    emitter: &'static str,
    seq: u64,
) -> Event<'static> {
    let mut e = Event::new(Kind::Commit, EventTime(ts));
    e.scope = Some(scope);
    e.epoch = Some(Epoch(epoch));
    e.route = Some("r1");
    e.emitter = Some(emitter);
    e.seq = Some(Seq(seq));
    e
}
