//! Premises in the contract (SPEC §10): each strategy's catalogue, `[[property.premise]]`
//! declarations (a declared premise is a required one) and their validation, and what
//! `contract check` lists for a property. A child of `parse`, whose reader it uses.

use super::{Parser, t_span, tables_of};
use crate::contract::model::{Property, Route, Strategy};
use crate::time::Duration;
use serde::Serialize;
use toml_edit::TableLike;

/// A premise a strategy rests on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PremiseKind {
    /// Its contract name.
    pub name: &'static str,
    /// Whether it is established per fenced route (attested with a `route`).
    pub per_route: bool,
    /// What it says.
    pub meaning: &'static str,
}

const fn kind(name: &'static str, per_route: bool, meaning: &'static str) -> PremiseKind {
    PremiseKind {
        name,
        per_route,
        meaning,
    }
}

const LEASE_EPOCH: &[PremiseKind] = &[
    kind(
        "linearizable_lease",
        false,
        "the lease service linearizes acquisition: two owners never hold one scope at once",
    ),
    kind(
        "monotonic_epoch",
        false,
        "epochs rise strictly each time ownership of a scope passes",
    ),
    kind(
        "conditional_commit",
        true,
        "the commit on the route checks the epoch atomically with its effect",
    ),
    kind(
        "durable_fence",
        false,
        "the fence (the highest epoch seen) survives failover and restarts of the resource",
    ),
    kind(
        "epoch_preserved_on_retry",
        false,
        "a retried operation carries the epoch it started with",
    ),
    kind(
        "external_effects_separate",
        false,
        "effects outside the resource (emails, payments, calls) are handled separately",
    ),
];

const KEYED_ACTOR: &[PremiseKind] = &[
    kind(
        "exclusive_activation",
        false,
        "at most one activation of a key's actor runs at a time",
    ),
    kind(
        "complete_routing",
        false,
        "every message for a key reaches its current activation",
    ),
    kind(
        "stale_activation_rejection",
        true,
        "the commit on the route rejects work of a superseded activation",
    ),
    kind(
        "declared_failover",
        false,
        "failover of a key's actor raises its epoch and is declared",
    ),
    kind(
        "durable_accepted_work",
        false,
        "work an activation accepted survives its failover",
    ),
];

impl Strategy {
    /// The premises the strategy rests on (none for the lock strategies, which are rejected).
    pub fn premises(self) -> &'static [PremiseKind] {
        match self {
            Strategy::LeaseEpoch => LEASE_EPOCH,
            Strategy::KeyedActor => KEYED_ACTOR,
            Strategy::Mutex | Strategy::ExpiringLock => &[],
        }
    }
}

/// A required premise: one `[[property.premise]]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Premise {
    /// A premise of the property's strategy.
    pub name: String,
    /// The fenced route, for a per-route premise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub route: Option<String>,
    /// An attestation supports it at most this long.
    #[serde(serialize_with = "ser_duration")]
    pub max_age: Duration,
}

impl Property {
    /// The index of the required premise `name` on `route` (`None` for a property-wide one).
    pub fn premise_index(&self, name: &str, route: Option<&str>) -> Option<usize> {
        self.premises
            .iter()
            .position(|p| p.name == name && p.route.as_deref() == route)
    }

    /// Every premise of the strategy, per-route ones once per fenced route, each marked
    /// required (with its `max_age`) or not: what `contract check` lists.
    pub fn premise_list(&self) -> Vec<PremiseStatus> {
        let mut out = Vec::new();
        for k in self.strategy.premises() {
            let routes: Vec<Option<&str>> = if k.per_route {
                self.routes
                    .iter()
                    .filter(|r| r.fenced)
                    .map(|r| Some(r.name.as_str()))
                    .collect()
            } else {
                vec![None]
            };
            for route in routes {
                let required = self.premise_index(k.name, route).map(|i| &self.premises[i]);
                out.push(PremiseStatus {
                    name: k.name.to_string(),
                    route: route.map(str::to_string),
                    required: required.is_some(),
                    max_age: required.map(|p| p.max_age.to_string()),
                    meaning: k.meaning.to_string(),
                });
            }
        }
        out
    }
}

/// One premise as `contract check` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PremiseStatus {
    /// The premise.
    pub name: String,
    /// The fenced route, for a per-route premise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub route: Option<String>,
    /// Whether the contract requires it (declares it).
    pub required: bool,
    /// Its `max_age`, when required.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_age: Option<String>,
    /// What it says.
    pub meaning: String,
}

fn ser_duration<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(d)
}

/// Parses the `[[property.premise]]` tables of a property with these `routes` (already
/// parsed), reporting every invalid declaration of SPEC §10.
pub(super) fn parse(
    p: &mut Parser<'_>,
    t: &dyn TableLike,
    ctx: &str,
    strategy: Option<Strategy>,
    routes: &[Route],
) -> Vec<Premise> {
    let mut out: Vec<Premise> = Vec::new();
    let Some((_, item)) = t.get_key_value("premise") else {
        return out;
    };
    let Some(tables) = tables_of(item) else {
        p.err(
            item.span(),
            format!("{ctx}`premise` must be an array of tables (`[[property.premise]]`)"),
        );
        return out;
    };
    for pt in tables {
        let here = t_span(pt);
        let pctx = format!("{ctx}premise: ");
        p.unknown_keys(pt, &["name", "route", "max_age"], &pctx);
        let name = p.string(pt, "name", &pctx);
        if name.is_none() && pt.get("name").is_none() {
            p.err(here.clone(), format!("{pctx}`name` is required"));
        }
        let route = p.string(pt, "route", &pctx);
        let route_span = pt
            .get_key_value("route")
            .and_then(|(_, i)| i.span())
            .or(here.clone());
        let max_age = match pt.get_key_value("max_age") {
            None => {
                p.err(
                    here.clone(),
                    format!("{pctx}`max_age` is required (how long an attestation supports it)"),
                );
                None
            }
            Some(_) => {
                let (d, span) = p.duration(pt, "max_age", "1ns", &pctx);
                if d.0 == 0 {
                    p.err(span, format!("{pctx}`max_age` must be greater than zero"));
                    None
                } else {
                    Some(d)
                }
            }
        };
        let Some(name) = name else { continue };
        let name_span = pt
            .get_key_value("name")
            .and_then(|(_, i)| i.span())
            .or(here.clone());
        let pctx = format!("{ctx}premise `{name}`: ");
        let Some(strategy) = strategy else { continue };
        let Some(k) = strategy.premises().iter().find(|k| k.name == name) else {
            let known: Vec<&str> = strategy.premises().iter().map(|k| k.name).collect();
            let expected = if known.is_empty() {
                format!("strategy {} has none", strategy.as_str())
            } else {
                format!("expected one of: {}", known.join(", "))
            };
            p.err(
                name_span,
                format!(
                    "{pctx}not a premise of strategy {} ({expected})",
                    strategy.as_str()
                ),
            );
            continue;
        };
        match (&route, k.per_route) {
            (None, true) => {
                p.err(
                    here.clone(),
                    format!(
                        "{pctx}a per-route premise: `route` is required (a declared, fenced route)"
                    ),
                );
                continue;
            }
            (Some(r), false) => {
                p.err(
                    route_span,
                    format!("{pctx}a property-wide premise takes no `route` (`{r}` given)"),
                );
                continue;
            }
            (Some(r), true) => match routes.iter().find(|x| x.name == *r) {
                None => {
                    p.err(route_span, format!("{pctx}route `{r}` is not declared"));
                    continue;
                }
                Some(x) if !x.fenced => {
                    p.err(
                        route_span,
                        format!("{pctx}route `{r}` is declared `fenced = false`: it has no conditional commit to attest"),
                    );
                    continue;
                }
                Some(_) => {}
            },
            (None, false) => {}
        }
        if out.iter().any(|q| q.name == name && q.route == route) {
            let on = route
                .as_deref()
                .map(|r| format!(" on route `{r}`"))
                .unwrap_or_default();
            p.err(name_span, format!("{ctx}duplicate premise `{name}`{on}"));
            continue;
        }
        if let Some(max_age) = max_age {
            out.push(Premise {
                name,
                route,
                max_age,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use crate::contract::Contract;

    const HEAD: &str = "[[property]]\nname = \"p\"\nsubject = \"S\"\nstrategy = \"lease_epoch\"\n[[property.route]]\nname = \"r\"\n[[property.route]]\nname = \"u\"\nfenced = false\n";

    fn parse(premises: &str) -> Result<Contract, Vec<(usize, String)>> {
        Contract::parse("c.toml", &format!("{HEAD}{premises}")).map_err(|e| {
            e.diagnostics
                .into_iter()
                .map(|d| (d.line, d.message))
                .collect()
        })
    }

    #[test]
    fn declared_premises_are_required_and_listed() {
        let c = parse(
            "[[property.premise]]\nname = \"conditional_commit\"\nroute = \"r\"\nmax_age = \"24h\"\n[[property.premise]]\nname = \"durable_fence\"\nmax_age = \"7d\"\n",
        );
        // `7d` is no duration: reported on its line.
        let e = c.unwrap_err();
        assert!(
            e.iter().any(|(l, m)| *l == 16 && m.contains("max_age")),
            "{e:?}"
        );
        let c = parse(
            "[[property.premise]]\nname = \"conditional_commit\"\nroute = \"r\"\nmax_age = \"24h\"\n[[property.premise]]\nname = \"durable_fence\"\nmax_age = \"48h\"\n",
        )
        .unwrap();
        let p = &c.properties[0];
        assert_eq!(p.premises.len(), 2);
        assert_eq!(p.premise_index("conditional_commit", Some("r")), Some(0));
        assert_eq!(p.premise_index("conditional_commit", None), None);
        assert_eq!(p.premise_index("durable_fence", None), Some(1));
        let list = p.premise_list();
        // Six premises of lease_epoch, the per-route one once for the one fenced route.
        assert_eq!(list.len(), 6);
        let cc = list
            .iter()
            .find(|s| s.name == "conditional_commit")
            .unwrap();
        assert_eq!((cc.route.as_deref(), cc.required), (Some("r"), true));
        assert_eq!(cc.max_age.as_deref(), Some("24h"));
        let lin = list
            .iter()
            .find(|s| s.name == "linearizable_lease")
            .unwrap();
        assert!(!lin.required && lin.max_age.is_none());
    }

    #[test]
    fn every_invalid_declaration_is_reported_with_its_line() {
        let cases = [
            (
                "name = \"exclusive_activation\"\nmax_age = \"1h\"\n",
                "not a premise of strategy lease_epoch",
            ),
            (
                "name = \"conditional_commit\"\nmax_age = \"1h\"\n",
                "`route` is required",
            ),
            (
                "name = \"conditional_commit\"\nroute = \"x\"\nmax_age = \"1h\"\n",
                "route `x` is not declared",
            ),
            (
                "name = \"conditional_commit\"\nroute = \"u\"\nmax_age = \"1h\"\n",
                "`fenced = false`",
            ),
            (
                "name = \"durable_fence\"\nroute = \"r\"\nmax_age = \"1h\"\n",
                "takes no `route`",
            ),
            ("name = \"durable_fence\"\n", "`max_age` is required"),
            (
                "name = \"durable_fence\"\nmax_age = \"0s\"\n",
                "greater than zero",
            ),
            ("name = \"durable_fence\"\nmax_age = 5\n", "duration string"),
            (
                "name = \"durable_fence\"\nmax_age = \"1h\"\nbogus = 1\n",
                "unknown key `bogus`",
            ),
            ("max_age = \"1h\"\n", "`name` is required"),
        ];
        for (body, needle) in cases {
            let e = parse(&format!("[[property.premise]]\n{body}")).unwrap_err();
            assert!(
                e.iter().any(|(l, m)| *l >= 10 && m.contains(needle)),
                "{body}: {e:?}"
            );
        }
        let dup = "[[property.premise]]\nname = \"conditional_commit\"\nroute = \"r\"\nmax_age = \"1h\"\n";
        let e = parse(&format!("{dup}{dup}")).unwrap_err();
        assert_eq!(e.len(), 1, "{e:?}");
        assert_eq!(e[0].0, 15);
        assert!(
            e[0].1
                .contains("duplicate premise `conditional_commit` on route `r`")
        );
        // Several bad declarations: every one reported.
        let e = parse(&format!(
            "[[property.premise]]\n{}[[property.premise]]\n{}",
            cases[0].0, cases[4].0
        ))
        .unwrap_err();
        assert_eq!(e.len(), 2, "{e:?}");
    }

    #[test]
    fn lock_strategies_have_no_premises() {
        let src = "[[property]]\nname=\"p\"\nsubject=\"S\"\nstrategy=\"mutex\"\n[[property.route]]\nname=\"r\"\n[[property.premise]]\nname=\"durable_fence\"\nmax_age=\"1h\"\n";
        let e = Contract::parse("c.toml", src).unwrap_err();
        assert!(e.to_string().contains("strategy mutex has none"), "{e}");
    }
}
