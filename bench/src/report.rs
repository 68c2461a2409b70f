//! The result of a benchmark run: a text table and a JSON document.

use serde_json::{Value, json};
use std::fmt::Write as _;

/// The wall times of one measurement.
#[derive(Debug, Clone)]
pub(crate) struct Measurement {
    /// Every run's wall seconds, in run order.
    pub(crate) runs_s: Vec<f64>,
    /// The median of `runs_s` (mean of the middle two for an even count).
    pub(crate) median_s: f64,
    pub(crate) min_s: f64,
    pub(crate) max_s: f64,
    /// `events / median_s`.
    pub(crate) events_per_s: f64,
}

impl Measurement {
    pub(crate) fn new(runs_s: Vec<f64>, events: u64) -> Measurement {
        let mut sorted = runs_s.clone();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        let median_s = match n {
            0 => f64::NAN,
            _ if n % 2 == 1 => sorted[n / 2],
            _ => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
        };
        Measurement {
            min_s: sorted.first().copied().unwrap_or(f64::NAN),
            max_s: sorted.last().copied().unwrap_or(f64::NAN),
            events_per_s: events as f64 / median_s,
            median_s,
            runs_s,
        }
    }

    fn to_json(&self) -> Value {
        json!({
            "median_s": self.median_s,
            "min_s": self.min_s,
            "max_s": self.max_s,
            "runs_s": self.runs_s,
            "events_per_s": self.events_per_s,
        })
    }
}

/// Everything one benchmark run measured.
#[derive(Debug, Clone)]
pub(crate) struct Report {
    pub(crate) file: String,
    pub(crate) bytes: u64,
    /// Events parsed by the serde pass: the denominator of every events/s.
    pub(crate) events: u64,
    pub(crate) parse_errors: u64,
    pub(crate) runs: u32,
    pub(crate) skew_ns: i64,
    pub(crate) skew_source: String,
    pub(crate) cores: usize,
    pub(crate) serde: Measurement,
    pub(crate) check: Measurement,
    /// `check --threads 1`.
    pub(crate) check_one_thread: Measurement,
    pub(crate) datafusion: Measurement,
    /// The DuckDB peer's times and count, unless left out.
    pub(crate) duckdb: Option<(Measurement, u64)>,
    pub(crate) check_verdict: String,
    pub(crate) check_exit_code: i32,
    pub(crate) check_events: u64,
    pub(crate) check_stale_commit: u64,
    pub(crate) datafusion_count: u64,
    pub(crate) truth_stale_commit: Option<u64>,
    pub(crate) notes: Vec<String>,
}

impl Report {
    /// How many times longer DataFusion takes than `check` (SPEC §7: at least 2, goal 5).
    fn speedup(&self) -> f64 {
        self.datafusion.median_s / self.check.median_s
    }

    /// `check` throughput as a percentage of serde's (SPEC §7: at least 60).
    fn check_pct_of_serde(&self) -> f64 {
        100.0 * self.serde.median_s / self.check.median_s
    }

    /// How many times longer DuckDB takes than `check` (issue 16: at least 3).
    fn duckdb_speedup(&self) -> Option<f64> {
        self.duckdb
            .as_ref()
            .map(|(m, _)| m.median_s / self.check.median_s)
    }

    fn counts_agree(&self) -> bool {
        self.check_stale_commit == self.datafusion_count
            && self
                .duckdb
                .as_ref()
                .is_none_or(|(_, c)| *c == self.check_stale_commit)
    }

    pub(crate) fn to_json(&self) -> Value {
        json!({
            "file": self.file,
            "bytes": self.bytes,
            "events": self.events,
            "parse_errors": self.parse_errors,
            "runs": self.runs,
            "cores": self.cores,
            "skew_ns": self.skew_ns,
            "skew_source": self.skew_source,
            "serde": self.serde.to_json(),
            "check": {
                "timing": self.check.to_json(),
                "verdict": self.check_verdict,
                "exit_code": self.check_exit_code,
                "events": self.check_events,
                "stale_commit": self.check_stale_commit,
            },
            "check_one_thread": self.check_one_thread.to_json(),
            "datafusion": {
                "timing": self.datafusion.to_json(),
                "count": self.datafusion_count,
            },
            "duckdb": self.duckdb.as_ref().map(|(m, c)| json!({
                "timing": m.to_json(),
                "count": c,
            })),
            "ratios": {
                "datafusion_over_check": self.speedup(),
                "duckdb_over_check": self.duckdb_speedup(),
                "check_pct_of_serde_throughput": self.check_pct_of_serde(),
            },
            "stale_counts_agree": self.counts_agree(),
            "truth_stale_commit": self.truth_stale_commit,
            "notes": self.notes,
        })
    }

    pub(crate) fn table(&self) -> String {
        let mut s = String::new();
        let mb = self.bytes as f64 / 1e6;
        let _ = writeln!(
            s,
            "file {}: {:.1} MB, {} events; {} run(s) each, median reported; {} cores; skew {} ns ({})",
            self.file, mb, self.events, self.runs, self.cores, self.skew_ns, self.skew_source
        );
        let _ = writeln!(
            s,
            "{:<11} {:>9} {:>9} {:>9} {:>13} {:>9}  result",
            "measurement", "median s", "min s", "max s", "events/s", "MB/s"
        );
        let mut rows = vec![
            (
                "serde",
                &self.serde,
                format!(
                    "{} events parsed, {} errors",
                    self.events, self.parse_errors
                ),
            ),
            (
                "check",
                &self.check,
                format!(
                    "verdict {} (exit {}), stale_commit {}",
                    self.check_verdict, self.check_exit_code, self.check_stale_commit
                ),
            ),
            (
                "check -t1",
                &self.check_one_thread,
                "check --threads 1 (same result unless noted)".to_owned(),
            ),
            (
                "datafusion",
                &self.datafusion,
                format!("COUNT(*) {}", self.datafusion_count),
            ),
        ];
        if let Some((m, c)) = &self.duckdb {
            rows.push(("duckdb", m, format!("COUNT(*) {c}")));
        }
        for (name, m, result) in rows {
            let _ = writeln!(
                s,
                "{:<11} {:>9.3} {:>9.3} {:>9.3} {:>13.0} {:>9.1}  {}",
                name,
                m.median_s,
                m.min_s,
                m.max_s,
                m.events_per_s,
                mb / m.median_s,
                result
            );
        }
        let _ = writeln!(
            s,
            "datafusion/check time: {:.2}x faster (SPEC §7: >= 2x, goal 5x) {}",
            self.speedup(),
            pass(self.speedup() >= 2.0)
        );
        if let Some(x) = self.duckdb_speedup() {
            let _ = writeln!(
                s,
                "duckdb/check time: {x:.2}x faster (issue 16: >= 3x) {}",
                pass(x >= 3.0)
            );
        }
        let _ = writeln!(
            s,
            "check throughput: {:.1}% of serde (SPEC §7: >= 60%) {}",
            self.check_pct_of_serde(),
            pass(self.check_pct_of_serde() >= 60.0)
        );
        let truth = match self.truth_stale_commit {
            Some(t) => format!("; truth {t}"),
            None => String::new(),
        };
        let duck = match &self.duckdb {
            Some((_, c)) => format!(" vs duckdb {c}"),
            None => String::new(),
        };
        let _ = writeln!(
            s,
            "stale_commit: check {} vs datafusion {}{duck}: {}{}",
            self.check_stale_commit,
            self.datafusion_count,
            if self.counts_agree() {
                "AGREE"
            } else {
                "DIFFER"
            },
            truth
        );
        for n in &self.notes {
            let _ = writeln!(s, "note: {n}");
        }
        s
    }
}

fn pass(ok: bool) -> &'static str {
    if ok { "[met]" } else { "[NOT met]" }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even() {
        assert_eq!(Measurement::new(vec![3.0, 1.0, 2.0], 6).median_s, 2.0);
        assert_eq!(Measurement::new(vec![4.0, 1.0, 2.0, 3.0], 5).median_s, 2.5);
        assert_eq!(Measurement::new(vec![2.0], 6).events_per_s, 3.0);
    }
}
