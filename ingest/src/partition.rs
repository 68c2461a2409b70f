//! One local partition: the WAL that ingest appends to, the live assessor it feeds and the
//! checkpoints of that assessor (SPEC §5).
//!
//! A WAL record is one ingested batch, stored as received: a small header (format, the wall
//! time it was received, the source name) and the body bytes. Its offsets count the batch's
//! items (NDJSON lines, or array elements), so every event has a stable position
//! `base + index` that is its provenance (`source:offset`) and keys its counterexample ids.
//! Applying a record decodes it again, so replay after a crash goes through exactly the same
//! code as live ingest and produces the same findings: the core is deterministic and the only
//! wall time it sees is the one recorded in the header.
//!
//! Checkpoints are taken at record boundaries: the assessor's state (postcard) with the offset
//! of the next record. On open, the newest valid checkpoint is restored and the WAL replayed
//! from its offset; segments every kept checkpoint covers are deleted.

use crate::checkpoint::{self, CheckpointStore};
use crate::json::{self, DecodeError};
use crate::wal::{self, Wal, WalOptions};
use fencewatch_assess::Contract;
use fencewatch_assess::live::{ContractChanged, Live, LiveOptions, LiveState, Pushed};
use std::path::{Path, PathBuf};

const PAYLOAD_VERSION: u8 = 1;

/// How a batch body is framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// One JSON object per line.
    Ndjson,
    /// A JSON array of objects.
    Array,
    /// An OTLP trace request reduced to its fencing spans, protobuf (`decode::otlp`).
    OtlpTraces,
    /// An OTLP logs request reduced to its fencing log records, protobuf.
    OtlpLogs,
}

/// Errors of a partition.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The write-ahead log failed.
    #[error("write-ahead log: {0}")]
    Wal(#[from] wal::Error),
    /// The checkpoint store failed.
    #[error("checkpoint: {0}")]
    Checkpoint(#[from] checkpoint::Error),
    /// The checkpoint belongs to another contract.
    #[error(
        "{0}; the assessment state in the data directory was built under a different contract: start with the contract it was built with, or move the data directory away to start afresh"
    )]
    ContractChanged(#[from] ContractChanged),
    /// A WAL record whose payload is not a batch.
    #[error("write-ahead log record at offset {offset} is not a batch: {reason}")]
    BadRecord {
        /// Its base offset.
        offset: u64,
        /// Why.
        reason: String,
    },
    /// No checkpoint can be restored, and the log no longer holds the events before them.
    #[error(
        "{dir}: none of the {skipped} checkpoints can be restored ({reasons}), and the write-ahead log starts at offset {first}, so the state cannot be rebuilt from it; nothing was changed. Start the fencewatch version that wrote them (a checkpoint of another state layout), or move the data directory away to start afresh (re-send the events to rebuild the assessment)"
    )]
    NoUsableCheckpoint {
        /// The checkpoints' directory.
        dir: PathBuf,
        /// How many there are.
        skipped: usize,
        /// Why each was passed over.
        reasons: String,
        /// The oldest offset the log still holds.
        first: u64,
    },
    /// The newest checkpoint covers offsets the log no longer holds.
    #[error(
        "{wal}: the write-ahead log ends at offset {end} but the newest checkpoint covers up to {checkpoint}: acknowledged events are missing from the log (segments deleted or lost); refusing to reuse their offsets"
    )]
    LogBehindCheckpoint {
        /// The log's directory.
        wal: PathBuf,
        /// Where the log ends.
        end: u64,
        /// The checkpoint's offset.
        checkpoint: u64,
    },
    /// A batch with more items than a record can hold.
    #[error("a batch holds at most {max} events, this one {got}")]
    TooManyItems {
        /// The limit.
        max: u64,
        /// The batch's.
        got: u64,
    },
    /// A file could not be created.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
}

/// `Result` of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A malformed item of a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ItemError {
    /// 1-based line (NDJSON) or element (array) number within the batch.
    pub item: u64,
    /// Its WAL offset.
    pub offset: u64,
    /// What is wrong.
    pub error: DecodeError,
}

/// Malformed items of one batch whose error is listed in [`Applied::errors`]; the others are
/// counted in [`Applied::malformed`] (SPEC §2: the first 100 listed, then a count).
pub const MAX_LISTED_ERRORS: usize = 100;

/// What applying one batch did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Applied {
    /// Items that were valid events (assessed, unattributed or duplicate deliveries).
    pub accepted: u64,
    /// Duplicate deliveries among them.
    pub duplicates: u64,
    /// Malformed items, each also counted as `malformed_event` evidence.
    pub malformed: u64,
    /// The first [`MAX_LISTED_ERRORS`] malformed items, in order.
    pub errors: Vec<ItemError>,
}

impl Applied {
    pub(crate) fn malformed(&mut self, item: u64, offset: u64, error: DecodeError) {
        self.malformed += 1;
        if self.errors.len() < MAX_LISTED_ERRORS {
            self.errors.push(ItemError {
                item: item + 1,
                offset,
                error,
            });
        }
    }
}

/// Number of offsets a body takes: its lines (blank ones included) or array elements. An
/// array body must be well-formed (see [`json::split_array`]); one that is not takes one.
pub fn items(format: Format, body: &[u8]) -> u64 {
    match format {
        Format::Ndjson => {
            let body = body.strip_suffix(b"\n").unwrap_or(body);
            if body.is_empty() {
                0
            } else {
                memchr::memchr_iter(b'\n', body).count() as u64 + 1
            }
        }
        Format::Array => json::for_each_element(body, |_, _| {}).map_or(1, |n| n as u64),
        Format::OtlpTraces | Format::OtlpLogs => otlp_items(format, body),
    }
}

fn lines(body: &[u8]) -> impl Iterator<Item = &[u8]> {
    let body = body.strip_suffix(b"\n").unwrap_or(body);
    let mut rest = (!body.is_empty()).then_some(body);
    std::iter::from_fn(move || {
        let r = rest?;
        match memchr::memchr(b'\n', r) {
            Some(i) => {
                rest = Some(&r[i + 1..]);
                Some(&r[..i])
            }
            None => {
                rest = None;
                Some(r)
            }
        }
    })
}

/// Encodes a batch as a WAL payload. `first_line` is the 1-based line number of the body's
/// first line in its source (file ingest); without it, an event's position is its WAL offset.
pub fn encode(
    format: Format,
    received_at: i64,
    source: &str,
    first_line: Option<u64>,
    body: &[u8],
) -> Vec<u8> {
    let mut out = encode_header(format, received_at, source, first_line, body.len());
    out.extend_from_slice(body);
    out
}

/// The header of a WAL payload ([`encode`]) with room for `body_capacity` bytes of body: the
/// body is appended to it as it arrives, so a request body is not copied into its payload.
pub fn encode_header(
    format: Format,
    received_at: i64,
    source: &str,
    first_line: Option<u64>,
    body_capacity: usize,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(body_capacity + source.len() + 20);
    out.push(PAYLOAD_VERSION);
    out.push(format_byte(format));
    out.extend_from_slice(&received_at.to_le_bytes());
    out.extend_from_slice(&first_line.unwrap_or(u64::MAX).to_le_bytes());
    out.extend_from_slice(&(source.len() as u16).to_le_bytes());
    out.extend_from_slice(source.as_bytes());
    out
}

/// Bytes of the header [`encode_header`] writes for `source`.
pub fn header_len(source: &str) -> usize {
    20 + source.len()
}

/// Sets the body format of a payload from [`encode_header`] (known once the body is read).
pub fn set_format(payload: &mut [u8], format: Format) {
    payload[1] = format_byte(format);
}

fn format_byte(format: Format) -> u8 {
    match format {
        Format::Ndjson => 0,
        Format::Array => 1,
        Format::OtlpTraces => 2,
        Format::OtlpLogs => 3,
    }
}

/// A decoded WAL payload.
#[derive(Debug, Clone, Copy)]
pub struct Batch<'a> {
    /// Framing of the body.
    pub format: Format,
    /// Wall time it was received, ns.
    pub received_at: i64,
    /// The ingest source (`http`, a file name).
    pub source: &'a str,
    /// Line number of the body's first line in its source, if it has lines of its own.
    pub first_line: Option<u64>,
    /// The body as received.
    pub body: &'a [u8],
}

/// Decodes a WAL payload.
pub fn decode(payload: &[u8]) -> Result<Batch<'_>, String> {
    let short = || "payload too short".to_string();
    let (&version, rest) = payload.split_first().ok_or_else(short)?;
    if version != PAYLOAD_VERSION {
        return Err(format!("unknown payload version {version}"));
    }
    let (&fmt, rest) = rest.split_first().ok_or_else(short)?;
    let format = match fmt {
        0 => Format::Ndjson,
        1 => Format::Array,
        2 => Format::OtlpTraces,
        3 => Format::OtlpLogs,
        x => return Err(format!("unknown body format {x}")),
    };
    let (ts, rest) = rest.split_at_checked(8).ok_or_else(short)?;
    let (line, rest) = rest.split_at_checked(8).ok_or_else(short)?;
    let line = u64::from_le_bytes(line.try_into().expect("8 bytes"));
    let (len, rest) = rest.split_at_checked(2).ok_or_else(short)?;
    let len = u16::from_le_bytes([len[0], len[1]]) as usize;
    let (source, body) = rest.split_at_checked(len).ok_or_else(short)?;
    Ok(Batch {
        format,
        received_at: i64::from_le_bytes(ts.try_into().expect("8 bytes")),
        source: std::str::from_utf8(source).map_err(|_| "source is not UTF-8".to_string())?,
        first_line: (line != u64::MAX).then_some(line),
        body,
    })
}

/// A batch's items decoded: its valid events and the indices of its malformed items, both in
/// order (blank lines skipped). A malformed item keeps only its index: its error is worded
/// again when applied, so that a body of many bad lines costs 4 bytes a line, not a decoded
/// event and an error message each.
#[derive(Debug, Default)]
pub struct DecodedItems<'a> {
    events: Vec<(u32, json::Decoded<'a>)>,
    bad: Vec<u32>,
    /// The items of an OTLP body.
    #[cfg(feature = "otlp")]
    otlp: Option<crate::decode::otlp::Decoded>,
}

/// One item of a batch, decoded.
fn decode_item<'a>(
    format: Format,
    item: &'a [u8],
    max_line_bytes: usize,
) -> Result<json::Decoded<'a>, DecodeError> {
    match format {
        Format::Ndjson => json::decode_line(item, max_line_bytes),
        // Elements come from `for_each_element`, which checked the UTF-8.
        Format::Array => json::decode_element(
            std::str::from_utf8(item).expect("for_each_element checked UTF-8"),
            max_line_bytes,
        ),
        Format::OtlpTraces | Format::OtlpLogs => unreachable!("OTLP items are decoded whole"),
    }
}

/// Calls `each` with every item of a batch and its index, in order: its lines, or the elements
/// of its array (`Err` when the array is not well-formed: a record written before such bodies
/// were refused whole). Nothing is collected.
fn for_each_item<'a>(
    batch: &Batch<'a>,
    mut each: impl FnMut(u32, &'a [u8]),
) -> Result<(), json::ArrayError> {
    match batch.format {
        Format::Ndjson => {
            for (i, line) in lines(batch.body).enumerate() {
                each(i as u32, line);
            }
            Ok(())
        }
        Format::Array => {
            json::for_each_element(batch.body, |i, e| each(i as u32, e.as_bytes())).map(drop)
        }
        Format::OtlpTraces | Format::OtlpLogs => unreachable!("OTLP items are decoded whole"),
    }
}

/// Decodes a batch's items. Pure: it can run on any thread, before the assessor is locked.
pub fn decode_items<'a>(batch: &Batch<'a>, max_line_bytes: usize) -> DecodedItems<'a> {
    let mut out = DecodedItems::default();
    if matches!(batch.format, Format::OtlpTraces | Format::OtlpLogs) {
        return otlp_decode(batch, out);
    }
    let walked = for_each_item(batch, |i, item| {
        if batch.format == Format::Ndjson && json::is_blank(item) {
            return;
        }
        match decode_item(batch.format, item, max_line_bytes) {
            Ok(d) => out.events.push((i, d)),
            Err(_) => out.bad.push(i),
        }
    });
    if walked.is_err() {
        out = DecodedItems {
            events: Vec::new(),
            bad: vec![0],
            ..DecodedItems::default()
        };
    }
    out
}

/// Feeds one batch at WAL offset `base` to the assessor.
pub fn apply(live: &mut Live, base: u64, batch: &Batch<'_>, max_line_bytes: usize) -> Applied {
    let items = decode_items(batch, max_line_bytes);
    apply_decoded(live, base, batch, items, max_line_bytes)
}

/// Feeds a batch decoded by [`decode_items`] (with the same `max_line_bytes`) to the
/// assessor, in item order. A malformed item's error is worded again from its text, in one
/// pass over the items, and only when the batch has some.
pub fn apply_decoded(
    live: &mut Live,
    base: u64,
    batch: &Batch<'_>,
    items: DecodedItems<'_>,
    max_line_bytes: usize,
) -> Applied {
    if matches!(batch.format, Format::OtlpTraces | Format::OtlpLogs) {
        return otlp_apply(live, base, batch, items);
    }
    let source = live.add_source(batch.source);
    let mut out = Applied::default();
    let position = |i: u64| batch.first_line.map_or(base + i, |l| l + i);
    let push_event = |live: &mut Live, out: &mut Applied, i: u32, d: &json::Decoded<'_>| {
        let i = u64::from(i);
        let pushed = live.push(&d.event(), source, position(i), batch.received_at);
        count_pushed(live, out, pushed, i, base + i, d.event().ts);
    };
    let push_bad = |live: &mut Live, out: &mut Applied, i: u32, error: DecodeError| {
        let i = u64::from(i);
        live.push_malformed(source, position(i), error.ts, error.to_string());
        out.malformed(i, base + i, error);
    };
    if items.bad.is_empty() {
        for (i, d) in &items.events {
            push_event(live, &mut out, *i, d);
        }
        return out;
    }
    let mut events = items.events.iter().peekable();
    let mut bad = items.bad.iter().copied().peekable();
    let walked = for_each_item(batch, |i, item| {
        if events.peek().is_some_and(|(e, _)| *e == i) {
            let (_, d) = events.next().expect("peeked");
            push_event(live, &mut out, i, d);
        } else if bad.peek() == Some(&i) {
            bad.next();
            match decode_item(batch.format, item, max_line_bytes) {
                Err(e) => push_bad(live, &mut out, i, e),
                Ok(_) => unreachable!("an item decodes the same way twice"),
            }
        }
    });
    if let Err(e) = walked {
        // An array that is not well-formed (an old record): one malformed item.
        let error = DecodeError {
            field: None,
            reason: e.to_string(),
            ts: None,
        };
        push_bad(live, &mut out, 0, error);
    }
    out
}

#[cfg(feature = "otlp")]
fn otlp_signal(format: Format) -> crate::decode::otlp::Signal {
    use crate::decode::otlp::Signal;
    if format == Format::OtlpLogs {
        Signal::Logs
    } else {
        Signal::Traces
    }
}

/// Items of an OTLP body: its decoded items (one when it does not decode).
fn otlp_items(format: Format, body: &[u8]) -> u64 {
    #[cfg(feature = "otlp")]
    if let Ok(d) = crate::decode::otlp::decode(otlp_signal(format), body) {
        return d.len() as u64;
    }
    let _ = (format, body);
    1
}

fn otlp_decode<'a>(batch: &Batch<'a>, mut out: DecodedItems<'a>) -> DecodedItems<'a> {
    #[cfg(feature = "otlp")]
    if let Ok(d) = crate::decode::otlp::decode(otlp_signal(batch.format), batch.body) {
        out.otlp = Some(d);
        return out;
    }
    let _ = batch;
    out.bad.push(0);
    out
}

/// Feeds a decoded OTLP body: a span with its own provenance (`otlp:<trace_id>/<span_id>`), a
/// log record at its offset. A body that does not decode (a build without OTLP, or a record
/// another build wrote) is one malformed item.
fn otlp_apply(live: &mut Live, base: u64, batch: &Batch<'_>, items: DecodedItems<'_>) -> Applied {
    let source = live.add_source(batch.source);
    let mut out = Applied::default();
    #[cfg(feature = "otlp")]
    if let Some(d) = items.otlp {
        use crate::decode::otlp::Entry;
        for (i, entry) in d.entries().enumerate() {
            let (i, at) = (i as u64, base + i as u64);
            match entry {
                Entry::Event(ev, span) => {
                    let pushed = match span {
                        Some(s) => live.push_span(&ev, s, source, at, batch.received_at),
                        None => live.push(&ev, source, at, batch.received_at),
                    };
                    count_pushed(live, &mut out, pushed, i, at, ev.ts);
                }
                Entry::Malformed(e) => {
                    let message = e.error.to_string();
                    match &e.span {
                        Some(s) => live.push_malformed_span(s, source, at, e.error.ts, message),
                        None => live.push_malformed(source, at, e.error.ts, message),
                    }
                    out.malformed(i, at, e.error);
                }
            }
        }
        return out;
    }
    let _ = items;
    let reason = "an OTLP record this build cannot decode".to_string();
    live.push_malformed(source, base, None, reason.clone());
    out.malformed(
        0,
        base,
        DecodeError {
            field: None,
            reason,
            ts: None,
        },
    );
    out
}

/// Counts what pushing item `i` (at WAL offset `at`) came to.
fn count_pushed(
    live: &Live,
    out: &mut Applied,
    pushed: Pushed,
    i: u64,
    at: u64,
    ts: fencewatch_assess::EventTime,
) {
    match pushed {
        Pushed::Malformed => {
            let error = DecodeError {
                field: None,
                reason: live.view().last_malformed().unwrap_or_default().to_string(),
                ts: Some(ts),
            };
            out.malformed(i, at, error);
        }
        Pushed::Duplicate => {
            out.accepted += 1;
            out.duplicates += 1;
        }
        Pushed::Assessed | Pushed::Unattributed => out.accepted += 1,
    }
}

/// A partition opened from its data directory, with what opening it took.
#[derive(Debug)]
pub struct Opened {
    /// The log, positioned after its last valid record.
    pub wal: Wal,
    /// The checkpoints.
    pub checkpoints: CheckpointStore,
    /// The assessor, restored and replayed up to the end of the log.
    pub live: Live,
    /// Offset of the checkpoint restored, if any.
    pub restored_from: Option<u64>,
    /// Records replayed.
    pub replayed_records: u64,
    /// The torn tail cut off the log (a crash during a write that was never acknowledged).
    pub torn_tail: Option<wal::TornTail>,
    /// Newer checkpoints passed over as damaged or undecodable, newest first.
    pub passed_over: Vec<checkpoint::PassedOver>,
    /// What `fencewatch wal repair` quarantined in this partition: each folder under
    /// `quarantine/` with the first line of its report.
    pub quarantined: Vec<(PathBuf, String)>,
}

/// Options of a partition.
#[derive(Debug, Clone, Copy)]
pub struct PartitionOptions {
    /// WAL segment size.
    pub segment_bytes: u64,
    /// Lines longer than this are malformed.
    pub max_line_bytes: usize,
    /// Options of the assessor.
    pub live: LiveOptions,
}

/// Opens (or creates) the partition in `dir`: restores the newest checkpoint and replays the
/// log after it.
pub fn open(dir: &Path, contract: Contract, opts: PartitionOptions) -> Result<Opened> {
    std::fs::create_dir_all(dir).map_err(|source| Error::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    // Nothing in the log changes until every check below passed: a torn tail is cut last.
    let mut wal = Wal::open_unrecovered(
        &dir.join("wal"),
        WalOptions {
            segment_bytes: opts.segment_bytes,
        },
    )?;
    let mut checkpoints = CheckpointStore::open(&dir.join("checkpoints"))?;
    // A checkpoint that verifies but does not decode (written by a build with another state
    // layout) is passed over like a damaged one: the older one kept, and the WAL since it,
    // rebuild the same state.
    //
    // When no checkpoint is usable (all damaged, or all written by a build with another state
    // layout, as after an upgrade), the state is rebuilt from the log if the log still starts
    // at offset 0 (exact: the same code replays every batch); otherwise the events they covered
    // are gone and opening is refused, saying what the operator can do.
    let (mut live, from, passed_over) = match checkpoints.latest_decoded(decode_state) {
        Ok(Some((loaded, state))) => (
            Live::restore(contract, state)?,
            Some(loaded.offset),
            loaded.passed_over,
        ),
        Ok(None) => (Live::new(contract, opts.live), None, Vec::new()),
        Err(checkpoint::Error::NoValidCheckpoint { dir, reasons, .. })
            if wal.first_offset() == 0 =>
        {
            let passed = reasons
                .into_iter()
                .map(|reason| checkpoint::PassedOver {
                    path: dir.clone(),
                    offset: 0,
                    bytes: 0,
                    reason: format!("{reason}; rebuilt from the whole write-ahead log instead"),
                })
                .collect();
            (Live::new(contract, opts.live), None, passed)
        }
        Err(checkpoint::Error::NoValidCheckpoint {
            dir,
            skipped,
            reasons,
        }) => {
            return Err(Error::NoUsableCheckpoint {
                dir,
                skipped,
                reasons: reasons.join("; "),
                first: wal.first_offset(),
            });
        }
        Err(e) => return Err(e.into()),
    };
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
    let mut replayed = 0;
    for rec in wal.read_from(from.unwrap_or(0))? {
        let rec = rec?;
        if rec.base < from.unwrap_or(0) {
            // Checkpoints are taken at record boundaries: a record straddling one was applied.
            continue;
        }
        let batch = decode(&rec.payload).map_err(|reason| Error::BadRecord {
            offset: rec.base,
            reason,
        })?;
        apply(&mut live, rec.base, &batch, opts.max_line_bytes);
        replayed += 1;
    }
    live.take_new_counterexamples();
    // The log replayed under the options it was first applied with (the same findings); the
    // configuration's are in force from here on.
    live.set_options(opts.live);
    let torn_tail = wal.finish_recovery()?.cloned();
    Ok(Opened {
        wal,
        checkpoints,
        live,
        restored_from: from,
        replayed_records: replayed,
        torn_tail,
        passed_over,
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

/// Serializes the assessor for a checkpoint.
pub fn snapshot(live: &Live) -> Vec<u8> {
    encode_state(live.state())
}

/// The layout of [`LiveState`] that [`encode_state`] writes: raised whenever the state's
/// serialized shape changes, so that a checkpoint of another build is recognised as such
/// rather than failing to decode somewhere in the middle. (States written before layouts were
/// tagged start with no tag at all.)
pub const STATE_LAYOUT: u16 = 2;
const STATE_TAG: [u8; 4] = *b"FWS\0";

/// Serializes a state for a checkpoint: the one place that knows the format [`open`] reads.
pub fn encode_state(state: &LiveState) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    out.extend_from_slice(&STATE_TAG);
    out.extend_from_slice(&STATE_LAYOUT.to_le_bytes());
    postcard::to_extend(state, out).expect("the live state serializes")
}

/// Reads a state saved by [`encode_state`].
pub fn decode_state(bytes: &[u8]) -> Result<LiveState, String> {
    let layout = bytes
        .strip_prefix(&STATE_TAG)
        .and_then(|rest| rest.get(..2))
        .map(|l| u16::from_le_bytes([l[0], l[1]]));
    match layout {
        Some(STATE_LAYOUT) => postcard::from_bytes(&bytes[6..]).map_err(|e| e.to_string()),
        Some(other) => Err(format!(
            "written by a fencewatch with state layout {other}; this one reads layout {STATE_LAYOUT}"
        )),
        None => Err(format!(
            "written by an earlier fencewatch (state layout 1); this one reads layout {STATE_LAYOUT}"
        )),
    }
}

/// Saves a checkpoint of `state` (from [`snapshot`]) at `offset` (the next record's base) and
/// deletes the WAL segments every kept checkpoint covers. Returns the WAL bytes freed.
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

    fn contract() -> Contract {
        Contract::parse(
            "c.toml",
            "[[property]]\nname=\"p\"\nsubject=\"S\"\nstrategy=\"lease_epoch\"\n[[property.route]]\nname=\"r\"\n",
        )
        .unwrap()
    }

    fn opts() -> PartitionOptions {
        PartitionOptions {
            segment_bytes: 4096,
            max_line_bytes: 1 << 20,
            live: LiveOptions::default(),
        }
    }

    const BATCH: &str = "{\"kind\":\"commit\",\"ts\":1000,\"scope\":\"o\",\"epoch\":2,\"route\":\"r\"}\n\n{\"kind\":\"commit\",\"ts\":\"bad\"}\n{\"kind\":\"commit\",\"ts\":2000000000,\"scope\":\"o\",\"epoch\":1,\"route\":\"r\"}\n";

    #[test]
    fn payload_round_trip_and_item_counts() {
        let p = encode(Format::Ndjson, 42, "http", None, BATCH.as_bytes());
        let b = decode(&p).unwrap();
        assert_eq!(
            (b.format, b.received_at, b.source),
            (Format::Ndjson, 42, "http")
        );
        assert_eq!(b.body, BATCH.as_bytes());
        assert_eq!(p.len(), header_len("http") + BATCH.len());
        let mut q = encode_header(Format::Ndjson, 42, "http", None, 2);
        q.extend_from_slice(b"[]");
        set_format(&mut q, Format::Array);
        assert_eq!(q, encode(Format::Array, 42, "http", None, b"[]"));
        assert_eq!(items(Format::Ndjson, BATCH.as_bytes()), 4);
        assert_eq!(items(Format::Ndjson, b"{}"), 1);
        assert_eq!(items(Format::Ndjson, b""), 0);
        assert_eq!(items(Format::Array, b"[{}, {}, 3]"), 3);
        assert_eq!(items(Format::Array, b"[{}, {}, NaN]"), 1);
        assert!(decode(&p[..5]).is_err());
    }

    #[test]
    fn apply_reports_item_errors_and_keeps_valid_ones() {
        let mut live = Live::new(contract(), LiveOptions::default());
        let b = Batch {
            format: Format::Ndjson,
            received_at: 10_000_000_000,
            source: "http",
            first_line: None,
            body: BATCH.as_bytes(),
        };
        let a = apply(&mut live, 100, &b, 1 << 20);
        assert_eq!(a.accepted, 2);
        assert_eq!((a.errors.len(), a.malformed), (1, 1));
        assert_eq!((a.errors[0].item, a.errors[0].offset), (3, 102));
        let page = live
            .view()
            .counterexamples(None, None, None, None, None, 10);
        assert_eq!(page.counterexamples.len(), 1);
        assert_eq!(page.counterexamples[0].stale.source, "http:103");
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
                apply(&mut o.live, base, &decode(&payload).unwrap(), 1 << 20);
                if i == 20 {
                    let state = snapshot(&o.live);
                    let next = o.wal.next_offset();
                    checkpoint(&mut o.wal, &mut o.checkpoints, next, &state).unwrap();
                }
            }
            let page = o
                .live
                .view()
                .counterexamples(None, None, None, None, None, 1000);
            ids.extend(page.counterexamples.into_iter().map(|c| c.id));
            assert!(!ids.is_empty());
        }
        let o = open(dir.path(), contract(), opts()).unwrap();
        assert_eq!(o.restored_from, Some(21));
        assert_eq!(o.replayed_records, 29);
        let page = o
            .live
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
                apply(&mut o.live, base, &decode(&payload).unwrap(), 1 << 20);
                if i == 0 {
                    let state = snapshot(&o.live);
                    let next = o.wal.next_offset();
                    checkpoint(&mut o.wal, &mut o.checkpoints, next, &state).unwrap();
                }
            }
            want = o.live.totals();
            // A newer checkpoint with a valid frame and crc whose state does not decode (as
            // one written by a build with another state layout would be).
            let next = o.wal.next_offset();
            o.checkpoints
                .save(next, b"\xff\xff\xff not a state")
                .unwrap();
        }
        let o = open(dir.path(), contract(), opts()).unwrap();
        assert_eq!(o.restored_from, Some(1));
        assert_eq!(o.live.totals(), want);
    }

    #[test]
    fn options_of_the_configuration_replace_the_checkpoints_after_replay() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut o = open(dir.path(), contract(), opts()).unwrap();
            let state = snapshot(&o.live);
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
        assert_eq!(o.live.options(), changed.live);
    }

    #[test]
    fn a_log_that_ends_before_its_checkpoint_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut o = open(dir.path(), contract(), opts()).unwrap();
            let payload = encode(Format::Ndjson, 1 << 40, "http", None, BATCH.as_bytes());
            o.wal.append(4, &payload).unwrap();
            o.wal.sync().unwrap();
            let state = snapshot(&o.live);
            checkpoint(&mut o.wal, &mut o.checkpoints, 4, &state).unwrap();
        }
        // The log is lost; the checkpoint remains.
        std::fs::remove_dir_all(dir.path().join("wal")).unwrap();
        let err = open(dir.path(), contract(), opts()).unwrap_err();
        assert!(err.to_string().contains("missing from the log"), "{err}");
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
            let state = snapshot(&o.live);
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
                apply(&mut o.live, base, &decode(&payload).unwrap(), 1 << 20);
            }
            assert!(o.wal.segments() > 1);
            want = o.live.totals();
            end = o.wal.next_offset();
            // As an earlier build wrote it: no layout tag.
            let untagged = encode_state(o.live.state())[6..].to_vec();
            o.checkpoints.save(end, &untagged).unwrap();
        }
        // The log still starts at 0: rebuilt from it, exactly.
        let o = open(dir.path(), contract(), opts()).unwrap();
        assert_eq!(o.restored_from, None);
        assert_eq!(o.live.totals(), want);
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
    fn a_changed_contract_is_refused_with_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut o = open(dir.path(), contract(), opts()).unwrap();
            let state = snapshot(&o.live);
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
