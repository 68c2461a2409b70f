//! The files a flush is filling: one per table, under a temporary name, rows encoded into
//! row groups as they are taken from memory rather than in one burst when the file is cut.
//!
//! An open file is not in the manifest: a crash leaves it as a leftover that
//! [`super::Archive::open`] deletes, and the log is replayed past the offsets the manifest
//! holds, so its rows are archived again, once.

use super::error::{Error, io, pq};
use super::manifest::{WindowsArchived, sync_dir};
use super::rows::Table;
use arrow_array::RecordBatch;
use parquet::arrow::ArrowWriter;
use parquet::file::properties::WriterProperties;
use std::collections::BTreeMap;
use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};

/// The temporary name of a table's open file, in its folder.
const OPEN_NAME: &str = ".open.parquet.tmp";

/// One open file.
struct OpenFile {
    tmp: PathBuf,
    writer: ArrowWriter<BufWriter<File>>,
    rows: u64,
}

/// The open files, and what the rows taken into them cover.
#[derive(Default)]
pub(super) struct Open {
    files: [Option<OpenFile>; Table::ALL.len()],
    /// Per partition, the offset below which every row was taken (into these files or
    /// earlier ones) when rows were last taken.
    pub(super) partitions: BTreeMap<String, u64>,
    /// How far windows were taken then.
    pub(super) windows: BTreeMap<String, WindowsArchived>,
    /// The shape of the last events read into a log, to size the next.
    pub(super) shape: super::log::LogShape,
}

impl std::fmt::Debug for Open {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let rows: Vec<u64> = self
            .files
            .iter()
            .map(|o| o.as_ref().map_or(0, |f| f.rows))
            .collect();
        f.debug_struct("Open").field("rows", &rows).finish()
    }
}

impl Open {
    /// Whether a file is open.
    pub(super) fn any(&self) -> bool {
        self.files.iter().any(Option::is_some)
    }

    /// Encodes `batches` into table `t`'s open file under `dir`, opening it (with `props`)
    /// if need be.
    pub(super) fn write(
        &mut self,
        dir: &Path,
        t: Table,
        props: &dyn Fn() -> WriterProperties,
        batches: &[RecordBatch],
    ) -> Result<(), Error> {
        for b in batches.iter().filter(|b| b.num_rows() > 0) {
            let f = match &mut self.files[t as usize] {
                Some(f) => f,
                slot @ None => {
                    let tmp = dir.join(t.name()).join(OPEN_NAME);
                    let file = File::create(&tmp).map_err(io(&tmp))?;
                    let out = BufWriter::with_capacity(1 << 20, file);
                    let writer =
                        ArrowWriter::try_new(out, t.schema(), Some(props())).map_err(pq(&tmp))?;
                    slot.insert(OpenFile {
                        tmp,
                        writer,
                        rows: 0,
                    })
                }
            };
            f.writer.write(b).map_err(pq(&f.tmp))?;
            f.rows += b.num_rows() as u64;
        }
        Ok(())
    }

    /// Closes table `t`'s open file (its last row group and footer), fsyncs it and renames it
    /// to `rel` under `dir` (then fsyncs the folder). Returns rows and bytes, or `None` when
    /// no file is open.
    pub(super) fn close(
        &mut self,
        dir: &Path,
        t: Table,
        rel: &str,
    ) -> Result<Option<(u64, u64)>, Error> {
        let Some(f) = self.files[t as usize].take() else {
            return Ok(None);
        };
        // The footer, then the file under its name.
        let written = f.writer.into_inner().map_err(pq(&f.tmp))?;
        let bytes = publish(written, &f.tmp, &dir.join(rel))?;
        Ok(Some((f.rows, bytes)))
    }

    /// Forgets the open files (after a failure): their temporary files are leftovers.
    pub(super) fn abandon(&mut self) {
        self.files = Default::default();
    }
}

/// Flushes `w`, the whole file written at `tmp`, fsyncs it, renames it to `path` and fsyncs
/// its folder. Returns its bytes.
pub(super) fn publish(w: BufWriter<File>, tmp: &Path, path: &Path) -> Result<u64, Error> {
    let file = w.into_inner().map_err(|e| io(tmp)(e.into_error()))?;
    file.sync_all().map_err(io(tmp))?;
    let bytes = file.metadata().map_err(io(tmp))?.len();
    drop(file);
    std::fs::rename(tmp, path).map_err(io(path))?;
    sync_dir(path.parent().expect("a table folder"))?;
    Ok(bytes)
}

/// The temporary name a file at `path` is written under: `.<name>.tmp` in its folder, a
/// leftover that [`Archive::open`](super::Archive::open) deletes if a crash interrupts the write.
pub(super) fn temporary(path: &Path) -> PathBuf {
    let name = path.file_name().expect("a name").to_string_lossy();
    path.with_file_name(format!(".{name}.tmp"))
}
