//! The archive's buffers, flushes, snapshots, retention and compaction.

use super::chunk::{Chunk, batches_of};
pub use super::error::Error;
pub(super) use super::error::{io, pq};
use super::manifest::{self, FileEntry, Manifest, WindowsArchived};
use super::open::Open;
use super::rows::{CounterexampleRows, Rows, Table, WindowRows};
use super::windows;
use arrow_array::RecordBatch;
use fencewatch_assess::live::{Settled, View};
use parquet::basic::{Compression, Encoding, ZstdLevel};
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::schema::types::ColumnPath;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

const TABLES: usize = Table::ALL.len();

fn slot(t: Table) -> usize {
    t as usize
}

/// Options of the archive.
#[derive(Debug, Clone)]
pub struct ArchiveOptions {
    /// The archive folder (`<data_dir>/archive`).
    pub dir: PathBuf,
    /// Rows wait at most this long before they are written (`archive_flush_interval`).
    pub flush_interval: Duration,
    /// Rows in memory (Arrow bytes) that cut a file before the interval.
    pub flush_bytes: usize,
    /// Rows waiting (Arrow bytes) that wake the archive's thread to encode them into the open
    /// files ([`Archive::write_some`]).
    pub write_bytes: usize,
    /// Rows per Parquet row group.
    pub row_group_rows: usize,
    /// Files older than this are dropped (`archive_retention`).
    pub retention: Option<Duration>,
    /// Beyond this many bytes of files the oldest are dropped (`archive_max_bytes`).
    pub max_bytes: Option<u64>,
    /// How long a file no longer listed is kept for queries that took a snapshot before.
    pub delete_grace: Duration,
    /// Files smaller than this are compacted.
    pub compact_below: u64,
    /// The id of the data directory the archive belongs to ([`super::data_dir_id`]): an
    /// archive whose manifest names another is refused; `None` checks nothing.
    pub data_dir_id: Option<String>,
}

impl ArchiveOptions {
    /// The defaults for the archive folder `dir`.
    pub fn new(dir: PathBuf) -> ArchiveOptions {
        ArchiveOptions {
            dir,
            flush_interval: Duration::from_secs(10),
            flush_bytes: 32 << 20,
            write_bytes: 4 << 20,
            row_group_rows: 100_000,
            retention: Some(Duration::from_secs(30 * 24 * 3600)),
            max_bytes: None,
            delete_grace: Duration::from_secs(120),
            compact_below: 8 << 20,
            data_dir_id: None,
        }
    }
}

/// Counters of the archive, for metrics.
#[derive(Debug, Default)]
pub struct Stats {
    /// Rows written per table (in [`Table::ALL`] order), compactions not counted.
    pub rows: [AtomicU64; TABLES],
    /// Files written by flushes.
    pub files: AtomicU64,
    /// Bytes written by flushes.
    pub bytes: AtomicU64,
    /// Flushes that wrote something.
    pub flushes: AtomicU64,
    /// Microseconds the last flush took.
    pub last_flush_micros: AtomicU64,
    /// Wall time (ns) of the last flush that committed, 0 before the first.
    pub last_flush_at: AtomicI64,
    /// Compactions done.
    pub compactions: AtomicU64,
    /// Files dropped by retention.
    pub expired: AtomicU64,
    /// Microseconds ingest waited for room ([`Archive::wait_for_room`]): the archive fell
    /// behind and held ingest back. Summed over the threads that wait (one per Kafka
    /// partition's worker), counted every 100 ms of a wait.
    pub waited_micros: AtomicU64,
}

/// What the archive holds as one query sees it: the files of the manifest, and the rows not
/// written yet.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Per table, its files (absolute paths).
    pub files: BTreeMap<Table, Vec<PathBuf>>,
    /// Per table, the rows not in those files.
    pub batches: BTreeMap<Table, Vec<RecordBatch>>,
}

impl Snapshot {
    /// The files listed in the manifest of the archive in `dir` (what `fencewatch query
    /// --data-dir` reads, also while `serve` runs on it).
    pub fn of_dir(dir: &Path) -> Result<Snapshot, Error> {
        Ok(snapshot_of(dir, &Manifest::load(dir)?))
    }
}

fn snapshot_of(dir: &Path, m: &Manifest) -> Snapshot {
    let mut s = Snapshot::default();
    for t in Table::ALL {
        s.files
            .insert(t, m.files_of(t.name()).map(|f| dir.join(&f.path)).collect());
    }
    s
}

/// A snapshot taken ([`Archive::take_snapshot`]), its rows in memory not made Arrow yet.
#[derive(Debug)]
pub struct Taken {
    snap: Snapshot,
    chunks: Vec<(Table, Vec<Chunk>)>,
}

impl Taken {
    /// The snapshot: each table's rows in memory first (in the order they were handed over),
    /// then the windows and counterexamples taken from the assessors.
    pub fn read(self) -> Snapshot {
        let Taken { mut snap, chunks } = self;
        for (t, cs) in chunks {
            let bs = snap.batches.entry(t).or_default();
            bs.splice(0..0, cs.iter().flat_map(Chunk::batches));
        }
        snap
    }
}

#[derive(Debug, Default)]
pub(super) struct State {
    pending: [Vec<Chunk>; TABLES],
    pending_bytes: usize,
    /// Rows taken into the open files (visible until those are in the manifest).
    open: [Vec<Chunk>; TABLES],
    open_bytes: usize,
    /// Per partition, the offset below which every row is held (written or waiting).
    buffered: BTreeMap<String, u64>,
    /// How far windows are held (written or waiting).
    windows: BTreeMap<String, WindowsArchived>,
    /// The manifest last committed.
    pub(super) manifest: Manifest,
    failed: Option<String>,
    closing: bool,
    wake: bool,
}

/// The archive of one data directory.
#[derive(Debug)]
pub struct Archive {
    pub(super) opts: ArchiveOptions,
    state: Mutex<State>,
    changed: Condvar,
    /// One flush, compaction or retention pass at a time: each replaces the manifest. It
    /// holds the open files.
    pub(super) flush_lock: Mutex<Open>,
    /// Leftover files deleted when the archive was opened.
    orphans: usize,
    /// Counters.
    pub stats: Stats,
}

impl Archive {
    /// Opens (or creates) the archive: reads the manifest, deletes files it does not list
    /// (leftovers of an interrupted flush or compaction) and obsolete ones past their grace.
    pub fn open(opts: ArchiveOptions) -> Result<Archive, Error> {
        let dir = &opts.dir;
        for t in Table::ALL {
            let d = dir.join(t.name());
            std::fs::create_dir_all(&d).map_err(io(&d))?;
        }
        // The folders are durable before a file in them is: a power loss after the first
        // flush must not take `archive/` (and its rows, below a checkpoint) with it.
        let parent = dir.parent().filter(|p| !p.as_os_str().is_empty());
        for d in [Some(dir.as_path()), parent].into_iter().flatten() {
            crate::wal::fsync_dir(d).map_err(io(d))?;
        }
        let mut m = super::owner::load_checked(dir, opts.data_dir_id.as_deref())?;
        let listed: BTreeSet<&str> = m
            .files
            .iter()
            .map(|f| f.path.as_str())
            .chain(m.obsolete.iter().map(|o| o.path.as_str()))
            .collect();
        let mut orphans = 0;
        for t in Table::ALL {
            let d = dir.join(t.name());
            for e in std::fs::read_dir(&d).map_err(io(&d))? {
                let e = e.map_err(io(&d))?;
                let rel = format!("{}/{}", t.name(), e.file_name().to_string_lossy());
                if !listed.contains(rel.as_str()) {
                    std::fs::remove_file(e.path()).map_err(io(&e.path()))?;
                    orphans += 1;
                }
            }
        }
        let _ = std::fs::remove_file(dir.join(format!("{}.tmp", manifest::MANIFEST)));
        if m.delete_obsolete(dir, now_ns()) {
            m.store(dir)?;
        }
        let state = State {
            buffered: m.partitions.clone(),
            windows: m.windows.clone(),
            manifest: m,
            ..State::default()
        };
        Ok(Archive {
            opts,
            state: Mutex::new(state),
            changed: Condvar::new(),
            flush_lock: Mutex::new(Open::default()),
            orphans,
            stats: Stats::default(),
        })
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Its options.
    pub fn options(&self) -> &ArchiveOptions {
        &self.opts
    }

    /// Files deleted on open because the manifest did not list them.
    pub fn orphans_removed(&self) -> usize {
        self.orphans
    }

    /// The offset below which every row of `partition` is archived or waiting to be.
    pub fn archived(&self, partition: &str) -> u64 {
        self.lock().buffered.get(partition).copied().unwrap_or(0)
    }

    /// Writes the id the archive was opened under ([`ArchiveOptions::data_dir_id`]) as the
    /// data directory's (`data_dir`'s [`super::DATA_DIR_ID`]), once every check of the
    /// archive against the data directory passed; nothing without an id.
    pub fn keep_owner(&self, data_dir: &Path) -> Result<(), Error> {
        let Some(id) = &self.opts.data_dir_id else {
            return Ok(());
        };
        // A manifest written before ids were kept names this directory from now on (not
        // on open: a start refused after it would have claimed the archive).
        {
            let _flush = self.flush_lock.lock().unwrap_or_else(|p| p.into_inner());
            let mut m = self.lock().manifest.clone();
            if m.data_dir.is_none() {
                m.data_dir = Some(id.clone());
                self.commit_manifest(&mut m)?;
            }
        }
        super::keep_data_dir_id(data_dir, id)
    }

    /// The offset below which every row of `partition` is archived or waiting to be, if the
    /// archive lists it (it took rows of it before; a new archive starts where it is).
    pub fn listed_below(&self, partition: &str) -> Option<u64> {
        self.lock().buffered.get(partition).copied()
    }

    /// The offset below which every row of `partition` is written and in the manifest.
    pub fn durable(&self, partition: &str) -> u64 {
        self.lock()
            .manifest
            .partitions
            .get(partition)
            .copied()
            .unwrap_or(0)
    }

    /// Why the archive stopped writing, if it did.
    pub fn failure(&self) -> Option<String> {
        self.lock().failed.clone()
    }

    /// Files and bytes in the manifest, and rows and bytes waiting in memory.
    pub fn sizes(&self) -> Sizes {
        let s = self.lock();
        let rows = |bs: &[Vec<Chunk>; TABLES]| {
            bs.iter()
                .flatten()
                .map(|b| b.num_rows() as u64)
                .sum::<u64>()
        };
        Sizes {
            files: s.manifest.files.len() as u64,
            bytes: s.manifest.files.iter().map(|f| f.bytes).sum(),
            pending_rows: rows(&s.pending) + rows(&s.open),
            pending_bytes: (s.pending_bytes + s.open_bytes) as u64,
        }
    }

    /// Takes the rows of a partition's records up to `next` (exclusive).
    /// Once the archive has failed they are dropped: nothing more is written until a restart,
    /// which re-archives them from the log (the manifest's offsets did not move), and queries
    /// are refused ([`Archive::snapshot`]), so memory stays bounded and no answer is partial.
    pub(super) fn commit(&self, partition: &str, next: u64, batches: Vec<(Table, Chunk)>) {
        let mut s = self.lock();
        if s.failed.is_some() {
            return;
        }
        for (t, b) in batches {
            s.pending_bytes += b.memory_size();
            s.pending[slot(t)].push(b);
        }
        let at = s.buffered.entry(partition.to_string()).or_insert(0);
        *at = (*at).max(next);
        if s.pending_bytes >= self.opts.write_bytes && !s.wake {
            s.wake = true;
            self.changed.notify_all();
        }
    }

    /// A partition's log started over from 0.
    pub(super) fn rewound(&self, partition: &str) {
        self.lock().buffered.insert(partition.to_string(), 0);
    }

    /// Blocks while more than two files' worth of rows wait (the writer fell behind): call
    /// with no assessor locked.
    pub fn wait_for_room(&self) {
        self.wait_for_room_until(None);
    }

    /// [`Archive::wait_for_room`] for at most a second: inside a batch, with its assessor
    /// locked, the wait must end whatever the archive's thread does.
    pub fn wait_for_room_briefly(&self) {
        self.wait_for_room_until(Some(Instant::now() + Duration::from_secs(1)));
    }

    fn wait_for_room_until(&self, deadline: Option<Instant>) {
        let max = self.opts.flush_bytes.saturating_mul(2);
        let mut s = self.lock();
        let full =
            |s: &State| s.pending_bytes + s.open_bytes > max && s.failed.is_none() && !s.closing;
        // The time waited is counted at least every 100 ms, so that a wait that lasts shows
        // while it lasts, not only once it ends.
        const TICK: Duration = Duration::from_millis(100);
        let mut since = Instant::now();
        while full(&s) {
            let wait = match deadline {
                None => TICK,
                Some(d) => d.saturating_duration_since(since).min(TICK),
            };
            if wait.is_zero() {
                return;
            }
            s = self
                .changed
                .wait_timeout(s, wait)
                .unwrap_or_else(|p| p.into_inner())
                .0;
            let now = Instant::now();
            let micros = u64::try_from((now - since).as_micros()).unwrap_or(u64::MAX);
            self.stats
                .waited_micros
                .fetch_add(micros, Ordering::Relaxed);
            since = now;
        }
    }

    /// Whether the rows in memory (waiting, or in the open files) reach half of what makes
    /// ingest wait ([`Archive::wait_for_room`]).
    pub(super) fn behind(&self) -> bool {
        let s = self.lock();
        s.pending_bytes + s.open_bytes >= self.opts.flush_bytes
    }

    /// Waits until rows are due to be written (enough wait: [`Due::Size`]) or a flush is (the
    /// interval since `since` passed, or the archive is closing).
    pub fn wait_due(&self, since: Instant) -> Due {
        let mut s = self.lock();
        loop {
            if s.closing {
                return Due::Closing;
            }
            // The interval first: under a steady load `wake` is set again each time the
            // thread comes back, and the interval's work (windows, retention, compaction)
            // must still be done.
            let left = self.opts.flush_interval.saturating_sub(since.elapsed());
            if left.is_zero() {
                return Due::Interval;
            }
            if s.wake {
                s.wake = false;
                return Due::Size;
            }
            s = self
                .changed
                .wait_timeout(s, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// Asks the thread in [`Archive::wait_due`] to do its last flush and stop.
    pub fn close(&self) {
        self.lock().closing = true;
        self.changed.notify_all();
    }

    /// Collects the rows of windows that became final or were revised (from `view`, the merged
    /// view of every partition); returns how many.
    pub fn tick_windows(&self, view: &View<'_>) -> usize {
        let mut archived = self.lock().windows.clone();
        let mut rows = WindowRows::default();
        let n = windows::tick(view, &mut archived, &mut rows, windows::TICK_ROWS);
        let mut s = self.lock();
        if s.failed.is_some() {
            return 0;
        }
        s.windows = archived;
        if n > 0 {
            let b = rows.finish();
            s.pending_bytes += b.get_array_memory_size();
            s.pending[slot(Table::WindowRevisions)].push(Chunk::Batch(b));
        }
        n
    }

    /// Writes every row waiting (one file per table) and commits it to the manifest with the
    /// partitions' offsets and the windows' progress. Returns whether anything changed.
    pub fn flush(&self) -> Result<bool, Error> {
        let mut open = self.open_files()?;
        {
            let s = self.lock();
            if let Some(f) = &s.failed {
                return Err(Error::Failed(f.clone()));
            }
            let nothing = s.pending.iter().all(Vec::is_empty)
                && !open.any()
                && s.buffered == s.manifest.partitions
                && s.windows == s.manifest.windows;
            if nothing {
                return Ok(false);
            }
        }
        self.write_pending(&mut open)?;
        self.commit_open(&mut open)?;
        Ok(true)
    }

    /// Encodes the rows waiting into the open files (a row group is written as each fills),
    /// and cuts the files when they hold `flush_bytes` (a flush). The archive's thread calls
    /// it when enough rows wait, so that a flush does not encode a whole file in one burst.
    pub fn write_some(&self) -> Result<(), Error> {
        let mut open = self.open_files()?;
        self.write_pending(&mut open)?;
        if self.lock().open_bytes >= self.opts.flush_bytes {
            self.commit_open(&mut open)?;
        }
        Ok(())
    }

    /// Takes the rows waiting into the open files, noting the offsets and windows they cover.
    fn write_pending(&self, open: &mut Open) -> Result<(), Error> {
        let batches = {
            let mut s = self.lock();
            if let Some(f) = &s.failed {
                return Err(Error::Failed(f.clone()));
            }
            let mut taken: [Vec<Chunk>; TABLES] = Default::default();
            for (i, t) in taken.iter_mut().enumerate() {
                *t = std::mem::take(&mut s.pending[i]);
                let o = t.clone();
                s.open[i].extend(o);
            }
            s.open_bytes += std::mem::take(&mut s.pending_bytes);
            open.partitions = s.buffered.clone();
            open.windows = s.windows.clone();
            taken
        };
        let props = || file_properties(self.opts.row_group_rows);
        // Logged events become Arrow here, on the archive's thread, not the applier's.
        let written = Table::ALL.into_iter().try_for_each(|t| {
            let bs = batches_of(&batches[slot(t)], &mut open.shape);
            open.write(&self.opts.dir, t, &props, &bs)
        });
        written.map_err(|e| self.failed(open, e))
    }

    /// Closes the open files under their names and commits them to the manifest with what
    /// the rows taken into them cover.
    fn commit_open(&self, open: &mut Open) -> Result<(), Error> {
        let started = Instant::now();
        let mut m = self.lock().manifest.clone();
        let dir = &self.opts.dir;
        let written = (|| {
            m.generation += 1;
            let mut files = Vec::new();
            for t in Table::ALL {
                let rel = format!("{}/{:020}.parquet", t.name(), m.generation);
                let Some((rows, bytes)) = open.close(dir, t, &rel)? else {
                    continue;
                };
                files.push((t, rows, bytes));
                m.files.push(FileEntry {
                    table: t.name().to_string(),
                    path: rel,
                    rows,
                    bytes,
                    created: now_ns(),
                });
            }
            m.partitions = open.partitions.clone();
            m.windows = open.windows.clone();
            m.store(dir)?;
            Ok::<_, Error>(files)
        })();
        let files = written.map_err(|e| self.failed(open, e))?;
        let mut s = self.lock();
        s.manifest = m;
        s.open = Default::default();
        s.open_bytes = 0;
        let st = &self.stats;
        for (t, rows, bytes) in files {
            st.rows[slot(t)].fetch_add(rows, Ordering::Relaxed);
            st.files.fetch_add(1, Ordering::Relaxed);
            st.bytes.fetch_add(bytes, Ordering::Relaxed);
        }
        st.flushes.fetch_add(1, Ordering::Relaxed);
        st.last_flush_micros
            .store(started.elapsed().as_micros() as u64, Ordering::Relaxed);
        st.last_flush_at.store(now_ns(), Ordering::Relaxed);
        self.changed.notify_all();
        Ok(())
    }

    /// Stops the archive after `e`: the rows stay visible in memory; nothing more is written
    /// (a restart replays the log into the archive from the offsets the manifest holds, and
    /// deletes the open files as leftovers).
    /// The open files, to write to. A panic while they were written left them half
    /// written: that fails the archive (as a write error does), never closes them as they are.
    fn open_files(&self) -> Result<MutexGuard<'_, Open>, Error> {
        self.flush_lock.lock().map_err(|poisoned| {
            let mut open = poisoned.into_inner();
            let why = Error::Failed("a write of the open files panicked".into());
            self.failed(&mut open, why)
        })
    }

    fn failed(&self, open: &mut Open, e: Error) -> Error {
        open.abandon();
        let mut s = self.lock();
        s.failed = Some(e.to_string());
        // Never written now, and never shown (queries are refused): their memory is freed.
        s.pending = Default::default();
        s.pending_bytes = 0;
        s.open = Default::default();
        s.open_bytes = 0;
        self.changed.notify_all();
        e
    }

    /// Makes sure every row of `partition`'s records below `offset` is written and in the
    /// manifest (flushing if needed): a checkpoint at `offset` may be saved after this.
    pub fn flush_through(&self, partition: &str, offset: u64) -> Result<(), Error> {
        if self.durable(partition) >= offset {
            return Ok(());
        }
        self.flush()?;
        let durable = self.durable(partition);
        if durable >= offset {
            Ok(())
        } else {
            // The sink did not hand over the rows below `offset`: a bug, never a silent loss.
            Err(Error::Failed(format!(
                "partition {partition}: rows are archived below offset {durable}, a checkpoint at {offset} would skip the rest"
            )))
        }
    }

    /// What a query sees: the manifest's files, the rows waiting, and from `view` (the merged
    /// view, if the service runs) the windows not archived yet and the `unsettled`
    /// counterexamples (provisional, or withdrawn and not settled) as rows not yet flushed.
    /// Call with the assessors locked for reading, so rows and state agree.
    ///
    /// Once the archive has failed there is no snapshot ([`Error::Failed`]): the rows since
    /// the failure are not collected, and an answer without them would be wrong.
    pub fn snapshot(
        &self,
        view: Option<&View<'_>>,
        unsettled: &[Settled],
    ) -> Result<Snapshot, Error> {
        self.take_snapshot(view, unsettled).map(Taken::read)
    }

    /// [`Archive::snapshot`] in two steps: the rows taken here, with the assessors locked; their
    /// events made Arrow by [`Taken::read`] once those locks are released. Events not read yet
    /// may be being read by the archive's thread, at its lower priority (`archive_nice`): a
    /// query waiting for them must not hold the assessors, which the applier waits for.
    pub fn take_snapshot(
        &self,
        view: Option<&View<'_>>,
        unsettled: &[Settled],
    ) -> Result<Taken, Error> {
        let s = self.lock();
        if let Some(f) = &s.failed {
            return Err(Error::Failed(f.clone()));
        }
        let mut snap = snapshot_of(&self.opts.dir, &s.manifest);
        let mut chunks: Vec<(Table, Vec<Chunk>)> = Vec::with_capacity(TABLES);
        for t in Table::ALL {
            let mut cs: Vec<Chunk> = s.open[slot(t)].clone();
            cs.extend(s.pending[slot(t)].iter().cloned());
            chunks.push((t, cs));
        }
        if let Some(view) = view {
            let mut rows = WindowRows::default();
            windows::unarchived(view, &s.windows, &mut rows);
            if rows.len() > 0 {
                let b = rows.finish();
                snap.batches
                    .entry(Table::WindowRevisions)
                    .or_default()
                    .push(b);
            }
        }
        drop(s);
        if !unsettled.is_empty() {
            let mut rows = CounterexampleRows::default();
            for c in unsettled {
                rows.push(c);
            }
            snap.batches
                .entry(Table::Counterexamples)
                .or_default()
                .push(rows.finish());
        }
        Ok(Taken { snap, chunks })
    }

    /// Rows per table in the manifest's files.
    pub fn manifest_rows(&self) -> BTreeMap<Table, u64> {
        let s = self.lock();
        let mut out = BTreeMap::new();
        for f in &s.manifest.files {
            if let Some(t) = Table::parse(&f.table) {
                *out.entry(t).or_default() += f.rows;
            }
        }
        out
    }

    /// Stores `m` (built from the committed manifest under the flush lock) and makes it the
    /// committed one, keeping the partitions and windows it was built with.
    pub(super) fn commit_manifest(&self, m: &mut Manifest) -> Result<(), Error> {
        m.store(&self.opts.dir)?;
        self.lock().manifest = m.clone();
        Ok(())
    }
}

/// How the archive's Parquet files are written: zstd, row groups of `row_group_rows`, and a
/// bloom filter on `scope` per row group, so that a scope's history (`/v1/scopes/{scope}`,
/// `WHERE scope = …`) reads the row groups that hold it, not the archive.
///
/// Encodings are chosen per column, as perf showed the archive's thread spending most of its
/// time on dictionaries that never paid off: columns unique or nearly so per row (provenance,
/// scopes, ids, lines) are plain (then zstd), integers delta encoded (`ts`, `offset`, `seq`
/// rise; `received` repeats per request, `incarnation` is nearly always 0, `epoch` is small:
/// the writer's dictionary hashed each of them, session 16: 2,922 -> 2,806 instructions an
/// event, 5.6 -> 5.7 bytes), but `received` (one value per request) and `incarnation` (nearly
/// always 0) plain, whose runs zstd takes for less than delta packing costs (session 21: −30
/// and −29 instructions an event), the other strings (kinds, routes, holders: few values)
/// dictionary encoded but `partition`, one value a file, plain (−100, and no slower a scope's
/// history within this VM's noise). Those
/// dictionaries cost ~10% of encoding `events` but are what keeps scans fast: with routes and
/// holders plain, a count by route over 10M events took 0.45–0.64 s instead of 0.37–0.38 and
/// a hot scope's 1,000 events 2.0–2.3 s instead of 0.82–1.1 (`scope_history`, one session).
/// Even `kind`, `outcome` and `partition` plain (−8% of the encoder's instructions) made that
/// read 1.1–1.2 s against 0.64–0.85 (session 15), over its 1 s target. Statistics are per
/// row group and only on the columns of [`STATS`], not per page: page statistics cost a
/// comparison per value of every column and prune nothing here.
pub fn file_properties(row_group_rows: usize) -> WriterProperties {
    let scope = ColumnPath::from("scope");
    let mut b = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .set_max_row_group_row_count(Some(row_group_rows))
        .set_statistics_enabled(EnabledStatistics::None)
        .set_column_bloom_filter_enabled(scope.clone(), true)
        .set_column_bloom_filter_max_ndv(scope, row_group_rows as u64);
    let plain = [
        "source",
        "scope",
        "op_id",
        "id",
        "stale_source",
        "superseding_source",
        "explanation",
        "line",
        "partition",
    ];
    for c in plain {
        b = b.set_column_dictionary_enabled(ColumnPath::from(c), false);
    }
    let integers = [
        (
            &["ts", "offset", "seq", "epoch", "order", "valid_for"][..],
            Encoding::DELTA_BINARY_PACKED,
        ),
        (&["received", "incarnation"][..], Encoding::PLAIN),
    ];
    for (columns, encoding) in integers {
        for &c in columns {
            b = b
                .set_column_dictionary_enabled(ColumnPath::from(c), false)
                .set_column_encoding(ColumnPath::from(c), encoding);
        }
    }
    for c in STATS {
        b = b.set_column_statistics_enabled(ColumnPath::from(c), EnabledStatistics::Chunk);
    }
    b.build()
}

/// The columns with statistics (per row group): times and offsets, by which queries and
/// replays select row groups, and `scope`, whose ids often rise with time (orders), so that
/// a row group's range leaves it out of a scope's history before its bloom filter is read.
/// Other strings have none: a chunk's min and max cost two comparisons a value (perf: memcmp
/// was 15% of encoding `events`) and prune nothing, kinds, routes and holders being in every
/// row group.
const STATS: [&str; 11] = [
    "scope",
    "ts",
    "received",
    "offset",
    "epoch",
    "seq",
    "stale_ts",
    "superseding_ts",
    "found_at",
    "start",
    "end",
];

/// Why [`Archive::wait_due`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Due {
    /// Enough rows wait to be encoded into the open files ([`Archive::write_some`]).
    Size,
    /// `archive_flush_interval` passed.
    Interval,
    /// [`Archive::close`]: the last flush.
    Closing,
}

/// Sizes of the archive, for metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sizes {
    /// Files in the manifest.
    pub files: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Rows waiting in memory.
    pub pending_rows: u64,
    /// Their bytes in memory (a log of events counted with the Arrow batch it becomes).
    pub pending_bytes: u64,
}

/// Wall time now, ns since the Unix epoch.
pub(super) fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}
