//! `fencewatch check --attestations-out FILE` (SPEC §10): a conformance run — a test that
//! resumes old owners with requests delayed across ownership changes — turned into evidence.
//!
//! Per fenced route of each property, required or not, one attestation of the strategy's
//! per-route premise (`conditional_commit` for `lease_epoch`, `stale_activation_rejection` for
//! `keyed_actor`; the lock strategies have none): `failed` if a counterexample's stale event is
//! on the route; else `holds` if a rejected commit on the route certainly follows a committed
//! higher epoch of its scope (a stale write the fence rejected — stricter than the
//! `stale_rejections` count, which counts every rejection); else none (the run did not
//! exercise the route). Each has `ts` = the greatest valid event time of the input,
//! `valid_for` = `--attestation-valid-for` or the premise's `max_age` (24 h when not
//! required), `attester` = `fencewatch check`, `evidence` = `sha256:` of the input files'
//! bytes in order. The file is NDJSON, ready for `POST /v1/events` or `fencewatch attest`.

use fencewatch_assess::contract::{Contract, Strategy};
use fencewatch_assess::report::Report;
use fencewatch_assess::time::{Duration, EventTime};
use serde_json::json;
use sha2::{Digest, Sha256};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// The `valid_for` of a premise that is not required.
const DEFAULT_VALID_FOR: Duration = Duration(86_400_000_000_000);

/// The per-route premise a conformance run establishes for `strategy`.
pub fn route_premise(strategy: Strategy) -> Option<&'static str> {
    strategy
        .premises()
        .iter()
        .find(|k| k.per_route)
        .map(|k| k.name)
}

/// `sha256:<hex>` of the files' bytes, in order.
pub fn digest(files: &[PathBuf]) -> std::io::Result<String> {
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    for f in files {
        let mut file = std::fs::File::open(f)
            .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", f.display())))?;
        loop {
            let n = file.read(&mut buf)?;
            if n == 0 {
                break;
            }
            h.update(&buf[..n]);
        }
    }
    let hex: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
    Ok(format!("sha256:{hex}"))
}

/// The attestations a conformance run's `report` warrants (see the module doc), as JSON
/// objects; `report` must come from a history that [noted the
/// conformance](fencewatch_assess::History::note_conformance).
pub fn attestations(
    contract: &Contract,
    report: &Report,
    evidence: &str,
    valid_for: Option<Duration>,
) -> Vec<serde_json::Value> {
    let Some(c) = &report.conformance else {
        return Vec::new();
    };
    let Some(ts) = c.last_event_time else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for ((prop, pr), rejections) in contract
        .properties
        .iter()
        .zip(&report.properties)
        .zip(&c.fenced_rejections)
    {
        let Some(premise) = route_premise(prop.strategy) else {
            continue;
        };
        for (i, route) in prop.routes.iter().enumerate().filter(|(_, r)| r.fenced) {
            let refuted = pr
                .counterexamples
                .iter()
                .any(|cx| cx.stale.route.as_deref() == Some(route.name.as_str()));
            let outcome = if refuted {
                "failed"
            } else if rejections[i] > 0 {
                "holds"
            } else {
                continue;
            };
            let valid = valid_for
                .or_else(|| {
                    prop.premise_index(premise, Some(&route.name))
                        .map(|k| prop.premises[k].max_age)
                })
                .unwrap_or(DEFAULT_VALID_FOR);
            out.push(json!({
                "kind": "attestation",
                "property": prop.name,
                "premise": premise,
                "route": route.name,
                "ts": EventTime(ts).to_string(),
                "valid_for": valid.to_string(),
                "outcome": outcome,
                "attester": "fencewatch check",
                "evidence": evidence,
            }));
        }
    }
    out
}

/// Writes `lines` as NDJSON to `path` (atomically: a temporary file renamed into place).
pub fn write(path: &Path, lines: &[serde_json::Value]) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    {
        let mut f = std::io::BufWriter::new(std::fs::File::create(&tmp)?);
        for l in lines {
            serde_json::to_writer(&mut f, l)?;
            f.write_all(b"\n")?;
        }
        f.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    }
    std::fs::rename(&tmp, path)
}
