//! Simulated workloads with injected faults: `check` finds exactly what was injected, in the
//! file's order and in a shuffled order.

use fencewatch_tests::{check_json, run};
use serde_json::Value;
use std::collections::BTreeMap;

fn simulate(
    dir: &std::path::Path,
    args: &[&str],
) -> (std::path::PathBuf, std::path::PathBuf, Value) {
    let events = dir.join("events.ndjson");
    let contract = dir.join("contract.toml");
    let truth = dir.join("truth.json");
    let mut all = vec![
        "simulate",
        "--output",
        events.to_str().unwrap(),
        "--contract-out",
        contract.to_str().unwrap(),
        "--truth",
        truth.to_str().unwrap(),
    ];
    all.extend_from_slice(args);
    let out = run(&all, None);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        contract,
        events,
        serde_json::from_str(&std::fs::read_to_string(truth).unwrap()).unwrap(),
    )
}

fn assert_matches_truth(doc: &Value, truth: &Value) {
    assert_eq!(doc["verdict"], truth["verdict"]);
    let p = &doc["properties"][0];
    let mut kinds: BTreeMap<String, u64> = BTreeMap::new();
    for cx in p["counterexamples"].as_array().unwrap() {
        *kinds
            .entry(cx["kind"].as_str().unwrap().into())
            .or_default() += 1;
    }
    let want: BTreeMap<String, u64> = truth["counterexamples"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_u64().unwrap()))
        .collect();
    assert_eq!(kinds, want);
    let reasons: Vec<&String> = p["unknown"].as_object().unwrap().keys().collect();
    let want: Vec<String> = truth["unknown_reasons"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap().to_string())
        .collect();
    assert_eq!(reasons, want.iter().collect::<Vec<_>>());
}

#[test]
fn every_fault_is_found_in_any_order() {
    let dir = tempfile::tempdir().unwrap();
    let (contract, events, truth) = simulate(
        dir.path(),
        &[
            "--events",
            "20000",
            "--scopes",
            "500",
            "--seed",
            "42",
            "--grants",
            "--paused-old-owner",
            "4",
            "--missing-epoch",
            "3",
            "--unfenced-route",
            "2",
            "--epoch-wraparound",
            "2",
            "--lost-telemetry",
            "5",
            "--clock-skew",
            "3",
            "--rejected",
            "6",
            "--silent-route",
        ],
    );
    let (code, doc) = check_json(&contract, &[&events]);
    assert_eq!(code, 1);
    assert_matches_truth(&doc, &truth);
    let p = &doc["properties"][0];
    assert_eq!(p["unknown"]["missing_epoch"], 3);
    assert_eq!(p["unknown"]["unfenced_route"], 2);
    assert_eq!(p["unknown"]["telemetry_gap"], 5);
    assert_eq!(p["unknown"]["ambiguous_order"], 3);
    assert_eq!(p["stale_rejections"], 6);
    // Reverse the file: exactly the same findings, ids included.
    let text = std::fs::read_to_string(&events).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    lines.reverse();
    let reversed = dir.path().join("reversed.ndjson");
    std::fs::write(&reversed, lines.join("\n")).unwrap();
    let (_, rdoc) = check_json(&contract, &[&reversed]);
    assert_matches_truth(&rdoc, &truth);
    let ids = |d: &Value| {
        let mut v: Vec<String> = d["properties"][0]["counterexamples"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["kind"].as_str().unwrap().to_string() + c["scope"].as_str().unwrap())
            .collect();
        v.sort();
        v
    };
    assert_eq!(ids(&doc), ids(&rdoc));
    assert_eq!(
        doc["properties"][0]["unknown"],
        rdoc["properties"][0]["unknown"]
    );
}

#[test]
fn clean_workload_holds() {
    let dir = tempfile::tempdir().unwrap();
    let (contract, events, truth) = simulate(
        dir.path(),
        &["--events", "5000", "--scopes", "100", "--rfc3339"],
    );
    assert_eq!(truth["verdict"], "holds");
    let (code, doc) = check_json(&contract, &[&events]);
    assert_eq!(code, 0, "{}", doc["properties"][0]["unknown"]);
    assert_matches_truth(&doc, &truth);
}

#[test]
fn output_does_not_depend_on_threads() {
    let dir = tempfile::tempdir().unwrap();
    let (contract, events, _) = simulate(
        dir.path(),
        &[
            "--events",
            "30000",
            "--scopes",
            "3000",
            "--seed",
            "9",
            "--paused-old-owner",
            "7",
            "--clock-skew",
            "5",
            "--missing-epoch",
            "4",
            "--lost-telemetry",
            "3",
        ],
    );
    let out = |threads: &str| {
        run(
            &[
                "check",
                "--contract",
                contract.to_str().unwrap(),
                "--format",
                "json",
                "--threads",
                threads,
                events.to_str().unwrap(),
            ],
            None,
        )
        .stdout
    };
    let one = out("1");
    assert!(one.len() > 1000);
    assert_eq!(one, out("2"));
    assert_eq!(one, out("5"));
}
