//! How the [`Generator`] makes a workload: faults spread over the commits, scopes handed over
//! between holders, each line written once, in time order.

use super::*;

impl Generator {
    /// The generator of `wl`, its counted faults spread over its `events` commits.
    pub fn new(wl: &Workload) -> Generator {
        let mut rng = Rng(wl.seed);
        let routes = wl.routes();
        let emitters: Vec<String> = routes
            .iter()
            .map(|(r, _)| format!("{}-1", r.split('.').next().unwrap_or(r)))
            .collect();
        let out = Out {
            rfc3339: wl.rfc3339,
            seqs: vec![0; routes.len()],
            lines: 0,
            buf: Vec::with_capacity(256),
        };
        let scopes: Vec<ScopeState> = (0..wl.scopes)
            .map(|_| ScopeState {
                epoch: 1,
                holder: rng.below(50),
                last_commit: i64::MIN / 2,
                retired: false,
            })
            .collect();
        let truth = Truth::empty();
        let f = wl.faults;
        let n = wl.events.max(1);
        let mut plan: BTreeMap<u64, Vec<&'static str>> = BTreeMap::new();
        for (name, count, offset) in [
            ("paused_old_owner", f.paused_old_owner, 0),
            ("clock_skew", f.clock_skew, 1),
            ("missing_epoch", f.missing_epoch, 2),
            ("unfenced_route", f.unfenced_route, 3),
            ("epoch_wraparound", f.epoch_wraparound, 4),
            ("rejected", f.rejected, 5),
            ("lost_telemetry", f.lost_telemetry, 6),
        ] {
            for at in spread(count, n, offset * 7) {
                plan.entry(at).or_default().push(name);
            }
        }
        let emitting: Vec<usize> = (0..routes.len())
            .filter(|&i| routes[i].0 != SILENT_ROUTE)
            .collect();
        Generator {
            wl: *wl,
            rng,
            routes,
            emitters,
            out,
            step: (1_000_000_000 / wl.rate as i64).max(1),
            scopes,
            truth,
            plan,
            periodic: Vec::new(),
            renewals: Vec::new(),
            emitting,
            next_heartbeat: wl.start.0,
            i: 0,
            started: false,
        }
    }

    /// Injects `fault` at the first commit at or after `first` (ns of event time), then every
    /// `every` ns.
    pub fn every(mut self, fault: Fault, first: i64, every: i64) -> Generator {
        self.periodic.push(Periodic {
            fault,
            next: first,
            every: every.max(1),
        });
        self
    }

    /// Attests `premise` (property-wide, for its `max_age`) at `first` (ns of event time), then
    /// every `every` ns, as a deploy pipeline or a scheduled drill renews it; it is required by
    /// the caller's contract, not by [`Workload::contract_toml`].
    pub fn renew(mut self, premise: &'static str, first: i64, every: i64) -> Generator {
        self.renewals.push((premise, first, every.max(1)));
        self
    }

    /// The event time of the next commit.
    pub fn next_time(&self) -> i64 {
        self.wl
            .start
            .0
            .saturating_add((self.i as i64).saturating_mul(self.step))
    }

    fn emit<S: Sink>(
        &mut self,
        sink: &mut S,
        l: &Line<'_>,
        r: usize,
        lose: bool,
    ) -> io::Result<()> {
        self.out.emit(sink, l, r, &self.emitters, lose)
    }

    /// Generates the next commit: the heartbeats due before it, a handover now and then (with
    /// the faults that ride on one), and the commit itself (with its own faults).
    pub fn step<S: Sink>(&mut self, sink: &mut S) -> io::Result<()> {
        let wl = self.wl;
        if !self.started {
            self.started = true;
            for a in wl.attest {
                for route in wl.attested_routes(a) {
                    let valid = a.valid_for.unwrap_or(wl.max_age(a.premise));
                    let at = wl.first_window();
                    self.out.attestation(sink, a, route, at, valid)?;
                    self.truth.attestations += 1;
                }
            }
            if wl.grants {
                for s in 0..self.scopes.len() {
                    let st = self.scopes[s];
                    let l = Line {
                        kind: "grant",
                        ts: wl.start.0 - 1_000_000_000,
                        scope: Some(s as u64),
                        epoch: Some(st.epoch),
                        route: self.routes[0].0,
                        holder: Some(st.holder),
                        rejected: false,
                    };
                    self.emit(sink, &l, 0, false)?;
                    self.truth.grants += 1;
                }
            }
        }
        let i = self.i;
        let now = self.next_time();
        self.i += 1;
        while self.next_heartbeat <= now {
            for k in 0..self.emitting.len() {
                let r = self.emitting[k];
                let l = Line {
                    kind: "heartbeat",
                    ts: self.next_heartbeat,
                    scope: None,
                    epoch: None,
                    route: self.routes[r].0,
                    holder: None,
                    rejected: false,
                };
                self.emit(sink, &l, r, false)?;
                self.truth.heartbeats += 1;
            }
            self.next_heartbeat += HEARTBEAT_NS;
        }
        let mut faults = self.plan.remove(&i).unwrap_or_default();
        for k in 0..self.renewals.len() {
            let (premise, next, every) = self.renewals[k];
            if next <= now {
                let a = Attest {
                    premise,
                    valid_for: None,
                    failed: false,
                };
                self.out
                    .attestation(sink, &a, None, next, Duration(DAY_NS))?;
                self.truth.attestations += 1;
                self.renewals[k].1 = next.saturating_add(every);
            }
        }
        for p in &mut self.periodic {
            if now >= p.next {
                faults.push(p.fault.name());
                p.next = now.saturating_add(p.every);
            }
        }
        let scopes_n = self.scopes.len();
        let mut s = self.rng.below(wl.scopes) as usize;
        while self.scopes[s].retired {
            s = (s + 1) % scopes_n;
        }
        let forced = faults.iter().any(|f| {
            matches!(
                *f,
                "paused_old_owner" | "clock_skew" | "epoch_wraparound" | "rejected"
            )
        });
        let is_quiet = |st: &ScopeState| !st.retired && now - st.last_commit > 2 * SKEW_NS;
        if forced && !is_quiet(&self.scopes[s]) {
            // An injected handover needs a quiet scope; the plan guarantees one exists as long as
            // there are more scopes than commits per 100 ms.
            if let Some(q) = (0..scopes_n)
                .map(|k| (s + k) % scopes_n)
                .find(|&k| is_quiet(&self.scopes[k]))
            {
                s = q;
            }
        }
        let quiet = is_quiet(&self.scopes[s]);
        if quiet && (forced || self.rng.below(20) == 0) {
            let old = self.scopes[s];
            let wrap = faults.contains(&"epoch_wraparound");
            let holder_step = 1 + self.rng.below(49);
            let st = &mut self.scopes[s];
            st.epoch = if wrap { 0 } else { st.epoch + 1 };
            st.holder = (st.holder + holder_step) % 50;
            let st = *st;
            self.truth.handovers += 1;
            let r = self.emitting[0];
            if wl.grants {
                let l = Line {
                    kind: "grant",
                    ts: now,
                    scope: Some(s as u64),
                    epoch: Some(st.epoch),
                    route: self.routes[r].0,
                    holder: Some(st.holder),
                    rejected: false,
                };
                self.emit(sink, &l, r, false)?;
                self.truth.grants += 1;
            }
            if wrap {
                // The wrapped epoch commits once and the scope is retired: exactly one stale commit.
                let l = Line {
                    kind: "commit",
                    ts: now,
                    scope: Some(s as u64),
                    epoch: Some(0),
                    route: self.routes[r].0,
                    holder: Some(st.holder),
                    rejected: false,
                };
                self.emit(sink, &l, r, false)?;
                self.scopes[s].retired = true;
                self.scopes[s].last_commit = now;
                let t = &mut self.truth;
                *t.injected.entry("epoch_wraparound").or_default() += 1;
                *t.counterexamples.entry("stale_commit").or_default() += 1;
                if wl.grants {
                    *t.counterexamples.entry("grant_regression").or_default() += 1;
                }
                return Ok(());
            }
            let l = Line {
                kind: "fence",
                ts: now,
                scope: Some(s as u64),
                epoch: Some(st.epoch),
                route: self.routes[r].0,
                holder: Some(st.holder),
                rejected: false,
            };
            self.emit(sink, &l, r, false)?;
            for fault in &faults {
                let (delay, rejected) = match *fault {
                    "paused_old_owner" => (RESUME_NS, false),
                    "clock_skew" => (SKEW_NS / 2, false),
                    "rejected" => (RESUME_NS, true),
                    _ => continue,
                };
                let l = Line {
                    kind: "commit",
                    ts: now + delay,
                    scope: Some(s as u64),
                    epoch: Some(old.epoch),
                    route: self.routes[r].0,
                    holder: Some(old.holder),
                    rejected,
                };
                self.emit(sink, &l, r, false)?;
                let t = &mut self.truth;
                *t.injected.entry(fault).or_default() += 1;
                match *fault {
                    "paused_old_owner" => {
                        *t.counterexamples.entry("stale_commit").or_default() += 1
                    }
                    "clock_skew" => t.unknown_reasons.push("ambiguous_order"),
                    _ => {}
                }
            }
        }
        let unfenced = faults.contains(&"unfenced_route");
        let r = if unfenced {
            self.routes
                .iter()
                .position(|(n, _)| *n == UNFENCED_ROUTE)
                .expect("declared when injected")
        } else {
            self.emitting[self.rng.below(FENCED_ROUTES.len() as u64) as usize]
        };
        let missing = faults.contains(&"missing_epoch");
        let lose = faults.contains(&"lost_telemetry");
        let st = self.scopes[s];
        let l = Line {
            kind: "commit",
            ts: now,
            scope: Some(s as u64),
            epoch: (!missing).then_some(st.epoch),
            route: self.routes[r].0,
            holder: Some(st.holder),
            rejected: false,
        };
        self.emit(sink, &l, r, lose)?;
        self.scopes[s].last_commit = now;
        self.truth.commits += u64::from(!lose);
        for (flag, name, reason) in [
            (unfenced, "unfenced_route", "unfenced_route"),
            (missing, "missing_epoch", "missing_epoch"),
            (lose, "lost_telemetry", "telemetry_gap"),
        ] {
            if flag {
                *self.truth.injected.entry(name).or_default() += 1;
                self.truth.unknown_reasons.push(reason);
            }
        }
        Ok(())
    }

    /// The ground truth of what was generated.
    pub fn finish(mut self) -> Truth {
        let mut truth = std::mem::replace(&mut self.truth, Truth::empty());
        if self.wl.faults.silent_route {
            truth.injected.insert("silent_route", 1);
            truth.unknown_reasons.push("route_silent");
        }
        // The last window ends after the last commit (and the old owners resumed a second
        // after a handover).
        let last = self.next_time() - self.step + RESUME_NS;
        let end = last.div_euclid(WINDOW_NS) * WINDOW_NS + WINDOW_NS;
        let wl = self.wl;
        for a in wl.attest {
            let valid = a.valid_for.unwrap_or(wl.max_age(a.premise));
            if a.failed {
                truth.unknown_reasons.push("premise_failed");
            } else if wl.first_window().saturating_add(valid.0) < end {
                truth.unknown_reasons.push("premise_unattested");
            }
        }
        truth.unknown_reasons.sort_unstable();
        truth.unknown_reasons.dedup();
        truth.lines = self.out.lines;
        truth.verdict = if !truth.counterexamples.is_empty() {
            "refuted"
        } else if !truth.unknown_reasons.is_empty() {
            "unknown"
        } else {
            "holds"
        };
        truth
    }
}
