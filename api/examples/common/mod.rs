//! What the benchmark examples read about a running service: its CPU time and peak memory
//! from `/proc`, and metric samples from its `/metrics` text.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::PathBuf;

/// CPU seconds of a process (user and sys), and by thread name (user + sys, threads of one
/// name summed), from `/proc`.
#[derive(Debug, Clone, Default)]
pub(crate) struct Cpu {
    pub(crate) user: f64,
    pub(crate) sys: f64,
    threads: BTreeMap<String, f64>,
}

impl Cpu {
    pub(crate) fn of(pid: u32) -> Cpu {
        let stat = |p: PathBuf| -> Option<(String, f64, f64)> {
            let s = std::fs::read_to_string(p).ok()?;
            let (head, tail) = s.rsplit_once(')')?;
            let f: Vec<&str> = tail.split_whitespace().collect();
            // utime and stime are in USER_HZ, 100 per second on Linux.
            let (u, s): (f64, f64) = (f.get(11)?.parse().ok()?, f.get(12)?.parse().ok()?);
            Some((head.split_once('(')?.1.into(), u / 100.0, s / 100.0))
        };
        let dir = PathBuf::from(format!("/proc/{pid}"));
        let (_, user, sys) = stat(dir.join("stat")).unwrap_or_default();
        let mut threads = BTreeMap::new();
        for t in std::fs::read_dir(dir.join("task"))
            .into_iter()
            .flatten()
            .flatten()
        {
            if let Some((name, u, s)) = stat(t.path().join("stat")) {
                *threads.entry(name).or_default() += u + s;
            }
        }
        Cpu { user, sys, threads }
    }

    /// The process's CPU time since `earlier` (per-thread figures are not kept).
    pub(crate) fn since(&self, earlier: &Cpu) -> Cpu {
        Cpu {
            user: self.user - earlier.user,
            sys: self.sys - earlier.sys,
            threads: BTreeMap::new(),
        }
    }

    /// User + sys seconds of the whole process.
    pub(crate) fn total(&self) -> f64 {
        self.user + self.sys
    }

    /// CPU seconds of the threads whose name starts with `prefix`.
    pub(crate) fn of_threads(&self, prefix: &str) -> f64 {
        let named = self.threads.iter().filter(|(n, _)| n.starts_with(prefix));
        named.map(|(_, s)| s).sum()
    }

    /// The busiest threads, `name secs` by decreasing CPU.
    pub(crate) fn busiest(&self, n: usize) -> String {
        let mut v: Vec<(&String, &f64)> = self.threads.iter().collect();
        v.sort_by(|a, b| b.1.total_cmp(a.1));
        let v: Vec<String> = v
            .iter()
            .take(n)
            .map(|(t, s)| format!("{t} {s:.2}"))
            .collect();
        v.join(", ")
    }
}

/// The process's peak resident memory (`VmHWM`), MiB.
pub(crate) fn hwm_mib(pid: u32) -> f64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kb = s
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:")?.trim().strip_suffix("kB"));
    kb.and_then(|v| v.trim().parse::<f64>().ok()).unwrap_or(0.0) / 1024.0
}

/// The median of `v` (the upper of the two middle values for an even count), NaN if empty.
pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Sum of the samples of a metric (all label sets).
pub(crate) fn metric(text: &str, name: &str) -> f64 {
    let sample = |l: &&str| {
        l.strip_prefix(name)
            .is_some_and(|r| r.starts_with(['{', ' ']))
    };
    let values = text.lines().filter(sample);
    values
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>()
        + 0.0
}
