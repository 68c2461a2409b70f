//! `fencewatch check` over the evidence archive (issue 14, SPEC §9): the Parquet files `serve`
//! wrote are re-assessed offline, with the same report as the NDJSON they came from.

use fencewatch_tests::service::{TestService, now_ns};
use fencewatch_tests::{ORDERS_CONTRACT, check_json, run};
use std::path::Path;

const SEC: i64 = 1_000_000_000;

/// A history near now with a stale commit (a counterexample), a line delivered twice, an
/// unattributed event, an emitter with a gap in its seqs, and malformed lines: one whose `ts`
/// parsed, one whose did not (placed by the valid events read before it), and a heartbeat
/// near now.
fn history(now: i64) -> Vec<String> {
    let t0 = now - 200 * SEC;
    let route = "orders-api.transition";
    let mut lines = Vec::new();
    for i in 0..12i64 {
        for e in 1..=2i64 {
            lines.push(format!(
                r#"{{"kind":"commit","ts":{},"scope":"order-{i}","epoch":{e},"route":"{route}","holder":"worker-{e}","emitter":"api-1","seq":{}}}"#,
                t0 + i * SEC + e * SEC,
                lines.len() + usize::from(i >= 6),
            ));
        }
        if i == 4 {
            lines.push(r#"{"kind":"commit","ts":"yesterday"}"#.to_string());
        }
    }
    let dup = lines[3].clone();
    lines.push(dup);
    lines.push(format!(
        r#"{{"kind":"commit","ts":{},"scope":"order-3","epoch":1,"route":"{route}","holder":"paused-worker","op_id":"op-9"}}"#,
        t0 + 30 * SEC
    ));
    lines.push(format!(
        r#"{{"kind":"commit","ts":{},"property":"billing","scope":"inv-1","epoch":1}}"#,
        t0 + 31 * SEC
    ));
    lines.push(format!(
        r#"{{"kind":"commit","ts":{},"scope":"order-5","epoch":"two"}}"#,
        t0 + 32 * SEC
    ));
    lines.push(format!(
        r#"{{"kind":"heartbeat","ts":{},"route":"settlement-worker.settle"}}"#,
        t0 + 33 * SEC
    ));
    // The watermark passes the windows above: their counterexamples are final, and archived.
    lines.push(format!(
        r#"{{"kind":"heartbeat","ts":{},"route":"orders-api.transition"}}"#,
        now - SEC
    ));
    lines
}

fn check_text(contract: &Path, arg: &Path) -> (i32, String) {
    let c = contract.display().to_string();
    let a = arg.display().to_string();
    let out = run(&["check", "--contract", &c, "--format", "json", &a], None);
    (
        out.status.code().expect("exit code"),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn check_reads_the_archive_and_reports_as_for_the_ndjson_it_came_from() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("history.ndjson");
    std::fs::write(&file, history(now_ns()).join("\n") + "\n").unwrap();
    let arg = file.display().to_string();
    let svc = TestService::start(dir.path(), ORDERS_CONTRACT, &["--ingest-file", &arg]);
    svc.wait_for("the file ingested", 60, |s| {
        s.stderr().contains("file ingested")
    });
    let (contract, data_dir) = (svc.contract.clone(), svc.data_dir.clone());
    // SIGTERM flushes the archive.
    let (status, log) = svc.terminate();
    assert!(status.success(), "{log}");

    let (code, ndjson) = check_json(&contract, &[&file]);
    assert_eq!(code, 1, "refuted: {ndjson}");
    let cx = &ndjson["properties"][0]["counterexamples"][0];
    assert_eq!(cx["stale"]["holder"], "paused-worker", "{ndjson}");
    assert_eq!(ndjson["malformed"], 2, "{ndjson}");
    assert_eq!(ndjson["unattributed"], 1, "{ndjson}");
    assert_eq!(ndjson["duplicates"], 1, "{ndjson}");

    // The archive's events (and malformed lines) carry `history.ndjson:<line>` as their
    // source, which `check` takes as their provenance: the report is the same, counterexample
    // ids and sample sources included. But for one thing: the archive holds the events
    // `serve` applied, and `serve` dropped the equal duplicate delivery (line 26, a copy of line 4) instead of
    // applying it, so it is neither among the events nor counted as a duplicate.
    let mut expected = ndjson.clone();
    expected["events"] = (ndjson["events"].as_u64().unwrap() - 1).into();
    expected["duplicates"] = 0.into();
    let archive = data_dir.join("archive");
    for input in [data_dir.clone(), archive.clone(), archive.join("events")] {
        let (code, parquet) = check_json(&contract, &[&input]);
        assert_eq!(code, 1, "{}: {parquet}", input.display());
        assert_eq!(
            parquet,
            expected,
            "{}: the report differs from the NDJSON's",
            input.display()
        );
    }
    let (_, stderr) = check_text(&contract, &data_dir);
    assert!(
        stderr.contains("1 event(s) were archived unattributed"),
        "the lost property name is said: {stderr}"
    );

    // One events file alone (no malformed lines: those are in `malformed`) is the history
    // without them, under the same ids.
    let events: Vec<_> = std::fs::read_dir(archive.join("events"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "parquet"))
        .collect();
    assert_eq!(events.len(), 1, "{events:?}");
    let (code, one) = check_json(&contract, &[&events[0]]);
    assert_eq!(code, 1, "{one}");
    assert_eq!(one["malformed"], 0);
    assert_eq!(one["events"], expected["events"]);
    assert_eq!(
        one["properties"][0]["counterexamples"][0]["id"], cx["id"],
        "{one}"
    );
    // Under a new contract (a longer allowed lateness, the same windows), re-assessed offline.
    let lax = dir.path().join("lax.toml");
    std::fs::write(
        &lax,
        ORDERS_CONTRACT.replace("allowed_lateness = \"10s\"", "allowed_lateness = \"30s\""),
    )
    .unwrap();
    let (code_n, lax_ndjson) = check_json(&lax, &[&file]);
    let (code_p, lax_parquet) = check_json(&lax, &[&data_dir]);
    expected = lax_ndjson.clone();
    expected["events"] = (lax_ndjson["events"].as_u64().unwrap() - 1).into();
    expected["duplicates"] = 0.into();
    assert_eq!((code_p, &lax_parquet), (code_n, &expected));

    // Input that is not the events schema, or not Parquet, is an error (exit 3) naming it.
    let cxs: Vec<_> = std::fs::read_dir(archive.join("counterexamples"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "parquet"))
        .collect();
    let (code, stderr) = check_text(&contract, &cxs[0]);
    assert_eq!(code, 3, "{stderr}");
    assert!(
        stderr.contains("not a Parquet file of the archive's `events` schema")
            && stderr.contains("no column `ts`"),
        "{stderr}"
    );
    let fake = dir.path().join("fake.parquet");
    std::fs::copy(&file, &fake).unwrap();
    let (code, stderr) = check_text(&contract, &fake);
    assert_eq!(code, 3, "{stderr}");
    assert!(stderr.contains("fake.parquet"), "{stderr}");
    let c = contract.display().to_string();
    let d = data_dir.display().to_string();
    let out = run(
        &["check", "--contract", &c, "--max-memory", "1GiB", &d],
        None,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{stderr}");
    assert!(
        stderr.contains("--max-memory reads NDJSON only"),
        "{stderr}"
    );
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let (code, stderr) = check_text(&contract, &empty);
    assert_eq!(code, 3, "{stderr}");
}
