//! The write-ahead log under damage, against the real binary (issue 11, item 2): a flipped
//! byte refuses start-up and changes nothing, `fencewatch wal inspect` names it, `fencewatch
//! wal repair --cut` quarantines and repairs it and the service then says what was dropped;
//! a torn tail is still cut, at WARN; a deleted last segment and a failed checkpoint say why.

use fencewatch_tests::service::{TestService, now_ns};
use fencewatch_tests::{ORDERS_CONTRACT, bin, commit_line, run};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const SEC: i64 = 1_000_000_000;

/// Posts `batches` batches of `per` commits each; returns the events acknowledged.
fn post(svc: &TestService, batches: usize, per: usize) -> u64 {
    let t0 = now_ns() - 60 * SEC;
    let mut acked = 0;
    for b in 0..batches {
        let body: String = (0..per)
            .map(|i| {
                let n = (b * per + i) as i64;
                commit_line(
                    t0 + n * 1000,
                    &format!("order-{n}"),
                    1,
                    "orders-api.transition",
                ) + "\n"
            })
            .collect();
        let r = svc.post_ndjson(&body);
        assert_eq!(r.status, 200, "{}", r.text());
        acked += r.json()["accepted"].as_u64().unwrap();
    }
    acked
}

fn wal_dir(data: &Path) -> PathBuf {
    data.join("partitions").join("0").join("wal")
}

/// The segment files, ascending.
fn segments(data: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(wal_dir(data))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "wal"))
        .collect();
    v.sort();
    v
}

/// Every file of the log's directory with its bytes.
fn snapshot(data: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut v: Vec<_> = std::fs::read_dir(wal_dir(data))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| !p.ends_with("wal.lock"))
        .map(|p| {
            let b = std::fs::read(&p).unwrap();
            (p, b)
        })
        .collect();
    v.sort();
    v
}

/// Byte positions where the records of a segment start (header: magic, payload length u32 LE,
/// base u64, items u32, crc u32).
fn record_starts(bytes: &[u8]) -> Vec<usize> {
    let mut starts = Vec::new();
    let mut at = 0;
    while at + 24 <= bytes.len() {
        starts.push(at);
        at += 24 + u32::from_le_bytes(bytes[at + 4..at + 8].try_into().unwrap()) as usize;
    }
    starts
}

/// Runs `fencewatch serve` on `data` and waits up to 30 s for it to exit by itself: its exit
/// code (`None` when it had to be killed: it started) and stderr.
fn serve_until_exit(contract: &Path, data: &Path) -> (Option<i32>, String) {
    let err = data.with_extension("refused.stderr");
    let mut child = Command::new(bin())
        .arg("serve")
        .arg("--contract")
        .arg(contract)
        .arg("--data-dir")
        .arg(data)
        .args(["--listen", "127.0.0.1:0"])
        .env_remove("FENCEWATCH_AUTH_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let code = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status.code();
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    (code, std::fs::read_to_string(&err).unwrap_or_default())
}

/// `fencewatch wal ARGS --data-dir DATA`: exit code and stdout (stderr appended).
fn wal_cmd(args: &[&str], data: &Path) -> (i32, String) {
    let data = data.display().to_string();
    let mut all = vec!["wal"];
    all.extend_from_slice(args);
    all.extend(["--data-dir", &data]);
    let out = run(&all, None);
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code().unwrap_or(-1), text)
}

fn metric(svc: &TestService, name: &str) -> u64 {
    svc.metric(name)
        .unwrap_or_else(|| panic!("no {name}: {}", svc.stderr())) as u64
}

enum Stop {
    Kill,
    Term,
}

/// Posts 3,000 events, stops the service, flips one byte in the middle of the newest segment,
/// and checks the whole way out.
fn flipped_byte_refuses_start_until_repaired(stop: Stop) {
    let dir = tempfile::tempdir().unwrap();
    let svc = TestService::start(dir.path(), ORDERS_CONTRACT, &[]);
    let acked = post(&svc, 30, 100);
    assert_eq!(acked, 3000);
    let parts = match stop {
        Stop::Kill => svc.kill9(),
        Stop::Term => {
            let (contract, data) = (svc.contract.clone(), svc.data_dir.clone());
            let (status, log) = svc.terminate();
            assert!(status.success(), "{log}");
            (contract, data, Vec::new())
        }
    };
    let (contract, data) = (parts.0.clone(), parts.1.clone());
    let seg = segments(&data).pop().unwrap();
    let mut bytes = std::fs::read(&seg).unwrap();
    let flip = bytes.len() / 3;
    let record = *record_starts(&bytes).iter().rfind(|&&s| s <= flip).unwrap();
    bytes[flip] ^= 0x08;
    std::fs::write(&seg, &bytes).unwrap();
    let before = snapshot(&data);

    // Start-up refuses, names segment and byte, and changes nothing.
    let (code, stderr) = serve_until_exit(&contract, &data);
    assert!(
        matches!(code, Some(c) if c != 0),
        "started anyway: {stderr}"
    );
    let named = format!("{}: corrupt at byte {record}", seg.display());
    assert!(stderr.contains(&named), "`{named}` not in: {stderr}");
    assert!(stderr.contains("fencewatch wal repair"), "{stderr}");
    assert_eq!(snapshot(&data), before, "start-up changed the log");

    // inspect names the damage and exits 1.
    let (code, out) = wal_cmd(&["inspect"], &data);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(&format!("corrupt in {} at byte {record}", seg.display())),
        "{out}"
    );
    let (_, json) = wal_cmd(&["inspect", "--format", "json"], &data);
    let json: Value = serde_json::from_str(&json).unwrap();
    let valid_end = json["wal"]["valid_end"].as_u64().unwrap();
    let checkpoint = json["restored_checkpoint"].as_u64();
    assert_eq!(json["status"], "damaged");
    assert!(valid_end < 3000);

    // repair without --cut only says what it would do.
    let (code, out) = wal_cmd(&["repair"], &data);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("nothing was changed"), "{out}");
    assert_eq!(snapshot(&data), before, "a dry run changed the log");

    // repair --cut quarantines a copy of the damaged segment, then repairs.
    let (code, out) = wal_cmd(&["repair", "--cut"], &data);
    assert_eq!(code, 0, "{out}");
    if out.contains("the evidence archive holds") {
        // The archive flushed rows past the damage before the kill (a slow run): the service
        // refuses to reuse their offsets until it is moved aside (the next test).
        let (code, stderr) = serve_until_exit(&contract, &data);
        assert!(matches!(code, Some(c) if c != 0), "{stderr}");
        assert!(stderr.contains("evidence archive holds"), "{stderr}");
        std::fs::rename(data.join("archive"), data.with_extension("old-archive")).unwrap();
    }
    let quarantine = data.join("partitions").join("0").join("quarantine");
    let folder = std::fs::read_dir(&quarantine)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    assert_eq!(
        std::fs::read(folder.join(seg.file_name().unwrap())).unwrap(),
        bytes,
        "the quarantined copy is the damaged segment as it was"
    );
    let report = std::fs::read_to_string(folder.join("repair.txt")).unwrap();
    let summary = report.lines().next().unwrap().to_string();
    assert!(out.contains(&summary), "{out}");
    let (code, out) = wal_cmd(&["inspect"], &data);
    assert_eq!(code, 0, "{out}");

    // The service starts and says what the repair dropped; what it kept is there.
    let svc = TestService::restart(parts);
    let log = svc.stderr();
    assert!(
        log.contains("WARN") && log.contains("repaired by `fencewatch wal repair`"),
        "{log}"
    );
    assert!(log.contains(&summary), "{log}");
    // With the checkpoint past the damage (always after SIGTERM) the log restarts at it and
    // keeps every record after it; otherwise it ends at the damage.
    let expected = match checkpoint {
        Some(c) if c > valid_end => 3000,
        _ => valid_end,
    };
    assert_eq!(
        metric(&svc, "fencewatch_wal_next_offset"),
        expected,
        "{summary}"
    );
    if matches!(stop, Stop::Term) {
        assert_eq!(checkpoint, Some(3000));
        assert!(
            summary.contains("no event after the checkpoint is lost"),
            "{summary}"
        );
    } else if expected == valid_end {
        let lost = 3000 - valid_end;
        assert!(summary.contains("are dropped"), "{summary}");
        assert!(
            summary.contains(&format!("offsets {}..3000", valid_end + 100)),
            "{summary}"
        );
        assert!(lost >= 100, "{summary}");
    }
    assert_eq!(post(&svc, 1, 10), 10);
}

#[test]
fn wal_flipped_byte_after_sigkill_refuses_start_until_repaired() {
    flipped_byte_refuses_start_until_repaired(Stop::Kill);
}

#[test]
fn wal_flipped_byte_after_sigterm_refuses_start_until_repaired() {
    flipped_byte_refuses_start_until_repaired(Stop::Term);
}

/// An archive that holds rows past where a repair ends the log (hostile test, session 27:
/// the service started, new events took offsets the archive held, and it never took them):
/// `wal repair` says so, the service refuses to start and names the way out, and with the
/// archive moved aside it starts and archives the new events.
#[test]
fn wal_repair_behind_the_archive_refuses_start_until_the_archive_is_moved() {
    let dir = tempfile::tempdir().unwrap();
    // No checkpoint past the damage (a repair would restart the log there).
    let flags = [
        "--archive-flush-interval",
        "100ms",
        "--checkpoint-interval",
        "1h",
    ];
    let svc = TestService::start(dir.path(), ORDERS_CONTRACT, &flags);
    assert_eq!(post(&svc, 10, 100), 1000);
    svc.wait_for("the events archived", 30, |s| {
        s.rows("SELECT count(*) FROM events") == [serde_json::json!([1000])]
    });
    // Archived rows reach the manifest with the next flush.
    std::thread::sleep(Duration::from_millis(500));
    let parts = svc.kill9();
    let (contract, data) = (parts.0.clone(), parts.1.clone());
    let seg = segments(&data).pop().unwrap();
    let mut bytes = std::fs::read(&seg).unwrap();
    let flip = bytes.len() / 3;
    bytes[flip] ^= 0x08;
    std::fs::write(&seg, &bytes).unwrap();
    let (code, out) = wal_cmd(&["repair"], &data);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("the evidence archive holds the rows of every offset below 1000"),
        "{out}"
    );
    let (code, out) = wal_cmd(&["repair", "--cut"], &data);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("refuses to start"), "{out}");
    let before = snapshot(&data);
    let (code, stderr) = serve_until_exit(&contract, &data);
    assert!(
        matches!(code, Some(c) if c != 0),
        "started anyway: {stderr}"
    );
    assert!(
        stderr.contains("evidence archive holds the rows of every offset below 1000"),
        "{stderr}"
    );
    assert!(stderr.contains("move its folder"), "{stderr}");
    assert_eq!(snapshot(&data), before, "start-up changed the log");
    // The same archive beside a new data directory (hostile test, session 28): refused as
    // well, and its id is not taken as the new directory's (it was, written before the
    // partition's checks: following the advice kept the other directory's id).
    let fresh = dir.path().join("fresh");
    std::fs::create_dir_all(&fresh).unwrap();
    let copied = std::process::Command::new("cp")
        .arg("-r")
        .arg(data.join("archive"))
        .arg(fresh.join("archive"))
        .status()
        .unwrap();
    assert!(copied.success());
    let (code, stderr) = serve_until_exit(&contract, &fresh);
    assert!(matches!(code, Some(c) if c != 0), "started: {stderr}");
    assert!(!fresh.join("ID").exists(), "the refused start kept an id");
    std::fs::rename(data.join("archive"), dir.path().join("old-archive")).unwrap();
    let svc = TestService::restart(parts);
    let body: String = (0..10)
        .map(|i| {
            commit_line(
                now_ns() - SEC + i,
                &format!("late-{i}"),
                1,
                "orders-api.transition",
            ) + "\n"
        })
        .collect();
    let r = svc.post_ndjson(&body);
    assert_eq!(r.status, 200, "{}", r.text());
    let sql = "SELECT count(*) FROM events WHERE scope LIKE 'late-%'";
    svc.wait_for("the new events archived", 30, |s| {
        s.rows(sql) == [serde_json::json!([10])]
    });
}

#[test]
fn wal_torn_tail_is_cut_with_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let svc = TestService::start(dir.path(), ORDERS_CONTRACT, &[]);
    assert_eq!(post(&svc, 10, 100), 1000);
    let parts = svc.kill9();
    let seg = segments(&parts.1).pop().unwrap();
    let mut bytes = std::fs::read(&seg).unwrap();
    let last = *record_starts(&bytes).last().unwrap();
    let len = bytes.len();
    bytes.truncate(len - 10); // a crash in the middle of the last append
    std::fs::write(&seg, &bytes).unwrap();
    let copy = dir.path().join("copy");
    copy_dir(&parts.1, &copy);
    let svc = TestService::restart(parts);
    let log = svc.stderr();
    let warn = log
        .lines()
        .find(|l| l.contains("WARN") && l.contains("cut a torn tail"))
        .unwrap_or_else(|| panic!("no WARN line for the torn tail: {log}"));
    assert!(warn.contains(&seg.display().to_string()), "{warn}");
    assert!(warn.contains(&format!("byte={last}")), "{warn}");
    assert!(
        warn.contains(&format!("bytes={}", len - 10 - last)),
        "{warn}"
    );
    assert_eq!(std::fs::metadata(&seg).unwrap().len(), last as u64);
    assert_eq!(metric(&svc, "fencewatch_wal_next_offset"), 900);
    // inspect, on the log as it was: a torn tail only (exit 2).
    let (code, out) = wal_cmd(&["inspect"], &copy);
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains(&format!(
            "torn tail in {}",
            copy.join("partitions/0/wal")
                .join(seg.file_name().unwrap())
                .display()
        )),
        "{out}"
    );
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let p = e.unwrap().path();
        let dest = to.join(p.file_name().unwrap());
        if p.is_dir() {
            copy_dir(&p, &dest);
        } else {
            std::fs::copy(&p, &dest).unwrap();
        }
    }
}

#[test]
fn wal_deleted_last_segment_refuses_start() {
    let dir = tempfile::tempdir().unwrap();
    let svc = TestService::start(
        dir.path(),
        ORDERS_CONTRACT,
        &["--wal-segment-bytes", "1048576"],
    );
    // ~3 MiB: the log rolls (the segments checkpoints cover are deleted as it goes).
    post(&svc, 30, 1000);
    let parts = svc.kill9();
    let segs = segments(&parts.1);
    assert!(
        !segs.last().unwrap().ends_with("00000000000000000000.wal"),
        "{segs:?}"
    );
    std::fs::remove_file(segs.last().unwrap()).unwrap();
    let before = snapshot(&parts.1);
    let (code, stderr) = serve_until_exit(&parts.0, &parts.1);
    assert!(
        matches!(code, Some(c) if c != 0),
        "started anyway: {stderr}"
    );
    let name = segs
        .last()
        .unwrap()
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    assert!(
        stderr.contains(&name) && stderr.contains("is missing"),
        "{stderr}"
    );
    assert_eq!(snapshot(&parts.1), before);
    let (code, out) = wal_cmd(&["inspect"], &parts.1);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("missing segment"), "{out}");
}

#[test]
fn wal_failed_checkpoint_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let svc = TestService::start(dir.path(), ORDERS_CONTRACT, &[]);
    post(&svc, 1, 10);
    // The checkpoint folder becomes a file: the next checkpoint cannot be written.
    let ckpt = svc
        .data_dir
        .join("partitions")
        .join("0")
        .join("checkpoints");
    std::fs::remove_dir_all(&ckpt).unwrap();
    std::fs::write(&ckpt, b"not a folder").unwrap();
    let _ = svc.post_ndjson(&(commit_line(now_ns(), "o", 1, "orders-api.transition") + "\n"));
    svc.wait_for("the service stops", 30, |s| {
        s.stderr().contains("fencewatch serve:")
    });
    let (status, log) = svc.terminate();
    assert_eq!(status.code(), Some(1), "{log}");
    let err = log
        .lines()
        .find(|l| l.contains("ERROR") && l.contains("saving a checkpoint failed"))
        .unwrap_or_else(|| panic!("no ERROR line for the checkpoint: {log}"));
    assert!(err.contains(&ckpt.display().to_string()), "{err}");
    assert!(err.contains("Not a directory"), "{err}");
    let last = log
        .lines()
        .rfind(|l| l.starts_with("fencewatch serve:"))
        .unwrap();
    assert!(
        last.contains("checkpoint") && last.contains("Not a directory"),
        "the exit line must give the cause: {last}"
    );
}

/// Checkpoints none of which is usable (here: every one damaged; after an upgrade: every one of
/// another state layout) while the log still starts at offset 0: `serve` passes over them and
/// rebuilds the state from the whole log, and `wal inspect` says so rather than "refuses".
#[test]
fn wal_inspect_agrees_that_unusable_checkpoints_are_rebuilt_from_a_whole_log() {
    let dir = tempfile::tempdir().unwrap();
    let svc = TestService::start(dir.path(), ORDERS_CONTRACT, &[]);
    assert_eq!(post(&svc, 3, 100), 300);
    let parts = (svc.contract.clone(), svc.data_dir.clone(), Vec::new());
    let (status, log) = svc.terminate();
    assert!(status.success(), "{log}");
    let cks: Vec<PathBuf> = std::fs::read_dir(parts.1.join("partitions/0/checkpoints"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    assert!(!cks.is_empty(), "SIGTERM wrote no checkpoint");
    for ck in &cks {
        let mut b = std::fs::read(ck).unwrap();
        let mid = b.len() / 2;
        b[mid] ^= 0xff;
        std::fs::write(ck, b).unwrap();
    }
    let (code, out) = wal_cmd(&["inspect"], &parts.1);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("none usable: serve passes over them"), "{out}");
    assert!(!out.contains("refuses"), "{out}");
    let svc = TestService::restart(parts);
    assert_eq!(metric(&svc, "fencewatch_wal_next_offset"), 300);
    // The state rebuilt from the log holds every scope posted.
    assert_eq!(
        metric(&svc, "fencewatch_active_scopes"),
        300,
        "{}",
        svc.stderr()
    );
    assert!(
        svc.stderr()
            .contains("rebuilt from the whole write-ahead log")
    );
}
