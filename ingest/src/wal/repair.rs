//! Repairing a damaged log (`fencewatch wal repair`): a [`Plan`] made from an
//! [`Inspection`] and the newest valid checkpoint's offset, which says exactly what would
//! change and what would be lost, and [`execute`], which first copies every file it changes
//! into a quarantine folder (with the plan as `repair.txt`) and only then changes them.
//!
//! The log must stay contiguous, so a repair can only end it at the first damage:
//!
//! - **Cut** (the checkpoint, if any, is at or before the damage): the damaged segment is cut
//!   at the damaged record and the later segments removed. The records after the damage are
//!   lost to the assessment; the ones that still verify are counted and their offsets named.
//! - **Restart** (the newest checkpoint covers offsets past the damage, as the one written on
//!   a clean shutdown does): the checkpoint's state already holds every event before its
//!   offset, so the log restarts at that offset, with the records from there on that verify
//!   and follow each other copied into a new segment. Only what lies after the checkpoint and
//!   does not verify is lost; older checkpoints can no longer be fallen back to.
//!
//! A crash during [`execute`] leaves the quarantine complete: inspect again, and repair again
//! or put the copies back.

use super::inspect::{DamageKind, Inspection, RecordInfo};
use super::{Error, HEAD_FILE, Result, corrupt, io_err, segment_path, sync_dir, write_head};
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

/// The name of the plan written into the quarantine folder.
pub const REPORT_FILE: &str = "repair.txt";

/// What a repair changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// The log is whole and agrees with the checkpoint.
    Nothing,
    /// End the log at the first damage.
    Cut {
        /// The segment to cut and its new length (none for a gap or a missing segment).
        truncate: Option<(PathBuf, u64)>,
        /// Later segments, removed.
        remove: Vec<PathBuf>,
        /// Where the log then ends.
        end: u64,
    },
    /// Start the log again at the newest checkpoint's offset.
    Restart {
        /// The checkpoint's offset: the new first segment's base.
        at: u64,
        /// Records from `at` on that verify and follow each other, copied into it.
        keep: Vec<RecordInfo>,
        /// Every old segment, removed.
        remove: Vec<PathBuf>,
    },
}

/// What a repair loses from the assessment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Dropped {
    /// Records that verify but are removed (after the damage, not covered by the checkpoint).
    pub records: u64,
    /// Events in them.
    pub events: u64,
    /// Their offsets, merged into ranges `[from, to)`.
    pub ranges: Vec<(u64, u64)>,
    /// Offsets between them whose records do not verify (damaged or deleted), `[from, to)`.
    pub unreadable: Vec<(u64, u64)>,
    /// Bytes removed that are in no verifying record.
    pub unreadable_bytes: u64,
}

/// A repair, decided and not yet done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The log as found.
    pub inspection: Inspection,
    /// The newest valid checkpoint's offset.
    pub checkpoint: Option<u64>,
    /// What changes.
    pub action: Action,
    /// What is lost.
    pub dropped: Dropped,
}

/// Decides how to repair the log of `inspection`, whose partition's newest valid checkpoint
/// is at `checkpoint`. Fails when no repair of the log can make the partition start: the
/// log starts after the checkpoint (or, without one, after offset 0).
pub fn plan(inspection: Inspection, checkpoint: Option<u64>) -> Result<Plan> {
    let first = inspection.first_offset();
    let end = inspection.valid_end();
    if !inspection.segments.is_empty() && checkpoint.unwrap_or(0) < first {
        let dir = &inspection.dir;
        return Err(corrupt(
            &segment_path(dir, first),
            0,
            format!(
                "the log starts at offset {first}, after {}: the events between are gone and a repair of the log cannot bring them back; move the partition folder away to start afresh",
                match checkpoint {
                    Some(c) => format!("the newest valid checkpoint's offset {c}"),
                    None => "offset 0 (there is no checkpoint)".into(),
                }
            ),
        ));
    }
    let segments: Vec<PathBuf> = inspection.segments.iter().map(|s| s.path.clone()).collect();
    let mut dropped = Dropped::default();
    let action = match checkpoint {
        Some(at) if at > end => {
            let mut keep: Vec<RecordInfo> = Vec::new();
            let mut next = at;
            for r in inspection.after.iter().skip_while(|r| r.base != at) {
                if r.base != next {
                    break;
                }
                next = r.end();
                keep.push(r.clone());
            }
            account(&inspection, &keep, at, &mut dropped);
            Action::Restart {
                at,
                keep,
                remove: segments,
            }
        }
        _ => match &inspection.damage {
            None => Action::Nothing,
            Some(d) => {
                account(&inspection, &[], end, &mut dropped);
                let truncate = match d.kind {
                    DamageKind::Gap | DamageKind::MissingSegment => None,
                    DamageKind::TornTail | DamageKind::Corrupt => Some((d.path.clone(), d.byte)),
                };
                let remove = match d.kind {
                    DamageKind::MissingSegment => Vec::new(),
                    DamageKind::Gap => segments.into_iter().filter(|p| *p >= d.path).collect(),
                    _ => segments.into_iter().filter(|p| *p > d.path).collect(),
                };
                Action::Cut {
                    truncate,
                    remove,
                    end,
                }
            }
        },
    };
    Ok(Plan {
        inspection,
        checkpoint,
        action,
        dropped,
    })
}

/// Counts what is lost from offset `from` on: the records after the damage not in `keep`,
/// and the offsets between them.
fn account(inspection: &Inspection, keep: &[RecordInfo], from: u64, out: &mut Dropped) {
    let mut expected = inspection.valid_end();
    let push = |ranges: &mut Vec<(u64, u64)>, a: u64, b: u64| {
        let (a, b) = (a.max(from), b);
        if a >= b {
            return;
        }
        match ranges.last_mut() {
            Some(last) if last.1 == a => last.1 = b,
            _ => ranges.push((a, b)),
        }
    };
    for r in &inspection.after {
        if r.base > expected {
            push(&mut out.unreadable, expected, r.base);
        }
        expected = expected.max(r.end());
        if keep.contains(r) || r.end() <= from {
            continue;
        }
        out.records += 1;
        out.events += u64::from(r.items);
        push(&mut out.ranges, r.base, r.end());
    }
    // Bytes in the damaged segment from the damage on, and in the later ones, that are in no
    // verifying record.
    let damaged: u64 = match &inspection.damage {
        Some(d) if d.kind != DamageKind::MissingSegment => {
            let later: u64 = (inspection.segments.iter())
                .filter(|s| s.path > d.path)
                .map(|s| s.bytes)
                .sum();
            let whole = if d.kind == DamageKind::Gap {
                0
            } else {
                d.bytes
            };
            let gap_segment = (inspection.segments.iter())
                .filter(|s| d.kind == DamageKind::Gap && s.path == d.path)
                .map(|s| s.bytes)
                .sum::<u64>();
            whole + later + gap_segment
        }
        _ => 0,
    };
    let verifying: u64 = inspection.after.iter().map(|r| r.bytes).sum();
    out.unreadable_bytes = damaged.saturating_sub(verifying);
}

fn ranges(r: &[(u64, u64)]) -> String {
    let v: Vec<String> = r.iter().map(|(a, b)| format!("{a}..{b}")).collect();
    v.join(", ")
}

impl Plan {
    /// Whether the repair changes anything.
    pub fn is_needed(&self) -> bool {
        self.action != Action::Nothing
    }

    /// One line: what the repair does and loses.
    pub fn summary(&self) -> String {
        let d = &self.dropped;
        let missing = (self.inspection.damage.as_ref())
            .filter(|d| d.kind == DamageKind::MissingSegment)
            .map(|d| {
                format!(
                    "the events of the deleted segments, from offset {} on, are lost (how many is unknown)",
                    d.offset.max(self.checkpoint.unwrap_or(0))
                )
            });
        let mut parts = Vec::new();
        if d.records > 0 {
            parts.push(format!(
                "{} records that verify ({} events, offsets {}) are dropped",
                d.records,
                d.events,
                ranges(&d.ranges)
            ));
        }
        if !d.unreadable.is_empty() {
            let n: u64 = d.unreadable.iter().map(|(a, b)| b - a).sum();
            parts.push(format!(
                "{n} events at offsets {} do not verify and are lost",
                ranges(&d.unreadable)
            ));
        }
        parts.extend(missing);
        let torn =
            (self.inspection.damage.as_ref()).is_some_and(|d| d.kind == DamageKind::TornTail);
        let restart = matches!(self.action, Action::Restart { .. });
        // Damaged bytes the log is cut at may have held an acknowledged record (a whole record
        // with a bad checksum is not a torn append): they are not said to lose nothing.
        let cut_damage = !torn && !restart && d.unreadable_bytes > 0;
        if parts.is_empty() && !cut_damage {
            parts.push(if restart {
                "no event after the checkpoint is lost".to_string()
            } else {
                "no acknowledged event is lost".to_string()
            });
        }
        if d.unreadable_bytes > 0 {
            parts.push(if torn {
                format!(
                    "the {} bytes of a torn append, never acknowledged, go",
                    d.unreadable_bytes
                )
            } else if cut_damage {
                format!(
                    "{} damaged bytes go, with the events they held from offset {} on, acknowledged or not (how many is unknown)",
                    d.unreadable_bytes,
                    self.inspection.valid_end()
                )
            } else {
                format!("{} damaged bytes go", d.unreadable_bytes)
            });
        }
        let lost = parts.join("; ");
        match &self.action {
            Action::Nothing => "the log is whole: nothing to repair".into(),
            Action::Cut { truncate, end, .. } => {
                let at = match (truncate, &self.inspection.damage) {
                    (Some((p, b)), _) => format!(" ({} at byte {b})", p.display()),
                    (None, Some(d)) => format!(" ({}: {})", d.kind.as_str(), d.reason),
                    (None, None) => String::new(),
                };
                format!("cut the log at offset {end}{at}: {lost}")
            }
            Action::Restart { at, keep, .. } => format!(
                "restart the log at the newest checkpoint's offset {at}, which covers past the damage at offset {} (events before {at} are in its state; {} records after it kept): {lost}",
                self.inspection.valid_end(),
                keep.len()
            ),
        }
    }

    /// Every step, one a line.
    pub fn steps(&self) -> Vec<String> {
        let mut out = Vec::new();
        match &self.action {
            Action::Nothing => {}
            Action::Cut {
                truncate, remove, ..
            } => {
                if let Some((p, b)) = truncate {
                    out.push(format!("cut {} to {b} bytes", p.display()));
                }
                for p in remove {
                    out.push(format!("remove {}", p.display()));
                }
            }
            Action::Restart { at, keep, remove } => {
                for p in remove {
                    out.push(format!("remove {}", p.display()));
                }
                out.push(format!(
                    "create {} holding {} records",
                    segment_path(&self.inspection.dir, *at).display(),
                    keep.len()
                ));
            }
        }
        if self.is_needed() {
            out.push(format!(
                "rewrite {}",
                self.inspection.dir.join(HEAD_FILE).display()
            ));
        }
        out
    }

    /// The files [`execute`] copies into the quarantine.
    fn changed_files(&self) -> Vec<PathBuf> {
        let mut files: Vec<PathBuf> = match &self.action {
            Action::Nothing => Vec::new(),
            Action::Cut {
                truncate, remove, ..
            } => truncate
                .iter()
                .map(|(p, _)| p.clone())
                .chain(remove.iter().cloned())
                .collect(),
            Action::Restart { remove, .. } => remove.clone(),
        };
        let head = self.inspection.dir.join(HEAD_FILE);
        if head.exists() {
            files.push(head);
        }
        files
    }
}

/// Carries out `plan`: copies every file it changes into `quarantine` (created, and fsynced
/// with the plan as [`REPORT_FILE`]) and then changes them. Returns the report's path.
pub fn execute(plan: &Plan, quarantine: &Path) -> Result<PathBuf> {
    let dir = &plan.inspection.dir;
    fs::create_dir_all(quarantine).map_err(io_err(quarantine))?;
    let mut report = format!("{}\n", plan.summary());
    for file in plan.changed_files() {
        let name = file.file_name().expect("a file name");
        let copy = quarantine.join(name);
        fs::copy(&file, &copy).map_err(io_err(&copy))?;
        File::open(&copy)
            .and_then(|f| f.sync_all())
            .map_err(io_err(&copy))?;
        report.push_str(&format!(
            "copied {} to {}\n",
            file.display(),
            copy.display()
        ));
    }
    for step in plan.steps() {
        report.push_str(&step);
        report.push('\n');
    }
    let report_path = quarantine.join(REPORT_FILE);
    let write = || -> std::io::Result<()> {
        let mut f = File::create(&report_path)?;
        f.write_all(report.as_bytes())?;
        f.sync_all()
    };
    write().map_err(io_err(&report_path))?;
    sync_dir(quarantine)?;
    if let Some(parent) = quarantine.parent() {
        sync_dir(parent)?;
    }
    match &plan.action {
        Action::Nothing => {}
        Action::Cut {
            truncate, remove, ..
        } => {
            if let Some((p, b)) = truncate {
                let f = OpenOptions::new().write(true).open(p);
                (f.and_then(|f| f.set_len(*b).and_then(|()| f.sync_all()))).map_err(io_err(p))?;
            }
            remove_newest_first(remove)?;
            sync_dir(dir)?;
            let newest = (plan.inspection.segments.iter())
                .map(|s| s.base)
                .filter(|&b| !remove.contains(&segment_path(dir, b)))
                .max();
            match newest {
                Some(b) => write_head(dir, b)?,
                None => remove_head(dir)?,
            }
        }
        Action::Restart { at, keep, remove } => {
            let tmp = dir.join(format!("{at:020}.wal.tmp"));
            write_segment(&tmp, keep)?;
            remove_newest_first(remove)?;
            let path = segment_path(dir, *at);
            fs::rename(&tmp, &path).map_err(io_err(&path))?;
            sync_dir(dir)?;
            write_head(dir, *at)?;
        }
    }
    Ok(report_path)
}

fn remove_newest_first(files: &[PathBuf]) -> Result<()> {
    for p in files.iter().rev() {
        fs::remove_file(p).map_err(io_err(p))?;
    }
    Ok(())
}

fn remove_head(dir: &Path) -> Result<()> {
    let head = dir.join(HEAD_FILE);
    match fs::remove_file(&head) {
        Ok(()) => sync_dir(dir),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_err(&head)(e)),
    }
}

/// Writes `records`, copied byte for byte from their segments, into a new file at `path`.
fn write_segment(path: &Path, records: &[RecordInfo]) -> Result<()> {
    let mut out = File::create(path).map_err(io_err(path))?;
    for r in records {
        let bytes = super::read_range(&r.path, r.byte, r.byte + r.bytes)?;
        if bytes.len() as u64 != r.bytes {
            return Err(Error::Corrupt {
                path: r.path.clone(),
                offset: r.byte,
                reason: "changed while repairing".into(),
            });
        }
        out.write_all(&bytes).map_err(io_err(path))?;
    }
    out.sync_all().map_err(io_err(path))
}

#[cfg(test)]
mod tests {
    use super::super::inspect::inspect;
    use super::super::{Wal, WalOptions, list_segments};
    use super::*;

    const OPTS: WalOptions = WalOptions { segment_bytes: 300 };

    /// A log of 30 records of 2 events each (offsets 0..60), in several segments.
    fn log() -> (tempfile::TempDir, Vec<PathBuf>) {
        let dir = tempfile::tempdir().unwrap();
        let mut wal = Wal::open(dir.path(), OPTS).unwrap();
        for i in 0..30u8 {
            wal.append(2, &[i; 40]).unwrap();
        }
        wal.sync().unwrap();
        drop(wal);
        let files = (list_segments(dir.path()).unwrap().into_iter())
            .map(|b| segment_path(dir.path(), b))
            .collect();
        (dir, files)
    }

    fn flip(path: &Path, at: usize) -> Vec<u8> {
        let mut b = fs::read(path).unwrap();
        b[at] ^= 0x40;
        fs::write(path, &b).unwrap();
        b
    }

    fn events(dir: &Path, from: u64) -> Vec<(u64, Vec<u8>)> {
        let wal = Wal::open(dir, OPTS).unwrap();
        (wal.read_from(from).unwrap())
            .map(|r| r.map(|r| (r.base, r.payload)))
            .collect::<Result<_>>()
            .unwrap()
    }

    #[test]
    fn a_cut_drops_what_follows_the_damage_after_quarantining_it() {
        let (dir, files) = log();
        let last = files.last().unwrap();
        let base = list_segments(dir.path()).unwrap().pop().unwrap();
        // The second record of the last segment: 64 bytes a record.
        let damaged = flip(last, 64 + 30);
        let records_after = fs::read(last).unwrap().len() / 64 - 2;
        let plan = plan(inspect(dir.path()).unwrap(), None).unwrap();
        let end = base + 2;
        assert_eq!(
            plan.action,
            Action::Cut {
                truncate: Some((last.clone(), 64)),
                remove: vec![],
                end
            }
        );
        let d = &plan.dropped;
        assert_eq!(
            (d.records, d.events),
            (records_after as u64, 2 * records_after as u64)
        );
        assert_eq!(d.ranges, [(end + 2, 60)]);
        assert_eq!(d.unreadable, [(end, end + 2)]);
        assert_eq!(d.unreadable_bytes, 64);
        assert!(
            plan.summary()
                .starts_with(&format!("cut the log at offset {end}")),
            "{}",
            plan.summary()
        );
        let q = dir.path().join("q");
        let report = execute(&plan, &q).unwrap();
        assert_eq!(
            fs::read(q.join(last.file_name().unwrap())).unwrap(),
            damaged
        );
        assert!(
            fs::read_to_string(report)
                .unwrap()
                .starts_with(&plan.summary())
        );
        assert_eq!(fs::metadata(last).unwrap().len(), 64);
        let got = events(dir.path(), 0);
        assert_eq!(got.len() as u64, end / 2);
        assert!(
            super::plan(inspect(dir.path()).unwrap(), None)
                .unwrap()
                .action
                == Action::Nothing
        );
    }

    /// The last record damaged (a whole record with a bad checksum, not a torn append): the
    /// cut loses what it held, acknowledged or not, and says so (hostile test, session 27: it
    /// said "no acknowledged event is lost" of an acknowledged record).
    #[test]
    fn a_cut_at_a_damaged_last_record_does_not_say_nothing_is_lost() {
        let (dir, files) = log();
        let last = files.last().unwrap();
        let len = fs::read(last).unwrap().len();
        flip(last, len - 64 + 30);
        let plan = plan(inspect(dir.path()).unwrap(), None).unwrap();
        let end = plan.inspection.valid_end();
        assert!(
            matches!(plan.action, Action::Cut { .. }),
            "{:?}",
            plan.action
        );
        assert_eq!(plan.dropped.events, 0);
        let summary = plan.summary();
        assert!(
            !summary.contains("no acknowledged event is lost"),
            "{summary}"
        );
        assert!(
            summary.contains(&format!(
                "64 damaged bytes go, with the events they held from offset {end} on"
            )),
            "{summary}"
        );
    }

    #[test]
    fn a_checkpoint_past_the_damage_restarts_the_log_there_keeping_what_follows() {
        let (dir, files) = log();
        let original = events(dir.path(), 0);
        flip(&files[1], 64 + 30);
        let ins = inspect(dir.path()).unwrap();
        let k = ins.valid_end();
        let c = k + 10;
        let plan = plan(ins, Some(c)).unwrap();
        let Action::Restart { at, keep, remove } = &plan.action else {
            panic!("{:?}", plan.action)
        };
        assert_eq!(
            (*at, keep.len(), remove.len()),
            (c, (60 - c as usize) / 2, files.len())
        );
        assert_eq!(
            plan.dropped,
            Dropped {
                unreadable_bytes: 64,
                ..Dropped::default()
            }
        );
        execute(&plan, &dir.path().join("q")).unwrap();
        let wal = Wal::open(dir.path(), OPTS).unwrap();
        assert_eq!((wal.first_offset(), wal.next_offset()), (c, 60));
        drop(wal);
        let want: Vec<_> = original.into_iter().filter(|(b, _)| *b >= c).collect();
        assert_eq!(events(dir.path(), c), want);
    }

    #[test]
    fn a_deleted_segment_is_a_gap_cut_before_it_and_one_before_the_checkpoint_is_refused() {
        let (dir, files) = log();
        assert!(files.len() >= 4);
        fs::remove_file(&files[1]).unwrap();
        let ins = inspect(dir.path()).unwrap();
        assert_eq!(ins.damage.as_ref().unwrap().kind, DamageKind::Gap);
        let end = ins.segments[0].end;
        let next = ins.segments[1].base;
        let plan = plan(ins, None).unwrap();
        let Action::Cut {
            truncate: None,
            remove,
            ..
        } = &plan.action
        else {
            panic!("{:?}", plan.action)
        };
        assert_eq!(remove[..], files[2..]);
        assert_eq!(plan.dropped.unreadable, [(end, next)]);
        assert_eq!(plan.dropped.ranges, [(next, 60)]);
        execute(&plan, &dir.path().join("q")).unwrap();
        assert_eq!(Wal::open(dir.path(), OPTS).unwrap().next_offset(), end);
        // A log that starts after the checkpoint (here: offset 0) cannot be repaired.
        let (dir, files) = log();
        fs::remove_file(&files[0]).unwrap();
        let err = super::plan(inspect(dir.path()).unwrap(), None).unwrap_err();
        assert!(err.to_string().contains("cannot bring them back"), "{err}");
    }
}
