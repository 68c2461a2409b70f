//! # fencewatch-api — evidence out
//!
//! The command line and the composition root: `check` (offline assessment), `contract check`,
//! `simulate` (NDJSON, or produced to Kafka by [`simulate_kafka`]), and [`serve`], the service
//! (configuration, problem+json errors, bearer auth, Prometheus metrics, the HTTP router around
//! the `/v1` API, and Kafka ingest), and [`wal_cmd`] (`wal inspect|repair`).

pub mod cli;
pub mod render;
pub mod serve;
pub mod simulate_kafka;
pub mod wal_cmd;
