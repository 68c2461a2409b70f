//! Sources: where evidence enters. Every source has one shape: it yields ordered,
//! offset-addressed batches ([`crate::batch::Batch`]) into a partition
//! ([`crate::partition::Partition`]), which restores, replays, applies and checkpoints them
//! the same way whatever the source; what a source owns is only where its batches come from
//! and where its offsets are made durable.
//!
//! | source | batches from | durable offsets | partition |
//! | --- | --- | --- | --- |
//! | [`mod@file`] | files and stdin (`fencewatch check`) | none: one pass, in reading order | a `History`, not live (or, within `--max-memory`, one spilled to [`spill`]'s files) |
//! | [`wal`] | HTTP bodies, [`tail`], the live simulator | the local write-ahead log | `wal` |
//! | [`tail`] | `--ingest-file` lines, submitted to [`wal`] | the WAL (resumes after its last line) | `wal` |
//! | `kafka` (feature `kafka`) | a consumer group's assigned partitions | checkpoints, then the group's committed offsets | `topic/partition` each |
//!
//! OTLP requests arrive over HTTP (`fencewatch-api`) and are submitted to [`wal`] as batches
//! of their own format. A sink that needs every applied batch (the evidence archive) belongs
//! where every source's batches are applied: `partition/apply.rs`.

pub mod file;
#[cfg(feature = "kafka")]
pub mod kafka;
pub mod spill;
pub mod tail;
pub mod wal;
