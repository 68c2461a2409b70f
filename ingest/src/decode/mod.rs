//! Decoders: bytes of one wire format into [`fencewatch_assess::Event`]s, with per-item errors
//! (a malformed item is an `Err` here and `malformed_event` evidence in the core, never a
//! crash). Pure: no IO, no clock, no state between items.
//!
//! - [`json`]: strict schema-v1 JSON (NDJSON lines, array elements, one message).
//! - `otlp` (feature `otlp`): OTLP spans and log records carrying `fencing.*` attributes
//!   (SPEC §8), and the requests reduced to them that the WAL stores.

pub mod json;
#[cfg(feature = "otlp")]
pub mod otlp;
