//! The service's incremental assessor (SPEC §4 "`serve` is exact within the lateness horizon",
//! §5): `(state, event) -> findings`, pure and deterministic, checkpointable with serde.
//!
//! A [`Live`] takes events one at a time from one ordered partition (the WAL or a Kafka
//! partition), through the same per-event rules as `check` (the crate's `rules`). Per (property,
//! scope) it keeps the events still inside the retention horizon and decides the scope again
//! with the same per-scope sweeps as `check` (`scope`) when it changes, so inside the
//! horizon its findings are `check`'s whatever the arrival order; older events fold into a
//! high-water mark that is never forgotten. Wall time enters only as a parameter: the time a
//! batch was received and the time of a query.
//!
//! - `state`: [`LiveState`] (what a checkpoint saves) and [`Live`] around it;
//! - `push`: an event in: admission, interning (`names`), what it counts for in its property's
//!   `tally`; `dups`: duplicate settlement against the `emitters`' recent deliveries and the
//!   kept events;
//! - `decide`: keeping an event in its scope (`scopes`) and deciding the scope, or `fast`: the
//!   events of a hot scope that the full decision need not see; `cxs`: a
//!   counterexample's life (provisional, final, withdrawn); `horizon`: the watermark, folding,
//!   finality;
//! - the queries: [`View`] (`view`, over `parts`: one partition, or many local [`Live`]s and
//!   remote [`Summary`]s merged), `query` (assurance, timeline, coverage, one scope) and
//!   `render`; [`Summary`] (`summary`) is what a partition exports.

mod aside;
mod conflicts;
mod cxs;
mod decide;
mod dups;
mod emitters;
mod grants;
mod horizon;
mod names;
mod parts;
mod premises;
mod push;
mod query;
mod render;
mod resettle;
mod scopes;
mod segmap;
mod spans;
mod state;
mod summary;
mod tally;
mod view;

pub use crate::rules::{MALFORMED_SAMPLES, SAMPLES_PER_REASON};
pub use emitters::SeqRuns;
pub use premises::{PremiseState, PremiseView, UnsupportedPremise};
pub use query::{
    Assurance, Coverage, CxPage, EmitterCoverage, RouteState, ScopeView, WindowBounds,
};
pub use spans::{SpanId, SpanProvenance};
pub use state::{
    ContractChanged, DEFAULT_MAX_COUNTEREXAMPLES, DEFAULT_MAX_EMITTERS, DEFAULT_MAX_SEQ_FRAGMENTS,
    Live, LiveOptions, LiveState, MAX_NAME_BYTES, NewCounterexample, Pushed, Settled, fingerprint,
};
pub use summary::Summary;
pub use tally::{OTHER_UNDECLARED_ROUTES, UNDECLARED_ROUTES_KEPT};
pub use view::{ContractMismatch, View};
