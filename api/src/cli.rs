//! The command line (clap). Exit codes: `check` 0 holds, 1 refuted, 2 unknown, 3 error;
//! `contract check` 0 accepted, 1 rejected candidate, 3 invalid; `wal` see [`crate::wal_cmd`];
//! 64 a usage error.

use crate::exit::{EXIT_ERROR, EXIT_USAGE};
use crate::render;
use crate::spill;
use clap::{Args, Parser, Subcommand, ValueEnum};
use fencewatch_assess::Contract;
use fencewatch_assess::history::History;
use fencewatch_ingest::archive::read::{Read, is_archive_input, read_archive};
use fencewatch_ingest::clock::{Clock, SharedClock, SystemClock};
use fencewatch_ingest::decode::json::DEFAULT_MAX_LINE_BYTES;
use fencewatch_ingest::simulate::{Attest, Faults, Workload, simulate};
use fencewatch_ingest::source::file::{Input, Progress, ReadOptions, read_into, total_size};
use std::ffi::OsString;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;

#[derive(Debug, Parser)]
#[command(
    name = "fencewatch",
    version,
    about = "Tells whether the fencing tokens protecting your data actually work"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Assess recorded events offline (exit 0 holds, 1 refuted, 2 unknown, 3 error).
    Check(CheckArgs),
    /// Work with contract files.
    #[command(subcommand)]
    Contract(ContractCommand),
    /// Generate a realistic lease/epoch workload with injectable faults, as NDJSON or produced
    /// to Kafka (one message per event, keyed by scope).
    Simulate(SimulateArgs),
    /// Run the service: durable HTTP ingest, the assurance API and Prometheus metrics
    /// (configuration: --config FILE, then FENCEWATCH_* variables, then flags; exit 64 when
    /// invalid).
    Serve(Box<ServeCommand>),
    /// Run the service on a live simulated workload with an example contract: zero setup.
    Demo(DemoArgs),
    /// Inspect or repair the write-ahead log of a data directory (see README, Durability).
    #[command(subcommand)]
    Wal(crate::wal_cmd::WalCommand),
    /// Post one attestation of a premise to a running service (token from
    /// FENCEWATCH_AUTH_TOKEN or FENCEWATCH_AUTH_TOKEN_FILE; exit 0 taken, 3 error).
    Attest(crate::attest::AttestArgs),
    /// Read-only SQL over the evidence archive: offline over a data directory, or against a
    /// running service (exit 0, or 3 when refused, invalid or ended by a limit).
    Query(crate::query_cmd::QueryArgs),
}

#[derive(Debug, Args)]
struct DemoArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: String,
    /// Folder for the contract, WAL and checkpoints [default: a new temporary folder].
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Events per second.
    #[arg(long, default_value_t = 500)]
    rate: u64,
    /// Seconds between two resumed old owners (stale commits).
    #[arg(long, default_value_t = 45)]
    stale_every: u64,
}

#[derive(Debug, Args)]
struct ServeCommand {
    #[command(flatten)]
    args: crate::serve::config::ServeArgs,
    /// NDJSON files (or `-` for stdin) to append to the write-ahead log at start, in batches.
    #[arg(long = "ingest-file", value_name = "FILE")]
    ingest_files: Vec<PathBuf>,
}

#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
enum Format {
    Text,
    Json,
}

#[derive(Debug, Args)]
struct CheckArgs {
    /// The contract (TOML).
    #[arg(long, env = "FENCEWATCH_CONTRACT")]
    contract: PathBuf,
    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    format: Format,
    /// Lines longer than this are malformed.
    #[arg(long, default_value_t = DEFAULT_MAX_LINE_BYTES)]
    max_line_bytes: usize,
    /// Decoding threads (default: all cores).
    #[arg(long)]
    threads: Option<usize>,
    /// Write attestations of what this conformance run established, per fenced route
    /// (`conditional_commit` holds or failed; README, "Premises"), as NDJSON to this file.
    #[arg(long, value_name = "FILE")]
    attestations_out: Option<PathBuf>,
    /// The `valid_for` of those attestations [default: the premise's max_age, else 24h].
    #[arg(long, value_name = "DURATION", requires = "attestations_out", value_parser = positive_duration)]
    attestation_valid_for: Option<fencewatch_assess::Duration>,
    /// Assess within about this much memory (bytes, or with a unit: 512MiB, 2GiB): a history
    /// larger than that is kept in temporary files by scope and assessed a part at a time,
    /// with the same report (README, "check within a memory budget").
    #[arg(long, value_name = "SIZE", value_parser = byte_size)]
    max_memory: Option<u64>,
    /// Where `--max-memory` keeps its temporary files [default: the system's temporary
    /// directory]; they are removed when the check ends.
    #[arg(long, value_name = "DIR", requires = "max_memory")]
    spill_dir: Option<PathBuf>,
    /// NDJSON (or JSON array) files, read as one stream in order; `-` is stdin. Parquet files
    /// of the archive's `events` schema (magic `PAR1`, or named `*.parquet`), and folders (an
    /// archive, a data directory, or a folder of `.parquet` files) are read as the archive.
    #[arg(required = true)]
    files: Vec<String>,
}

/// A size in bytes: digits, optionally followed by K, M, G or T (powers of 1024; `KiB`, `KB`
/// and the like mean the same).
fn byte_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let digits = t.bytes().take_while(u8::is_ascii_digit).count();
    let (n, unit) = t.split_at(digits);
    let n: u64 = n
        .parse()
        .map_err(|_| format!("`{s}` is not a size (e.g. 536870912, 512MiB, 2GiB)"))?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return Err(format!("`{s}`: unknown unit (use K, M, G or T)")),
    };
    n.checked_mul(1 << shift)
        .filter(|&b| b > 0)
        .ok_or_else(|| format!("`{s}` must be greater than zero and below 2^64 bytes"))
}

fn positive_duration(s: &str) -> Result<fencewatch_assess::Duration, String> {
    match fencewatch_assess::Duration::parse(s).map_err(|e| e.to_string())? {
        d if d.0 > 0 => Ok(d),
        _ => Err("must be greater than zero".into()),
    }
}

#[derive(Debug, Subcommand)]
enum ContractCommand {
    /// Validate and compile a contract (exit 0 accepted, 1 rejected candidate, 3 invalid).
    Check {
        /// The contract (TOML).
        file: PathBuf,
        /// Output format.
        #[arg(long, value_enum, default_value = "text")]
        format: Format,
    },
}

#[derive(Debug, Args)]
struct SimulateArgs {
    /// Commits to generate (heartbeats, grants and faults come on top).
    #[arg(long, default_value_t = 10_000)]
    events: u64,
    /// Distinct scopes.
    #[arg(long, default_value_t = 1_000)]
    scopes: u64,
    /// Random seed: the same seed gives the same workload.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Event time of the first event (RFC 3339), or `now`: with --kafka, each event is then
    /// produced when the wall clock reaches its time (a live workload).
    #[arg(long, default_value = "2025-11-29T12:00:00Z")]
    start: String,
    /// Commits per second of event time [default: 1000]. With --kafka, also the pace of
    /// production: N events (messages) per second of wall time; without --rate, --kafka
    /// produces as fast as the broker takes them.
    #[arg(long, value_name = "N")]
    rate: Option<u64>,
    /// Write the workload here instead of stdout.
    #[arg(long, short, conflicts_with_all = ["kafka", "otlp", "otlp_grpc"])]
    output: Option<PathBuf>,
    /// Send the workload as OTLP spans (`fencing.*` attributes, SPEC §8) over OTLP/HTTP
    /// protobuf to this URL (`http://HOST:PORT`, `/v1/traces` appended unless given), as an
    /// instrumented service would: a running `serve`, or an OpenTelemetry Collector. Ends
    /// with a summary on stderr; exits 3 when a request was not taken.
    #[arg(long, value_name = "URL", conflicts_with_all = ["kafka", "otlp_grpc"])]
    otlp: Option<String>,
    /// Send the workload as OTLP spans over OTLP/gRPC to HOST:PORT (serve's
    /// `otlp_grpc_listen`, or a Collector's 4317).
    #[arg(long, value_name = "HOST:PORT", conflicts_with = "kafka")]
    otlp_grpc: Option<String>,
    /// Spans per OTLP request (with --otlp or --otlp-grpc).
    #[arg(long, value_name = "N", default_value_t = 1000)]
    otlp_batch: usize,
    /// Seconds an OTLP request may take, retries of a saturated receiver included.
    #[arg(long, value_name = "SECS", default_value_t = 30)]
    otlp_timeout: u64,
    /// Produce the workload to Kafka at these bootstrap servers (`host:port[,…]`) instead of
    /// writing NDJSON: one message per event, keyed by its scope (events without a scope
    /// carry no key). Ends with a summary on stderr; exits 3 when events were not delivered.
    #[arg(long, value_name = "BROKERS", requires = "topic")]
    kafka: Option<String>,
    /// The topic to produce to (with --kafka).
    #[arg(long, value_name = "TOPIC", requires = "kafka")]
    topic: Option<String>,
    /// Seconds a message may take to be acknowledged by Kafka (and a broker to answer).
    #[arg(long, value_name = "SECS", default_value_t = 30, requires = "kafka")]
    kafka_timeout: u64,
    /// A librdkafka producer setting (`security.protocol=SASL_SSL`, `linger.ms=20`, …),
    /// repeatable, applied last.
    #[arg(long = "kafka-setting", value_name = "KEY=VALUE", requires = "kafka")]
    kafka_settings: Vec<String>,
    /// Write the matching contract here.
    #[arg(long)]
    contract_out: Option<PathBuf>,
    /// Write the ground truth (what was injected) here as JSON; default stderr.
    #[arg(long)]
    truth: Option<PathBuf>,
    /// Timestamps as RFC 3339 strings instead of integer nanoseconds.
    #[arg(long)]
    rfc3339: bool,
    /// Emit grant events for every epoch.
    #[arg(long)]
    grants: bool,
    /// Inject: an old owner resumes after a handover and commits with its superseded epoch.
    #[arg(long, default_value_t = 0)]
    paused_old_owner: u64,
    /// Inject: commits without an epoch.
    #[arg(long, default_value_t = 0)]
    missing_epoch: u64,
    /// Inject: one declared route never emits.
    #[arg(long)]
    silent_route: bool,
    /// Inject: commits through a route declared `fenced = false`.
    #[arg(long, default_value_t = 0)]
    unfenced_route: u64,
    /// Inject: scopes whose epoch counter wraps to 0.
    #[arg(long, default_value_t = 0)]
    epoch_wraparound: u64,
    /// Inject: events lost between emitter and fencewatch (seq gaps).
    #[arg(long, default_value_t = 0)]
    lost_telemetry: u64,
    /// Inject: old-owner commits within the clock skew of the handover (ambiguous order).
    #[arg(long, default_value_t = 0)]
    clock_skew: u64,
    /// Stale writes that the resource correctly rejected (positive evidence).
    #[arg(long, default_value_t = 0)]
    rejected: u64,
    /// Attest a premise of lease_epoch at the start (and require it in --contract-out), once
    /// per fenced route for a per-route premise; VALID_FOR defaults to 24h. Repeatable.
    #[arg(long, value_name = "PREMISE[:VALID_FOR]", value_parser = |s: &str| Attest::parse(s, false))]
    attest: Vec<Attest>,
    /// Attest that a premise failed (and require it). Repeatable.
    #[arg(long, value_name = "PREMISE", value_parser = |s: &str| Attest::parse(s, true))]
    attest_failed: Vec<Attest>,
}

/// Runs the command line on the system clock and returns the process exit code.
pub fn run<I: IntoIterator<Item = OsString>>(args: I) -> i32 {
    run_with(args, SystemClock::shared())
}

/// Runs the command line with `clock` as wall time (`simulate --start now`, `serve`, `demo`,
/// `wal repair`) and returns the process exit code.
pub fn run_with<I: IntoIterator<Item = OsString>>(args: I, clock: SharedClock) -> i32 {
    let args: Vec<OsString> = args.into_iter().collect();
    // A query's process for `serve` (`query::isolated`), not a command of its own.
    if args.get(1).is_some_and(|a| a == crate::query::WORKER_ARG) {
        return crate::query::worker();
    }
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { EXIT_USAGE } else { 0 };
            let _ = e.print();
            return code;
        }
    };
    match cli.command {
        Command::Check(args) => check(args),
        Command::Contract(ContractCommand::Check { file, format }) => contract_check(&file, format),
        Command::Demo(d) => crate::serve::run::demo(
            d.listen,
            d.data_dir,
            d.rate,
            std::time::Duration::from_secs(d.stale_every.max(1)),
            clock,
        ),
        Command::Serve(s) => {
            let ServeCommand { args, ingest_files } = *s;
            // glibc's thresholds for a service (large request bodies given back once freed,
            // arenas kept at their tops, appliers extending theirs ahead).
            let _ = crate::large_pages::return_large_blocks();
            crate::serve::run::run(args, ingest_files, clock)
        }
        Command::Wal(cmd) => crate::wal_cmd::run(cmd, &*clock),
        Command::Attest(args) => crate::attest::run(args, &*clock),
        Command::Query(args) => crate::query_cmd::run(args),
        Command::Simulate(args) => match run_simulate(args, &*clock) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("fencewatch simulate: {e:#}");
                EXIT_ERROR
            }
        },
    }
}

/// Why a contract file cannot be used.
#[derive(Debug, thiserror::Error)]
enum ContractFileError {
    /// It cannot be read.
    #[error("{path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// It is not a valid contract (one error a line).
    #[error("{0}")]
    Invalid(#[from] fencewatch_assess::contract::ContractError),
}

fn load_contract(path: &PathBuf) -> Result<Contract, ContractFileError> {
    let src = std::fs::read_to_string(path).map_err(|source| ContractFileError::Read {
        path: path.clone(),
        source,
    })?;
    Ok(Contract::parse(&path.display().to_string(), &src)?)
}

fn check(args: CheckArgs) -> i32 {
    // Its history is a few large arrays written once: huge pages spare most page faults
    // (where a host does not take them back).
    let _ = crate::large_pages::enable();
    let contract = match load_contract(&args.contract) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("fencewatch check: invalid contract\n{e}");
            return EXIT_ERROR;
        }
    };
    let inputs: Vec<Input> = args
        .files
        .iter()
        .map(|f| {
            if f == "-" {
                Input::Stdin
            } else {
                Input::Path(f.into())
            }
        })
        .collect();
    let mut opts = ReadOptions {
        max_line_bytes: args.max_line_bytes,
        ..ReadOptions::default()
    };
    if let Some(t) = args.threads {
        opts.threads = t.max(1);
    }
    // Mapping spares the reader's copy but makes each decoder fetch the chunk from memory:
    // worth it only when the decoders fill every core (2.6M events on 2 cores, 6 rounds:
    // 2 threads 0.355 → 0.33 s mapped, 1 thread 0.53 → 0.57 s).
    opts.map_files =
        opts.threads >= std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let total = total_size(&inputs);
    let show_progress = args.format == Format::Text && std::io::stderr().is_terminal();
    if args.max_memory.is_some()
        && let Some(p) = inputs.iter().find_map(|i| match i {
            Input::Path(p) if is_archive_input(p) => Some(p),
            _ => None,
        })
    {
        eprintln!(
            "fencewatch check: --max-memory reads NDJSON only, not the evidence archive ({})",
            p.display()
        );
        return EXIT_USAGE;
    }
    let spill_budget = args.max_memory.filter(|&b| spill::needed(&inputs, b));
    let mut bar = match spill_budget {
        Some(_) => render::ProgressBar::labelled(total, "reading (1/2)"),
        None => render::ProgressBar::new(total),
    };
    let mut progress = |n: u64| bar.update(n);
    let timings = std::env::var_os("FENCEWATCH_TIMINGS").is_some();
    let started = std::time::Instant::now();
    // The evidence of a conformance run: the digest of its input files.
    let evidence = match &args.attestations_out {
        None => None,
        Some(_) if args.files.iter().any(|f| f == "-") => {
            eprintln!(
                "fencewatch check: --attestations-out needs the run's files (their sha256 is the evidence), not stdin"
            );
            return EXIT_USAGE;
        }
        Some(_) => {
            let files: Vec<PathBuf> = args.files.iter().map(PathBuf::from).collect();
            match crate::conformance::digest(&files) {
                Ok(d) => Some(d),
                Err(e) => {
                    eprintln!("fencewatch check: {e}");
                    return EXIT_ERROR;
                }
            }
        }
    };
    let kept_contract = evidence.as_ref().map(|_| contract.clone());
    let progress = if show_progress {
        Some(&mut progress as &mut dyn FnMut(u64))
    } else {
        None
    };
    let assessed = match spill_budget {
        None => {
            // What is freed is kept for what comes next, and the history's arrays are made
            // resident ahead of their copies: fewer page faults (`large_pages`).
            let _ = crate::large_pages::keep_freed_blocks();
            let mut history = History::new(contract);
            history.populate_with(crate::large_pages::populate);
            if evidence.is_some() {
                history.note_conformance();
            }
            // NDJSON, and Parquet of the evidence archive (SPEC §9), in the order given.
            let read = read_inputs(&mut history, &inputs, opts, progress);
            bar.finish();
            read.map(|r| {
                note_archive_read(&args.files, &r);
                let read_done = std::time::Instant::now();
                (history.finish(), read_done)
            })
        }
        Some(budget) => {
            let spilled = spill::check(
                contract,
                &inputs,
                opts,
                budget,
                args.spill_dir.as_deref(),
                evidence.is_some(),
                progress,
                show_progress,
            );
            bar.finish();
            spilled
        }
    };
    let (report, read_done) = match assessed {
        Ok(done) => done,
        Err(e) => {
            eprintln!("fencewatch check: {e}");
            return EXIT_ERROR;
        }
    };
    if timings {
        eprintln!(
            "timings: read+decode+push {:?}, finish {:?}",
            read_done - started,
            read_done.elapsed()
        );
    }
    let mut out = std::io::stdout().lock();
    let written = match args.format {
        Format::Json => serde_json::to_writer(&mut out, &report)
            .map_err(std::io::Error::from)
            .and_then(|()| writeln!(out)),
        Format::Text => render::text_report(&mut out, &report),
    };
    if let Err(e) = written.and_then(|()| out.flush())
        && e.kind() != std::io::ErrorKind::BrokenPipe
    {
        eprintln!("fencewatch check: writing the report: {e}");
        return EXIT_ERROR;
    }
    if let (Some(path), Some(evidence), Some(contract)) =
        (&args.attestations_out, &evidence, &kept_contract)
    {
        let lines = crate::conformance::attestations(
            contract,
            &report,
            evidence,
            args.attestation_valid_for,
        );
        if let Err(e) = crate::conformance::write(path, &lines) {
            eprintln!("fencewatch check: {}: {e}", path.display());
            return EXIT_ERROR;
        }
        eprintln!(
            "fencewatch check: {} attestation(s) written to {}",
            lines.len(),
            path.display()
        );
    }
    report.verdict.exit_code()
}

/// Reads `inputs` into `history` in the order given: runs of NDJSON inputs by
/// [`read_into`], archive inputs ([`is_archive_input`]) by [`read_archive`]. Returns what the
/// archive inputs gave.
fn read_inputs(
    history: &mut History,
    inputs: &[Input],
    opts: ReadOptions,
    mut progress: Option<Progress<'_>>,
) -> Result<Read, String> {
    let archive = |i: &Input| matches!(i, Input::Path(p) if is_archive_input(p));
    let mut total = Read::default();
    let mut rest = inputs;
    while !rest.is_empty() {
        let n = rest.iter().take_while(|i| archive(i)).count();
        if n > 0 {
            let paths: Vec<PathBuf> = rest[..n]
                .iter()
                .filter_map(|i| match i {
                    Input::Path(p) => Some(p.clone()),
                    Input::Stdin => None,
                })
                .collect();
            let r = read_archive(history, &paths).map_err(|e| e.to_string())?;
            total.files += r.files;
            total.events += r.events;
            total.malformed += r.malformed;
            total.unattributed += r.unattributed;
            rest = &rest[n..];
        } else {
            let n = rest.iter().take_while(|i| !archive(i)).count();
            read_into(
                history,
                &rest[..n],
                opts,
                progress.as_mut().map(|p| &mut **p as Progress<'_>),
            )
            .map_err(|e| e.to_string())?;
            rest = &rest[n..];
        }
    }
    Ok(total)
}

/// Says on stderr what the archive inputs could not give back.
fn note_archive_read(files: &[String], r: &Read) {
    if r.unattributed > 0 {
        eprintln!(
            "fencewatch check: warning: {}: {} event(s) were archived unattributed (their `property` \
             named none of serve's contract, and the archive keeps no name for them): they stay \
             unattributed under this contract",
            files.join(", "),
            r.unattributed
        );
    }
}

fn contract_check(file: &PathBuf, format: Format) -> i32 {
    let contract = match load_contract(file) {
        Ok(c) => c,
        Err(e) => {
            if format == Format::Json {
                println!(
                    "{}",
                    serde_json::json!({"status": "invalid", "errors": e.to_string().lines().collect::<Vec<_>>()})
                );
            } else {
                eprintln!("{e}");
                eprintln!("contract is invalid");
            }
            return EXIT_ERROR;
        }
    };
    let compiled = contract.compile();
    match format {
        Format::Json => println!(
            "{}",
            serde_json::to_string(&compiled).expect("serialisable")
        ),
        Format::Text => {
            let mut out = std::io::stdout().lock();
            let _ = render::text_contract(&mut out, &contract, &compiled);
        }
    }
    match compiled.status {
        fencewatch_assess::contract::Status::Accepted => 0,
        fencewatch_assess::contract::Status::Rejected => 1,
    }
}

fn run_simulate(a: SimulateArgs, clock: &dyn Clock) -> anyhow::Result<()> {
    let live = a.start == "now";
    let start = if live {
        clock.now()
    } else {
        fencewatch_assess::EventTime::parse_rfc3339(&a.start)
            .map_err(|e| anyhow::anyhow!("--start: {e}"))?
    };
    let workload = Workload {
        events: a.events,
        scopes: a.scopes.max(1),
        seed: a.seed,
        start,
        rate: a.rate.unwrap_or(1_000).max(1),
        rfc3339: a.rfc3339,
        grants: a.grants,
        faults: Faults {
            paused_old_owner: a.paused_old_owner,
            missing_epoch: a.missing_epoch,
            silent_route: a.silent_route,
            unfenced_route: a.unfenced_route,
            epoch_wraparound: a.epoch_wraparound,
            lost_telemetry: a.lost_telemetry,
            clock_skew: a.clock_skew,
            rejected: a.rejected,
        },
        // The one workload of this process: its attestations live as long as it.
        attest: Vec::leak(a.attest.iter().chain(&a.attest_failed).copied().collect()),
    };
    let mut summary = None;
    let otlp = match (&a.otlp, &a.otlp_grpc) {
        (Some(url), _) => Some(crate::simulate_otlp::Endpoint::http(url)),
        (None, Some(addr)) => Some(crate::simulate_otlp::Endpoint::grpc(addr)),
        (None, None) => None,
    };
    let truth = match (&a.kafka, &a.output) {
        _ if otlp.is_some() => {
            let endpoint = otlp.expect("matched").map_err(|e| anyhow::anyhow!(e))?;
            let target = crate::simulate_otlp::Target {
                endpoint,
                batch: a.otlp_batch.max(1),
                timeout: std::time::Duration::from_secs(a.otlp_timeout.max(1)),
                live,
            };
            let (truth, sent) =
                crate::simulate_otlp::send(&workload, &target).map_err(|e| anyhow::anyhow!(e))?;
            summary = Some(sent.summary(&target));
            truth
        }
        (Some(brokers), _) => {
            let settings = a
                .kafka_settings
                .iter()
                .map(|kv| match kv.split_once('=') {
                    Some((k, v)) => Ok((k.trim().to_string(), v.trim().to_string())),
                    None => Err(anyhow::anyhow!(
                        "--kafka-setting {kv:?}: expected KEY=VALUE"
                    )),
                })
                .collect::<anyhow::Result<Vec<_>>>()?;
            let target = fencewatch_ingest::source::kafka::produce::Target {
                brokers: brokers.clone(),
                topic: a.topic.clone().expect("clap requires --topic with --kafka"),
                rate: a.rate,
                live,
                timeout: std::time::Duration::from_secs(a.kafka_timeout.max(1)),
                settings,
            };
            let (truth, p) =
                fencewatch_ingest::source::kafka::produce::produce(&workload, &target)?;
            summary = Some(format!(
                "fencewatch simulate: produced {} events to {} in {:.2} s ({:.0} events/s)",
                p.events,
                target.topic,
                p.elapsed.as_secs_f64(),
                p.rate()
            ));
            truth
        }
        (None, Some(path)) => {
            let f = std::fs::File::create(path)
                .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
            let mut w = std::io::BufWriter::with_capacity(1 << 20, f);
            let t = simulate(&workload, &mut w)?;
            w.flush()?;
            t
        }
        (None, None) => {
            let mut w = std::io::BufWriter::with_capacity(1 << 20, std::io::stdout().lock());
            let t = simulate(&workload, &mut w)?;
            w.flush()?;
            t
        }
    };
    if let Some(path) = &a.contract_out {
        std::fs::write(path, workload.contract_toml())
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    }
    let truth_json = serde_json::to_string_pretty(&truth)?;
    match &a.truth {
        Some(path) => std::fs::write(path, truth_json + "\n")
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?,
        None => eprintln!("{truth_json}"),
    }
    if let Some(line) = summary {
        eprintln!("{line}");
    }
    Ok(())
}
