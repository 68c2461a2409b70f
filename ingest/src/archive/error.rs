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
