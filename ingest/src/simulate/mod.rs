//! A realistic lease/epoch workload: scopes change owner (a fence installs the new epoch, the
//! new owner commits), routes emit heartbeats, every route has an emitter with a `seq`, and
//! each fault of SPEC §6 can be injected a given number of times (or, live, every so often:
//! [`live`]). The ground truth says what was injected and which findings `check` must produce.
//! Events go to a [`Sink`]: NDJSON here, a Kafka producer in `source::kafka::produce`, the WAL
//! source in [`live`].
//!
//! The generator is deterministic for a seed, and careful that nothing but the injected faults
//! produces findings: an owner change happens only when the scope's last commit is more than
//! twice the clock skew old, so ordinary handovers are never ambiguous.
//!
//! Attestations (SPEC §10, [`Attest`]): each premise named is required by the contract (per
//! fenced route for a per-route premise, with `max_age` the greater of 24 h and its
//! `valid_for`) and attested once (per fenced route) at the start of the first window, before
//! any other event; the truth says `premise_unattested` when its `valid_for` ends before the
//! last window does, `premise_failed` for a failed one.

mod generator;
pub mod live;
#[cfg(feature = "otlp")]
pub mod spans;

use fencewatch_assess::contract::Strategy;
use fencewatch_assess::time::{Duration, EventTime};
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::{self, Write};

/// Faults to inject, each a count (or a switch).
#[derive(Debug, Clone, Copy, Default)]
pub struct Faults {
    /// Old owners that resume after a handover and commit with the superseded epoch.
    pub paused_old_owner: u64,
    /// Commits without an epoch.
    pub missing_epoch: u64,
    /// One declared route never emits.
    pub silent_route: bool,
    /// Commits through a route declared `fenced = false`.
    pub unfenced_route: u64,
    /// Scopes whose epoch counter wraps to 0.
    pub epoch_wraparound: u64,
    /// Events lost in transit (seq gaps).
    pub lost_telemetry: u64,
    /// Old-owner commits within the clock skew of the handover.
    pub clock_skew: u64,
    /// Stale writes the resource rejected.
    pub rejected: u64,
}

/// A premise to attest at the start of the workload (and require in its contract).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attest {
    /// A premise of `lease_epoch` (SPEC §10).
    pub premise: &'static str,
    /// How long the attestation supports it (default: the premise's `max_age`, 24 h).
    pub valid_for: Option<Duration>,
    /// Attest that it failed.
    pub failed: bool,
}

impl Attest {
    /// Parses `PREMISE[:VALID_FOR]` (`failed`: an `--attest-failed PREMISE`), checking the
    /// premise is one of `lease_epoch`'s.
    pub fn parse(s: &str, failed: bool) -> Result<Attest, String> {
        let (premise, valid_for) = match s.split_once(':') {
            Some((p, v)) if !failed => {
                let d = Duration::parse(v).map_err(|e| e.to_string())?;
                if d.0 == 0 {
                    return Err(format!("`{s}`: the valid_for must be greater than zero"));
                }
                (p, Some(d))
            }
            _ => (s, None),
        };
        let Some(k) = Strategy::LeaseEpoch
            .premises()
            .iter()
            .find(|k| k.name == premise)
        else {
            let names: Vec<&str> = Strategy::LeaseEpoch
                .premises()
                .iter()
                .map(|k| k.name)
                .collect();
            return Err(format!(
                "`{premise}` is not a premise of lease_epoch (expected one of: {})",
                names.join(", ")
            ));
        };
        Ok(Attest {
            premise: k.name,
            valid_for,
            failed,
        })
    }

    fn per_route(&self) -> bool {
        Strategy::LeaseEpoch
            .premises()
            .iter()
            .any(|k| k.name == self.premise && k.per_route)
    }

    fn max_age(&self) -> Duration {
        Duration(self.valid_for.map_or(DAY_NS, |v| v.0.max(DAY_NS)))
    }
}

const DAY_NS: i64 = 86_400_000_000_000;
/// The window of the simulator's contract.
const WINDOW_NS: i64 = 60_000_000_000;

/// What to generate.
#[derive(Debug, Clone, Copy)]
pub struct Workload {
    /// Ordinary commits.
    pub events: u64,
    /// Distinct scopes.
    pub scopes: u64,
    /// Random seed.
    pub seed: u64,
    /// Time of the first event.
    pub start: EventTime,
    /// Commits per second of event time.
    pub rate: u64,
    /// RFC 3339 timestamps instead of integer nanoseconds.
    pub rfc3339: bool,
    /// Emit a grant for every epoch.
    pub grants: bool,
    /// Faults.
    pub faults: Faults,
    /// Premises to attest and require (SPEC §10).
    pub attest: &'static [Attest],
}

/// The property the simulator's contract declares.
pub const PROPERTY: &str = "order-mutation";
const SKEW_NS: i64 = 50_000_000;
/// How long after its handover a paused old owner resumes (and a rejected stale write comes):
/// the latest a step dates an event after [`Generator::next_time`].
pub(crate) const RESUME_NS: i64 = 1_000_000_000;
const HEARTBEAT_NS: i64 = 10_000_000_000;
const FENCED_ROUTES: [&str; 2] = ["orders-api.transition", "settlement-worker.settle"];
const UNFENCED_ROUTE: &str = "admin.repair";
const SILENT_ROUTE: &str = "reports.export";

impl Workload {
    fn routes(&self) -> Vec<(&'static str, bool)> {
        let mut r: Vec<(&str, bool)> = FENCED_ROUTES.iter().map(|n| (*n, true)).collect();
        if self.faults.unfenced_route > 0 {
            r.push((UNFENCED_ROUTE, false));
        }
        if self.faults.silent_route {
            r.push((SILENT_ROUTE, true));
        }
        r
    }

    /// The contract matching this workload.
    pub fn contract_toml(&self) -> String {
        let mut s = format!(
            "# Generated by `fencewatch simulate`.\n[[property]]\nname = \"{PROPERTY}\"\nsubject = \"Order\"\nstrategy = \"lease_epoch\"\nwindow = \"1m\"\nclock_skew = \"50ms\"\nallowed_lateness = \"10s\"\nroute_freshness = \"5m\"\ngrants = \"{}\"\n",
            if self.grants { "required" } else { "optional" }
        );
        for (name, fenced) in self.routes() {
            s.push_str(&format!("  [[property.route]]\n  name = \"{name}\"\n"));
            if !fenced {
                s.push_str("  fenced = false\n");
            }
        }
        let mut declared: Vec<(&str, Option<&str>)> = Vec::new();
        for a in self.attest {
            for route in self.attested_routes(a) {
                if declared.contains(&(a.premise, route)) {
                    continue;
                }
                declared.push((a.premise, route));
                s.push_str(&format!(
                    "  [[property.premise]]\n  name = \"{}\"\n",
                    a.premise
                ));
                if let Some(r) = route {
                    s.push_str(&format!("  route = \"{r}\"\n"));
                }
                s.push_str(&format!("  max_age = \"{}\"\n", self.max_age(a.premise)));
            }
        }
        s
    }

    /// The routes an attestation of `a` names: each fenced route for a per-route premise.
    fn attested_routes(&self, a: &Attest) -> Vec<Option<&'static str>> {
        if a.per_route() {
            self.routes()
                .into_iter()
                .filter(|(_, fenced)| *fenced)
                .map(|(n, _)| Some(n))
                .collect()
        } else {
            vec![None]
        }
    }

    /// The contract's `max_age` of `premise`: the greatest its attestations need.
    fn max_age(&self, premise: &str) -> Duration {
        self.attest
            .iter()
            .filter(|a| a.premise == premise)
            .map(Attest::max_age)
            .max()
            .unwrap_or(Duration(DAY_NS))
    }

    /// The start of the first window: at or before the first event (a grant a second before
    /// `start`), where the attestations are placed.
    fn first_window(&self) -> i64 {
        (self.start.0 - 1_000_000_000).div_euclid(WINDOW_NS) * WINDOW_NS
    }
}

/// What the simulator injected and what `check` must find.
#[derive(Debug, Clone, Serialize)]
pub struct Truth {
    /// Lines written.
    pub lines: u64,
    /// Ordinary commits written.
    pub commits: u64,
    /// Owner changes.
    pub handovers: u64,
    /// Heartbeats written.
    pub heartbeats: u64,
    /// Grants written.
    pub grants: u64,
    /// Attestations written.
    pub attestations: u64,
    /// Fault name → count injected.
    pub injected: BTreeMap<&'static str, u64>,
    /// The verdict `check` must reach.
    pub verdict: &'static str,
    /// Counterexample kind → count `check` must report.
    pub counterexamples: BTreeMap<&'static str, u64>,
    /// Unknown reasons `check` must report.
    pub unknown_reasons: Vec<&'static str>,
}

impl Truth {
    fn empty() -> Truth {
        Truth {
            lines: 0,
            commits: 0,
            handovers: 0,
            heartbeats: 0,
            grants: 0,
            attestations: 0,
            injected: BTreeMap::new(),
            verdict: "holds",
            counterexamples: BTreeMap::new(),
            unknown_reasons: Vec::new(),
        }
    }
}

/// SplitMix64: small, fast and deterministic.
#[derive(Debug, Clone)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

#[derive(Debug, Clone, Copy)]
struct ScopeState {
    epoch: u64,
    holder: u64,
    last_commit: i64,
    retired: bool,
}

struct Line<'a> {
    kind: &'a str,
    ts: i64,
    scope: Option<u64>,
    epoch: Option<u64>,
    route: &'a str,
    holder: Option<u64>,
    rejected: bool,
}

/// Receives the generated events one at a time: an NDJSON writer, a Kafka producer, …
pub trait Sink {
    /// One event: its JSON object (no trailing newline), its `scope`, if it has one (the
    /// key producers partition by), and its time (ns), without parsing the line again.
    fn event(&mut self, json: &[u8], scope: Option<&str>, ts: i64) -> io::Result<()>;
}

/// Writes each event as an NDJSON line.
#[derive(Debug)]
pub struct Ndjson<W>(pub W);

impl<W: Write> Sink for Ndjson<W> {
    fn event(&mut self, json: &[u8], _scope: Option<&str>, _ts: i64) -> io::Result<()> {
        self.0.write_all(json)?;
        self.0.write_all(b"\n")
    }
}

/// Formats lines and numbers each route's events.
struct Out {
    rfc3339: bool,
    seqs: Vec<u64>,
    lines: u64,
    /// The line being formatted (reused).
    buf: Vec<u8>,
}

impl Out {
    /// An attestation of `a` (on `route`) at `ts`, without emitter or seq: a pipeline's, not
    /// the application's telemetry.
    fn attestation<S: Sink>(
        &mut self,
        sink: &mut S,
        a: &Attest,
        route: Option<&str>,
        ts: i64,
        valid_for: Duration,
    ) -> io::Result<()> {
        self.lines += 1;
        let w = &mut self.buf;
        w.clear();
        write!(
            w,
            "{{\"kind\":\"attestation\",\"premise\":\"{}\",",
            a.premise
        )?;
        if self.rfc3339 {
            write!(w, "\"ts\":\"{}\"", EventTime(ts))?;
        } else {
            write!(w, "\"ts\":{ts}")?;
        }
        if let Some(r) = route {
            write!(w, ",\"route\":\"{r}\"")?;
        }
        if a.valid_for.is_some() {
            write!(w, ",\"valid_for\":\"{valid_for}\"")?;
        }
        if a.failed {
            write!(w, ",\"outcome\":\"failed\"")?;
        }
        write!(
            w,
            ",\"attester\":\"fencewatch simulate\",\"evidence\":\"simulated\"}}"
        )?;
        sink.event(w, None, ts)
    }

    fn emit<S: Sink>(
        &mut self,
        sink: &mut S,
        l: &Line<'_>,
        route_idx: usize,
        emitters: &[String],
        lose: bool,
    ) -> io::Result<()> {
        self.seqs[route_idx] += 1;
        if lose {
            return Ok(());
        }
        self.lines += 1;
        let w = &mut self.buf;
        w.clear();
        write!(w, "{{\"kind\":\"{}\",", l.kind)?;
        if self.rfc3339 {
            write!(w, "\"ts\":\"{}\"", EventTime(l.ts))?;
        } else {
            write!(w, "\"ts\":{}", l.ts)?;
        }
        let mut scope = None;
        if let Some(s) = l.scope {
            w.extend_from_slice(b",\"scope\":\"");
            let at = w.len();
            write!(w, "order-{s}")?;
            scope = Some(at..w.len());
            w.push(b'"');
        }
        if let Some(e) = l.epoch {
            write!(w, ",\"epoch\":{e}")?;
        }
        write!(w, ",\"route\":\"{}\"", l.route)?;
        if let Some(h) = l.holder {
            write!(w, ",\"holder\":\"worker-{h}\"")?;
        }
        if l.rejected {
            write!(w, ",\"outcome\":\"rejected\"")?;
        }
        write!(
            w,
            ",\"emitter\":\"{}\",\"seq\":{}}}",
            emitters[route_idx], self.seqs[route_idx]
        )?;
        // The scope is `order-<digits>`: ASCII, so this never fails.
        let scope = scope.and_then(|r| std::str::from_utf8(&w[r]).ok());
        sink.event(w, scope, l.ts)
    }
}

/// Positions `0..n` spread evenly over `count` injections (empty when `count` is 0).
fn spread(count: u64, n: u64, offset: u64) -> Vec<u64> {
    (0..count)
        .map(|i| ((i * 2 + 1) * n / (count * 2).max(1) + offset) % n.max(1))
        .collect()
}

/// Writes the workload as NDJSON and returns its ground truth.
pub fn simulate<W: Write>(wl: &Workload, w: &mut W) -> io::Result<Truth> {
    simulate_into(wl, &mut Ndjson(w))
}

/// Hands the workload to `sink` one event at a time and returns its ground truth. The first
/// error of the sink stops the generation and is returned.
pub fn simulate_into<S: Sink>(wl: &Workload, sink: &mut S) -> io::Result<Truth> {
    let mut g = Generator::new(wl);
    for _ in 0..wl.events {
        g.step(sink)?;
    }
    Ok(g.finish())
}

/// A fault injected again and again in a live workload ([`Generator::every`]); each needs no
/// route of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// An old owner resumes after a handover and commits with the superseded epoch.
    PausedOldOwner,
    /// A commit without an epoch.
    MissingEpoch,
    /// An old-owner commit within the clock skew of the handover.
    ClockSkew,
    /// A stale write the resource rejected.
    Rejected,
    /// An event lost in transit (a seq gap).
    LostTelemetry,
}

impl Fault {
    fn name(self) -> &'static str {
        match self {
            Fault::PausedOldOwner => "paused_old_owner",
            Fault::MissingEpoch => "missing_epoch",
            Fault::ClockSkew => "clock_skew",
            Fault::Rejected => "rejected",
            Fault::LostTelemetry => "lost_telemetry",
        }
    }
}

/// A fault injected every `every` ns of event time from `next` on.
#[derive(Debug, Clone, Copy)]
struct Periodic {
    fault: Fault,
    next: i64,
    every: i64,
}

/// The generator: one commit at a time ([`Generator::step`]) with the heartbeats due before
/// it, its handover and its faults. [`simulate_into`] takes `events` steps; a live workload
/// (`fencewatch demo`) steps as the clock reaches [`Generator::next_time`], its faults
/// injected periodically ([`Generator::every`]).
#[derive(Debug)]
pub struct Generator {
    wl: Workload,
    rng: Rng,
    routes: Vec<(&'static str, bool)>,
    emitters: Vec<String>,
    out: Out,
    step: i64,
    scopes: Vec<ScopeState>,
    truth: Truth,
    plan: BTreeMap<u64, Vec<&'static str>>,
    periodic: Vec<Periodic>,
    /// Premises attested again and again ([`Generator::renew`]): (premise, next time, every).
    renewals: Vec<(&'static str, i64, i64)>,
    emitting: Vec<usize>,
    next_heartbeat: i64,
    /// The next commit's index.
    i: u64,
    started: bool,
}

impl std::fmt::Debug for Out {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Out").field("lines", &self.lines).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wl(faults: Faults) -> Workload {
        Workload {
            events: 5_000,
            scopes: 200,
            seed: 7,
            start: EventTime(1_764_417_600_000_000_000),
            rate: 1000,
            rfc3339: false,
            grants: false,
            faults,
            attest: &[],
        }
    }

    #[test]
    fn deterministic_and_parseable() {
        let (mut a, mut b) = (Vec::new(), Vec::new());
        let t = simulate(&wl(Faults::default()), &mut a).unwrap();
        simulate(&wl(Faults::default()), &mut b).unwrap();
        assert_eq!(a, b);
        assert_eq!(t.verdict, "holds");
        for line in a.split(|&c| c == b'\n').filter(|l| !l.is_empty()) {
            crate::decode::json::decode_line(line, 1 << 20).unwrap();
        }
        assert_eq!(t.lines as usize, a.iter().filter(|&&c| c == b'\n').count());
    }

    #[test]
    fn sink_gets_each_line_with_its_scope() {
        struct Collect(Vec<(Vec<u8>, Option<String>)>);
        impl Sink for Collect {
            fn event(&mut self, json: &[u8], scope: Option<&str>, _ts: i64) -> io::Result<()> {
                self.0.push((json.to_vec(), scope.map(str::to_string)));
                Ok(())
            }
        }
        let w = Workload {
            grants: true,
            ..wl(Faults {
                paused_old_owner: 2,
                ..Faults::default()
            })
        };
        let (mut ndjson, mut each) = (Vec::new(), Collect(Vec::new()));
        let t = simulate(&w, &mut ndjson).unwrap();
        simulate_into(&w, &mut each).unwrap();
        assert_eq!(t.lines as usize, each.0.len());
        let mut joined = Vec::new();
        let mut keyless = 0;
        for (json, scope) in &each.0 {
            joined.extend_from_slice(json);
            joined.push(b'\n');
            let v: serde_json::Value = serde_json::from_slice(json).unwrap();
            assert_eq!(v["scope"].as_str(), scope.as_deref());
            keyless += usize::from(scope.is_none());
        }
        assert_eq!(joined, ndjson);
        assert!(keyless > 0, "heartbeats have no scope");
    }

    #[test]
    fn truth_counts_injections() {
        let t = simulate(
            &wl(Faults {
                paused_old_owner: 3,
                epoch_wraparound: 2,
                lost_telemetry: 4,
                silent_route: true,
                ..Faults::default()
            }),
            &mut io::sink(),
        )
        .unwrap();
        assert_eq!(t.counterexamples["stale_commit"], 5);
        assert_eq!(t.injected["lost_telemetry"], 4);
        assert_eq!(t.verdict, "refuted");
        assert_eq!(t.unknown_reasons, ["route_silent", "telemetry_gap"]);
    }

    #[test]
    fn attestations_are_required_and_written_once_per_route() {
        static ATTEST: std::sync::OnceLock<Vec<Attest>> = std::sync::OnceLock::new();
        let attest = ATTEST.get_or_init(|| {
            vec![
                Attest::parse("conditional_commit", false).unwrap(),
                Attest::parse("durable_fence:10s", false).unwrap(),
                Attest::parse("monotonic_epoch", true).unwrap(),
            ]
        });
        assert!(Attest::parse("exclusive_activation", false).is_err());
        assert!(Attest::parse("durable_fence:0s", false).is_err());
        let w = Workload {
            attest,
            ..wl(Faults::default())
        };
        let mut out = Vec::new();
        let t = simulate(&w, &mut out).unwrap();
        // conditional_commit on each of the two fenced routes, durable_fence, monotonic_epoch.
        assert_eq!(t.attestations, 4);
        assert_eq!(t.verdict, "unknown");
        assert_eq!(t.unknown_reasons, ["premise_failed", "premise_unattested"]);
        let contract = fencewatch_assess::Contract::parse("c.toml", &w.contract_toml()).unwrap();
        let p = &contract.properties[0];
        assert_eq!(p.premises.len(), 4);
        assert_eq!(
            p.premise_index("conditional_commit", Some("settlement-worker.settle")),
            Some(1)
        );
        let first = out.split(|&c| c == b'\n').next().unwrap();
        let d = crate::decode::json::decode_line(first, 1 << 20).unwrap();
        assert_eq!(d.event().kind, fencewatch_assess::Kind::Attestation);
        assert!(d.event().validate().is_ok());
    }
}
