//! The local partition: its batches are records of the write-ahead log in
//! `<dir>/wal`, its checkpoints in `<dir>/checkpoints`. Opening it restores the newest usable
//! checkpoint and replays the log after it through [`Partition::apply`]; segments every kept
//! checkpoint covers are deleted as checkpoints are saved ([`checkpoint`]).

use super::restore::{WhenNoneUsable, restore, restore_at_or_below};
use super::{Error, Partition, Result};
use crate::batch::decode;
use crate::checkpoint::{CheckpointStore, PassedOver};
use crate::wal::{self, Wal, WalOptions};
use fencewatch_assess::Contract;
use fencewatch_assess::live::{Live, LiveOptions};
use std::path::{Path, PathBuf};

/// The name of the local partition, in logs and in the registry.
pub const NAME: &str = "wal";

/// The local partition opened from its data directory, with what opening it took.
#[derive(Debug)]
pub struct Opened {
    /// The log, positioned after its last valid record.
    pub wal: Wal,
    /// The checkpoints.
    pub checkpoints: CheckpointStore,
    /// The partition, restored and replayed up to the end of the log, under the options given.
    pub partition: Partition,
    /// Offset of the checkpoint restored, if any.
    pub restored_from: Option<u64>,
    /// Records replayed.
    pub replayed_records: u64,
    /// The torn tail cut off the log (a crash during a write that was never acknowledged).
    pub torn_tail: Option<wal::TornTail>,
    /// Newer checkpoints passed over as damaged or undecodable, newest first.
    pub passed_over: Vec<PassedOver>,
    /// What `fencewatch wal repair` quarantined in this partition: each folder under
    /// `quarantine/` with the first line of its report.
    pub quarantined: Vec<(PathBuf, String)>,
}

/// Options of the local partition.
#[derive(Debug, Clone, Copy)]
pub struct PartitionOptions {
    /// WAL segment size.
    pub segment_bytes: u64,
    /// Lines longer than this are malformed.
    pub max_line_bytes: usize,
    /// Options of the assessor.
    pub live: LiveOptions,
}

/// Opens (or creates) the local partition in `dir`: restores the newest usable checkpoint
/// and replays the log after it. Nothing in the log changes until every check passed: a torn
/// tail is cut last.
pub fn open(dir: &Path, contract: Contract, opts: PartitionOptions) -> Result<Opened> {
    open_with(dir, contract, opts, |_| {})
}

/// [`open`], with `prepare` called on the partition once restored, before the log is replayed
/// into it (the registry attaches the evidence archive there).
pub fn open_with(
    dir: &Path,
    contract: Contract,
    opts: PartitionOptions,
    prepare: impl FnOnce(&mut Partition),
) -> Result<Opened> {
    std::fs::create_dir_all(dir).map_err(|source| Error::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut wal = Wal::open_unrecovered(
        &dir.join("wal"),
        WalOptions {
            segment_bytes: opts.segment_bytes,
        },
    )?;
    let mut checkpoints = CheckpointStore::open(&dir.join("checkpoints"))?;
    let none_usable = WhenNoneUsable::Rebuild {
        first_offset: wal.first_offset(),
    };
    let restored = restore(&mut checkpoints, contract.clone(), opts.live, none_usable)?;
    let mut from = restored.from;
    let end = wal.next_offset();
    if let Some(from) = from
        && end < from
    {
        return Err(Error::LogBehindCheckpoint {
            wal: wal.dir().to_path_buf(),
            end,
            checkpoint: from,
        });
    }
    let mut partition = Partition::new(NAME, restored.live, from.unwrap_or(0));
    prepare(&mut partition);
    // An archive that lists the partition below the checkpoint lacks the rows between (it is
    // not the one the checkpoint was taken beside: moved aside and back, or copied): they are
    // applied again from an older state, the newest checkpoint at or below it or, if the log
    // starts at 0, from nothing; else the start is refused.
    if let (Some(archived), Some(restored)) = (partition.archive_lists(), from)
        && archived < restored
    {
        let first = wal.first_offset();
        let older = restore_at_or_below(&mut checkpoints, contract.clone(), archived)?
            .filter(|r| r.from.is_some_and(|f| f >= first));
        let live = match older {
            Some(r) => {
                from = r.from;
                r.live
            }
            None if first == 0 => {
                from = None;
                Live::new(contract, opts.live)
            }
            None => {
                return Err(Error::ArchiveBehindState {
                    partition: NAME.to_string(),
                    archived,
                    restored,
                    kept: format!(", the write-ahead log starts at offset {first}"),
                });
            }
        };
        tracing::warn!(
            archived,
            checkpoint = restored,
            replay_from = from.unwrap_or(0),
            "archive: the archive holds the partition's rows only below the checkpoint; the records between are applied again from an older state, and archived"
        );
        partition.restart_from(live, from.unwrap_or(0));
    }
    // The archive takes no row below what it holds: new events at offsets the log lost would
    // never be archived (nor their counterexamples' windows).
    if let Some(archived) = partition.archived_below()
        && end < archived
    {
        return Err(Error::LogBehindArchive {
            wal: wal.dir().to_path_buf(),
            end,
            archived,
        });
    }
    let mut replayed = 0;
    for rec in wal.read_from(from.unwrap_or(0))? {
        let rec = rec?;
        let batch = decode(&rec.payload).map_err(|reason| Error::BadRecord {
            offset: rec.base,
            reason,
        })?;
        // Checkpoints are taken at record boundaries: a record straddling one was applied.
        if partition
            .apply(rec.base, u64::from(rec.items), &batch, opts.max_line_bytes)
            .is_some()
        {
            replayed += 1;
        }
    }
    // What the log holds was reported by the process that first applied it; it replayed under
    // the options it was first applied with (the same findings), the configuration's are in
    // force from here on.
    partition.reported_all();
    partition.live_mut().set_options(opts.live);
    let torn_tail = wal.finish_recovery()?.cloned();
    Ok(Opened {
        wal,
        checkpoints,
        partition,
        restored_from: from,
        replayed_records: replayed,
        torn_tail,
        passed_over: restored.passed_over,
        quarantined: quarantined(&dir.join(QUARANTINE)),
    })
}

/// The folder of a partition where `fencewatch wal repair` keeps what it changed.
pub const QUARANTINE: &str = "quarantine";

/// Each folder in `dir` with the first line of its repair report, oldest first.
fn quarantined(dir: &Path) -> Vec<(PathBuf, String)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<(PathBuf, String)> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir())
        .map(|p| {
            let report = std::fs::read_to_string(p.join(wal::repair::REPORT_FILE));
            let first = report
                .ok()
                .and_then(|r| r.lines().next().map(str::to_string));
            (p, first.unwrap_or_else(|| "no repair report".into()))
        })
        .collect();
    out.sort();
    out
}

/// Saves a checkpoint (`state` from [`super::Partition::encode`]) at `offset` (the next
/// record's base) and deletes the WAL segments every kept checkpoint covers. Returns the WAL
/// bytes freed.
pub fn checkpoint(
    wal: &mut Wal,
    checkpoints: &mut CheckpointStore,
    offset: u64,
    state: &[u8],
) -> Result<u64> {
    checkpoints.save(offset, state)?;
    let keep_from = checkpoints.oldest_offset().unwrap_or(0);
    Ok(wal.remove_before(keep_from)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::{Format, decode, encode};
    use crate::partition::state::{STATE_LAYOUT, encode_state};
    use crate::partition::tests::{BATCH, contract};
    use fencewatch_assess::live::LiveOptions;

    fn opts() -> PartitionOptions {
        PartitionOptions {
            segment_bytes: 4096,
            max_line_bytes: 1 << 20,
            live: LiveOptions::default(),
        }
    }

    #[test]
    fn reopen_replays_and_checkpoints_truncate() {
        let dir = tempfile::tempdir().unwrap();
        let mut ids = Vec::new();
        {
            let mut o = open(dir.path(), contract(), opts()).unwrap();
            for i in 0..50i64 {
                let line = format!(
                    "{{\"kind\":\"commit\",\"ts\":{},\"scope\":\"s{}\",\"epoch\":{},\"route\":\"r\"}}\n",
                    1_000_000_000 * i,
                    i % 7,
                    50 - i
                );
                let payload = encode(Format::Ndjson, 1 << 40, "http", None, line.as_bytes());
                let base = o.wal.append(1, &payload).unwrap();
                o.wal.sync().unwrap();
                o.partition
                    .apply(base, 1, &decode(&payload).unwrap(), 1 << 20)
                    .unwrap();
                if i == 20 {
                    let state = o.partition.encode().1;
                    let next = o.wal.next_offset();
                    checkpoint(&mut o.wal, &mut o.checkpoints, next, &state).unwrap();
                }
            }
            let page = o
                .partition
                .live()
                .view()
                .counterexamples(None, None, None, None, None, 1000);
            ids.extend(page.counterexamples.into_iter().map(|c| c.id));
            assert!(!ids.is_empty());
        }
        let o = open(dir.path(), contract(), opts()).unwrap();
        assert_eq!(o.restored_from, Some(21));
        assert_eq!(o.replayed_records, 29);
        let page = o
            .partition
            .live()
            .view()
            .counterexamples(None, None, None, None, None, 1000);
        let again: Vec<String> = page.counterexamples.into_iter().map(|c| c.id).collect();
        assert_eq!(again, ids);
    }

    #[test]
    fn a_checkpoint_that_verifies_but_does_not_decode_falls_back_to_the_older_one() {
        let dir = tempfile::tempdir().unwrap();
        let want;
        {
            let mut o = open(dir.path(), contract(), opts()).unwrap();
            for (i, line) in BATCH.lines().enumerate() {
                let payload = encode(Format::Ndjson, 1 << 40, "http", None, line.as_bytes());
                let base = o.wal.append(1, &payload).unwrap();
                o.wal.sync().unwrap();
                o.partition
                    .apply(base, 1, &decode(&payload).unwrap(), 1 << 20)
                    .unwrap();
                if i == 0 {
                    let state = o.partition.encode().1;
                    let next = o.wal.next_offset();
                    checkpoint(&mut o.wal, &mut o.checkpoints, next, &state).unwrap();
                }
            }
            want = o.partition.live().totals();
            // A newer checkpoint with a valid frame and crc whose state does not decode (as
            // one written by a build with another state layout would be).
            let next = o.wal.next_offset();
            o.checkpoints
                .save(next, b"\xff\xff\xff not a state")
                .unwrap();
        }
        let o = open(dir.path(), contract(), opts()).unwrap();
        assert_eq!(o.restored_from, Some(1));
        assert_eq!(o.partition.live().totals(), want);
    }

    #[test]
    fn options_of_the_configuration_replace_the_checkpoints_after_replay() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut o = open(dir.path(), contract(), opts()).unwrap();
            let state = o.partition.encode().1;
            checkpoint(&mut o.wal, &mut o.checkpoints, 0, &state).unwrap();
        }
        let mut changed = opts();
        changed.live = LiveOptions {
            retention: Some(7_000_000_000),
            future_tolerance: 1_000_000_000,
            ..LiveOptions::default()
        };
        let o = open(dir.path(), contract(), changed).unwrap();
        assert_eq!(o.restored_from, Some(0));
        assert_eq!(o.partition.live().options(), changed.live);
    }

    #[test]
    fn a_log_that_ends_before_its_checkpoint_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut o = open(dir.path(), contract(), opts()).unwrap();
            let payload = encode(Format::Ndjson, 1 << 40, "http", None, BATCH.as_bytes());
            o.wal.append(4, &payload).unwrap();
            o.wal.sync().unwrap();
            let state = o.partition.encode().1;
            checkpoint(&mut o.wal, &mut o.checkpoints, 4, &state).unwrap();
        }
        // The log is lost; the checkpoint remains.
        std::fs::remove_dir_all(dir.path().join("wal")).unwrap();
        let err = open(dir.path(), contract(), opts()).unwrap_err();
        assert!(err.to_string().contains("missing from the log"), "{err}");
    }

    /// An archive that holds rows of offsets the log lost (a repair cut them, or a tail that
    /// looks torn was acknowledged): the open is refused and nothing is cut, where new events
    /// took those offsets and the archive, skipping offsets it holds, never took them
    /// (hostile test, session 27).
    #[cfg(feature = "archive")]
    #[test]
    fn a_log_that_ends_before_its_archive_is_refused() {
        use crate::archive::{Archive, ArchiveOptions};
        use std::sync::Arc;
        let dir = tempfile::tempdir().unwrap();
        let archive_dir = dir.path().join("archive");
        {
            let archive =
                Arc::new(Archive::open(ArchiveOptions::new(archive_dir.clone())).unwrap());
            let mut o = open_with(dir.path(), contract(), opts(), |p| {
                p.attach_archive(archive.clone());
            })
            .unwrap();
            for base in [0, 4] {
                let payload = encode(Format::Ndjson, 1 << 40, "http", None, BATCH.as_bytes());
                o.wal.append(4, &payload).unwrap();
                o.wal.sync().unwrap();
                let rec = o.wal.read_from(base).unwrap().next().unwrap().unwrap();
                let batch = decode(&rec.payload).unwrap();
                o.partition.apply(base, 4, &batch, 1 << 20).unwrap();
                o.partition.commit_archive();
            }
            archive.flush().unwrap();
            assert_eq!(archive.durable("wal"), 8);
        }
        // The last record torn (as a crash would leave it, had it not been acknowledged).
        let seg = dir.path().join("wal").join(format!("{:020}.wal", 0));
        let mut bytes = std::fs::read(&seg).unwrap();
        bytes.truncate(bytes.len() - 10);
        std::fs::write(&seg, &bytes).unwrap();
        let archive = Arc::new(Archive::open(ArchiveOptions::new(archive_dir)).unwrap());
        let err = open_with(dir.path(), contract(), opts(), |p| {
            p.attach_archive(archive.clone());
        })
        .unwrap_err();
        assert!(
            matches!(
                err,
                Error::LogBehindArchive {
                    end: 4,
                    archived: 8,
                    ..
                }
            ),
            "{err}"
        );
        assert_eq!(std::fs::read(&seg).unwrap(), bytes, "nothing was cut");
        // Without the archive it opens, cutting the torn tail.
        let o = open(dir.path(), contract(), opts()).unwrap();
        assert_eq!(o.wal.next_offset(), 4);
    }

    #[test]
    fn a_torn_tail_is_not_cut_when_the_open_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut o = open(dir.path(), contract(), opts()).unwrap();
            let payload = encode(Format::Ndjson, 1 << 40, "http", None, BATCH.as_bytes());
            for _ in 0..3 {
                o.wal.append(4, &payload).unwrap();
            }
            o.wal.sync().unwrap();
            let state = o.partition.encode().1;
            checkpoint(&mut o.wal, &mut o.checkpoints, 12, &state).unwrap();
        }
        // The last record torn (as a crash would): the log then ends before the checkpoint.
        let seg = dir.path().join("wal").join(format!("{:020}.wal", 0));
        let mut bytes = std::fs::read(&seg).unwrap();
        bytes.truncate(bytes.len() - 10);
        std::fs::write(&seg, &bytes).unwrap();
        let err = open(dir.path(), contract(), opts()).unwrap_err();
        assert!(
            matches!(
                err,
                Error::LogBehindCheckpoint {
                    end: 8,
                    checkpoint: 12,
                    ..
                }
            ),
            "{err}"
        );
        assert_eq!(std::fs::read(&seg).unwrap(), bytes, "nothing was cut");
    }

    #[test]
    fn checkpoints_of_another_layout_rebuild_from_the_log_or_refuse_with_the_way_out() {
        let dir = tempfile::tempdir().unwrap();
        let (want, end);
        {
            let mut o = open(dir.path(), contract(), opts()).unwrap();
            let payload = encode(Format::Ndjson, 1 << 40, "http", None, BATCH.as_bytes());
            for _ in 0..40 {
                let base = o.wal.append(4, &payload).unwrap();
                o.wal.sync().unwrap();
                o.partition
                    .apply(base, 4, &decode(&payload).unwrap(), 1 << 20)
                    .unwrap();
            }
            assert!(o.wal.segments() > 1);
            want = o.partition.live().totals();
            end = o.wal.next_offset();
            // As an earlier build wrote it: no layout tag.
            let untagged = encode_state(o.partition.live().state())[6..].to_vec();
            o.checkpoints.save(end, &untagged).unwrap();
        }
        // The log still starts at 0: rebuilt from it, exactly.
        let o = open(dir.path(), contract(), opts()).unwrap();
        assert_eq!(o.restored_from, None);
        assert_eq!(o.partition.live().totals(), want);
        assert!(
            o.passed_over[0].reason.contains("state layout 1"),
            "{:?}",
            o.passed_over
        );
        // Once the log no longer starts at 0, the start is refused, naming the way out.
        let mut wal = o.wal;
        assert!(wal.remove_before(end).unwrap() > 0);
        drop(wal);
        let err = open(dir.path(), contract(), opts()).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("state layout 1") && msg.contains("move the data directory away"),
            "{msg}"
        );
    }

    #[test]
    fn a_checkpoint_of_the_previous_layout_is_rebuilt_from_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let want;
        {
            let mut o = open(dir.path(), contract(), opts()).unwrap();
            let payload = encode(Format::Ndjson, 1 << 40, "http", None, BATCH.as_bytes());
            for _ in 0..3 {
                let base = o.wal.append(4, &payload).unwrap();
                o.wal.sync().unwrap();
                o.partition
                    .apply(base, 4, &decode(&payload).unwrap(), 1 << 20)
                    .unwrap();
            }
            want = o.partition.live().totals();
            // As the build before this layout wrote it: tagged with its layout.
            let mut old = encode_state(o.partition.live().state());
            old[4..6].copy_from_slice(&(STATE_LAYOUT - 1).to_le_bytes());
            o.checkpoints.save(o.wal.next_offset(), &old).unwrap();
        }
        let o = open(dir.path(), contract(), opts()).unwrap();
        assert_eq!(o.restored_from, None);
        assert_eq!(o.partition.live().totals(), want);
        let layout = format!("state layout {}", STATE_LAYOUT - 1);
        assert!(
            o.passed_over[0].reason.contains(&layout),
            "{:?}",
            o.passed_over
        );
    }

    #[test]
    fn a_changed_contract_is_refused_with_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut o = open(dir.path(), contract(), opts()).unwrap();
            let state = o.partition.encode().1;
            checkpoint(&mut o.wal, &mut o.checkpoints, 0, &state).unwrap();
        }
        let other = Contract::parse(
            "c.toml",
            "[[property]]\nname=\"q\"\nsubject=\"S\"\nstrategy=\"lease_epoch\"\n[[property.route]]\nname=\"r\"\n",
        )
        .unwrap();
        let err = open(dir.path(), other, opts()).unwrap_err();
        assert!(err.to_string().contains("different contract"), "{err}");
    }
}
