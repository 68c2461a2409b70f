//! The archive's manifest: the one file that says what the archive holds (SPEC §9).
//!
//! `archive/MANIFEST.json` lists every Parquet file that belongs to the archive, each
//! partition's next offset whose rows are all archived, and how far the windows of each
//! property are archived. It is replaced atomically (written under a temporary name, fsynced,
//! renamed, the folder fsynced), after the files it lists are durable under their final
//! names, so after any crash it lists exactly what was committed: a file it does not list is
//! a leftover of an interrupted flush or compaction, and is deleted on open. Files it stopped
//! listing (compacted or past retention) are listed as obsolete until a grace period passes,
//! so that a query that took a snapshot before can still read them.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

/// The manifest's file name in the archive folder.
pub const MANIFEST: &str = "MANIFEST.json";
const FORMAT: u32 = 1;

/// One Parquet file of the archive.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEntry {
    /// Its table (`events`, `malformed`, `counterexamples`, `window_revisions`).
    pub table: String,
    /// Its path relative to the archive folder (`events/<generation>.parquet`).
    pub path: String,
    /// Rows.
    pub rows: u64,
    /// Bytes on disk.
    pub bytes: u64,
    /// Wall time it was written (ns); a compacted file has the newest of its parts'.
    pub created: i64,
}

/// How far one property's windows are archived: revision 0 of every window `lo..=hi`
/// (indices), and the revisions written since of those late evidence or a late attestation
/// revised. A window's revision is the count of its late-evidence revisions (`revised`) plus
/// that of its premise revisions (`premise_revisions`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WindowsArchived {
    /// First window index archived.
    pub lo: i64,
    /// Last window index archived (below `lo`: none yet).
    pub hi: i64,
    /// Per window late evidence revised: its late-evidence revisions written, and the verdict
    /// of its last row.
    pub revised: BTreeMap<i64, (u64, String)>,
    /// Per required premise of the property, in contract order, the windows of `lo..=hi` on
    /// which it raised `premise_failed` and `premise_unattested` (inclusive index spans) as
    /// last archived: a late attestation's revisions are the windows where it differs now.
    #[serde(default)]
    pub premises: Vec<PremisePlacement>,
    /// Premise revisions written, as runs of windows: (first, last, count), sorted, disjoint.
    #[serde(default)]
    pub premise_revisions: Vec<(i64, i64, u64)>,
}

/// Where one premise raised a reason on the archived windows (SPEC §10).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PremisePlacement {
    /// Windows raising `premise_failed`.
    pub failed: Vec<(i64, i64)>,
    /// Windows raising `premise_unattested`.
    pub unattested: Vec<(i64, i64)>,
}

impl WindowsArchived {
    /// Nothing archived yet.
    pub fn none() -> WindowsArchived {
        WindowsArchived {
            lo: 0,
            hi: -1,
            revised: BTreeMap::new(),
            premises: Vec::new(),
            premise_revisions: Vec::new(),
        }
    }

    /// Whether window `k` is archived.
    pub fn holds(&self, k: i64) -> bool {
        self.lo <= k && k <= self.hi
    }

    /// Whether nothing is archived.
    pub fn is_empty(&self) -> bool {
        self.hi < self.lo
    }

    /// The premise revisions written of window `k`.
    pub fn premise_revisions_of(&self, k: i64) -> u64 {
        let runs = &self.premise_revisions;
        let i = runs.partition_point(|r| r.0 <= k);
        i.checked_sub(1)
            .map(|i| runs[i])
            .filter(|r| r.1 >= k)
            .map_or(0, |r| r.2)
    }

    /// Counts one more premise revision of every window `a..=b`.
    pub fn add_premise_revision(&mut self, a: i64, b: i64) {
        let mut out: Vec<(i64, i64, u64)> = Vec::with_capacity(self.premise_revisions.len() + 3);
        let mut next = a;
        for &(s, e, n) in &self.premise_revisions {
            if e < a || s > b {
                out.push((s, e, n));
                continue;
            }
            if s < a {
                out.push((s, a - 1, n));
            }
            if s > next {
                out.push((next, s - 1, 1));
            }
            let (from, to) = (s.max(a), e.min(b));
            out.push((from, to, n + 1));
            if e > b {
                out.push((b + 1, e, n));
            }
            next = to + 1;
        }
        if next <= b {
            out.push((next, b, 1));
        }
        out.sort_unstable();
        // Neighbours with the same count are one run.
        let mut runs: Vec<(i64, i64, u64)> = Vec::with_capacity(out.len());
        for r in out {
            match runs.last_mut() {
                Some(l) if l.2 == r.2 && l.1 + 1 == r.0 => l.1 = r.1,
                _ => runs.push(r),
            }
        }
        self.premise_revisions = runs;
    }
}

/// A file no longer listed, deleted once its grace period has passed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Obsolete {
    /// Its path relative to the archive folder.
    pub path: String,
    /// Wall time (ns) after which it is deleted.
    pub delete_after: i64,
}

/// The manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// Format version.
    pub format: u32,
    /// Raised by every commit; new files are named after it, so names never repeat.
    pub generation: u64,
    /// The files of the archive, oldest first.
    pub files: Vec<FileEntry>,
    /// Per partition (`wal`, `<topic>/<partition>`), the offset below which every row of its
    /// records is archived.
    pub partitions: BTreeMap<String, u64>,
    /// Per property, how far its windows are archived.
    pub windows: BTreeMap<String, WindowsArchived>,
    /// Files no longer listed, kept until their grace period passes.
    pub obsolete: Vec<Obsolete>,
    /// The id of the data directory whose partitions' offsets these are (its `ID` file,
    /// [`super::data_dir_id`]); absent in manifests written before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_dir: Option<String>,
}

impl Default for Manifest {
    fn default() -> Manifest {
        Manifest {
            format: FORMAT,
            generation: 0,
            files: Vec::new(),
            partitions: BTreeMap::new(),
            windows: BTreeMap::new(),
            obsolete: Vec::new(),
            data_dir: None,
        }
    }
}

/// Errors reading or writing the manifest.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An I/O error on a path.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The manifest does not parse.
    #[error(
        "{path}: not an archive manifest ({reason}); move the archive folder away to start a new archive"
    )]
    Bad {
        /// The path.
        path: String,
        /// Why.
        reason: String,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        path: path.display().to_string(),
        source,
    }
}

impl Manifest {
    /// Deletes the obsolete files (in the archive folder `dir`) whose grace passed; returns
    /// whether any was.
    pub fn delete_obsolete(&mut self, dir: &Path, now: i64) -> bool {
        let before = self.obsolete.len();
        self.obsolete.retain(|o| {
            if o.delete_after > now {
                return true;
            }
            match std::fs::remove_file(dir.join(&o.path)) {
                Ok(()) => false,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
                Err(_) => true,
            }
        });
        self.obsolete.len() != before
    }

    /// Reads the manifest of the archive in `dir` (empty when there is none).
    pub fn load(dir: &Path) -> Result<Manifest, Error> {
        Ok(Manifest::load_if_any(dir)?.unwrap_or_default())
    }

    /// [`Manifest::load`], `None` when the archive in `dir` has no manifest.
    pub fn load_if_any(dir: &Path) -> Result<Option<Manifest>, Error> {
        let path = dir.join(MANIFEST);
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io(&path)(e)),
        };
        let m: Manifest = serde_json::from_slice(&bytes).map_err(|e| Error::Bad {
            path: path.display().to_string(),
            reason: e.to_string(),
        })?;
        if m.format != FORMAT {
            return Err(Error::Bad {
                path: path.display().to_string(),
                reason: format!("format {} (this fencewatch reads {FORMAT})", m.format),
            });
        }
        Ok(Some(m))
    }

    /// Replaces the manifest of the archive in `dir` atomically and durably.
    pub fn store(&self, dir: &Path) -> Result<(), Error> {
        let bytes = serde_json::to_vec(self).expect("a manifest serializes");
        replace_durably(dir, MANIFEST, &bytes)
    }

    /// The files of `table`.
    pub fn files_of<'m>(&'m self, table: &'m str) -> impl Iterator<Item = &'m FileEntry> + 'm {
        self.files.iter().filter(move |f| f.table == table)
    }
}

/// Replaces file `name` in `dir` with `bytes` atomically and durably: written under a
/// temporary name, fsynced, renamed, the folder fsynced.
pub fn replace_durably(dir: &Path, name: &str, bytes: &[u8]) -> Result<(), Error> {
    let path = dir.join(name);
    let tmp = dir.join(format!("{name}.tmp"));
    let mut f = std::fs::File::create(&tmp).map_err(io(&tmp))?;
    f.write_all(bytes).map_err(io(&tmp))?;
    f.sync_all().map_err(io(&tmp))?;
    drop(f);
    std::fs::rename(&tmp, &path).map_err(io(&path))?;
    sync_dir(dir)
}

/// Fsyncs a folder, so that a rename or a new file in it is durable.
pub fn sync_dir(dir: &Path) -> Result<(), Error> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io(dir))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_an_absent_manifest_is_empty() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(Manifest::load(dir.path()).unwrap(), Manifest::default());
        let mut m = Manifest {
            generation: 3,
            ..Manifest::default()
        };
        m.partitions.insert("wal".into(), 42);
        m.windows.insert("p".into(), WindowsArchived::none());
        m.files.push(FileEntry {
            table: "events".into(),
            path: "events/3.parquet".into(),
            rows: 1,
            bytes: 10,
            created: 5,
        });
        m.store(dir.path()).unwrap();
        assert_eq!(Manifest::load(dir.path()).unwrap(), m);
        assert!(!dir.path().join("MANIFEST.json.tmp").exists());
        std::fs::write(dir.path().join(MANIFEST), b"{").unwrap();
        let e = Manifest::load(dir.path()).unwrap_err().to_string();
        assert!(e.contains("not an archive manifest"), "{e}");
    }
}
