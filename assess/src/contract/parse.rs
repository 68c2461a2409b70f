//! Reading a contract: TOML with file/line diagnostics, every error reported at once.

use super::model::{Contract, Grants, Property, Route, Strategy};
use crate::time::Duration;
use serde::Serialize;
use std::fmt;
use toml_edit::{Item, TableLike};

mod premises;
pub use premises::{Premise, PremiseKind, PremiseStatus};

/// One problem in a contract file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Diagnostic {
    /// The file as named by the caller.
    pub file: String,
    /// 1-based line.
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.file, self.line, self.message)
    }
}

/// Every problem found in a contract.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ContractError {
    /// At least one diagnostic, in file order.
    pub diagnostics: Vec<Diagnostic>,
}

impl fmt::Display for ContractError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, d) in self.diagnostics.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{d}")?;
        }
        Ok(())
    }
}

struct Parser<'s> {
    file: &'s str,
    src: &'s str,
    diags: Vec<Diagnostic>,
}

impl Parser<'_> {
    fn line_of(&self, offset: usize) -> usize {
        self.src.as_bytes()[..offset.min(self.src.len())]
            .iter()
            .filter(|&&b| b == b'\n')
            .count()
            + 1
    }

    fn err(&mut self, span: Option<std::ops::Range<usize>>, message: String) {
        let line = span.map_or(1, |s| self.line_of(s.start));
        self.diags.push(Diagnostic {
            file: self.file.to_string(),
            line,
            message,
        });
    }

    fn string(&mut self, t: &dyn TableLike, key: &str, ctx: &str) -> Option<String> {
        let (_, item) = t.get_key_value(key)?;
        match item.as_str() {
            Some(s) => Some(s.to_string()),
            None => {
                self.err(
                    item.span(),
                    format!("{ctx}`{key}` must be a string, not {}", item.type_name()),
                );
                None
            }
        }
    }

    fn duration(
        &mut self,
        t: &dyn TableLike,
        key: &str,
        default: &str,
        ctx: &str,
    ) -> (Duration, Option<std::ops::Range<usize>>) {
        let Some((_, item)) = t.get_key_value(key) else {
            return (
                Duration::parse(default).expect("default durations parse"),
                t_span(t),
            );
        };
        let span = item.span();
        match item.as_str().map(Duration::parse) {
            Some(Ok(d)) => (d, span),
            Some(Err(e)) => {
                self.err(span.clone(), format!("{ctx}`{key}`: {e}"));
                (
                    Duration::parse(default).expect("default durations parse"),
                    span,
                )
            }
            None => {
                self.err(
                    span.clone(),
                    format!(
                        "{ctx}`{key}` must be a duration string such as \"1m\", not {}",
                        item.type_name()
                    ),
                );
                (
                    Duration::parse(default).expect("default durations parse"),
                    span,
                )
            }
        }
    }

    fn unknown_keys(&mut self, t: &dyn TableLike, allowed: &[&str], ctx: &str) {
        for (k, _) in t.iter() {
            if !allowed.contains(&k) {
                let span = t.get_key_value(k).and_then(|(key, _)| key.span());
                self.err(
                    span,
                    format!(
                        "{ctx}unknown key `{k}` (expected one of: {})",
                        allowed.join(", ")
                    ),
                );
            }
        }
    }
}

fn t_span(t: &dyn TableLike) -> Option<std::ops::Range<usize>> {
    t.iter()
        .next()
        .and_then(|(k, _)| t.get_key_value(k))
        .and_then(|(k, _)| k.span())
}

/// The entries of an array of tables (`[[x]]`) or of an inline array of inline tables.
fn tables_of(item: &Item) -> Option<Vec<&dyn TableLike>> {
    if let Some(aot) = item.as_array_of_tables() {
        return Some(aot.iter().map(|t| t as &dyn TableLike).collect());
    }
    let arr = item.as_array()?;
    arr.iter()
        .map(|v| v.as_inline_table().map(|t| t as &dyn TableLike))
        .collect()
}

const PROPERTY_KEYS: &[&str] = &[
    "name",
    "subject",
    "strategy",
    "window",
    "clock_skew",
    "allowed_lateness",
    "route_freshness",
    "assurance_window",
    "grants",
    "route",
    "premise",
];

impl Contract {
    /// Parses and validates a contract; `file` names it in diagnostics.
    pub fn parse(file: &str, src: &str) -> Result<Contract, ContractError> {
        let mut p = Parser {
            file,
            src,
            diags: Vec::new(),
        };
        let doc = match toml_edit::Document::parse(src) {
            Ok(doc) => doc,
            Err(e) => {
                p.err(e.span(), format!("invalid TOML: {}", e.message().trim()));
                return Err(ContractError {
                    diagnostics: p.diags,
                });
            }
        };
        let root = doc.as_table();
        p.unknown_keys(root, &["property"], "");
        let mut properties = Vec::new();
        match root.get("property") {
            None => p.err(None, "no `[[property]]` declared".into()),
            Some(item) => match tables_of(item) {
                None => p.err(
                    item.span(),
                    "`property` must be an array of tables (`[[property]]`)".into(),
                ),
                Some(tables) => {
                    for t in tables {
                        if let Some(prop) = parse_property(&mut p, t) {
                            properties.push(prop);
                        }
                    }
                }
            },
        }
        let mut seen: Vec<&str> = Vec::new();
        let mut dup = Vec::new();
        for prop in &properties {
            if seen.contains(&prop.name.as_str()) {
                dup.push(prop.name.clone());
            }
            seen.push(&prop.name);
        }
        for name in dup {
            let at = src
                .match_indices(&format!("\"{name}\""))
                .nth(1)
                .map(|(i, _)| i..i + 1);
            p.err(at, format!("duplicate property name `{name}`"));
        }
        if p.diags.is_empty() {
            Ok(Contract { properties })
        } else {
            p.diags.sort_by_key(|d| d.line);
            Err(ContractError {
                diagnostics: p.diags,
            })
        }
    }
}

fn parse_property(p: &mut Parser<'_>, t: &dyn TableLike) -> Option<Property> {
    let errors_before = p.diags.len();
    let name = p.string(t, "name", "property: ");
    let ctx = match &name {
        Some(n) => format!("property `{n}`: "),
        None => "property: ".to_string(),
    };
    let here = t_span(t);
    if name.is_none() && t.get("name").is_none() {
        p.err(here.clone(), "property: `name` is required".into());
    }
    if name.as_deref() == Some("") {
        p.err(here.clone(), format!("{ctx}`name` must not be empty"));
    }
    p.unknown_keys(t, PROPERTY_KEYS, &ctx);
    let subject = p.string(t, "subject", &ctx);
    if subject.is_none() && t.get("subject").is_none() {
        p.err(here.clone(), format!("{ctx}`subject` is required"));
    }
    let strategy = match t.get_key_value("strategy") {
        None => {
            p.err(
                here.clone(),
                format!(
                    "{ctx}`strategy` is required (lease_epoch, keyed_actor, mutex or expiring_lock)"
                ),
            );
            None
        }
        Some((_, item)) => {
            let s = item.as_str().and_then(Strategy::parse);
            if s.is_none() {
                p.err(item.span(), format!("{ctx}`strategy` must be one of lease_epoch, keyed_actor, mutex, expiring_lock"));
            }
            s
        }
    };
    let (window, wspan) = p.duration(t, "window", "1m", &ctx);
    let (clock_skew, _) = p.duration(t, "clock_skew", "100ms", &ctx);
    let (allowed_lateness, lspan) = p.duration(t, "allowed_lateness", "30s", &ctx);
    let (route_freshness, fspan) = p.duration(t, "route_freshness", "5m", &ctx);
    let (assurance_window, aspan) = p.duration(t, "assurance_window", "15m", &ctx);
    if window.0 == 0 {
        p.err(wspan, format!("{ctx}`window` must be greater than zero"));
    }
    if route_freshness.0 == 0 {
        p.err(
            fspan.clone(),
            format!("{ctx}`route_freshness` must be greater than zero"),
        );
    }
    if assurance_window.0 == 0 {
        p.err(
            aspan,
            format!("{ctx}`assurance_window` must be greater than zero"),
        );
    }
    if allowed_lateness >= route_freshness && route_freshness.0 != 0 {
        p.err(
            lspan.or(fspan),
            format!("{ctx}`allowed_lateness` ({allowed_lateness}) must be below `route_freshness` ({route_freshness})"),
        );
    }
    let grants = match t.get_key_value("grants") {
        None => Grants::Optional,
        Some((_, item)) => match item.as_str() {
            Some("optional") => Grants::Optional,
            Some("required") => Grants::Required,
            _ => {
                p.err(
                    item.span(),
                    format!("{ctx}`grants` must be \"optional\" or \"required\""),
                );
                Grants::Optional
            }
        },
    };
    let mut routes = Vec::new();
    match t.get_key_value("route") {
        None => p.err(
            here,
            format!("{ctx}at least one `[[property.route]]` is required"),
        ),
        Some((_, item)) => match tables_of(item) {
            None => p.err(
                item.span(),
                format!("{ctx}`route` must be an array of tables (`[[property.route]]`)"),
            ),
            Some(rs) if rs.is_empty() => {
                p.err(item.span(), format!("{ctx}at least one route is required"))
            }
            Some(rs) => {
                for r in rs {
                    let rspan = t_span(r);
                    p.unknown_keys(r, &["name", "fenced"], &format!("{ctx}route: "));
                    let rname = p.string(r, "name", &format!("{ctx}route: "));
                    if rname.is_none() && r.get("name").is_none() {
                        p.err(rspan.clone(), format!("{ctx}route: `name` is required"));
                    }
                    let fenced = match r.get_key_value("fenced") {
                        None => true,
                        Some((_, item)) => item.as_bool().unwrap_or_else(|| {
                            p.err(
                                item.span(),
                                format!("{ctx}route: `fenced` must be true or false"),
                            );
                            true
                        }),
                    };
                    if let Some(rname) = rname {
                        if rname.is_empty() {
                            p.err(rspan, format!("{ctx}route: `name` must not be empty"));
                        } else if routes.iter().any(|x: &Route| x.name == rname) {
                            p.err(rspan, format!("{ctx}duplicate route name `{rname}`"));
                        } else {
                            routes.push(Route {
                                name: rname,
                                fenced,
                            });
                        }
                    }
                }
            }
        },
    }
    let premises = premises::parse(p, t, &ctx, strategy, &routes);
    if p.diags.len() != errors_before {
        return None;
    }
    Some(Property {
        name: name?,
        subject: subject?,
        strategy: strategy?,
        window,
        clock_skew,
        allowed_lateness,
        route_freshness,
        assurance_window,
        grants,
        routes,
        premises,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::{STALE_AUTHORITY_EXCLUSION, Status};

    const GOOD: &str = r#"
[[property]]
name = "order-mutation"
subject = "Order"
strategy = "lease_epoch"
window = "1m"
clock_skew = "50ms"
  [[property.route]]
  name = "orders-api.transition"
  [[property.route]]
  name = "admin.repair"
  fenced = false
"#;

    #[test]
    fn parses_with_defaults() {
        let c = Contract::parse("c.toml", GOOD).unwrap();
        let p = &c.properties[0];
        assert_eq!(p.clock_skew.0, 50_000_000);
        assert_eq!(p.allowed_lateness.0, 30_000_000_000);
        assert_eq!(p.route_freshness.0, 300_000_000_000);
        assert_eq!(p.assurance_window.0, 900_000_000_000);
        assert_eq!(p.grants, Grants::Optional);
        assert_eq!(p.routes.len(), 2);
        assert!(!p.routes[1].fenced);
    }

    #[test]
    fn unfenced_route_is_a_rejected_candidate() {
        let c = Contract::parse("c.toml", GOOD).unwrap().compile();
        assert_eq!(c.status, Status::Rejected);
        assert_eq!(c.missing.len(), 1);
        assert_eq!(c.missing[0].obligation, STALE_AUTHORITY_EXCLUSION);
        assert_eq!(c.missing[0].route.as_deref(), Some("admin.repair"));
    }

    #[test]
    fn lock_strategies_are_rejected_and_lease_accepted() {
        for (s, ok) in [
            ("mutex", false),
            ("expiring_lock", false),
            ("lease_epoch", true),
            ("keyed_actor", true),
        ] {
            let src = format!(
                "[[property]]\nname=\"p\"\nsubject=\"S\"\nstrategy=\"{s}\"\n[[property.route]]\nname=\"r\"\n"
            );
            let c = Contract::parse("c.toml", &src).unwrap().compile();
            assert_eq!(c.status == Status::Accepted, ok, "{s}");
            if ok {
                assert!(c.obligations.len() >= 3);
            } else {
                assert_eq!(c.missing[0].obligation, STALE_AUTHORITY_EXCLUSION);
            }
        }
    }

    #[test]
    fn reports_every_error_with_its_line() {
        let src = "[[property]]\nname = \"p\"\nsubject = \"S\"\nstrategy = \"lease_epoch\"\nwindow = \"0s\"\nallowed_lateness = \"10m\"\nbogus = 1\n[[property.route]]\nname = \"r\"\n[[property.route]]\nname = \"r\"\n[[property]]\nname = \"p\"\nsubject = \"S\"\nstrategy = \"lease_epoch\"\n";
        let e = Contract::parse("c.toml", src).unwrap_err();
        let lines: Vec<(usize, &str)> = e
            .diagnostics
            .iter()
            .map(|d| (d.line, d.message.as_str()))
            .collect();
        assert!(
            lines
                .iter()
                .any(|(l, m)| *l == 5 && m.contains("`window` must be greater than zero")),
            "{lines:?}"
        );
        assert!(
            lines
                .iter()
                .any(|(l, m)| *l == 6 && m.contains("allowed_lateness")),
            "{lines:?}"
        );
        assert!(
            lines
                .iter()
                .any(|(l, m)| *l == 7 && m.contains("unknown key `bogus`")),
            "{lines:?}"
        );
        assert!(
            lines
                .iter()
                .any(|(l, m)| *l == 11 && m.contains("duplicate route")),
            "{lines:?}"
        );
        assert!(
            lines.iter().any(|(_, m)| m.contains("at least one")),
            "{lines:?}"
        );
        assert!(e.to_string().starts_with("c.toml:"));
    }

    #[test]
    fn toml_syntax_error_has_a_line() {
        let e = Contract::parse("c.toml", "[[property]]\nname = \n").unwrap_err();
        assert_eq!(e.diagnostics[0].line, 2);
    }

    #[test]
    fn duplicate_property_names() {
        let one = "[[property]]\nname=\"p\"\nsubject=\"S\"\nstrategy=\"lease_epoch\"\n[[property.route]]\nname=\"r\"\n";
        let e = Contract::parse("c.toml", &format!("{one}{one}")).unwrap_err();
        assert!(
            e.diagnostics
                .iter()
                .any(|d| d.message.contains("duplicate property") && d.line == 8),
            "{e}"
        );
    }
}
