//! What applying a batch tells an observer (the evidence archive), item by item: the shape a
//! partition calls and the archive implements, apart from both.

use super::{Batch, DecodedItems};
use fencewatch_assess::live::{Live, Pushed, SpanId};
use fencewatch_assess::{Event, EventTime};

/// Where the items of a batch being applied sit: item `i` is at offset `base + i`, and at
/// position [`Applying::position`] of its source (its provenance).
#[derive(Debug, Clone, Copy)]
pub struct Applying<'a> {
    /// Offset of the batch's first item.
    pub base: u64,
    /// The batch.
    pub batch: &'a Batch<'a>,
}

impl Applying<'_> {
    /// The position of item `i` in its source: its line (file ingest) or offset.
    pub fn position(&self, i: u64) -> u64 {
        self.batch.first_line.map_or(self.base + i, |l| l + i)
    }
}

/// What applying a batch tells an observer (the evidence archive), item by item, in order.
/// Every method does nothing by default.
pub trait Observer {
    /// Whether it is told each item's text (else the items of a batch without decoding
    /// errors are applied without walking its text).
    const TEXT: bool = false;
    /// Item `i` decoded to `ev`, and `live` made `pushed` of it just now; `span` is its own
    /// provenance (an OTLP span), if it has one. When the assessor found it malformed,
    /// [`Observer::malformed`] follows with its text.
    fn event(
        &mut self,
        _live: &mut Live,
        _at: &Applying<'_>,
        _i: u64,
        _span: Option<&SpanId>,
        _ev: &Event<'_>,
        _pushed: Pushed,
    ) {
    }
    /// Item `i` is malformed: why, its time if that parsed, and its text (empty for OTLP).
    #[allow(clippy::too_many_arguments)]
    fn malformed(
        &mut self,
        _at: &Applying<'_>,
        _i: u64,
        _span: Option<&SpanId>,
        _ts: Option<EventTime>,
        _reason: &str,
        _text: &[u8],
    ) {
    }
}

/// The observer that observes nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct Unobserved;

impl Observer for Unobserved {}

/// Applied batches kept for an observer that reads their events again after they were applied
/// (the evidence archive, on its own thread: the applier, ingest's serial stage, then only
/// notes what each event came to). Implemented by the WAL source's decoded groups.
pub trait Retained: Send + Sync + std::fmt::Debug {
    /// Calls `f` with batch `k` of the group and its items, as they were applied.
    fn with_batch(&self, k: usize, f: &mut dyn FnMut(&Batch<'_>, &DecodedItems<'_>));
}

/// Calls `each` with the events of a decoded batch from item `from` on, in the order the
/// batch is applied ([`crate::partition`]): its item index, its span (an OTLP span's own
/// provenance) and the event; until `each` returns `false`.
#[cfg(feature = "archive")]
pub(crate) fn for_each_event(
    items: &DecodedItems<'_>,
    from: u32,
    mut each: impl FnMut(u32, Option<&SpanId>, &Event<'_>) -> bool,
) {
    #[cfg(feature = "otlp")]
    if let Some(otlp) = &items.otlp {
        use super::OtlpItems;
        use crate::decode::otlp::Entry;
        let mut one = |i: usize, e: &Entry<'_>| match e {
            Entry::Event(ev, span) => each(i as u32, *span, ev),
            Entry::Malformed(_) => true,
        };
        match otlp {
            OtlpItems::Stored(entries) => {
                let from = (from as usize).min(entries.len());
                for (i, e) in entries.iter().enumerate().skip(from) {
                    if !one(i, e) {
                        return;
                    }
                }
            }
            OtlpItems::Request(d) => {
                for (i, e) in d.entries().enumerate().skip(from as usize) {
                    if !one(i, &e) {
                        return;
                    }
                }
            }
        }
        return;
    }
    let start = items.events.partition_point(|(i, _)| *i < from);
    for (i, d) in &items.events[start..] {
        if !each(*i, None, &d.event()) {
            return;
        }
    }
}
