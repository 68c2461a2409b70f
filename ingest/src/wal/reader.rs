//! Reading segments back: a [`Cursor`] verifies one segment's records in order, and
//! [`WalReader`] chains the segments of a [`super::Wal::read_from`].

use super::{HEADER_BYTES, MAGIC, READ_BUFFER, Record, Result, corrupt, gap, io_err};
use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::PathBuf;

/// A position in one segment file, verifying records up to `limit` bytes.
#[derive(Debug)]
pub(super) struct Cursor {
    reader: BufReader<File>,
    pub(super) path: PathBuf,
    pub(super) pos: u64,
    pub(super) limit: u64,
    /// The base offset the next record must have.
    pub(super) next_base: u64,
}

/// What [`Cursor::next_record`] found.
pub(super) enum Step {
    End,
    /// Bytes that are not a whole valid record: a torn write, or damage.
    Invalid(&'static str),
    Record(Record),
}

impl Cursor {
    /// Opens the segment at `base`, to read up to `limit` bytes (`None`: the whole file).
    pub(super) fn open(path: PathBuf, base: u64, limit: Option<u64>) -> Result<Cursor> {
        let file = File::open(&path).map_err(io_err(&path))?;
        let limit = match limit {
            Some(limit) => limit,
            None => file.metadata().map_err(io_err(&path))?.len(),
        };
        let reader = BufReader::with_capacity(READ_BUFFER, file);
        Ok(Cursor {
            reader,
            path,
            pos: 0,
            limit,
            next_base: base,
        })
    }

    /// Reads and verifies the next record. With `keep` false the payload only streams through
    /// the crc and the record comes back without it, so recovery holds no payload.
    pub(super) fn next_record(&mut self, keep: bool) -> Result<Step> {
        let left = self.limit - self.pos;
        if left == 0 {
            return Ok(Step::End);
        } else if left < HEADER_BYTES {
            return Ok(Step::Invalid("partial header"));
        }
        let io = |e| io_err(&self.path)(e);
        let mut h = [0; HEADER_BYTES as usize];
        self.reader.read_exact(&mut h).map_err(io)?;
        let u32_at = |i: usize| u32::from_le_bytes(h[i..i + 4].try_into().expect("4 bytes"));
        let (len, items, crc) = (u64::from(u32_at(4)), u32_at(16), u32_at(20));
        let base = u64::from_le_bytes(h[8..16].try_into().expect("8 bytes"));
        if h[0..4] != MAGIC {
            return Ok(Step::Invalid("bad magic"));
        } else if left - HEADER_BYTES < len {
            return Ok(Step::Invalid("short payload"));
        }
        let mut hasher = crc32fast::Hasher::new();
        hasher.update(&h[8..20]);
        let mut payload = Vec::new();
        if keep {
            payload.resize(len as usize, 0);
            self.reader.read_exact(&mut payload).map_err(io)?;
            hasher.update(&payload);
        } else {
            let mut rest = len as usize;
            while rest > 0 {
                let chunk = self.reader.fill_buf().map_err(io)?;
                if chunk.is_empty() {
                    return Err(io(io::ErrorKind::UnexpectedEof.into()));
                }
                let n = chunk.len().min(rest);
                hasher.update(&chunk[..n]);
                self.reader.consume(n);
                rest -= n;
            }
        }
        if hasher.finalize() != crc {
            return Ok(Step::Invalid("crc mismatch"));
        }
        // A valid crc over a wrong offset was written so: no torn write explains it.
        let end = base.checked_add(u64::from(items));
        if base != self.next_base || items == 0 || end.is_none() {
            let expected = self.next_base;
            let reason = format!("record at offset {base} with {items} items, expected {expected}");
            return Err(corrupt(&self.path, self.pos, reason));
        }
        self.pos += HEADER_BYTES + len;
        self.next_base = end.expect("checked");
        Ok(Step::Record(Record {
            base,
            items,
            payload,
        }))
    }
}

/// An iterator over durable records from [`super::Wal::read_from`]. It verifies every record again
/// and ends after the first error.
#[derive(Debug)]
pub struct WalReader {
    /// Segments still to read: (base, path, bytes to read).
    pending: VecDeque<(u64, PathBuf, u64)>,
    current: Option<Cursor>,
    from: u64,
    done: bool,
}

impl WalReader {
    pub(super) fn new(pending: VecDeque<(u64, PathBuf, u64)>, from: u64) -> WalReader {
        WalReader {
            pending,
            current: None,
            from,
            done: false,
        }
    }

    fn step(&mut self) -> Result<Option<Record>> {
        loop {
            if self.current.as_ref().is_none_or(|c| c.pos >= c.limit) {
                let Some((base, path, limit)) = self.pending.pop_front() else {
                    return Ok(None);
                };
                if let Some(prev) = &self.current
                    && prev.next_base != base
                {
                    return Err(gap(path, base, prev.next_base));
                }
                self.current = Some(Cursor::open(path, base, Some(limit))?);
            }
            let c = self.current.as_mut().expect("opened above");
            match c.next_record(true)? {
                Step::Record(r) if r.end() > self.from => return Ok(Some(r)),
                Step::Record(_) | Step::End => {}
                Step::Invalid(reason) => return Err(corrupt(&c.path, c.pos, reason)),
            }
        }
    }
}

impl Iterator for WalReader {
    type Item = Result<Record>;

    fn next(&mut self) -> Option<Result<Record>> {
        if self.done {
            return None;
        }
        let r = self.step();
        if !matches!(r, Ok(Some(_))) {
            self.done = true;
        }
        r.transpose()
    }
}
