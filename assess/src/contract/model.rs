//! What a contract says (SPEC §3): its properties, their strategies, windows and routes.

use crate::time::Duration;
use serde::Serialize;

/// How a property's exclusion is supposed to be enforced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    /// An authority grants rising epochs; the resource rejects older ones at commit.
    LeaseEpoch,
    /// One actor per key, with an epoch that rises on every placement change.
    KeyedActor,
    /// A lock without a token: cannot exclude a paused holder.
    Mutex,
    /// A lock with a timeout: cannot exclude a holder that outlives it.
    ExpiringLock,
}

impl Strategy {
    pub(super) fn parse(s: &str) -> Option<Strategy> {
        Some(match s {
            "lease_epoch" => Strategy::LeaseEpoch,
            "keyed_actor" => Strategy::KeyedActor,
            "mutex" => Strategy::Mutex,
            "expiring_lock" => Strategy::ExpiringLock,
            _ => return None,
        })
    }

    /// The contract name.
    pub fn as_str(self) -> &'static str {
        match self {
            Strategy::LeaseEpoch => "lease_epoch",
            Strategy::KeyedActor => "keyed_actor",
            Strategy::Mutex => "mutex",
            Strategy::ExpiringLock => "expiring_lock",
        }
    }
}

/// Whether a committed epoch must have been granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Grants {
    /// Grants are used when present.
    Optional,
    /// A committed epoch without a grant is `unknown(ungranted_epoch)`.
    Required,
}

/// A declared code path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Route {
    /// The route name.
    pub name: String,
    /// Whether it goes through the conditional commit.
    pub fenced: bool,
}

/// One `fenced_exclusive_mutation` property.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Property {
    /// Unique name.
    pub name: String,
    /// The protected subject.
    pub subject: String,
    /// The enforcement strategy.
    pub strategy: Strategy,
    /// Bucket width of the time-indexed series.
    #[serde(serialize_with = "ser_duration")]
    pub window: Duration,
    /// Maximum clock difference between emitters.
    #[serde(serialize_with = "ser_duration")]
    pub clock_skew: Duration,
    /// Watermark delay before a window is final.
    #[serde(serialize_with = "ser_duration")]
    pub allowed_lateness: Duration,
    /// A declared route silent longer than this is unobserved.
    #[serde(serialize_with = "ser_duration")]
    pub route_freshness: Duration,
    /// Default trailing window of the current assessment.
    #[serde(serialize_with = "ser_duration")]
    pub assurance_window: Duration,
    /// Grant policy.
    pub grants: Grants,
    /// Declared routes, at least one.
    pub routes: Vec<Route>,
    /// Required premises (`[[property.premise]]`, SPEC §10), in declaration order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub premises: Vec<super::Premise>,
}

fn ser_duration<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(d)
}

impl Property {
    /// The index of a declared route.
    pub fn route_index(&self, name: &str) -> Option<usize> {
        self.routes.iter().position(|r| r.name == name)
    }
}

/// A parsed and validated contract.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Contract {
    /// The properties in declaration order.
    pub properties: Vec<Property>,
}

impl Contract {
    /// The index of a property by name.
    pub fn property_index(&self, name: &str) -> Option<usize> {
        self.properties.iter().position(|p| p.name == name)
    }
}
