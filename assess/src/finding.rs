//! Findings: counterexamples (verdict `refuted`), unknown reasons and the three verdicts.

use serde::{Deserialize, Serialize};
use std::fmt;

/// The three-valued assessment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Complete, fresh, unambiguous evidence and no counterexample.
    Holds,
    /// The evidence can neither establish nor refute exclusion.
    Unknown,
    /// A counterexample exists.
    Refuted,
}

impl Verdict {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Holds => "holds",
            Verdict::Unknown => "unknown",
            Verdict::Refuted => "refuted",
        }
    }

    /// The process exit code of `check`: 0 holds, 1 refuted, 2 unknown.
    pub fn exit_code(self) -> i32 {
        match self {
            Verdict::Holds => 0,
            Verdict::Refuted => 1,
            Verdict::Unknown => 2,
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The kinds of counterexample (SPEC §4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CounterexampleKind {
    /// A superseded epoch committed after the newer one was established.
    StaleCommit,
    /// A commit into an older incarnation after a newer one existed.
    StaleIncarnation,
    /// One epoch used by two holders.
    EpochReuse,
    /// The authority granted a lower epoch after a higher one.
    GrantRegression,
    /// A commit by a holder the epoch was not granted to.
    HolderMismatch,
}

impl CounterexampleKind {
    /// All kinds.
    pub const ALL: [CounterexampleKind; 5] = [
        CounterexampleKind::StaleCommit,
        CounterexampleKind::StaleIncarnation,
        CounterexampleKind::EpochReuse,
        CounterexampleKind::GrantRegression,
        CounterexampleKind::HolderMismatch,
    ];

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            CounterexampleKind::StaleCommit => "stale_commit",
            CounterexampleKind::StaleIncarnation => "stale_incarnation",
            CounterexampleKind::EpochReuse => "epoch_reuse",
            CounterexampleKind::GrantRegression => "grant_regression",
            CounterexampleKind::HolderMismatch => "holder_mismatch",
        }
    }
}

/// Why the evidence is incomplete (SPEC §4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// A committed commit/fence without `scope`.
    MissingScope,
    /// A committed commit/fence without `epoch`.
    MissingEpoch,
    /// A committed commit/fence without `route`.
    MissingRoute,
    /// A committed commit/fence on a route the contract lacks.
    UndeclaredRoute,
    /// A committed commit/fence on a `fenced = false` route.
    UnfencedRoute,
    /// An inversion whose order is not certain.
    AmbiguousOrder,
    /// A committed epoch that was never granted, under `grants = "required"`.
    UngrantedEpoch,
    /// A declared route with no observation within its freshness.
    RouteSilent,
    /// A missing `seq` of an emitter.
    TelemetryGap,
    /// An event that could not be decoded.
    MalformedEvent,
    /// Two deliveries of one event that differ.
    ConflictingDuplicate,
    /// An event older than the retained horizon (`serve`).
    LateEvidence,
    /// The wall clock ran ahead of the watermark (`serve`).
    StaleEvidence,
    /// A Kafka key that is not the event's scope (scale-out).
    MisroutedPartition,
    /// A required premise without a supporting attestation over part of a window (SPEC §10).
    PremiseUnattested,
    /// A required premise whose latest attestation failed, over part of a window (SPEC §10).
    PremiseFailed,
}

impl Reason {
    /// Number of reasons.
    pub const COUNT: usize = 16;

    /// All reasons, in declaration order.
    pub const ALL: [Reason; Reason::COUNT] = [
        Reason::MissingScope,
        Reason::MissingEpoch,
        Reason::MissingRoute,
        Reason::UndeclaredRoute,
        Reason::UnfencedRoute,
        Reason::AmbiguousOrder,
        Reason::UngrantedEpoch,
        Reason::RouteSilent,
        Reason::TelemetryGap,
        Reason::MalformedEvent,
        Reason::ConflictingDuplicate,
        Reason::LateEvidence,
        Reason::StaleEvidence,
        Reason::MisroutedPartition,
        Reason::PremiseUnattested,
        Reason::PremiseFailed,
    ];

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::MissingScope => "missing_scope",
            Reason::MissingEpoch => "missing_epoch",
            Reason::MissingRoute => "missing_route",
            Reason::UndeclaredRoute => "undeclared_route",
            Reason::UnfencedRoute => "unfenced_route",
            Reason::AmbiguousOrder => "ambiguous_order",
            Reason::UngrantedEpoch => "ungranted_epoch",
            Reason::RouteSilent => "route_silent",
            Reason::TelemetryGap => "telemetry_gap",
            Reason::MalformedEvent => "malformed_event",
            Reason::ConflictingDuplicate => "conflicting_duplicate",
            Reason::LateEvidence => "late_evidence",
            Reason::StaleEvidence => "stale_evidence",
            Reason::MisroutedPartition => "misrouted_partition",
            Reason::PremiseUnattested => "premise_unattested",
            Reason::PremiseFailed => "premise_failed",
        }
    }

    /// What an operator should do about it.
    pub fn advice(self) -> &'static str {
        match self {
            Reason::MissingScope => "emit `scope` on every commit and fence",
            Reason::MissingEpoch => "emit the fencing `epoch` on every commit and fence",
            Reason::MissingRoute => "emit `route` on every commit and fence",
            Reason::UndeclaredRoute => {
                "declare the route in the contract, or stop mutating through it"
            }
            Reason::UnfencedRoute => {
                "route the mutation through the conditional commit that checks the epoch"
            }
            Reason::AmbiguousOrder => {
                "emit the resource's commit `order` (LSN, row version), or tighten clock sync"
            }
            Reason::UngrantedEpoch => "emit a grant event for every epoch the authority issues",
            Reason::RouteSilent => {
                "check that the route still emits telemetry, or send heartbeats when idle"
            }
            Reason::TelemetryGap => {
                "find where the emitter's events were lost (buffer drops, producer errors)"
            }
            Reason::MalformedEvent => "fix the emitter that produced the malformed event",
            Reason::ConflictingDuplicate => {
                "an emitter reuses a seq or order for different events: fix its counter"
            }
            Reason::LateEvidence => {
                "raise the retention margin, or find why the event arrived so late"
            }
            Reason::StaleEvidence => "the pipeline stalled: check the source (Kafka, HTTP senders)",
            Reason::MisroutedPartition => "key Kafka messages by scope",
            Reason::PremiseUnattested => {
                "run the premise's check (conformance test, configuration audit) and post a fresh attestation, or stop relying on the verdict"
            }
            Reason::PremiseFailed => {
                "a check of the premise failed: fix the system, then attest again; until then exclusion is not established"
            }
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where an event came from: a source (file, WAL, topic/partition) and a position in it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Provenance {
    /// The source, e.g. `events.ndjson` or `orders/3`.
    pub source: String,
    /// The position: a line number (1-based) or an offset.
    pub position: u64,
}

impl fmt::Display for Provenance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.source, self.position)
    }
}

/// An event as shown in a finding.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EventView {
    /// commit, fence, grant or heartbeat.
    pub kind: &'static str,
    /// RFC 3339, 9 fraction digits.
    pub ts: String,
    /// Fencing token.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub epoch: Option<u64>,
    /// Resource lifetime.
    pub incarnation: u64,
    /// Resource commit sequence.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub order: Option<u64>,
    /// Code path.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub route: Option<String>,
    /// Participant.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub holder: Option<String>,
    /// committed or rejected.
    pub outcome: &'static str,
    /// Telemetry source.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub emitter: Option<String>,
    /// Per-emitter sequence.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seq: Option<u64>,
    /// `source:position`.
    pub source: String,
}

/// A finite counterexample to a property.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Counterexample {
    /// Deterministic: a hash of property, kind, scope, incarnation and the stale event's provenance.
    pub id: String,
    /// What went wrong.
    pub kind: CounterexampleKind,
    /// The property.
    pub property: String,
    /// The scope.
    pub scope: String,
    /// The stale event's incarnation.
    pub incarnation: u64,
    /// The event that should not have happened.
    pub stale: EventView,
    /// The event that superseded it.
    pub superseding: EventView,
    /// The scope's last few events up to the stale one, by time.
    pub context: Vec<EventView>,
    /// One sentence a human can act on.
    pub explanation: String,
    /// Whether it can no longer be withdrawn (serialized as `final`). `check`'s always are
    /// (its end of input is the end of time). In `serve` a counterexample is provisional until
    /// the watermark has passed both its stale and its superseding event by the retention
    /// margin, and final after (SPEC §4 "Provisional counterexamples"). A withdrawn one is not
    /// final.
    #[serde(rename = "final")]
    pub is_final: bool,
    /// Why it was withdrawn: serialized as `"withdrawn": "conflicting_duplicate"`, and left out
    /// while it stands. A withdrawn counterexample stays listed, so that consumers tracking ids
    /// see why it went, but refutes nothing: its windows were revised to
    /// `unknown(conflicting_duplicate)`. `check`'s report leaves out both this and `final`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub withdrawn: Option<Withdrawal>,
    /// Event time of the stale event (ns), which places it in a window.
    #[serde(skip)]
    pub at: i64,
}

impl Counterexample {
    /// A final, standing counterexample of `kind` with id `id`, in `scope` of `property`, whose
    /// stale event (at `at` ns) and superseding event are shown as `events`, explained.
    pub(crate) fn shown(
        id: String,
        kind: CounterexampleKind,
        property: String,
        scope: String,
        events: [EventView; 2],
        context: Vec<EventView>,
        at: i64,
    ) -> Counterexample {
        let [stale, superseding] = events;
        Counterexample {
            id,
            kind,
            property,
            incarnation: stale.incarnation,
            explanation: explain(kind, &scope, &stale, &superseding),
            scope,
            stale,
            superseding,
            context,
            is_final: true,
            withdrawn: None,
            at,
        }
    }
}

/// Why a provisional counterexample was withdrawn (SPEC §4 "Provisional counterexamples").
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Withdrawal {
    /// Its stale or superseding event turned out to be one of conflicting deliveries of one
    /// duplicate key, which are all set aside (SPEC §4 "Duplicates").
    ConflictingDuplicate,
}

impl Withdrawal {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Withdrawal::ConflictingDuplicate => "conflicting_duplicate",
        }
    }

    /// The unknown reason its windows are revised to.
    pub fn reason(self) -> Reason {
        match self {
            Withdrawal::ConflictingDuplicate => Reason::ConflictingDuplicate,
        }
    }
}

/// The deterministic counterexample id.
pub fn counterexample_id(
    property: &str,
    kind: CounterexampleKind,
    scope: &str,
    incarnation: u64,
    stale: &Provenance,
) -> String {
    let mut buf = Vec::with_capacity(property.len() + scope.len() + stale.source.len() + 48);
    for part in [
        property.as_bytes(),
        kind.as_str().as_bytes(),
        scope.as_bytes(),
        stale.source.as_bytes(),
    ] {
        buf.extend_from_slice(&(part.len() as u64).to_le_bytes());
        buf.extend_from_slice(part);
    }
    buf.extend_from_slice(&incarnation.to_le_bytes());
    buf.extend_from_slice(&stale.position.to_le_bytes());
    format!("cx-{:016x}", xxhash_rust::xxh3::xxh3_64(&buf))
}

/// One sentence a human can act on.
fn explain(kind: CounterexampleKind, scope: &str, stale: &EventView, w: &EventView) -> String {
    let who = |v: &EventView| {
        v.holder
            .as_deref()
            .map_or_else(|| "a participant".to_string(), |h| format!("holder `{h}`"))
    };
    let route = |v: &EventView| {
        v.route.as_deref().map_or_else(
            || "an unnamed route".to_string(),
            |r| format!("route `{r}`"),
        )
    };
    let epoch = |v: &EventView| v.epoch.map_or_else(|| "?".to_string(), |e| e.to_string());
    let did = |v: &EventView| {
        if v.kind == "fence" {
            "installed a fence on"
        } else {
            "committed to"
        }
    };
    match kind {
        CounterexampleKind::StaleCommit => format!(
            "{} {} scope `{scope}` with superseded epoch {} on {} at {}, after epoch {} was established at {} ({}): the conditional commit on that route did not reject the stale epoch.",
            who(stale),
            did(stale),
            epoch(stale),
            route(stale),
            stale.ts,
            epoch(w),
            w.ts,
            w.source
        ),
        CounterexampleKind::StaleIncarnation => format!(
            "{} committed into incarnation {} of scope `{scope}` on {} at {}, after incarnation {} existed at {} ({}): the commit did not check the resource's incarnation.",
            who(stale),
            stale.incarnation,
            route(stale),
            stale.ts,
            w.incarnation,
            w.ts,
            w.source
        ),
        CounterexampleKind::EpochReuse => format!(
            "epoch {} of scope `{scope}` was used by {} at {} and by {} at {} ({}): one token for two holders cannot exclude either, so the authority must issue a new epoch per holder.",
            epoch(stale),
            who(w),
            w.ts,
            who(stale),
            stale.ts,
            w.source
        ),
        CounterexampleKind::GrantRegression => format!(
            "the authority granted epoch {} of scope `{scope}` to {} at {}, after granting the higher epoch {} at {} ({}): epochs must only rise, so check the authority's counter.",
            epoch(stale),
            who(stale),
            stale.ts,
            epoch(w),
            w.ts,
            w.source
        ),
        CounterexampleKind::HolderMismatch => format!(
            "{} committed with epoch {} of scope `{scope}` at {}, but that epoch was granted to {} ({}): a participant is using a token it was not issued.",
            who(stale),
            epoch(stale),
            stale.ts,
            who(w),
            w.source
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_deterministic_and_distinct() {
        let p = Provenance {
            source: "e.ndjson".into(),
            position: 3,
        };
        let a = counterexample_id("p", CounterexampleKind::StaleCommit, "s", 0, &p);
        assert_eq!(
            a,
            counterexample_id("p", CounterexampleKind::StaleCommit, "s", 0, &p)
        );
        assert_eq!(a, "cx-".to_string() + &a[3..]);
        assert_eq!(a.len(), 19);
        assert_ne!(
            a,
            counterexample_id("p", CounterexampleKind::StaleIncarnation, "s", 0, &p)
        );
        assert_ne!(
            a,
            counterexample_id("p", CounterexampleKind::StaleCommit, "s", 1, &p)
        );
        let q = Provenance {
            source: "e.ndjson".into(),
            position: 4,
        };
        assert_ne!(
            a,
            counterexample_id("p", CounterexampleKind::StaleCommit, "s", 0, &q)
        );
        // Length-prefixing keeps ("ab","c") and ("a","bc") apart.
        assert_ne!(
            counterexample_id("ab", CounterexampleKind::StaleCommit, "c", 0, &p),
            counterexample_id("a", CounterexampleKind::StaleCommit, "bc", 0, &p)
        );
    }
}
