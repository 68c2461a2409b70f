//! What the examples share: the process's resident set, the count to run, and the live
//! assessor of idle scopes they measure.

#![allow(dead_code)]

/// Resident bytes of this process, from /proc/self/statm (Linux).
pub(crate) fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("/proc/self/statm");
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .expect("resident pages");
    pages * 4096
}

/// A `/proc/self/status` figure in bytes (`VmHWM:`, `VmRSS:`; Linux), 0 if unknown.
pub(crate) fn vm(key: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// The first argument as a count, else 1,000,000.
pub(crate) fn count_arg() -> usize {
    count_arg_or(1_000_000)
}

/// The first argument as a count, else `default`.
pub(crate) fn count_arg_or(default: usize) -> usize {
    std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(default)
}

use fencewatch_assess::event::{Epoch, Event, Kind};
use fencewatch_assess::live::{Live, LiveOptions};
use fencewatch_assess::{Contract, EventTime};

/// Time between the examples' events (ns): 10 ms, 100 per second of event time.
pub(crate) const STEP: i64 = 10_000_000;

/// A live assessor of one property (1 s windows, 1 s lateness) and route `r`, keeping 1 s.
pub(crate) fn idle_live() -> Live {
    let contract = Contract::parse(
        "idle.toml",
        "[[property]]\nname=\"p\"\nsubject=\"S\"\nstrategy=\"lease_epoch\"\nwindow=\"1s\"\nallowed_lateness=\"1s\"\n[[property.route]]\nname=\"r\"\n",
    )
    .expect("contract");
    Live::new(
        contract,
        LiveOptions {
            retention: Some(1_000_000_000),
            ..LiveOptions::default()
        },
    )
}

/// Pushes into `live` one commit for each of `n` scopes (16-byte ids, one incarnation, no
/// grants) at rising times, then a heartbeat far ahead: everything older than the horizon
/// folds into the scopes' high-water marks, as in a running service.
pub(crate) fn fill_idle_scopes(live: &mut Live, n: usize) {
    let src = live.add_source("bench");
    for i in 0..n {
        let scope = format!("order-{i:010}"); // 16 bytes
        let mut ev = Event::new(Kind::Commit, EventTime(1_000_000_000 + i as i64 * STEP));
        ev.scope = Some(&scope);
        ev.epoch = Some(Epoch(1 + i as u64 % 7));
        ev.route = Some("r");
        live.push(&ev, src, i as u64, i64::MAX / 2);
    }
    let mut hb = Event::new(
        Kind::Heartbeat,
        EventTime(1_000_000_000 + (n as i64 + 1000) * STEP),
    );
    hb.route = Some("r");
    live.push(&hb, src, n as u64, i64::MAX / 2);
}

/// The longest of timed calls and how many took over 5 ms; with `SHOW` set in the
/// environment, each over 20 ms is listed on stderr as it happens.
#[derive(Default)]
pub(crate) struct Stalls {
    pub(crate) longest: std::time::Duration,
    pub(crate) slow: usize,
}

impl Stalls {
    /// Runs `f` (call `i`), timing it.
    pub(crate) fn time<T>(&mut self, i: usize, f: impl FnOnce() -> T) -> T {
        use std::time::{Duration, Instant};
        let t = Instant::now();
        let out = f();
        let took = t.elapsed();
        if took > Duration::from_millis(20) && std::env::var_os("SHOW").is_some() {
            eprintln!("push {i}: {:.1} ms", took.as_secs_f64() * 1e3);
        }
        self.longest = self.longest.max(took);
        self.slow += usize::from(took > Duration::from_millis(5));
        out
    }

    /// `longest push L ms, N over 5 ms`.
    pub(crate) fn summary(&self) -> String {
        format!(
            "longest push {:.1} ms, {} over 5 ms",
            self.longest.as_secs_f64() * 1e3,
            self.slow
        )
    }
}
