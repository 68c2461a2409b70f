//! The archive's errors.

use super::manifest;
use std::path::{Path, PathBuf};

/// Errors of the archive.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An I/O error on a path.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// Parquet could not be written or read.
    #[error("{path}: {source}")]
    Parquet {
        /// The path.
        path: PathBuf,
        /// The cause.
        source: parquet::errors::ParquetError,
    },
    /// The manifest.
    #[error(transparent)]
    Manifest(#[from] manifest::Error),
    /// Table files without a manifest: which of them belong to the archive is not known.
    #[error(
        "{dir}: {files} Parquet files but no {manifest}: which rows they hold, and which partitions' offsets they cover, is not known, and deleting them as leftovers would lose archived rows; nothing was changed. Put the manifest back, or move the folder aside to start a new archive (its files stay readable, e.g. by DuckDB)",
        manifest = manifest::MANIFEST
    )]
    NoManifest {
        /// The archive folder.
        dir: PathBuf,
        /// Parquet files found.
        files: usize,
    },
    /// The archive was written beside another data directory.
    #[error(
        "{dir}: this archive belongs to the data directory with id {archive}, not to this one ({data_dir}): its offsets are another write-ahead log's, so this one's events at offsets it holds would never be archived; nothing was changed. Move the folder aside to start a new archive (its files stay readable, e.g. by DuckDB), or start fencewatch on the data directory it belongs to"
    )]
    OtherDataDir {
        /// The archive folder.
        dir: PathBuf,
        /// The id its manifest names.
        archive: String,
        /// This data directory's id.
        data_dir: String,
    },
    /// An earlier flush failed: nothing more is written until a restart.
    #[error("the archive failed earlier: {0}")]
    Failed(String),
}

pub(super) fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        path: path.to_path_buf(),
        source,
    }
}

pub(super) fn pq(path: &Path) -> impl FnOnce(parquet::errors::ParquetError) -> Error + '_ {
    move |source| Error::Parquet {
        path: path.to_path_buf(),
        source,
    }
}
