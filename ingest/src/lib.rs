//! # fencewatch-ingest — evidence in
//!
//! Decoders and sources that turn bytes into [`fencewatch_assess::Event`]s and feed the core.
//!
//! - [`json`]: strict schema-v1 JSON decoding (NDJSON lines and JSON arrays) with per-line,
//!   per-field errors; a malformed line is an `Err` here and `malformed_event` evidence in the
//!   core, never a crash.
//! - [`file`]: streaming files and stdin through a parallel decoder into a
//!   [`fencewatch_assess::History`], in reading order, with bounded memory.
//! - [`simulate`]: a realistic lease/epoch workload generator with injectable faults and a
//!   ground truth of what it injected.

pub mod file;
pub mod json;
pub mod simulate;
