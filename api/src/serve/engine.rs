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
use crate::serve::metrics::Metrics;
use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, bounded};
use fencewatch_assess::live::{Live, LiveOptions};
use fencewatch_assess::{Contract, EventTime};
use fencewatch_ingest::partition::{self, Applied, Format, PartitionOptions};
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
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Job").field("items", &self.items).finish()
    }
}

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
        });
        let e = engine.clone();
        let handle = std::thread::Builder::new()
            .name("fencewatch-writer".into())
            .spawn(move || {
                let r = writer(&e, &opts, rx, &metrics);
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

    /// Reads the assessor.
    pub fn read(&self) -> RwLockReadGuard<'_, Live> {
        self.live.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Submits a batch and waits until it is durable and applied.
    pub async fn submit(
        &self,
        format: Format,
        source: &str,
        body: &[u8],
    ) -> Result<Ingested, SubmitError> {
        let items = partition::items(format, body);
        let items = u32::try_from(items).map_err(|_| {
            SubmitError::Unavailable(format!("a batch of {items} items is too large"))
        })?;
        let payload = partition::encode(format, now_ns(), source, None, body);
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
        };
        // A full queue blocks: move the wait off the async workers.
        tokio::task::spawn_blocking(move || tx.send(job))
            .await
            .map_err(|e| SubmitError::Unavailable(e.to_string()))?
            .map_err(|_| SubmitError::Unavailable("the writer stopped".into()))?;
        answer
            .await
            .map_err(|_| SubmitError::Unavailable("the writer stopped".into()))?
    }

    /// Submits NDJSON lines of a file from a blocking thread (file ingest); `first_line` is
    /// the 1-based number of the body's first line, which positions its events.
    pub fn submit_lines(
        &self,
        source: &str,
        first_line: u64,
        body: &[u8],
    ) -> Result<Ingested, SubmitError> {
        let format = Format::Ndjson;
        let items = partition::items(format, body) as u32;
        let payload = partition::encode(format, now_ns(), source, Some(first_line), body);
        let (reply, answer) = tokio::sync::oneshot::channel();
        let tx = self
            .tx
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .ok_or_else(|| SubmitError::Unavailable("the service is shutting down".into()))?;
        tx.send(Job {
            items,
            payload,
            reply,
        })
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
        let live = self.read();
        for (p, prop) in self.contract.properties.iter().enumerate() {
            let a = live.assurance(p, now, prop.assurance_window.0, now);
            metrics.set_assurance(&prop.name, a.verdict);
            let counts = live.unknown_counts(p);
            for r in fencewatch_assess::Reason::ALL {
                metrics.set_unknown(&prop.name, r, counts.get(&r).copied().unwrap_or(0) as i64);
            }
            let wm = live.watermark(p);
            if wm != EventTime::MIN {
                metrics.set_watermark(&prop.name, wm, EventTime(now));
            }
            for r in live.coverage(p).routes {
                if let Some(t) = r.last_seen_ns {
                    metrics.set_route_last_seen(&prop.name, &r.name, EventTime(t));
                }
            }
        }
        metrics.active_scopes.set(live.active_scopes() as i64);
        metrics.state_bytes.set(live.state_bytes() as i64);
        drop(live);
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

fn writer(
    engine: &Engine,
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
    let opened =
        partition::open(&dir, engine.contract.clone(), popts).map_err(|e| e.to_string())?;
    let partition::Opened {
        mut wal,
        mut checkpoints,
        live,
        restored_from,
        replayed_records,
        recovered_tail_bytes,
    } = opened;
    tracing::info!(
        restored_from = ?restored_from,
        replayed_records,
        recovered_tail_bytes,
        next_offset = wal.next_offset(),
        elapsed_ms = started.elapsed().as_millis() as u64,
        "partition opened"
    );
    *engine.live.write().unwrap_or_else(|p| p.into_inner()) = live;
    let d = &engine.durability;
    let publish = |wal: &fencewatch_ingest::wal::Wal| {
        d.wal_bytes.store(wal.bytes_on_disk(), Ordering::Release);
        d.next_offset.store(wal.next_offset(), Ordering::Release);
    };
    publish(&wal);
    if let Some(o) = restored_from {
        d.checkpoint_offset.store(o, Ordering::Release);
        d.checkpoint_at.store(now_ns(), Ordering::Release);
    }
    engine.ready.set(true);
    let mut last_checkpoint = Instant::now();
    let mut dirty = replayed_records > 0;
    let checkpoint = |wal: &mut fencewatch_ingest::wal::Wal,
                      checkpoints: &mut fencewatch_ingest::checkpoint::CheckpointStore|
     -> Result<(), String> {
        let started = Instant::now();
        let state = partition::snapshot(&engine.read());
        let offset = wal.next_offset();
        let freed =
            partition::checkpoint(wal, checkpoints, offset, &state).map_err(|e| e.to_string())?;
        d.checkpoint_offset.store(offset, Ordering::Release);
        d.checkpoint_at.store(now_ns(), Ordering::Release);
        tracing::info!(
            offset,
            bytes = state.len(),
            wal_bytes_freed = freed,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "checkpoint"
        );
        Ok(())
    };
    let mut jobs: Vec<Job> = Vec::with_capacity(GROUP);
    loop {
        let wait = opts
            .checkpoint_interval
            .saturating_sub(last_checkpoint.elapsed())
            .max(Duration::from_millis(1));
        let first = match rx.recv_timeout(wait) {
            Ok(j) => Some(j),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => break,
        };
        if let Some(first) = first {
            jobs.push(first);
            while jobs.len() < GROUP {
                match rx.try_recv() {
                    Ok(j) => jobs.push(j),
                    Err(_) => break,
                }
            }
            commit(engine, &mut wal, &mut jobs, opts.max_line_bytes, metrics)?;
            publish(&wal);
            dirty = true;
        }
        if dirty && last_checkpoint.elapsed() >= opts.checkpoint_interval {
            checkpoint(&mut wal, &mut checkpoints)?;
            publish(&wal);
            last_checkpoint = Instant::now();
            dirty = false;
        }
    }
    engine.ready.set(false);
    if dirty || restored_from.is_none() {
        checkpoint(&mut wal, &mut checkpoints)?;
    }
    tracing::info!(next_offset = wal.next_offset(), "writer drained");
    Ok(())
}

/// One group commit: append every job, fsync once, apply in offset order, answer.
fn commit(
    engine: &Engine,
    wal: &mut fencewatch_ingest::wal::Wal,
    jobs: &mut Vec<Job>,
    max_line_bytes: usize,
    metrics: &Metrics,
) -> Result<(), String> {
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
        // Nothing is acknowledged; the WAL refuses further writes (a failed fsync cannot be
        // retried safely), so the engine stops and a restart recovers from the log.
        for j in jobs.drain(..) {
            let _ = j.reply.send(Err(SubmitError::Unavailable(format!(
                "the write-ahead log failed: {err}"
            ))));
        }
        return Err(format!("the write-ahead log failed: {err}"));
    }
    let mut answers = Vec::with_capacity(jobs.len());
    {
        let mut live = engine.live.write().unwrap_or_else(|p| p.into_inner());
        let nprops = engine.contract.properties.len();
        let rejections_before: Vec<u64> = (0..nprops).map(|p| live.stale_rejections(p)).collect();
        for (j, &base) in jobs.iter().zip(&bases) {
            let batch = partition::decode(&j.payload).expect("a payload this engine encoded");
            let applied = partition::apply(&mut live, base, &batch, max_line_bytes);
            metrics.ingested(batch.source, applied.accepted);
            if !applied.errors.is_empty() {
                metrics.rejected(batch.source, "malformed", applied.errors.len() as u64);
            }
            answers.push(Ingested {
                first_offset: base,
                next_offset: base + u64::from(j.items.max(1)),
                applied,
            });
        }
        for (p, before) in rejections_before.into_iter().enumerate() {
            let n = live.stale_rejections(p) - before;
            if n > 0 {
                let labels = crate::serve::metrics::PropertyLabels {
                    property: engine.contract.properties[p].name.clone(),
                };
                metrics.stale_rejections.get_or_create(&labels).inc_by(n);
            }
        }
        for cx in live.take_new_counterexamples() {
            let name = &engine.contract.properties[cx.property].name;
            metrics.counterexample(name, cx.kind, &cx.route);
            tracing::warn!(property = %name, kind = cx.kind.as_str(), id = %cx.id, route = %cx.route, "counterexample");
        }
    }
    for (j, a) in jobs.drain(..).zip(answers) {
        let _ = j.reply.send(Ok(a));
    }
    Ok(())
}
