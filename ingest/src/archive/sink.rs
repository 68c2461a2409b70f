//! The sink of one partition: collects the rows of the items applied to its assessor and
//! hands them to the [`Archive`], every [`CHUNK_ROWS`] rows or [`CHUNK_BYTES`] of events'
//! strings, and when a group is applied.
//!
//! Every item (event, malformed line, Kafka message) has its own offset, and the rows it
//! produces (its event or malformed row, the counterexamples its push settled) depend only on
//! the assessor's state before it and on the item: so the archive's progress is kept per item,
//! and rows can be handed over in the middle of a record (a body of two million malformed
//! lines costs a bounded buffer, not two million rows in memory).

use super::applied::{Noted, Segment};
use super::chunk::Chunk;
use super::log::{CHUNK_BYTES, CHUNK_ROWS, EventLog};
use super::rows::{CounterexampleRows, MalformedRows, Origin, Rows, Src, Table};
use super::writer::Archive;
use crate::batch::{Applying, Observer, Retained};
use fencewatch_assess::live::{Live, Pushed, SpanId};
use fencewatch_assess::{Contract, Event, EventTime};
use std::sync::Arc;

/// The sink of one partition (`wal`, or `<topic>/<partition>`). Items whose offset is below
/// the archived offset it started from were archived before a restart: their rows are
/// skipped (the module doc of [`crate::archive`]).
#[derive(Debug)]
pub struct Sink {
    archive: Arc<Archive>,
    partition: String,
    skip_below: u64,
    /// The property of events that name none, when the contract has exactly one.
    only_property: Option<Arc<str>>,
    /// Applied events, made Arrow on the archive's thread ([`super::log`]).
    events: EventLog,
    /// The events of the batch being applied, when its group is kept for the archive to read
    /// again: noted, not logged ([`super::applied`]).
    noting: Option<Segment>,
    /// Events' chunks not handed over yet, in offset order, before those in `events`.
    noted: Vec<Chunk>,
    malformed: MalformedRows,
    cxs: CounterexampleRows,
    /// Every row of the items below this is collected.
    next: u64,
}

impl Sink {
    /// The sink of `partition`, resuming after what the archive holds of it.
    pub fn new(archive: Arc<Archive>, partition: &str, contract: &Contract) -> Sink {
        let skip_below = archive.archived(partition);
        Sink {
            archive,
            partition: partition.to_string(),
            skip_below,
            only_property: (contract.properties.len() == 1)
                .then(|| contract.properties[0].name.as_str().into()),
            events: EventLog::new(partition),
            noting: None,
            noted: Vec::new(),
            malformed: MalformedRows::default(),
            cxs: CounterexampleRows::default(),
            next: skip_below,
        }
    }

    /// The partition's name.
    pub fn partition(&self) -> &str {
        &self.partition
    }

    /// The offset below which rows were archived before this sink started.
    pub fn skip_below(&self) -> u64 {
        self.skip_below
    }

    /// [`Archive::listed_below`] of its partition.
    pub fn listed_below(&self) -> Option<u64> {
        self.archive.listed_below(&self.partition)
    }

    /// Makes `live` report the counterexamples it settles (call once, before it takes events).
    pub fn attach(&self, live: &mut Live) {
        live.collect_settled();
    }

    /// The event at `offset` of the partition, with its provenance `source` (`http:17`,
    /// `events.ndjson:3`, `orders/2:40`, `otlp:…/…`), that `live` just made `pushed` of.
    pub fn event(
        &mut self,
        live: &mut Live,
        received: i64,
        source: Src<'_>,
        offset: u64,
        ev: &Event<'_>,
        pushed: Pushed,
    ) {
        // Pushing it may have settled counterexamples: they are this item's rows too.
        let settled = live.take_settled_counterexamples();
        let archived = offset >= self.skip_below;
        if archived {
            self.hand_over_if_full();
        }
        // A duplicate delivery was not applied; a malformed one is a `malformed` row; a span
        // delivered again is not archived again (SPEC §8): its first delivery's row holds its
        // source.
        let noted = match pushed {
            _ if !archived => Noted::Skipped,
            Pushed::Assessed => Noted::Assessed,
            Pushed::Unattributed => Noted::Unattributed,
            Pushed::Duplicate | Pushed::Malformed | Pushed::SpanAgain => Noted::Skipped,
        };
        if let Some(segment) = &mut self.noting {
            segment.note(offset, noted);
        } else if noted != Noted::Skipped {
            let property = noted.property(ev, self.only_property.as_deref());
            self.events.push(received, ev, property, source, offset);
        }
        if !archived {
            return;
        }
        for s in &settled {
            self.cxs.push(s);
        }
        self.done(offset);
    }

    /// The events of the batch about to be applied, batch `batch` of `kept` at offset `base`
    /// (`body` bytes, `items` items), are noted, not logged: the archive reads them from
    /// `kept` again ([`super::applied`]). Until [`Sink::record`] ends the batch.
    pub fn defer(
        &mut self,
        kept: Arc<dyn Retained>,
        batch: usize,
        base: u64,
        body: usize,
        items: usize,
    ) {
        if !self.events.is_empty() {
            self.noted.push(Chunk::events(self.events.take()));
        }
        self.noting = Some(Segment::new(kept, batch, base, body, items));
    }

    /// The events noted so far become a chunk, handed over before those logged since.
    fn cut(&mut self) {
        if let Some(segment) = &mut self.noting
            && let Some(events) = segment.cut(&self.partition, self.only_property.as_ref())
        {
            self.noted.push(Chunk::Applied(Arc::new(events)));
        }
    }

    /// The malformed item at `offset`, with its provenance `source`.
    #[allow(clippy::too_many_arguments)]
    pub fn malformed(
        &mut self,
        received: i64,
        source: Src<'_>,
        offset: u64,
        ts: Option<EventTime>,
        reason: &str,
        text: &[u8],
    ) {
        if offset < self.skip_below {
            return;
        }
        // An event the assessor found malformed is told as an event first: its item has begun,
        // and a hand-over now would cover it without this row (lost after a crash: a replay
        // starts past it). Hand over only before an item's first row.
        if self.next <= offset {
            self.hand_over_if_full();
        }
        let at = Origin {
            partition: &self.partition,
            received,
        };
        self.malformed.push(at, ts, source, reason, text, offset);
        self.done(offset);
    }

    /// Every row of item `offset` is collected.
    fn done(&mut self, offset: u64) {
        self.next = self.next.max(offset + 1);
    }

    /// Hands the rows over when there are enough: only before an item's rows or after a
    /// record's end, never right after an item, whose record may still settle
    /// counterexamples ([`Sink::record`]) that a hand-over covering it would leave out.
    fn hand_over_if_full(&mut self) {
        let (mut rows, mut text) = (0, 0);
        for c in &self.noted {
            rows += c.num_rows();
            text += c.text_bytes();
        }
        if let Some(s) = &self.noting {
            rows += s.rows();
            text += s.text_bytes();
        }
        rows += self.events.len() + self.malformed.len() + self.cxs.len();
        if rows >= CHUNK_ROWS || text + self.events.text_bytes() >= CHUNK_BYTES {
            self.archive.wait_for_room_briefly();
            self.hand_over();
        }
    }

    /// After the record ending before `next` was applied to `live`: what it settled outside
    /// a push, and its end.
    pub fn record(&mut self, live: &mut Live, next: u64) {
        let settled = live.take_settled_counterexamples();
        if next > self.skip_below {
            for s in &settled {
                self.cxs.push(s);
            }
        }
        self.next = self.next.max(next);
        self.cut();
        self.noting = None;
        self.hand_over_if_full();
    }

    /// Hands the rows collected to the archive, with the offset every row below which is
    /// now in it. Call while the assessor is still locked, so a query sees rows and state
    /// alike.
    pub fn commit(&mut self) {
        self.hand_over();
    }

    fn hand_over(&mut self) {
        self.cut();
        let mut out = Vec::with_capacity(3 + self.noted.len());
        out.extend(self.noted.drain(..).map(|c| (Table::Events, c)));
        if !self.events.is_empty() {
            out.push((Table::Events, Chunk::events(self.events.take())));
        }
        for (t, rows) in [
            (Table::Malformed, &mut self.malformed as &mut dyn Finish),
            (Table::Counterexamples, &mut self.cxs),
        ] {
            if rows.count() > 0 {
                out.push((t, Chunk::Batch(rows.take())));
            }
        }
        self.archive.commit(&self.partition, self.next, out);
    }

    /// Waits while the archive holds too much not yet written (backpressure): call before
    /// locking the assessor.
    pub fn wait_for_room(&self) {
        self.archive.wait_for_room();
    }

    /// The partition's log started over from offset 0 (a Kafka topic recreated): its rows are
    /// taken from there on.
    pub fn rewound(&mut self) {
        self.skip_below = 0;
        self.next = 0;
        self.archive.rewound(&self.partition);
    }
}

/// A table's builders, whatever the table.
trait Finish {
    fn count(&self) -> usize;
    fn take(&mut self) -> arrow_array::RecordBatch;
}

impl<R: Rows> Finish for R {
    fn count(&self) -> usize {
        self.len()
    }
    fn take(&mut self) -> arrow_array::RecordBatch {
        self.finish()
    }
}

impl Observer for Sink {
    const TEXT: bool = true;

    fn event(
        &mut self,
        live: &mut Live,
        at: &Applying<'_>,
        i: u64,
        span: Option<&SpanId>,
        ev: &Event<'_>,
        pushed: Pushed,
    ) {
        let src = Src::of_item(at, i, span);
        let received = at.batch.received_at;
        Sink::event(self, live, received, src, at.base + i, ev, pushed);
    }

    fn malformed(
        &mut self,
        at: &Applying<'_>,
        i: u64,
        span: Option<&SpanId>,
        ts: Option<EventTime>,
        reason: &str,
        text: &[u8],
    ) {
        let src = Src::of_item(at, i, span);
        let received = at.batch.received_at;
        Sink::malformed(self, received, src, at.base + i, ts, reason, text);
    }
}
