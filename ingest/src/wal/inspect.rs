//! A read-only look at a log's files: every segment, the first damage under the rule of the
//! [module docs](super) (the one [`Wal::open`](super::Wal::open) applies), and every record
//! that still verifies after it, found at any byte position. It takes no lock and writes
//! nothing, so it can run beside the service (whose appends it may see half done).

use super::tail::{self, Tail};
use super::{HEAD_FILE, Result, io_err, list_segments, read_head, segment_path};
use std::fs;
use std::path::{Path, PathBuf};

/// One segment file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentInfo {
    /// The file.
    pub path: PathBuf,
    /// Offset of its first record, from its name.
    pub base: u64,
    /// Its length.
    pub bytes: u64,
    /// Valid records from its start, up to the first damage.
    pub records: u64,
    /// Bytes those take.
    pub valid_bytes: u64,
    /// The offset after them.
    pub end: u64,
}

/// A record that verifies (magic, length, crc).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordInfo {
    /// Its segment file.
    pub path: PathBuf,
    /// Its byte position there.
    pub byte: u64,
    /// Offset of its first item.
    pub base: u64,
    /// Items (events) it holds.
    pub items: u32,
    /// Bytes it takes, header included.
    pub bytes: u64,
}

impl RecordInfo {
    /// The offset after its last item.
    pub fn end(&self) -> u64 {
        self.base + u64::from(self.items)
    }
}

/// What the first damage is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DamageKind {
    /// An interrupted, never acknowledged append: the service cuts it on start.
    TornTail,
    /// Damaged data: the service refuses to start.
    Corrupt,
    /// A segment that does not start where the previous one ends: the service refuses.
    Gap,
    /// `wal.head` names a segment that is not there: the service refuses.
    MissingSegment,
}

impl DamageKind {
    /// A short lowercase name.
    pub fn as_str(self) -> &'static str {
        match self {
            DamageKind::TornTail => "torn tail",
            DamageKind::Corrupt => "corrupt",
            DamageKind::Gap => "gap",
            DamageKind::MissingSegment => "missing segment",
        }
    }
}

/// The first damage of a log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    /// What it is.
    pub kind: DamageKind,
    /// The segment file (for a missing segment, the head file).
    pub path: PathBuf,
    /// Byte position in that file.
    pub byte: u64,
    /// The log offset where the valid log ends.
    pub offset: u64,
    /// Bytes from `byte` to the end of the file.
    pub bytes: u64,
    /// What is wrong.
    pub reason: String,
}

/// What [`inspect`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inspection {
    /// The log's directory.
    pub dir: PathBuf,
    /// The base offset `wal.head` names, if the file exists.
    pub head: Option<u64>,
    /// The segment files, ascending.
    pub segments: Vec<SegmentInfo>,
    /// The first damage, if any.
    pub damage: Option<Damage>,
    /// Records that verify after the first damage, in file order: what cutting there drops.
    pub after: Vec<RecordInfo>,
}

impl Inspection {
    /// The oldest offset in the log.
    pub fn first_offset(&self) -> u64 {
        self.segments.first().map_or(0, |s| s.base)
    }

    /// The offset after the last valid record before the first damage.
    pub fn valid_end(&self) -> u64 {
        match &self.damage {
            Some(d) => d.offset,
            None => self.segments.last().map_or(0, |s| s.end),
        }
    }

    /// Valid records before the first damage.
    pub fn valid_records(&self) -> u64 {
        self.segments.iter().map(|s| s.records).sum()
    }
}

/// Reads every segment of the log in `dir` (a missing directory is an empty log).
pub fn inspect(dir: &Path) -> Result<Inspection> {
    let mut out = Inspection {
        dir: dir.to_path_buf(),
        head: None,
        segments: Vec::new(),
        damage: None,
        after: Vec::new(),
    };
    if !dir.exists() {
        return Ok(out);
    }
    out.head = read_head(dir)?;
    let bases = list_segments(dir)?;
    for (i, &base) in bases.iter().enumerate() {
        let path = segment_path(dir, base);
        let buf = fs::read(&path).map_err(io_err(&path))?;
        let last = i + 1 == bases.len();
        let mut info = SegmentInfo {
            path: path.clone(),
            base,
            bytes: buf.len() as u64,
            records: 0,
            valid_bytes: 0,
            end: base,
        };
        let mut salvage_from = None;
        if out.damage.is_none() {
            match out.segments.last() {
                Some(prev) if prev.end != base => {
                    out.damage = Some(Damage {
                        kind: DamageKind::Gap,
                        path: path.clone(),
                        byte: 0,
                        offset: prev.end,
                        bytes: buf.len() as u64,
                        reason: format!(
                            "segment starts at offset {base}, previous ends at {}",
                            prev.end
                        ),
                    });
                    salvage_from = Some(0);
                }
                _ => {
                    if let Some(d) = scan(&buf, &mut info, last) {
                        salvage_from = Some(d.byte as usize);
                        out.damage = Some(d);
                    }
                }
            }
        } else {
            salvage_from = Some(0);
        }
        if let Some(from) = salvage_from {
            salvage(&buf, from, &path, &mut out.after);
        }
        out.segments.push(info);
    }
    if let Some(expected) = out.head
        && out.damage.is_none()
        && out.segments.last().is_none_or(|s| s.base < expected)
    {
        let end = out.valid_end();
        out.damage = Some(Damage {
            kind: DamageKind::MissingSegment,
            path: dir.join(HEAD_FILE),
            byte: 0,
            offset: end,
            bytes: 0,
            reason: format!(
                "{HEAD_FILE} names segment {expected:020}.wal, which is missing: offsets from {end} on were deleted"
            ),
        });
    }
    Ok(out)
}

/// Validates `buf` from its start into `info`; returns the first damage.
fn scan(buf: &[u8], info: &mut SegmentInfo, last: bool) -> Option<Damage> {
    let mut pos = 0usize;
    let mut next = info.base;
    let damage = loop {
        if pos == buf.len() {
            break None;
        }
        let why = match tail::record_at(buf, pos) {
            Ok(f) if f.header.base == next && f.header.items > 0 => {
                pos += f.bytes();
                next += u64::from(f.header.items);
                info.records += 1;
                continue;
            }
            Ok(f) => format!(
                "record at offset {} with {} items, expected {next}",
                f.header.base, f.header.items
            ),
            Err(why) => why.as_str().to_string(),
        };
        let (kind, reason) = if !last {
            (DamageKind::Corrupt, why)
        } else {
            match tail::classify(&buf[pos..], pos as u64, next) {
                Tail::Torn(why) => (DamageKind::TornTail, why.to_string()),
                Tail::Corrupt(why) => (DamageKind::Corrupt, why),
            }
        };
        break Some(Damage {
            kind,
            path: info.path.clone(),
            byte: pos as u64,
            offset: next,
            bytes: (buf.len() - pos) as u64,
            reason,
        });
    };
    info.valid_bytes = pos as u64;
    info.end = next;
    damage
}

/// Every record that verifies in `buf` from byte `from` on, resynchronising at any byte.
fn salvage(buf: &[u8], from: usize, path: &Path, out: &mut Vec<RecordInfo>) {
    let mut at = from;
    while let Some(f) = tail::next_valid(buf, at) {
        out.push(RecordInfo {
            path: path.to_path_buf(),
            byte: f.at as u64,
            base: f.header.base,
            items: f.header.items,
            bytes: f.bytes() as u64,
        });
        at = f.at + f.bytes();
    }
}
