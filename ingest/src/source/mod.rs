//! Sources: where evidence enters. Every source has one shape: it yields ordered,
//! offset-addressed batches ([`crate::batch::Batch`]) into a partition
//! ([`crate::partition::Partition`]), which restores, replays, applies and checkpoints them
//! the same way whatever the source; what a source owns is only where its batches come from
//! and where its offsets are made durable.
//!
//! | source | batches from | durable offsets | partition |
//! | --- | --- | --- | --- |
//! | [`file`] | files and stdin (`fencewatch check`) | none: one pass, in reading order | a `History`, not live |
//! | [`wal`] | HTTP bodies, [`tail`], the live simulator | the local write-ahead log | `wal` |
//! | [`tail`] | `--ingest-file` lines, submitted to [`wal`] | the WAL (resumes after its last line) | `wal` |
//! | `kafka` (feature `kafka`) | a consumer group's assigned partitions | checkpoints, then the group's committed offsets | `topic/partition` each |
//!
//! OTLP log records arrive over HTTP and are submitted to [`wal`] like NDJSON bodies. Sinks
//! that need every applied batch (an archive) are fed where the partition applies them.

pub mod file;
#[cfg(feature = "kafka")]
pub mod kafka;
pub mod tail;
pub mod wal;
