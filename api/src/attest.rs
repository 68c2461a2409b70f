//! `fencewatch attest`: posts one attestation (SPEC §10) to a running service, for deploy
//! pipelines and conformance jobs.
//!
//! It first reads the service's contract (`GET /v1/contract`) and refuses, without posting, an
//! attestation the service would ignore (a premise or route the property does not require),
//! so that a pipeline never believes it renewed a premise it did not. Then it posts the event
//! to `POST /v1/events`: a `200` means it is durable and assessed. The bearer token comes from
//! `FENCEWATCH_AUTH_TOKEN` or the file named by `FENCEWATCH_AUTH_TOKEN_FILE`, never from a
//! flag (flags show in process listings). Plain HTTP, as `serve` speaks. Exit codes: 0 taken,
//! 3 any error (unreachable, refused, ignored, malformed), 64 a usage error.

use clap::{Args, ValueEnum};
use fencewatch_assess::time::{Duration, EventTime};
use fencewatch_ingest::clock::Clock;
use serde_json::{Value, json};
use std::io::Read;

/// Arguments of `fencewatch attest`.
#[derive(Debug, Args)]
pub struct AttestArgs {
    /// The service's base URL, e.g. `http://fencewatch:8080`.
    #[arg(long, value_name = "URL")]
    url: String,
    /// The premise attested (one the contract requires).
    #[arg(long)]
    premise: String,
    /// The property (required when the contract declares several).
    #[arg(long)]
    property: Option<String>,
    /// The fenced route, for a per-route premise.
    #[arg(long)]
    route: Option<String>,
    /// How long it supports the premise [default and cap: the premise's `max_age`].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    valid_for: Option<Duration>,
    /// Whether the premise holds or failed.
    #[arg(long, value_enum, default_value = "holds")]
    outcome: AttestOutcome,
    /// Who attests (e.g. the pipeline's name).
    #[arg(long)]
    attester: Option<String>,
    /// A URL or digest of the evidence.
    #[arg(long)]
    evidence: Option<String>,
    /// Event time (RFC 3339 or integer nanoseconds) [default: now].
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    ts: Option<EventTime>,
    /// Seconds to wait for each answer of the service.
    #[arg(long, value_name = "SECS", default_value_t = 10)]
    timeout: u64,
}

#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
enum AttestOutcome {
    Holds,
    Failed,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    let d = match s.parse::<u64>() {
        Ok(n) => Duration(i64::try_from(n).map_err(|_| "exceeds 2^63-1 nanoseconds")?),
        Err(_) => Duration::parse(s).map_err(|e| e.to_string())?,
    };
    if d.0 == 0 {
        return Err("must be greater than zero".into());
    }
    Ok(d)
}

fn parse_time(s: &str) -> Result<EventTime, String> {
    match s.parse::<i128>() {
        Ok(n) => EventTime::from_nanos(n).map_err(|e| e.to_string()),
        Err(_) => EventTime::parse_rfc3339(s).map_err(|e| e.to_string()),
    }
}

/// The attestation event `args` describe, at `now` when no `--ts` is given.
fn event(args: &AttestArgs, now: EventTime) -> Value {
    let mut ev = json!({
        "kind": "attestation",
        "premise": args.premise,
        "ts": args.ts.unwrap_or(now).to_string(),
        "outcome": match args.outcome {
            AttestOutcome::Holds => "holds",
            AttestOutcome::Failed => "failed",
        },
    });
    let m = ev.as_object_mut().expect("an object");
    let mut put = |k: &str, v: Option<Value>| {
        if let Some(v) = v {
            m.insert(k.into(), v);
        }
    };
    put("property", args.property.clone().map(Value::from));
    put("route", args.route.clone().map(Value::from));
    put("valid_for", args.valid_for.map(|d| Value::from(d.0)));
    put("attester", args.attester.clone().map(Value::from));
    put("evidence", args.evidence.clone().map(Value::from));
    ev
}

/// Why the contract would ignore the attestation, if it would: `props` is `GET
/// /v1/contract`'s `properties`.
fn ignored_by(props: &[Value], args: &AttestArgs) -> Option<String> {
    let name = |p: &Value| p["name"].as_str().unwrap_or_default().to_string();
    let prop = match &args.property {
        Some(n) => match props.iter().find(|p| p["name"] == n.as_str()) {
            Some(p) => p,
            None => {
                let names: Vec<String> = props.iter().map(name).collect();
                return Some(format!(
                    "the contract has no property `{n}` (it declares: {})",
                    names.join(", ")
                ));
            }
        },
        None if props.len() == 1 => &props[0],
        None => return Some("the contract declares several properties: pass --property".into()),
    };
    let required: Vec<(String, Option<String>)> = prop["premises"]
        .as_array()
        .map(|ps| {
            ps.iter()
                .map(|p| {
                    (
                        p["name"].as_str().unwrap_or_default().to_string(),
                        p["route"].as_str().map(str::to_string),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    if required
        .iter()
        .any(|(n, r)| *n == args.premise && *r == args.route)
    {
        return None;
    }
    let listed: Vec<String> = required
        .iter()
        .map(|(n, r)| match r {
            Some(r) => format!("{n} (route {r})"),
            None => n.clone(),
        })
        .collect();
    let on = args
        .route
        .as_deref()
        .map(|r| format!(" on route `{r}`"))
        .unwrap_or_default();
    Some(format!(
        "property `{}` does not require premise `{}`{on}, so the service would ignore the attestation; it requires: {}",
        name(prop),
        args.premise,
        if listed.is_empty() {
            "no premise".to_string()
        } else {
            listed.join(", ")
        }
    ))
}

/// The bearer token from the environment, if any (`FENCEWATCH_AUTH_TOKEN`, or the file
/// `FENCEWATCH_AUTH_TOKEN_FILE`): what the clients of a running service send.
pub(crate) fn token() -> Result<Option<String>, String> {
    if let Ok(t) = std::env::var("FENCEWATCH_AUTH_TOKEN") {
        return Ok(Some(t.trim().to_string()));
    }
    match std::env::var_os("FENCEWATCH_AUTH_TOKEN_FILE") {
        Some(path) => std::fs::read_to_string(&path)
            .map(|t| Some(t.trim().to_string()))
            .map_err(|e| format!("FENCEWATCH_AUTH_TOKEN_FILE {}: {e}", path.to_string_lossy())),
        None => Ok(None),
    }
}

/// The message of a problem+json answer, else the body's start.
fn problem(body: &str) -> String {
    match serde_json::from_str::<Value>(body) {
        Ok(v) => {
            let mut s = v["detail"]
                .as_str()
                .or(v["title"].as_str())
                .unwrap_or(body)
                .to_string();
            if let Some(errors) = v["errors"].as_array() {
                for e in errors {
                    s.push_str(&format!(
                        "\n  {}: {}",
                        e["field"].as_str().unwrap_or("event"),
                        e["reason"].as_str().unwrap_or_default()
                    ));
                }
            }
            s
        }
        Err(_) => body.chars().take(300).collect(),
    }
}

/// Runs `fencewatch attest` (`clock`: the wall time an attestation without `--ts` takes) and
/// returns the exit code.
pub fn run(args: AttestArgs, clock: &dyn Clock) -> i32 {
    match attest(&args, clock.now()) {
        Ok(line) => {
            println!("{line}");
            0
        }
        Err(e) => {
            eprintln!("fencewatch attest: {e}");
            crate::exit::EXIT_ERROR
        }
    }
}

fn attest(args: &AttestArgs, now: EventTime) -> Result<String, String> {
    let base = args.url.trim_end_matches('/');
    if !base.starts_with("http://") {
        return Err(format!(
            "--url {}: expected http://HOST:PORT (the service speaks plain HTTP)",
            args.url
        ));
    }
    let token = token()?;
    let agent = ureq::Agent::new_with_config(
        ureq::Agent::config_builder()
            .timeout_global(Some(std::time::Duration::from_secs(args.timeout.max(1))))
            .http_status_as_error(false)
            .build(),
    );
    let auth = token.as_ref().map(|t| format!("Bearer {t}"));
    let read = |mut r: ureq::http::Response<ureq::Body>| -> (u16, String) {
        let status = r.status().as_u16();
        let mut body = String::new();
        let _ = r
            .body_mut()
            .as_reader()
            .take(1 << 20)
            .read_to_string(&mut body);
        (status, body)
    };
    let unreachable = |e: ureq::Error| format!("{base}: {e}");
    let mut get = agent.get(format!("{base}/v1/contract"));
    if let Some(a) = &auth {
        get = get.header("Authorization", a);
    }
    let (status, body) = read(get.call().map_err(unreachable)?);
    match status {
        200 => {
            let doc: Value = serde_json::from_str(&body)
                .map_err(|e| format!("{base}/v1/contract: not JSON: {e}"))?;
            let props = doc["properties"].as_array().cloned().unwrap_or_default();
            if let Some(why) = ignored_by(&props, args) {
                return Err(format!("{why}; nothing posted"));
            }
        }
        401 | 403 => {
            return Err(format!(
                "{base}: {status} {}: set FENCEWATCH_AUTH_TOKEN (or FENCEWATCH_AUTH_TOKEN_FILE)",
                problem(&body)
            ));
        }
        _ => return Err(format!("{base}/v1/contract: {status} {}", problem(&body))),
    }
    let ev = event(args, now);
    let mut post = agent
        .post(format!("{base}/v1/events"))
        .header("Content-Type", "application/x-ndjson");
    if let Some(a) = &auth {
        post = post.header("Authorization", a);
    }
    let (status, body) = read(post.send(ev.to_string()).map_err(unreachable)?);
    if status != 200 {
        return Err(format!("{base}/v1/events: {status} {}", problem(&body)));
    }
    let doc: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    let what = if doc["duplicates"].as_u64().unwrap_or(0) > 0 {
        "already taken (an equal delivery)"
    } else {
        "durable and assessed"
    };
    Ok(format!(
        "attestation of {}{} ({}) at {}: {what}",
        args.premise,
        args.route
            .as_deref()
            .map(|r| format!(" on route {r}"))
            .unwrap_or_default(),
        ev["outcome"].as_str().unwrap_or_default(),
        ev["ts"].as_str().unwrap_or_default()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Wrap {
        #[command(flatten)]
        a: AttestArgs,
    }

    fn args(extra: &[&str]) -> AttestArgs {
        let mut v = vec![
            "x",
            "--url",
            "http://h:1",
            "--premise",
            "conditional_commit",
        ];
        v.extend_from_slice(extra);
        Wrap::try_parse_from(v).unwrap().a
    }

    #[test]
    fn the_event_carries_what_was_given() {
        let a = args(&[
            "--route",
            "r",
            "--valid-for",
            "2h",
            "--outcome",
            "failed",
            "--ts",
            "5",
        ]);
        let ev = event(&a, EventTime(9));
        assert_eq!(ev["kind"], "attestation");
        assert_eq!(ev["route"], "r");
        assert_eq!(ev["valid_for"], 7_200_000_000_000i64);
        assert_eq!(ev["outcome"], "failed");
        assert_eq!(ev["ts"], EventTime(5).to_string());
        let ev = event(&args(&[]), EventTime(9));
        assert_eq!(ev["ts"], EventTime(9).to_string());
        assert!(ev.get("valid_for").is_none() && ev.get("route").is_none());
        for bad in [
            &["--valid-for", "0s"][..],
            &["--valid-for", "1d"],
            &["--ts", "noon"],
        ] {
            let mut v = vec!["x", "--url", "u", "--premise", "p"];
            v.extend_from_slice(bad);
            assert!(Wrap::try_parse_from(v).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn an_attestation_the_contract_would_ignore_is_refused() {
        let props = vec![json!({"name": "p", "premises": [
            {"name": "conditional_commit", "route": "r", "max_age": "24h"},
            {"name": "durable_fence", "max_age": "24h"}]})];
        assert_eq!(ignored_by(&props, &args(&["--route", "r"])), None);
        let why = ignored_by(&props, &args(&[])).unwrap();
        assert!(
            why.contains("conditional_commit (route r), durable_fence"),
            "{why}"
        );
        assert!(ignored_by(&props, &args(&["--route", "s"])).is_some());
        assert!(ignored_by(&props, &args(&["--property", "q", "--route", "r"])).is_some());
        let two = vec![props[0].clone(), json!({"name": "q"})];
        assert!(
            ignored_by(&two, &args(&["--route", "r"]))
                .unwrap()
                .contains("--property")
        );
    }
}
