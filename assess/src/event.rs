//! The event model, schema v1 (SPEC §2): one commit, fence, grant, heartbeat or attestation
//! (SPEC §10).
//!
//! Decoders (JSON, OTLP) build an [`Event`] borrowing from their input and call
//! [`Event::validate`], so every source applies the same required-field rules.

use crate::time::{Duration, EventTime};
use serde::{Deserialize, Serialize};

/// The fencing token a participant holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize)]
pub struct Epoch(pub u64);

/// The lifetime of a resource; epochs compare only within one incarnation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize)]
pub struct Incarnation(pub u64);

/// A resource-assigned commit sequence, authoritative within one scope and incarnation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize)]
pub struct Order(pub u64);

/// A telemetry source's per-source sequence number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize)]
pub struct Seq(pub u64);

/// The largest scope id accepted, in bytes.
pub const MAX_SCOPE_BYTES: usize = 512;

/// What an event reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// A data mutation at the authoritative commit.
    Commit,
    /// A new high-water mark installed without a data mutation.
    Fence,
    /// The authority issued an epoch.
    Grant,
    /// A route's telemetry is alive.
    Heartbeat,
    /// Evidence that a premise of the strategy holds (or failed) for a while (SPEC §10).
    Attestation,
}

impl Kind {
    /// Parses the wire name.
    pub fn parse(s: &str) -> Option<Kind> {
        Kind::parse_bytes(s.as_bytes())
    }

    /// [`Kind::parse`] of a name's bytes.
    pub fn parse_bytes(s: &[u8]) -> Option<Kind> {
        Some(match s {
            b"commit" => Kind::Commit,
            b"fence" => Kind::Fence,
            b"grant" => Kind::Grant,
            b"heartbeat" => Kind::Heartbeat,
            b"attestation" => Kind::Attestation,
            _ => return None,
        })
    }

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Commit => "commit",
            Kind::Fence => "fence",
            Kind::Grant => "grant",
            Kind::Heartbeat => "heartbeat",
            Kind::Attestation => "attestation",
        }
    }

    /// Commit or fence: the kinds that establish or violate the fence.
    pub fn is_mutation(self) -> bool {
        matches!(self, Kind::Commit | Kind::Fence)
    }
}

/// Whether the resource accepted the operation; on an attestation, whether the premise held.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The operation took effect (the default of every kind but attestations).
    #[default]
    Committed,
    /// The resource refused it: the fence worked.
    Rejected,
    /// The attested premise holds (the default of an attestation).
    Holds,
    /// The attested premise failed.
    Failed,
}

impl Outcome {
    /// Parses the wire name (any kind's: [`Event::validate`] checks it fits the kind).
    pub fn parse(s: &str) -> Option<Outcome> {
        Outcome::parse_bytes(s.as_bytes())
    }

    /// [`Outcome::parse`] of a name's bytes.
    pub fn parse_bytes(s: &[u8]) -> Option<Outcome> {
        match s {
            b"committed" => Some(Outcome::Committed),
            b"rejected" => Some(Outcome::Rejected),
            b"holds" => Some(Outcome::Holds),
            b"failed" => Some(Outcome::Failed),
            _ => None,
        }
    }

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Committed => "committed",
            Outcome::Rejected => "rejected",
            Outcome::Holds => "holds",
            Outcome::Failed => "failed",
        }
    }

    /// The outcome of `kind` when the event gives none.
    pub fn default_of(kind: Kind) -> Outcome {
        match kind {
            Kind::Attestation => Outcome::Holds,
            _ => Outcome::Committed,
        }
    }
}

/// One decoded event. Strings borrow from the decoder's input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event<'a> {
    /// What the event reports.
    pub kind: Kind,
    /// Event time at the authoritative boundary.
    pub ts: EventTime,
    /// The property it belongs to (required when the contract has several).
    pub property: Option<&'a str>,
    /// The protected identity.
    pub scope: Option<&'a str>,
    /// The fencing token.
    pub epoch: Option<Epoch>,
    /// The code path.
    pub route: Option<&'a str>,
    /// Committed (default) or rejected.
    pub outcome: Outcome,
    /// The participant.
    pub holder: Option<&'a str>,
    /// The operation id (informational).
    pub op_id: Option<&'a str>,
    /// Resource lifetime, default 0.
    pub incarnation: Incarnation,
    /// Resource commit sequence.
    pub order: Option<Order>,
    /// Telemetry source.
    pub emitter: Option<&'a str>,
    /// Per-emitter sequence number.
    pub seq: Option<Seq>,
    /// The attested premise (attestations only; ignored on other kinds).
    pub premise: Option<&'a str>,
    /// How long an attestation supports its premise (default and cap: the premise's
    /// `max_age`); ignored on other kinds.
    pub valid_for: Option<Duration>,
    /// Who attests (attestations only).
    pub attester: Option<&'a str>,
    /// A URL or digest of the evidence (attestations only).
    pub evidence: Option<&'a str>,
}

impl<'a> Event<'a> {
    /// An event of `kind` at `ts` with every optional field absent (and the kind's default
    /// outcome).
    pub fn new(kind: Kind, ts: EventTime) -> Event<'a> {
        Event {
            kind,
            ts,
            property: None,
            scope: None,
            epoch: None,
            route: None,
            outcome: Outcome::default_of(kind),
            holder: None,
            op_id: None,
            incarnation: Incarnation(0),
            order: None,
            emitter: None,
            seq: None,
            premise: None,
            valid_for: None,
            attester: None,
            evidence: None,
        }
    }

    /// Applies the per-kind rules of SPEC §2 and §10 that do not depend on the contract: a
    /// grant needs `scope` and `epoch`, a heartbeat needs `route`, an attestation needs
    /// `premise`, a positive `valid_for` and the outcome `holds` or `failed` (which no other
    /// kind may carry), a scope is 1..=512 bytes.
    pub fn validate(&self) -> Result<(), InvalidEvent> {
        if let Some(scope) = self.scope {
            if scope.is_empty() {
                return Err(InvalidEvent::EmptyScope);
            }
            if scope.len() > MAX_SCOPE_BYTES {
                return Err(InvalidEvent::LongScope(scope.len()));
            }
        }
        match self.kind {
            Kind::Grant if self.scope.is_none() => Err(InvalidEvent::GrantWithout("scope")),
            Kind::Grant if self.epoch.is_none() => Err(InvalidEvent::GrantWithout("epoch")),
            Kind::Heartbeat if self.route.is_none() => Err(InvalidEvent::HeartbeatWithoutRoute),
            Kind::Attestation => {
                if !matches!(self.outcome, Outcome::Holds | Outcome::Failed) {
                    return Err(InvalidEvent::NotAnAttestationOutcome(self.outcome));
                }
                if self.premise.is_none() {
                    return Err(InvalidEvent::AttestationWithoutPremise);
                }
                if self.valid_for.is_some_and(|d| d.0 <= 0) {
                    return Err(InvalidEvent::ZeroValidFor);
                }
                Ok(())
            }
            _ if matches!(self.outcome, Outcome::Holds | Outcome::Failed) => {
                Err(InvalidEvent::AttestationOutcome(self.outcome, self.kind))
            }
            _ => Ok(()),
        }
    }

    /// An attestation whose premise failed.
    pub fn is_failed_attestation(&self) -> bool {
        self.kind == Kind::Attestation && self.outcome == Outcome::Failed
    }

    /// A committed commit or fence: the events that establish or violate the fence.
    pub fn is_committed_mutation(&self) -> bool {
        self.kind.is_mutation() && self.outcome == Outcome::Committed
    }
}

/// A per-kind rule of SPEC §2 that an event breaks ([`Event::validate`]); the message names
/// no field, [`InvalidEvent::field`] does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum InvalidEvent {
    /// `scope` is the empty string.
    #[error("must not be empty")]
    EmptyScope,
    /// `scope` is longer than [`MAX_SCOPE_BYTES`] (its length).
    #[error("is {0} bytes, more than {MAX_SCOPE_BYTES}")]
    LongScope(usize),
    /// A grant lacks the field named.
    #[error("is required on a grant")]
    GrantWithout(&'static str),
    /// A heartbeat lacks `route`.
    #[error("is required on a heartbeat")]
    HeartbeatWithoutRoute,
    /// An attestation whose outcome is not `holds` or `failed`.
    #[error("`{}` is not an attestation's outcome (expected holds or failed)", .0.as_str())]
    NotAnAttestationOutcome(Outcome),
    /// An attestation without `premise`.
    #[error("is required on an attestation")]
    AttestationWithoutPremise,
    /// An attestation's `valid_for` of zero.
    #[error("must be greater than zero")]
    ZeroValidFor,
    /// An attestation's outcome on another kind.
    #[error("`{}` is an attestation's outcome (expected committed or rejected on a {})", .0.as_str(), .1.as_str())]
    AttestationOutcome(Outcome, Kind),
}

impl InvalidEvent {
    /// The offending field.
    pub fn field(self) -> &'static str {
        match self {
            InvalidEvent::EmptyScope | InvalidEvent::LongScope(_) => "scope",
            InvalidEvent::GrantWithout(field) => field,
            InvalidEvent::HeartbeatWithoutRoute => "route",
            InvalidEvent::NotAnAttestationOutcome(_) | InvalidEvent::AttestationOutcome(..) => {
                "outcome"
            }
            InvalidEvent::AttestationWithoutPremise => "premise",
            InvalidEvent::ZeroValidFor => "valid_for",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_rules() {
        let t = EventTime(0);
        assert!(
            Event::new(Kind::Commit, t).validate().is_ok(),
            "a commit without fields is unknown, not malformed"
        );
        assert_eq!(
            Event::new(Kind::Grant, t).validate().unwrap_err().field(),
            "scope"
        );
        let mut g = Event::new(Kind::Grant, t);
        g.scope = Some("s");
        assert_eq!(g.validate().unwrap_err().field(), "epoch");
        g.epoch = Some(Epoch(1));
        assert!(g.validate().is_ok());
        assert_eq!(
            Event::new(Kind::Heartbeat, t)
                .validate()
                .unwrap_err()
                .field(),
            "route"
        );
        let mut c = Event::new(Kind::Commit, t);
        c.scope = Some("");
        assert!(c.validate().is_err());
        let long = "x".repeat(513);
        c.scope = Some(&long);
        assert!(c.validate().is_err());
        c.scope = Some(&long[..512]);
        assert!(c.validate().is_ok());
    }

    #[test]
    fn messages_name_the_rule() {
        let t = EventTime(0);
        let mut c = Event::new(Kind::Commit, t);
        let long = "x".repeat(513);
        c.scope = Some(&long);
        assert_eq!(
            c.validate().unwrap_err().to_string(),
            "is 513 bytes, more than 512"
        );
        c.scope = Some("");
        assert_eq!(c.validate().unwrap_err().to_string(), "must not be empty");
        let g = Event::new(Kind::Grant, t);
        assert_eq!(
            g.validate().unwrap_err().to_string(),
            "is required on a grant"
        );
        let h = Event::new(Kind::Heartbeat, t);
        assert_eq!(
            h.validate().unwrap_err().to_string(),
            "is required on a heartbeat"
        );
    }

    #[test]
    fn attestation_rules() {
        let t = EventTime(0);
        let a = Event::new(Kind::Attestation, t);
        assert_eq!(a.outcome, Outcome::Holds, "an attestation holds by default");
        assert_eq!(a.validate().unwrap_err().field(), "premise");
        let mut a = a;
        a.premise = Some("durable_fence");
        assert!(a.validate().is_ok());
        a.outcome = Outcome::Failed;
        assert!(a.validate().is_ok() && a.is_failed_attestation());
        for bad in [Outcome::Committed, Outcome::Rejected] {
            a.outcome = bad;
            assert_eq!(a.validate().unwrap_err().field(), "outcome");
        }
        a.outcome = Outcome::Holds;
        a.valid_for = Some(Duration(0));
        assert_eq!(a.validate().unwrap_err().field(), "valid_for");
        a.valid_for = Some(Duration(1));
        assert!(a.validate().is_ok());
        // `holds` and `failed` belong to attestations only; the premise fields are ignored
        // on other kinds.
        let mut c = Event::new(Kind::Commit, t);
        c.premise = Some("x");
        c.valid_for = Some(Duration(0));
        assert!(c.validate().is_ok());
        for bad in [Outcome::Holds, Outcome::Failed] {
            c.outcome = bad;
            assert_eq!(c.validate().unwrap_err().field(), "outcome");
        }
    }
}
