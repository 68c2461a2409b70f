//! Whose archive it is: the data directory's id ([`data_dir_id`]) that the manifest names,
//! and the checks made on open ([`load_checked`]; the module doc of [`crate::archive`], "The
//! right archive").

use super::error::{Error, io};
use super::manifest::{Manifest, replace_durably};
use super::rows::Table;
use std::path::Path;

/// The file in a data directory that holds its id.
pub const DATA_DIR_ID: &str = "ID";

/// The id of the data directory `data_dir` whose archive is `archive_dir`: its
/// [`DATA_DIR_ID`] file's, or, when it has none, the one the archive's manifest names (the
/// file was lost: the archive's offsets are still checked against the log and checkpoints on
/// start), or a new random one. Nothing is written: [`keep_data_dir_id`] writes the file once
/// the archive was opened under the id ([`Error::OtherDataDir`] otherwise).
pub fn data_dir_id(data_dir: &Path, archive_dir: &Path) -> Result<String, Error> {
    use std::hash::{BuildHasher, Hasher};
    let path = data_dir.join(DATA_DIR_ID);
    match std::fs::read_to_string(&path) {
        Ok(s) if !s.trim().is_empty() => return Ok(s.trim().to_string()),
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io(&path)(e)),
    }
    if let Some(id) = Manifest::load_if_any(archive_dir)?.and_then(|m| m.data_dir) {
        return Ok(id);
    }
    // 128 bits from the standard library's per-process random hasher keys, the time and
    // the process id.
    let random = || std::collections::hash_map::RandomState::new().build_hasher();
    let mut h = random();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    h.write_u128(now.map_or(0, |d| d.as_nanos()));
    h.write_u32(std::process::id());
    Ok(format!("{:016x}{:016x}", h.finish(), random().finish()))
}

/// Writes `id` as the [`DATA_DIR_ID`] of `data_dir` (durably), unless it holds it already.
pub fn keep_data_dir_id(data_dir: &Path, id: &str) -> Result<(), Error> {
    let path = data_dir.join(DATA_DIR_ID);
    if std::fs::read_to_string(&path).is_ok_and(|s| s.trim() == id) {
        return Ok(());
    }
    std::fs::create_dir_all(data_dir).map_err(io(data_dir))?;
    Ok(replace_durably(
        data_dir,
        DATA_DIR_ID,
        format!("{id}\n").as_bytes(),
    )?)
}

/// The manifest of the archive in `dir`, checked: a new archive (no manifest, no table file)
/// gets an empty one written at once, naming `data_dir_id`; table files without a manifest are
/// [`Error::NoManifest`]; a manifest naming another data directory than `data_dir_id` is
/// [`Error::OtherDataDir`], one naming none takes it once the start passed its checks
/// (`Archive::keep_owner`).
pub(super) fn load_checked(dir: &Path, data_dir_id: Option<&str>) -> Result<Manifest, Error> {
    let m = match Manifest::load_if_any(dir)? {
        Some(m) => m,
        None => {
            // A new archive: its manifest is written before any file, so files without one
            // are not leftovers of it.
            let files = count_table_files(dir)?;
            if files > 0 {
                return Err(Error::NoManifest {
                    dir: dir.to_path_buf(),
                    files,
                });
            }
            let m = Manifest {
                data_dir: data_dir_id.map(str::to_string),
                ..Manifest::default()
            };
            m.store(dir)?;
            m
        }
    };
    // One naming no data directory (written before the id was kept) is this one's once the
    // start passed its checks (`Archive::keep_owner`).
    if let (Some(id), Some(theirs)) = (data_dir_id, &m.data_dir)
        && theirs != id
    {
        return Err(Error::OtherDataDir {
            dir: dir.to_path_buf(),
            archive: theirs.clone(),
            data_dir: id.to_string(),
        });
    }
    Ok(m)
}

/// Parquet files (not a flush's temporary one) in the table folders of the archive in `dir`.
fn count_table_files(dir: &Path) -> Result<usize, Error> {
    let mut n = 0;
    for t in Table::ALL {
        let d = dir.join(t.name());
        for e in std::fs::read_dir(&d).map_err(io(&d))? {
            let e = e.map_err(io(&d))?;
            n += usize::from(e.file_name().to_string_lossy().ends_with(".parquet"));
        }
    }
    Ok(n)
}
