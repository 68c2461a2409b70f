//! The result of assessing a history: the normative JSON shape of SPEC §6 plus detail the text
//! report and the page use.

use crate::contract::{Compiled, Missing, Status};
use crate::finding::{Counterexample, CounterexampleKind, EventView, Reason, Verdict};
use crate::window::WindowRun;
use serde::{Serialize, Serializer};
use std::collections::BTreeMap;

/// The whole assessment.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The worst verdict over all properties.
    pub verdict: Verdict,
    /// The contract's compilation status, beside the verdicts.
    pub contract: ContractSummary,
    /// Valid events naming a property the contract lacks.
    pub unattributed: u64,
    /// Attestations naming a premise (or route) their property does not require: counted and
    /// otherwise ignored (SPEC §10).
    pub attestations_ignored: u64,
    /// Malformed events.
    pub malformed: u64,
    /// Valid events read (attributed or not, duplicates included).
    pub events: u64,
    /// Equal duplicate deliveries that were dropped.
    pub duplicates: u64,
    /// Every contract property, in contract order.
    pub properties: Vec<PropertyReport>,
    /// The first malformed events, with their errors.
    pub malformed_events: Vec<Sample>,
    /// Telemetry sources seen.
    pub emitters: Vec<EmitterReport>,
    /// What `check --attestations-out` needs, when asked for ([`crate::History::note_conformance`]).
    #[serde(skip)]
    pub conformance: Option<Conformance>,
}

/// What a conformance run exercised (SPEC §10, `check --attestations-out`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Conformance {
    /// The greatest valid event time of the input (ns).
    pub last_event_time: Option<i64>,
    /// Per property, per declared route: the rejected commits/fences on it that certainly
    /// follow a committed higher epoch of their scope (stale writes the fence rejected).
    pub fenced_rejections: Vec<Vec<u64>>,
}

/// The contract status as `check` reports it.
#[derive(Debug, Clone, Serialize)]
pub struct ContractSummary {
    /// accepted or rejected.
    pub status: Status,
    /// Residual obligations of the accepted properties.
    pub obligations: Vec<String>,
    /// Missing obligations of rejected properties.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub missing: Vec<Missing>,
}

impl From<&Compiled> for ContractSummary {
    fn from(c: &Compiled) -> ContractSummary {
        ContractSummary {
            status: c.status,
            obligations: c.obligations.clone(),
            missing: c.missing.clone(),
        }
    }
}

/// One property's assessment.
#[derive(Debug, Clone, Serialize)]
pub struct PropertyReport {
    /// The property name.
    pub property: String,
    /// refuted if any counterexample; else unknown if any reason; else holds.
    pub verdict: Verdict,
    /// Every counterexample, uncapped, ordered by stale event time. Serialized without
    /// `final` and `withdrawn` (the private `offline` serializer): in `check` every counterexample is final and
    /// none is withdrawn, and its JSON shape predates them.
    #[serde(serialize_with = "offline")]
    pub counterexamples: Vec<Counterexample>,
    /// Each reason with a count of at least 1.
    pub unknown: BTreeMap<Reason, u64>,
    /// A few sample events per reason.
    pub unknown_samples: BTreeMap<Reason, Vec<Sample>>,
    /// Valid events of the property (duplicates dropped).
    pub events: u64,
    /// Rejected commits and fences: the fence working.
    pub stale_rejections: u64,
    /// Declared routes and how they were observed.
    pub routes: Vec<RouteCoverage>,
    /// Routes seen in events that the contract lacks.
    pub undeclared_routes: Vec<UndeclaredRoute>,
    /// The window timeline.
    pub windows: Vec<WindowRun>,
    /// Each required premise's support over the history (SPEC §10).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub premises: Vec<PremiseReport>,
}

/// One required premise's support, as `check` and `/v1/premises` show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PremiseReport {
    /// The premise.
    pub name: String,
    /// Its fenced route, for a per-route premise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub route: Option<String>,
    /// An attestation supports it at most this long.
    pub max_age: String,
    /// Attestations of it taken.
    pub attestations: u64,
    /// Where it is supported: `[start, end)`, RFC 3339 (an open end is absent), the last
    /// [`PREMISE_INTERVALS`] coalesced intervals.
    pub supported: Vec<Interval>,
    /// Where it is failed (the latest attestation failed), likewise.
    pub failed: Vec<Interval>,
    /// Windows raising `premise_failed`.
    pub failed_windows: u64,
    /// Windows raising `premise_unattested`.
    pub unattested_windows: u64,
    /// The latest attestation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last: Option<AttestationView>,
}

/// Intervals of support listed per premise at most (the latest ones).
pub const PREMISE_INTERVALS: usize = 100;

/// A stretch of time `[start, end)`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Interval {
    /// Start, RFC 3339.
    pub start: String,
    /// End (exclusive), RFC 3339; absent when open-ended.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub end: Option<String>,
}

/// An attestation as shown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AttestationView {
    /// Its time, RFC 3339.
    pub ts: String,
    /// holds or failed.
    pub outcome: &'static str,
    /// End of its support (a `holds` one), RFC 3339.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub valid_until: Option<String>,
    /// Who attested.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attester: Option<String>,
    /// A URL or digest of the evidence.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub evidence: Option<String>,
}

/// A sample event behind a reason or a malformed line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Sample {
    /// `source:position`.
    pub source: String,
    /// Event time, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ts: Option<String>,
    /// What is wrong with it.
    pub detail: String,
}

/// How a declared route was observed.
#[derive(Debug, Clone, Serialize)]
pub struct RouteCoverage {
    /// Route name.
    pub name: String,
    /// Whether it goes through the conditional commit.
    pub fenced: bool,
    /// Commits, fences (either outcome) and heartbeats on it.
    pub observations: u64,
    /// Last observation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_seen: Option<String>,
    /// Windows in which it was silent.
    pub silent_windows: u64,
}

/// A route not in the contract.
#[derive(Debug, Clone, Serialize)]
pub struct UndeclaredRoute {
    /// Route name.
    pub name: String,
    /// Events on it.
    pub events: u64,
}

/// One telemetry source.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EmitterReport {
    /// Emitter id.
    pub emitter: String,
    /// Distinct seqs seen.
    pub events: u64,
    /// Lowest seq.
    pub first_seq: u64,
    /// Highest seq.
    pub last_seq: u64,
    /// Gaps (runs of missing seqs).
    pub gaps: u64,
    /// Missing seqs in all.
    pub missing: u64,
}

/// Counterexamples as `check` reports them: every field but `final` and `withdrawn`.
fn offline<S: Serializer>(cxs: &[Counterexample], s: S) -> Result<S::Ok, S::Error> {
    #[derive(Serialize)]
    struct Offline<'a> {
        id: &'a str,
        kind: CounterexampleKind,
        property: &'a str,
        scope: &'a str,
        incarnation: u64,
        stale: &'a EventView,
        superseding: &'a EventView,
        context: &'a [EventView],
        explanation: &'a str,
    }
    s.collect_seq(cxs.iter().map(|c| Offline {
        id: &c.id,
        kind: c.kind,
        property: &c.property,
        scope: &c.scope,
        incarnation: c.incarnation,
        stale: &c.stale,
        superseding: &c.superseding,
        context: &c.context,
        explanation: &c.explanation,
    }))
}
