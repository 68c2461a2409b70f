//! The archive's upkeep: retention, compaction of small files, deletion of files no longer
//! listed once their grace has passed. Each step replaces the manifest as a flush does.

use super::manifest::{FileEntry, Obsolete};
use super::open::{publish, temporary};
use super::rows::Table;
use super::writer::{Archive, Error, file_properties, io, now_ns, pq};
use arrow_array::RecordBatch;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::arrow_writer::{ArrowRowGroupWriterFactory, compute_leaves};
use parquet::arrow::{ArrowSchemaConverter, add_encoded_arrow_schema_to_metadata};
use parquet::bloom_filter::Sbbf;
use parquet::column::writer::ColumnCloseResult;
use parquet::file::metadata::{PageIndexPolicy, ParquetMetaData, ParquetMetaDataReader};
use parquet::file::writer::SerializedFileWriter;
use std::collections::{BTreeSet, VecDeque};
use std::fs::File;
use std::io::BufWriter;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// Small files merged by one compaction at least and at most.
const COMPACT_MIN_FILES: usize = 8;
const COMPACT_MAX_FILES: usize = 32;

/// Files of at least `compact_below` (merged ones, or cut by size under a high load) are
/// merged again, eight or more at a time, into files of up to this many times
/// `compact_below`: under a steady load the file count (and the manifest, rewritten at each
/// flush) grows about this much slower than the events, rather than with every merge of small
/// files. Their row groups, full, are copied as they are.
const COMPACT_TIER: u64 = 16;

/// Compactions of one table in one [`Archive::maintain`] at most: under a steady high load
/// files are cut by size many times an interval, more than one merge of
/// [`COMPACT_MAX_FILES`] takes in.
const COMPACT_MAX_PASSES: usize = 8;

impl Archive {
    /// Retention (files older than `archive_retention`, then the oldest beyond
    /// `archive_max_bytes`), compaction of small files, and deletion of files no longer listed
    /// past their grace; each step commits the manifest. Returns what it did.
    pub fn maintain(&self) -> Result<Maintained, Error> {
        let now = now_ns();
        let mut done = Maintained {
            expired: self.expire(now)?,
            compacted: 0,
        };
        for t in Table::ALL {
            for pass in 0..COMPACT_MAX_PASSES {
                // One merge a table each time; more only while the rows in memory are far from
                // making ingest wait (the archive's thread writes none meanwhile).
                if pass > 0 && self.behind() {
                    break;
                }
                match self.compact(t, now_ns())? {
                    0 => break,
                    n => done.compacted += n,
                }
            }
        }
        let _one = self.flush_lock.lock().unwrap_or_else(|p| p.into_inner());
        let mut m = self.lock().manifest.clone();
        if m.delete_obsolete(&self.opts.dir, now_ns()) {
            self.commit_manifest(&mut m)?;
        }
        Ok(done)
    }

    fn grace_until(&self, now: i64) -> i64 {
        now.saturating_add(self.opts.delete_grace.as_nanos() as i64)
    }

    /// Drops the files past retention from the manifest; returns how many.
    fn expire(&self, now: i64) -> Result<usize, Error> {
        let _one = self.flush_lock.lock().unwrap_or_else(|p| p.into_inner());
        let mut m = self.lock().manifest.clone();
        let mut drop_paths: BTreeSet<String> = BTreeSet::new();
        if let Some(r) = self.opts.retention {
            let cutoff = now.saturating_sub(r.as_nanos() as i64);
            drop_paths.extend(
                m.files
                    .iter()
                    .filter(|f| f.created < cutoff)
                    .map(|f| f.path.clone()),
            );
        }
        if let Some(max) = self.opts.max_bytes {
            let mut total: u64 = m
                .files
                .iter()
                .filter(|f| !drop_paths.contains(&f.path))
                .map(|f| f.bytes)
                .sum();
            let mut by_age: Vec<&FileEntry> = m.files.iter().collect();
            by_age.sort_by_key(|f| f.created);
            for f in by_age {
                if total <= max {
                    break;
                }
                if drop_paths.insert(f.path.clone()) {
                    total -= f.bytes;
                }
            }
        }
        if drop_paths.is_empty() {
            return Ok(0);
        }
        m.files.retain(|f| !drop_paths.contains(&f.path));
        let until = self.grace_until(now);
        m.obsolete.extend(drop_paths.iter().map(|p| Obsolete {
            path: p.clone(),
            delete_after: until,
        }));
        self.commit_manifest(&mut m)?;
        self.stats
            .expired
            .fetch_add(drop_paths.len() as u64, Ordering::Relaxed);
        Ok(drop_paths.len())
    }

    /// Merges the oldest run of adjacent small files of table `t` into one, in its place (or,
    /// with no such run, of files of [`COMPACT_TIER`] times `compact_below` at most together):
    /// written without holding up flushes, then committed if they are all still listed.
    /// Returns how many were merged.
    ///
    /// Only adjacent files: the table's files are listed in the order their rows were
    /// archived (each partition's offsets rising), which readers rely on (`check` over an
    /// archive merges its malformed rows by offset); merging small files from both sides of
    /// a large one would put the later ones before it.
    fn compact(&self, t: Table, now: i64) -> Result<usize, Error> {
        let below = self.opts.compact_below;
        let cap = below.saturating_mul(COMPACT_TIER);
        // Large merges (up to `cap` read and written, fsync'd) only while ingest is far from
        // waiting on the archive's thread, which writes no rows meanwhile.
        let large = !self.behind();
        let (small, generation) = {
            let s = self.lock();
            let listed: Vec<&FileEntry> = s.manifest.files_of(t.name()).collect();
            let mut run = oldest_run(&listed, |f| f.bytes < below, u64::MAX);
            if run.is_empty() && large {
                run = oldest_run(&listed, |f| f.bytes >= below && f.bytes < cap, cap);
            }
            (run, s.manifest.generation)
        };
        if small.len() < COMPACT_MIN_FILES {
            return Ok(0);
        }
        // Never a flush's name (`<generation>.parquet`), nor an earlier compaction's: each
        // commit raises the generation.
        let rel = format!("{}/{generation:020}-compacted.parquet", t.name());
        let written = self
            .inputs(&small)
            .and_then(|inputs| self.merge(t, &rel, &inputs));
        let (rows, bytes) = written.inspect_err(|_| {
            // Not left behind until a restart, one more at each interval the merge fails.
            let _ = std::fs::remove_file(temporary(&self.opts.dir.join(&rel)));
        })?;
        let _one = self.flush_lock.lock().unwrap_or_else(|p| p.into_inner());
        let mut m = self.lock().manifest.clone();
        if !small.iter().all(|f| m.files.contains(f)) {
            // Retention took some meanwhile: this merge is not used.
            let _ = std::fs::remove_file(self.opts.dir.join(&rel));
            return Ok(0);
        }
        let merged: BTreeSet<&str> = small.iter().map(|f| f.path.as_str()).collect();
        let at = m
            .files
            .iter()
            .position(|f| merged.contains(f.path.as_str()))
            .expect("the small files are listed");
        m.generation += 1;
        m.files.insert(
            at,
            FileEntry {
                table: t.name().to_string(),
                path: rel,
                rows,
                bytes,
                created: small.iter().map(|f| f.created).max().unwrap_or(now),
            },
        );
        m.files.retain(|f| !merged.contains(f.path.as_str()));
        let until = self.grace_until(now);
        m.obsolete.extend(small.iter().map(|f| Obsolete {
            path: f.path.clone(),
            delete_after: until,
        }));
        self.commit_manifest(&mut m)?;
        self.stats.compactions.fetch_add(1, Ordering::Relaxed);
        Ok(small.len())
    }
}

/// A file to merge, opened, with its footer.
struct Input {
    path: PathBuf,
    file: File,
    meta: ParquetMetaData,
}

impl Archive {
    /// The files of `small`, opened, with their footers.
    fn inputs(&self, small: &[FileEntry]) -> Result<Vec<Input>, Error> {
        small
            .iter()
            .map(|f| {
                let path = self.opts.dir.join(&f.path);
                let file = File::open(&path).map_err(io(&path))?;
                let meta = ParquetMetaDataReader::new()
                    .with_page_index_policy(PageIndexPolicy::Optional)
                    .parse_and_finish(&file)
                    .map_err(pq(&path))?;
                Ok(Input { path, file, meta })
            })
            .collect()
    }

    /// Writes the rows of `inputs`, in order, into one file of table `t` at `rel` (a temporary
    /// name, fsync, rename, fsync of the folder), and returns rows and bytes. The row groups of
    /// a file are copied as they are encoded (pages, bloom filters and page indexes: no
    /// decoding, no encoding) if they hold a quarter of `row_group_rows` on average, it has an
    /// offset index and the schema (Parquet's, and the Arrow schema it carries) the table's
    /// files are written with now; the rows of the others are read and encoded with the
    /// table's schema into row groups of `row_group_rows`.
    ///
    /// Under a high load files are cut by size (tens of thousands of rows each) well before
    /// they reach [`ArchiveOptions::compact_below`](super::ArchiveOptions): decoding and
    /// encoding all of them again doubled the archive's CPU per event, and held up its thread
    /// long enough for ingest to wait. Files cut by the interval under a light load have small
    /// row groups, which are worth encoding again.
    fn merge(&self, t: Table, rel: &str, inputs: &[Input]) -> Result<(u64, u64), Error> {
        let path = self.opts.dir.join(rel);
        let tmp = temporary(&path);
        let arrow = t.schema();
        let schema = ArrowSchemaConverter::new()
            .convert(&arrow)
            .map_err(pq(&tmp))?;
        let mut props = file_properties(self.opts.row_group_rows);
        add_encoded_arrow_schema_to_metadata(&arrow, &mut props);
        let min_rows = (self.opts.row_group_rows / 4).max(1) as i64;
        let copy = |m: &ParquetMetaData| {
            let (fm, groups) = (m.file_metadata(), m.num_row_groups() as i64);
            // Copied chunks keep their offset index; without one (a file another writer made)
            // the merged file would have it for some chunks only, which readers refuse.
            groups > 0
                && fm.num_rows() >= min_rows * groups
                && m.offset_index().is_some()
                && fm.schema() == schema.root_schema()
                && fm.key_value_metadata() == props.key_value_metadata()
        };
        let copies: Vec<bool> = inputs.iter().map(|i| copy(&i.meta)).collect();
        let out = File::create(&tmp).map_err(io(&tmp))?;
        let out = BufWriter::with_capacity(1 << 20, out);
        let mut w = SerializedFileWriter::new(out, schema.root_schema_ptr(), Arc::new(props))
            .map_err(pq(&tmp))?;
        let factory = ArrowRowGroupWriterFactory::new(&w, arrow.clone());
        let group_rows = self.opts.row_group_rows.max(1);
        let (mut rows, mut waiting) = (0u64, Rows::default());
        for (Input { path, file, meta }, copy) in inputs.iter().zip(copies) {
            if !copy {
                let read = file.try_clone().map_err(io(path))?;
                let batches = ParquetRecordBatchReaderBuilder::try_new(read)
                    .and_then(|b| b.with_batch_size(8192).build())
                    .map_err(pq(path))?;
                for b in batches {
                    waiting.push(b.map_err(|e| pq(path)(e.into()))?);
                    while waiting.rows >= group_rows {
                        rows += encode_group(&mut w, &factory, &arrow, &waiting.take(group_rows))
                            .map_err(pq(&tmp))?;
                    }
                }
                continue;
            }
            // Rows encoded again before these are written first: the order is kept.
            let before = waiting.take(usize::MAX);
            rows += encode_group(&mut w, &factory, &arrow, &before).map_err(pq(&tmp))?;
            let (columns, offsets) = (meta.column_index(), meta.offset_index());
            for (g, group) in meta.row_groups().iter().enumerate() {
                let mut to = w.next_row_group().map_err(pq(&tmp))?;
                for (c, column) in group.columns().iter().enumerate() {
                    let bloom_filter =
                        Sbbf::read_from_column_chunk(column, file).map_err(pq(path))?;
                    let chunk = ColumnCloseResult {
                        bytes_written: column.compressed_size() as u64,
                        rows_written: group.num_rows() as u64,
                        metadata: column.clone(),
                        bloom_filter,
                        column_index: columns.and_then(|x| x.get(g)?.get(c).cloned()),
                        offset_index: offsets.and_then(|x| x.get(g)?.get(c).cloned()),
                    };
                    to.append_column(file, chunk).map_err(pq(&tmp))?;
                }
                to.close().map_err(pq(&tmp))?;
                rows += group.num_rows() as u64;
            }
        }
        let last = waiting.take(usize::MAX);
        rows += encode_group(&mut w, &factory, &arrow, &last).map_err(pq(&tmp))?;
        let written = w.into_inner().map_err(pq(&tmp))?;
        Ok((rows, publish(written, &tmp, &path)?))
    }
}

/// Rows read, waiting to be encoded into a row group.
#[derive(Default)]
struct Rows {
    batches: VecDeque<RecordBatch>,
    rows: usize,
}

impl Rows {
    fn push(&mut self, b: RecordBatch) {
        self.rows += b.num_rows();
        self.batches.push_back(b);
    }

    /// The first `n` rows (all, if fewer wait).
    fn take(&mut self, mut n: usize) -> Vec<RecordBatch> {
        let mut out = Vec::new();
        while n > 0
            && let Some(b) = self.batches.pop_front()
        {
            let k = b.num_rows().min(n);
            if k < b.num_rows() {
                self.batches.push_front(b.slice(k, b.num_rows() - k));
            }
            out.push(b.slice(0, k));
            (n, self.rows) = (n - k, self.rows - k);
        }
        out
    }
}

/// Encodes `batches` as one row group of the file `w` writes (nothing if they hold no row);
/// returns its rows.
fn encode_group(
    w: &mut SerializedFileWriter<BufWriter<File>>,
    factory: &ArrowRowGroupWriterFactory,
    schema: &arrow_schema::Schema,
    batches: &[RecordBatch],
) -> parquet::errors::Result<u64> {
    let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
    if rows == 0 {
        return Ok(0);
    }
    let mut writers = factory.create_column_writers(w.flushed_row_groups().len())?;
    for b in batches {
        let mut leaves = writers.iter_mut();
        for (field, column) in schema.fields().iter().zip(b.columns()) {
            for leaf in compute_leaves(field, column)? {
                let writer = leaves.next().expect("a writer per leaf column");
                writer.write(&leaf)?;
            }
        }
    }
    let mut group = w.next_row_group()?;
    for writer in writers {
        writer.close()?.append_to_row_group(&mut group)?;
    }
    group.close()?;
    Ok(rows as u64)
}

/// The first run of at least [`COMPACT_MIN_FILES`] adjacent files that are `small` (at most
/// [`COMPACT_MAX_FILES`] of it, of `max_bytes` together), or none.
fn oldest_run(
    files: &[&FileEntry],
    small: impl Fn(&FileEntry) -> bool,
    max_bytes: u64,
) -> Vec<FileEntry> {
    let mut run: Vec<FileEntry> = Vec::new();
    let mut bytes = 0u64;
    for f in files {
        if !small(f) || bytes.saturating_add(f.bytes) > max_bytes {
            if run.len() >= COMPACT_MIN_FILES {
                break;
            }
            // Not in a run, or a run too short that it would make too large: a new one
            // starts at this file if it can.
            run.clear();
            bytes = 0;
            if !small(f) || f.bytes > max_bytes {
                continue;
            }
        }
        run.push((*f).clone());
        bytes += f.bytes;
        if run.len() == COMPACT_MAX_FILES {
            break;
        }
    }
    if run.len() < COMPACT_MIN_FILES {
        run.clear();
    }
    run
}

/// What [`Archive::maintain`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Maintained {
    /// Files dropped by retention.
    pub expired: usize,
    /// Small files compacted.
    pub compacted: usize,
}
