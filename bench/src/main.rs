//! `fencewatch-bench`: measures `fencewatch check` on one NDJSON file against its two peers of
//! SPEC §7 — bare `serde_json` parsing (one thread) and the DataFusion stale-commit SQL — and
//! reports wall times, throughput, ratios and whether the stale counts agree.
//!
//! Every measurement is timed as a whole process (spawn to exit): `check` runs the real
//! binary, and the two peers run as subcommands of this binary (`serde FILE`,
//! `datafusion FILE --skew-ns N`), so start-up, reading and tear-down count alike for all
//! three.

mod df;
mod report;
mod serde_parse;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

/// The clock skew used when neither `--skew-ns` nor the contract gives one (50 ms).
const DEFAULT_SKEW_NS: i64 = 50_000_000;
const DEFAULT_FENCEWATCH: &str = "target/release/fencewatch";

#[derive(Debug, Parser)]
#[command(
    name = "fencewatch-bench",
    about = "Benchmark `fencewatch check` against serde_json parsing and the DataFusion SQL of SPEC §7",
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true
)]
struct Cli {
    #[command(subcommand)]
    mode: Option<Mode>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Debug, clap::Args)]
struct RunArgs {
    /// The NDJSON file, as written by `fencewatch simulate` (`ts` integer nanoseconds, or RFC
    /// 3339 text with `--rfc3339`: the first line decides which for every peer).
    #[arg(required = true)]
    file: Option<PathBuf>,
    /// The contract passed to `fencewatch check`; its first property's clock_skew is the skew.
    #[arg(long, required = true)]
    contract: Option<PathBuf>,
    /// The fencewatch binary.
    #[arg(long, default_value = DEFAULT_FENCEWATCH)]
    fencewatch: PathBuf,
    /// Runs of each measurement; the median is reported.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    runs: u32,
    /// Clock skew in nanoseconds for the SQL (default: the contract's clock_skew).
    #[arg(long)]
    skew_ns: Option<i64>,
    /// A `fencewatch simulate --truth` file: its injected stale_commit count is shown too.
    #[arg(long)]
    truth: Option<PathBuf>,
    /// Print the result as JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// The Python that runs the DuckDB peer (`bench/duckdb_peer.py`, needs `pip install
    /// duckdb`); `none` leaves DuckDB out.
    #[arg(long, default_value = "python3")]
    duckdb_python: String,
}

/// The DuckDB peer's script.
const DUCKDB_PEER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/duckdb_peer.py");

#[derive(Debug, Subcommand)]
enum Mode {
    /// One serde_json pass over FILE (one thread); prints {"events","errors","seconds"}.
    Serde {
        /// The NDJSON file.
        file: PathBuf,
        /// `ts` is RFC 3339 text (parsed as a string), not integer nanoseconds.
        #[arg(long)]
        text_ts: bool,
    },
    /// One run of the SPEC §7 SQL over FILE; prints {"count","seconds"}.
    Datafusion {
        /// The NDJSON file.
        file: PathBuf,
        /// Clock skew in nanoseconds (the SQL's window ends skew+1 before each row).
        #[arg(long, default_value_t = DEFAULT_SKEW_NS)]
        skew_ns: i64,
        /// `ts` is RFC 3339 text, converted to nanoseconds in the table.
        #[arg(long)]
        text_ts: bool,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.mode {
        Some(Mode::Serde { file, text_ts }) => serde_mode(&file, text_ts),
        Some(Mode::Datafusion {
            file,
            skew_ns,
            text_ts,
        }) => datafusion_mode(&file, skew_ns, text_ts),
        None => run(&cli.run),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fencewatch-bench: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn serde_mode(file: &Path, text_ts: bool) -> Result<()> {
    let start = Instant::now();
    let count = serde_parse::parse_file(file, text_ts)?;
    let seconds = start.elapsed().as_secs_f64();
    let out =
        serde_json::json!({"events": count.events, "errors": count.errors, "seconds": seconds});
    println!("{out}");
    Ok(())
}

fn datafusion_mode(file: &Path, skew_ns: i64, text_ts: bool) -> Result<()> {
    let start = Instant::now();
    let count = df::count_stale(file, skew_ns, text_ts)?;
    let seconds = start.elapsed().as_secs_f64();
    println!(
        "{}",
        serde_json::json!({"count": count, "seconds": seconds})
    );
    Ok(())
}

/// The stdout of a `serde` subprocess.
#[derive(Debug, Deserialize)]
struct SerdeOut {
    events: u64,
    errors: u64,
}

/// The stdout of an SQL peer subprocess (`datafusion`, `duckdb_peer.py`).
#[derive(Debug, Deserialize)]
struct SqlOut {
    count: u64,
}

/// The runs of one SQL peer (a subprocess printing `{"count","seconds"}`).
#[derive(Debug, Default)]
struct SqlPeer {
    secs: Vec<f64>,
    count: Option<u64>,
}

impl SqlPeer {
    /// Times run `i` of `cmd`, the peer `name` (`hint` follows a failure's message), noting a
    /// count that differs from an earlier run's.
    fn run(
        &mut self,
        cmd: &mut Command,
        name: &str,
        hint: &str,
        i: u32,
        notes: &mut Vec<String>,
    ) -> Result<()> {
        let (s, code, out) = timed(cmd, name)?;
        if code != 0 {
            bail!("the {name} run exited with {code}{hint}");
        }
        let o: SqlOut =
            serde_json::from_slice(&out).with_context(|| format!("{name} run output"))?;
        if self.count.is_some_and(|p| p != o.count) {
            notes.push(format!("{name} counts differ between runs (run {})", i + 1));
        }
        self.count = Some(o.count);
        self.secs.push(s);
        Ok(())
    }
}

/// What one `fencewatch check --format json` run reported.
#[derive(Debug, Clone, PartialEq, Eq)]
struct CheckOut {
    verdict: String,
    events: u64,
    stale_commit: u64,
    exit_code: i32,
}

/// Runs `cmd` to completion with stdout captured; returns wall seconds, exit code and stdout.
fn timed(cmd: &mut Command, what: &str) -> Result<(f64, i32, Vec<u8>)> {
    let start = Instant::now();
    let out = cmd
        .stderr(std::process::Stdio::inherit())
        .output()
        .with_context(|| format!("starting {what}"))?;
    let seconds = start.elapsed().as_secs_f64();
    let code = out.status.code().unwrap_or(-1);
    Ok((seconds, code, out.stdout))
}

/// One timed `fencewatch check --format json` run with `extra` arguments.
fn run_check(
    fencewatch: &Path,
    contract: &Path,
    file: &Path,
    extra: &[&str],
) -> Result<(f64, CheckOut)> {
    let what = format!("fencewatch check {}", extra.join(" "));
    let (s, code, out) = timed(
        Command::new(fencewatch)
            .arg("check")
            .args(extra)
            .arg("--contract")
            .arg(contract)
            .args(["--format", "json"])
            .arg(file),
        &what,
    )?;
    if !(0..=2).contains(&code) {
        bail!("{what} exited with {code} (3 = error, 64 = usage)");
    }
    Ok((s, parse_check(&out, code)?))
}

fn parse_check(stdout: &[u8], exit_code: i32) -> Result<CheckOut> {
    let v: serde_json::Value =
        serde_json::from_slice(stdout).context("fencewatch check printed no valid JSON")?;
    let properties = v["properties"]
        .as_array()
        .context("fencewatch check JSON has no `properties` array")?;
    let stale_commit = properties
        .iter()
        .filter_map(|p| p["counterexamples"].as_array())
        .flatten()
        .filter(|c| c["kind"] == "stale_commit")
        .count();
    Ok(CheckOut {
        verdict: v["verdict"].as_str().unwrap_or("?").to_owned(),
        events: v["events"].as_u64().unwrap_or(0),
        stale_commit: stale_commit as u64,
        exit_code,
    })
}

/// The fencewatch binary: as given, or, for the default relative path that does not exist from
/// here, the one beside this binary (both live in `target/release`).
fn resolve_fencewatch(given: &Path) -> PathBuf {
    if given.exists() || given != Path::new(DEFAULT_FENCEWATCH) {
        return given.to_path_buf();
    }
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|d| d.join("fencewatch")))
        .filter(|p| p.exists())
        .unwrap_or_else(|| given.to_path_buf())
}

/// The skew for the SQL: `--skew-ns`, else the contract's first property's clock_skew.
fn skew_from(contract: &Path, given: Option<i64>) -> Result<(i64, String)> {
    if let Some(ns) = given {
        return Ok((ns, "--skew-ns".to_owned()));
    }
    let src = std::fs::read_to_string(contract)
        .with_context(|| format!("reading {}", contract.display()))?;
    let parsed = fencewatch_assess::Contract::parse(&contract.display().to_string(), &src)
        .map_err(|e| anyhow::anyhow!("invalid contract:\n{e}"))?;
    let Some(first) = parsed.properties.first() else {
        return Ok((
            DEFAULT_SKEW_NS,
            "default (contract has no property)".to_owned(),
        ));
    };
    let skew = first.clock_skew.0;
    if parsed.properties.iter().any(|p| p.clock_skew.0 != skew) {
        eprintln!(
            "fencewatch-bench: warning: properties differ in clock_skew; the SQL uses the first ({})",
            first.name
        );
    }
    Ok((skew, format!("contract property {}", first.name)))
}

fn truth_stale(path: &Path) -> Result<u64> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let v: serde_json::Value = serde_json::from_str(&text).context("truth file is not JSON")?;
    Ok(v["counterexamples"]["stale_commit"].as_u64().unwrap_or(0))
}

/// How many events [`ts_form`] reads to tell the file's `ts` form.
const TS_SAMPLE: usize = 1000;

/// Whether `ts` is text (RFC 3339, `simulate --rfc3339`) rather than integer nanoseconds, from
/// the first [`TS_SAMPLE`] events of `lines` (lines that are not a JSON object with a string
/// or number `ts`, such as blank or malformed ones, are skipped; none at all reads as
/// integers, left to the runs to judge): every peer is then told to read it so (the SQL peers
/// convert it to nanoseconds in their table, the serde baseline parses it as a string). Both
/// forms among them is an error: each peer reads one form, so their counts would not be
/// comparable.
fn ts_form(lines: impl IntoIterator<Item = std::io::Result<Vec<u8>>>) -> Result<bool> {
    let (mut text, mut nanos) = (None, None);
    let mut seen = 0;
    for (n, line) in (1..).zip(lines) {
        let line = line.context("reading the file")?;
        let Ok(serde_json::Value::Object(event)) = serde_json::from_slice(&line) else {
            continue;
        };
        match event.get("ts") {
            Some(serde_json::Value::String(_)) => text = text.or(Some(n)),
            Some(serde_json::Value::Number(_)) => nanos = nanos.or(Some(n)),
            _ => continue,
        }
        if let (Some(t), Some(i)) = (text, nanos) {
            bail!(
                "`ts` is RFC 3339 text on line {t} and not on line {i}: the peers read one form \
                 of time a file (rewrite the file with one form)"
            );
        }
        seen += 1;
        if seen == TS_SAMPLE {
            break;
        }
    }
    Ok(text.is_some())
}

fn run(args: &RunArgs) -> Result<()> {
    let (Some(file), Some(contract)) = (&args.file, &args.contract) else {
        bail!("FILE and --contract are required");
    };
    let fencewatch = resolve_fencewatch(&args.fencewatch);
    if !fencewatch.exists() {
        bail!(
            "fencewatch binary {} not found (build it with `cargo build --release -p fencewatch-api` or pass --fencewatch)",
            fencewatch.display()
        );
    }
    let (skew_ns, skew_source) = skew_from(contract, args.skew_ns)?;
    let truth = args.truth.as_deref().map(truth_stale).transpose()?;
    let me = std::env::current_exe().context("locating this binary")?;
    let bytes = std::fs::metadata(file)
        .with_context(|| format!("opening {}", file.display()))?
        .len();

    // Warm the page cache so the first timed run does not pay for the disk, the form of its
    // times read on the way (lines of at most 1 MiB: a longer one ends the sample).
    let mut reader = std::io::BufReader::new(
        std::fs::File::open(file).with_context(|| format!("opening {}", file.display()))?,
    );
    let text_ts = {
        let head = std::io::BufRead::split(std::io::Read::take(&mut reader, 64 << 20), b'\n');
        ts_form(head.take_while(|l| l.as_ref().map_or(true, |l| l.len() < 1 << 20)))?
    };
    std::io::copy(&mut reader, &mut std::io::sink()).context("reading the file")?;

    let mut serde_s = Vec::new();
    let mut check_s = Vec::new();
    let mut check1_s = Vec::new();
    let mut df = SqlPeer::default();
    let mut serde_out: Option<(u64, u64)> = None;
    let mut check_out: Option<CheckOut> = None;
    let mut duck = SqlPeer::default();
    let use_duckdb = args.duckdb_python != "none";
    let mut notes = Vec::new();
    if text_ts {
        notes.push(format!(
            "ts is RFC 3339 text: the SQL peers convert it to nanoseconds in their table \
             (DataFusion: {}; DuckDB: TEXT_TS_NS of bench/duckdb_peer.py, its cast less the \
             UTC offset, which DuckDB's cast drops), serde parses it as a string",
            df::TEXT_TS_VIEW
        ));
    }

    // Interleaved, so that drift of the machine hits all three alike.
    for i in 0..args.runs {
        if !args.json {
            eprintln!(
                "run {}/{}: serde, check, check --threads 1, datafusion, duckdb",
                i + 1,
                args.runs
            );
        }
        let mut serde = Command::new(&me);
        serde
            .arg("serde")
            .arg(file)
            .args(text_ts.then_some("--text-ts"));
        let (s, code, out) = timed(&mut serde, "serde")?;
        if code != 0 {
            bail!("serde run exited with {code}");
        }
        let o: SerdeOut = serde_json::from_slice(&out).context("serde run output")?;
        if serde_out.is_some_and(|p| p != (o.events, o.errors)) {
            notes.push(format!("serde counts differ between runs (run {})", i + 1));
        }
        serde_out = Some((o.events, o.errors));
        serde_s.push(s);

        // All cores, then one thread: the result must not depend on the thread count.
        let (s, c) = run_check(&fencewatch, contract, file, &[])?;
        if check_out.as_ref().is_some_and(|p| *p != c) {
            notes.push(format!("check results differ between runs (run {})", i + 1));
        }
        check_s.push(s);
        let (s, c1) = run_check(&fencewatch, contract, file, &["--threads", "1"])?;
        if c1 != c {
            notes.push(format!(
                "check --threads 1 differs from check (run {})",
                i + 1
            ));
        }
        check1_s.push(s);
        check_out = Some(c);

        df.run(
            Command::new(&me)
                .arg("datafusion")
                .arg(file)
                .arg("--skew-ns")
                .arg(skew_ns.to_string())
                .args(text_ts.then_some("--text-ts")),
            "datafusion",
            "",
            i,
            &mut notes,
        )?;
        if use_duckdb {
            duck.run(
                Command::new(&args.duckdb_python)
                    .arg(DUCKDB_PEER)
                    .arg(file)
                    .arg(df::sql(skew_ns)?)
                    .args(text_ts.then_some("text-ts")),
                "duckdb",
                " (is the `duckdb` Python package installed? `--duckdb-python none` leaves it out)",
                i,
                &mut notes,
            )?;
        }
    }

    let (events, parse_errors) = serde_out.context("no run")?;
    let check_out = check_out.context("no run")?;
    let df_count = df.count.context("no run")?;
    if parse_errors > 0 {
        notes.push(format!(
            "{parse_errors} lines did not parse into the borrowed struct (escaped strings or non-integer ts?)"
        ));
    }
    let r = report::Report {
        file: file.display().to_string(),
        bytes,
        events,
        parse_errors,
        runs: args.runs,
        skew_ns,
        skew_source,
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        serde: report::Measurement::new(serde_s, events),
        check: report::Measurement::new(check_s, events),
        check_one_thread: report::Measurement::new(check1_s, events),
        datafusion: report::Measurement::new(df.secs, events),
        duckdb: duck
            .count
            .map(|c| (report::Measurement::new(duck.secs, events), c)),
        check_verdict: check_out.verdict,
        check_exit_code: check_out.exit_code,
        check_events: check_out.events,
        check_stale_commit: check_out.stale_commit,
        datafusion_count: df_count,
        truth_stale_commit: truth,
        notes,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&r.to_json())?);
    } else {
        print!("{}", r.table());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_stale_commits_over_all_properties() {
        let out = br#"{"verdict":"refuted","events":7,"properties":[
            {"counterexamples":[{"kind":"stale_commit"},{"kind":"epoch_reuse"}]},
            {"counterexamples":[{"kind":"stale_commit"}]},
            {"counterexamples":[]}]}"#;
        let c = parse_check(out, 1).unwrap();
        assert_eq!(c.stale_commit, 2);
        assert_eq!(c.events, 7);
        assert_eq!(c.verdict, "refuted");
    }

    fn form_of(file: &str) -> Result<bool> {
        ts_form(std::io::BufRead::split(file.as_bytes(), b'\n'))
    }

    #[test]
    fn the_first_events_tell_text_times_from_nanoseconds() {
        let text = r#"{"kind":"commit","ts":"2025-11-29T12:00:00Z","scope":"s","epoch":1}"#;
        let nanos = r#"{"kind":"commit","ts":1764417600000000000,"scope":"s","epoch":1}"#;
        assert!(form_of(text).unwrap());
        assert!(!form_of(nanos).unwrap());
        // Blank, malformed and time-less lines first are skipped.
        let skipped = format!("\n{{\"kind\":\n[1, 2]\n{{\"ts\":null}}\n{text}\n{nanos}x\n");
        assert!(form_of(&skipped).unwrap());
        // No event at all: integers, left to the runs.
        assert!(!form_of("[1, 2]\n").unwrap());
        assert!(!form_of("").unwrap());
        // Both forms: refused, naming a line of each.
        let mixed = format!("{nanos}\n\n{nanos}\n{text}\n");
        let err = form_of(&mixed).unwrap_err().to_string();
        assert!(err.contains("line 4") && err.contains("line 1"), "{err}");
        // Only the first TS_SAMPLE events are read.
        let late = format!("{}{text}\n", format!("{nanos}\n").repeat(TS_SAMPLE));
        assert!(!form_of(&late).unwrap());
        let within = format!("{}{text}\n", format!("{nanos}\n").repeat(TS_SAMPLE - 1));
        assert!(form_of(&within).is_err());
    }

    /// The DuckDB peer counts RFC 3339 times as their nanoseconds: offsets applied (which
    /// DuckDB's own cast drops), lower case taken, nine fraction digits kept.
    #[test]
    fn the_duckdb_peer_reads_rfc3339_times_as_nanoseconds() {
        let has_duckdb = Command::new("python3")
            .args(["-c", "import duckdb"])
            .status()
            .is_ok_and(|s| s.success());
        if !has_duckdb {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "the Python duckdb package is needed (pip install duckdb)"
            );
            eprintln!("skipped: the Python duckdb package is not installed");
            return;
        }
        let files = [
            (df::fixture::write("duck-text", df::fixture::TEXT), true),
            (df::fixture::write("duck-nanos", df::fixture::NANOS), false),
        ];
        for (path, text) in &files {
            for (skew, want) in df::fixture::STALE {
                let out = Command::new("python3")
                    .arg(DUCKDB_PEER)
                    .arg(path)
                    .arg(df::sql(skew).unwrap())
                    .args(text.then_some("text-ts"))
                    .output()
                    .unwrap();
                assert!(
                    out.status.success(),
                    "{}",
                    String::from_utf8_lossy(&out.stderr)
                );
                let o: SqlOut = serde_json::from_slice(&out.stdout).unwrap();
                assert_eq!(o.count, want, "{} skew {skew}", path.display());
            }
            std::fs::remove_file(path).unwrap();
        }
    }

    #[test]
    fn cli_parses_both_shapes() {
        let c = Cli::try_parse_from(["b", "f.ndjson", "--contract", "c.toml"]).unwrap();
        assert!(c.mode.is_none());
        assert_eq!(c.run.runs, 3);
        let c = Cli::try_parse_from(["b", "datafusion", "f.ndjson", "--skew-ns", "5"]).unwrap();
        assert!(matches!(
            c.mode,
            Some(Mode::Datafusion {
                skew_ns: 5,
                text_ts: false,
                ..
            })
        ));
        let c = Cli::try_parse_from(["b", "datafusion", "f.ndjson", "--text-ts"]).unwrap();
        assert!(matches!(
            c.mode,
            Some(Mode::Datafusion { text_ts: true, .. })
        ));
        let c = Cli::try_parse_from(["b", "serde", "f.ndjson", "--text-ts"]).unwrap();
        assert!(matches!(c.mode, Some(Mode::Serde { text_ts: true, .. })));
        assert!(Cli::try_parse_from(["b", "f.ndjson"]).is_err());
    }
}
