//! Human-readable output: the `check` text report, `contract check`, and a progress bar.

use fencewatch_assess::contract::{Compiled, Contract, Status};
use fencewatch_assess::report::Report;
use fencewatch_assess::{Reason, Verdict};
use std::io::{self, Write};
use std::time::{Duration, Instant};

fn shout(v: Verdict) -> &'static str {
    match v {
        Verdict::Holds => "HOLDS",
        Verdict::Unknown => "UNKNOWN",
        Verdict::Refuted => "REFUTED",
    }
}

/// Windows of a timeline shown in the text report before it is summarised.
const TEXT_WINDOWS: usize = 30;

/// The `check --format text` report.
pub fn text_report(w: &mut dyn Write, r: &Report) -> io::Result<()> {
    writeln!(w, "fencewatch check: {}", shout(r.verdict))?;
    let status = match r.contract.status {
        Status::Accepted => "accepted",
        Status::Rejected => "REJECTED candidate (verdicts still come from the evidence)",
    };
    writeln!(w, "contract: {status}")?;
    for m in &r.contract.missing {
        writeln!(w, "  missing obligation ({}): {m}", m.property)?;
    }
    writeln!(
        w,
        "evidence: {} valid events, {} malformed, {} unattributed, {} duplicate deliveries dropped",
        r.events, r.malformed, r.unattributed, r.duplicates
    )?;
    if r.attestations_ignored > 0 {
        writeln!(
            w,
            "  {} attestation(s) ignored: they name a premise or route the contract does not require",
            r.attestations_ignored
        )?;
    }
    for m in &r.malformed_events {
        writeln!(w, "  malformed {}: {}", m.source, m.detail)?;
    }
    if r.malformed > r.malformed_events.len() as u64 {
        writeln!(
            w,
            "  … and {} more malformed events",
            r.malformed - r.malformed_events.len() as u64
        )?;
    }
    for p in &r.properties {
        writeln!(w)?;
        writeln!(w, "property {}: {}", p.property, shout(p.verdict))?;
        writeln!(
            w,
            "  {} events, {} stale writes rejected by the fence",
            p.events, p.stale_rejections
        )?;
        if !p.counterexamples.is_empty() {
            writeln!(w, "  counterexamples ({}):", p.counterexamples.len())?;
        }
        for cx in &p.counterexamples {
            writeln!(
                w,
                "  - {} {} scope `{}` incarnation {}",
                cx.kind.as_str(),
                cx.id,
                cx.scope,
                cx.incarnation
            )?;
            let ev = |v: &fencewatch_assess::finding::EventView| {
                let mut s = format!(
                    "{} epoch {}",
                    v.kind,
                    v.epoch.map_or("-".into(), |e| e.to_string())
                );
                if let Some(h) = &v.holder {
                    s.push_str(&format!(" holder {h}"));
                }
                if let Some(r) = &v.route {
                    s.push_str(&format!(" route {r}"));
                }
                s.push_str(&format!(" at {} ({})", v.ts, v.source));
                s
            };
            writeln!(w, "      stale:       {}", ev(&cx.stale))?;
            writeln!(w, "      superseding: {}", ev(&cx.superseding))?;
            writeln!(w, "      {}", cx.explanation)?;
        }
        if p.unknown.is_empty() {
            writeln!(w, "  unknown reasons: none")?;
        } else {
            writeln!(w, "  unknown reasons:")?;
            for (reason, n) in &p.unknown {
                writeln!(w, "  - {reason} ×{n}: {}", Reason::advice(*reason))?;
                for s in p.unknown_samples.get(reason).into_iter().flatten() {
                    writeln!(w, "      e.g. {}: {}", s.source, s.detail)?;
                }
            }
        }
        writeln!(w, "  routes:")?;
        for route in &p.routes {
            writeln!(
                w,
                "  - {}{}: {} observations, last {}, silent in {} window(s)",
                route.name,
                if route.fenced { "" } else { " (unfenced)" },
                route.observations,
                route.last_seen.as_deref().unwrap_or("never"),
                route.silent_windows
            )?;
        }
        for u in &p.undeclared_routes {
            writeln!(w, "  - {} (undeclared): {} events", u.name, u.events)?;
        }
        if !p.premises.is_empty() {
            writeln!(w, "  premises:")?;
        }
        for pr in &p.premises {
            let on = pr
                .route
                .as_deref()
                .map(|r| format!(" on route {r}"))
                .unwrap_or_default();
            let last = match &pr.last {
                Some(l) => format!(
                    "last {} at {}{}",
                    l.outcome,
                    l.ts,
                    l.attester
                        .as_deref()
                        .map(|a| format!(" by {a}"))
                        .unwrap_or_default()
                ),
                None => "never attested".into(),
            };
            writeln!(
                w,
                "  - {}{on} (max_age {}): {} attestation(s), {last}; unattested in {} window(s), failed in {}",
                pr.name, pr.max_age, pr.attestations, pr.unattested_windows, pr.failed_windows
            )?;
        }
        let total: u64 = p.windows.iter().map(|r| r.windows).sum();
        writeln!(w, "  windows ({total}):")?;
        for run in p.windows.iter().take(TEXT_WINDOWS) {
            let span = if run.windows == 1 {
                run.start.clone()
            } else {
                format!("{} .. {} ({} windows)", run.start, run.end, run.windows)
            };
            writeln!(
                w,
                "  - {span} {}{}",
                run.verdict,
                if run.is_final { "" } else { " (provisional)" }
            )?;
        }
        if p.windows.len() > TEXT_WINDOWS {
            writeln!(
                w,
                "  … {} more (use --format json for all)",
                p.windows.len() - TEXT_WINDOWS
            )?;
        }
    }
    Ok(())
}

/// The `contract check` text output.
pub fn text_contract(w: &mut dyn Write, contract: &Contract, c: &Compiled) -> io::Result<()> {
    for (p, s) in contract.properties.iter().zip(&c.properties) {
        let status = match s.status {
            Status::Accepted => "accepted",
            Status::Rejected => "REJECTED candidate",
        };
        writeln!(
            w,
            "property {} ({} over {}): {status}",
            p.name,
            p.strategy.as_str(),
            p.subject
        )?;
        writeln!(
            w,
            "  window {}, clock_skew {}, allowed_lateness {}, route_freshness {}, assurance_window {}",
            p.window, p.clock_skew, p.allowed_lateness, p.route_freshness, p.assurance_window
        )?;
        for r in &p.routes {
            writeln!(
                w,
                "  route {}{}",
                r.name,
                if r.fenced { "" } else { " (fenced = false)" }
            )?;
        }
        for m in &s.missing {
            writeln!(w, "  missing obligation: {m}")?;
        }
        for o in &s.obligations {
            writeln!(w, "  residual obligation: {o}")?;
        }
        for pr in &s.premises {
            let on = pr
                .route
                .as_deref()
                .map(|r| format!(" on route {r}"))
                .unwrap_or_default();
            let req = match &pr.max_age {
                Some(age) if pr.required => format!("required, max_age {age}"),
                _ => "not required".to_string(),
            };
            writeln!(w, "  premise {}{on}: {req} ({})", pr.name, pr.meaning)?;
        }
    }
    writeln!(
        w,
        "contract: {}",
        if c.status == Status::Accepted {
            "accepted"
        } else {
            "rejected candidate"
        }
    )
}

/// A progress bar on stderr, redrawn at most ten times a second.
#[derive(Debug)]
pub struct ProgressBar {
    total: u64,
    started: Instant,
    last: Option<Instant>,
    label: &'static str,
}

impl ProgressBar {
    /// A bar for `total` bytes (0 when unknown).
    pub fn new(total: u64) -> ProgressBar {
        ProgressBar::labelled(total, "")
    }

    /// A bar for `total` bytes shown after `label` (a phase's name).
    pub fn labelled(total: u64, label: &'static str) -> ProgressBar {
        ProgressBar {
            total,
            started: Instant::now(),
            last: None,
            label,
        }
    }

    /// Bytes read so far.
    pub fn update(&mut self, done: u64) {
        let now = Instant::now();
        if self
            .last
            .is_some_and(|l| now - l < Duration::from_millis(100))
        {
            return;
        }
        self.last = Some(now);
        let secs = (now - self.started).as_secs_f64().max(1e-3);
        let mib = done as f64 / (1 << 20) as f64;
        let line = if self.total > 0 {
            let frac = (done as f64 / self.total as f64).min(1.0);
            let filled = (frac * 30.0) as usize;
            format!(
                "[{}{}] {:5.1}% {mib:.0} MiB {:.0} MiB/s",
                "#".repeat(filled),
                " ".repeat(30 - filled),
                frac * 100.0,
                mib / secs
            )
        } else {
            format!("{mib:.0} MiB {:.0} MiB/s", mib / secs)
        };
        let sep = if self.label.is_empty() { "" } else { " " };
        eprint!("\r{}{sep}{line}\x1b[K", self.label);
    }

    /// Clears the bar.
    pub fn finish(&mut self) {
        if self.last.is_some() {
            eprint!("\r\x1b[K");
        }
    }
}
