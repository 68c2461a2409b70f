//! The engine: one writer thread owns the WAL and the checkpoints and is the only one that
//! changes the live assessor; HTTP handlers submit batches to it and read the assessor under a
//! shared lock.
//!
//! The writer takes every batch queued (group commit), appends them to the WAL, fsyncs once,
//! applies them to the assessor in offset order and only then answers each: a `2xx` means the
//! batch is durable, and its counterexamples are already visible in the API and metrics when
//! the producer gets it. Every `checkpoint_interval` it snapshots the assessor with the WAL
//! offset and deletes the segments the kept checkpoints cover; on shutdown it drains the queue
//! and takes a last checkpoint.
//!
//! On start it restores the last checkpoint and replays the WAL before it takes new batches;
//! until then the engine is not ready (`/readyz` answers 503, queries 503).

use crate::serve::Ready;
use crate::serve::budget::{Budget, Reservation};
use crate::serve::kafka::Kafka;
use crate::serve::metrics::Metrics;
use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, bounded};
use fencewatch_assess::live::{Live, LiveOptions, ScopeView, View};
use fencewatch_assess::{Contract, EventTime};
use fencewatch_ingest::checkpoint::CheckpointStore;
use fencewatch_ingest::partition::{self, Applied, Format, PartitionOptions};
use fencewatch_ingest::wal::Wal;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard};
use std::time::{Duration, Instant};

/// Batches waiting for the writer; producers beyond this wait (backpressure).
const QUEUE: usize = 1024;
/// Batches one group commit takes at most.
const GROUP: usize = 512;

/// What the writer needs.
#[derive(Debug, Clone)]
pub struct EngineOptions {
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
    /// The engine is shutting down or the WAL failed.
    #[error("{0}")]
    Unavailable(String),
}

struct Job {
    items: u32,
    payload: Vec<u8>,
    reply: tokio::sync::oneshot::Sender<Result<Ingested, SubmitError>>,
    /// The ingest budget this batch holds until it is answered (HTTP bodies only).
    _held: Option<Reservation>,
}

/// WAL and checkpoint figures for metrics.
#[derive(Debug, Default)]
pub struct Durability {
    /// Bytes of WAL segments on disk.
    pub wal_bytes: AtomicU64,
    /// Next WAL offset.
    pub next_offset: AtomicU64,
    /// Offset of the last checkpoint.
    pub checkpoint_offset: AtomicU64,
    /// Wall time of the last checkpoint (ns), 0 before the first.
    pub checkpoint_at: AtomicI64,
    /// Whether the WAL failed (the engine then refuses batches).
    pub failed: AtomicBool,
}

/// The engine shared by the handlers.
#[derive(Debug)]
pub struct Engine {
    live: RwLock<Live>,
    tx: Mutex<Option<Sender<Job>>>,
    ready: Ready,
    /// WAL and checkpoint figures.
    pub durability: Durability,
    contract: Contract,
    stopped: tokio::sync::Notify,
    /// The Kafka source, when configured.
    kafka: std::sync::OnceLock<Arc<Kafka>>,
    /// Bytes of ingest bodies in flight.
    budget: Budget,
    /// Longer lines are malformed.
    max_line_bytes: usize,
    /// The largest body, after decompression.
    max_body_bytes: u64,
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Job").field("items", &self.items).finish()
    }
}

/// A job ready to send: the channel to the writer, the job, and where its answer arrives.
type Queued = (
    Sender<Job>,
    Job,
    tokio::sync::oneshot::Receiver<Result<Ingested, SubmitError>>,
);

/// The running writer thread.
#[derive(Debug)]
pub struct Writer(std::thread::JoinHandle<Result<(), String>>);

impl Writer {
    /// Waits for the writer to drain and take its last checkpoint.
    pub fn join(self) -> Result<(), String> {
        self.0
            .join()
            .unwrap_or_else(|_| Err("the writer thread panicked".into()))
    }
}

/// Wall time now, ns since the Unix epoch.
pub fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

impl Engine {
    /// Starts the writer: it opens the partition (restore and replay), marks `ready`, then
    /// takes batches until [`Engine::close`].
    pub fn start(
        contract: Contract,
        opts: EngineOptions,
        ready: Ready,
        metrics: Metrics,
    ) -> (Arc<Engine>, Writer) {
        let (tx, rx) = bounded(QUEUE);
        let engine = Arc::new(Engine {
            live: RwLock::new(Live::new(contract.clone(), opts.live)),
            tx: Mutex::new(Some(tx)),
            ready,
            durability: Durability::default(),
            contract,
            stopped: tokio::sync::Notify::new(),
            kafka: std::sync::OnceLock::new(),
            budget: Budget::new(opts.max_pending_bytes),
            max_line_bytes: opts.max_line_bytes,
            max_body_bytes: opts.max_body_bytes,
        });
        let e = engine.clone();
        let handle = std::thread::Builder::new()
            .name("fencewatch-writer".into())
            .spawn(move || {
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    writer(&e, &opts, rx, &metrics)
                }))
                .unwrap_or_else(|_| Err("the writer thread panicked".to_string()));
                if let Err(err) = &r {
                    tracing::error!(error = %err, "the writer stopped");
                    e.durability.failed.store(true, Ordering::Release);
                    e.ready.set(false);
                }
                e.stopped.notify_one();
                r
            })
            .expect("spawn the writer thread");
        (engine, Writer(handle))
    }

    /// The contract.
    pub fn contract(&self) -> &Contract {
        &self.contract
    }

    /// Whether replay is done and the engine takes batches.
    pub fn is_ready(&self) -> bool {
        self.ready.is_ready()
    }

    /// The last line of file `source` already in the assessor (file ingest resumes after it).
    pub fn source_progress(&self, source: &str) -> Option<u64> {
        self.read().source_progress(source)
    }

    /// Reads the assessor of the WAL partition.
    pub fn read(&self) -> RwLockReadGuard<'_, Live> {
        self.live.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds the Kafka source: queries then merge its partitions with the WAL's.
    pub fn attach_kafka(&self, kafka: Arc<Kafka>) {
        let _ = self.kafka.set(kafka);
    }

    /// The Kafka source, if attached.
    pub fn kafka(&self) -> Option<&Arc<Kafka>> {
        self.kafka.get()
    }

    /// Answers a query over every partition merged (SPEC §5): the WAL's, and each assigned
    /// Kafka partition's. Alone, the WAL partition is the watermark; beside Kafka it joins only
    /// once it holds events, and as idle (a `2xx` means applied: nothing of it is in flight),
    /// so the watermark is the minimum over the Kafka partitions still reading.
    pub fn query<R>(&self, f: impl FnOnce(&View<'_>) -> R) -> R {
        let wal = self.read();
        let parts = self.kafka.get().map(|k| k.parts());
        let remote = self.kafka.get().map(|k| k.remote());
        let mut view = View::new(&self.contract);
        let same = "every partition runs under the engine's contract";
        match &parts {
            None => view.add_live(&wal, true).expect(same),
            Some(parts) => {
                let (valid, malformed, unattributed, _) = wal.totals();
                if valid + malformed + unattributed > 0 {
                    view.add_live(&wal, false).expect(same);
                }
                for part in parts.values() {
                    view.add_live(&part.live, !part.idle).expect(same);
                }
                // Other instances' partitions (scale-out): the ones this instance does not own.
                for (key, published) in remote.iter().flat_map(|r| r.iter()) {
                    let owned = key.rsplit_once('/').is_some_and(|(t, p)| {
                        p.parse::<i32>()
                            .is_ok_and(|p| parts.contains_key(&(t.to_string(), p)))
                    });
                    if !owned {
                        // Summaries of another contract were dropped when read.
                        let _ = view.add_summary(&published.summary, !published.idle);
                    }
                }
            }
        }
        f(&view)
    }

    /// One scope's resident history: scopes live in one partition each (producers key by
    /// scope); a scope found in several (misrouted messages) is shown merged.
    pub fn scope(&self, p: usize, scope: &str) -> Option<ScopeView> {
        let wal = self.read();
        let parts = self.kafka.get().map(|k| k.parts());
        let lives =
            std::iter::once(&*wal).chain(parts.iter().flat_map(|m| m.values().map(|x| &x.live)));
        let mut found: Option<ScopeView> = None;
        for v in lives.filter_map(|l| l.scope(p, scope)) {
            match &mut found {
                None => found = Some(v),
                Some(f) => {
                    f.events.extend(v.events);
                    f.events
                        .sort_by(|a, b| (&a.ts, &a.source).cmp(&(&b.ts, &b.source)));
                    for c in v.counterexamples {
                        if !f.counterexamples.iter().any(|x| x.id == c.id) {
                            f.counterexamples.push(c);
                        }
                    }
                    if v.high_water.as_ref().map(|h| (h.incarnation, h.epoch))
                        > f.high_water.as_ref().map(|h| (h.incarnation, h.epoch))
                    {
                        f.high_water = v.high_water;
                    }
                }
            }
        }
        drop((wal, parts));
        if found.is_none() {
            // Owned by another instance (scale-out): its events stay there, but its
            // counterexamples are in the published summaries.
            let cxs =
                self.query(|v| v.counterexamples(Some(p), Some(scope), None, None, None, 1000));
            if !cxs.counterexamples.is_empty() {
                found = Some(ScopeView {
                    property: self.contract.properties[p].name.clone(),
                    scope: scope.to_string(),
                    events: Vec::new(),
                    high_water: None,
                    counterexamples: cxs.counterexamples,
                });
            }
        }
        found
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

    /// Submits a batch and waits until it is durable and applied.
    pub async fn submit(
        &self,
        format: Format,
        source: &str,
        body: &[u8],
    ) -> Result<Ingested, SubmitError> {
        let (tx, job, answer) = self.job(format, source, None, body)?;
        self.send(tx, job, answer).await
    }

    /// Submits a WAL payload already built (`partition::encode`) of `items` items, holding
    /// `held` of the ingest budget until it is answered, and waits until it is durable and
    /// applied.
    pub async fn submit_payload(
        &self,
        items: u64,
        payload: Vec<u8>,
        held: Reservation,
    ) -> Result<Ingested, SubmitError> {
        let (tx, job, answer) = self.job_of(items, payload, Some(held))?;
        self.send(tx, job, answer).await
    }

    async fn send(
        &self,
        tx: Sender<Job>,
        job: Job,
        answer: tokio::sync::oneshot::Receiver<Result<Ingested, SubmitError>>,
    ) -> Result<Ingested, SubmitError> {
        // A full queue blocks: move the wait off the async workers.
        tokio::task::spawn_blocking(move || tx.send(job))
            .await
            .map_err(|e| SubmitError::Unavailable(e.to_string()))?
            .map_err(|_| SubmitError::Unavailable("the writer stopped".into()))?;
        answer
            .await
            .map_err(|_| SubmitError::Unavailable("the writer stopped".into()))?
    }

    /// A job for `body` with the channel to send it on and where its answer arrives.
    fn job(
        &self,
        format: Format,
        source: &str,
        first_line: Option<u64>,
        body: &[u8],
    ) -> Result<Queued, SubmitError> {
        let items = partition::items(format, body);
        let payload = partition::encode(format, now_ns(), source, first_line, body);
        self.job_of(items, payload, None)
    }

    /// A job for a payload of `items` items.
    fn job_of(
        &self,
        items: u64,
        payload: Vec<u8>,
        held: Option<Reservation>,
    ) -> Result<Queued, SubmitError> {
        let items = u32::try_from(items).map_err(|_| {
            SubmitError::Unavailable(format!("a batch of {items} items is too large"))
        })?;
        let (reply, answer) = tokio::sync::oneshot::channel();
        let tx = self
            .tx
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .ok_or_else(|| SubmitError::Unavailable("the service is shutting down".into()))?;
        let job = Job {
            items,
            payload,
            reply,
            _held: held,
        };
        Ok((tx, job, answer))
    }

    /// Submits NDJSON lines of a file from a blocking thread (file ingest); `first_line` is
    /// the 1-based number of the body's first line, which positions its events.
    pub fn submit_lines(
        &self,
        source: &str,
        first_line: u64,
        body: &[u8],
    ) -> Result<Ingested, SubmitError> {
        let (tx, job, answer) = self.job(Format::Ndjson, source, Some(first_line), body)?;
        tx.send(job)
            .map_err(|_| SubmitError::Unavailable("the writer stopped".into()))?;
        answer
            .blocking_recv()
            .map_err(|_| SubmitError::Unavailable("the writer stopped".into()))?
    }

    /// Completes when the writer stopped (after [`Engine::close`], or on a failure).
    pub async fn stopped(&self) {
        self.stopped.notified().await
    }

    /// Stops taking batches; the writer drains the queue, checkpoints and ends.
    pub fn close(&self) {
        self.tx.lock().unwrap_or_else(|p| p.into_inner()).take();
    }

    /// Refreshes the gauges derived from the assessor (called before each scrape).
    pub fn refresh_metrics(&self, metrics: &Metrics) {
        let now = now_ns();
        self.query(|view| {
            for (p, prop) in self.contract.properties.iter().enumerate() {
                let a = view.assurance(p, now, prop.assurance_window.0, now);
                metrics.set_assurance(&prop.name, a.verdict);
                metrics.set_provisional(&prop.name, view.provisional_count(p));
                let counts = view.unknown_counts(p);
                for r in fencewatch_assess::Reason::ALL {
                    let n = counts.get(&r).copied().unwrap_or(0) as i64;
                    metrics.set_unknown(&prop.name, r, n);
                }
                let wm = view.watermark(p);
                if wm != EventTime::MIN {
                    metrics.set_watermark(&prop.name, wm, EventTime(now));
                }
                for r in view.coverage(p).routes {
                    if let Some(t) = r.last_seen_ns {
                        metrics.set_route_last_seen(&prop.name, &r.name, EventTime(t));
                    }
                }
            }
        });
        let (mut scopes, mut bytes) = {
            let live = self.read();
            (live.active_scopes(), live.state_bytes())
        };
        if let Some(k) = self.kafka.get() {
            for part in k.parts().values() {
                scopes += part.live.active_scopes();
                bytes += part.live.state_bytes();
            }
            k.refresh_metrics(metrics);
        }
        metrics.active_scopes.set(scopes as i64);
        metrics.ingest_pending_bytes.set(self.budget.used() as i64);
        metrics.state_bytes.set(bytes as i64);
        let d = &self.durability;
        metrics
            .wal_bytes
            .set(d.wal_bytes.load(Ordering::Acquire) as i64);
        metrics
            .wal_next_offset
            .set(d.next_offset.load(Ordering::Acquire) as i64);
        metrics
            .checkpoint_offset
            .set(d.checkpoint_offset.load(Ordering::Acquire) as i64);
        let at = d.checkpoint_at.load(Ordering::Acquire);
        if at > 0 {
            metrics.checkpoint_age_seconds.set((now - at) as f64 / 1e9);
        }
    }
}

/// A durable group on its way to the applier.
struct Group {
    jobs: Vec<Job>,
    bases: Vec<u64>,
}

/// The batches of a group with their items decoded, borrowing from the payloads they own.
type DecodedBatches<'a> = Vec<(partition::Batch<'a>, partition::DecodedItems<'a>)>;

self_cell::self_cell!(
    /// Payloads of a group and their decoded items: decoding happens on its own thread,
    /// while the previous group is applied.
    struct DecodedGroup {
        owner: Vec<Vec<u8>>,
        #[covariant]
        dependent: DecodedBatches,
    }
);

/// A decoded group on its way to the applier.
struct Ready_ {
    jobs: Vec<Job>,
    bases: Vec<u64>,
    decoded: DecodedGroup,
}

/// The decode stage: WAL-durable groups in, decoded groups out, in order.
fn decoder(rx: Receiver<Group>, tx: Sender<Ready_>, max_line_bytes: usize) {
    for Group { mut jobs, bases } in rx {
        let payloads: Vec<Vec<u8>> = jobs
            .iter_mut()
            .map(|j| std::mem::take(&mut j.payload))
            .collect();
        let decoded = DecodedGroup::new(payloads, |payloads| {
            payloads
                .iter()
                .map(|p| {
                    let batch = partition::decode(p).expect("a payload this engine encoded");
                    let items = partition::decode_items(&batch, max_line_bytes);
                    (batch, items)
                })
                .collect()
        });
        if tx
            .send(Ready_ {
                jobs,
                bases,
                decoded,
            })
            .is_err()
        {
            return;
        }
    }
}

/// A state snapshot on its way to the checkpoint thread.
struct Snapshot {
    offset: u64,
    state: fencewatch_assess::live::LiveState,
}

/// The WAL stage: opens the partition, then appends and fsyncs groups and hands them to the
/// applier; deletes the segments that saved checkpoints cover. The fsync of one group overlaps
/// the applying of the previous one.
fn writer(
    engine: &Arc<Engine>,
    opts: &EngineOptions,
    rx: Receiver<Job>,
    metrics: &Metrics,
) -> Result<(), String> {
    let dir = opts.data_dir.join("partitions").join("0");
    let started = Instant::now();
    let popts = PartitionOptions {
        segment_bytes: opts.segment_bytes,
        max_line_bytes: opts.max_line_bytes,
        live: opts.live,
    };
    let opened = partition::open(&dir, engine.contract.clone(), popts)
        .map_err(|e| open_failure(&e, &opts.data_dir))?;
    let partition::Opened {
        mut wal,
        checkpoints,
        live,
        restored_from,
        replayed_records,
        torn_tail,
        passed_over,
        quarantined,
    } = opened;
    log_recovery(torn_tail.as_ref(), &passed_over, &quarantined);
    tracing::info!(
        restored_from = ?restored_from,
        replayed_records,
        recovered_tail_bytes = torn_tail.as_ref().map_or(0, |t| t.bytes),
        next_offset = wal.next_offset(),
        elapsed_ms = started.elapsed().as_millis() as u64,
        "partition opened"
    );
    *engine.live.write().unwrap_or_else(|p| p.into_inner()) = live;
    let d = &engine.durability;
    let publish = |wal: &Wal| {
        d.wal_bytes.store(wal.bytes_on_disk(), Ordering::Release);
        d.next_offset.store(wal.next_offset(), Ordering::Release);
    };
    publish(&wal);
    if let Some(o) = restored_from {
        d.checkpoint_offset.store(o, Ordering::Release);
        d.checkpoint_at.store(now_ns(), Ordering::Release);
    }
    // The checkpoint stage: serializes and saves snapshots, reports saved offsets back.
    let (snap_tx, snap_rx) = bounded::<Snapshot>(1);
    let (saved_tx, saved_rx) = bounded::<u64>(4);
    let e = engine.clone();
    let checkpointer = std::thread::Builder::new()
        .name("fencewatch-checkpoint".into())
        .spawn(move || checkpointer(&e, checkpoints, snap_rx, saved_tx))
        .map_err(|e| e.to_string())?;
    // The apply stage.
    let (group_tx, group_rx) = bounded::<Group>(2);
    let (ready_tx, ready_rx) = bounded::<Ready_>(2);
    let max_line = opts.max_line_bytes;
    std::thread::Builder::new()
        .name("fencewatch-decode".into())
        .spawn(move || decoder(group_rx, ready_tx, max_line))
        .map_err(|e| e.to_string())?;
    let (e, m, o) = (engine.clone(), metrics.clone(), opts.clone());
    let dirty = replayed_records > 0 || restored_from.is_none();
    // The offset the restored and replayed state stands at, taken before any new append.
    let start_offset = wal.next_offset();
    let applier = std::thread::Builder::new()
        .name("fencewatch-apply".into())
        .spawn(move || applier(&e, &o, &m, ready_rx, snap_tx, dirty, start_offset))
        .map_err(|e| e.to_string())?;
    engine.ready.set(true);
    let mut jobs: Vec<Job> = Vec::with_capacity(GROUP);
    let mut result: Result<(), String> = Ok(());
    let mut checkpoint_failed = false;
    loop {
        crossbeam_channel::select! {
            recv(rx) -> job => {
                let Ok(first) = job else { break };
                jobs.push(first);
                while jobs.len() < GROUP {
                    match rx.try_recv() {
                        Ok(j) => jobs.push(j),
                        Err(_) => break,
                    }
                }
                match append(&mut wal, &mut jobs) {
                    Ok(bases) => {
                        publish(&wal);
                        let group = Group { jobs: std::mem::take(&mut jobs), bases };
                        if group_tx.send(group).is_err() {
                            result = Err("the apply stage stopped".to_string());
                            break;
                        }
                    }
                    Err(err) => {
                        result = Err(err);
                        break;
                    }
                }
            }
            recv(saved_rx) -> saved => {
                let Ok(offset) = saved else {
                    // Its error (with the cause and path) is taken when it is joined below.
                    result = Err("the checkpoint stage stopped".to_string());
                    checkpoint_failed = true;
                    break;
                };
                truncate(&mut wal, offset);
                publish(&wal);
            }
        }
    }
    engine.ready.set(false);
    drop(group_tx);
    let applied = applier
        .join()
        .unwrap_or_else(|_| Err("the apply thread panicked".into()));
    let saved = checkpointer
        .join()
        .unwrap_or_else(|_| Err("the checkpoint thread panicked".into()));
    // A failed checkpoint stops the other stages too: report its cause, not theirs.
    let (result, applied) = match &saved {
        Err(e) if checkpoint_failed || applied.is_err() => {
            let why = Err(format!("the checkpoint stage stopped: {e}"));
            (why, Ok(()))
        }
        _ => (result, applied),
    };
    for offset in saved_rx.try_iter() {
        truncate(&mut wal, offset);
    }
    if let Ok(Some(offset)) = &saved {
        truncate(&mut wal, *offset);
    }
    publish(&wal);
    tracing::info!(next_offset = wal.next_offset(), "writer drained");
    result.and(applied).and(saved.map(|_| ()))
}

/// Why the partition did not open, with the operator's way out when the log is damaged.
fn open_failure(e: &partition::Error, data_dir: &std::path::Path) -> String {
    use fencewatch_ingest::wal::Error as W;
    let damaged = matches!(
        e,
        partition::Error::Wal(W::Corrupt { .. } | W::MissingSegment { .. } | W::Removed { .. })
            | partition::Error::LogBehindCheckpoint { .. }
    );
    if damaged {
        let d = data_dir.display();
        format!(
            "{e}; nothing was changed: `fencewatch wal inspect --data-dir {d}` shows the damage, `fencewatch wal repair --data-dir {d}` what a repair would drop (README, Durability)"
        )
    } else {
        e.to_string()
    }
}

/// Logs, at WARN, each step recovery took that an operator must know of.
fn log_recovery(
    torn: Option<&fencewatch_ingest::wal::TornTail>,
    passed_over: &[fencewatch_ingest::checkpoint::PassedOver],
    quarantined: &[(PathBuf, String)],
) {
    if let Some(t) = torn {
        tracing::warn!(
            segment = %t.path.display(),
            byte = t.byte,
            bytes = t.bytes,
            offset = t.offset,
            reason = t.reason,
            "cut a torn tail off the write-ahead log: an append interrupted by a crash, never acknowledged"
        );
    }
    for p in passed_over {
        tracing::warn!(
            checkpoint = %p.path.display(),
            offset = p.offset,
            bytes = p.bytes,
            reason = %p.reason,
            "passed over a checkpoint that is damaged or does not decode: restoring an older one and replaying the log from it"
        );
    }
    for (dir, summary) in quarantined {
        tracing::warn!(
            quarantine = %dir.display(),
            repair = %summary,
            "the write-ahead log was repaired by `fencewatch wal repair`; the original files are kept here until deleted"
        );
    }
}

/// Deletes the WAL segments before `keep_from`, the offset of the older of the two kept
/// checkpoints (so that a damaged newest checkpoint can still fall back and replay).
fn truncate(wal: &mut Wal, keep_from: u64) {
    match wal.remove_before(keep_from) {
        Ok(freed) if freed > 0 => tracing::debug!(freed, "wal segments removed"),
        Ok(_) => {}
        Err(e) => tracing::warn!(error = %e, "removing covered wal segments failed"),
    }
}

/// Appends every job and fsyncs once. On failure nothing is acknowledged.
fn append(wal: &mut Wal, jobs: &mut Vec<Job>) -> Result<Vec<u64>, String> {
    let _span = tracing::info_span!("wal.group_commit", batches = jobs.len()).entered();
    let mut bases = Vec::with_capacity(jobs.len());
    let mut failure = None;
    for j in jobs.iter() {
        match wal.append(j.items.max(1), &j.payload) {
            Ok(b) => bases.push(b),
            Err(e) => {
                failure = Some(e.to_string());
                break;
            }
        }
    }
    if failure.is_none()
        && let Err(e) = wal.sync()
    {
        failure = Some(e.to_string());
    }
    if let Some(err) = failure {
        // A failed fsync cannot be retried safely: the engine stops, a restart recovers.
        for j in jobs.drain(..) {
            let _ = j.reply.send(Err(SubmitError::Unavailable(format!(
                "the write-ahead log failed: {err}"
            ))));
        }
        return Err(format!("the write-ahead log failed: {err}"));
    }
    Ok(bases)
}

/// The apply stage: applies each decoded group in offset order, answers, and snapshots the
/// state every checkpoint interval.
fn applier(
    engine: &Engine,
    opts: &EngineOptions,
    metrics: &Metrics,
    rx: Receiver<Ready_>,
    snapshots: Sender<Snapshot>,
    mut dirty: bool,
    start_offset: u64,
) -> Result<(), String> {
    let mut last = Instant::now();
    let mut next_offset = start_offset;
    // What the restored and replayed state holds was reported by the process that applied it.
    let mut reported = Reported::of(&engine.read());
    let snapshot = |next_offset: u64| {
        let started = Instant::now();
        let state = engine.read().state().clone();
        tracing::debug!(
            clone_ms = started.elapsed().as_millis() as u64,
            "state cloned for a checkpoint"
        );
        Snapshot {
            offset: next_offset,
            state,
        }
    };
    loop {
        let wait = opts
            .checkpoint_interval
            .saturating_sub(last.elapsed())
            .max(Duration::from_millis(1));
        match rx.recv_timeout(wait) {
            Ok(group) => {
                next_offset =
                    apply_group(engine, metrics, group, opts.max_line_bytes, &mut reported);
                dirty = true;
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
        if last.elapsed() >= opts.checkpoint_interval {
            // A full checkpoint queue means one is being written: try again next interval.
            // With nothing new, the interval starts over (no wake-up every millisecond).
            if dirty && snapshots.try_send(snapshot(next_offset)).is_ok() {
                dirty = false;
            }
            last = Instant::now();
        }
    }
    if dirty {
        snapshots
            .send(snapshot(next_offset))
            .map_err(|_| "the checkpoint thread stopped".to_string())?;
    }
    Ok(())
}

/// Applies and answers one decoded group; returns the next offset.
fn apply_group(
    engine: &Engine,
    metrics: &Metrics,
    group: Ready_,
    max_line_bytes: usize,
    reported: &mut Reported,
) -> u64 {
    let Ready_ {
        jobs,
        bases,
        mut decoded,
    } = group;
    let mut answers = Vec::with_capacity(jobs.len());
    let mut next = 0;
    {
        let mut live = engine.live.write().unwrap_or_else(|p| p.into_inner());
        decoded.with_dependent_mut(|_, batches| {
            for ((j, &base), (batch, items)) in jobs.iter().zip(&bases).zip(batches.iter_mut()) {
                let items = std::mem::take(items);
                let applied =
                    partition::apply_decoded(&mut live, base, batch, items, max_line_bytes);
                metrics.ingested(batch.source, applied.accepted);
                if applied.malformed > 0 {
                    metrics.rejected(batch.source, "malformed", applied.malformed);
                }
                next = base + u64::from(j.items.max(1));
                answers.push(Ingested {
                    first_offset: base,
                    next_offset: next,
                    applied,
                });
            }
        });
        report_findings(&engine.contract, metrics, &mut live, reported);
    }
    drop(decoded);
    for (j, a) in jobs.into_iter().zip(answers) {
        let _ = j.reply.send(Ok(a));
    }
    next
}

/// What the metrics were told of one assessor's stale rejections (per property), so that each
/// is counted once: the assessor keeps totals, and one restored from a checkpoint (or replayed)
/// starts from what it holds.
#[derive(Debug, Clone, Default)]
pub struct Reported {
    stale_rejections: Vec<u64>,
}

impl Reported {
    /// What `live` holds now, as already reported.
    pub fn of(live: &Live) -> Reported {
        let view = live.view();
        Reported {
            stale_rejections: (0..live.contract().properties.len())
                .map(|p| view.stale_rejections(p))
                .collect(),
        }
    }
}

/// Counts and logs what the last pushes found: counterexamples found and withdrawn, and stale
/// commits the resource rejected since `reported`. The WAL's and each Kafka partition's
/// assessor go through here.
pub fn report_findings(
    contract: &Contract,
    metrics: &Metrics,
    live: &mut Live,
    reported: &mut Reported,
) {
    let view = live.view();
    for (p, seen) in reported.stale_rejections.iter_mut().enumerate() {
        let now = view.stale_rejections(p);
        if now > *seen {
            let labels = crate::serve::metrics::PropertyLabels {
                property: contract.properties[p].name.clone(),
            };
            metrics
                .stale_rejections
                .get_or_create(&labels)
                .inc_by(now - *seen);
        }
        *seen = now;
    }
    report_counterexamples(contract, metrics, live);
}

/// Counts and logs the counterexamples the last pushes found and withdrew.
fn report_counterexamples(contract: &Contract, metrics: &Metrics, live: &mut Live) {
    for cx in live.take_new_counterexamples() {
        let property = &contract.properties[cx.property];
        metrics.counterexample(property, cx.kind, &cx.route);
        tracing::warn!(property = %property.name, kind = cx.kind.as_str(), id = %cx.id, route = %cx.route, "counterexample (provisional until the horizon passes its events)");
    }
    for cx in live.take_withdrawn_counterexamples() {
        let property = &contract.properties[cx.property];
        metrics.counterexample_withdrawn(property, cx.kind, &cx.route);
        tracing::warn!(property = %property.name, kind = cx.kind.as_str(), id = %cx.id, route = %cx.route, "counterexample withdrawn: its stale or superseding event is one of conflicting deliveries");
    }
}

/// The checkpoint stage: serializes and saves each snapshot, and reports the offset before
/// which WAL segments may go (the older of the two kept checkpoints).
fn checkpointer(
    engine: &Engine,
    mut store: CheckpointStore,
    rx: Receiver<Snapshot>,
    saved: Sender<u64>,
) -> Result<Option<u64>, String> {
    let d = &engine.durability;
    let mut last = None;
    for snap in rx {
        let started = Instant::now();
        let bytes = partition::encode_state(&snap.state);
        drop(snap.state);
        if let Err(e) = store.save(snap.offset, &bytes) {
            // The error names the file; the directory is logged too, for a failed rename.
            tracing::error!(
                offset = snap.offset,
                bytes = bytes.len(),
                dir = %store.dir().display(),
                error = %e,
                "saving a checkpoint failed"
            );
            return Err(format!("checkpoint at offset {}: {e}", snap.offset));
        }
        d.checkpoint_offset.store(snap.offset, Ordering::Release);
        d.checkpoint_at.store(now_ns(), Ordering::Release);
        tracing::info!(
            offset = snap.offset,
            bytes = bytes.len(),
            elapsed_ms = started.elapsed().as_millis() as u64,
            "checkpoint"
        );
        let keep_from = store.oldest_offset().unwrap_or(0);
        last = Some(keep_from);
        let _ = saved.try_send(keep_from);
    }
    Ok(last)
}
