//! Decoders of evidence formats beside [`crate::json`]: [`otlp`] maps OTLP spans and log
//! records to events (SPEC §8), behind the cargo feature `otlp`.

#[cfg(feature = "otlp")]
pub mod otlp;
