//! `fencewatch serve --ingest-file` under hostile files: a line far over `max_line_bytes`, a
//! binary file, a file that has fewer lines than were ingested from it before (issue 11).

use crate::kafka::observations;
use fencewatch_tests::service::{TestService, now_ns, peak_rss};
use fencewatch_tests::{ORDERS_CONTRACT, commit_line, xorshift};
use std::io::Write;
use std::path::Path;

const SEC: i64 = 1_000_000_000;

fn commit(ts: i64, scope: &str, epoch: u64) -> String {
    commit_line(ts, scope, epoch, "orders-api.transition")
}

/// Bytes of every file under `dir`.
fn du(dir: &Path) -> u64 {
    let mut total = 0;
    for e in std::fs::read_dir(dir).into_iter().flatten() {
        let e = e.unwrap();
        let m = e.metadata().unwrap();
        total += if m.is_dir() { du(&e.path()) } else { m.len() };
    }
    total
}

fn malformed(svc: &TestService) -> f64 {
    let text = svc.get("/metrics").text();
    text.lines()
        .filter(|l| l.starts_with("fencewatch_events_rejected_total{") && l.contains("malformed"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[test]
fn ingest_file_a_huge_line_is_one_malformed_event_read_in_bounded_memory() {
    let dir = tempfile::tempdir().unwrap();
    let t0 = now_ns() - 60 * SEC;
    let file = dir.path().join("events.ndjson");
    {
        let mut f = std::io::BufWriter::new(std::fs::File::create(&file).unwrap());
        writeln!(f, "{}", commit(t0, "order-1", 1)).unwrap();
        writeln!(f, "{}", commit(t0 + SEC, "order-1", 2)).unwrap();
        // 200 MB on one line, then a valid line, then 100 MB with no newline at the end.
        let chunk = vec![b'x'; 1 << 20];
        for _ in 0..200 {
            f.write_all(&chunk).unwrap();
        }
        writeln!(f).unwrap();
        writeln!(f, "{}", commit(t0 + 2 * SEC, "order-1", 1)).unwrap();
        for _ in 0..100 {
            f.write_all(&chunk).unwrap();
        }
    }
    let arg = file.display().to_string();
    let svc = TestService::start(dir.path(), ORDERS_CONTRACT, &["--ingest-file", &arg]);
    svc.wait_for("the file ingested", 120, |s| {
        s.stderr().contains("file ingested")
    });
    assert_eq!(observations(&svc), 3);
    assert_eq!(malformed(&svc), 2.0);
    // The resumed old owner after the huge line was assessed.
    let cxs = svc.get("/v1/counterexamples").json();
    assert_eq!(cxs["counterexamples"][0]["scope"], "order-1", "{cxs}");
    // Neither the WAL nor memory holds the huge lines.
    let wal = du(&dir.path().join("data"));
    assert!(wal < 32 << 20, "the data directory holds {wal} bytes");
    let rss = peak_rss(svc.pid());
    assert!(rss < 150 << 20, "peak RSS {rss} bytes");
    let log = svc.stderr();
    assert!(
        log.contains("209715200") && log.contains("104857600"),
        "the real lengths are logged: {log}"
    );
    assert_eq!(svc.get("/readyz").status, 200);
}

#[test]
fn ingest_file_a_binary_file_is_malformed_lines_and_the_service_stays_up() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("binary.bin");
    let mut state = 0x5eed_u64;
    let mut bytes: Vec<u8> = (0..4 << 20).map(|_| xorshift(&mut state) as u8).collect();
    // Valid events at its end, on their own lines.
    let t0 = now_ns() - 60 * SEC;
    bytes.extend_from_slice(
        format!("\n{}\n{}\n", commit(t0, "s", 1), commit(t0 + SEC, "s", 2)).as_bytes(),
    );
    std::fs::write(&file, &bytes).unwrap();
    let arg = file.display().to_string();
    let svc = TestService::start(dir.path(), ORDERS_CONTRACT, &["--ingest-file", &arg]);
    svc.wait_for("the file ingested", 60, |s| {
        s.stderr().contains("file ingested")
    });
    assert_eq!(observations(&svc), 2);
    // About one line per 256 random bytes, each malformed.
    let bad = malformed(&svc);
    assert!(bad > 10_000.0, "{bad} malformed");
    assert_eq!(svc.get("/readyz").status, 200);
    let (status, log) = svc.terminate();
    assert!(status.success(), "{log}");
}

#[test]
fn ingest_file_with_fewer_lines_than_ingested_before_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let t0 = now_ns() - 60 * SEC;
    let file = dir.path().join("events.ndjson");
    let lines: Vec<String> = (0..10)
        .map(|i| commit(t0 + i * SEC, &format!("o-{i}"), 1))
        .collect();
    std::fs::write(&file, lines.join("\n") + "\n").unwrap();
    let arg = file.display().to_string();
    let svc = TestService::start(dir.path(), ORDERS_CONTRACT, &["--ingest-file", &arg]);
    svc.wait_for("ingested", 60, |s| observations(s) == 10);
    let (status, log) = svc.terminate();
    assert!(status.success(), "{log}");
    // Truncated (or replaced by a shorter file) between two runs.
    std::fs::write(&file, lines[..3].join("\n") + "\n").unwrap();
    let again = TestService::start(dir.path(), ORDERS_CONTRACT, &["--ingest-file", &arg]);
    again.wait_for("the file read", 60, |s| {
        s.stderr().contains("file ingested")
    });
    let log = again.stderr();
    let warned = log
        .lines()
        .any(|l| l.contains("WARN") && l.contains("fewer lines than were ingested"));
    assert!(warned, "{log}");
    assert_eq!(observations(&again), 10);
}
