//! The command line as a user meets it: exit codes, errors, stdin, formats.

use fencewatch_tests::{repo, run};

fn case(name: &str) -> (String, String) {
    let d = repo().join("tests/cases").join(name);
    (
        d.join("contract.toml").display().to_string(),
        d.join("events.ndjson").display().to_string(),
    )
}

#[test]
fn exit_codes_follow_the_verdict() {
    for (name, code) in [
        ("stale-fence", 1),
        ("equal-order-ambiguous", 2),
        ("unattributed-property", 0),
    ] {
        let (c, e) = case(name);
        let out = run(&["check", "--contract", &c, &e], None);
        assert_eq!(
            out.status.code(),
            Some(code),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// On a terminal, the first Ctrl-D ends the input (a `read` of 0 bytes), as for `cat`: what
/// is typed after it is not read.
#[test]
fn stdin_on_a_terminal_ends_at_the_first_end_of_input() {
    fencewatch_tests::require!(Python3);
    let (c, _) = case("stale-fence");
    let line = |ts: u64| {
        format!(r#"{{"kind":"commit","ts":{ts},"scope":"o-1","epoch":1,"route":"api.write"}}"#)
    };
    let script = repo().join("tests/python/tty_check.py");
    let out = std::process::Command::new("python3")
        .arg(&script)
        .arg(fencewatch_tests::bin())
        .arg(&c)
        .arg(line(1_000_000_000))
        .arg(line(2_000_000_000))
        .output()
        .expect("python3");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value =
        serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    assert_eq!(doc["events"], 1, "{stdout}");
}

#[test]
fn reads_stdin_and_provenance_names_it() {
    let (c, e) = case("stale-fence");
    let data = std::fs::read(&e).unwrap();
    let out = run(
        &["check", "--contract", &c, "--format", "json", "-"],
        Some(&data),
    );
    assert_eq!(out.status.code(), Some(1));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let cx = &doc["properties"][0]["counterexamples"][0];
    assert_eq!(cx["stale"]["source"], "-:2");
    assert_eq!(cx["superseding"]["source"], "-:1");
    assert!(cx["id"].as_str().unwrap().starts_with("cx-"));
}

#[test]
fn files_are_one_stream_in_argument_order() {
    let dir = tempfile::tempdir().unwrap();
    let (c, _) = case("stale-fence");
    let a = dir.path().join("a.ndjson");
    let b = dir.path().join("b.ndjson");
    std::fs::write(&a, "{\"kind\":\"commit\",\"scope\":\"s\",\"route\":\"orders-api.transition\",\"ts\":\"2025-11-29T12:00:00Z\",\"epoch\":5,\"emitter\":\"e\",\"seq\":1}\n").unwrap();
    std::fs::write(&b, "{\"kind\":\"commit\",\"scope\":\"s\",\"route\":\"orders-api.transition\",\"ts\":\"2025-11-29T12:00:01Z\",\"epoch\":4,\"emitter\":\"e\",\"seq\":3}\n").unwrap();
    let check = || {
        run(
            &[
                "check",
                "--contract",
                &c,
                "--format",
                "json",
                a.to_str().unwrap(),
                b.to_str().unwrap(),
            ],
            None,
        )
    };
    let out = check();
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let p = &doc["properties"][0];
    assert_eq!(
        p["counterexamples"][0]["stale"]["source"],
        format!("{}:1", b.display())
    );
    assert_eq!(p["unknown"]["telemetry_gap"], 1, "seq tracking spans files");
    // The same input gives the same bytes: ids, witnesses and samples are deterministic.
    let again = check();
    assert_eq!(out.stdout, again.stdout, "deterministic output");
}

#[test]
fn invalid_contract_is_an_error_with_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let c = dir.path().join("bad.toml");
    std::fs::write(&c, "[[property]]\nname = \"p\"\nsubject = \"S\"\nstrategy = \"lease_epoch\"\nwindow = \"0s\"\ncolour = \"red\"\n").unwrap();
    let out = run(
        &["check", "--contract", c.to_str().unwrap(), "-"],
        Some(b""),
    );
    assert_eq!(out.status.code(), Some(3));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bad.toml:5:") && err.contains("window"),
        "{err}"
    );
    assert!(
        err.contains("bad.toml:6:") && err.contains("colour"),
        "{err}"
    );
    assert!(err.contains("route"), "every error is reported: {err}");
    let out = run(&["contract", "check", c.to_str().unwrap()], None);
    assert_eq!(out.status.code(), Some(3));
}

#[test]
fn missing_input_file_is_exit_3() {
    let (c, _) = case("stale-fence");
    let out = run(
        &["check", "--contract", &c, "/nonexistent/events.ndjson"],
        None,
    );
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/events.ndjson"));
}

#[test]
fn contract_check_names_the_missing_obligation() {
    let d = repo().join("tests/cases/rejected-candidate-still-assessed/contract.toml");
    let out = run(&["contract", "check", d.to_str().unwrap()], None);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("stale_authority_exclusion") && text.contains("REJECTED"),
        "{text}"
    );
    let (c, _) = case("stale-fence");
    let out = run(&["contract", "check", &c, "--format", "json"], None);
    assert_eq!(out.status.code(), Some(0));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["status"], "accepted");
    assert!(doc["obligations"].as_array().unwrap().len() >= 3);
}

#[test]
fn text_report_explains_counterexamples() {
    let (c, e) = case("out-of-order-witness");
    let out = run(&["check", "--contract", &c, &e], None);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("fencewatch check: REFUTED"), "{text}");
    assert!(
        text.contains("superseded epoch 1") && text.contains("epoch 3 was established"),
        "{text}"
    );
    assert!(text.contains("windows (1):"), "{text}");
    let (c, e) = case("malformed-variety");
    let text =
        String::from_utf8_lossy(&run(&["check", "--contract", &c, &e], None).stdout).to_string();
    assert!(
        text.contains(":2: field `epoch`: expected an unsigned 64-bit integer, found a string"),
        "{text}"
    );
    assert!(text.contains("malformed_event ×8"), "{text}");
}

#[test]
fn usage_errors_are_64() {
    assert_eq!(run(&["check"], None).status.code(), Some(64));
    assert_eq!(run(&["frobnicate"], None).status.code(), Some(64));
}

/// `--max-memory` below what the history needs: read into spill files by scope and assessed a
/// part at a time, with the same report byte for byte, from files, shuffled and from stdin, in
/// JSON and text; the spill files are gone afterwards.
#[test]
fn a_check_within_a_small_memory_budget_reports_what_a_whole_one_does() {
    let dir = tempfile::tempdir().unwrap();
    let d = |n: &str| dir.path().join(n).display().to_string();
    let sim = run(
        &[
            "simulate",
            "--events",
            "20000",
            "--scopes",
            "2000",
            "--seed",
            "11",
            "--paused-old-owner",
            "12",
            "--missing-epoch",
            "5",
            "--output",
            &d("ev.ndjson"),
            "--contract-out",
            &d("c.toml"),
        ],
        None,
    );
    assert!(
        sim.status.success(),
        "{}",
        String::from_utf8_lossy(&sim.stderr)
    );
    // The same lines with every emitter's seqs out of order, a re-send that conflicts under
    // another scope, an equal one, and a malformed line.
    let text = std::fs::read_to_string(d("ev.ndjson")).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let with_seq = lines.iter().position(|l| l.contains("\"seq\"")).unwrap();
    lines.push(lines[with_seq].clone());
    let mut other: serde_json::Value = serde_json::from_str(&lines[with_seq]).unwrap();
    other["scope"] = "elsewhere".into();
    lines.push(other.to_string());
    lines.push("{\"kind\":\"commit\",".into());
    let mut shuffled = lines.clone();
    let n = shuffled.len();
    for i in 0..n {
        shuffled.swap(i, (i * 7919 + 13) % n);
    }
    std::fs::write(d("sh.ndjson"), shuffled.join("\n") + "\n").unwrap();
    let spill = dir.path().join("spill");
    std::fs::create_dir(&spill).unwrap();
    let spill_dir = spill.display().to_string();
    for (file, format) in [
        ("ev.ndjson", "json"),
        ("sh.ndjson", "json"),
        ("sh.ndjson", "text"),
    ] {
        let check = |extra: &[&str], stdin: Option<&[u8]>| {
            let contract = d("c.toml");
            let path = d(file);
            let mut args = vec!["check", "--contract", &contract, "--format", format];
            args.extend_from_slice(extra);
            args.push(if stdin.is_some() { "-" } else { &path });
            let out = run(&args, stdin);
            assert!(
                matches!(out.status.code(), Some(0..=2)),
                "{args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            (out.status.code(), String::from_utf8(out.stdout).unwrap())
        };
        let whole = check(&[], None);
        assert!(whole.1.contains("cx-"), "the history has counterexamples");
        let budget = ["--max-memory", "256KiB", "--spill-dir", &spill_dir];
        assert_eq!(check(&budget, None), whole, "{file} {format}");
        // From stdin the size is unknown: spilled whatever it is; provenance names `-`.
        let data = std::fs::read(d(file)).unwrap();
        let from_stdin = check(&[], Some(&data));
        assert_eq!(
            check(&budget, Some(&data)),
            from_stdin,
            "{file} {format} stdin"
        );
        assert_eq!(
            std::fs::read_dir(&spill).unwrap().count(),
            0,
            "spill files left"
        );
    }
    // A budget the history fits is not spilled (nothing to see but the same report), and a
    // size that is not one is a usage error.
    let out = run(
        &[
            "check",
            "--contract",
            &d("c.toml"),
            "--max-memory",
            "1GiB",
            &d("ev.ndjson"),
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(1));
    let out = run(
        &[
            "check",
            "--contract",
            &d("c.toml"),
            "--max-memory",
            "lots",
            &d("ev.ndjson"),
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a size"));
}
