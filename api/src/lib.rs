//! # fencewatch-api — evidence out
//!
//! The command line and the composition root: `check` (offline assessment), `contract check`,
//! `simulate`. The HTTP API, metrics and the page join here in later work.

pub mod cli;
pub mod render;
