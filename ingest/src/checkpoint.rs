//! Atomic per-partition checkpoints: the assessor's state together with the partition offset
//! it covers (SPEC §5). After a crash the service loads the newest valid checkpoint and replays
//! the partition from its offset.
//!
//! Each checkpoint is one file `checkpoint-<offset, 20 digits>.ckpt`, integers little-endian:
//!
//! ```text
//! "FWCK" | version u32 = 1 | offset u64 | state_len u64 | crc32(state) u32 | state
//! ```
//!
//! A checkpoint is written as its state is encoded, into a `.tmp` file ([`Pending`]: no copy
//! of the state's bytes is held), its header last; [`CheckpointStore::commit`] fsyncs it,
//! renames it into place and fsyncs the directory, so a checkpoint is either wholly there or
//! not at all. The newest two are
//! kept: should the newest be damaged anyway (a bad disk, a bug), [`CheckpointStore::latest`]
//! falls back to the one before, whose offset the WAL still covers as long as the caller
//! removes WAL segments only up to the older of the two (see [`CheckpointStore::oldest_offset`]).
//! Every checkpoint passed over is in [`Loaded::passed_over`] with its path and why, for the
//! caller to log; [`inspect`] reads them all without changing anything (`fencewatch wal
//! inspect`).

use crate::wal::fsync_dir;
mod stream;
use std::fs::{self, File};
use std::io::{self, BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
pub use stream::{Pending, PipeReader, PipeWriter, pipe, stream};

/// The first bytes of every checkpoint file.
pub const MAGIC: [u8; 4] = *b"FWCK";
/// The format version written.
pub const VERSION: u32 = 1;
/// Checkpoints kept by [`CheckpointStore::save`].
pub const KEEP: usize = 2;
const HEADER_BYTES: usize = 28;
const PREFIX: &str = "checkpoint-";
const SUFFIX: &str = ".ckpt";
const TMP_SUFFIX: &str = ".ckpt.tmp";

/// A checkpoint store failure.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file system operation failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The IO error.
        #[source]
        source: io::Error,
    },
    /// Checkpoints exist but none verifies: starting from scratch would silently replay from
    /// offset 0 over a WAL that may no longer hold it, so this is an error, not `None`.
    #[error("{dir}: none of the {skipped} checkpoints is valid ({})", reasons.join("; "))]
    NoValidCheckpoint {
        /// The store's directory.
        dir: PathBuf,
        /// Checkpoint files that failed to verify.
        skipped: usize,
        /// Why each was passed over: its file name and the reason.
        reasons: Vec<String>,
    },
}

/// Result of checkpoint operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> Error {
    move |source| Error::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn sync_dir(dir: &Path) -> Result<()> {
    fsync_dir(dir).map_err(io_err(dir))
}

/// A checkpoint loaded by [`CheckpointStore::latest`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Loaded {
    /// The partition offset the state covers: replay from here.
    pub offset: u64,
    /// Newer checkpoint files that failed to verify (or to decode) and were passed over.
    pub skipped_corrupt: usize,
    /// Why newer checkpoints that verified were passed over (their state did not decode).
    pub undecodable: Vec<String>,
    /// Every newer checkpoint passed over, damaged or undecodable, newest first: recovery
    /// steps the caller logs (at WARN).
    pub passed_over: Vec<PassedOver>,
}

/// A checkpoint [`CheckpointStore::latest_decoded`] passed over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PassedOver {
    /// The file.
    pub path: PathBuf,
    /// Its offset.
    pub offset: u64,
    /// Its length.
    pub bytes: u64,
    /// Why (`crc mismatch`, `state does not decode: …`).
    pub reason: String,
}

/// One checkpoint file as [`inspect`] found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointInfo {
    /// The file.
    pub path: PathBuf,
    /// Its offset, from its name.
    pub offset: u64,
    /// Its length.
    pub bytes: u64,
    /// Why it would be passed over, if it would.
    pub problem: Option<String>,
}

/// Checkpoints moved aside because none of them was usable (see
/// `partition::restore::WhenNoneUsable::Quarantine`).
#[derive(Debug, Clone)]
pub struct Quarantined {
    /// Where they are now.
    pub to: PathBuf,
    /// Each as it was found (its old path, offset, size and problem).
    pub checkpoints: Vec<CheckpointInfo>,
}

/// Every checkpoint file in `dir`, newest first, verified and its state given to `decode` (as
/// [`CheckpointStore::latest_decoded`] does: a stream of its bytes, and their length), without
/// changing anything (a missing `dir` has none). The first without a problem is the one
/// [`CheckpointStore::latest_decoded`] restores.
pub fn inspect<T, E: std::fmt::Display>(
    dir: &Path,
    decode: impl Fn(&mut dyn Read, u64) -> Result<T, E>,
) -> Result<Vec<CheckpointInfo>> {
    if !dir.exists() {
        return Ok(Vec::new());
    }
    let mut offsets = Vec::new();
    for entry in fs::read_dir(dir).map_err(io_err(dir))? {
        let name = entry.map_err(io_err(dir))?.file_name();
        if let Some(offset) = name.to_str().and_then(parse_name) {
            offsets.push(offset);
        }
    }
    offsets.sort_unstable_by(|a, b| b.cmp(a));
    let mut out = Vec::with_capacity(offsets.len());
    for offset in offsets {
        let path = dir.join(format!("{PREFIX}{offset:020}{SUFFIX}"));
        let (verified, bytes) = open_verified(&path, offset).map_err(io_err(&path))?;
        let problem = match verified {
            Err(why) => Some(why.to_string()),
            Ok(mut state) => decode(&mut state, bytes - HEADER_BYTES as u64)
                .err()
                .map(|e| format!("state does not decode: {e}")),
        };
        out.push(CheckpointInfo {
            path,
            offset,
            bytes,
            problem,
        });
    }
    Ok(out)
}

/// The checkpoints of one partition, in their own directory.
#[derive(Debug)]
pub struct CheckpointStore {
    dir: PathBuf,
    /// Offsets of the checkpoint files present, ascending.
    offsets: Vec<u64>,
    /// Offsets [`CheckpointStore::latest`] passed over as damaged: the next save deletes them,
    /// so that the valid older checkpoint it fell back to is the one kept beside the new one.
    damaged: Vec<u64>,
}

impl CheckpointStore {
    /// Opens (creating if needed) the store in `dir` and deletes stray `.tmp` files left by a
    /// crash during [`CheckpointStore::save`].
    pub fn open(dir: &Path) -> Result<CheckpointStore> {
        fs::create_dir_all(dir).map_err(io_err(dir))?;
        let mut offsets = Vec::new();
        let mut removed = false;
        for entry in fs::read_dir(dir).map_err(io_err(dir))? {
            let entry = entry.map_err(io_err(dir))?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if name.starts_with(PREFIX) && name.ends_with(TMP_SUFFIX) {
                let path = entry.path();
                fs::remove_file(&path).map_err(io_err(&path))?;
                removed = true;
            } else if let Some(offset) = parse_name(name) {
                offsets.push(offset);
            }
        }
        if removed {
            sync_dir(dir)?;
        }
        offsets.sort_unstable();
        Ok(CheckpointStore {
            dir: dir.to_path_buf(),
            offsets,
            damaged: Vec::new(),
        })
    }

    /// Durably saves `state` as covering the partition up to `offset`: [`CheckpointStore::begin`],
    /// the bytes, [`CheckpointStore::commit`].
    pub fn save(&mut self, offset: u64, state: &[u8]) -> Result<()> {
        let mut pending = self.begin(offset)?;
        if let Err(e) = pending.write_all(state) {
            return Err(io_err(&pending.tmp)(e));
        }
        self.commit(pending).map(drop)
    }

    /// Starts a checkpoint covering the partition up to `offset`: a `.tmp` file that the state's
    /// bytes are written into as they are encoded (see [`Pending`]), made a checkpoint by
    /// [`CheckpointStore::commit`] and deleted if dropped before.
    pub fn begin(&self, offset: u64) -> Result<Pending> {
        let tmp = self.dir.join(format!("{PREFIX}{offset:020}{TMP_SUFFIX}"));
        // The header's place, zeros (no magic) until the commit knows the length and crc.
        let file = File::create(&tmp).and_then(|mut f| f.write_all(&[0; HEADER_BYTES]).map(|()| f));
        match file {
            Ok(file) => Ok(Pending {
                offset,
                tmp,
                file: Some(file),
                buf: Vec::new(),
                crc: crc32fast::Hasher::new(),
                len: 0,
            }),
            Err(e) => {
                let _ = fs::remove_file(&tmp);
                Err(io_err(&tmp)(e))
            }
        }
    }

    /// Makes `pending` a checkpoint, durably: its header (the length and crc of the bytes
    /// written) is written in place, the file fsynced, renamed into place and the directory
    /// fsynced, so a checkpoint is either wholly there or not at all. Then deletes all but the
    /// newest [`KEEP`] checkpoints. Checkpoints with a higher offset than its own are deleted
    /// first: they exist only if [`CheckpointStore::latest`] passed them over as corrupt (or
    /// the caller rewound on purpose), and would otherwise shadow this one. Saving an offset
    /// again replaces that checkpoint atomically. Returns the file's length.
    pub fn commit(&mut self, mut pending: Pending) -> Result<u64> {
        let offset = pending.offset;
        let path = self.path(offset);
        let (tmp, bytes) = match pending.finish() {
            Ok(bytes) => (std::mem::take(&mut pending.tmp), bytes),
            Err(e) => return Err(io_err(&pending.tmp)(e)),
        };
        fs::rename(&tmp, &path).map_err(io_err(&path))?;
        sync_dir(&self.dir)?;
        if let Err(i) = self.offsets.binary_search(&offset) {
            self.offsets.insert(i, offset);
        }
        // Doomed: those latest() passed over as damaged, those newer than this one (only
        // damaged ones can be), and all but the newest KEEP of the rest.
        let damaged = std::mem::take(&mut self.damaged);
        let mut doomed: Vec<u64> = damaged.into_iter().filter(|&o| o != offset).collect();
        self.offsets.retain(|o| !doomed.contains(o));
        let newer = self.offsets.len() - self.offsets.partition_point(|&o| o <= offset);
        let older = self.offsets.len().saturating_sub(newer + KEEP);
        doomed.extend(self.offsets.iter().rev().take(newer));
        doomed.extend(&self.offsets[..older]);
        for &o in &doomed {
            let p = self.path(o);
            match fs::remove_file(&p) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_err(&p)(e)),
            }
            self.offsets.retain(|&x| x != o);
        }
        if !doomed.is_empty() {
            sync_dir(&self.dir)?;
        }
        Ok(bytes)
    }

    /// The newest checkpoint whose header and crc verify, passing over damaged newer ones, with
    /// its state as saved; `None` when there is no checkpoint at all.
    pub fn latest(&mut self) -> Result<Option<(Loaded, Vec<u8>)>> {
        self.latest_decoded(|state, len| {
            let mut out = Vec::with_capacity(len as usize);
            state.read_to_end(&mut out).map_err(|e| e.to_string())?;
            Ok::<_, String>(out)
        })
    }

    /// The newest checkpoint whose header and crc verify and whose state `decode` accepts
    /// (a checkpoint written by a build whose state no longer decodes is passed over like a
    /// damaged one), with what `decode` made of it; `None` when there is no checkpoint at all.
    /// The file is read twice, for its crc and then as a stream of its state's bytes (and
    /// their length) into `decode`: a restore holds what it decodes, not the file as well.
    pub fn latest_decoded<T, E: std::fmt::Display>(
        &mut self,
        decode: impl Fn(&mut dyn Read, u64) -> Result<T, E>,
    ) -> Result<Option<(Loaded, T)>> {
        self.latest_decoded_at_or_below(u64::MAX, decode)
    }

    /// [`CheckpointStore::latest_decoded`] among the checkpoints at offsets up to `bound`
    /// (newer ones are passed over unread, not counted as damaged); `Ok(None)` when none is
    /// there, [`Error::NoValidCheckpoint`] when none there verifies and decodes.
    pub fn latest_decoded_at_or_below<T, E: std::fmt::Display>(
        &mut self,
        bound: u64,
        decode: impl Fn(&mut dyn Read, u64) -> Result<T, E>,
    ) -> Result<Option<(Loaded, T)>> {
        self.damaged.clear();
        let mut undecodable = Vec::new();
        let mut passed_over = Vec::new();
        let upto = self.offsets.partition_point(|&o| o <= bound);
        for (skipped, &offset) in self.offsets[..upto].iter().rev().enumerate() {
            let path = self.path(offset);
            let (verified, bytes) = open_verified(&path, offset).map_err(io_err(&path))?;
            let pass = |reason: String| PassedOver {
                path: path.clone(),
                offset,
                bytes,
                reason,
            };
            let mut state = match verified {
                Ok(state) => state,
                Err(why) => {
                    passed_over.push(pass(why.to_string()));
                    continue;
                }
            };
            match decode(&mut state, bytes - HEADER_BYTES as u64) {
                Ok(value) => {
                    self.damaged = self.offsets[upto - skipped..upto].to_vec();
                    let loaded = Loaded {
                        offset,
                        skipped_corrupt: skipped,
                        undecodable,
                        passed_over,
                    };
                    return Ok(Some((loaded, value)));
                }
                Err(e) => {
                    passed_over.push(pass(format!("state does not decode: {e}")));
                    undecodable.push(format!("{}: {e}", path.display()));
                }
            }
        }
        match upto {
            0 => Ok(None),
            skipped => Err(Error::NoValidCheckpoint {
                dir: self.dir.clone(),
                skipped,
                reasons: passed_over
                    .iter()
                    .map(|p| {
                        let name = p.path.file_name().unwrap_or_default().to_string_lossy();
                        format!("{name}: {}", p.reason)
                    })
                    .collect(),
            }),
        }
    }

    /// Offset of the newest checkpoint file, from its name (not verified: see
    /// [`CheckpointStore::latest`]).
    pub fn latest_offset(&self) -> Option<u64> {
        self.offsets.last().copied()
    }

    /// Offset of the oldest checkpoint kept: the WAL may be truncated up to here, so that a
    /// fall-back to it can still replay.
    pub fn oldest_offset(&self) -> Option<u64> {
        self.offsets.first().copied()
    }

    /// The store's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path(&self, offset: u64) -> PathBuf {
        self.dir.join(format!("{PREFIX}{offset:020}{SUFFIX}"))
    }
}

fn parse_name(name: &str) -> Option<u64> {
    let digits = name.strip_prefix(PREFIX)?.strip_suffix(SUFFIX)?;
    (digits.len() == 20 && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

/// The crc a checkpoint header `h` records for a state of `state_len` bytes, if it is the
/// header of a checkpoint at `offset` of that length.
fn header_crc(h: &[u8], offset: u64, state_len: u64) -> Result<u32, &'static str> {
    let u32_at = |i: usize| u32::from_le_bytes(h[i..i + 4].try_into().expect("4 bytes"));
    let u64_at = |i: usize| u64::from_le_bytes(h[i..i + 8].try_into().expect("8 bytes"));
    if h[0..4] != MAGIC {
        Err("bad magic")
    } else if u32_at(4) != VERSION {
        Err("unknown version")
    } else if u64_at(8) != offset {
        Err("offset in the header differs from the file name")
    } else if u64_at(16) != state_len {
        Err("length differs from the header (torn or damaged)")
    } else {
        Ok(u32_at(24))
    }
}

/// The checkpoint file at `path` verified as [`verify`] does, read once through a small
/// buffer, then its state as a stream (or why it does not verify), and the file's length.
fn open_verified(
    path: &Path,
    offset: u64,
) -> io::Result<(Result<impl Read + use<>, &'static str>, u64)> {
    let mut file = File::open(path)?;
    let len = file.metadata()?.len();
    let mut h = [0; HEADER_BYTES];
    if len < HEADER_BYTES as u64 {
        return Ok((Err("shorter than a header"), len));
    }
    file.read_exact(&mut h)?;
    let state_len = len - HEADER_BYTES as u64;
    let crc = match header_crc(&h, offset, state_len) {
        Ok(crc) => crc,
        Err(why) => return Ok((Err(why), len)),
    };
    let mut hasher = crc32fast::Hasher::new();
    let mut buf = vec![0; 1 << 20];
    let mut read = 0u64;
    loop {
        match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                hasher.update(&buf[..n]);
                read += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    if read != state_len {
        return Ok((Err("length differs from the header (torn or damaged)"), len));
    }
    if hasher.finalize() != crc {
        return Ok((Err("crc mismatch"), len));
    }
    file.seek(SeekFrom::Start(HEADER_BYTES as u64))?;
    Ok((
        Ok(BufReader::with_capacity(1 << 16, file).take(state_len)),
        len,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names of the files in `dir`, sorted.
    pub(super) fn files(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn save_and_load_round_trip_keeping_two() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = CheckpointStore::open(dir.path()).unwrap();
        assert_eq!(store.latest().unwrap(), None);
        assert_eq!(store.latest_offset(), None);
        for offset in [10, 25, 40] {
            store
                .save(offset, format!("state at {offset}").as_bytes())
                .unwrap();
        }
        store.save(41, b"").unwrap();
        assert_eq!(
            files(dir.path()),
            [
                "checkpoint-00000000000000000040.ckpt",
                "checkpoint-00000000000000000041.ckpt"
            ]
        );
        assert_eq!(
            (store.oldest_offset(), store.latest_offset()),
            (Some(40), Some(41))
        );
        let mut store = CheckpointStore::open(dir.path()).unwrap();
        let (loaded, state) = store.latest().unwrap().unwrap();
        assert_eq!(
            (loaded.offset, state, loaded.skipped_corrupt),
            (41, vec![], 0)
        );
    }

    #[test]
    fn a_corrupt_newest_falls_back_to_the_previous() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = CheckpointStore::open(dir.path()).unwrap();
        store.save(7, b"seven").unwrap();
        store.save(9, b"nine").unwrap();
        let newest = store.path(9);
        let mut bytes = fs::read(&newest).unwrap();
        for damage in [0, HEADER_BYTES + 1, 8] {
            let mut bad = bytes.clone();
            bad[damage] ^= 1; // magic, state, offset field
            fs::write(&newest, &bad).unwrap();
            let (loaded, state) = store.latest().unwrap().unwrap();
            assert_eq!(
                (loaded.offset, &state[..], loaded.skipped_corrupt),
                (7, &b"seven"[..], 1)
            );
            let passed = &loaded.passed_over[..];
            assert!(
                matches!(passed, [p] if p.path == newest && p.offset == 9 && p.bytes == bytes.len() as u64),
                "{passed:?}"
            );
        }
        let reasons: Vec<String> = inspect(dir.path(), |_, _| Ok::<_, String>(()))
            .unwrap()
            .into_iter()
            .map(|c| format!("{} {:?}", c.offset, c.problem))
            .collect();
        assert_eq!(
            reasons,
            [
                "9 Some(\"offset in the header differs from the file name\")",
                "7 None"
            ]
        );
        bytes.truncate(HEADER_BYTES + 2); // torn
        fs::write(&newest, &bytes).unwrap();
        assert_eq!(store.latest().unwrap().unwrap().0.offset, 7);
        fs::write(store.path(7), b"FWCK").unwrap();
        let err = store.latest().unwrap_err();
        assert!(
            matches!(err, Error::NoValidCheckpoint { skipped: 2, .. }),
            "{err}"
        );
        let msg = err.to_string();
        assert!(
            msg.contains("none of the 2 checkpoints is valid (")
                && msg.contains("checkpoint-00000000000000000009.ckpt: length differs")
                && msg.contains("checkpoint-00000000000000000007.ckpt: shorter than a header"),
            "{msg}"
        );
        // Recovering from the older one and saving again replaces the damaged newer ones.
        store.save(8, b"eight").unwrap();
        assert_eq!(
            files(dir.path()),
            [
                "checkpoint-00000000000000000007.ckpt",
                "checkpoint-00000000000000000008.ckpt"
            ]
        );
        let (loaded, state) = store.latest().unwrap().unwrap();
        assert_eq!((loaded.offset, &state[..]), (8, &b"eight"[..]));
    }

    #[test]
    fn after_a_fall_back_the_damaged_checkpoint_goes_and_the_valid_one_stays() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = CheckpointStore::open(dir.path()).unwrap();
        store.save(7, b"seven").unwrap();
        store.save(9, b"nine").unwrap();
        let nine = dir.path().join("checkpoint-00000000000000000009.ckpt");
        let mut bytes = fs::read(&nine).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        fs::write(&nine, bytes).unwrap();
        let mut store = CheckpointStore::open(dir.path()).unwrap();
        assert_eq!(store.latest().unwrap().unwrap().0.offset, 7);
        // Replay from 7 went past 9; the next checkpoint is at 12.
        store.save(12, b"twelve").unwrap();
        assert_eq!(
            files(dir.path()),
            [
                "checkpoint-00000000000000000007.ckpt",
                "checkpoint-00000000000000000012.ckpt"
            ]
        );
        assert_eq!(store.oldest_offset(), Some(7));
    }

    #[test]
    fn stray_tmp_files_are_removed_on_open() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = CheckpointStore::open(dir.path()).unwrap();
        store.save(3, b"three").unwrap();
        fs::write(
            dir.path().join("checkpoint-00000000000000000005.ckpt.tmp"),
            b"FWCK half",
        )
        .unwrap();
        fs::write(dir.path().join("unrelated.txt"), b"keep me").unwrap();
        let mut store = CheckpointStore::open(dir.path()).unwrap();
        assert_eq!(
            files(dir.path()),
            ["checkpoint-00000000000000000003.ckpt", "unrelated.txt"]
        );
        assert_eq!(store.latest().unwrap().unwrap().1, b"three");
    }

    #[test]
    fn saving_an_offset_again_replaces_it() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = CheckpointStore::open(dir.path()).unwrap();
        store.save(1, b"a").unwrap();
        store.save(2, b"b").unwrap();
        store.save(2, b"c").unwrap();
        assert_eq!(
            (store.oldest_offset(), store.latest_offset()),
            (Some(1), Some(2))
        );
        assert_eq!(store.latest().unwrap().unwrap().1, b"c");
    }
}
