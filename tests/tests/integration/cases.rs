//! The project's own history corpus (`tests/cases`) and the shared conformance corpus beside the
//! repository (skipped with a message when absent, a failure under `CI=true`): every case's
//! verdicts, counterexample kinds and reasons.

use fencewatch_tests::{check_json, repo};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

/// Verdict, counterexample kinds with counts, and unknown reasons of one property.
type PropertySummary = (String, BTreeMap<String, u64>, Vec<String>);

fn summary(doc: &Value) -> BTreeMap<String, PropertySummary> {
    let mut out = BTreeMap::new();
    for p in doc["properties"].as_array().expect("properties") {
        let mut kinds = BTreeMap::new();
        for cx in p["counterexamples"].as_array().expect("counterexamples") {
            *kinds
                .entry(cx["kind"].as_str().unwrap().to_string())
                .or_default() += 1;
        }
        let mut reasons: Vec<String> = p["unknown"]
            .as_object()
            .unwrap()
            .iter()
            .filter(|(_, n)| n.as_u64() > Some(0))
            .map(|(r, _)| r.clone())
            .collect();
        reasons.sort();
        out.insert(
            p["property"].as_str().unwrap().to_string(),
            (p["verdict"].as_str().unwrap().to_string(), kinds, reasons),
        );
    }
    out
}

fn run_case(dir: &Path) -> Result<(), String> {
    let exp: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("expected.json")).unwrap()).unwrap();
    let (code, doc) = check_json(&dir.join("contract.toml"), &[&dir.join("events.ndjson")]);
    let mut problems = Vec::new();
    let verdict = exp["verdict"].as_str().unwrap();
    let want_code = match verdict {
        "holds" => 0,
        "refuted" => 1,
        _ => 2,
    };
    if doc["verdict"] != exp["verdict"] || code != want_code {
        problems.push(format!(
            "verdict {} exit {code}, expected {verdict}",
            doc["verdict"]
        ));
    }
    let got = summary(&doc);
    for (name, e) in exp["properties"].as_object().unwrap() {
        let mut kinds: BTreeMap<String, u64> = BTreeMap::new();
        for (k, n) in e["counterexamples"].as_object().unwrap() {
            kinds.insert(k.clone(), n.as_u64().unwrap());
        }
        let mut reasons: Vec<String> = e["unknown_reasons"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r.as_str().unwrap().to_string())
            .collect();
        reasons.sort();
        let want = (e["verdict"].as_str().unwrap().to_string(), kinds, reasons);
        if got.get(name) != Some(&want) {
            problems.push(format!(
                "{name}: got {:?}, expected {want:?}",
                got.get(name)
            ));
        }
    }
    for key in [
        "unattributed",
        "malformed",
        "events",
        "attestations_ignored",
    ] {
        if let Some(n) = exp.get(key)
            && &doc[key] != n
        {
            problems.push(format!("{key}: got {}, expected {n}", doc[key]));
        }
    }
    if let Some(s) = exp.get("contract_status")
        && &doc["contract"]["status"] != s
    {
        problems.push(format!(
            "contract status {}, expected {s}",
            doc["contract"]["status"]
        ));
    }
    if let Some(epochs) = exp.get("superseding_epochs") {
        let got: Vec<Value> = doc["properties"][0]["counterexamples"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["superseding"]["epoch"].clone())
            .collect();
        if &Value::Array(got.clone()) != epochs {
            problems.push(format!("superseding epochs {got:?}, expected {epochs}"));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

fn run_corpus(root: &Path) -> usize {
    let mut dirs: Vec<_> = std::fs::read_dir(root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("expected.json").exists())
        .collect();
    dirs.sort();
    let failures: Vec<String> = dirs
        .iter()
        .filter_map(|d| run_case(d).err().map(|e| format!("{}: {e}", d.display())))
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        dirs.len(),
        failures.join("\n")
    );
    dirs.len()
}

#[test]
fn own_corpus() {
    assert!(run_corpus(&repo().join("tests/cases")) >= 10);
}

#[test]
fn shared_premise_corpus_when_present() {
    let shared = repo().join("../shared/conformance-premises");
    if shared.is_dir() {
        assert!(run_corpus(&shared) >= 6);
    } else {
        eprintln!("../shared/conformance-premises not present: skipped");
    }
}

#[test]
fn shared_conformance_corpus_when_present() {
    let shared = repo().join("../shared/conformance");
    if shared.is_dir() {
        assert!(run_corpus(&shared) >= 29);
    } else if fencewatch_tests::ci() {
        panic!(
            "CI=true, so the shared conformance corpus must be there: {} is missing \
             (without CI=true this test is skipped)",
            shared.display()
        );
    } else {
        eprintln!("skipped: {} not present", shared.display());
    }
}
