//! One assigned partition's worker thread. Its messages come through its own queue (librdkafka's
//! partition queue, split from the consumer's before the partition is assigned, so none of
//! them reaches the consumer thread); the worker decodes, assesses and reports them under its
//! partition's lock, batch by batch, and checkpoints the partition itself: saved durably, then
//! its offset committed. Partitions are assessed in parallel, and a checkpoint holds up only
//! its own partition.
//!
//! A revoked partition's worker is stopped before the partition is given up: it ends its
//! batch, takes a last checkpoint and commits it (synchronously), and only then is the
//! partition released, so the next owner starts exactly where this one's state ends.

use super::context::Context;
use super::{Error, KafkaSource};
use crate::batch::{Batch, Format};
use crate::checkpoint::{self, CheckpointStore};
use crate::partition::{Applied, Partition};
use crate::registry::{Shared, read, write};
use crate::report::{
    CheckpointSaved, DeadLettered, EventsIngested, EventsRejected, InternalEvent,
    KafkaMessagesConsumed, KafkaMessagesLost,
};
use rdkafka::consumer::base_consumer::PartitionQueue;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{BorrowedMessage, Message};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Messages applied per poll at most (the partition's write lock is held for at most that
/// many).
const BATCH: usize = 2048;

/// The consumer, shared by its thread and the workers (commits, seeks).
pub(super) type SharedConsumer = Arc<BaseConsumer<Context>>;

/// A running worker, as the consumer thread keeps it.
#[derive(Debug)]
pub(super) struct Worker {
    /// Asks the worker to end after its batch.
    stop: Arc<AtomicBool>,
    /// Asks the worker to read its partition again from the beginning.
    rewind: Arc<AtomicBool>,
    handle: JoinHandle<()>,
}

/// What a worker owns.
struct Owned {
    kafka: Arc<KafkaSource>,
    consumer: SharedConsumer,
    queue: PartitionQueue<Context>,
    topic: String,
    p: i32,
    name: String,
    part: Shared,
    store: CheckpointStore,
    stop: Arc<AtomicBool>,
    rewind: Arc<AtomicBool>,
}

impl Worker {
    /// Starts the worker of partition `(topic, p)`, registered as `part`, whose messages come
    /// through `queue`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn spawn(
        kafka: Arc<KafkaSource>,
        consumer: SharedConsumer,
        queue: PartitionQueue<Context>,
        topic: &str,
        p: i32,
        name: &str,
        part: Shared,
        store: CheckpointStore,
    ) -> Result<Worker, Error> {
        let stop = Arc::new(AtomicBool::new(false));
        let rewind = Arc::new(AtomicBool::new(false));
        let mut owned = Owned {
            kafka,
            consumer,
            queue,
            topic: topic.to_string(),
            p,
            name: name.to_string(),
            part,
            store,
            stop: stop.clone(),
            rewind: rewind.clone(),
        };
        let handle = std::thread::Builder::new()
            .name(format!("fencewatch-kafka-{p}"))
            .spawn(move || {
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| owned.run()))
                    .unwrap_or(Err(Error::Panicked));
                if let Err(e) = r
                    && !matches!(e, Error::Failed(_))
                {
                    // A checkpoint or the dead-letter file could not be written: nothing past
                    // the last durable checkpoint was committed; the whole source stops.
                    owned.kafka.fail(&e);
                }
            })
            .map_err(|e| Error::Spawn("partition worker", e))?;
        Ok(Worker {
            stop,
            rewind,
            handle,
        })
    }

    /// Asks the worker to end after its batch (see [`Worker::join`]).
    pub(super) fn signal(&self) {
        self.stop.store(true, Ordering::Release);
    }

    /// Waits for a signalled worker to end: its last checkpoint is saved and committed.
    pub(super) fn join(self) {
        self.signal();
        if self.handle.join().is_err() {
            tracing::error!("kafka: a partition worker panicked");
        }
    }

    /// Asks the worker to read its partition again from its beginning.
    pub(super) fn rewind(&self) {
        self.rewind.store(true, Ordering::Release);
    }
}

impl Owned {
    /// Polls, applies, checkpoints until stopped, then checkpoints a last time.
    fn run(&mut self) -> Result<(), Error> {
        let k = self.kafka.clone();
        let interval = k.opts.checkpoint_interval;
        let mut last_checkpoint = Instant::now();
        while !self.stop.load(Ordering::Acquire) && !k.stopping() {
            let mut batch = Vec::new();
            let mut next = self.queue.poll(Duration::from_millis(100));
            while let Some(r) = next {
                batch.push(r);
                if batch.len() >= BATCH {
                    break;
                }
                next = self.queue.poll(Duration::ZERO);
            }
            if !batch.is_empty() {
                #[cfg(feature = "archive")]
                if let Some(a) = k.registry.archive() {
                    // Backpressure when the archive falls behind, before the partition is
                    // locked.
                    a.wait_for_room();
                }
                k.apply_polled(&self.name, &self.part, &batch);
            }
            drop(batch);
            if self.rewind.swap(false, Ordering::AcqRel) {
                self.seek_to_beginning();
            }
            if last_checkpoint.elapsed() >= interval {
                self.checkpoint(CommitMode::Async)?;
                last_checkpoint = Instant::now();
            }
        }
        self.checkpoint(CommitMode::Sync)
    }

    /// Reads the partition again from its beginning (its end went back): messages fetched
    /// before the seek are dropped by librdkafka.
    fn seek_to_beginning(&self) {
        let (topic, p) = (&self.topic, self.p);
        match self
            .consumer
            .seek(topic, p, Offset::Beginning, Duration::from_secs(5))
        {
            Ok(()) => write(&self.part).rewind(),
            Err(e) => {
                tracing::warn!(topic, partition = p, error = %e, "kafka: seeking back failed; retrying");
                self.rewind.store(true, Ordering::Release);
            }
        }
    }

    /// Saves the partition if it moved since its last checkpoint, then commits its offset.
    fn checkpoint(&mut self, mode: CommitMode) -> Result<(), Error> {
        let k = &self.kafka;
        if let Some(why) = k.failure() {
            // A failure (a dead-letter copy lost, another partition's checkpoint) stops the
            // source: nothing may be committed past it.
            return Err(Error::Failed(why));
        }
        // Dead-letter copies of what the checkpoint covers are written out first.
        k.dead().flush()?;
        let started = Instant::now();
        let name = &self.name;
        let store = &mut self.store;
        let failed = |store: &CheckpointStore, offset, source| Error::Checkpoint {
            partition: name.clone(),
            offset,
            kept: store.latest_offset().unwrap_or(0),
            source,
        };
        // Encoded under the read lock into the file, written by a helper thread as it comes.
        let part = read(&self.part);
        if !part.dirty() {
            return Ok(());
        }
        let offset = part.next();
        let pending = checkpoint::stream(store, offset, move |out| part.encode_into(out))
            .map_err(|source| failed(store, offset, source))?;
        // A checkpoint, and the committed offset, cover only rows the archive holds.
        #[cfg(feature = "archive")]
        if let Some(a) = k.registry.archive() {
            a.flush_through(name, offset)
                .map_err(|source| Error::Archive {
                    partition: name.clone(),
                    offset,
                    source,
                })?;
        }
        let bytes = store
            .commit(pending)
            .map_err(|source| failed(store, offset, source))?;
        write(&self.part).saved(offset);
        CheckpointSaved {
            partition: name,
            offset,
            bytes: bytes as usize,
            elapsed: started.elapsed(),
        }
        .emit(&k.metrics);
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(&self.topic, self.p, Offset::Offset(offset as i64))
            .expect("a valid partition");
        // The checkpoint is durable: now the group may move past it. A failed commit is not
        // fatal (the next checkpoint commits again; a restart replays from the checkpoint).
        if let Err(e) = self.consumer.commit(&tpl, mode) {
            tracing::warn!(partition = %name, error = %e, "kafka: committing offsets failed");
        }
        Ok(())
    }
}

impl KafkaSource {
    /// Applies a polled batch of one partition's messages in order under one hold of its
    /// lock, then reports.
    pub(super) fn apply_polled(
        &self,
        name: &str,
        part: &Shared,
        polled: &[Result<BorrowedMessage<'_>, KafkaError>],
    ) {
        let (mut ok, mut bad, mut lost) = (0, 0, 0);
        let next = read(part).next();
        let mut deleted = self.deleted_before(next, polled).into_iter().peekable();
        let _ = crate::heap::extend_ahead();
        {
            let mut part = write(part);
            for r in polled {
                let msg = match r {
                    Ok(msg) => msg,
                    Err(KafkaError::PartitionEOF(_)) => continue,
                    Err(e) => {
                        tracing::warn!(error = %e, "kafka: consume");
                        continue;
                    }
                };
                while let Some(mut d) = deleted.next_if(|d| d.end <= msg.offset() as u64) {
                    // Read before the lock: a stray batch of the partition (`apply_stray`)
                    // may have moved it since.
                    d.from = d.from.max(part.next());
                    if d.from < d.end
                        && part
                            .reject_through(d.from, d.end, name, &d.reason(), timestamp_ns(msg))
                            .is_some()
                    {
                        bad += 1;
                        lost += 1;
                        KafkaMessagesLost {
                            partition: name,
                            from: d.from,
                            end: d.end,
                            checked: &d.checked,
                        }
                        .emit(&self.metrics);
                    }
                }
                let Some(applied) = self.apply(&mut part, name, msg) else {
                    continue;
                };
                ok += applied.accepted;
                if let Some(e) = applied.errors.first() {
                    bad += 1;
                    self.dead_letter(msg, name, &e.error.to_string());
                }
            }
            part.report(&self.metrics);
        }
        if ok + bad > 0 {
            // Messages came: a broker answers (errors alone prove nothing).
            self.status.connected.store(true, Ordering::Release);
        }
        // A lost range is one malformed event, but no message consumed.
        KafkaMessagesConsumed {
            count: ok + bad - lost,
        }
        .emit(&self.metrics);
        EventsIngested {
            source: "kafka",
            count: ok,
        }
        .emit(&self.metrics);
        EventsRejected {
            source: "kafka",
            reason: "malformed",
            count: bad,
        }
        .emit(&self.metrics);
    }

    /// Applies one message as a batch of one item at its offset (`None`: already in the state).
    /// Its received time is its Kafka timestamp, so a replay decides `future timestamp` as the
    /// first pass did.
    fn apply(
        &self,
        part: &mut Partition,
        name: &str,
        msg: &BorrowedMessage<'_>,
    ) -> Option<Applied> {
        let offset = u64::try_from(msg.offset()).ok()?;
        let received_at = timestamp_ns(msg);
        let Some(body) = msg.payload() else {
            return part.reject(offset, name, "empty message (no payload)", received_at);
        };
        let batch = Batch {
            format: Format::Message,
            received_at,
            source: name,
            first_line: None,
            key: Some(msg.key().unwrap_or_default()),
            body,
        };
        part.apply(offset, 1, &batch, self.opts.max_line_bytes)
    }

    /// The offsets the broker deleted before they were read, among the gaps before the
    /// messages of `polled` (the partition applied those below `next`): ranges each followed
    /// by a polled message. A gap in a partition's offsets is ordinary (transaction markers,
    /// compaction); it is a loss when the broker's log now starts beyond the gap's first
    /// offset: retention deleted what had not been read (fencewatch was stopped, or fell
    /// behind, for longer than the topic's retention), and librdkafka went on from the log's
    /// start (`auto.offset.reset`). The log's start is asked of the broker only when a batch
    /// has a gap. A partition that has applied nothing yet starts where the log starts: what
    /// was deleted before was never part of its evidence.
    fn deleted_before(
        &self,
        next: u64,
        polled: &[Result<BorrowedMessage<'_>, KafkaError>],
    ) -> Vec<Deleted> {
        let mut gaps = Vec::new();
        let mut expected = next;
        let mut at = None;
        for msg in polled.iter().filter_map(|r| r.as_ref().ok()) {
            let Ok(o) = u64::try_from(msg.offset()) else {
                continue;
            };
            if o > expected && expected > 0 {
                gaps.push((expected, o));
            }
            expected = expected.max(o + 1);
            at.get_or_insert((msg.topic().to_string(), msg.partition()));
        }
        let Some((topic, p)) = at.filter(|_| !gaps.is_empty()) else {
            return Vec::new();
        };
        let start = self.log_start(&topic, p);
        gaps.into_iter()
            .filter_map(|(from, to)| match &start {
                Ok(lo) => (*lo > from).then(|| Deleted {
                    from,
                    end: to.min(*lo),
                    checked: Ok(()),
                }),
                // Unchecked, the gap is taken as lost: `unknown` rather than a `holds` that
                // could miss a stale commit.
                Err(e) => Some(Deleted {
                    from,
                    end: to,
                    checked: Err(e.clone()),
                }),
            })
            .collect()
    }

    /// The first offset the broker still holds of partition `(topic, p)` (three tries).
    pub(super) fn log_start(&self, topic: &str, p: i32) -> Result<u64, String> {
        let consumer = self
            .consumer
            .0
            .get()
            .and_then(std::sync::Weak::upgrade)
            .ok_or_else(|| "the consumer is closing".to_string())?;
        let mut last = String::new();
        for _ in 0..3 {
            match consumer.fetch_watermarks(topic, p, Duration::from_secs(5)) {
                Ok((lo, _)) => return Ok(u64::try_from(lo).unwrap_or(0)),
                Err(e) => last = e.to_string(),
            }
        }
        Err(last)
    }

    /// Copies a malformed message to the dead-letter topic or file; a file that cannot be
    /// written is fatal.
    fn dead_letter(&self, msg: &BorrowedMessage<'_>, name: &str, why: &str) {
        let source = format!("{name}:{}", msg.offset());
        let copied = self.dead().copy(
            self.sinks.producer.as_ref(),
            msg,
            &source,
            why,
            self.opts.max_line_bytes,
        );
        match copied {
            Ok(true) => DeadLettered {
                source: &source,
                reason: why,
            }
            .emit(&self.metrics),
            Ok(false) => {}
            Err(e) => self.fail(&e),
        }
    }
}

/// A message's Kafka timestamp in ns (`i64::MAX` without one).
fn timestamp_ns(msg: &BorrowedMessage<'_>) -> i64 {
    msg.timestamp()
        .to_millis()
        .map_or(i64::MAX, |ms| ms.saturating_mul(1_000_000))
}

/// Offsets `from..end` of a partition that the broker deleted before they were read, or that
/// could not be checked (`checked`: why).
#[derive(Debug)]
struct Deleted {
    from: u64,
    end: u64,
    checked: Result<(), String>,
}

impl Deleted {
    /// The malformed event's reason.
    fn reason(&self) -> String {
        let n = self.end - self.from;
        match &self.checked {
            Ok(()) => format!(
                "{n} message(s) at offsets {}..{} were deleted by the broker (the topic's retention) before they were read: the events they held are lost",
                self.from, self.end
            ),
            Err(e) => format!(
                "offsets {}..{} were skipped and the broker's log start could not be read ({e}): the {n} message(s) there may be lost",
                self.from, self.end
            ),
        }
    }
}
