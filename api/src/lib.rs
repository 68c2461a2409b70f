//! # fencewatch-api — the `fencewatch` binary
//!
//! The command line ([`cli`]: `check`, `contract check`, `simulate` (OTLP: [`simulate_otlp`]),
//! `serve`, `demo`, [`attest`], and
//! [`wal_cmd`]: `wal inspect|repair`), the text reports ([`render`]), and [`serve`]: the
//! service's composition root and HTTP surface (configuration, routes, problem details, auth,
//! the metric registry, the page); [`query`] with [`query_cmd`]: read-only DataFusion SQL over
//! the evidence archive (`POST /v1/query`, `fencewatch query`). Evidence enters, is judged and
//! is reported in `fencewatch-ingest` and `fencewatch-assess`.

pub mod attest;
pub mod cli;
pub mod conformance;
pub mod exit;
pub mod large_pages;
pub mod query;
pub mod query_cmd;
pub mod render;
pub mod serve;
pub mod simulate_otlp;
mod spill;
pub mod wal_cmd;
