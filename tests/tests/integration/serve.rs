//! `fencewatch serve` as a user runs it: the real binary on port 0 with a temporary data
//! directory, driven over HTTP.

use fencewatch_tests::service::{TestService, now_ns, post_with_kills, request};
use fencewatch_tests::{ORDERS_CONTRACT, bin, check_json, commit_line};
use serde_json::Value;
use std::collections::BTreeSet;
use std::process::Command;

const CONTRACT: &str = ORDERS_CONTRACT;

const SEC: i64 = 1_000_000_000;

fn commit(ts: i64, scope: &str, epoch: u64, route: &str) -> String {
    commit_line(ts, scope, epoch, route)
}

/// A history near now: healthy handovers on both routes, plus one resumed old owner on
/// `order-7` whose stale commit arrives before the commit that superseded it.
fn history(now: i64) -> Vec<String> {
    let t0 = now - 60 * SEC;
    let mut lines = Vec::new();
    for i in 0..20i64 {
        let scope = format!("order-{i}");
        let route = if i % 2 == 0 {
            "orders-api.transition"
        } else {
            "settlement-worker.settle"
        };
        lines.push(commit(t0 + i * SEC, &scope, 1, route));
        lines.push(commit(t0 + i * SEC + 2 * SEC, &scope, 2, route));
    }
    // The stale one first (arrival order must not matter), then what superseded it.
    lines.push(commit(t0 + 30 * SEC, "order-7", 1, "orders-api.transition"));
    lines
}

#[test]
fn ingest_then_verdict_counterexample_in_api_and_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let svc = TestService::start(dir.path(), CONTRACT, &[]);
    let now = now_ns();
    let r = svc.post_ndjson(&(history(now).join("\n") + "\n"));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["accepted"], 41);
    // Nothing is refuted yet: order-7's epoch 1 at t0+30s is not superseded... it is: epoch 2
    // of order-7 was committed at t0+9s. Refuted at once, with the 2xx.
    let page = svc.get("/v1/counterexamples").json();
    let cxs = page["counterexamples"].as_array().unwrap();
    assert_eq!(cxs.len(), 1, "{page}");
    let cx = &cxs[0];
    assert_eq!(cx["kind"], "stale_commit");
    assert_eq!(cx["scope"], "order-7");
    assert_eq!(cx["stale"]["epoch"], 1);
    assert_eq!(cx["superseding"]["epoch"], 2);
    assert_eq!(cx["stale"]["source"], "http:40");
    let id = cx["id"].as_str().unwrap();
    let one = svc.get(&format!("/v1/counterexamples/{id}"));
    assert_eq!(one.status, 200);
    assert_eq!(one.json()["id"], id);
    let a = svc.get("/v1/assurance?property=order-mutation").json();
    assert_eq!(a["verdict"], "refuted", "{a}");
    assert_eq!(a["counterexamples"][0], id);
    let all = svc.get("/v1/assurance").json();
    assert_eq!(all["verdict"], "refuted");
    assert_eq!(
        svc.metric("fencewatch_counterexamples_total{property=\"order-mutation\",kind=\"stale_commit\",route=\"orders-api.transition\"}"
        ),
        Some(1.0)
    );
    assert_eq!(
        svc.metric("fencewatch_assurance{property=\"order-mutation\",verdict=\"refuted\"}"),
        Some(1.0)
    );
    assert_eq!(
        svc.metric("fencewatch_events_ingested_total{source=\"http\"}"),
        Some(41.0)
    );
    let scope = svc.get("/v1/scopes/order-7").json();
    assert_eq!(scope["events"].as_array().unwrap().len(), 3, "{scope}");
    assert_eq!(scope["counterexamples"][0]["id"], id);
    let cov = svc.get("/v1/coverage").json();
    let routes = cov["routes"].as_array().unwrap();
    assert_eq!(routes.len(), 2);
    assert!(
        routes
            .iter()
            .all(|r| r["observations"].as_u64().unwrap() > 0)
    );
    let timeline = svc.get("/v1/assurance/timeline").json();
    assert!(
        timeline["windows"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w["verdict"] == "refuted"),
        "{timeline}"
    );
    let contract = svc.get("/v1/contract").json();
    assert_eq!(contract["properties"][0]["name"], "order-mutation");
    assert_eq!(contract["status"]["status"], "accepted");
    // A stale commit the resource rejected (the fence worked) is counted, once per request
    // that brought one.
    let rejected = |ts: i64| {
        format!(
            r#"{{"kind":"commit","ts":{ts},"scope":"order-3","epoch":1,"route":"orders-api.transition","outcome":"rejected"}}"#
        )
    };
    for k in 1..=2 {
        let r = svc.post_ndjson(&(rejected(now - 20 * SEC + k) + "\n"));
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(
            svc.metric("fencewatch_stale_rejections_total{property=\"order-mutation\"}"),
            Some(k as f64)
        );
    }
}

#[test]
fn a_healthy_pipeline_holds_and_a_stalled_one_turns_unknown() {
    let dir = tempfile::tempdir().unwrap();
    let svc = TestService::start(dir.path(), CONTRACT, &[]);
    let now = now_ns();
    // Fresh, healthy traffic on both routes.
    let mut lines = Vec::new();
    for i in 0..30i64 {
        let t = now - 30 * SEC + i * SEC;
        lines.push(commit(t, &format!("o{i}"), 1, "orders-api.transition"));
        lines.push(commit(t, &format!("p{i}"), 1, "settlement-worker.settle"));
    }
    assert_eq!(svc.post_ndjson(&lines.join("\n")).status, 200);
    let w = "window=15s";
    let at = format!("at={}", now - 12 * SEC);
    let a = svc.get(&format!("/v1/assurance?{w}&{at}")).json();
    assert_eq!(a["verdict"], "holds", "{a}");
    assert_eq!(a["properties"][0]["final"], true);
    // Evidence that stopped an hour ago: the wall clock is far past the watermark.
    let dir2 = tempfile::tempdir().unwrap();
    let old = TestService::start(dir2.path(), CONTRACT, &[]);
    let then = now - 3600 * SEC;
    let mut lines = Vec::new();
    for i in 0..30i64 {
        let t = then - 30 * SEC + i * SEC;
        lines.push(commit(t, &format!("o{i}"), 1, "orders-api.transition"));
        lines.push(commit(t, &format!("p{i}"), 1, "settlement-worker.settle"));
    }
    assert_eq!(old.post_ndjson(&lines.join("\n")).status, 200);
    let a = old.get("/v1/assurance?property=order-mutation").json();
    assert_eq!(a["verdict"], "unknown", "{a}");
    assert_eq!(a["stale_evidence"], true);
    assert!(a["unknown"]["stale_evidence"].as_u64().unwrap() >= 1);
    // Even at a time inside the old evidence, stale evidence is never `holds`.
    let a = old
        .get(&format!(
            "/v1/assurance?property=order-mutation&window=15s&at={}",
            then - 12 * SEC
        ))
        .json();
    assert_eq!(a["verdict"], "unknown", "{a}");
    assert_eq!(
        old.metric("fencewatch_assurance{property=\"order-mutation\",verdict=\"unknown\"}"),
        Some(1.0)
    );
}

#[test]
fn malformed_input_gets_problem_json_and_valid_lines_are_kept() {
    let dir = tempfile::tempdir().unwrap();
    let svc = TestService::start(dir.path(), CONTRACT, &["--max-body-bytes", "4096"]);
    let now = now_ns();
    let body = [
        commit(now - 5 * SEC, "a", 1, "orders-api.transition"),
        "{not json".into(),
        r#"{"kind":"commit","ts":1,"epoch":"seven"}"#.into(),
        String::new(),
        commit(now - 4 * SEC, "b", 1, "orders-api.transition"),
        r#"{"kind":"commit","ts":99999999999999999999}"#.into(),
    ]
    .join("\n");
    let r = svc.post_ndjson(&body);
    assert_eq!(r.status, 422, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("application/problem+json"));
    let p = r.json();
    assert_eq!(p["status"], 422);
    let errors = p["errors"].as_array().unwrap();
    let lines: Vec<u64> = errors.iter().map(|e| e["line"].as_u64().unwrap()).collect();
    assert_eq!(lines, [2, 3, 6], "{p}");
    assert_eq!(errors[1]["field"], "epoch");
    assert!(p["detail"].as_str().unwrap().contains("other 2 event(s)"));
    // The two valid lines are durable and assessed; the malformed ones are evidence.
    let cov = svc.get("/v1/coverage").json();
    assert_eq!(cov["routes"][0]["observations"], 2, "{cov}");
    let a = svc.get("/v1/assurance?window=1h").json();
    assert_eq!(a["verdict"], "unknown");
    assert_eq!(
        svc.metric("fencewatch_events_rejected_total{source=\"http\",reason=\"malformed\"}"),
        Some(3.0)
    );
    // A JSON array body, one bad element.
    let arr = format!(
        "[{}, 5]",
        commit(now - 3 * SEC, "c", 1, "orders-api.transition")
    );
    let r = request(
        svc.addr,
        "POST",
        "/v1/events",
        &[("content-type", "application/json")],
        arr.as_bytes(),
    )
    .unwrap();
    assert_eq!(r.status, 422, "{}", r.text());
    assert_eq!(r.json()["errors"][0]["element"], 2);
    // Oversize body, wrong content type, empty body, unknown property, bad query.
    let big = "x".repeat(5000);
    let r = svc.post_ndjson(&big);
    assert_eq!(r.status, 413, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("application/problem+json"));
    let r = request(
        svc.addr,
        "POST",
        "/v1/events",
        &[("content-type", "text/plain")],
        b"{}",
    )
    .unwrap();
    assert_eq!(r.status, 415);
    assert!(r.json()["detail"].as_str().unwrap().contains("text/plain"));
    let r = svc.post_ndjson("\n\n");
    assert_eq!(r.status, 400);
    let r = svc.get("/v1/assurance?property=nope");
    assert_eq!(r.status, 404);
    assert!(r.json()["detail"].as_str().unwrap().contains("nope"));
    let r = svc.get("/v1/assurance?at=yesterday");
    assert_eq!(r.status, 400);
    assert!(r.json()["detail"].as_str().unwrap().contains("`at`"));
    let r = svc.get("/v1/counterexamples?bogus=1");
    assert_eq!(r.status, 400);
    assert_eq!(r.header("content-type"), Some("application/problem+json"));
    let r = svc.get("/v1/counterexamples/cx-0000");
    assert_eq!(r.status, 404);
    let r = svc.get("/nowhere");
    assert_eq!(r.status, 404);
    assert_eq!(r.header("content-type"), Some("application/problem+json"));
    // And nothing was lost: the service still takes events.
    let r = svc.post_ndjson(&commit(now - 2 * SEC, "d", 1, "orders-api.transition"));
    assert_eq!(r.status, 200);
    let cov = svc.get("/v1/coverage").json();
    assert_eq!(cov["routes"][0]["observations"], 4, "{cov}");
}

#[test]
fn kill_9_after_acknowledged_batches_loses_and_duplicates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let svc = TestService::start(dir.path(), CONTRACT, &[]);
    let now = now_ns();
    let lines = history(now);
    // Batches of 5; the stale commit is in the last one.
    for chunk in lines.chunks(5) {
        assert_eq!(svc.post_ndjson(&chunk.join("\n")).status, 200);
    }
    let before = svc.cx_ids();
    let before_cx = svc.get("/v1/counterexamples").json();
    let cov_before = svc.get("/v1/coverage").json();
    assert_eq!(before.len(), 1);
    let svc = TestService::restart(svc.kill9());
    assert_eq!(svc.cx_ids(), before);
    assert_eq!(svc.get("/v1/counterexamples").json(), before_cx);
    assert_eq!(svc.get("/v1/coverage").json(), cov_before);
    // Delivering the same events again (a producer retrying) duplicates no counterexample
    // when they carry (emitter, seq); without it they are new deliveries of equal content.
    let again = svc.post_ndjson(&lines.join("\n"));
    assert_eq!(again.status, 200);
    let ids = svc.cx_ids();
    let unique: BTreeSet<&String> = ids.iter().collect();
    assert_eq!(unique.len(), ids.len(), "{ids:?}");
    // SIGTERM: graceful, exit 0, a last checkpoint; the next start replays nothing.
    let (status, log) = svc.terminate();
    assert!(status.success(), "{status:?}\n{log}");
    assert!(log.contains("checkpoint"), "{log}");
}

#[test]
fn kill_9_at_random_moments_matches_an_uninterrupted_run() {
    let dir = tempfile::tempdir().unwrap();
    let now = now_ns();
    // A history with emitters and seqs (so a resent batch is recognised), 40 batches.
    let mut batches: Vec<String> = Vec::new();
    let mut seq = 0u64;
    for b in 0..40i64 {
        let mut lines = Vec::new();
        for i in 0..25i64 {
            seq += 1;
            let k = b * 25 + i;
            let scope = format!("s{}", k % 37);
            // Epochs rise with time per scope, except a few resumed old owners.
            let epoch = if k % 97 == 0 { 1 } else { (k / 37 + 2) as u64 };
            let route = ["orders-api.transition", "settlement-worker.settle"][(k % 2) as usize];
            lines.push(format!(
                r#"{{"kind":"commit","ts":{},"scope":"{scope}","epoch":{epoch},"route":"{route}","emitter":"e1","seq":{seq}}}"#,
                now - 120 * SEC + k * 100_000_000
            ));
        }
        batches.push(lines.join("\n"));
    }
    // The uninterrupted run.
    let clean = TestService::start(
        &fencewatch_tests::made_dir(dir.path().join("clean")),
        CONTRACT,
        &[],
    );
    for b in &batches {
        assert_eq!(clean.post_ndjson(b).status, 200);
    }
    let expected = clean.get("/v1/counterexamples?limit=1000").json();
    assert!(!expected["counterexamples"].as_array().unwrap().is_empty());
    drop(clean);
    // The interrupted one: a producer posts and retries until acknowledged; the service is
    // killed with SIGKILL at pseudo-random moments and restarted.
    let root = fencewatch_tests::made_dir(dir.path().join("killed"));
    let svc = TestService::start(&root, CONTRACT, &[]);
    let (svc, kills) = post_with_kills(svc, &batches, 0x9e37_79b9_7f4a_7c15, 4, 3000);
    assert!(kills >= 3, "only {kills} kills");
    // A batch that was durable but not acknowledged when the service died was resent and
    // settled as a duplicate delivery (emitter, seq), which shifts later offsets: compare the
    // findings by what they say, and check that none is duplicated.
    let got = svc.get("/v1/counterexamples?limit=1000").json();
    let key = |c: &Value| {
        (
            c["kind"].clone(),
            c["scope"].clone(),
            c["stale"]["ts"].clone(),
            c["stale"]["epoch"].clone(),
            c["superseding"]["epoch"].clone(),
        )
    };
    let got: Vec<_> = got["counterexamples"]
        .as_array()
        .unwrap()
        .iter()
        .map(key)
        .collect();
    let want: Vec<_> = expected["counterexamples"]
        .as_array()
        .unwrap()
        .iter()
        .map(key)
        .collect();
    assert_eq!(got, want, "findings differ after {kills} kills");
}

#[test]
fn bearer_token_guards_the_api_but_not_the_probes() {
    let dir = tempfile::tempdir().unwrap();
    let svc = TestService::start(dir.path(), CONTRACT, &["--auth-token", "s3cret"]);
    assert_eq!(svc.get("/livez").status, 200);
    assert_eq!(svc.get("/metrics").status, 200);
    let r = svc.get("/v1/assurance");
    assert_eq!(r.status, 401);
    assert!(r.header("www-authenticate").is_some());
    let ok = request(
        svc.addr,
        "GET",
        "/v1/assurance",
        &[("authorization", "Bearer s3cret")],
        b"",
    )
    .unwrap();
    assert_eq!(ok.status, 200, "{}", ok.text());
    let wrong = request(
        svc.addr,
        "GET",
        "/v1/assurance",
        &[("authorization", "Bearer s3cres")],
        b"",
    )
    .unwrap();
    assert_eq!(wrong.status, 401);
}

#[test]
fn openapi_documents_every_route_and_every_documented_route_answers() {
    let dir = tempfile::tempdir().unwrap();
    let svc = TestService::start(dir.path(), CONTRACT, &[]);
    let doc = svc.get("/openapi.json").json();
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
    let paths: BTreeSet<String> = doc["paths"].as_object().unwrap().keys().cloned().collect();
    let expected: BTreeSet<String> = [
        "/v1/assurance",
        "/v1/assurance/timeline",
        "/v1/counterexamples",
        "/v1/counterexamples/{id}",
        "/v1/coverage",
        "/v1/premises",
        "/v1/scopes/{scope}",
        "/v1/contract",
        "/v1/events",
        "/v1/traces",
        "/v1/logs",
        "/v1/query",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    assert_eq!(paths, expected);
    // OTLP/HTTP takes, and answers in, protobuf and OTLP/JSON (SPEC §8).
    for path in ["/v1/traces", "/v1/logs"] {
        let op = &doc["paths"][path]["post"];
        let types = |v: &serde_json::Value| -> BTreeSet<String> {
            v["content"]
                .as_object()
                .map_or_else(BTreeSet::new, |c| c.keys().cloned().collect())
        };
        let both: BTreeSet<String> = ["application/json", "application/x-protobuf"]
            .map(String::from)
            .into();
        assert_eq!(types(&op["requestBody"]), both, "{path}");
        assert_eq!(types(&op["responses"]["200"]), both, "{path}");
    }
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            assert!(
                op["responses"].as_object().is_some_and(|r| !r.is_empty()),
                "{method} {path}"
            );
            if method == "get" {
                let concrete = path.replace("{id}", "cx-0").replace("{scope}", "nope");
                let r = svc.get(&concrete);
                // Routed (a 404 here is a problem document about the id, not a missing route).
                assert_ne!(r.status, 405, "{path}");
                if r.status == 404 {
                    assert!(
                        r.json()["detail"].as_str().unwrap().contains("nope")
                            || r.json()["detail"].as_str().unwrap().contains("cx-0"),
                        "{path}: {}",
                        r.text()
                    );
                }
            }
        }
    }
}

#[test]
fn bad_configuration_exits_64_with_every_error() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("c.toml");
    std::fs::write(&bad, "[[property]]\nname = 1\n").unwrap();
    let out = Command::new(bin())
        .args(["serve", "--contract"])
        .arg(&bad)
        .args(["--listen", "not-an-address", "--request-timeout", "soon"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("listen"), "{err}");
    assert!(
        err.contains("request_timeout") || err.contains("request-timeout"),
        "{err}"
    );
    assert!(err.contains("c.toml"), "{err}");
}

#[test]
fn ingest_file_and_check_agree() {
    let dir = tempfile::tempdir().unwrap();
    let now = now_ns();
    let file = dir.path().join("events.ndjson");
    std::fs::write(&file, history(now).join("\n") + "\n").unwrap();
    let contract = dir.path().join("c.toml");
    std::fs::write(&contract, CONTRACT).unwrap();
    let (code, report) = check_json(&contract, &[&file]);
    assert_eq!(code, 1);
    let file_arg = file.display().to_string();
    let svc = TestService::start(dir.path(), CONTRACT, &["--ingest-file", &file_arg]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let page = loop {
        let page = svc.get("/v1/counterexamples").json();
        if !page["counterexamples"].as_array().unwrap().is_empty()
            || std::time::Instant::now() > deadline
        {
            break page;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let served: Vec<(Value, Value, Value)> = page["counterexamples"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["kind"].clone(),
                c["scope"].clone(),
                c["stale"]["ts"].clone(),
            )
        })
        .collect();
    let checked: Vec<(Value, Value, Value)> = report["properties"][0]["counterexamples"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["kind"].clone(),
                c["scope"].clone(),
                c["stale"]["ts"].clone(),
            )
        })
        .collect();
    assert_eq!(served, checked);
    assert_eq!(
        page["counterexamples"][0]["stale"]["source"],
        format!("{file_arg}:41")
    );
}

#[test]
fn demo_runs_with_zero_setup_and_finds_its_resumed_old_owners() {
    let dir = tempfile::tempdir().unwrap();
    let demo = fencewatch_tests::service::Demo::start(dir.path(), 2000, 1);
    let found = demo.counterexamples(2, 20);
    let a = request(demo.addr, "GET", "/v1/assurance", &[], b"")
        .unwrap()
        .json();
    assert!(found.len() >= 2, "{} counterexamples", found.len());
    assert_eq!(a["verdict"], "refuted", "{a}");
    // Its premise is supported from the first look on, over the whole assurance window.
    let p = &a["properties"][0];
    assert_eq!(p["unsupported_premises"], serde_json::json!([]), "{a}");
    assert!(p["unknown"].get("premise_unattested").is_none(), "{a}");
    assert!(dir.path().join("contract.toml").exists());
}

#[test]
fn an_ingested_file_is_not_appended_again_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("events.ndjson");
    std::fs::write(&file, history(now_ns()).join("\n") + "\n").unwrap();
    let file_arg = file.display().to_string();
    let observed = |svc: &TestService| -> u64 {
        let cov = svc.get("/v1/coverage").json();
        cov["routes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["observations"].as_u64().unwrap())
            .sum()
    };
    let wait_for = |svc: &TestService, n: u64| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while observed(svc) < n && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        observed(svc)
    };
    let svc = TestService::start(dir.path(), CONTRACT, &["--ingest-file", &file_arg]);
    assert_eq!(wait_for(&svc, 41), 41);
    let (status, _) = svc.terminate();
    assert!(status.success());
    // Two more lines appended meanwhile: only they are new on the next start.
    let mut more = std::fs::read_to_string(&file).unwrap();
    more.push_str(&(commit(now_ns() - 2 * SEC, "late-1", 1, "orders-api.transition") + "\n"));
    more.push_str(&(commit(now_ns() - SEC, "late-2", 1, "orders-api.transition") + "\n"));
    std::fs::write(&file, more).unwrap();
    // Spelled another way (`dir/./file`), it is the same file: resumed, not appended again.
    let respelled = format!(
        "{}/./{}",
        file.parent().unwrap().display(),
        file.file_name().unwrap().to_str().unwrap()
    );
    let again = TestService::start(dir.path(), CONTRACT, &["--ingest-file", &respelled]);
    assert_eq!(wait_for(&again, 43), 43);
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(observed(&again), 43, "the file was appended again");
    // Resumed after line 41, not read again from line 1 (its repeats dropped as duplicates).
    let log = again.stderr();
    assert!(log.contains("resumed_after_line=41"), "{log}");
    let scope = again.get("/v1/scopes/late-2").json();
    assert_eq!(scope["events"][0]["source"], format!("{respelled}:43"));
}
