//! The harness of the tests that hold `serve` to `check` on deliveries linked through several
//! duplicate keys (`conflicts.rs`, `groups.rs`, `chains.rs`): events, a contract, and both
//! assessors' answers.

use super::contract_with;
use fencewatch_assess::event::{Epoch, Event, Kind, Order, Seq};
use fencewatch_assess::live::{Live, LiveOptions, SpanId};
use fencewatch_assess::{Contract, EventTime, Reason, Report, Verdict};
use std::collections::BTreeMap;

pub(crate) fn span(n: u8) -> SpanId {
    let mut s = [0x22u8; 24];
    s[23] = n;
    s
}

pub(crate) fn contract() -> Contract {
    contract_with(false, 5, "1000ns", "1000000ns")
}

/// One property requiring premise `durable_fence` (`max_age` 1000 ns), 100 ns windows, 10 ns
/// of lateness, routes `r1` and `r2` (not fenced).
pub(crate) fn premises_contract() -> Contract {
    let src = "[[property]]\nname=\"p\"\nsubject=\"S\"\nstrategy=\"lease_epoch\"\nwindow=\"100ns\"\nclock_skew=\"5ns\"\nallowed_lateness=\"10ns\"\nroute_freshness=\"100000ns\"\n[[property.route]]\nname=\"r1\"\n[[property.route]]\nname=\"r2\"\nfenced=false\n[[property.premise]]\nname=\"durable_fence\"\nmax_age=\"1000ns\"\n";
    Contract::parse("premises.toml", src).unwrap()
}

/// An attestation of `premise` at `ts` by `attester`.
pub(crate) fn attest_of(ts: i64, premise: &'static str, attester: &'static str) -> Event<'static> {
    let mut e = Event::new(Kind::Attestation, EventTime(ts));
    e.premise = Some(premise);
    e.attester = Some(attester);
    e
}

/// An attestation of `durable_fence` at `ts` by `attester`.
pub(crate) fn attest(ts: i64, attester: &'static str) -> Event<'static> {
    attest_of(ts, "durable_fence", attester)
}

pub(crate) fn live(c: &Contract) -> Live {
    Live::new(c.clone(), LiveOptions::default())
}

pub(crate) fn beat(ts: i64, route: &'static str) -> Event<'static> {
    let mut e = Event::new(Kind::Heartbeat, EventTime(ts));
    e.route = Some(route);
    e
}

pub(crate) fn commit(ts: i64, scope: Option<&'static str>, epoch: u64) -> Event<'static> {
    let mut e = Event::new(Kind::Commit, EventTime(ts));
    e.scope = scope;
    e.epoch = Some(Epoch(epoch));
    e.route = Some("r1");
    e
}

pub(crate) fn keyed(mut e: Event<'static>, emitter: &'static str, seq: u64) -> Event<'static> {
    e.emitter = Some(emitter);
    e.seq = Some(Seq(seq));
    e
}

pub(crate) fn ord(mut e: Event<'static>, o: u64) -> Event<'static> {
    e.order = Some(Order(o));
    e
}

pub(crate) fn verdicts(runs: &[fencewatch_assess::window::WindowRun]) -> Vec<Verdict> {
    runs.iter()
        .flat_map(|r| std::iter::repeat_n(r.verdict, r.windows as usize))
        .collect()
}

/// What is compared: counterexamples (not withdrawn), unknown counts, window verdicts.
#[derive(Debug, PartialEq)]
pub(crate) struct Answer {
    pub(crate) counterexamples: usize,
    pub(crate) unknown: BTreeMap<Reason, u64>,
    pub(crate) windows: Vec<Verdict>,
}

pub(crate) fn of_check(r: &Report) -> Answer {
    Answer {
        counterexamples: r.properties[0].counterexamples.len(),
        unknown: r.properties[0].unknown.clone(),
        windows: verdicts(&r.properties[0].windows),
    }
}

pub(crate) fn of_serve(l: &Live) -> Answer {
    let v = l.view();
    Answer {
        counterexamples: v.counterexample_count(0),
        unknown: v.unknown_counts(0),
        windows: verdicts(&v.timeline(0, i64::MIN, i64::MAX, 1_000)),
    }
}

/// `serve` fed `evs` in order, each with its span (`Some(n)`: pushed with `span(n)`), closed.
pub(crate) fn serve(c: &Contract, evs: &[(Event<'static>, Option<u8>)]) -> Live {
    let mut l = live(c);
    let src = l.add_source("wal");
    for (i, (e, s)) in evs.iter().enumerate() {
        match s {
            Some(n) => l.push_span(e, &span(*n), src, i as u64, 1_000_000),
            None => l.push(e, src, i as u64, 1_000_000),
        };
    }
    l.close();
    l
}

pub(crate) fn no_spans(evs: &[Event<'static>]) -> Vec<(Event<'static>, Option<u8>)> {
    evs.iter().map(|e| (e.clone(), None)).collect()
}

/// Properties `p` and `q`, each with routes `r1` (fenced) and `r2` (not), 100 ns windows,
/// 1000 ns of lateness.
pub(crate) fn two_props() -> Contract {
    let mut src = String::new();
    for name in ["p", "q"] {
        src += &format!(
            "[[property]]\nname=\"{name}\"\nsubject=\"S\"\nstrategy=\"lease_epoch\"\nwindow=\"100ns\"\nclock_skew=\"5ns\"\nallowed_lateness=\"1000ns\"\nroute_freshness=\"1000000ns\"\n[[property.route]]\nname=\"r1\"\n[[property.route]]\nname=\"r2\"\nfenced=false\n"
        );
    }
    Contract::parse("two.toml", &src).unwrap()
}

/// `e` named for property `prop`.
pub(crate) fn of(mut e: Event<'static>, prop: &'static str) -> Event<'static> {
    e.property = Some(prop);
    e
}

/// serve fed `evs`, checkpointed (its state through postcard, as a checkpoint) and restored
/// before event `cut`.
pub(crate) fn serve_restoring(
    c: &Contract,
    evs: &[(Event<'static>, Option<u8>)],
    cut: usize,
) -> Live {
    let mut l = live(c);
    let src = l.add_source("wal");
    for (i, (e, s)) in evs.iter().enumerate() {
        if i == cut {
            let bytes = postcard::to_stdvec(l.state()).unwrap();
            let st = postcard::from_bytes(&bytes).unwrap();
            l = Live::restore(c.clone(), st).unwrap();
        }
        match s {
            Some(n) => l.push_span(e, &span(*n), src, i as u64, 1_000_000),
            None => l.push(e, src, i as u64, 1_000_000),
        };
    }
    l.close();
    l
}
