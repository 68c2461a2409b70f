//! The stages of the WAL source, each a thread, in offset order:
//!
//! 1. **writer**: opens the local partition, then takes every batch queued (group commit),
//!    appends them to the WAL and fsyncs once; deletes the segments that saved checkpoints
//!    cover. The fsync of one group overlaps the applying of the previous one.
//! 2. **decode**: decodes each durable group's items, while the previous group is applied.
//! 3. **apply**: applies each batch of a group to the local partition under its write lock,
//!    reports what it found, and answers it once the lock is released; every
//!    `checkpoint_interval` encodes the state (under a read lock: no copy of it) into a
//!    bounded pipe to the checkpoint stage.
//! 4. **checkpoint**: writes the state's bytes into the checkpoint file as they come, then
//!    commits it, and tells the writer which segments may go. On shutdown the queue is
//!    drained and a last checkpoint taken.

use super::{
    Error, Ingested, Job, SubmitError, WalOptions, WalSource, open_failure, partition_dir,
};
use crate::batch::{DecodedGroup, Retained};
use crate::checkpoint::{self, CheckpointStore, PipeReader};
use crate::partition::local::{self, PartitionOptions};
use crate::registry::{Kind, Registry, Shared, read, write};
use crate::report::{
    CheckpointSaved, EventsIngested, EventsRejected, InternalEvent, Metrics, PartitionRestored,
};
use crate::wal::{TornTail, Wal};
use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, bounded};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Batches one group commit takes at most.
const GROUP: usize = 512;

/// A durable group on its way to the applier.
struct Group {
    jobs: Vec<Job>,
    bases: Vec<u64>,
}

/// A decoded group on its way to the applier.
struct Decoded {
    jobs: Vec<Job>,
    bases: Vec<u64>,
    decoded: DecodedGroup,
}

fn spawn<T: Send + 'static>(
    name: &'static str,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<std::thread::JoinHandle<T>, Error> {
    std::thread::Builder::new()
        .name(format!("fencewatch-{name}"))
        .spawn(f)
        .map_err(|e| Error::Spawn(name, e))
}

/// The writer stage (see the [module docs](self)), which starts the others.
pub(super) fn writer(
    source: &Arc<WalSource>,
    registry: &Registry,
    opts: &WalOptions,
    rx: Receiver<Job>,
    metrics: &Metrics,
) -> Result<(), Error> {
    let started = Instant::now();
    let popts = PartitionOptions {
        segment_bytes: opts.segment_bytes,
        max_line_bytes: opts.max_line_bytes,
        live: opts.live,
    };
    let opened = local::open_with(
        &partition_dir(&opts.data_dir),
        registry.contract().clone(),
        popts,
        |p| registry.prepare(p),
    )
    .map_err(|e| open_failure(&e, &opts.data_dir))?;
    let local::Opened {
        mut wal,
        checkpoints,
        partition,
        restored_from,
        replayed_records,
        torn_tail,
        passed_over,
        quarantined,
    } = opened;
    log_recovery(torn_tail.as_ref(), &quarantined);
    // The archive is this data directory's: every check passed (its id, its offsets against
    // the log and the checkpoints), so the id is kept now, not before.
    #[cfg(feature = "archive")]
    if let Some(a) = registry.archive() {
        a.keep_owner(&opts.data_dir).map_err(Error::Archive)?;
    }
    PartitionRestored {
        partition: local::NAME,
        restored_from,
        next_offset: wal.next_offset(),
        replayed: Some(replayed_records),
        passed_over: &passed_over,
        quarantined: None,
        elapsed: started.elapsed(),
    }
    .emit(metrics);
    let dirty = replayed_records > 0 || restored_from.is_none();
    let part = registry.register(Kind::Local, partition);
    source.opened(part.clone());
    let d = &source.durability;
    let publish = |wal: &Wal| {
        d.wal_bytes.store(wal.bytes_on_disk(), Ordering::Release);
        d.next_offset.store(wal.next_offset(), Ordering::Release);
    };
    publish(&wal);
    if let Some(o) = restored_from {
        d.checkpoint_offset.store(o, Ordering::Release);
        d.checkpoint_at
            .store(source.clock.now().0, Ordering::Release);
    }
    let (snap_tx, snap_rx) = bounded::<(u64, PipeReader)>(1);
    let (saved_tx, saved_rx) = bounded::<u64>(4);
    let (s, m) = (source.clone(), metrics.clone());
    let archive = archive_of(registry);
    let a = archive.clone();
    // Whether the checkpoint stage waits for a state: only then is one encoded, so at most one
    // checkpoint is written at a time.
    let idle = Arc::new(AtomicBool::new(true));
    let i = idle.clone();
    let checkpointer = spawn("checkpoint", move || {
        let saved = checkpointer(&s, &m, checkpoints, snap_rx, saved_tx, a, &i);
        i.store(true, Ordering::Release);
        saved
    })?;
    let (group_tx, group_rx) = bounded::<Group>(2);
    let (decoded_tx, decoded_rx) = bounded::<Decoded>(2);
    let max_line = opts.max_line_bytes;
    spawn("decode", move || decoder(group_rx, decoded_tx, max_line))?;
    let (p, m, interval) = (part.clone(), metrics.clone(), opts.checkpoint_interval);
    let a = archive.clone();
    let applier = spawn("apply", move || {
        let snapshots = (snap_tx, idle);
        applier(&p, interval, max_line, &m, decoded_rx, snapshots, dirty, a)
    })?;
    source.ready.set(true);
    let mut jobs: Vec<Job> = Vec::with_capacity(GROUP);
    let mut result: Result<(), Error> = Ok(());
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
                            result = Err(Error::Stage("apply"));
                            break;
                        }
                    }
                    Err(err) => {
                        result = Err(err.into());
                        break;
                    }
                }
            }
            recv(saved_rx) -> saved => {
                let Ok(offset) = saved else {
                    // Its error (with the cause and path) is taken when it is joined below.
                    result = Err(Error::Stage("checkpoint"));
                    checkpoint_failed = true;
                    break;
                };
                truncate(&mut wal, offset, &archive);
                publish(&wal);
            }
        }
    }
    source.ready.set(false);
    drop(group_tx);
    let applied = applier.join().unwrap_or(Err(Error::Panicked("apply")));
    let saved = checkpointer
        .join()
        .unwrap_or(Err(Error::Panicked("checkpoint")));
    // A failed checkpoint stops the other stages too: report its cause, not theirs.
    let stopped_by_checkpoint = checkpoint_failed || applied.is_err();
    let (result, applied, saved) = match saved {
        Err(e) if stopped_by_checkpoint => (Err(e), Ok(()), Ok(None)),
        saved => (result, applied, saved),
    };
    for offset in saved_rx.try_iter() {
        truncate(&mut wal, offset, &archive);
    }
    if let Ok(Some(offset)) = &saved {
        truncate(&mut wal, *offset, &archive);
    }
    publish(&wal);
    tracing::info!(next_offset = wal.next_offset(), "writer drained");
    // The applier ended first: its own error (a panic, a failed last checkpoint) says why.
    let result = match result {
        Err(Error::Stage("apply")) if applied.is_err() => Ok(()),
        r => r,
    };
    result.and(applied).and(saved.map(drop))
}

/// Logs, at WARN, each step recovery of the log took that an operator must know of.
fn log_recovery(torn: Option<&TornTail>, quarantined: &[(PathBuf, String)]) {
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
    for (dir, summary) in quarantined {
        tracing::warn!(
            quarantine = %dir.display(),
            repair = %summary,
            "the write-ahead log was repaired by `fencewatch wal repair`; the original files are kept here until deleted"
        );
    }
}

/// The evidence archive, if on (a unit without the feature).
#[cfg(feature = "archive")]
type ArchiveRef = Option<Arc<crate::archive::Archive>>;
/// No archive is built in: never one (not `()`, so that the stages clone it as with one).
#[cfg(not(feature = "archive"))]
#[derive(Clone)]
struct NoArchive;
#[cfg(not(feature = "archive"))]
type ArchiveRef = Option<NoArchive>;

fn archive_of(registry: &Registry) -> ArchiveRef {
    #[cfg(feature = "archive")]
    return registry.archive().cloned();
    #[cfg(not(feature = "archive"))]
    {
        let _ = registry;
        None
    }
}

/// Deletes the WAL segments before `keep_from`, the offset of the older of the two kept
/// checkpoints (so that a damaged newest checkpoint can still fall back and replay), and
/// before the offset below which the archive holds every row (SPEC §9: the lower of the two;
/// a checkpoint is saved only once the archive holds its rows, so it is the checkpoint's).
fn truncate(wal: &mut Wal, keep_from: u64, archive: &ArchiveRef) {
    #[cfg(feature = "archive")]
    let keep_from = archive
        .as_ref()
        .map_or(keep_from, |a| keep_from.min(a.durable(local::NAME)));
    let _ = archive;
    match wal.remove_before(keep_from) {
        Ok(freed) if freed > 0 => tracing::debug!(freed, "wal segments removed"),
        Ok(_) => {}
        Err(e) => tracing::warn!(error = %e, "removing covered wal segments failed"),
    }
}

/// Appends every job and fsyncs once. On failure nothing is acknowledged.
fn append(wal: &mut Wal, jobs: &mut Vec<Job>) -> Result<Vec<u64>, crate::wal::Error> {
    let _span = tracing::info_span!("wal.group_commit", batches = jobs.len()).entered();
    let mut bases = Vec::with_capacity(jobs.len());
    let mut failure = None;
    for j in jobs.iter() {
        match wal.append(j.items.max(1), &j.payload) {
            Ok(b) => bases.push(b),
            Err(e) => {
                failure = Some(e);
                break;
            }
        }
    }
    if failure.is_none()
        && let Err(e) = wal.sync()
    {
        failure = Some(e);
    }
    if let Some(err) = failure {
        // A failed fsync cannot be retried safely: the writer stops, a restart recovers.
        for j in jobs.drain(..) {
            let _ = j.reply.send(Err(SubmitError::Failed(err.to_string())));
        }
        return Err(err);
    }
    Ok(bases)
}

/// The decode stage: WAL-durable groups in, decoded groups out, in order.
fn decoder(rx: Receiver<Group>, tx: Sender<Decoded>, max_line_bytes: usize) {
    for Group { mut jobs, bases } in rx {
        let payloads: Vec<Vec<u8>> = jobs
            .iter_mut()
            .map(|j| std::mem::take(&mut j.payload))
            .collect();
        let decoded = DecodedGroup::decode(payloads, max_line_bytes);
        if tx
            .send(Decoded {
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

/// The apply stage: applies each decoded group in offset order, answers, and encodes the
/// state every checkpoint interval when the checkpoint stage is idle (the flag beside its
/// queue), into a pipe that stage writes to the checkpoint file from as the bytes come: the
/// partition's read lock is held while the state is encoded, not while it is written too.
#[allow(clippy::too_many_arguments)]
fn applier(
    part: &Shared,
    interval: Duration,
    max_line_bytes: usize,
    metrics: &Metrics,
    rx: Receiver<Decoded>,
    (snapshots, idle): (Sender<(u64, PipeReader)>, Arc<AtomicBool>),
    mut dirty: bool,
    #[cfg_attr(not(feature = "archive"), allow(unused_variables))] archive: ArchiveRef,
) -> Result<(), Error> {
    let mut last = Instant::now();
    // Whether the checkpoint stage took a state (all of it, unless it stopped on the way).
    let snapshot = |send: &dyn Fn((u64, PipeReader)) -> bool| {
        let started = Instant::now();
        let (mut out, pipe) = checkpoint::pipe();
        let part = read(part);
        if !send((part.next(), pipe)) {
            return false;
        }
        let encoded = part.encode_into(&mut out).and_then(|()| out.finish());
        drop(part);
        let locked_ms = started.elapsed().as_millis() as u64;
        match encoded {
            Ok(()) => tracing::debug!(locked_ms, "state encoded for a checkpoint"),
            // The stage stopped; its error (with the cause and path) is taken when it is joined.
            Err(e) => tracing::debug!(locked_ms, error = %e, "encoding a checkpoint stopped"),
        }
        true
    };
    loop {
        let wait = interval
            .saturating_sub(last.elapsed())
            .max(Duration::from_millis(1));
        match rx.recv_timeout(wait) {
            Ok(group) => {
                #[cfg(feature = "archive")]
                if let Some(a) = &archive {
                    // Backpressure when the archive falls behind, before the partition is locked.
                    a.wait_for_room();
                }
                apply_group(part, metrics, group, max_line_bytes);
                dirty = true;
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
        if last.elapsed() >= interval {
            // One being written: try again next interval. With nothing new, the interval
            // starts over (no wake-up every millisecond).
            if dirty && idle.swap(false, Ordering::AcqRel) {
                if snapshot(&|snap| snapshots.try_send(snap).is_ok()) {
                    dirty = false;
                } else {
                    idle.store(true, Ordering::Release);
                }
            }
            last = Instant::now();
        }
    }
    if dirty {
        // The last one waits for the one being written (which the stage drops first).
        while !idle.swap(false, Ordering::AcqRel) {
            std::thread::sleep(Duration::from_millis(5));
        }
        if !snapshot(&|snap| snapshots.send(snap).is_ok()) {
            return Err(Error::Stage("checkpoint"));
        }
    }
    Ok(())
}

/// Applies, reports and answers one decoded group, batch by batch: each batch is applied and
/// reported under the partition's write lock, which is then released before the batch is
/// answered, so a batch's `2xx` never waits for the rest of its group (its client sends the
/// next one, which is made durable and decoded while the group is still being applied), and
/// a query between two batches sees every answered batch.
fn apply_group(part: &Shared, metrics: &Metrics, group: Decoded, max_line_bytes: usize) {
    let Decoded {
        jobs,
        bases,
        decoded,
    } = group;
    // Kept alive until the evidence archive has read its events (and dropped here without
    // one): the applier only notes what each event came to.
    let decoded = Arc::new(decoded);
    let kept: Arc<dyn Retained> = decoded.clone();
    let batches = decoded.batches();
    for (k, ((j, base), (batch, items))) in jobs.into_iter().zip(bases).zip(batches).enumerate() {
        let len = u64::from(j.items.max(1));
        let _ = crate::heap::extend_ahead();
        let mut part = write(part);
        let applied = part
            .apply_kept(base, len, batch, items, Some((&kept, k)), max_line_bytes)
            .expect("the writer hands out increasing offsets");
        report_batch(metrics, batch.source, &applied);
        part.report(metrics);
        drop(part);
        let _ = j.reply.send(Ok(Ingested {
            first_offset: base,
            next_offset: base + len,
            applied,
        }));
    }
}

/// The events of one applied batch of `source`.
fn report_batch(metrics: &Metrics, source: &str, applied: &crate::partition::Applied) {
    EventsIngested {
        source,
        count: applied.accepted,
    }
    .emit(metrics);
    EventsRejected {
        source,
        reason: "malformed",
        count: applied.malformed,
    }
    .emit(metrics);
}

/// The checkpoint stage: writes each state into a checkpoint file as it is encoded and commits
/// it, and reports the offset before which WAL segments may go (the older of the two kept
/// checkpoints). Returns the last. Sets `idle` once a checkpoint is done with.
fn checkpointer(
    source: &WalSource,
    metrics: &Metrics,
    mut store: CheckpointStore,
    rx: Receiver<(u64, PipeReader)>,
    saved: Sender<u64>,
    archive: ArchiveRef,
    idle: &AtomicBool,
) -> Result<Option<u64>, Error> {
    let d = &source.durability;
    let mut last = None;
    for (offset, pipe) in rx {
        let started = Instant::now();
        let dir = store.dir().to_path_buf();
        let failed = |e: checkpoint::Error| {
            // The error names the file; the directory is logged too, for a failed rename.
            tracing::error!(
                offset,
                dir = %dir.display(),
                error = %e,
                "saving a checkpoint failed"
            );
            Error::Checkpoint { offset, source: e }
        };
        let mut pending = store.begin(offset).map_err(failed)?;
        match pipe.copy_to(&mut pending) {
            Ok(true) => {}
            Ok(false) => {
                // The apply stage stopped encoding (it panicked): its failure is reported.
                tracing::warn!(offset, "a checkpoint's state ended early; not saved");
                drop(pending);
                idle.store(true, Ordering::Release);
                continue;
            }
            Err(e) => {
                let path = pending.path().to_path_buf();
                return Err(failed(checkpoint::Error::Io { path, source: e }));
            }
        }
        // A checkpoint covers only rows the archive holds (SPEC §9): after a crash the log is
        // replayed from it, and every row past the archived offset is archived again.
        #[cfg(feature = "archive")]
        if let Some(a) = &archive
            && let Err(e) = a.flush_through(local::NAME, offset)
        {
            tracing::error!(offset, error = %e, "the evidence archive cannot be written; no checkpoint is taken past it");
            return Err(Error::Archive(e));
        }
        let _ = &archive;
        let bytes = store.commit(pending).map_err(failed)?;
        d.checkpoint_offset.store(offset, Ordering::Release);
        d.checkpoint_at
            .store(source.clock.now().0, Ordering::Release);
        CheckpointSaved {
            partition: local::NAME,
            offset,
            bytes: bytes as usize,
            elapsed: started.elapsed(),
        }
        .emit(metrics);
        idle.store(true, Ordering::Release);
        let keep_from = store.oldest_offset().unwrap_or(0);
        last = Some(keep_from);
        let _ = saved.try_send(keep_from);
    }
    Ok(last)
}
