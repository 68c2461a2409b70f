//! # fencewatch-ingest — evidence in
//!
//! Decoders and sources that turn bytes into [`fencewatch_assess::Event`]s and feed the core.
//!
//! - [`json`]: strict schema-v1 JSON decoding (NDJSON lines and JSON arrays) with per-line,
//!   per-field errors; a malformed line is an `Err` here and `malformed_event` evidence in the
//!   core, never a crash.
//! - [`decode`]: decoders beside `json`: OTLP spans and log records (feature `otlp`).
//! - [`mod@file`]: streaming files and stdin through a parallel decoder into a
//!   [`fencewatch_assess::History`], in reading order, with bounded memory.
//! - [`partition`]: one local partition: the WAL batches, applying them to the live assessor,
//!   opening with checkpoint restore and replay.
//! - [`demo`]: the live workload of `fencewatch demo`, stamped with a wall clock it is given.
//! - [`simulate`]: a realistic lease/epoch workload generator with injectable faults and a
//!   ground truth of what it injected; each event goes to a [`simulate::Sink`] with its scope
//!   (an NDJSON writer here; `fencewatch-api` produces them to Kafka, keyed by scope).
//! - [`wal`]: the local write-ahead log, one durable, offset-addressed partition that HTTP, OTLP
//!   and file ingest append to and the service replays after a crash.
//! - [`checkpoint`]: atomic per-partition checkpoints of the assessor state with its offset.

pub mod checkpoint;
pub mod decode;
pub mod demo;
pub mod file;
pub mod json;
pub mod partition;
pub mod simulate;
pub mod wal;
