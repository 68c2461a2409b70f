//! Exact assessment of a whole history, in any arrival order (SPEC §4 "Offline check").
//!
//! Events are pushed in reading order, one by one or as [`Batch`]es decoded off the caller's
//! thread, admitted by the per-event rules (the crate's `rules`) and kept as compact records with
//! interned names; a scope is kept as its name and a 96-bit hash, with no table to look it up
//! in while reading (`input`). Nothing is decided until [`History::finish`] (`state`), when the
//! end of input is the end of time:
//! 1. duplicates are settled by their keys and telemetry gaps found per emitter (`settle`);
//! 2. every applied event counts for its property, and each (property, scope) group is swept
//!    by the crate's per-scope procedures (`scope`), on all threads (`sweep`);
//! 3. malformed events, route silence and each required premise's support (`premises`) are
//!    placed in windows and each property is concluded (`conclude`).
//!
//! Each thread accumulates per property (`acc`); the parts merge at the end, so the report
//! does not depend on the number of threads.

mod acc;
mod ahead;
mod attest;
mod conclude;
mod input;
mod premises;
mod settle;
mod spill;
mod state;
mod sweep;

pub use crate::rules::{CONTEXT_EVENTS, MALFORMED_SAMPLES, SAMPLES_PER_REASON};
pub use ahead::Populate;
pub use input::{Batch, SourceId};
pub use spill::{SpillStore, Spilled, parts_for};
pub use state::{History, MAX_LISTED_WINDOWS};
