//! Measures what one hot scope costs the service's live assessor against as many events over
//! as many scopes (issue 11: a hot scope must not stall ingest):
//! `cargo run --release -p fencewatch-assess --example hot_scope -- [EVENTS] [STEP_NS]
//! [--shapes a,b] [--reference]` (default 50,000 events 1 µs apart, every shape). The contract is the black-box test's: 1 s windows,
//! 10 ms clock skew, 500 ms lateness (the horizon is 1 s behind the newest event). Shapes:
//! - `spread`: one commit per scope, EVENTS scopes;
//! - `hot`: one scope, one epoch, no holder, commits in time order;
//! - `lease`: one scope, grants and commits by the holder, a new epoch granted to another
//!   holder every 5,000 events (its first commits within the skew of the old holder's last);
//! - `ordered`: as `hot`, with `order` rising;
//! - `zombie` (adversarial): as `lease`, and every 100th commit is the previous holder's, stale;
//! - `reversed` (adversarial): as `hot`, arriving newest first;
//! - `alternating` (adversarial): as `hot`, epochs 1 and 2 alternating;
//! - `jittered` (adversarial): as `lease`, each event arriving up to 64 events early or late;
//! - `shuffled` (adversarial): likewise, up to 4,096 events early or late;
//! - `conflicts` (adversarial): as `hot`, each commit under emitter `e` and its index as
//!   `seq`; then EVENTS / 100 deliveries of those keys again with another holder (each a
//!   conflicting duplicate that sets the kept commit aside): the time shown is that of the
//!   conflicting deliveries alone;
//! - `mixed` (adversarial): as `conflicts`, each conflicting delivery followed by a new
//!   commit of another emitter (a hot scope that others keep writing to while one emitter
//!   re-sends its seqs): the time shown is that of both.
//!
//! Prints the wall time of each shape (and, with `--reference`, of the full decision on every
//! event too).

mod common;

use fencewatch_assess::event::{Epoch, Event, Kind, Order, Seq};
use fencewatch_assess::live::{Live, LiveOptions};
use fencewatch_assess::{Contract, EventTime};

const CONTRACT: &str = "[[property]]\nname=\"p\"\nsubject=\"S\"\nstrategy=\"lease_epoch\"\nwindow=\"1s\"\nclock_skew=\"10ms\"\nallowed_lateness=\"500ms\"\n[[property.route]]\nname=\"r\"\n";

/// One event of a shape: (kind, scope index, epoch, holder, order).
type Step = (Kind, usize, u64, Option<&'static str>, Option<u64>);

fn shape(name: &str, n: usize) -> Vec<Step> {
    const HOLDERS: [&str; 3] = ["a", "b", "c"];
    let lease = |i: usize| i / 5_000;
    match name {
        "spread" => (0..n).map(|i| (Kind::Commit, i, 1, None, None)).collect(),
        "hot" | "reversed" | "conflicts" | "mixed" => {
            (0..n).map(|_| (Kind::Commit, 0, 1, None, None)).collect()
        }
        "ordered" => (0..n)
            .map(|i| (Kind::Commit, 0, 1, None, Some(i as u64)))
            .collect(),
        "alternating" => (0..n)
            .map(|i| (Kind::Commit, 0, 1 + i as u64 % 2, None, None))
            .collect(),
        "lease" | "zombie" | "jittered" | "shuffled" => (0..n)
            .map(|i| {
                let l = lease(i);
                let holder = Some(HOLDERS[l % 3]);
                if i % 5_000 == 0 {
                    (Kind::Grant, 0, 1 + l as u64, holder, None)
                } else if name == "zombie" && l > 0 && i % 100 == 0 {
                    (Kind::Commit, 0, l as u64, Some(HOLDERS[(l - 1) % 3]), None)
                } else {
                    (Kind::Commit, 0, 1 + l as u64, holder, None)
                }
            })
            .collect(),
        _ => panic!("unknown shape {name}"),
    }
}

fn run(name: &str, n: usize, step: i64, reference: bool) -> (std::time::Duration, usize, u64) {
    let contract = Contract::parse("hot.toml", CONTRACT).expect("contract");
    let mut live = Live::new(contract, LiveOptions::default());
    live.set_reference_decisions(reference);
    let src = live.add_source("bench");
    let steps = shape(name, n);
    let scopes: Vec<String> = (0..steps.iter().map(|s| s.1).max().unwrap_or(0) + 1)
        .map(|i| format!("order-{i:010}"))
        .collect();
    let t0 = 1_000_000_000_000i64;
    let mut order: Vec<usize> = (0..n).collect();
    if name == "reversed" {
        order.reverse();
    }
    if name == "jittered" || name == "shuffled" {
        // Sorted by index plus a pseudo-random displacement of up to 64 (4,096).
        let d: u64 = if name == "jittered" { 64 } else { 4_096 };
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut keyed: Vec<(i64, usize)> = order
            .iter()
            .map(|&i| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (i as i64 + (x % (2 * d + 1)) as i64 - d as i64, i)
            })
            .collect();
        keyed.sort_unstable();
        order = keyed.into_iter().map(|(_, i)| i).collect();
    }
    let started = std::time::Instant::now();
    for (pos, &i) in order.iter().enumerate() {
        let (kind, scope, epoch, holder, ord) = steps[i];
        let mut ev = Event::new(kind, EventTime(t0 + i as i64 * step));
        ev.scope = Some(&scopes[scope]);
        ev.epoch = Some(Epoch(epoch));
        ev.holder = holder;
        ev.order = ord.map(Order);
        if kind == Kind::Commit {
            ev.route = Some("r");
        }
        if name == "conflicts" || name == "mixed" {
            ev.emitter = Some("e");
            ev.seq = Some(Seq(i as u64));
        }
        live.push(&ev, src, pos as u64, i64::MAX / 2);
    }
    let mut took = started.elapsed();
    if name == "conflicts" || name == "mixed" {
        let started = std::time::Instant::now();
        for k in 0..n / 100 {
            let i = (k * 97) % n;
            let mut ev = Event::new(Kind::Commit, EventTime(t0 + i as i64 * step));
            ev.scope = Some(&scopes[0]);
            ev.epoch = Some(Epoch(1));
            ev.holder = Some("z");
            ev.route = Some("r");
            ev.emitter = Some("e");
            ev.seq = Some(Seq(i as u64));
            live.push(&ev, src, (2 * k + n) as u64, i64::MAX / 2);
            if name == "mixed" {
                let mut ev = Event::new(Kind::Commit, EventTime(t0 + (n + k) as i64 * step));
                ev.scope = Some(&scopes[0]);
                ev.epoch = Some(Epoch(1));
                ev.route = Some("r");
                ev.emitter = Some("f");
                ev.seq = Some(Seq(k as u64));
                live.push(&ev, src, (2 * k + n + 1) as u64, i64::MAX / 2);
            }
        }
        took = started.elapsed();
    }
    (
        took,
        live.view().counterexample_count(0),
        live.full_decisions(),
    )
}

fn main() {
    let n = common::count_arg_or(50_000);
    let step: i64 = std::env::args()
        .nth(2)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000);
    let reference = std::env::args().any(|a| a == "--reference");
    let only: Option<String> = std::env::args().skip_while(|a| a != "--shapes").nth(1);
    println!("events: {n}, {step} ns apart");
    println!(
        "| shape | time | full decisions | counterexamples |{}",
        if reference {
            " full decision on every event |"
        } else {
            ""
        }
    );
    let shapes = [
        "spread",
        "hot",
        "lease",
        "ordered",
        "zombie",
        "reversed",
        "alternating",
        "jittered",
        "shuffled",
        "conflicts",
        "mixed",
    ];
    for name in shapes
        .into_iter()
        .filter(|s| only.as_ref().is_none_or(|o| o.split(',').any(|x| x == *s)))
    {
        let (took, cxs, full) = run(name, n, step, false);
        let with_reference = if reference {
            let (t, c, _) = run(name, n, step, true);
            assert_eq!(c, cxs, "{name}: the same counterexamples");
            format!(" {t:.2?} |")
        } else {
            String::new()
        };
        println!("| {name} | {took:.2?} | {full} | {cxs} |{with_reference}");
    }
}
