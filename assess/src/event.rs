//! The event model, schema v1 (SPEC §2): one commit, fence, grant or heartbeat.
//!
//! Decoders (JSON, OTLP) build an [`Event`] borrowing from their input and call
//! [`Event::validate`], so every source applies the same required-field rules.

use crate::time::EventTime;
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
}

impl Kind {
    /// Parses the wire name.
    pub fn parse(s: &str) -> Option<Kind> {
        Some(match s {
            "commit" => Kind::Commit,
            "fence" => Kind::Fence,
            "grant" => Kind::Grant,
            "heartbeat" => Kind::Heartbeat,
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
        }
    }

    /// Commit or fence: the kinds that establish or violate the fence.
    pub fn is_mutation(self) -> bool {
        matches!(self, Kind::Commit | Kind::Fence)
    }
}

/// Whether the resource accepted the operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The operation took effect (the default).
    #[default]
    Committed,
    /// The resource refused it: the fence worked.
    Rejected,
}

impl Outcome {
    /// Parses the wire name.
    pub fn parse(s: &str) -> Option<Outcome> {
        match s {
            "committed" => Some(Outcome::Committed),
            "rejected" => Some(Outcome::Rejected),
            _ => None,
        }
    }

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Committed => "committed",
            Outcome::Rejected => "rejected",
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
}

impl<'a> Event<'a> {
    /// An event of `kind` at `ts` with every optional field absent.
    pub fn new(kind: Kind, ts: EventTime) -> Event<'a> {
        Event {
            kind,
            ts,
            property: None,
            scope: None,
            epoch: None,
            route: None,
            outcome: Outcome::Committed,
            holder: None,
            op_id: None,
            incarnation: Incarnation(0),
            order: None,
            emitter: None,
            seq: None,
        }
    }

    /// Applies the per-kind rules of SPEC §2 that do not depend on the contract: a grant needs
    /// `scope` and `epoch`, a heartbeat needs `route`, a scope is 1..=512 bytes.
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
            _ => Ok(()),
        }
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
}

impl InvalidEvent {
    /// The offending field.
    pub fn field(self) -> &'static str {
        match self {
            InvalidEvent::EmptyScope | InvalidEvent::LongScope(_) => "scope",
            InvalidEvent::GrantWithout(field) => field,
            InvalidEvent::HeartbeatWithoutRoute => "route",
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
}
