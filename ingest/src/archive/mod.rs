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
//!
//! **The right archive.** The offsets in the manifest are those of one data directory's
//! partitions: the manifest names its data directory's id ([`data_dir_id`]), and an archive of
//! another one is refused ([`Error::OtherDataDir`]); the id is written into the data directory
//! only once its archive was accepted, and a lost id file takes the manifest's. Table files without any manifest are
//! refused rather than deleted as leftovers ([`Error::NoManifest`]; a new archive writes its
//! empty manifest before any file). An archive of this data directory that lists a partition
//! below its checkpoint (moved aside and back) makes the partition restore an older
//! checkpoint and replay from there (`partition::local`, the Kafka source), or refuses to start.

mod applied;
pub mod chunk;
mod error;
pub mod log;
mod maintain;
pub mod manifest;
mod open;
mod owner;
pub mod read;
pub mod rows;
mod sink;
mod windows;
mod writer;

pub use log::CHUNK_ROWS;
pub use maintain::Maintained;
pub use owner::{DATA_DIR_ID, data_dir_id, keep_data_dir_id};
pub use rows::{Origin, Table};
pub use sink::Sink;
pub use writer::{Archive, ArchiveOptions, Due, Error, Snapshot, Stats, Taken, file_properties};
