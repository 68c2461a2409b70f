//! The evidence archive (SPEC §9): every applied event, malformed line, settled counterexample
//! and final or revised window, as Parquet under `<data_dir>/archive/<table>/`.
//!
//! Rows are collected as they are applied, by a [`Sink`] per partition (the WAL's, each Kafka
//! partition's) fed by the same batches as the assessor, and by [`Archive::tick_windows`] from
//! the merged view. They stay in memory, visible to queries ([`Archive::snapshot`]), until the
//! file they go to is in the manifest: the archive's thread encodes them as they come into one
//! open file per table under a temporary name ([`Archive::write_some`]: zstd, row groups of
//! ~100k rows), and a flush (by size, interval, checkpoint or SIGTERM) closes, fsyncs and
//! renames those files, then records them in the manifest ([`manifest`]) together with each
//! partition's offset below which every row is archived and how far each property's windows
//! are. An open file is never listed: after a crash it is a leftover, deleted on open. Files
//! are immutable; small ones are compacted, old ones dropped by retention, both crash-safe the
//! same way.
//!
//! **Exactly once.** A checkpoint of a partition at offset C is saved only after the archive
//! holds every row of the records below C ([`Archive::flush_through`]), so after a crash the
//! assessor restores at C ≤ the archived offset A, replays the log from C, and the sink skips
//! the rows of records below A: every row exists exactly once. The rows a record produces
//! depend only on the assessor's state and the record (a counterexample settles in the same
//! push on replay), so a replay re-archives exactly what was lost. Window rows are not tied to
//! offsets: how far they are archived is in the manifest itself.

mod applied;
pub mod chunk;
mod error;
pub mod log;
mod maintain;
pub mod manifest;
mod open;
pub mod read;
pub mod rows;
mod sink;
mod windows;
mod writer;

pub use log::CHUNK_ROWS;
pub use maintain::Maintained;
pub use rows::{Origin, Table};
pub use sink::Sink;
pub use writer::{Archive, ArchiveOptions, Due, Error, Snapshot, Stats, Taken, file_properties};
