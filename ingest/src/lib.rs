//! # fencewatch-ingest — evidence in
//!
//! Everything between the bytes a producer sends and the core's assessors
//! (`fencewatch-assess`), and the one place that reports what they find:
//!
//! - [`decode`]: wire formats into events, with per-item errors: JSON, OTLP (feature `otlp`).
//! - [`batch`]: what a source hands a partition at one offset, and its WAL payload.
//! - [`partition`]: one ordered, offset-addressed stream and its live assessor, restored,
//!   replayed, applied and checkpointed by one piece of code for every source.
//! - [`source`]: where batches come from: files (`check`), the local WAL (HTTP, file tailing,
//!   the live simulator), Kafka (feature `kafka`).
//! - [`registry`]: every partition of this instance (and other instances' summaries), merged
//!   into one `View` for every query.
//! - [`report`]: internal events, each emitting its log line and its metrics.
//! - [`wal`], [`checkpoint`]: the storage under the local partition and every checkpoint.
//! - [`clock`]: wall time, passed in.
//! - `archive` (feature `archive`): the evidence archive, every applied event, malformed
//!   line, settled counterexample and final window as Parquet under the data directory.
//! - [`simulate`]: the workload generator: NDJSON, produced to Kafka
//!   (`source::kafka::produce`, feature `kafka`), or live into the WAL source (`demo`).

#[cfg(feature = "archive")]
pub mod archive;
pub mod batch;
pub mod checkpoint;
pub mod clock;
pub mod decode;
pub mod heap;
pub mod partition;
pub mod registry;
pub mod report;
pub mod simulate;
pub mod source;
pub mod wal;
