//! Compiling a contract: each property's strategy is an accepted or a rejected candidate, with
//! the obligations it meets or misses.

use super::model::{Contract, Property, Strategy};
use serde::Serialize;
use std::fmt;

/// Accepted or rejected candidate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// The strategy can exclude stale authority, given the residual obligations.
    Accepted,
    /// A missing obligation makes exclusion impossible to establish.
    Rejected,
}

/// An obligation the contract cannot meet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Missing {
    /// The property.
    pub property: String,
    /// The missing obligation, e.g. `stale_authority_exclusion`.
    pub obligation: String,
    /// The route that lacks it, when it is route-specific.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub route: Option<String>,
    /// Why.
    pub reason: String,
}

impl fmt::Display for Missing {
    /// `stale_authority_exclusion on route `x`: why`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.obligation)?;
        if let Some(r) = &self.route {
            write!(f, " on route `{r}`")?;
        }
        write!(f, ": {}", self.reason)
    }
}

/// One property's compilation result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PropertyStatus {
    /// The property.
    pub property: String,
    /// Accepted or rejected.
    pub status: Status,
    /// Residual obligations the system must meet outside what fencewatch observes.
    pub obligations: Vec<String>,
    /// Obligations that cannot be met (empty when accepted).
    pub missing: Vec<Missing>,
    /// Every premise of the strategy (per-route ones per fenced route), marked required or not
    /// (SPEC §10).
    pub premises: Vec<super::PremiseStatus>,
}

/// The whole contract's compilation result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Compiled {
    /// Rejected when any property is.
    pub status: Status,
    /// The residual obligations of all properties, deduplicated.
    pub obligations: Vec<String>,
    /// Every missing obligation.
    pub missing: Vec<Missing>,
    /// Per property.
    pub properties: Vec<PropertyStatus>,
}

/// The obligation every fenced strategy must meet and locks cannot.
pub const STALE_AUTHORITY_EXCLUSION: &str = "stale_authority_exclusion";

fn compile_property(p: &Property) -> PropertyStatus {
    let mut missing = Vec::new();
    let mut obligations = vec![
        "every protected mutation is routed through the conditional commit that checks the epoch".to_string(),
        "the epoch is preserved across retries of one operation".to_string(),
        "external effects (emails, payments, calls to other systems) are handled separately: the fence protects only the resource's own commit".to_string(),
    ];
    match p.strategy {
        Strategy::LeaseEpoch => obligations.push(
            "the authority issues strictly increasing epochs per scope and incarnation".into(),
        ),
        Strategy::KeyedActor => {
            obligations.push("every placement change of a key's actor raises its epoch".into())
        }
        Strategy::Mutex | Strategy::ExpiringLock => {
            let what = if p.strategy == Strategy::Mutex {
                "a mutex"
            } else {
                "an expiring lock"
            };
            missing.push(Missing {
                property: p.name.clone(),
                obligation: STALE_AUTHORITY_EXCLUSION.into(),
                route: None,
                reason: format!(
                    "{what} carries no fencing token, so the resource cannot reject a holder that paused and resumed after losing the lock"
                ),
            });
        }
    }
    for r in p.routes.iter().filter(|r| !r.fenced) {
        missing.push(Missing {
            property: p.name.clone(),
            obligation: STALE_AUTHORITY_EXCLUSION.into(),
            route: Some(r.name.clone()),
            reason: format!("route `{}` bypasses the conditional commit, so a stale owner's write through it is not rejected", r.name),
        });
    }
    let status = if missing.is_empty() {
        Status::Accepted
    } else {
        Status::Rejected
    };
    if status == Status::Rejected {
        obligations.clear();
    }
    PropertyStatus {
        property: p.name.clone(),
        status,
        obligations,
        missing,
        premises: p.premise_list(),
    }
}

impl Contract {
    /// Compiles the contract: each property is an accepted or rejected candidate.
    pub fn compile(&self) -> Compiled {
        let properties: Vec<PropertyStatus> =
            self.properties.iter().map(compile_property).collect();
        let status = if properties.iter().all(|p| p.status == Status::Accepted) {
            Status::Accepted
        } else {
            Status::Rejected
        };
        let mut obligations = Vec::new();
        for p in &properties {
            for o in &p.obligations {
                if !obligations.contains(o) {
                    obligations.push(o.clone());
                }
            }
        }
        let missing = properties
            .iter()
            .flat_map(|p| p.missing.iter().cloned())
            .collect();
        Compiled {
            status,
            obligations,
            missing,
            properties,
        }
    }
}
