//! `fencewatch wal inspect|repair`: the operator's view of, and way out of, a damaged
//! write-ahead log (README, Durability). `serve` refuses to start on a damaged log and changes
//! nothing; these commands say what is wrong and, only when asked with `--cut`, repair it
//! after copying every file they change into `<partition>/quarantine/<time>/`.
//!
//! They work on the HTTP/OTLP/file partition, `<data_dir>/partitions/0` (its `wal/` and
//! `checkpoints/`). Kafka partitions have no local log (Kafka is their log): `inspect` lists
//! their checkpoints (`<data_dir>/kafka/<topic>/<partition>`), and one with no valid
//! checkpoint is rebuilt from Kafka once its folder is moved away.
//!
//! Exit codes: `inspect` 0 healthy, 1 damaged (`serve` refuses to start), 2 only a torn tail
//! (`serve` cuts it on start); `repair` 0 nothing to do or repaired, 1 a repair is needed (a
//! dry run: nothing changed); both 3 on an error (unreadable files, the log in use, no repair
//! possible), 64 a usage error. The policy is in `fencewatch_ingest::wal::repair`.

use crate::exit::EXIT_ERROR;
use clap::{Args, Subcommand, ValueEnum};
use fencewatch_assess::EventTime;
use fencewatch_ingest::checkpoint::{self, CheckpointInfo};
use fencewatch_ingest::clock::Clock;
use fencewatch_ingest::partition::local::QUARANTINE;
use fencewatch_ingest::partition::state::read_state;
use fencewatch_ingest::source::wal::partition_dir;
use fencewatch_ingest::wal::inspect::{DamageKind, Inspection, inspect};
use fencewatch_ingest::wal::{self, repair};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

/// `fencewatch wal …`.
#[derive(Debug, Subcommand)]
pub enum WalCommand {
    /// Show the log's segments, records, first damage and checkpoints, changing nothing
    /// (exit 0 healthy, 1 damaged: serve refuses to start, 2 only a torn tail that serve cuts
    /// on start, 3 error).
    Inspect(Common),
    /// Say what a repair of a damaged log changes and drops; with --cut, do it, after copying
    /// every file it changes into <data_dir>/partitions/0/quarantine/<time>/ (exit 0 nothing to
    /// do or repaired, 1 a repair is needed and --cut was not given, 3 error).
    Repair(RepairArgs),
}

/// Options of every `wal` command.
#[derive(Debug, Args)]
pub struct Common {
    /// The service's data directory.
    #[arg(long, env = "FENCEWATCH_DATA_DIR", value_name = "DIR")]
    data_dir: PathBuf,
    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    format: Format,
}

/// Options of `wal repair`.
#[derive(Debug, Args)]
pub struct RepairArgs {
    #[command(flatten)]
    common: Common,
    /// Do it: quarantine a copy of every file the repair changes, then end the log at its
    /// first damage (or restart it at the newest checkpoint, when that covers past it).
    /// Without it, nothing is changed.
    #[arg(long)]
    cut: bool,
}

#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
enum Format {
    Text,
    Json,
}

/// Runs a `wal` command at wall time `clock` (which names a repair's quarantine folder);
/// returns the exit code.
pub fn run(cmd: WalCommand, clock: &dyn Clock) -> i32 {
    let (name, r) = match cmd {
        WalCommand::Inspect(c) => ("inspect", run_inspect(&c)),
        WalCommand::Repair(r) => ("repair", run_repair(&r, clock.now())),
    };
    r.unwrap_or_else(|e| {
        eprintln!("fencewatch wal {name}: {e}");
        EXIT_ERROR
    })
}

/// The checkpoints of the partition in `dir`, newest first.
/// Why a `wal` command could not do its work (exit 3).
#[derive(Debug, thiserror::Error)]
enum Error {
    /// The log could not be read or changed.
    #[error("{0}")]
    Wal(#[from] wal::Error),
    /// The checkpoints could not be read.
    #[error("{0}")]
    Checkpoint(#[from] checkpoint::Error),
    /// No partition in the data directory.
    #[error("{0}: no partition here")]
    NoPartition(PathBuf),
    /// A service holds the log.
    #[error("{0}: the log is open by a running service: stop it first")]
    Locked(PathBuf),
    /// Checkpoints exist but none is valid: repairing the log cannot help.
    #[error(
        "{dir}: {none}, so no repair of the log can make the partition start; move the checkpoints away to rebuild the state from the log (it starts at offset {first})"
    )]
    NoValidCheckpoint {
        /// The checkpoints' folder.
        dir: PathBuf,
        /// How many there are.
        none: NoneValid,
        /// Where the log starts.
        first: u64,
    },
    /// Repairing failed part way.
    #[error("{source}; the copies made so far are in {quarantine}")]
    Repair {
        /// Why.
        source: wal::Error,
        /// Where the copies are.
        quarantine: PathBuf,
    },
    /// The repair did not leave a healthy log.
    #[error(
        "the log is still damaged after the repair: run `fencewatch wal inspect --data-dir {0}`"
    )]
    StillDamaged(PathBuf),
}

/// Checkpoints exist, `.0` of them, but none is valid.
#[derive(Debug, Clone, Copy)]
struct NoneValid(usize);

impl std::fmt::Display for NoneValid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "none of the {} checkpoints is valid", self.0)
    }
}

fn checkpoints(dir: &Path) -> Result<Vec<CheckpointInfo>, Error> {
    Ok(checkpoint::inspect(&dir.join("checkpoints"), |s, len| {
        read_state(s, len).map(drop)
    })?)
}

/// The offset `serve` would restore: `Err` when checkpoints exist but none is valid.
fn restored(cks: &[CheckpointInfo]) -> Result<Option<u64>, NoneValid> {
    match cks.iter().find(|c| c.problem.is_none()) {
        Some(c) => Ok(Some(c.offset)),
        None if cks.is_empty() => Ok(None),
        None => Err(NoneValid(cks.len())),
    }
}

/// Why `serve` would refuse to start, beyond the log's own damage.
fn refusals(ins: &Inspection, restored: &Result<Option<u64>, NoneValid>) -> Vec<String> {
    let mut out = Vec::new();
    match restored {
        // As `serve` does (`WhenNoneUsable::Rebuild`): with the whole log still there, the
        // unusable checkpoints (damaged, or of another state layout after an upgrade) are
        // passed over and the state is rebuilt from offset 0.
        Err(_) if ins.first_offset() == 0 => {}
        Err(e) => out.push(format!(
            "{e} and the log starts at offset {}, not 0: the state cannot be rebuilt from it",
            ins.first_offset()
        )),
        Ok(c) => {
            let (first, end) = (ins.first_offset(), ins.valid_end());
            if let Some(c) = c
                && *c > end
            {
                out.push(format!(
                    "the newest valid checkpoint covers up to offset {c}, the valid log ends at {end}"
                ));
            }
            if c.unwrap_or(0) < first {
                out.push(format!(
                    "the log starts at offset {first}, after the offset to replay from ({})",
                    c.unwrap_or(0)
                ));
            }
        }
    }
    out
}

/// Kafka partitions' checkpoint folders: (`topic/partition`, checkpoints).
fn kafka_checkpoints(data_dir: &Path) -> Result<Vec<(String, Vec<CheckpointInfo>)>, Error> {
    let root = data_dir.join("kafka");
    let mut out = Vec::new();
    let Ok(topics) = std::fs::read_dir(&root) else {
        return Ok(out);
    };
    for topic in topics.flatten().filter(|e| e.path().is_dir()) {
        let Ok(parts) = std::fs::read_dir(topic.path()) else {
            continue;
        };
        for part in parts.flatten().filter(|e| e.path().is_dir()) {
            let cks = checkpoint::inspect(&part.path(), |s, len| read_state(s, len).map(drop))?;
            let name = format!(
                "{}/{}",
                topic.file_name().to_string_lossy(),
                part.file_name().to_string_lossy()
            );
            out.push((name, cks));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

fn run_inspect(c: &Common) -> Result<i32, Error> {
    let dir = partition_dir(&c.data_dir);
    let wal_dir = dir.join("wal");
    let ins = inspect(&wal_dir)?;
    let cks = checkpoints(&dir)?;
    let restored = restored(&cks);
    let refusals = refusals(&ins, &restored);
    let kafka = kafka_checkpoints(&c.data_dir)?;
    let kafka_bad: Vec<&String> = (kafka.iter())
        .filter(|(_, cks)| !cks.is_empty() && cks.iter().all(|c| c.problem.is_some()))
        .map(|(name, _)| name)
        .collect();
    let kind = ins.damage.as_ref().map(|d| d.kind);
    let code = if !refusals.is_empty()
        || !kafka_bad.is_empty()
        || kind.is_some_and(|k| k != DamageKind::TornTail)
    {
        1
    } else if kind == Some(DamageKind::TornTail) {
        2
    } else {
        0
    };
    let verdict = match code {
        0 => "healthy".to_string(),
        2 => "a torn tail (an append a crash interrupted, never acknowledged): serve cuts it on start".to_string(),
        _ => format!(
            "damaged: serve refuses to start; `fencewatch wal repair --data-dir {}` says what a repair changes and drops",
            c.data_dir.display()
        ),
    };
    let locked = wal::is_locked(&wal_dir);
    if c.format == Format::Json {
        let v = json!({
            "wal": wal_json(&ins),
            "checkpoints": cks.iter().map(ck_json).collect::<Vec<_>>(),
            "restored_checkpoint": restored.as_ref().ok().copied().flatten(),
            "refusals": refusals,
            "kafka": kafka.iter().map(|(n, cks)| json!({"partition": n, "checkpoints": cks.iter().map(ck_json).collect::<Vec<_>>()})).collect::<Vec<_>>(),
            "in_use": locked,
            "status": match code { 0 => "healthy", 2 => "torn_tail", _ => "damaged" },
        });
        println!("{v}");
        return Ok(code);
    }
    let mut out = String::new();
    let mut line = |s: String| {
        out.push_str(&s);
        out.push('\n');
    };
    line(format!("write-ahead log {}", wal_dir.display()));
    if locked {
        line("  in use by a running service: its newest records may be mid-write".into());
    }
    for s in &ins.segments {
        let part = if s.valid_bytes < s.bytes {
            format!(" (valid up to byte {} of {})", s.valid_bytes, s.bytes)
        } else {
            format!(" ({} bytes)", s.bytes)
        };
        line(format!(
            "  {}  offsets {}..{}  {} records{part}",
            s.path.file_name().unwrap_or_default().to_string_lossy(),
            s.base,
            s.end,
            s.records
        ));
    }
    if ins.segments.is_empty() {
        line("  no segments".into());
    }
    line(format!(
        "  {} valid records, offsets {}..{}",
        ins.valid_records(),
        ins.first_offset(),
        ins.valid_end()
    ));
    if let Some(d) = &ins.damage {
        line(format!(
            "  first damage: {} in {} at byte {} (log offset {}, {} bytes to the end of the file): {}",
            d.kind.as_str(),
            d.path.display(),
            d.byte,
            d.offset,
            d.bytes,
            d.reason
        ));
        let events: u64 = ins.after.iter().map(|r| u64::from(r.items)).sum();
        if let (Some(a), Some(b)) = (ins.after.first(), ins.after.last()) {
            line(format!(
                "  after it: {} records that verify ({events} events, offsets {}..{})",
                ins.after.len(),
                a.base,
                b.end()
            ));
        }
    }
    line(format!("checkpoints {}", dir.join("checkpoints").display()));
    for ck in &cks {
        line(format!(
            "  {}",
            ck_text(ck, restored.as_ref().ok().copied().flatten())
        ));
    }
    if cks.is_empty() {
        line("  none: serve replays the log from offset 0".into());
    } else if restored.is_err() && ins.first_offset() == 0 {
        line(
            "  none usable: serve passes over them and rebuilds the state from the whole log"
                .into(),
        );
    }
    for (name, kc) in &kafka {
        let newest = kc.iter().find(|c| c.problem.is_none()).map(|c| c.offset);
        line(format!("kafka partition {name}"));
        for ck in kc {
            line(format!("  {}", ck_text(ck, newest)));
        }
        if kafka_bad.contains(&name) {
            line("  no valid checkpoint: move this folder away and the partition is rebuilt from Kafka".into());
        }
    }
    for r in &refusals {
        line(format!("refused: {r}"));
    }
    line(verdict);
    print!("{out}");
    Ok(code)
}

fn ck_text(ck: &CheckpointInfo, restored: Option<u64>) -> String {
    let status = match &ck.problem {
        Some(p) => format!("passed over: {p}"),
        None if Some(ck.offset) == restored => "valid, restored on start".into(),
        None => "valid".into(),
    };
    format!(
        "{}  offset {}  {} bytes  {status}",
        ck.path.file_name().unwrap_or_default().to_string_lossy(),
        ck.offset,
        ck.bytes
    )
}

fn ck_json(ck: &CheckpointInfo) -> Value {
    json!({"path": ck.path, "offset": ck.offset, "bytes": ck.bytes, "problem": ck.problem})
}

fn wal_json(ins: &Inspection) -> Value {
    json!({
        "dir": ins.dir,
        "head": ins.head,
        "first_offset": ins.first_offset(),
        "valid_end": ins.valid_end(),
        "valid_records": ins.valid_records(),
        "segments": ins.segments.iter().map(|s| json!({
            "path": s.path, "base": s.base, "bytes": s.bytes, "records": s.records,
            "valid_bytes": s.valid_bytes, "end": s.end,
        })).collect::<Vec<_>>(),
        "damage": ins.damage.as_ref().map(|d| json!({
            "kind": d.kind.as_str(), "path": d.path, "byte": d.byte, "offset": d.offset,
            "bytes": d.bytes, "reason": d.reason,
        })),
        "after": ins.after.iter().map(|r| json!({
            "path": r.path, "byte": r.byte, "base": r.base, "items": r.items, "bytes": r.bytes,
        })).collect::<Vec<_>>(),
    })
}

fn run_repair(r: &RepairArgs, now: EventTime) -> Result<i32, Error> {
    let c = &r.common;
    let dir = partition_dir(&c.data_dir);
    let wal_dir = dir.join("wal");
    if !wal_dir.exists() && !dir.join("checkpoints").exists() {
        return Err(Error::NoPartition(dir));
    }
    // Held until the end: no service may open the log meanwhile.
    let _lock = wal::lock(&wal_dir).map_err(|e| match e {
        wal::Error::Locked { path } => Error::Locked(path),
        e => e.into(),
    })?;
    let ins = inspect(&wal_dir)?;
    let cks = checkpoints(&dir)?;
    let restored = restored(&cks).map_err(|none| Error::NoValidCheckpoint {
        dir: dir.join("checkpoints"),
        none,
        first: ins.first_offset(),
    })?;
    let plan = repair::plan(ins, restored)?;
    let steps = plan.steps();
    let ahead = archive_ahead(&c.data_dir, &plan);
    let ahead_json = ahead.map(|(a, e)| json!({"archived": a, "end": e}));
    if c.format == Format::Json && !(r.cut && plan.is_needed()) {
        println!(
            "{}",
            json!({"summary": plan.summary(), "steps": steps, "needed": plan.is_needed(), "done": false, "dropped": dropped_json(&plan.dropped), "archive_ahead": ahead_json})
        );
        return Ok(i32::from(plan.is_needed()));
    }
    let warn_ahead = || {
        if let Some((archived, end)) = ahead {
            println!(
                "the evidence archive holds the rows of every offset below {archived}, past where the log ends ({end}): `fencewatch serve` refuses to start until its folder ({}) is moved aside (it keeps the events the log lost) or the lost segments are put back",
                c.data_dir.join("archive").display()
            );
        }
    };
    if !plan.is_needed() {
        println!("{}", plan.summary());
        return Ok(0);
    }
    if !r.cut {
        println!("would {}", plan.summary());
        for s in &steps {
            println!("  would {s}");
        }
        warn_ahead();
        println!(
            "nothing was changed: run `fencewatch wal repair --data-dir {} --cut` to do it (a copy of every file it changes is kept under {})",
            c.data_dir.display(),
            dir.join(QUARANTINE).display()
        );
        return Ok(1);
    }
    let quarantine = quarantine_dir(&dir.join(QUARANTINE), now);
    let report = repair::execute(&plan, &quarantine).map_err(|source| Error::Repair {
        source,
        quarantine: quarantine.clone(),
    })?;
    let after = inspect(&wal_dir)?;
    let ok = after.damage.is_none();
    if c.format == Format::Json {
        println!(
            "{}",
            json!({"summary": plan.summary(), "steps": steps, "needed": true, "done": true, "quarantine": quarantine, "report": report, "dropped": dropped_json(&plan.dropped), "log": {"first_offset": after.first_offset(), "end": after.valid_end()}, "archive_ahead": ahead_json})
        );
    } else {
        println!("did {}", plan.summary());
        for s in &steps {
            println!("  did {s}");
        }
        println!(
            "quarantined the original files in {} (report: {})",
            quarantine.display(),
            report.display()
        );
        println!(
            "the log now holds offsets {}..{}",
            after.first_offset(),
            after.valid_end()
        );
        warn_ahead();
    }
    if !ok {
        return Err(Error::StillDamaged(c.data_dir.clone()));
    }
    Ok(0)
}

/// Where the log of `plan` ends once repaired, and the offset below which the evidence
/// archive in `data_dir` holds every row of it, when the archive is ahead (`serve` then
/// refuses to start: new events would take offsets whose rows the archive holds).
fn archive_ahead(data_dir: &Path, plan: &repair::Plan) -> Option<(u64, u64)> {
    let end = match &plan.action {
        repair::Action::Nothing => return None,
        repair::Action::Cut { end, .. } => *end,
        repair::Action::Restart { at, keep, .. } => keep.last().map_or(*at, |r| r.end()),
    };
    let manifest = fencewatch_ingest::archive::manifest::Manifest::load(&data_dir.join("archive"));
    let archived = *manifest
        .ok()?
        .partitions
        .get(fencewatch_ingest::partition::local::NAME)?;
    (archived > end).then_some((archived, end))
}

fn dropped_json(d: &repair::Dropped) -> Value {
    json!({
        "records": d.records,
        "events": d.events,
        "offsets": d.ranges,
        "unreadable_offsets": d.unreadable,
        "unreadable_bytes": d.unreadable_bytes,
    })
}

/// A new folder under `root` named by the wall time `now` (`20251129T120002Z`).
fn quarantine_dir(root: &Path, now: EventTime) -> PathBuf {
    let now = now.to_string();
    let stamp: String = now[..19]
        .chars()
        .filter(|c| *c != '-' && *c != ':')
        .collect();
    let mut dir = root.join(format!("{stamp}Z"));
    let mut n = 1;
    while dir.exists() {
        n += 1;
        dir = root.join(format!("{stamp}Z-{n}"));
    }
    dir
}
