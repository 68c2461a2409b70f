//! Route silence at a window's end (difference test, session 36: mix G seed 896): SPEC §4
//! counts an observation at `end` itself in a window's `(end - route_freshness, end]`. Such an
//! observation lies in the next window, which `serve` did not read when deciding silence up to
//! the window before it: its first window was `unknown(route_silent)` where `check` holds. And
//! when a commit at that same instant was set aside (a conflicting re-send), `serve` gave up
//! the window's lower bound though a heartbeat was still at it.

use fencewatch_assess::event::{Epoch, Event, Kind};
use fencewatch_assess::live::{Live, LiveOptions};
use fencewatch_assess::{Contract, EventTime, History, Verdict};

const S: i64 = 1_000_000_000;

fn contract() -> Contract {
    Contract::parse(
        "c",
        "[[property]]\nname=\"p\"\nsubject=\"S\"\nstrategy=\"lease_epoch\"\nwindow=\"1s\"\n\
         allowed_lateness=\"500ms\"\nroute_freshness=\"5m\"\n[[property.route]]\nname=\"r\"\n",
    )
    .unwrap()
}

fn event(kind: Kind, ts: i64) -> Event<'static> {
    let mut e = Event::new(kind, EventTime(ts));
    e.route = Some("r");
    if kind != Kind::Heartbeat {
        e.scope = Some("s");
        e.epoch = Some(Epoch(1));
        e.holder = Some("w");
    }
    e
}

/// The verdicts of windows 0, 1 and 2 of the history: a grant (which observes no route) in
/// window 0, the route's first observation at `beat`, a commit at 2 s that moves the
/// watermark (1.5 s) past window 0's end: (`check`'s, `serve`'s with window 0 final).
fn verdicts(beat: i64) -> (Vec<Verdict>, Vec<Verdict>) {
    run(&[
        event(Kind::Grant, S / 2),
        event(Kind::Heartbeat, beat),
        event(Kind::Commit, 2 * S),
    ])
}

/// (`check`'s, `serve`'s) verdicts of windows 0.. of `events`, in this order, with window 0
/// final in `serve`.
fn run(events: &[Event<'_>]) -> (Vec<Verdict>, Vec<Verdict>) {
    let c = contract();
    let mut h = History::new(c.clone());
    let hs = h.add_source("f");
    let mut l = Live::new(c, LiveOptions::default());
    let ls = l.add_source("f");
    for (i, e) in events.iter().enumerate() {
        h.push(e, hs, i as u64);
        l.push(e, ls, i as u64, 3 * S);
    }
    let r = h.finish();
    let check: Vec<Verdict> = r.properties[0].windows.iter().map(|w| w.verdict).collect();
    let v = l.view();
    let runs = v.timeline(0, 0, 3 * S, 100);
    assert!(runs[0].is_final, "window 0 is final: {runs:?}");
    let serve = runs
        .iter()
        .flat_map(|w| std::iter::repeat_n(w.verdict, w.windows as usize))
        .collect();
    (check, serve)
}

#[test]
fn an_observation_at_a_windows_end_keeps_it_from_silence() {
    let (check, serve) = verdicts(S);
    assert_eq!(check[0], Verdict::Holds, "check: {check:?}");
    assert_eq!(serve[0], Verdict::Holds, "serve: {serve:?}");
    assert_eq!(serve[..2], check[..2]);
}

#[test]
fn an_observation_just_after_a_windows_end_does_not() {
    // One nanosecond later, the route was silent at window 0's end: unknown in both.
    let (check, serve) = verdicts(S + 1);
    assert_eq!(check[0], Verdict::Unknown, "check: {check:?}");
    assert_eq!(serve[0], Verdict::Unknown, "serve: {serve:?}");
}

#[test]
fn a_delivery_set_aside_at_a_windows_end_leaves_the_heartbeat_there() {
    // Mix G seed 896 shrunk: a heartbeat at window 0's end, a commit at that instant, and a
    // re-send of the commit with another epoch (one (emitter, seq)): both deliveries are set
    // aside, the heartbeat still observes the route at 1 s.
    let commit = |epoch| {
        let mut e = event(Kind::Commit, S);
        e.scope = Some("t");
        e.epoch = Some(Epoch(epoch));
        e.emitter = Some("e");
        e.seq = Some(fencewatch_assess::event::Seq(22));
        e
    };
    let events = [
        event(Kind::Grant, S / 2),
        event(Kind::Heartbeat, S),
        commit(1),
        event(Kind::Commit, S + S / 10),
        commit(2),
        event(Kind::Commit, 2 * S),
    ];
    let (check, serve) = run(&events);
    assert_eq!(check[0], Verdict::Holds, "check: {check:?}");
    assert_eq!(serve[0], Verdict::Holds, "serve: {serve:?}");
}
