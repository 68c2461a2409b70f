//! The local write-ahead log: one ordered, offset-addressed partition (SPEC §5) that HTTP, OTLP
//! and file ingest append to, and that the service replays from a checkpoint's offset.
//!
//! Offsets count items (events), as Kafka offsets count messages: a record is one appended
//! batch of `items > 0` events with an opaque payload, and the next record starts at
//! `base + items`. The log is a directory of segment files, each named by the base offset of
//! its first record (`00000000000000000000.wal`), each a run of records, integers little-endian:
//!
//! ```text
//! "FWL1" (0x46574C31) | payload_len u32 | base u64 | items u32 | crc32(base, items, payload) u32 | payload
//! ```
//!
//! Appends are buffered; [`Wal::sync`] flushes and fsyncs them all at once (group commit), and
//! only synced records may be acknowledged. A crash can therefore only lose a suffix of the
//! last segment that was never synced: closed segments are synced before the next is created.
//!
//! ## Recovery: torn or corrupt
//!
//! [`Wal::open`] verifies every record. The first invalid record of the **last** segment (at
//! byte `pos`) starts a *torn tail*, cut off with [`TornTail`] saying what and how much, only
//! when an interrupted append explains it:
//!
//! 1. no whole valid record (magic, length within the file, crc) starts at **any byte
//!    position** after `pos` — a valid record further on means the bad one was written whole
//!    and damaged later, so everything after it was acknowledged; and
//! 2. the bytes from `pos` are a proper prefix of a record as this log writes them: a partial
//!    header agreeing with the magic, or a header with the magic, the expected base offset and
//!    `items > 0` whose declared length runs past the end of the file (and no length differing
//!    from it in one byte makes the record verify: that is a damaged length field, not a
//!    torn write); or
//! 3. *zero fill*: the bytes from `pos` are all zeros, or are such a prefix followed by zeros
//!    to the end of the file from a 512-byte boundary inside the record. A filesystem may
//!    persist a crashed extending write's new size but not its blocks (older XFS, ext4 with
//!    `data=writeback`), which reads back as whole blocks of zeros; every block size is a
//!    multiple of 512. Zeros that start mid-sector and cover no sector boundary are not what
//!    a filesystem leaves (a page is written whole), so they are damage.
//!
//! Everything else is [`Error::Corrupt`], naming the segment and byte: a whole-length record
//! with a bad crc, a bad magic, garbage after the last record, a bad record with valid ones
//! after it, and any invalid record in a segment before the last. Then nothing is changed:
//! [`Wal::open_unrecovered`] validates without writing, so that the caller can still refuse
//! (say, because a checkpoint is ahead of the log) before [`Wal::finish_recovery`] cuts the
//! tail. The operator's way out is `fencewatch wal inspect` and `fencewatch wal repair`
//! ([`inspect`], [`repair`]), which quarantines a copy of every segment it changes.
//!
//! The rule errs towards refusing: a torn append whose payload happened to hold a valid record
//! of its own (a client can post one) is taken for corruption, and the service does not start
//! until an operator repairs; it never cuts a record that a later valid record proves was
//! written whole. What it cannot tell from a crash is damage that looks exactly like one: the
//! last record's end zeroed from a 512-byte boundary on (a lost write of the last sector), or
//! its length field changed in more than one byte so that it runs past the end of the file.
//! No single changed byte passes for a torn tail unless it turns the last nonzero byte of the
//! file into a zero that way.
//!
//! Deleted segments are noticed: a gap in offsets between segments is corrupt, and a
//! `wal.head` file, rewritten (atomically) each time a segment is created, names the newest
//! segment, so a missing last segment is [`Error::MissingSegment`] rather than a shorter log.
//! (Events after the newest checkpoint exist nowhere else; the checkpoint's own offset is
//! checked against the end of the log by the partition.)
//!
//! A `wal.lock` file, locked while the log is open, keeps a second writer out.

pub mod inspect;
mod reader;
pub mod repair;
mod tail;

pub use reader::WalReader;
use reader::{Cursor, Step};

use std::collections::VecDeque;
use std::fs::{self, File, OpenOptions, TryLockError};
use std::io::{self, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

/// The first bytes of every record: ASCII `FWL1`, 0x46574C31 read big-endian.
pub const MAGIC: [u8; 4] = *b"FWL1";
/// Bytes of a record header.
pub const HEADER_BYTES: u64 = 24;
const LOCK_FILE: &str = "wal.lock";
/// The file naming the newest segment's base offset.
pub const HEAD_FILE: &str = "wal.head";
const WRITE_BUFFER: usize = 256 * 1024;
const READ_BUFFER: usize = 64 * 1024;

/// A WAL failure.
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
    /// Data before the tail of the log is damaged, or offsets have a gap.
    #[error("{path}: corrupt at byte {offset}: {reason}")]
    Corrupt {
        /// The segment file.
        path: PathBuf,
        /// Byte position in the file of the bad record (0 for a gap before the segment).
        offset: u64,
        /// What is wrong.
        reason: String,
    },
    /// `wal.head` names a segment newer than the newest one present: trailing segments were
    /// deleted, and with them acknowledged events.
    #[error(
        "{path}: the newest segment {expected:020}.wal is missing (the newest present starts at offset {newest}): acknowledged events at offsets from {newest_end} on were deleted"
    )]
    MissingSegment {
        /// The head file.
        path: PathBuf,
        /// The base offset it names.
        expected: u64,
        /// The newest segment present (0 when there is none).
        newest: u64,
        /// The end of the log as it is.
        newest_end: u64,
    },
    /// [`Wal::open_unrecovered`] was not followed by [`Wal::finish_recovery`].
    #[error("the log was opened for recovery: finish it before appending")]
    RecoveryPending,
    /// Another process (or another [`Wal`] in this one) has the log open.
    #[error("{path}: the log is open elsewhere")]
    Locked {
        /// The lock file.
        path: PathBuf,
    },
    /// A record must advance the offset.
    #[error("a record must hold at least one item")]
    EmptyRecord,
    /// Payloads are at most `u32::MAX` bytes.
    #[error("payload of {0} bytes exceeds the record limit of 4 GiB")]
    PayloadTooLarge(usize),
    /// The offset would pass `u64::MAX`.
    #[error("offset overflow")]
    OffsetOverflow,
    /// A replay asked for an offset whose segment was removed.
    #[error("offset {requested} was removed, the log starts at {first}")]
    Removed {
        /// The requested offset.
        requested: u64,
        /// The oldest offset still in the log.
        first: u64,
    },
    /// An earlier write or sync failed, so what reached the disk is unknown; reopen the log.
    #[error("an earlier write or sync failed, reopen the log")]
    Poisoned,
}

/// Result of WAL operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> Error {
    move |source| Error::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// How a [`Wal`] is laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WalOptions {
    /// A new segment is started before an append once the active one holds this many bytes.
    pub segment_bytes: u64,
}

impl Default for WalOptions {
    fn default() -> Self {
        WalOptions {
            segment_bytes: 64 << 20,
        }
    }
}

/// One record: a batch of `items` events at offsets `base..base + items`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Offset of the first item.
    pub base: u64,
    /// Items in the batch (at least 1).
    pub items: u32,
    /// The opaque payload as appended.
    pub payload: Vec<u8>,
}

impl Record {
    /// The offset after the record's last item: the next record's base.
    pub fn end(&self) -> u64 {
        self.base + u64::from(self.items)
    }
}

#[derive(Debug)]
struct Segment {
    base: u64,
    /// Offset after the last record.
    end: u64,
    /// Length in bytes, including appends still buffered.
    bytes: u64,
    path: PathBuf,
}

/// A torn tail found by [`Wal::open_unrecovered`] and cut by [`Wal::finish_recovery`]: the
/// bytes of an append that a crash interrupted, never acknowledged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TornTail {
    /// The segment file.
    pub path: PathBuf,
    /// Byte position of the torn record: the file is cut to this length.
    pub byte: u64,
    /// Bytes cut.
    pub bytes: u64,
    /// The log offset the torn record would have had (the next append's).
    pub offset: u64,
    /// What it looked like (`short record`, `zero-filled tail`, …).
    pub reason: &'static str,
}

/// One partition's write-ahead log, open for appending. See the [module docs](self).
#[derive(Debug)]
pub struct Wal {
    dir: PathBuf,
    opts: WalOptions,
    closed: Vec<Segment>,
    active: Segment,
    /// `None` until [`Wal::finish_recovery`].
    writer: Option<BufWriter<File>>,
    synced_bytes: u64,
    durable: u64,
    torn: Option<TornTail>,
    /// Whether the active segment's file exists (an empty log gets its first one on recovery).
    active_exists: bool,
    /// What `wal.head` says, if it exists.
    head: Option<u64>,
    poisoned: bool,
    _lock: File,
}

impl Wal {
    /// Opens (creating if needed) the log in `dir`, validates every record and cuts a torn tail
    /// of the last segment ([`Wal::open_unrecovered`] then [`Wal::finish_recovery`]).
    /// Everything recovered is fsynced before this returns.
    pub fn open(dir: &Path, opts: WalOptions) -> Result<Wal> {
        let mut wal = Wal::open_unrecovered(dir, opts)?;
        wal.finish_recovery()?;
        Ok(wal)
    }

    /// Locks and validates the log in `dir` without changing any segment: a torn tail is found
    /// ([`Wal::torn_tail`]) but not cut, an empty log gets no segment yet. The log can be read
    /// ([`Wal::read_from`] stops before the torn tail); appends wait for
    /// [`Wal::finish_recovery`]. Dropping it instead leaves the files as they were.
    pub fn open_unrecovered(dir: &Path, opts: WalOptions) -> Result<Wal> {
        let lock = lock(dir)?;
        let head = read_head(dir)?;
        let bases = list_segments(dir)?;
        let active_exists = !bases.is_empty();
        let mut closed: Vec<Segment> = Vec::with_capacity(bases.len());
        let mut torn = None;
        for (i, &base) in bases.iter().enumerate() {
            let path = segment_path(dir, base);
            if let Some(prev) = closed.last()
                && prev.end != base
            {
                return Err(gap(path, base, prev.end));
            }
            let mut c = Cursor::open(path, base, None)?;
            let invalid = loop {
                match c.next_record(false)? {
                    Step::Record(_) => {}
                    Step::End => break None,
                    Step::Invalid(reason) => break Some(reason),
                }
            };
            if let Some(reason) = invalid {
                if i + 1 < bases.len() {
                    return Err(corrupt(&c.path, c.pos, reason));
                }
                let bytes = read_range(&c.path, c.pos, c.limit)?;
                match tail::classify(&bytes, c.pos, c.next_base) {
                    tail::Tail::Corrupt(why) => return Err(corrupt(&c.path, c.pos, why)),
                    tail::Tail::Torn(why) => {
                        torn = Some(TornTail {
                            path: c.path.clone(),
                            byte: c.pos,
                            bytes: c.limit - c.pos,
                            offset: c.next_base,
                            reason: why,
                        });
                    }
                }
            }
            closed.push(Segment {
                base,
                end: c.next_base,
                bytes: c.pos,
                path: c.path,
            });
        }
        let active = closed.pop().unwrap_or_else(|| Segment {
            base: 0,
            end: 0,
            bytes: 0,
            path: segment_path(dir, 0),
        });
        if let Some(expected) = head
            && (!active_exists || active.base < expected)
        {
            return Err(Error::MissingSegment {
                path: dir.join(HEAD_FILE),
                expected,
                newest: if active_exists { active.base } else { 0 },
                newest_end: active.end,
            });
        }
        Ok(Wal {
            dir: dir.to_path_buf(),
            opts,
            synced_bytes: active.bytes,
            durable: active.end,
            closed,
            active,
            writer: None,
            torn,
            active_exists,
            head,
            poisoned: false,
            _lock: lock,
        })
    }

    /// Cuts the torn tail [`Wal::open_unrecovered`] found (if any), creates the first segment
    /// of an empty log, makes the active segment durable and opens it for appending. Returns
    /// the tail it cut. Idempotent.
    pub fn finish_recovery(&mut self) -> Result<Option<&TornTail>> {
        if self.writer.is_some() {
            return Ok(self.torn.as_ref());
        }
        let path = self.active.path.clone();
        if !self.active_exists {
            drop(create_segment(&self.dir, self.active.base)?);
            self.active_exists = true;
        }
        if let Some(t) = &self.torn {
            let file = OpenOptions::new().write(true).open(&t.path);
            (file.and_then(|f| f.set_len(t.byte).and_then(|()| f.sync_all())))
                .map_err(io_err(&t.path))?;
        }
        let file = (OpenOptions::new().append(true).open(&path)).map_err(io_err(&path))?;
        // Whatever the previous process left in the page cache becomes durable now.
        file.sync_all().map_err(io_err(&path))?;
        if self.head != Some(self.active.base) {
            write_head(&self.dir, self.active.base)?;
            self.head = Some(self.active.base);
        }
        self.writer = Some(BufWriter::with_capacity(WRITE_BUFFER, file));
        Ok(self.torn.as_ref())
    }

    /// The torn tail found on open (cut once [`Wal::finish_recovery`] ran).
    pub fn torn_tail(&self) -> Option<&TornTail> {
        self.torn.as_ref()
    }

    /// Appends one record of `items` (at least 1) events and returns its base offset. The record
    /// is buffered, not durable: acknowledge it only after [`Wal::sync`].
    pub fn append(&mut self, items: u32, payload: &[u8]) -> Result<u64> {
        if items == 0 {
            return Err(Error::EmptyRecord);
        }
        let len =
            u32::try_from(payload.len()).map_err(|_| Error::PayloadTooLarge(payload.len()))?;
        self.guard(|w| {
            if w.active.bytes > 0 && w.active.bytes >= w.opts.segment_bytes {
                w.roll()?;
            }
            let base = w.active.end;
            let end = base
                .checked_add(u64::from(items))
                .ok_or(Error::OffsetOverflow)?;
            let header = encode_header(base, items, payload);
            let writer = w.writer.as_mut().ok_or(Error::RecoveryPending)?;
            (writer.write_all(&header))
                .and_then(|()| writer.write_all(payload))
                .map_err(io_err(&w.active.path))?;
            w.active.bytes += HEADER_BYTES + u64::from(len);
            w.active.end = end;
            Ok(base)
        })
    }

    /// Flushes every appended record and fsyncs (`fdatasync`) the active segment: afterwards
    /// [`Wal::durable_offset`] equals [`Wal::next_offset`].
    pub fn sync(&mut self) -> Result<()> {
        self.guard(|w| {
            if w.synced_bytes == w.active.bytes {
                return Ok(());
            }
            let path = &w.active.path;
            let writer = w.writer.as_mut().ok_or(Error::RecoveryPending)?;
            writer.flush().map_err(io_err(path))?;
            writer.get_ref().sync_data().map_err(io_err(path))?;
            w.synced_bytes = w.active.bytes;
            w.durable = w.active.end;
            Ok(())
        })
    }

    /// Reads every durable record whose range ends after `offset`, in order; a record holding
    /// `offset` in its middle is yielded whole. The reader opens the files itself, so the log
    /// can go on appending; it stops at [`Wal::durable_offset`] as of this call (sync first to
    /// include everything appended). Segments that [`Wal::remove_before`] deletes before the
    /// reader reaches them make it fail.
    pub fn read_from(&self, offset: u64) -> Result<WalReader> {
        let first = self.first_offset();
        if offset < first {
            return Err(Error::Removed {
                requested: offset,
                first,
            });
        }
        let mut pending: VecDeque<_> = (self.closed.iter())
            .filter(|s| s.end > offset)
            .map(|s| (s.base, s.path.clone(), s.bytes))
            .collect();
        if self.durable > offset && self.synced_bytes > 0 {
            pending.push_back((
                self.active.base,
                self.active.path.clone(),
                self.synced_bytes,
            ));
        }
        Ok(WalReader::new(pending, offset))
    }

    /// Deletes the closed segments whose every record ends at or before `offset` (say, the
    /// offset of a durable checkpoint), oldest first; the active segment always stays. Returns
    /// the bytes freed.
    pub fn remove_before(&mut self, offset: u64) -> Result<u64> {
        let mut freed = 0;
        while let Some(s) = self.closed.first()
            && s.end <= offset
        {
            match fs::remove_file(&s.path) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_err(&s.path)(e)),
            }
            // One directory sync per removal: a later unlink must never outlive an earlier
            // one, or the next open would see a gap.
            sync_dir(&self.dir)?;
            freed += s.bytes;
            self.closed.remove(0);
        }
        Ok(freed)
    }

    /// The base offset the next append gets.
    pub fn next_offset(&self) -> u64 {
        self.active.end
    }

    /// Every record ending at or before this offset is synced to disk.
    pub fn durable_offset(&self) -> u64 {
        self.durable
    }

    /// The oldest offset still in the log (segments before it were removed).
    pub fn first_offset(&self) -> u64 {
        self.closed.first().map_or(self.active.base, |s| s.base)
    }

    /// Bytes of all segments, counting appends not yet flushed.
    pub fn bytes_on_disk(&self) -> u64 {
        self.closed.iter().map(|s| s.bytes).sum::<u64>() + self.active.bytes
    }

    /// Segment files, the active one included.
    pub fn segments(&self) -> usize {
        self.closed.len() + 1
    }

    /// Bytes of the torn tail [`Wal::open`] cut from the last segment (0 when none).
    pub fn recovered_tail_bytes(&self) -> u64 {
        self.torn.as_ref().map_or(0, |t| t.bytes)
    }

    /// The log's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Runs a write path; an IO failure poisons the log, since what reached the disk (and
    /// whether a failed fsync can be retried) is unknown.
    fn guard<T>(&mut self, f: impl FnOnce(&mut Self) -> Result<T>) -> Result<T> {
        if self.poisoned {
            return Err(Error::Poisoned);
        }
        if self.writer.is_none() {
            return Err(Error::RecoveryPending);
        }
        let r = f(self);
        if let Err(Error::Io { .. }) = r {
            self.poisoned = true;
        }
        r
    }

    /// Makes the active segment durable and closed, and starts a new one at the next offset.
    fn roll(&mut self) -> Result<()> {
        self.sync()?;
        let base = self.active.end;
        let file = create_segment(&self.dir, base)?;
        write_head(&self.dir, base)?;
        self.head = Some(base);
        let path = segment_path(&self.dir, base);
        let old = std::mem::replace(
            &mut self.active,
            Segment {
                base,
                end: base,
                bytes: 0,
                path,
            },
        );
        self.closed.push(old);
        self.writer = Some(BufWriter::with_capacity(WRITE_BUFFER, file));
        self.synced_bytes = 0;
        Ok(())
    }
}

/// Creates `dir` if needed and takes the log's lock, held until the file is dropped: what
/// [`Wal::open`] does first, for tools that change the files (`fencewatch wal repair`).
pub fn lock(dir: &Path) -> Result<File> {
    fs::create_dir_all(dir).map_err(io_err(dir))?;
    let lock_path = dir.join(LOCK_FILE);
    let lock = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(io_err(&lock_path))?;
    match lock.try_lock() {
        Ok(()) => Ok(lock),
        Err(TryLockError::WouldBlock) => Err(Error::Locked { path: lock_path }),
        Err(TryLockError::Error(e)) => Err(io_err(&lock_path)(e)),
    }
}

/// Whether another process holds the lock of the log in `dir` (without creating anything).
pub fn is_locked(dir: &Path) -> bool {
    File::open(dir.join(LOCK_FILE))
        .is_ok_and(|f| matches!(f.try_lock_shared(), Err(TryLockError::WouldBlock)))
}

pub(crate) fn segment_path(dir: &Path, base: u64) -> PathBuf {
    dir.join(format!("{base:020}.wal"))
}

/// Base offsets of the segment files in `dir`, ascending.
pub(crate) fn list_segments(dir: &Path) -> Result<Vec<u64>> {
    let mut bases = Vec::new();
    for entry in fs::read_dir(dir).map_err(io_err(dir))? {
        let name = entry.map_err(io_err(dir))?.file_name();
        let Some(stem) = name.to_str().and_then(|n| n.strip_suffix(".wal")) else {
            continue;
        };
        if stem.len() == 20
            && stem.bytes().all(|b| b.is_ascii_digit())
            && let Ok(base) = stem.parse()
        {
            bases.push(base);
        }
    }
    bases.sort_unstable();
    Ok(bases)
}

/// Creates an empty segment and makes its directory entry durable.
fn create_segment(dir: &Path, base: u64) -> Result<File> {
    let path = segment_path(dir, base);
    let file =
        (OpenOptions::new().append(true).create_new(true).open(&path)).map_err(io_err(&path))?;
    sync_dir(dir)?;
    Ok(file)
}

fn sync_dir(dir: &Path) -> Result<()> {
    fsync_dir(dir).map_err(io_err(dir))
}

/// What `wal.head` in `dir` names, if the file exists.
pub(crate) fn read_head(dir: &Path) -> Result<Option<u64>> {
    let path = dir.join(HEAD_FILE);
    match fs::read_to_string(&path) {
        Ok(text) => match text.trim().parse() {
            Ok(base) => Ok(Some(base)),
            Err(_) => Err(corrupt(&path, 0, "not a segment offset")),
        },
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_err(&path)(e)),
    }
}

/// Atomically makes `wal.head` in `dir` name the segment at `base`.
pub(crate) fn write_head(dir: &Path, base: u64) -> Result<()> {
    let path = dir.join(HEAD_FILE);
    let tmp = dir.join(format!("{HEAD_FILE}.tmp"));
    let write = || -> io::Result<()> {
        let mut f = File::create(&tmp)?;
        writeln!(f, "{base:020}")?;
        f.sync_all()?;
        fs::rename(&tmp, &path)
    };
    write().map_err(io_err(&path))?;
    sync_dir(dir)
}

/// Bytes `from..to` of a file.
pub(crate) fn read_range(path: &Path, from: u64, to: u64) -> Result<Vec<u8>> {
    use std::io::{Seek, SeekFrom};
    let mut f = File::open(path).map_err(io_err(path))?;
    f.seek(SeekFrom::Start(from)).map_err(io_err(path))?;
    let mut buf = Vec::with_capacity((to - from) as usize);
    (f.take(to - from).read_to_end(&mut buf)).map_err(io_err(path))?;
    Ok(buf)
}

/// Fsyncs a directory, making the creation, renaming and removal of its entries durable.
pub(crate) fn fsync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

pub(crate) fn encode_header(base: u64, items: u32, payload: &[u8]) -> [u8; HEADER_BYTES as usize] {
    let mut h = [0; HEADER_BYTES as usize];
    h[0..4].copy_from_slice(&MAGIC);
    h[4..8].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    h[8..16].copy_from_slice(&base.to_le_bytes());
    h[16..20].copy_from_slice(&items.to_le_bytes());
    let mut crc = crc32fast::Hasher::new();
    crc.update(&h[8..20]);
    crc.update(payload);
    h[20..24].copy_from_slice(&crc.finalize().to_le_bytes());
    h
}

pub(crate) fn corrupt(path: &Path, offset: u64, reason: impl Into<String>) -> Error {
    let (path, reason) = (path.to_path_buf(), reason.into());
    Error::Corrupt {
        path,
        offset,
        reason,
    }
}

fn gap(path: PathBuf, base: u64, prev_end: u64) -> Error {
    corrupt(
        &path,
        0,
        format!("segment starts at offset {base}, previous ends at {prev_end}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const SMALL: WalOptions = WalOptions { segment_bytes: 100 };

    fn payload(i: usize) -> Vec<u8> {
        (0..(i * 7) % 50).map(|b| (b + i) as u8).collect()
    }

    /// Appends records `items[i]` with `payload(i)`, returns their base offsets.
    fn fill(wal: &mut Wal, items: &[u32]) -> Vec<u64> {
        let bases: Vec<u64> = (items.iter().enumerate())
            .map(|(i, &n)| wal.append(n, &payload(i)).unwrap())
            .collect();
        wal.sync().unwrap();
        bases
    }

    fn read_all(wal: &Wal, from: u64) -> Vec<Record> {
        wal.read_from(from).unwrap().collect::<Result<_>>().unwrap()
    }

    fn segment_files(dir: &Path) -> Vec<PathBuf> {
        let bases = list_segments(dir).unwrap();
        bases.into_iter().map(|b| segment_path(dir, b)).collect()
    }

    #[test]
    fn round_trip_across_segments() {
        let dir = tempfile::tempdir().unwrap();
        let items: Vec<u32> = (0..20).map(|i| i % 4 + 1).collect();
        let mut wal = Wal::open(dir.path(), SMALL).unwrap();
        assert_eq!((wal.next_offset(), wal.segments()), (0, 1));
        assert_eq!(
            wal.append(0, b"x").unwrap_err().to_string(),
            "a record must hold at least one item"
        );
        let bases = fill(&mut wal, &items);
        let end: u64 = items.iter().map(|&n| u64::from(n)).sum();
        assert_eq!((wal.next_offset(), wal.durable_offset()), (end, end));
        assert!(wal.segments() > 3);
        let files = segment_files(dir.path());
        assert_eq!(files.len(), wal.segments());
        let total: u64 = files.iter().map(|f| fs::metadata(f).unwrap().len()).sum();
        assert_eq!(wal.bytes_on_disk(), total);
        assert!(matches!(
            Wal::open(dir.path(), SMALL),
            Err(Error::Locked { .. })
        ));
        drop(wal);

        let wal = Wal::open(dir.path(), SMALL).unwrap();
        assert_eq!((wal.next_offset(), wal.recovered_tail_bytes()), (end, 0));
        let all = read_all(&wal, 0);
        assert_eq!(all.len(), items.len());
        for (i, r) in all.iter().enumerate() {
            assert_eq!(
                (r.base, r.items, &r.payload),
                (bases[i], items[i], &payload(i))
            );
        }
        // In the middle of a record: that record whole, then the rest.
        let mid = all.iter().position(|r| r.items > 1).unwrap();
        let got = read_all(&wal, all[mid].base + 1);
        assert_eq!(got, all[mid..]);
        // At every segment boundary.
        for base in list_segments(dir.path()).unwrap() {
            let first = all.iter().position(|r| r.base == base).unwrap();
            assert_eq!(read_all(&wal, base), all[first..]);
        }
        assert!(read_all(&wal, end).is_empty());
    }

    #[test]
    fn reads_durable_records_while_appending() {
        let dir = tempfile::tempdir().unwrap();
        let mut wal = Wal::open(dir.path(), SMALL).unwrap();
        fill(&mut wal, &[1, 2, 3]);
        wal.append(5, b"not yet synced").unwrap();
        let reader = wal.read_from(0).unwrap();
        wal.append(1, b"later").unwrap();
        wal.sync().unwrap();
        assert_eq!(
            reader.map(|r| r.unwrap().end()).collect::<Vec<_>>(),
            [1, 3, 6]
        );
        assert_eq!(read_all(&wal, 0).last().unwrap().end(), 12);
    }

    /// Puts the last segment back as `full` after an open that may have appended and rolled.
    fn restore_last(dir: &Path, last: &Path, full: &[u8]) {
        fs::write(last, full).unwrap();
        for f in segment_files(dir).into_iter().filter(|f| *f > last) {
            fs::remove_file(f).unwrap(); // the append rolled
        }
        let base = list_segments(dir).unwrap().pop().unwrap();
        write_head(dir, base).unwrap();
    }

    #[test]
    fn torn_tail_is_cut_at_every_byte() {
        let dir = tempfile::tempdir().unwrap();
        let items = [3, 1, 4, 1, 5, 9, 2, 6];
        let mut wal = Wal::open(dir.path(), SMALL).unwrap();
        fill(&mut wal, &items);
        let end = wal.next_offset();
        drop(wal);
        let last = segment_files(dir.path()).pop().unwrap();
        let full = fs::read(&last).unwrap();
        let last_len = HEADER_BYTES as usize + payload(items.len() - 1).len();
        let keep = full.len() - last_len;
        // The last record cut at every byte; zeros instead of it (a zero fill from inside a
        // record is in `tail`'s tests: these records are shorter than a sector); zeros and a
        // partial header after it.
        let mut cases: Vec<Vec<u8>> = (keep + 1..full.len())
            .map(|cut| full[..cut].to_vec())
            .collect();
        cases.push([&full[..keep], &[0; 1000]].concat());
        cases.push([&full[..], &[0; 7]].concat());
        cases.push([&full[..], &[0; 700]].concat());
        cases.push([&full[..], &MAGIC[..3]].concat());
        for case in cases {
            fs::write(&last, &case).unwrap();
            let (good, good_end) = if case.len() > full.len() && case[..full.len()] == full[..] {
                (full.len(), end)
            } else {
                (keep, end - 6)
            };
            // Validating alone changes nothing.
            let wal = Wal::open_unrecovered(dir.path(), SMALL).unwrap();
            let torn = wal.torn_tail().unwrap().clone();
            assert_eq!((torn.path, torn.byte), (last.clone(), good as u64));
            assert_eq!(torn.bytes, (case.len() - good) as u64);
            assert_eq!(torn.offset, good_end);
            assert_eq!(read_all(&wal, 0).last().unwrap().end(), good_end);
            drop(wal);
            assert_eq!(fs::read(&last).unwrap(), case);

            let mut wal = Wal::open(dir.path(), SMALL).unwrap();
            assert_eq!(wal.recovered_tail_bytes(), (case.len() - good) as u64);
            assert_eq!(fs::metadata(&last).unwrap().len(), good as u64);
            assert_eq!(wal.next_offset(), good_end);
            let all = read_all(&wal, 0);
            assert_eq!(all.len(), items.len() - usize::from(good_end < end));
            assert_eq!(wal.append(2, b"next").unwrap(), good_end);
            wal.sync().unwrap();
            drop(wal);
            restore_last(dir.path(), &last, &full);
        }
    }

    #[test]
    fn damage_in_the_last_segment_refuses_to_open_and_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let mut wal = Wal::open(dir.path(), SMALL).unwrap();
        fill(&mut wal, &[3, 1, 4, 1, 5, 9, 2, 6]);
        drop(wal);
        let last = segment_files(dir.path()).pop().unwrap();
        let full = fs::read(&last).unwrap();
        // Where each record of the segment starts.
        let mut starts = vec![0];
        while *starts.last().unwrap() < full.len() {
            let at = *starts.last().unwrap();
            starts.push(at + tail::record_at(&full, at).unwrap().bytes());
        }
        starts.pop();
        assert!(starts.len() >= 2);
        let mut cases = Vec::new();
        for i in 0..full.len() {
            let mut bad = full.clone();
            // Changed, never to zero (a zeroed end of the log can pass for a zero fill).
            bad[i] = if full[i] == 0x21 {
                0x20
            } else {
                full[i] ^ 0x21
            };
            let record = *starts.iter().filter(|&&s| s <= i).max().unwrap();
            cases.push((bad, record as u64));
        }
        // Garbage after the last record, and a partial header that is not one.
        cases.push((
            [&full[..], b"garbage that is longer than a header"].concat(),
            full.len() as u64,
        ));
        cases.push(([&full[..], b"FWX"].concat(), full.len() as u64));
        for (case, at) in cases {
            fs::write(&last, &case).unwrap();
            let err = match Wal::open(dir.path(), SMALL) {
                Ok(_) => panic!("opened with damage in the record at {at}: {case:?} vs {full:?}"),
                Err(e) => e,
            };
            assert!(
                matches!(&err, Error::Corrupt { path, offset, .. } if *path == last && *offset == at),
                "damage in the record at byte {at}: {err}"
            );
            assert_eq!(fs::read(&last).unwrap(), case, "{err}");
        }
        fs::write(&last, &full).unwrap();
        let wal = Wal::open(dir.path(), SMALL).unwrap();
        assert_eq!(wal.recovered_tail_bytes(), 0);
    }

    #[test]
    fn a_deleted_last_segment_is_noticed() {
        let dir = tempfile::tempdir().unwrap();
        let mut wal = Wal::open(dir.path(), SMALL).unwrap();
        fill(&mut wal, &[1; 12]);
        assert!(wal.segments() >= 3);
        drop(wal);
        let files = segment_files(dir.path());
        fs::remove_file(files.last().unwrap()).unwrap();
        let err = Wal::open(dir.path(), SMALL).unwrap_err();
        assert!(matches!(err, Error::MissingSegment { .. }), "{err}");
        assert!(err.to_string().contains("is missing"), "{err}");
        for f in &files[..files.len() - 1] {
            fs::remove_file(f).unwrap();
        }
        let err = Wal::open(dir.path(), SMALL).unwrap_err();
        assert!(
            matches!(err, Error::MissingSegment { newest: 0, .. }),
            "{err}"
        );
        assert!(segment_files(dir.path()).is_empty());
    }

    #[test]
    fn damage_before_the_tail_refuses_to_open() {
        let dir = tempfile::tempdir().unwrap();
        let mut wal = Wal::open(dir.path(), WalOptions { segment_bytes: 200 }).unwrap();
        fill(&mut wal, &[1; 12]);
        assert!(wal.segments() >= 2);
        drop(wal);
        let first = segment_files(dir.path()).remove(0);
        let original = fs::read(&first).unwrap();
        let mut bytes = original.clone();
        bytes[2 * HEADER_BYTES as usize + 2] ^= 0x40; // a payload byte of the second record
        fs::write(&first, &bytes).unwrap();
        let err = Wal::open(dir.path(), SMALL).unwrap_err();
        assert!(
            matches!(&err, Error::Corrupt { path, offset: 24, .. } if *path == first),
            "{err}"
        );
        assert!(
            err.to_string()
                .ends_with("corrupt at byte 24: crc mismatch"),
            "{err}"
        );
        // A missing middle segment is a gap.
        fs::write(&first, &original).unwrap();
        fs::remove_file(&segment_files(dir.path())[1]).unwrap();
        let err = Wal::open(dir.path(), SMALL).unwrap_err();
        assert!(err.to_string().contains("previous ends at"), "{err}");
    }

    #[test]
    fn remove_before_keeps_the_active_segment_and_the_next_offset() {
        let dir = tempfile::tempdir().unwrap();
        let mut wal = Wal::open(dir.path(), SMALL).unwrap();
        fill(&mut wal, &[2; 20]);
        let segs = wal.segments();
        let bases = list_segments(dir.path()).unwrap();
        // Up to the middle of the third segment: only the first two go.
        let bytes = wal.bytes_on_disk();
        let freed = wal.remove_before(bases[2] + 1).unwrap();
        assert_eq!(wal.segments(), segs - 2);
        assert_eq!(wal.bytes_on_disk(), bytes - freed);
        assert_eq!(list_segments(dir.path()).unwrap(), bases[2..]);
        assert_eq!(wal.first_offset(), bases[2]);
        assert!(
            matches!(wal.read_from(bases[2] - 1), Err(Error::Removed { first, .. }) if first == bases[2])
        );
        assert_eq!(read_all(&wal, bases[2] + 1)[0].base, bases[2]);
        // Everything: the active segment stays, even empty after a roll.
        let next = wal.next_offset();
        wal.remove_before(u64::MAX).unwrap();
        assert_eq!(wal.segments(), 1);
        drop(wal);
        let mut wal = Wal::open(dir.path(), SMALL).unwrap();
        assert_eq!(wal.next_offset(), next);
        assert_eq!(wal.first_offset(), *bases.last().unwrap());
        let base = wal.append(3, b"abc").unwrap();
        wal.sync().unwrap();
        assert_eq!(base, next);
        assert_eq!(read_all(&wal, next).len(), 1);
    }

    #[test]
    fn an_empty_only_segment_keeps_its_base() {
        let dir = tempfile::tempdir().unwrap();
        File::create(segment_path(dir.path(), 42)).unwrap();
        let mut wal = Wal::open(dir.path(), SMALL).unwrap();
        assert_eq!((wal.next_offset(), wal.first_offset()), (42, 42));
        assert!(read_all(&wal, 42).is_empty());
        assert_eq!(wal.append(1, b"").unwrap(), 42);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        /// A crash keeps every synced byte and loses any suffix of the rest; a filesystem may
        /// also persist the size but not the data of whole sectors at the end (zeros), or keep
        /// an earlier synced state of the last block (zeros from a record boundary).
        #[test]
        fn crash_recovers_a_prefix_holding_every_synced_record(
            batches in prop::collection::vec((1u32..5, prop::collection::vec(any::<u8>(), 0..200)), 1..30),
            synced in 0usize..30,
            cut in any::<prop::sample::Index>(),
            zero_from in any::<prop::sample::Index>(),
            zeros in any::<bool>(),
        ) {
            let dir = tempfile::tempdir().unwrap();
            let opts = WalOptions { segment_bytes: 1500 };
            let synced = synced.min(batches.len());
            let mut wal = Wal::open(dir.path(), opts).unwrap();
            for (i, (items, p)) in batches.iter().enumerate() {
                if i == synced {
                    wal.sync().unwrap();
                }
                wal.append(*items, p).unwrap();
            }
            let durable = wal.durable_offset();
            drop(wal); // flushes, like a crash after the page cache got the tail
            let last = segment_files(dir.path()).pop().unwrap();
            let bytes = fs::read(&last).unwrap();
            let u32_at = |i: usize| u32::from_le_bytes(bytes[i..i + 4].try_into().unwrap());
            let (mut pos, mut offset) = (0, list_segments(dir.path()).unwrap().pop().unwrap());
            let (mut boundaries, mut synced_bytes) = (vec![0], 0);
            while pos < bytes.len() {
                offset += u64::from(u32_at(pos + 16));
                pos += 24 + u32_at(pos + 4) as usize;
                boundaries.push(pos);
                if offset <= durable {
                    synced_bytes = pos;
                }
            }
            let cut = synced_bytes + cut.index(bytes.len() - synced_bytes + 1);
            let mut case = bytes[..cut].to_vec();
            if zeros {
                // Zeros from a record boundary or a sector boundary between synced and cut.
                let starts: Vec<usize> = boundaries.iter().copied()
                    .chain((0..=cut / 512).map(|k| k * 512))
                    .filter(|&b| b >= synced_bytes && b <= cut)
                    .collect();
                if !starts.is_empty() {
                    let from = starts[zero_from.index(starts.len())];
                    case[from..].fill(0);
                    case.resize(cut.max(from + 1), 0);
                }
            }
            fs::write(&last, &case).unwrap();

            let mut wal = Wal::open(dir.path(), opts).unwrap();
            let got = read_all(&wal, 0);
            prop_assert!(got.len() <= batches.len());
            let mut next = 0;
            for (r, (items, p)) in got.iter().zip(&batches) {
                prop_assert_eq!((r.base, r.items, &r.payload), (next, *items, p));
                next += u64::from(*items);
            }
            prop_assert!(next >= durable);
            prop_assert_eq!(wal.next_offset(), next);
            prop_assert_eq!(wal.append(1, b"after").unwrap(), next);
        }

        /// Any byte of any synced record changed: the log refuses to open, and no file changes.
        #[test]
        fn a_changed_synced_byte_refuses_to_open(
            batches in prop::collection::vec((1u32..5, prop::collection::vec(any::<u8>(), 0..200)), 1..30),
            at in any::<prop::sample::Index>(),
            mask in 1u8..=255,
            torn in 0usize..30,
        ) {
            let dir = tempfile::tempdir().unwrap();
            let opts = WalOptions { segment_bytes: 1500 };
            let mut wal = Wal::open(dir.path(), opts).unwrap();
            for (items, p) in &batches {
                wal.append(*items, p).unwrap();
            }
            wal.sync().unwrap();
            drop(wal);
            let files = segment_files(dir.path());
            let sizes: Vec<usize> = files.iter().map(|f| fs::metadata(f).unwrap().len() as usize).collect();
            let total: usize = sizes.iter().sum();
            prop_assume!(total > 0);
            let mut i = at.index(total);
            let mut f = 0;
            while i >= sizes[f] {
                i -= sizes[f];
                f += 1;
            }
            let mut bytes = fs::read(&files[f]).unwrap();
            bytes[i] ^= mask;
            // A zeroed last byte of the log whose record then ends in zeros from a sector
            // boundary would look like a zero fill (see the module docs): not a flip.
            prop_assume!(bytes[i] != 0 || f + 1 < files.len() || i + 1 < bytes.len());
            // An unsynced torn append after it changes nothing.
            let mut last = fs::read(files.last().unwrap()).unwrap();
            if f + 1 == files.len() {
                last = bytes.clone();
            }
            last.extend_from_slice(&encode_header(u64::MAX / 2, 3, &[7; 40])[..torn.min(23)]);
            fs::write(&files[f], &bytes).unwrap();
            fs::write(files.last().unwrap(), &last).unwrap();
            let before: Vec<Vec<u8>> = files.iter().map(|p| fs::read(p).unwrap()).collect();
            let err = Wal::open(dir.path(), opts).unwrap_err();
            prop_assert!(matches!(&err, Error::Corrupt { path, .. } if *path == files[f]), "{}", err);
            let after: Vec<Vec<u8>> = files.iter().map(|p| fs::read(p).unwrap()).collect();
            prop_assert_eq!(before, after);
        }
    }
}
