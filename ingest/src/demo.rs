//! The live workload of `fencewatch demo`: orders changing owner through two fenced routes,
//! stamped with the wall clock it is given, with the faults an operator should see: a paused
//! old owner resuming every so often (a stale commit: a counterexample, the first one a few
//! seconds in), a commit without an epoch now and then (`unknown(missing_epoch)`), and a third
//! declared route that never emits (`unknown(route_silent)`).
//!
//! Pure: it produces NDJSON for a time it is handed; the caller owns the clock and the pacing.

use std::fmt::Write;

/// The contract the demo runs under.
pub const CONTRACT: &str = r#"# The contract of `fencewatch demo`.
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
"#;

const ROUTES: [&str; 2] = ["orders-api.transition", "settlement-worker.settle"];
const SKEW_NS: i64 = 50_000_000;

#[derive(Debug, Clone, Copy)]
struct Order {
    epoch: u64,
    /// Time of the last commit of the current owner.
    last: i64,
    /// The previous owner's epoch, while it could still resume.
    previous: Option<u64>,
}

/// The demo's generator state.
#[derive(Debug, Clone)]
pub struct Demo {
    orders: Vec<Order>,
    rng: u64,
    seq: u64,
    /// Every this many ns of wall time, a paused old owner resumes.
    stale_every: i64,
    next_stale: Option<i64>,
    /// Every this many ns, a commit without an epoch.
    missing_every: i64,
    next_missing: Option<i64>,
    /// Counterexamples injected so far.
    pub injected: u64,
    /// Commits without an epoch so far.
    pub missing: u64,
}

impl Demo {
    /// A demo over `orders` scopes, with a stale commit every `stale_every_ns` (the first after
    /// 3 s) and a commit without an epoch every minute.
    pub fn new(orders: usize, stale_every_ns: i64, seed: u64) -> Demo {
        Demo {
            orders: vec![
                Order {
                    epoch: 1,
                    last: i64::MIN,
                    previous: None,
                };
                orders.max(1)
            ],
            rng: seed | 1,
            seq: 0,
            stale_every: stale_every_ns,
            next_stale: None,
            missing_every: 60_000_000_000,
            next_missing: None,
            injected: 0,
            missing: 0,
        }
    }

    fn next(&mut self) -> u64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng
    }

    fn line(&mut self, out: &mut String, ts: i64, kind: &str, scope: &str, epoch: u64) {
        self.seq += 1;
        let route = ROUTES[(self.next() % 2) as usize];
        let _ = writeln!(
            out,
            r#"{{"kind":"{kind}","ts":{ts},"scope":"{scope}","epoch":{epoch},"route":"{route}","holder":"worker-{}","emitter":"demo","seq":{}}}"#,
            epoch % 5,
            self.seq
        );
    }

    /// `n` events stamped between `now - spread` and `now` (ns), as NDJSON.
    pub fn batch(&mut self, now: i64, spread: i64, n: usize) -> String {
        let mut out = String::with_capacity(n * 160);
        let step = (spread / n.max(1) as i64).max(1);
        self.next_stale
            .get_or_insert(now + self.stale_every.min(3_000_000_000));
        self.next_missing.get_or_insert(now + 5_000_000_000);
        for i in 0..n {
            let ts = now - spread + i as i64 * step;
            let k = (self.next() % self.orders.len() as u64) as usize;
            let scope = format!("order-{k}");
            let o = self.orders[k];
            // Every so often the owner changes: a fence installs the next epoch. Only when the
            // last commit is well past the skew, so ordinary handovers are never ambiguous.
            if self.next().is_multiple_of(20) && ts.saturating_sub(o.last) > 4 * SKEW_NS {
                let epoch = o.epoch + 1;
                self.line(&mut out, ts, "fence", &scope, epoch);
                self.orders[k] = Order {
                    epoch,
                    last: ts,
                    previous: Some(o.epoch),
                };
                continue;
            }
            // The paused old owner of a handed-over order resumes and commits.
            if self.next_stale.is_some_and(|t| ts >= t)
                && let Some(prev) = o.previous
                && ts.saturating_sub(o.last) > 4 * SKEW_NS
            {
                self.line(&mut out, ts, "commit", &scope, prev);
                self.orders[k].previous = None;
                self.injected += 1;
                self.next_stale = Some(ts + self.stale_every);
                continue;
            }
            if self.next_missing.is_some_and(|t| ts >= t) {
                self.seq += 1;
                let _ = writeln!(
                    out,
                    r#"{{"kind":"commit","ts":{ts},"scope":"{scope}","route":"orders-api.transition","holder":"worker-9","emitter":"demo","seq":{}}}"#,
                    self.seq
                );
                self.missing += 1;
                self.next_missing = Some(ts + self.missing_every);
                continue;
            }
            self.line(&mut out, ts, "commit", &scope, o.epoch);
            self.orders[k].last = ts;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fencewatch_assess::Contract;
    use fencewatch_assess::live::{Live, LiveOptions};

    #[test]
    fn the_demo_contract_is_valid_and_its_stale_commits_are_found() {
        let contract = Contract::parse("demo.toml", CONTRACT).unwrap();
        let mut live = Live::new(contract, LiveOptions::default());
        let src = live.add_source("demo");
        let mut demo = Demo::new(50, 5_000_000_000, 7);
        let start = 1_800_000_000_000_000_000i64;
        let mut pos = 0;
        for s in 0..60 {
            let now = start + s * 1_000_000_000;
            let body = demo.batch(now, 1_000_000_000, 200);
            for line in body.lines() {
                let d = crate::json::decode_line(line.as_bytes(), 1 << 20).unwrap();
                live.push(&d.event(), src, pos, now);
                pos += 1;
            }
        }
        // One after 3 s, then every 5 s, over 60 s.
        assert!((11..=13).contains(&demo.injected), "{}", demo.injected);
        assert_eq!(demo.missing, 1);
        let counts = live.view().unknown_counts(0);
        assert_eq!(
            counts.get(&fencewatch_assess::Reason::MissingEpoch),
            Some(&1)
        );
        assert!(
            counts.contains_key(&fencewatch_assess::Reason::RouteSilent),
            "{counts:?}"
        );
        let found = live.view().counterexample_count(0) as u64;
        assert_eq!(found, demo.injected);
        assert!(
            !live
                .view()
                .unknown_counts(0)
                .contains_key(&fencewatch_assess::Reason::AmbiguousOrder)
        );
    }
}
