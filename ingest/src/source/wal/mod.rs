//! The WAL source: batches submitted by HTTP ingest, file tailing ([`super::tail`]) and the
//! simulator's live feed are made durable in the local write-ahead log and applied to the
//! local partition, in offset order. One writer thread owns the log and the checkpoints;
//! nothing else changes the local partition (`pipeline.rs` has the stages).
//!
//! A submitted batch is answered once it is durable and applied: a `2xx` means the batch is
//! in the log, and its counterexamples are already visible in the API and metrics when the
//! producer gets it. On start the writer restores the last checkpoint and replays the log
//! before it takes new batches; until then the source is not [`Ready`].

mod budget;
mod feed;
mod pipeline;

pub use budget::{Budget, Reservation};

use crate::batch::{self, Format};
use crate::clock::SharedClock;
use crate::partition::{self, Applied};
use crate::registry::{Registry, Shared, read};
use crate::report::{Durability, Metrics};
use crossbeam_channel::{Sender, bounded};
use fencewatch_assess::live::LiveOptions;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// Batches waiting for the writer; producers beyond this wait (backpressure).
const QUEUE: usize = 1024;

/// What the writer needs.
#[derive(Debug, Clone)]
pub struct WalOptions {
    /// Data directory (the partition lives in `<data_dir>/partitions/0`).
    pub data_dir: PathBuf,
    /// WAL segment size.
    pub segment_bytes: u64,
    /// Longer lines are malformed.
    pub max_line_bytes: usize,
    /// Time between checkpoints.
    pub checkpoint_interval: Duration,
    /// Options of the assessor.
    pub live: LiveOptions,
    /// Bytes of ingest bodies in flight at most (`max_pending_bytes`).
    pub max_pending_bytes: u64,
    /// The largest body, after decompression (`max_body_bytes`).
    pub max_body_bytes: u64,
}

/// Whether the local partition has caught up with the log; shared with `/readyz`.
#[derive(Debug, Clone, Default)]
pub struct Ready(Arc<AtomicBool>);

impl Ready {
    /// Not ready.
    pub fn new() -> Ready {
        Ready::default()
    }

    /// Marks ready (replay done) or not (shutting down).
    pub fn set(&self, ready: bool) {
        self.0.store(ready, Ordering::Release);
    }

    /// Whether ready.
    pub fn is_ready(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// The answer to one submitted batch.
#[derive(Debug, Clone)]
pub struct Ingested {
    /// WAL offset of its first item.
    pub first_offset: u64,
    /// Offset after its last item.
    pub next_offset: u64,
    /// What applying it did.
    pub applied: Applied,
}

/// Why a batch was not taken.
#[derive(Debug, Clone, thiserror::Error)]
pub enum SubmitError {
    /// The source is shutting down.
    #[error("the service is shutting down")]
    ShuttingDown,
    /// The writer stopped (a failure).
    #[error("the writer stopped")]
    Stopped,
    /// The log could not take the batch.
    #[error("the write-ahead log failed: {0}")]
    Failed(String),
    /// More items than a record holds.
    #[error("a batch of {0} items is too large")]
    TooLarge(u64),
    /// More items than `max_pending_bytes` can ever hold at [`ITEM_BYTES`] each.
    #[error(
        "the request holds {items} items, and each holds at least {ITEM_BYTES} bytes of max_pending_bytes ({max}): send at most {} items a request",
        max / ITEM_BYTES
    )]
    TooManyItems {
        /// Items of the request.
        items: u64,
        /// `max_pending_bytes`.
        max: u64,
    },
    /// Ingest is saturated: more than `max_pending_bytes` would be in flight. Retry shortly.
    #[error(
        "ingest is saturated: more than max_pending_bytes ({0}) of requests are in flight; nothing of this request was stored, retry shortly"
    )]
    Saturated(u64),
}

/// Bytes of the ingest budget (`max_pending_bytes`) an item of a request holds at least,
/// whatever its size in the body: what a decoded item, its WAL record and its way through the
/// applier cost. A body of tiny items (16 MiB of `1\n`: 8 million malformed lines) held only
/// its bytes, stalled every other client's ingest for 15 s behind it, and OTLP requests of
/// 22-byte malformed spans held 13 times `max_pending_bytes` of memory (hostile test, session
/// 20). At 256 bytes an item, a request holds at most `max_pending_bytes / 256` items (1 Mi
/// by default); ordinary events (120-200 bytes a line, ~300 a span) are barely affected.
pub const ITEM_BYTES: u64 = 256;

/// Why the writer stopped with an error: the service then stops (exit 1).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The local partition did not open.
    #[error("{0}")]
    Open(String),
    /// The log could not be written.
    #[error("the write-ahead log failed: {0}")]
    Wal(#[from] crate::wal::Error),
    /// A checkpoint could not be saved.
    #[error("the checkpoint stage stopped: checkpoint at offset {offset}: {source}")]
    Checkpoint {
        /// Its offset.
        offset: u64,
        /// The cause.
        source: crate::checkpoint::Error,
    },
    /// A stage ended before the others (its own error is reported when there is one).
    #[error("the {0} stage stopped")]
    Stage(&'static str),
    /// A stage panicked.
    #[error("the {0} thread panicked")]
    Panicked(&'static str),
    /// A thread could not be started.
    #[error("cannot start the {0} thread: {1}")]
    Spawn(&'static str, std::io::Error),
    /// The evidence archive could not be written: no checkpoint is taken past it.
    #[cfg(feature = "archive")]
    #[error("the evidence archive: {0}")]
    Archive(crate::archive::Error),
}

struct Job {
    items: u32,
    payload: Vec<u8>,
    reply: tokio::sync::oneshot::Sender<Result<Ingested, SubmitError>>,
    /// The ingest budget this batch holds until it is answered (HTTP bodies only).
    _held: Option<Reservation>,
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Job").field("items", &self.items).finish()
    }
}

/// A batch ready to be queued: [`Queued::send`] waits while the queue is full (call it off
/// an async worker), then its answer arrives on the [`Pending`] it returns.
#[derive(Debug)]
pub struct Queued {
    tx: Sender<Job>,
    job: Job,
    answer: Pending,
    waiting: Arc<AtomicUsize>,
}

impl Queued {
    /// Queues the batch, waiting while the queue is full.
    pub fn send(self) -> Result<Pending, SubmitError> {
        let Queued {
            tx,
            job,
            answer,
            waiting,
        } = match self.offer() {
            Ok(sent) => return sent,
            Err(full) => full,
        };
        waiting.fetch_add(1, Ordering::AcqRel);
        let sent = tx.send(job);
        waiting.fetch_sub(1, Ordering::AcqRel);
        sent.map_err(|_| SubmitError::Stopped)?;
        Ok(answer)
    }

    /// Queues the batch if the queue has room and no sender waits for room (never waits):
    /// `Err` gives it back, to [`Queued::send`] off the async workers, where it competes with
    /// those waiting for the next free slot instead of taking each one ahead of them.
    pub fn try_send(self) -> Result<Result<Pending, SubmitError>, Queued> {
        if self.waiting.load(Ordering::Acquire) > 0 {
            return Err(self);
        }
        self.offer()
    }

    /// Queues the batch if the queue has room: `Err` gives it back when it is full.
    fn offer(self) -> Result<Result<Pending, SubmitError>, Queued> {
        use crossbeam_channel::TrySendError;
        match self.tx.try_send(self.job) {
            Ok(()) => Ok(Ok(self.answer)),
            Err(TrySendError::Disconnected(_)) => Ok(Err(SubmitError::Stopped)),
            Err(TrySendError::Full(job)) => Err(Queued { job, ..self }),
        }
    }
}

/// Where a queued batch's answer arrives: `.await` it, or [`Pending::wait`] from a thread.
#[derive(Debug)]
pub struct Pending(tokio::sync::oneshot::Receiver<Result<Ingested, SubmitError>>);

impl Pending {
    /// Waits for the answer, blocking this thread.
    pub fn wait(self) -> Result<Ingested, SubmitError> {
        self.0.blocking_recv().map_err(|_| SubmitError::Stopped)?
    }
}

impl std::future::Future for Pending {
    type Output = Result<Ingested, SubmitError>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        std::pin::Pin::new(&mut self.0)
            .poll(cx)
            .map(|r| r.map_err(|_| SubmitError::Stopped)?)
    }
}

/// The running writer thread.
#[derive(Debug)]
pub struct Writer(std::thread::JoinHandle<Result<(), Error>>);

impl Writer {
    /// Waits for the writer to drain and take its last checkpoint.
    pub fn join(self) -> Result<(), Error> {
        self.0.join().unwrap_or(Err(Error::Panicked("writer")))
    }
}

/// The WAL source, shared by everything that submits to it.
#[derive(Debug)]
pub struct WalSource {
    tx: Mutex<Option<Sender<Job>>>,
    /// Senders waiting for room in the queue ([`Queued::send`]): while any waits, a new
    /// batch queues behind them ([`Queued::try_send`] gives it back).
    waiting: Arc<AtomicUsize>,
    ready: Ready,
    durability: Durability,
    stopped: tokio::sync::Notify,
    /// The local partition, once opened (registered in the registry too).
    partition: OnceLock<Shared>,
    budget: Budget,
    max_line_bytes: usize,
    max_body_bytes: u64,
    clock: SharedClock,
}

impl WalSource {
    /// Starts the writer: it opens the local partition (restore and replay), registers it in
    /// `registry`, marks `ready`, then takes batches until [`WalSource::close`].
    pub fn start(
        registry: Arc<Registry>,
        opts: WalOptions,
        ready: Ready,
        metrics: Metrics,
        clock: SharedClock,
    ) -> (Arc<WalSource>, Writer) {
        let (tx, rx) = bounded(QUEUE);
        let source = Arc::new(WalSource {
            tx: Mutex::new(Some(tx)),
            waiting: Arc::default(),
            ready,
            durability: Durability::default(),
            stopped: tokio::sync::Notify::new(),
            partition: OnceLock::new(),
            budget: Budget::new(opts.max_pending_bytes),
            max_line_bytes: opts.max_line_bytes,
            max_body_bytes: opts.max_body_bytes,
            clock,
        });
        let s = source.clone();
        let handle = std::thread::Builder::new()
            .name("fencewatch-writer".into())
            .spawn(move || {
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    pipeline::writer(&s, &registry, &opts, rx, &metrics)
                }))
                .unwrap_or(Err(Error::Panicked("writer")));
                if let Err(err) = &r {
                    tracing::error!(error = %err, "the writer stopped");
                    s.durability.failed.store(true, Ordering::Release);
                    s.ready.set(false);
                }
                s.stopped.notify_one();
                r
            })
            .expect("spawn the writer thread");
        (source, Writer(handle))
    }

    /// Whether replay is done and the source takes batches.
    pub fn is_ready(&self) -> bool {
        self.ready.is_ready()
    }

    /// Blocks until replay is done (file tailing, the live simulator start then).
    pub fn wait_ready(&self) {
        while !self.is_ready() {
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// WAL and checkpoint figures for metrics.
    pub fn durability(&self) -> &Durability {
        &self.durability
    }

    /// The greatest position of any source that `keep` selects by name (0 if none): the last
    /// line of a file already in the local partition (file ingest resumes after it).
    pub fn sources_progress(&self, mut keep: impl FnMut(&str) -> bool) -> u64 {
        let Some(p) = self.partition.get() else {
            return 0;
        };
        let p = read(p);
        let found = p.live().sources_progress().filter(|(n, _)| keep(n));
        found.map(|(_, at)| at).max().unwrap_or(0)
    }

    /// The line size limit (`max_line_bytes`): longer lines are malformed.
    pub fn max_line_bytes(&self) -> usize {
        self.max_line_bytes
    }

    /// The body size limit (`max_body_bytes`), after decompression.
    pub fn max_body_bytes(&self) -> u64 {
        self.max_body_bytes
    }

    /// The ingest budget: HTTP bodies hold a [`Reservation`] of it from their first byte until
    /// they are answered.
    pub fn budget(&self) -> &Budget {
        &self.budget
    }

    /// The clock that stamps received times.
    pub fn clock(&self) -> &SharedClock {
        &self.clock
    }

    /// A WAL payload already built ([`batch::encode_header`], stamped with
    /// [`WalSource::clock`]) of `items` items, holding `held` of the ingest budget until it is
    /// answered, ready to queue.
    pub fn prepare(
        &self,
        items: u64,
        payload: Vec<u8>,
        mut held: Option<Reservation>,
    ) -> Result<Queued, SubmitError> {
        if let Some(held) = held.as_mut() {
            let floor = items.saturating_mul(ITEM_BYTES);
            let max = self.budget().max();
            if floor > max {
                return Err(SubmitError::TooManyItems { items, max });
            }
            if floor > held.bytes() && !held.grow(floor - held.bytes()) {
                return Err(SubmitError::Saturated(max));
            }
        }
        let items = u32::try_from(items).map_err(|_| SubmitError::TooLarge(items))?;
        let (reply, answer) = tokio::sync::oneshot::channel();
        let tx = self
            .tx
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .ok_or(SubmitError::ShuttingDown)?;
        let job = Job {
            items,
            payload,
            reply,
            _held: held,
        };
        Ok(Queued {
            tx,
            job,
            answer: Pending(answer),
            waiting: self.waiting.clone(),
        })
    }

    /// Submits NDJSON lines from a blocking thread (file tailing, the live simulator) and
    /// waits until they are durable and applied; `first_line` is the 1-based number of the
    /// body's first line in `source`, which positions its events.
    pub fn submit_lines(
        &self,
        source: &str,
        first_line: u64,
        body: &[u8],
    ) -> Result<Ingested, SubmitError> {
        let items = batch::items(Format::Ndjson, body);
        let now = self.clock.now().0;
        let payload = batch::encode(Format::Ndjson, now, source, Some(first_line), body);
        self.prepare(items, payload, None)?.send()?.wait()
    }

    /// Completes when the writer stopped (after [`WalSource::close`], or on a failure).
    pub async fn stopped(&self) {
        self.stopped.notified().await
    }

    /// Stops taking batches; the writer drains the queue, checkpoints and ends.
    pub fn close(&self) {
        self.tx.lock().unwrap_or_else(|p| p.into_inner()).take();
    }

    fn opened(&self, partition: Shared) {
        let _ = self.partition.set(partition);
    }
}

/// The local partition's folder in the data directory.
pub fn partition_dir(data_dir: &std::path::Path) -> PathBuf {
    data_dir.join("partitions").join("0")
}

/// Why the local partition did not open, with the operator's way out when the log is damaged.
fn open_failure(e: &partition::Error, data_dir: &std::path::Path) -> Error {
    use crate::wal::Error as W;
    let damaged = matches!(
        e,
        partition::Error::Wal(W::Corrupt { .. } | W::MissingSegment { .. } | W::Removed { .. })
            | partition::Error::LogBehindCheckpoint { .. }
    );
    if matches!(e, partition::Error::LogBehindArchive { .. }) {
        return Error::Open(format!("{e}; nothing was changed"));
    }
    if damaged {
        let d = data_dir.display();
        Error::Open(format!(
            "{e}; nothing was changed: `fencewatch wal inspect --data-dir {d}` shows the damage, `fencewatch wal repair --data-dir {d}` what a repair would drop (README, Durability)"
        ))
    } else {
        Error::Open(e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use fencewatch_assess::{Contract, EventTime};
    use prometheus_client::registry::Registry as Metrics_;

    fn contract() -> Contract {
        Contract::parse(
            "c.toml",
            "[[property]]\nname=\"p\"\nsubject=\"S\"\nstrategy=\"lease_epoch\"\n[[property.route]]\nname=\"r\"\n",
        )
        .unwrap()
    }

    #[test]
    fn batches_are_stamped_by_the_clock_given_applied_registered_and_survive_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let now = EventTime(1_800_000_000_000_000_000);
        let clock = Arc::new(ManualClock::new(now));
        let opts = WalOptions {
            data_dir: dir.path().to_path_buf(),
            segment_bytes: 1 << 20,
            max_line_bytes: 1 << 20,
            checkpoint_interval: Duration::from_secs(3600),
            live: LiveOptions::default(),
            max_pending_bytes: 1 << 20,
            max_body_bytes: 1 << 20,
        };
        let line = |ts: i64, epoch: u64| {
            format!(
                "{{\"kind\":\"commit\",\"ts\":{ts},\"scope\":\"o\",\"epoch\":{epoch},\"route\":\"r\"}}\n"
            )
        };
        let start = |clock: Arc<ManualClock>| {
            let registry = Arc::new(Registry::new(contract()));
            let metrics = Metrics::register(&mut Metrics_::default());
            let (wal, writer) =
                WalSource::start(registry.clone(), opts.clone(), Ready::new(), metrics, clock);
            wal.wait_ready();
            (registry, wal, writer)
        };
        let (registry, wal, writer) = start(clock.clone());
        // Ten minutes ahead of the clock is beyond the future tolerance (5 min): malformed.
        let ahead = line(now.0 + 600_000_000_000, 2);
        let a = wal.submit_lines("f", 1, ahead.as_bytes()).unwrap();
        assert_eq!((a.applied.accepted, a.applied.malformed), (0, 1));
        // The clock moved on: the same time is no longer ahead.
        clock.advance(600_000_000_000);
        let stale = line(now.0 + 601_000_000_000, 1);
        let b = wal
            .submit_lines("f", 2, (ahead.clone() + &stale).as_bytes())
            .unwrap();
        assert_eq!(
            (b.first_offset, b.applied.accepted, b.applied.malformed),
            (1, 2, 0)
        );
        assert_eq!(wal.sources_progress(|n| n == "f"), 3);
        let found = registry.query(|v| v.counterexample_count(0));
        assert_eq!(found, 1, "epoch 1 a second after epoch 2 is stale");
        wal.close();
        writer.join().unwrap();
        // Restarted: the checkpoint taken when draining restores the same assessment.
        let (registry, wal, writer) = start(clock);
        assert_eq!(registry.query(|v| v.counterexample_count(0)), 1);
        assert_eq!(wal.sources_progress(|n| n == "f"), 3);
        assert_eq!(wal.durability().next_offset.load(Ordering::Acquire), 3);
        wal.close();
        writer.join().unwrap();
    }

    /// `try_send` queues while there is room, gives the batch back whole when the queue is
    /// full (its answer still arrives once [`Queued::send`] queues it) or when a sender waits
    /// for room, and says `Stopped` when the writer is gone.
    #[test]
    fn try_send_queues_gives_back_when_full_and_fails_when_stopped() {
        let (tx, rx) = bounded::<Job>(1);
        let waiting = Arc::new(AtomicUsize::new(0));
        let queued = |items: u32| {
            let (reply, answer) = tokio::sync::oneshot::channel();
            let job = Job {
                items,
                payload: vec![items as u8],
                reply,
                _held: None,
            };
            Queued {
                tx: tx.clone(),
                job,
                answer: Pending(answer),
                waiting: waiting.clone(),
            }
        };
        let first = queued(1).try_send().expect("room").expect("queued");
        let back = queued(2).try_send().expect_err("the queue is full");
        assert_eq!((back.job.items, &back.job.payload[..]), (2, &[2u8][..]));
        // The writer takes the first: the batch given back is queued now, and answered.
        let job = rx.recv().unwrap();
        assert_eq!(job.items, 1);
        let ok = || {
            Ok(Ingested {
                first_offset: 0,
                next_offset: 1,
                applied: Default::default(),
            })
        };
        job.reply.send(ok()).unwrap();
        assert!(first.wait().is_ok());
        let second = back.send().expect("room again");
        rx.recv().unwrap().reply.send(ok()).unwrap();
        assert!(second.wait().is_ok());
        // A sender waits for room: a new batch queues behind it, though there is room now.
        waiting.store(1, Ordering::Release);
        let behind = queued(4).try_send().expect_err("behind a waiting sender");
        waiting.store(0, Ordering::Release);
        let third = behind.try_send().expect("room").expect("queued");
        rx.recv().unwrap().reply.send(ok()).unwrap();
        assert!(third.wait().is_ok());
        // A sender that waited leaves the count as it found it.
        let (full, waited) = (queued(5).send().expect("room"), queued(6));
        let sender = std::thread::spawn(move || waited.send());
        while waiting.load(Ordering::Acquire) == 0 {
            std::thread::yield_now();
        }
        rx.recv().unwrap().reply.send(ok()).unwrap();
        assert!(full.wait().is_ok());
        let sixth = sender.join().unwrap().expect("queued once there was room");
        assert_eq!(rx.recv().unwrap().items, 6);
        assert_eq!(waiting.load(Ordering::Acquire), 0);
        drop(sixth);
        drop(rx);
        let stopped = queued(3).try_send().expect("not full");
        assert!(matches!(stopped, Err(SubmitError::Stopped)), "{stopped:?}");
    }
}
