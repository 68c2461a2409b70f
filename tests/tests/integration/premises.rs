//! Premises (SPEC §10) end to end: `fencewatch attest` against a running service (its token
//! from the environment, an attestation the contract would ignore refused), the service's
//! premise view as support runs out, `check --attestations-out` on a simulated conformance run
//! turning into the evidence a production history needs, and `contract check`'s listing.

use fencewatch_tests::service::{TestService, now_ns, request};
use fencewatch_tests::{ORDERS_CONTRACT, bin, commit_line, run, run_in};
use std::path::Path;
use std::process::{Command, Output, Stdio};

/// [`ORDERS_CONTRACT`] requiring two premises, one per route.
fn contract() -> String {
    format!(
        "{ORDERS_CONTRACT}  [[property.premise]]\n  name = \"durable_fence\"\n  max_age = \"24h\"\n  [[property.premise]]\n  name = \"conditional_commit\"\n  route = \"orders-api.transition\"\n  max_age = \"1h\"\n"
    )
}

fn attest(url: &str, token: Option<&str>, args: &[&str]) -> Output {
    let mut cmd = Command::new(bin());
    cmd.args(["attest", "--url", url])
        .args(args)
        .env_remove("FENCEWATCH_AUTH_TOKEN")
        .env_remove("FENCEWATCH_AUTH_TOKEN_FILE")
        .stdin(Stdio::null());
    if let Some(t) = token {
        cmd.env("FENCEWATCH_AUTH_TOKEN", t);
    }
    cmd.output().expect("run fencewatch attest")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `fencewatch attest` with `args` that must succeed: exit 0, the attestation durable.
fn attest_ok(url: &str, token: Option<&str>, args: &[&str]) {
    let out = attest(url, token, args);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("durable and assessed"),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn attest_against_a_running_service() {
    let dir = tempfile::tempdir().unwrap();
    let svc = TestService::start(dir.path(), &contract(), &["--auth-token", "s3cret"]);
    let url = format!("http://{}", svc.addr);
    let auth = [("Authorization", "Bearer s3cret")];
    let premises = || {
        let r = request(svc.addr, "GET", "/v1/premises", &auth, b"").unwrap();
        assert_eq!(r.status, 200, "{}", r.text());
        r.json()
    };
    // Nothing attested yet: both premises unattested, the verdict unknown.
    let now = now_ns();
    let body = format!(
        "{}\n{}\n",
        commit_line(now - 2_000_000_000, "o-1", 1, "orders-api.transition"),
        commit_line(now - 1_000_000_000, "o-1", 1, "settlement-worker.settle")
    );
    let r = request(
        svc.addr,
        "POST",
        "/v1/events",
        &[
            ("Authorization", "Bearer s3cret"),
            ("Content-Type", "application/x-ndjson"),
        ],
        body.as_bytes(),
    )
    .unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    let p = premises();
    assert_eq!(p["premises"].as_array().unwrap().len(), 2, "{p}");
    assert!(
        p["premises"]
            .as_array()
            .unwrap()
            .iter()
            .all(|q| q["state"] == "unattested"),
        "{p}"
    );
    // Without the token: refused, and it says where the token comes from.
    let out = attest(&url, None, &["--premise", "durable_fence"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("FENCEWATCH_AUTH_TOKEN"),
        "{}",
        text(&out.stderr)
    );
    // A premise the contract does not require: refused before anything is posted.
    let out = attest(&url, Some("s3cret"), &["--premise", "linearizable_lease"]);
    assert_eq!(out.status.code(), Some(3));
    let err = text(&out.stderr);
    assert!(
        err.contains("does not require premise `linearizable_lease`"),
        "{err}"
    );
    assert!(
        err.contains("durable_fence, conditional_commit (route orders-api.transition)"),
        "{err}"
    );
    // The per-route premise without its route: refused too.
    let out = attest(&url, Some("s3cret"), &["--premise", "conditional_commit"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stdout));
    // Both premises attested, the per-route one valid for 30 minutes.
    let ts = (now - 60_000_000_000).to_string();
    for args in [
        &[
            "--premise",
            "durable_fence",
            "--attester",
            "deploy/42",
            "--evidence",
            "https://ci.example/42",
            "--ts",
            &ts,
        ][..],
        &[
            "--premise",
            "conditional_commit",
            "--route",
            "orders-api.transition",
            "--valid-for",
            "30m",
            "--ts",
            &ts,
        ],
    ] {
        attest_ok(&url, Some("s3cret"), args);
    }
    let p = premises();
    let list = p["premises"].as_array().unwrap();
    assert!(list.iter().all(|q| q["state"] == "supported"), "{p}");
    let fence = list.iter().find(|q| q["name"] == "durable_fence").unwrap();
    assert_eq!(fence["last"]["attester"], "deploy/42");
    assert_eq!(fence["last"]["evidence"], "https://ci.example/42");
    assert_eq!(fence["attestations"], 1);
    let cc = list
        .iter()
        .find(|q| q["name"] == "conditional_commit")
        .unwrap();
    assert_eq!(cc["route"], "orders-api.transition");
    assert!(cc["supported_until"].is_string(), "{cc}");
    // valid_for 30m: supported until ts + 30m, exclusive.
    let end = now - 60_000_000_000 + 1_800_000_000_000;
    let state_at = |t: i64| {
        let r = request(svc.addr, "GET", &format!("/v1/premises?at={t}"), &auth, b"").unwrap();
        let doc = r.json();
        doc["premises"]
            .as_array()
            .unwrap()
            .iter()
            .find(|q| q["name"] == "conditional_commit")
            .unwrap()["state"]
            .clone()
    };
    assert_eq!(state_at(end - 1), "supported");
    assert_eq!(state_at(end), "unattested");
    // The metrics and the assurance say the same.
    let m = request(svc.addr, "GET", "/metrics", &[], b"")
        .unwrap()
        .text();
    assert!(
        m.contains(r#"fencewatch_premise_supported{property="order-mutation",premise="conditional_commit",route="orders-api.transition"} 1"#),
        "{m}"
    );
    let a = request(svc.addr, "GET", "/v1/assurance?window=1m", &auth, b"")
        .unwrap()
        .json();
    assert!(
        a["properties"][0]["unsupported_premises"]
            .as_array()
            .unwrap()
            .is_empty(),
        "{a}"
    );
    // A failed attestation now: the premise is failed, the verdict unknown, never refuted.
    attest_ok(
        &url,
        Some("s3cret"),
        &["--premise", "durable_fence", "--outcome", "failed"],
    );
    let p = premises();
    let fence = p["premises"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["name"] == "durable_fence")
        .unwrap()
        .clone();
    assert_eq!(fence["state"], "failed", "{p}");
    let m = request(svc.addr, "GET", "/metrics", &[], b"")
        .unwrap()
        .text();
    assert!(
        m.contains(r#"fencewatch_premise_supported{property="order-mutation",premise="durable_fence",route=""} 0"#),
        "{m}"
    );
    // The service's view as an expiry passes: asked at a later time, the per-route premise
    // is no longer supported.
    let later = (now + 3_600_000_000_000).to_string();
    let r = request(
        svc.addr,
        "GET",
        &format!("/v1/premises?at={later}"),
        &auth,
        b"",
    )
    .unwrap()
    .json();
    let cc = r["premises"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["name"] == "conditional_commit")
        .unwrap()
        .clone();
    assert_eq!(cc["state"], "unattested", "{r}");
}

fn write(dir: &Path, name: &str, s: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, s).unwrap();
    p.display().to_string()
}

#[test]
fn a_simulated_conformance_run_becomes_the_evidence_production_needs() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ok = |o: &Output| text(&o.stderr);
    // The conformance run: old owners resumed across ownership changes, their stale writes
    // rejected by the fence on orders-api.transition (where the simulator injects them).
    let out = run_in(
        d,
        &[
            "simulate",
            "--events",
            "3000",
            "--rejected",
            "4",
            "--contract-out",
            "conf.toml",
            "-o",
            "conf.ndjson",
            "--truth",
            "conf.truth",
        ],
        None,
    );
    assert!(out.status.success(), "{}", ok(&out));
    let out = run_in(
        d,
        &[
            "check",
            "--contract",
            "conf.toml",
            "--attestations-out",
            "att.ndjson",
            "conf.ndjson",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(0), "{}", ok(&out));
    let att = std::fs::read_to_string(d.join("att.ndjson")).unwrap();
    let lines: Vec<serde_json::Value> = att
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // Exercised: orders-api.transition only (no rejection on the other route).
    assert_eq!(lines.len(), 1, "{att}");
    let a = &lines[0];
    assert_eq!(a["premise"], "conditional_commit");
    assert_eq!(a["route"], "orders-api.transition");
    assert_eq!(a["outcome"], "holds");
    assert_eq!(a["attester"], "fencewatch check");
    assert_eq!(a["valid_for"], "24h");
    let evidence = a["evidence"].as_str().unwrap();
    assert!(
        evidence.starts_with("sha256:") && evidence.len() == 7 + 64,
        "{evidence}"
    );
    // The same inputs give the same evidence.
    let out = run_in(
        d,
        &[
            "check",
            "--contract",
            "conf.toml",
            "--attestations-out",
            "again.ndjson",
            "conf.ndjson",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        std::fs::read_to_string(d.join("again.ndjson")).unwrap(),
        att
    );
    // A rejection count alone is not enough: a rejected commit that follows no committed
    // higher epoch exercised nothing.
    let plain = write(
        d,
        "plain.ndjson",
        &format!(
            "{}\n{}\n",
            commit_line(1_764_417_600_000_000_000, "o-1", 5, "orders-api.transition"),
            r#"{"kind":"commit","ts":1764417601000000000,"scope":"o-2","epoch":1,"route":"orders-api.transition","outcome":"rejected"}"#
        ),
    );
    let out = run(
        &[
            "check",
            "--contract",
            &d.join("conf.toml").display().to_string(),
            "--attestations-out",
            &d.join("none.ndjson").display().to_string(),
            &plain,
        ],
        None,
    );
    assert!(out.status.code().is_some(), "{}", ok(&out));
    assert_eq!(std::fs::read_to_string(d.join("none.ndjson")).unwrap(), "");
    // Production requires the premise on that route: without the attestation unknown, with
    // it holds.
    let mut prod_contract = std::fs::read_to_string(d.join("conf.toml")).unwrap();
    prod_contract.push_str("  [[property.premise]]\n  name = \"conditional_commit\"\n  route = \"orders-api.transition\"\n  max_age = \"24h\"\n");
    let prod_c = write(d, "prod.toml", &prod_contract);
    let out = run_in(
        d,
        &[
            "simulate",
            "--events",
            "2000",
            "--seed",
            "9",
            "--start",
            "2025-11-29T13:00:00Z",
            "-o",
            "prod.ndjson",
            "--truth",
            "prod.truth",
        ],
        None,
    );
    assert!(out.status.success(), "{}", ok(&out));
    let prod = d.join("prod.ndjson").display().to_string();
    let att_path = d.join("att.ndjson").display().to_string();
    let (code, doc) = fencewatch_tests::check_json(Path::new(&prod_c), &[Path::new(&prod)]);
    assert_eq!(code, 2, "{doc}");
    assert!(
        doc["properties"][0]["unknown"]["premise_unattested"]
            .as_u64()
            .unwrap()
            > 0
    );
    let (code, doc) = fencewatch_tests::check_json(
        Path::new(&prod_c),
        &[Path::new(&att_path), Path::new(&prod)],
    );
    assert_eq!(code, 0, "{doc}");
    assert_eq!(doc["verdict"], "holds");
    // A run that found a counterexample on the route attests that it failed.
    let out = run_in(
        d,
        &[
            "simulate",
            "--events",
            "3000",
            "--paused-old-owner",
            "1",
            "-o",
            "bad.ndjson",
            "--truth",
            "bad.truth",
        ],
        None,
    );
    assert!(out.status.success());
    let out = run_in(
        d,
        &[
            "check",
            "--contract",
            "conf.toml",
            "--attestations-out",
            "bad-att.ndjson",
            "--attestation-valid-for",
            "2h",
            "bad.ndjson",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(1), "{}", ok(&out));
    let bad: serde_json::Value = serde_json::from_str(
        std::fs::read_to_string(d.join("bad-att.ndjson"))
            .unwrap()
            .trim(),
    )
    .unwrap();
    assert_eq!(
        (bad["outcome"].as_str(), bad["valid_for"].as_str()),
        (Some("failed"), Some("2h"))
    );
    let bad_path = d.join("bad-att.ndjson").display().to_string();
    let (code, doc) = fencewatch_tests::check_json(
        Path::new(&prod_c),
        &[Path::new(&bad_path), Path::new(&prod)],
    );
    assert_eq!(code, 2, "failed is unknown, never refuted: {doc}");
    assert!(
        doc["properties"][0]["unknown"]["premise_failed"]
            .as_u64()
            .unwrap()
            > 0,
        "{doc}"
    );
    // stdin has no digest to give.
    let out = run(
        &[
            "check",
            "--contract",
            &prod_c,
            "--attestations-out",
            &att_path,
            "-",
        ],
        Some(b""),
    );
    assert_eq!(out.status.code(), Some(64), "{}", ok(&out));
}

#[test]
fn contract_check_lists_every_premise_and_rejects_bad_declarations() {
    let dir = tempfile::tempdir().unwrap();
    let good = write(dir.path(), "good.toml", &contract());
    let out = run(&["contract", "check", &good], None);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let t = text(&out.stdout);
    assert!(
        t.contains("premise durable_fence: required, max_age 24h"),
        "{t}"
    );
    assert!(
        t.contains(
            "premise conditional_commit on route orders-api.transition: required, max_age 1h"
        ),
        "{t}"
    );
    assert!(
        t.contains("premise conditional_commit on route settlement-worker.settle: not required"),
        "{t}"
    );
    assert!(
        t.contains("premise linearizable_lease: not required"),
        "{t}"
    );
    let out = run(&["contract", "check", "--format", "json", &good], None);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        doc["properties"][0]["premises"].as_array().unwrap().len(),
        7,
        "{doc}"
    );
    let bad = write(
        dir.path(),
        "bad.toml",
        &format!(
            "{}  [[property.premise]]\n  name = \"exclusive_activation\"\n  max_age = \"1h\"\n  [[property.premise]]\n  name = \"durable_fence\"\n  max_age = \"2h\"\n",
            contract()
        ),
    );
    let out = run(&["contract", "check", &bad], None);
    assert_eq!(out.status.code(), Some(3));
    let e = text(&out.stderr);
    assert!(e.contains("bad.toml:22: property `order-mutation`: premise `exclusive_activation`: not a premise of strategy lease_epoch"), "{e}");
    assert!(
        e.contains("bad.toml:25: property `order-mutation`: duplicate premise `durable_fence`"),
        "{e}"
    );
    let out = run(&["check", "--contract", &bad, &good], None);
    assert_eq!(out.status.code(), Some(3));
}

/// Each property's window verdicts as (start, verdict).
fn windows(doc: &serde_json::Value) -> Vec<(String, String)> {
    doc.as_array()
        .unwrap()
        .iter()
        .map(|w| {
            (
                w["start"].as_str().unwrap().into(),
                w["verdict"].as_str().unwrap().into(),
            )
        })
        .collect()
}

/// `serve --ingest-file` says what `check` says, window by window, on every premise case
/// (this project's and the shared corpus when it is beside the repository).
#[test]
fn serve_and_check_agree_on_the_premise_cases() {
    let mut dirs: Vec<std::path::PathBuf> = Vec::new();
    for root in [
        fencewatch_tests::repo().join("tests/cases"),
        fencewatch_tests::repo().join("../shared/conformance-premises"),
    ] {
        for e in std::fs::read_dir(&root).into_iter().flatten() {
            let p = e.unwrap().path();
            if p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("premise-")
            {
                dirs.push(p);
            }
        }
    }
    assert!(dirs.len() >= 6, "{dirs:?}");
    for case in dirs {
        let contract = std::fs::read_to_string(case.join("contract.toml")).unwrap();
        let events = case.join("events.ndjson");
        let (_, report) = fencewatch_tests::check_json(&case.join("contract.toml"), &[&events]);
        let tmp = tempfile::tempdir().unwrap();
        let file = events.display().to_string();
        let svc = TestService::start(tmp.path(), &contract, &["--ingest-file", &file]);
        for p in report["properties"].as_array().unwrap() {
            let name = p["property"].as_str().unwrap();
            let want = windows(&p["windows"]);
            let path = format!(
                "/v1/assurance/timeline?property={name}&from=2025-11-28T00:00:00Z&to=2025-11-30T00:00:00Z"
            );
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
            let got = loop {
                let got = windows(&svc.get(&path).json()["windows"]);
                if got == want || std::time::Instant::now() > deadline {
                    break got;
                }
                std::thread::sleep(std::time::Duration::from_millis(50));
            };
            assert_eq!(got, want, "{}: {name}", case.display());
        }
    }
}

/// A premise's support survives a restart in the middle of its interval, from the checkpoint
/// (SIGTERM writes one) and from the write-ahead log past it (SIGKILL): the restarted service
/// lists the same support, the same last attestation and the same intervals, and the support
/// still ends where it did.
#[test]
fn premise_support_survives_a_restart_in_the_middle_of_its_interval() {
    let dir = tempfile::tempdir().unwrap();
    let svc = TestService::start(dir.path(), &contract(), &[]);
    let url = format!("http://{}", svc.addr);
    let now = now_ns();
    let ts = (now - 60_000_000_000).to_string();
    let view = |svc: &TestService| {
        let mut doc = svc.get(&format!("/v1/premises?at={now}")).json();
        for p in doc["premises"].as_array_mut().unwrap() {
            p.as_object_mut().unwrap().remove("at");
        }
        doc.as_object_mut().unwrap().remove("at");
        doc
    };
    attest_ok(
        &url,
        None,
        &[
            "--premise",
            "conditional_commit",
            "--route",
            "orders-api.transition",
            "--valid-for",
            "30m",
            "--ts",
            &ts,
        ],
    );
    let before = view(&svc);
    let cc = |doc: &serde_json::Value| {
        doc["premises"]
            .as_array()
            .unwrap()
            .iter()
            .find(|q| q["name"] == "conditional_commit")
            .unwrap()
            .clone()
    };
    assert_eq!(cc(&before)["state"], "supported", "{before}");
    // SIGTERM: the support is restored from the checkpoint.
    let parts = (svc.contract.clone(), svc.data_dir.clone(), Vec::new());
    let (status, log) = svc.terminate();
    assert!(status.success(), "{log}");
    let svc = TestService::restart(parts);
    assert_eq!(view(&svc), before);
    // Another attestation after the checkpoint, then SIGKILL: replayed from the log.
    let url = format!("http://{}", svc.addr);
    attest_ok(&url, None, &["--premise", "durable_fence", "--ts", &ts]);
    let before = view(&svc);
    let svc = TestService::restart(svc.kill9());
    let after = view(&svc);
    assert_eq!(after, before);
    let fence = after["premises"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["name"] == "durable_fence")
        .unwrap()
        .clone();
    assert_eq!(fence["state"], "supported", "{after}");
    // The per-route support still ends 30 minutes after its attestation.
    let end = now - 60_000_000_000 + 1_800_000_000_000;
    let at = |t: i64| cc(&svc.get(&format!("/v1/premises?at={t}")).json())["state"].clone();
    assert_eq!(at(end - 1), "supported");
    assert_eq!(at(end), "unattested");
}
