//! The simulator in live mode: `fencewatch demo` is `serve` fed by it. Event time follows the
//! clock: every tick, the commits the clock has reached are generated and submitted to the WAL
//! source as one batch of lines (source `demo`, by `WalSource::feed`). The faults an operator should see come
//! periodically: a paused old owner resuming every `stale_every` (a stale commit: a
//! counterexample, the first one a few seconds in), a commit without an epoch every minute
//! (`unknown(missing_epoch)`), and a declared route that never emits (`unknown(route_silent)`).
//! Its contract requires one premise, `durable_fence` (SPEC §10), which the demo attests at
//! start (dated one assurance window back) and renews every minute (each attestation supports it for its `max_age`, 2 minutes),
//! as a deploy pipeline or a scheduled failover drill would: the page's premise table shows the
//! time left.

use super::{Fault, Faults, Generator, Ndjson, RESUME_NS, Workload};
use fencewatch_assess::EventTime;

/// The contract the demo runs under: the simulator's routes, windows short enough for a fresh
/// demo to show every state within a minute, and a third route that never emits.
pub const DEMO_CONTRACT: &str = r#"# The contract of `fencewatch demo`.
[[property]]
name = "order-mutation"
subject = "Order"
strategy = "lease_epoch"
window = "10s"
clock_skew = "50ms"
allowed_lateness = "2s"
route_freshness = "30s"
assurance_window = "1m"
  [[property.route]]
  name = "orders-api.transition"
  [[property.route]]
  name = "settlement-worker.settle"
  [[property.route]]
  name = "refund-worker.refund"   # declared, never observed in the demo: route_silent
  [[property.premise]]
  name = "durable_fence"          # renewed by the demo every minute
  max_age = "2m"
"#;

/// How often the demo renews its premise (ns): half its `max_age`.
const RENEW_EVERY: i64 = 60_000_000_000;
/// The demo contract's window (ns).
const WINDOW: i64 = 10_000_000_000;
/// The demo contract's `assurance_window` (ns).
const ASSURANCE_WINDOW: i64 = 60_000_000_000;

/// Scopes of the demo workload.
const SCOPES: u64 = 500;

/// The demo's live workload from `start`: `rate` commits per second over 500 scopes, a paused
/// old owner resuming every `stale_every_ns` (the first after at most 3 s), a commit without
/// an epoch every minute (the first after 5 s).
pub fn demo(start: EventTime, rate: u64, stale_every_ns: i64, seed: u64) -> Generator {
    let wl = Workload {
        events: u64::MAX,
        scopes: SCOPES,
        seed,
        start,
        rate: rate.max(1),
        rfc3339: false,
        grants: false,
        faults: Faults::default(),
        attest: &[],
    };
    let first_stale = start.0 + stale_every_ns.min(3_000_000_000);
    // The first attestation is dated one assurance window before the first window's start,
    // as a deploy pipeline's would be from before the service came up: the assessment of the
    // first minute covers time before the demo started, and SPEC §10 counts any unsupported
    // part of it (a newcomer's first look would read `unknown(premise_unattested)`).
    let first_window = start.0.div_euclid(WINDOW) * WINDOW;
    Generator::new(&wl)
        .renew(
            "durable_fence",
            first_window - ASSURANCE_WINDOW,
            RENEW_EVERY,
        )
        .every(Fault::PausedOldOwner, first_stale, stale_every_ns)
        .every(Fault::MissingEpoch, start.0 + 5_000_000_000, 60_000_000_000)
}

/// The NDJSON lines of every step `generator` has not generated yet whose events are all dated
/// at most `now`, appended to `out`. A step dates its resumed old owner [`RESUME_NS`] after
/// its handover, so steps are taken up to `now - RESUME_NS`: the demo never sends an event
/// from the future, and a counterexample it lists lies in the assessment at now (a stale
/// commit dated after `at` would be outside `(at - W, at]`).
pub fn lines_until(generator: &mut Generator, now: EventTime, out: &mut Vec<u8>) {
    let mut sink = Ndjson(out);
    while generator.next_time() <= now.0.saturating_sub(RESUME_NS) {
        generator
            .step(&mut sink)
            .expect("writing into memory does not fail");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::{self, Batch, Format};
    use crate::clock::{Clock, ManualClock};
    use crate::partition::Partition;
    use fencewatch_assess::Contract;
    use fencewatch_assess::live::{Live, LiveOptions};

    #[test]
    fn the_demo_finds_its_resumed_old_owners_as_the_clock_moves() {
        let contract = Contract::parse("demo.toml", DEMO_CONTRACT).unwrap();
        let mut part = Partition::new("wal", Live::new(contract, LiveOptions::default()), 0);
        let start = EventTime(1_800_000_000_000_000_000);
        let clock = ManualClock::new(start);
        let mut generator = demo(start, 200, 5_000_000_000, 7);
        let mut body = Vec::new();
        let mut offset = 0;
        // 61 s of clock: steps up to 60 s (each held back by the old owner's resume delay).
        for _ in 0..61 {
            clock.advance(1_000_000_000);
            lines_until(&mut generator, clock.now(), &mut body);
            let n = batch::items(Format::Ndjson, &body);
            let b = Batch {
                format: Format::Ndjson,
                received_at: clock.now().0,
                source: "demo",
                first_line: None,
                key: None,
                body: &body,
            };
            // Nothing is dated after the clock, resumed old owners included.
            for line in body.split(|&c| c == b'\n').filter(|l| !l.is_empty()) {
                let v: serde_json::Value = serde_json::from_slice(line).unwrap();
                let ts = v["ts"].as_i64().expect("integer ts");
                assert!(ts <= clock.now().0, "{ts} after {}", clock.now().0);
            }
            let applied = part.apply(offset, n, &b, 1 << 20).unwrap();
            assert_eq!(applied.malformed, 0, "{:?}", applied.errors);
            offset += n;
            body.clear();
        }
        let truth = generator.finish();
        // One after 3 s, then every 5 s, over 60 s.
        let injected = truth.injected["paused_old_owner"];
        assert!((11..=13).contains(&injected), "{injected}");
        assert_eq!(truth.injected["missing_epoch"], 1);
        let view = part.live().view();
        assert_eq!(view.counterexample_count(0) as u64, injected);
        let counts = view.unknown_counts(0);
        assert_eq!(
            counts.get(&fencewatch_assess::Reason::MissingEpoch),
            Some(&1)
        );
        assert!(
            counts.contains_key(&fencewatch_assess::Reason::RouteSilent),
            "{counts:?}"
        );
        assert!(!counts.contains_key(&fencewatch_assess::Reason::AmbiguousOrder));
        // Attested one assurance window before the start, renewed at start and after a
        // minute: supported throughout.
        assert_eq!(truth.attestations, 3);
        assert!(
            !counts.contains_key(&fencewatch_assess::Reason::PremiseUnattested),
            "{counts:?}"
        );
        let p = view.premises(0, start.0 + 60_000_000_000);
        assert_eq!(p[0].state, fencewatch_assess::live::PremiseState::Supported);
    }
}
