//! The `events` rows of batches the WAL source applied, read again on the archive's thread.
//!
//! The applier is ingest's serial stage: logging each event there ([`EventLog::push`], ~520
//! instructions an event, and its writes beside the assessor's tables) took 0.1–0.25 µs of the
//! applier's ~0.8 µs an event, which HTTP ingest's throughput follows. The WAL source keeps
//! each decoded group alive until the archive has read it ([`Retained`]); while a batch is
//! applied the sink only notes what each event came to (one byte: [`Noted`]), and the
//! archive's thread (or a query reading the rows first) reads the batch's events again and
//! logs the noted ones, in the same order, with the same fields, provenance and offsets as
//! the applier would have ([`AppliedEvents::batches`], [`read_group`]).

use super::log::{CHUNK_BYTES, EventLog, LogShape};
use super::rows::Src;
use crate::batch::{Applying, Retained, for_each_event};
use arrow_array::RecordBatch;
use fencewatch_assess::Event;
use std::sync::{Arc, Mutex, MutexGuard};

/// Bytes a decoded event holds in its group (an NDJSON event's `Decoded` and item index; an
/// OTLP event's entry is smaller), counted for each event a chunk keeps alive.
const DECODED_BYTES: usize = std::mem::size_of::<(u32, crate::decode::json::Decoded<'static>)>();

/// What an event of a batch came to, for the archive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(super) enum Noted {
    /// No row: a duplicate, malformed (a `malformed` row), a span delivered again, or below
    /// the offset the archive already holds.
    Skipped,
    /// Assessed: its row names its property, or the contract's only one.
    Assessed,
    /// Applied without a property (unattributed): its row has none.
    Unattributed,
}

impl Noted {
    /// The property the row of `ev` names (`only`: the contract's only one, for an event that
    /// names none).
    pub(super) fn property<'a>(self, ev: &Event<'a>, only: Option<&'a str>) -> Option<&'a str> {
        match self {
            Noted::Assessed => ev.property.or(only),
            Noted::Skipped | Noted::Unattributed => None,
        }
    }
}

/// The events of one batch being noted by a sink, from item `from` on.
#[derive(Debug)]
pub(super) struct Segment {
    kept: Arc<dyn Retained>,
    /// The batch's index in its group, and its offset.
    batch: usize,
    base: u64,
    /// The batch's body bytes and items: a segment's share of the body is its memory.
    body: usize,
    items: usize,
    /// The first item the segment covers; the items it covers ends after the last noted.
    from: u32,
    end: u32,
    noted: Vec<Noted>,
    rows: usize,
}

impl Segment {
    /// The events of batch `batch` of `kept` at offset `base`, `body` bytes and `items` items
    /// long, from its first item on.
    pub(super) fn new(
        kept: Arc<dyn Retained>,
        batch: usize,
        base: u64,
        body: usize,
        items: usize,
    ) -> Segment {
        Segment {
            kept,
            batch,
            base,
            body,
            items,
            from: 0,
            end: 0,
            noted: Vec::new(),
            rows: 0,
        }
    }

    /// Notes what the event at `offset` came to: the next event of the batch.
    pub(super) fn note(&mut self, offset: u64, n: Noted) {
        let i = (offset - self.base) as u32;
        if self.noted.is_empty() {
            self.from = i;
        }
        self.end = i + 1;
        self.noted.push(n);
        self.rows += usize::from(n != Noted::Skipped);
    }

    /// Rows noted.
    pub(super) fn rows(&self) -> usize {
        self.rows
    }

    /// The share of the batch's body of the items noted (an item's own bytes are not known
    /// here): about the bytes of their strings, which a sink hands over by
    /// ([`CHUNK_BYTES`]).
    pub(super) fn text_bytes(&self) -> usize {
        if self.noted.is_empty() {
            return 0;
        }
        let share =
            self.body as u128 * u128::from(self.end - self.from) / self.items.max(1) as u128;
        share as usize
    }

    /// The rows noted (none if there are none), and the segment goes on after them.
    pub(super) fn cut(
        &mut self,
        partition: &str,
        only_property: Option<&Arc<str>>,
    ) -> Option<AppliedEvents> {
        let text = self.text_bytes();
        let noted = std::mem::take(&mut self.noted);
        let rows = std::mem::take(&mut self.rows);
        let from = self.from;
        self.from = self.end;
        if rows == 0 {
            return None;
        }
        // Until read: the decoded items of the events noted (the body's share is `text`);
        // then the log, whose texts become the batch's buffers, and the batch's other columns.
        let decoded = noted.len() * DECODED_BYTES;
        let bytes = decoded + 2 * (text + rows * EventLog::ROW_BYTES);
        Some(AppliedEvents {
            read: Mutex::new(Read::Kept(self.kept.clone())),
            batch: self.batch,
            base: self.base,
            from,
            noted,
            rows,
            text,
            bytes,
            partition: partition.to_string(),
            only_property: only_property.cloned(),
        })
    }
}

/// Noted events of an applied batch, and, once read, their batches.
#[derive(Debug)]
pub struct AppliedEvents {
    read: Mutex<Read>,
    batch: usize,
    base: u64,
    from: u32,
    noted: Vec<Noted>,
    rows: usize,
    /// [`Segment::text_bytes`] when cut.
    text: usize,
    bytes: usize,
    partition: String,
    only_property: Option<Arc<str>>,
}

/// Whether a chunk's events were read.
#[derive(Debug)]
enum Read {
    /// Not yet: the group they are read from (dropped once read, so that its payloads go
    /// once every batch of it is).
    Kept(Arc<dyn Retained>),
    /// Their batches.
    Batches(Vec<RecordBatch>),
}

impl AppliedEvents {
    /// Rows.
    pub(super) fn rows(&self) -> usize {
        self.rows
    }

    /// About the bytes of its rows' strings ([`Segment::text_bytes`]).
    pub(super) fn text_bytes(&self) -> usize {
        self.text
    }

    /// The memory it holds, or will once read: its share of the batch's body and its events'
    /// decoded items, then the log its rows become (whose texts the batch takes) and the batch.
    pub(super) fn bytes(&self) -> usize {
        self.bytes
    }

    fn lock(&self) -> MutexGuard<'_, Read> {
        self.read.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Its partition.
    pub(super) fn partition(&self) -> &str {
        &self.partition
    }

    /// Its events, locked, if they are not read yet.
    pub(super) fn unread(&self) -> Option<Unread<'_>> {
        let read = self.lock();
        matches!(*read, Read::Kept(_)).then_some(Unread(self, read))
    }

    /// Its rows, read once (by the archive's thread or a query, whichever comes first).
    pub(super) fn batches(&self) -> Vec<RecordBatch> {
        if let Some(unread) = self.unread() {
            read_group(&mut vec![unread], &mut LogShape::default(), &mut Vec::new());
        }
        match &*self.lock() {
            Read::Batches(b) => b.clone(),
            Read::Kept(_) => unreachable!("read just now"),
        }
    }

    /// Reads the batch's events again from `kept` and logs the noted ones into `log` as the
    /// sink would have; a log that reaches [`CHUNK_BYTES`] of strings goes to `out` as a
    /// batch (an Arrow string column holds 2 GiB).
    fn read_into(&self, kept: &dyn Retained, log: &mut EventLog, out: &mut Vec<RecordBatch>) {
        kept.with_batch(self.batch, &mut |batch, items| {
            let at = Applying {
                base: self.base,
                batch,
            };
            let mut noted = self.noted.iter();
            for_each_event(items, self.from, |i, span, ev| {
                // The events after the last noted are the next chunk's.
                let Some(&n) = noted.next() else {
                    return false;
                };
                if n == Noted::Skipped {
                    return true;
                }
                let property = n.property(ev, self.only_property.as_deref());
                let i = u64::from(i);
                let source = Src::of_item(&at, i, span);
                log.push(batch.received_at, ev, property, source, at.base + i);
                if log.text_bytes() >= CHUNK_BYTES {
                    out.push(log.take().into_batch());
                }
                true
            });
            debug_assert!(noted.next().is_none(), "every noted event read again");
        });
    }
}

/// An applied batch's events not read yet, locked until read (a query reading them waits).
pub(super) struct Unread<'a>(&'a AppliedEvents, MutexGuard<'a, Read>);

impl Unread<'_> {
    /// The partition of the events.
    pub(super) fn partition(&self) -> &str {
        self.0.partition()
    }
}

/// Reads the events of `group` into one log, one batch; each chunk keeps its slice of it.
/// Should their strings pass [`CHUNK_BYTES`] after all (a chunk's are estimated from its share
/// of its body), the log is cut into several batches: the first chunk then keeps them all and
/// the others none (a snapshot takes every chunk's, in order: the same rows).
pub(super) fn read_group(
    group: &mut Vec<Unread<'_>>,
    shape: &mut LogShape,
    out: &mut Vec<RecordBatch>,
) {
    let Some(partition) = group.first().map(|u| u.0.partition.as_str()) else {
        return;
    };
    let rows = group.iter().map(|u| u.0.rows).sum();
    let mut log = EventLog::sized_like(partition, rows, shape);
    let mut ends = Vec::with_capacity(group.len());
    let mut batches = Vec::new();
    for Unread(a, read) in group.iter() {
        let Read::Kept(kept) = &**read else {
            unreachable!("only chunks not read are grouped")
        };
        a.read_into(kept.as_ref(), &mut log, &mut batches);
        ends.push(log.len());
    }
    *shape = log.shape();
    if batches.is_empty() {
        let batch = log.into_batch();
        let mut start = 0;
        for (Unread(_, mut read), end) in group.drain(..).zip(ends) {
            *read = Read::Batches(vec![batch.slice(start, end - start)]);
            start = end;
        }
        out.push(batch);
        return;
    }
    if !log.is_empty() {
        batches.push(log.into_batch());
    }
    for (k, Unread(_, mut read)) in group.drain(..).enumerate() {
        *read = Read::Batches(if k == 0 { batches.clone() } else { Vec::new() });
    }
    out.extend(batches);
}
