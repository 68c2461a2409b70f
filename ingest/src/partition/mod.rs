//! A partition: one ordered, offset-addressed stream of batches (the local WAL, a Kafka
//! partition) and the live assessor it feeds (SPEC §5). Every source's partitions are
//! restored ([`restore`]), replayed and applied ([`Partition::apply`]), reported
//! ([`Partition::report`]) and checkpointed ([`Partition::snapshot`]) by this one piece of
//! code; sources differ only in where their batches come from and where their offsets are
//! committed.
//!
//! Applying a batch decodes it ([`crate::batch`]) and pushes its events in item order; a
//! batch whose base is below the partition's next offset is already in the state (a WAL
//! record before the checkpoint, a Kafka message fetched twice) and is passed over. The core
//! is deterministic and the only wall time it sees is the batch's received time, so a replay
//! finds exactly what the first pass found.
//!
//! Checkpoints are taken at batch boundaries: the assessor's state ([`state`]) with the offset
//! of the next batch. [`local`] is the partition whose batches are in the local write-ahead
//! log.
//!
//! With the evidence archive (feature `archive`), a partition has a sink into it
//! ([`Partition::attach_archive`]): every item applied is told to it, and its rows are handed
//! over when the partition reports.

mod apply;
pub mod local;

pub use crate::batch::{Applying, Observer, Unobserved};
pub mod restore;
pub mod state;

use crate::batch::{self, Batch, DecodedItems, PayloadError, Retained};
use crate::checkpoint;
use crate::decode::json::DecodeError;
use crate::report::{
    CounterexampleFound, CounterexampleWithdrawn, InternalEvent, Metrics, StaleRejected,
};
use crate::wal;
use fencewatch_assess::live::{ContractChanged, Live};
use std::path::PathBuf;

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
        reason: PayloadError,
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
    /// The evidence archive holds rows of offsets the log no longer holds.
    #[error(
        "{wal}: the write-ahead log ends at offset {end} but the evidence archive holds the rows of every offset below {archived}: acknowledged events are missing from the log (a repair cut them, or segments were lost); refusing to reuse their offsets, whose new events the archive would never take. The archive keeps the lost events: move its folder (`archive` in the data directory) aside to start with a new one (the old one stays readable, e.g. by DuckDB), or put the lost segments back"
    )]
    LogBehindArchive {
        /// The log's directory.
        wal: PathBuf,
        /// Where the log ends.
        end: u64,
        /// The offset below which the archive holds every row.
        archived: u64,
    },
    /// The evidence archive lacks rows of offsets the restored state covers, and no older
    /// state to apply them again from is kept.
    #[error(
        "partition {partition}: the evidence archive holds its rows only below offset {archived}, but the assessment state covers the offsets below {restored}, and neither a checkpoint at or below {archived} nor the partition's records from offset 0 are kept{kept}: the rows of offsets {archived}..{restored} would never be archived. This archive is not the one the data directory last wrote to (moved aside and back, copied, or its manifest replaced); nothing was changed. Put that archive back, or move this one (`archive` in the data directory) aside to start a new archive from offset {restored} (the old one stays readable, e.g. by DuckDB)"
    )]
    ArchiveBehindState {
        /// The partition.
        partition: String,
        /// The offset below which the archive holds every row.
        archived: u64,
        /// The offset the restored checkpoint covers.
        restored: u64,
        /// What the source still holds, as a note (", the log starts at offset N").
        kept: String,
    },
    /// A file or folder could not be created, moved or synced.
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
    /// Its offset.
    pub offset: u64,
    /// What is wrong.
    pub error: DecodeError,
}

/// Malformed items of one batch whose error is listed in [`Applied::errors`]; the others are
/// counted in `Applied::malformed` (SPEC §2: the first 100 listed, then a count).
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

/// One partition's assessor and where the partition stands. See the [module docs](self).
#[derive(Debug)]
pub struct Partition {
    name: String,
    live: Live,
    /// The next offset to apply: batches below it are in the state.
    next: u64,
    /// The offset the last saved checkpoint covers.
    checkpointed: u64,
    /// Read to its end with nothing newer since: nothing of it is in flight.
    idle: bool,
    /// What the metrics were told of its findings.
    reported: Reported,
    /// Its sink into the evidence archive, when attached.
    #[cfg(feature = "archive")]
    sink: Option<crate::archive::Sink>,
}

impl Partition {
    /// Partition `name` (`wal`, `topic/partition`) whose state `live` covers the offsets
    /// below `next` (restored from a checkpoint at `next`, or empty at 0). What it holds was
    /// reported by the process that applied it.
    pub fn new(name: &str, live: Live, next: u64) -> Partition {
        Partition {
            name: name.to_string(),
            reported: Reported::of(&live),
            live,
            next,
            checkpointed: next,
            idle: false,
            #[cfg(feature = "archive")]
            sink: None,
        }
    }

    /// Feeds every item applied from now on to the evidence archive, resuming after what
    /// it holds of this partition (call before replaying anything).
    #[cfg(feature = "archive")]
    pub fn attach_archive(&mut self, archive: std::sync::Arc<crate::archive::Archive>) {
        let sink = crate::archive::Sink::new(archive, &self.name, self.live.contract());
        sink.attach(&mut self.live);
        self.sink = Some(sink);
    }

    /// Starts again from `live`, whose state covers the offsets below `next`, keeping its
    /// archive's sink (nothing may have been applied yet).
    pub fn restart_from(&mut self, live: Live, next: u64) {
        #[cfg(feature = "archive")]
        let sink = self.sink.take();
        *self = Partition::new(&self.name, live, next);
        #[cfg(feature = "archive")]
        if let Some(sink) = sink {
            sink.attach(&mut self.live);
            self.sink = Some(sink);
        }
    }

    /// The offset below which the evidence archive held every row of this partition when
    /// attached ([`Partition::attach_archive`]); `None` without an archive.
    pub fn archived_below(&self) -> Option<u64> {
        #[cfg(feature = "archive")]
        return self.sink.as_ref().map(crate::archive::Sink::skip_below);
        #[cfg(not(feature = "archive"))]
        None
    }

    /// The offset below which the evidence archive holds every row of this partition, when
    /// it is attached and lists the partition (a new archive, or one that never took a row of
    /// it, does not: it starts where the partition is).
    pub fn archive_lists(&self) -> Option<u64> {
        #[cfg(feature = "archive")]
        return self
            .sink
            .as_ref()
            .and_then(crate::archive::Sink::listed_below);
        #[cfg(not(feature = "archive"))]
        None
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The assessor.
    pub fn live(&self) -> &Live {
        &self.live
    }

    /// The assessor, to change its options or feed it other partitions' seqs.
    pub fn live_mut(&mut self) -> &mut Live {
        &mut self.live
    }

    /// The next offset to apply.
    pub fn next(&self) -> u64 {
        self.next
    }

    /// Whether the partition was read to its end with nothing newer since.
    pub fn is_idle(&self) -> bool {
        self.idle
    }

    /// Marks the partition read to its end (nothing in flight) or not.
    pub fn set_idle(&mut self, idle: bool) {
        self.idle = idle;
    }

    /// Whether it moved since its last checkpoint.
    pub fn dirty(&self) -> bool {
        self.next > self.checkpointed
    }

    /// Applies the batch at offsets `base..base + len` (decoding it here), unless it is
    /// already in the state (`None`).
    pub fn apply(
        &mut self,
        base: u64,
        len: u64,
        batch: &Batch<'_>,
        max_line_bytes: usize,
    ) -> Option<Applied> {
        if base < self.next {
            return None;
        }
        let items = batch::decode_items(batch, max_line_bytes);
        self.apply_decoded(base, len, batch, &items, max_line_bytes)
    }

    /// Applies a batch decoded by [`batch::decode_items`] (with the same `max_line_bytes`),
    /// unless it is already in the state (`None`).
    pub fn apply_decoded(
        &mut self,
        base: u64,
        len: u64,
        batch: &Batch<'_>,
        items: &DecodedItems<'_>,
        max_line_bytes: usize,
    ) -> Option<Applied> {
        self.apply_kept(base, len, batch, items, None, max_line_bytes)
    }

    /// [`Partition::apply_decoded`] of batch `kept.1` of the group `kept.0`, which is kept
    /// alive for the evidence archive: the archive reads its events again on its own thread,
    /// and the applier only notes what each came to ([`crate::archive::Sink::defer`]).
    pub fn apply_kept(
        &mut self,
        base: u64,
        len: u64,
        batch: &Batch<'_>,
        items: &DecodedItems<'_>,
        #[cfg_attr(not(feature = "archive"), allow(unused_variables))] kept: Option<(
            &std::sync::Arc<dyn Retained>,
            usize,
        )>,
        max_line_bytes: usize,
    ) -> Option<Applied> {
        if base < self.next {
            return None;
        }
        let next = base + len.max(1);
        #[cfg(feature = "archive")]
        if let Some(sink) = &mut self.sink {
            // A legacy OTLP record (a reduced request) decodes whole at each read: logged here.
            if let Some((group, k)) = kept.filter(|_| items.can_read_again()) {
                let items = usize::try_from(len.max(1)).unwrap_or(usize::MAX);
                sink.defer(group.clone(), k, base, batch.body.len(), items);
            }
            let a = apply::apply_decoded(&mut self.live, base, batch, items, max_line_bytes, sink);
            sink.record(&mut self.live, next);
            self.moved_to(next);
            return Some(a);
        }
        let applied = apply::apply_decoded(
            &mut self.live,
            base,
            batch,
            items,
            max_line_bytes,
            &mut Unobserved,
        );
        self.moved_to(next);
        Some(applied)
    }

    /// Counts the item at `offset` of `source`, received at `received_at`, as malformed for
    /// `reason` without decoding anything (a Kafka message without a value), unless it is
    /// already in the state.
    pub fn reject(
        &mut self,
        offset: u64,
        source: &str,
        reason: &str,
        received_at: i64,
    ) -> Option<Applied> {
        self.reject_through(offset, offset + 1, source, reason, received_at)
    }

    /// Counts the items at offsets `offset..end` of `source` as one malformed event for
    /// `reason` (messages the broker deleted before they were read: whatever they held is
    /// lost), unless the state is past `offset` already; the partition moves to `end`.
    pub fn reject_through(
        &mut self,
        offset: u64,
        end: u64,
        source: &str,
        reason: &str,
        #[cfg_attr(not(feature = "archive"), allow(unused_variables))] received_at: i64,
    ) -> Option<Applied> {
        if offset < self.next {
            return None;
        }
        let end = end.max(offset + 1);
        let id = self.live.add_source(source);
        self.live
            .push_malformed(id, offset, None, reason.to_string());
        #[cfg(feature = "archive")]
        if let Some(sink) = &mut self.sink {
            let src = crate::archive::rows::Src::At(source, offset);
            sink.malformed(received_at, src, offset, None, reason, b"");
            sink.record(&mut self.live, end);
        }
        let mut out = Applied::default();
        out.malformed(
            0,
            offset,
            DecodeError {
                field: None,
                reason: reason.to_string(),
                ts: None,
            },
        );
        self.moved_to(end);
        Some(out)
    }

    fn moved_to(&mut self, next: u64) {
        self.next = next;
        self.idle = false;
    }

    /// Hands the archive rows of the batches applied since the last call to the archive
    /// ([`Partition::report`] does): call with the partition locked, so a query sees rows and
    /// state alike.
    #[cfg(feature = "archive")]
    pub fn commit_archive(&mut self) {
        if let Some(sink) = &mut self.sink {
            sink.commit();
        }
    }

    /// Emits what the batches applied since the last report found: stale commits the resource
    /// rejected, and counterexamples found and withdrawn; hands their rows to the archive.
    pub fn report(&mut self, metrics: &Metrics) {
        #[cfg(feature = "archive")]
        self.commit_archive();
        let found = self.live.take_new_counterexamples();
        let withdrawn = self.live.take_withdrawn_counterexamples();
        let properties = &self.live.contract().properties;
        let view = self.live.view();
        for (p, seen) in self.reported.stale_rejections.iter_mut().enumerate() {
            let now = view.stale_rejections(p);
            StaleRejected {
                property: &properties[p].name,
                count: now.saturating_sub(*seen),
            }
            .emit(metrics);
            *seen = now;
        }
        for cx in &found {
            CounterexampleFound {
                property: &properties[cx.property],
                counterexample: cx,
            }
            .emit(metrics);
        }
        for cx in &withdrawn {
            CounterexampleWithdrawn {
                property: &properties[cx.property],
                counterexample: cx,
            }
            .emit(metrics);
        }
    }

    /// Counts what the state holds now as reported: a replay of batches that the process
    /// which first applied them reported. Its findings are dropped, its totals taken as told.
    pub fn reported_all(&mut self) {
        // The rows of the records replayed past what the archive held.
        #[cfg(feature = "archive")]
        self.commit_archive();
        self.live.take_new_counterexamples();
        self.live.take_withdrawn_counterexamples();
        self.reported = Reported::of(&self.live);
    }

    /// The checkpoint bytes of the state now, with the offset they cover.
    pub fn encode(&self) -> (u64, Vec<u8>) {
        (self.next, state::encode_state(self.live.state()))
    }

    /// Writes the checkpoint bytes of the state now (they cover the offsets before
    /// [`Partition::next`]) into `out` as they are encoded: in place, under the caller's read
    /// lock, rather than cloned and encoded off it, and into the checkpoint file (through a
    /// [`crate::checkpoint::pipe`]) rather than into memory, so a checkpoint costs a few MiB
    /// beside the state, neither a copy of it nor its encoding.
    pub fn encode_into(&self, out: &mut impl std::io::Write) -> std::io::Result<()> {
        state::write_state(self.live.state(), out)
    }

    /// Notes that a checkpoint covering the offsets below `offset` is durable.
    pub fn saved(&mut self, offset: u64) {
        self.checkpointed = self.checkpointed.max(offset);
    }

    /// Reads the partition again from offset 0 (its log was recreated): the state keeps what
    /// it learnt, the new log is assessed on top.
    pub fn rewind(&mut self) {
        self.next = 0;
        self.checkpointed = 0;
        self.idle = false;
        #[cfg(feature = "archive")]
        if let Some(sink) = &mut self.sink {
            sink.rewound();
        }
    }
}

/// What the metrics were told of one assessor's stale rejections (per property), so that each
/// is counted once: the assessor keeps totals, and one restored from a checkpoint (or replayed)
/// starts from what it holds.
#[derive(Debug, Clone, Default)]
struct Reported {
    stale_rejections: Vec<u64>,
}

impl Reported {
    /// What `live` holds now, as already reported.
    fn of(live: &Live) -> Reported {
        let view = live.view();
        Reported {
            stale_rejections: (0..live.contract().properties.len())
                .map(|p| view.stale_rejections(p))
                .collect(),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::batch::Format;
    use fencewatch_assess::Contract;
    use fencewatch_assess::live::LiveOptions;
    use prometheus_client::registry::Registry;

    pub(super) fn contract() -> Contract {
        Contract::parse(
            "c.toml",
            "[[property]]\nname=\"p\"\nsubject=\"S\"\nstrategy=\"lease_epoch\"\n[[property.route]]\nname=\"r\"\n",
        )
        .unwrap()
    }

    fn partition() -> Partition {
        Partition::new("t/0", Live::new(contract(), LiveOptions::default()), 0)
    }

    pub(super) const BATCH: &str = "{\"kind\":\"commit\",\"ts\":1000,\"scope\":\"o\",\"epoch\":2,\"route\":\"r\"}\n\n{\"kind\":\"commit\",\"ts\":\"bad\"}\n{\"kind\":\"commit\",\"ts\":2000000000,\"scope\":\"o\",\"epoch\":1,\"route\":\"r\"}\n";

    pub(super) fn ndjson(body: &str) -> Batch<'_> {
        Batch {
            format: Format::Ndjson,
            received_at: 10_000_000_000,
            source: "http",
            first_line: None,
            key: None,
            body: body.as_bytes(),
        }
    }

    #[test]
    fn apply_reports_item_errors_and_keeps_valid_ones() {
        let mut part = partition();
        let a = part.apply(100, 4, &ndjson(BATCH), 1 << 20).unwrap();
        assert_eq!(a.accepted, 2);
        assert_eq!((a.errors.len(), a.malformed), (1, 1));
        assert_eq!((a.errors[0].item, a.errors[0].offset), (3, 102));
        assert_eq!(part.next(), 104);
        let page = part
            .live()
            .view()
            .counterexamples(None, None, None, None, None, 10);
        assert_eq!(page.counterexamples.len(), 1);
        assert_eq!(page.counterexamples[0].stale.source, "http:103");
    }

    #[test]
    fn a_batch_below_the_next_offset_is_already_in_the_state() {
        let mut part = partition();
        assert!(part.apply(0, 4, &ndjson(BATCH), 1 << 20).is_some());
        assert!(part.dirty());
        let totals = part.live().totals();
        assert_eq!(part.apply(3, 1, &ndjson(BATCH), 1 << 20), None);
        assert_eq!(part.reject(2, "http", "nothing", 0), None);
        assert_eq!(part.live().totals(), totals);
        part.saved(4);
        assert!(!part.dirty());
        part.rewind();
        assert_eq!(part.next(), 0);
    }

    #[test]
    fn a_message_under_another_key_than_its_scope_is_misrouted() {
        let mut part = partition();
        let msg = |body: &'static str, key: &'static [u8]| Batch {
            format: Format::Message,
            received_at: 10_000_000_000,
            source: "t/0",
            first_line: None,
            key: Some(key),
            body: body.as_bytes(),
        };
        let good = "{\"kind\":\"commit\",\"ts\":1000,\"scope\":\"o\",\"epoch\":2,\"route\":\"r\"}";
        let a = part.apply(0, 1, &msg(good, b"o"), 1 << 20).unwrap();
        assert_eq!((a.accepted, a.malformed), (1, 0));
        let a = part.apply(1, 1, &msg(good, b"elsewhere"), 1 << 20).unwrap();
        assert_eq!((a.accepted, a.malformed), (1, 0));
        let a = part.apply(2, 1, &msg("{}\n{}", b"o"), 1 << 20).unwrap();
        assert_eq!((a.accepted, a.malformed), (0, 1));
        let a = part
            .reject(3, "t/0", "empty message (no payload)", 0)
            .unwrap();
        assert_eq!(a.errors[0].error.reason, "empty message (no payload)");
        let counts = part.live().view().unknown_counts(0);
        assert_eq!(
            counts.get(&fencewatch_assess::Reason::MisroutedPartition),
            Some(&1)
        );
        assert_eq!(part.next(), 4);
    }

    #[test]
    fn findings_are_reported_once_and_a_replay_reports_none() {
        let mut registry = Registry::default();
        let metrics = Metrics::register(&mut registry);
        let stale = "{\"kind\":\"fence\",\"ts\":1000000000,\"scope\":\"o\",\"epoch\":2,\"route\":\"r\"}\n{\"kind\":\"commit\",\"ts\":2000000000,\"scope\":\"o\",\"epoch\":1,\"route\":\"r\",\"outcome\":\"rejected\"}\n{\"kind\":\"commit\",\"ts\":3000000000,\"scope\":\"o\",\"epoch\":1,\"route\":\"r\"}\n";
        let rejected = |m: &Metrics| {
            let l = crate::report::metrics::PropertyLabels {
                property: "p".into(),
            };
            m.stale_rejections.get_or_create(&l).get()
        };
        let found = |m: &Metrics| {
            let l = crate::report::metrics::CounterexampleLabels {
                property: "p".into(),
                kind: "stale_commit".into(),
                route: "r".into(),
            };
            m.counterexamples.get_or_create(&l).get()
        };
        let mut part = partition();
        part.apply(0, 3, &ndjson(stale), 1 << 20).unwrap();
        part.report(&metrics);
        part.report(&metrics);
        assert_eq!((rejected(&metrics), found(&metrics)), (1, 1));
        // Restored from its state, what it holds is not reported again.
        let (offset, bytes) = part.encode();
        let state = state::read_state(&mut &bytes[..], bytes.len() as u64).unwrap();
        let mut again = Partition::new("t/0", Live::restore(contract(), state).unwrap(), offset);
        again.report(&metrics);
        assert_eq!((rejected(&metrics), found(&metrics)), (1, 1));
        // A replay of batches already reported reports nothing either.
        let mut replayed = partition();
        replayed.apply(0, 3, &ndjson(stale), 1 << 20).unwrap();
        replayed.reported_all();
        replayed.report(&metrics);
        assert_eq!((rejected(&metrics), found(&metrics)), (1, 1));
    }
}
