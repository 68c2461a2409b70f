//! # fencewatch-assess — the functional core
//!
//! Pure, deterministic assessment of fenced exclusive mutation (SPEC §2–4): no IO, no clock,
//! no async. Everything else in fencewatch is an edge around this crate.
//!
//! - [`event`]: the event model (schema v1) with newtypes for every ordered identifier.
//! - [`time`]: event time, strict RFC 3339 and contract durations.
//! - [`contract`]: the TOML contract, its validation and its compiler (accepted or rejected
//!   candidates with their obligations).
//! - `rules`: the per-event rules both modes apply: the compact record of an event,
//!   admission, duplicate keys and content, per-event unknown reasons, how an event is shown.
//! - `scope`: the per-scope decision procedures (certain order, supersession sweeps,
//!   epoch reuse, grants, route silence) shared by both modes.
//! - [`history`]: exact assessment of a whole history in any arrival order (`check`).
//! - [`tracker`]: bounded per-scope state for the service: epoch intervals inside the horizon,
//!   folded into a high-water mark that is never forgotten.
//! - [`live`]: the service's incremental assessor of one partition, the mergeable
//!   [`live::Summary`] it exports, and the [`live::View`] that answers queries over one
//!   partition or many merged.
//! - [`premise`]: premise support from attestations (SPEC §10): supported, failed and
//!   unattested intervals, mergeable across partitions, and the reasons they place.
//! - [`window`]: mergeable per-window summaries and the verdicts derived from them.
//! - [`finding`], [`report`]: counterexamples, unknown reasons, verdicts and the report shape.
//!
//! Verdicts are values, not errors: a stale commit is a [`finding::Counterexample`]; a
//! malformed event is pushed as evidence (`malformed_event`) by the decoder's caller.

pub mod contract;
pub mod event;
pub mod finding;
pub mod history;
pub mod intern;
pub mod live;
pub mod premise;
pub mod report;
pub(crate) mod rules;
pub(crate) mod scope;
pub mod time;
pub mod tracker;
pub mod window;

pub use contract::Contract;
pub use event::{Epoch, Event, Incarnation, Kind, Order, Outcome, Seq};
pub use finding::{Counterexample, CounterexampleKind, Reason, Verdict, Withdrawal};
pub use history::{History, SourceId};
pub use report::Report;
pub use time::{Duration, EventTime};
