//! # fencewatch-api — evidence out
//!
//! The command line and the composition root: `check` (offline assessment), `contract check`,
//! `simulate`, and [`serve`], the service (configuration, problem+json errors, bearer auth,
//! Prometheus metrics and the HTTP router around the `/v1` API).

pub mod cli;
pub mod render;
pub mod serve;
