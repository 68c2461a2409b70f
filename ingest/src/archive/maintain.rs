//! The archive's upkeep: retention, compaction of small files, deletion of files no longer
//! listed once their grace has passed. Each step replaces the manifest as a flush does.

use super::manifest::{FileEntry, Obsolete};
use super::rows::Table;
use super::writer::{Archive, Error, io, now_ns, pq};
use arrow_array::RecordBatch;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use std::collections::BTreeSet;
use std::sync::atomic::Ordering;

/// Small files merged by one compaction at least and at most.
const COMPACT_MIN_FILES: usize = 8;
const COMPACT_MAX_FILES: usize = 32;

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
            done.compacted += self.compact(t, now)?;
        }
        let _one = self.flush_lock.lock().unwrap_or_else(|p| p.into_inner());
        let mut m = self.lock().manifest.clone();
        if m.delete_obsolete(&self.opts.dir, now) {
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

    /// Merges the oldest run of adjacent small files of table `t` into one, in its place:
    /// written without holding up flushes, then committed if they are all still listed.
    /// Returns how many were merged.
    ///
    /// Only adjacent files: the table's files are listed in the order their rows were
    /// archived (each partition's offsets rising), which readers rely on (`check` over an
    /// archive merges its malformed rows by offset); merging small files from both sides of
    /// a large one would put the later ones before it.
    fn compact(&self, t: Table, now: i64) -> Result<usize, Error> {
        let (small, generation) = {
            let s = self.lock();
            let listed: Vec<&FileEntry> = s.manifest.files_of(t.name()).collect();
            let small = oldest_run(&listed, |f| f.bytes < self.opts.compact_below);
            (small, s.manifest.generation)
        };
        if small.len() < COMPACT_MIN_FILES {
            return Ok(0);
        }
        // Never a flush's name (`<generation>.parquet`), nor an earlier compaction's: each
        // commit raises the generation.
        let rel = format!("{}/{generation:020}-compacted.parquet", t.name());
        let dir = self.opts.dir.clone();
        let readers = small.iter().map(move |f| {
            let path = dir.join(&f.path);
            let file = std::fs::File::open(&path).map_err(io(&path))?;
            let r = ParquetRecordBatchReaderBuilder::try_new(file)
                .and_then(|b| b.with_batch_size(8192).build())
                .map_err(pq(&path))?;
            Ok::<_, Error>(r.map(move |b| {
                b.map_err(|e| Error::Parquet {
                    path: path.clone(),
                    source: e.into(),
                })
            }))
        });
        let batches = readers.flat_map(|r| match r {
            Ok(r) => Box::new(r) as Box<dyn Iterator<Item = Result<RecordBatch, Error>>>,
            Err(e) => Box::new(std::iter::once(Err(e))),
        });
        let (rows, bytes) = self.write(t, &rel, batches)?;
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

/// The first run of at least [`COMPACT_MIN_FILES`] adjacent files that are `small` (at most
/// [`COMPACT_MAX_FILES`] of it), or none.
fn oldest_run(files: &[&FileEntry], small: impl Fn(&FileEntry) -> bool) -> Vec<FileEntry> {
    let mut run: Vec<FileEntry> = Vec::new();
    for f in files {
        if small(f) {
            run.push((*f).clone());
            if run.len() == COMPACT_MAX_FILES {
                break;
            }
        } else if run.len() >= COMPACT_MIN_FILES {
            break;
        } else {
            run.clear();
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
