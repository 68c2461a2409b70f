//! The evidence archive and its SQL (issue 14, SPEC §9), as an on-call engineer uses them:
//! the real binary, `POST /v1/query` and `fencewatch query`, Parquet files under the data
//! directory.

use fencewatch_tests::service::{
    Response, TestService, now_ns, peak_rss, post_with_kills, request,
};
use fencewatch_tests::{ORDERS_CONTRACT, run};
use serde_json::{Value, json};
use std::time::Duration;

const SEC: i64 = 1_000_000_000;
const ROUTES: [&str; 2] = ["orders-api.transition", "settlement-worker.settle"];

fn query_as(svc: &TestService, sql: &str, accept: &str) -> Response {
    svc.query(sql, accept)
}

fn rows(svc: &TestService, sql: &str) -> Vec<Value> {
    svc.rows(sql)
}

fn one(svc: &TestService, sql: &str) -> Value {
    rows(svc, sql)[0][0].clone()
}

/// `fencewatch query --data-dir D --format json SQL`: its rows.
fn offline(data_dir: &std::path::Path, sql: &str) -> Vec<Value> {
    let d = data_dir.display().to_string();
    let out = run(&["query", "--data-dir", &d, "--format", "json", sql], None);
    assert!(
        out.status.success(),
        "{sql}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    doc["rows"].as_array().unwrap().clone()
}

/// A history near now: per scope, handovers between holders on both routes, and resumed old
/// owners (holder `paused-worker`) whose stale commits land on scopes 3, 10 and 17.
fn history(now: i64) -> Vec<String> {
    let t0 = now - 120 * SEC;
    let mut lines = Vec::new();
    for i in 0..20i64 {
        let route = ROUTES[(i % 2) as usize];
        for e in 1..=3i64 {
            lines.push(format!(
                r#"{{"kind":"commit","ts":{},"scope":"order-{i}","epoch":{e},"route":"{route}","holder":"worker-{e}"}}"#,
                t0 + i * SEC + e * 2 * SEC
            ));
        }
    }
    for i in [3i64, 10, 17] {
        let route = ROUTES[(i % 2) as usize];
        lines.push(format!(
            r#"{{"kind":"commit","ts":{},"scope":"order-{i}","epoch":1,"route":"{route}","holder":"paused-worker"}}"#,
            t0 + 40 * SEC + i * SEC
        ));
    }
    lines.push(r#"{"kind":"commit","ts":"yesterday"}"#.to_string());
    lines
}

/// The 60 commits of [`history`], and a heartbeat near now: the watermark passes the windows
/// of the history.
fn history_to_now(now: i64) -> Vec<String> {
    let mut lines = history(now)[..60].to_vec();
    lines.push(format!(
        r#"{{"kind":"heartbeat","ts":{},"route":"{}"}}"#,
        now - SEC,
        ROUTES[0]
    ));
    lines
}

#[test]
fn a_forensic_session_over_the_archive() {
    let dir = tempfile::tempdir().unwrap();
    let svc = TestService::start(
        dir.path(),
        ORDERS_CONTRACT,
        &["--archive-flush-interval", "300ms"],
    );
    let now = now_ns();
    let r = svc.post_ndjson(&(history(now).join("\n") + "\n"));
    assert_eq!(r.status, 422, "one malformed line: {}", r.text());
    // At once, before any flush: the rows not yet written are in the tables.
    assert_eq!(one(&svc, "SELECT count(*) FROM events"), 63);
    assert_eq!(one(&svc, "SELECT count(DISTINCT source) FROM events"), 63);
    assert_eq!(one(&svc, "SELECT count(*) FROM malformed"), 1);
    // Stale commits by route and holder: counterexamples joined to their stale events.
    let by = rows(
        &svc,
        "SELECT e.route, e.holder, count(*) AS n FROM counterexamples c JOIN events e \
         ON c.stale_source = e.source WHERE c.kind = 'stale_commit' AND c.withdrawn IS NULL \
         GROUP BY e.route, e.holder ORDER BY e.route",
    );
    assert_eq!(
        by,
        [
            json!(["orders-api.transition", "paused-worker", 1]),
            json!(["settlement-worker.settle", "paused-worker", 2]),
        ],
        "scopes 10 (even: orders-api) and 3, 17 (odd: settlement)"
    );
    // A scope's whole history, in order, with provenance.
    let h = rows(
        &svc,
        "SELECT epoch, holder, source FROM events WHERE scope = 'order-3' ORDER BY ts",
    );
    assert_eq!(h.len(), 4);
    assert_eq!(h[3][0], 1);
    assert_eq!(h[3][1], "paused-worker");
    // Every row lands in Parquet files; the files are what a query sees next.
    svc.wait_for("the rows flushed", 20, |s| {
        s.metric("fencewatch_archive_rows_total{table=\"events\"}") == Some(63.0)
    });
    let files = std::fs::read_dir(svc.data_dir.join("archive/events"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "parquet")
        })
        .count();
    assert!(files >= 1);
    assert_eq!(one(&svc, "SELECT count(*) FROM events"), 63, "no row twice");
    // While serve runs, offline over the data directory: what is flushed.
    let n = offline(&svc.data_dir, "SELECT count(*) FROM events");
    assert_eq!(n, [json!([63])]);
    // More events: seen by the next query, offline too once flushed.
    let more: Vec<String> = (0..5)
        .map(|i| {
            format!(
                r#"{{"kind":"heartbeat","ts":{},"route":"{}"}}"#,
                now - SEC + i,
                ROUTES[0]
            )
        })
        .collect();
    assert_eq!(svc.post_ndjson(&more.join("\n")).status, 200);
    assert_eq!(one(&svc, "SELECT count(*) FROM events"), 68);
    svc.wait_for("the new rows flushed", 20, |s| {
        offline(&s.data_dir, "SELECT count(*) FROM events") == [json!([68])]
    });
    // Windows: every final one archived, `windows` the latest revision of each.
    let w = rows(
        &svc,
        "SELECT count(*), count(DISTINCT start), sum(CASE WHEN verdict = 'refuted' THEN 1 ELSE 0 END) FROM windows",
    );
    assert_eq!(w[0][0], w[0][1], "one row per window");
    assert!(w[0][2].as_i64().unwrap() >= 1, "{w:?}");
    // The answer formats, and 406.
    let csv = query_as(
        &svc,
        "SELECT scope, epoch FROM events ORDER BY ts LIMIT 2",
        "text/csv",
    );
    assert_eq!(csv.status, 200);
    assert!(csv.header("content-type").unwrap().starts_with("text/csv"));
    assert!(csv.text().starts_with("scope,epoch\n"), "{}", csv.text());
    let arrow = query_as(
        &svc,
        "SELECT scope FROM events",
        "application/vnd.apache.arrow.stream",
    );
    assert_eq!(arrow.status, 200);
    assert_eq!(&arrow.body[..4], &[0xff, 0xff, 0xff, 0xff], "an IPC stream");
    let no = query_as(&svc, "SELECT 1", "text/html");
    assert_eq!(no.status, 406, "{}", no.text());
    assert_eq!(no.header("content-type"), Some("application/problem+json"));
    // `fencewatch query --url`: a readable table.
    let url = format!("http://{}", svc.addr);
    let out = run(
        &[
            "query",
            "--url",
            &url,
            "--format",
            "table",
            "SELECT scope, count(*) AS n FROM events WHERE scope = 'order-3' GROUP BY scope",
        ],
        None,
    );
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        table.contains("| scope   | n |") && table.contains("| order-3 | 4 |"),
        "{table}"
    );
    // The OpenAPI document lists the endpoint.
    assert!(svc.get("/openapi.json").json()["paths"]["/v1/query"]["post"].is_object());
}

#[test]
fn every_statement_but_one_read_only_query_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let svc = TestService::start(dir.path(), ORDERS_CONTRACT, &[]);
    let secret = dir.path().join("secret.csv");
    std::fs::write(&secret, "a\n1\n").unwrap();
    let s = secret.display();
    let cases = [
        ("SELECT 1; SELECT 2".to_string(), "statements"),
        ("INSERT INTO events (scope) VALUES ('x')".into(), "dml"),
        ("DELETE FROM events".into(), "dml"),
        ("CREATE TABLE t AS SELECT 1".into(), "ddl"),
        ("DROP TABLE events".into(), "ddl"),
        (
            format!("CREATE EXTERNAL TABLE t STORED AS CSV LOCATION '{s}'"),
            "ddl",
        ),
        (format!("COPY (SELECT 1) TO '{s}.out'"), "copy"),
        (
            "SET datafusion.execution.batch_size = 1".into(),
            "statement",
        ),
        (format!("SELECT * FROM '{s}'"), "file_table"),
        (format!("SELECT * FROM read_csv('{s}')"), "table_function"),
        (
            format!("SELECT * FROM read_parquet('{s}')"),
            "table_function",
        ),
    ];
    for (sql, what) in &cases {
        let r = query_as(&svc, sql, "application/json");
        assert_eq!(r.status, 400, "{sql}: {}", r.text());
        assert_eq!(r.header("content-type"), Some("application/problem+json"));
        let p = r.json();
        assert_eq!(p["refused"], *what, "{sql}: {p}");
        assert!(p["type"].as_str().unwrap().ends_with("/query-refused"));
    }
    assert!(!dir.path().join("secret.csv.out").exists());
    let bad = query_as(&svc, "SELEC 1", "application/json");
    assert_eq!(bad.status, 400);
    assert!(
        bad.json()["type"]
            .as_str()
            .unwrap()
            .ends_with("/query-invalid")
    );
    // Offline, the same refusals, exit 3.
    let d = svc.data_dir.display().to_string();
    let out = run(&["query", "--data-dir", &d, "DROP TABLE events"], None);
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stderr).contains("read-only"));
    let refused = svc.metric("fencewatch_queries_total{outcome=\"refused\"}");
    assert_eq!(refused, Some(cases.len() as f64));
}

#[test]
fn limits_end_a_query_naming_them_and_ingest_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let svc = TestService::start(
        dir.path(),
        ORDERS_CONTRACT,
        // At nice 0 (not the default 19): on a machine other tests keep busy, a query at the
        // lowest priority may wait out its deadline before it reaches its memory limit; and
        // ingest must go on beside a runaway join of the same priority too.
        &[
            "--query-timeout",
            "8s",
            "--query-memory",
            "8388608",
            "--query-max-rows",
            "5",
            "--query-nice",
            "0",
        ],
    );
    let now = now_ns();
    assert_eq!(svc.post_ndjson(&history(now)[..60].join("\n")).status, 200);
    // Rows: cut at query_max_rows, and said so.
    let r = query_as(&svc, "SELECT * FROM events", "application/json");
    assert_eq!(r.status, 200);
    let doc = r.json();
    assert_eq!(
        (doc["rows"].as_array().unwrap().len(), &doc["truncated"]),
        (5, &json!(true))
    );
    let csv = query_as(&svc, "SELECT * FROM events", "text/csv");
    assert_eq!(csv.header("fencewatch-truncated"), Some("true"));
    // Memory: a grouping too large for query_memory, spilling off. Before the runaway join
    // below, whose thread may go on after its deadline.
    let big = "SELECT v, count(*) FROM (SELECT value % 2000000 AS v FROM generate_series(1, 4000000)) GROUP BY v ORDER BY v";
    let r = query_as(&svc, big, "application/json");
    assert_eq!(r.status, 422, "{}", r.text());
    assert_eq!(r.json()["limit"], "query_memory");
    // A runaway join: ended at its deadline while ingest is answered.
    let addr = svc.addr;
    let runaway = std::thread::spawn(move || {
        let started = std::time::Instant::now();
        let body = json!({"sql": "SELECT count(*) FROM generate_series(1, 200000) a, generate_series(1, 200000) b WHERE a.value * b.value = 7"}).to_string();
        let r = request(
            addr,
            "POST",
            "/v1/query",
            &[("content-type", "application/json")],
            body.as_bytes(),
        )
        .unwrap();
        (r, started.elapsed())
    });
    std::thread::sleep(Duration::from_millis(200));
    let t = std::time::Instant::now();
    let more = format!(
        r#"{{"kind":"heartbeat","ts":{},"route":"{}"}}"#,
        now - SEC,
        ROUTES[1]
    );
    assert_eq!(svc.post_ndjson(&more).status, 200);
    // Well before the query's deadline (8 s: the queries run at the lowest CPU priority, and a
    // loaded machine must not end the others by it): ingest does not wait for queries.
    assert!(
        t.elapsed() < Duration::from_millis(1500),
        "ingest waited {:?}",
        t.elapsed()
    );
    let (r, took) = runaway.join().unwrap();
    assert_eq!(r.status, 422, "{}", r.text());
    let p = r.json();
    assert_eq!(p["limit"], "query_timeout", "{p}");
    assert!(took < Duration::from_secs(11), "{took:?}");
    // The service is still whole: the 60 events and the heartbeat.
    assert_eq!(one(&svc, "SELECT count(*) FROM events"), 61);
    assert_eq!(svc.get("/readyz").status, 200);
}

/// Queries whose scalar functions build values beyond what DataFusion's memory pool counts
/// (hostile test, session 20): one aborted the whole service, another took it to 3.9 GiB.
/// Each now ends its own process with a 422 naming `query_memory`; the service's memory does
/// not move and it answers the next query.
#[test]
fn a_query_that_outgrows_its_memory_ends_its_own_process_not_the_service() {
    let dir = tempfile::tempdir().unwrap();
    let svc = TestService::start(
        dir.path(),
        ORDERS_CONTRACT,
        &["--query-timeout", "20s", "--query-nice", "0"],
    );
    let now = now_ns();
    assert_eq!(svc.post_ndjson(&history(now)[..60].join("\n")).status, 200);
    assert_eq!(one(&svc, "SELECT count(*) FROM events"), 60);
    let before = peak_rss(svc.pid());
    for sql in [
        // 30 GB in one allocation: refused by the allocator, which aborts the process.
        "SELECT length(repeat(arrow_cast('x', 'LargeUtf8'), 30000000000))",
        // 1 GB values, four of them: past query_memory (512 MiB) plus the process's own.
        "SELECT length(repeat('x', 1000000000)) FROM generate_series(1, 4)",
    ] {
        let r = query_as(&svc, sql, "application/json");
        assert_eq!(r.status, 422, "{sql}: {}", r.text());
        let p = r.json();
        assert_eq!(p["limit"], "query_memory", "{p}");
        assert!(
            p["detail"].as_str().unwrap().contains("ran out of memory"),
            "{p}"
        );
    }
    // An answer within the query's memory but over what the service takes (32 MiB): 40 MB of
    // control characters, six times that as JSON, ended before the service renders it.
    let r = query_as(
        &svc,
        "SELECT repeat(chr(1), 1000000) AS s FROM generate_series(1, 40)",
        "application/json",
    );
    assert_eq!(r.status, 422, "{}", &r.text()[..r.text().len().min(300)]);
    let p = r.json();
    assert_eq!(p["limit"], "query_memory", "{p}");
    assert!(p["detail"].as_str().unwrap().contains("over 32 MiB"), "{p}");
    let after = peak_rss(svc.pid());
    assert!(
        after < before + (100 << 20),
        "the service's own memory grew from {before} to {after} bytes"
    );
    assert_eq!(svc.get("/readyz").status, 200);
    assert_eq!(one(&svc, "SELECT count(*) FROM events"), 60);
}

#[test]
fn sigterm_flushes_the_archive_and_archive_false_turns_it_off() {
    let dir = tempfile::tempdir().unwrap();
    let svc = TestService::start(
        &fencewatch_tests::made_dir(dir.path().join("on")),
        ORDERS_CONTRACT,
        &[
            "--archive-flush-interval",
            "1h",
            "--checkpoint-interval",
            "1h",
        ],
    );
    let lines = history_to_now(now_ns());
    assert_eq!(svc.post_ndjson(&lines.join("\n")).status, 200);
    assert_eq!(
        offline(&svc.data_dir, "SELECT count(*) FROM events"),
        [json!([0])]
    );
    let data = svc.data_dir.clone();
    let (status, log) = svc.terminate();
    assert!(status.success(), "{log}");
    assert_eq!(offline(&data, "SELECT count(*) FROM events"), [json!([61])]);
    // Final windows were written at the last flush too.
    assert!(
        offline(&data, "SELECT count(*) FROM window_revisions")[0][0]
            .as_i64()
            .unwrap()
            > 0
    );
    // Off: nothing is archived, the WAL and checkpoints work as before.
    let off = TestService::start(
        &fencewatch_tests::made_dir(dir.path().join("off")),
        ORDERS_CONTRACT,
        &["--archive", "false"],
    );
    assert_eq!(off.post_ndjson(&lines.join("\n")).status, 200);
    assert!(!off.data_dir.join("archive").exists());
    assert_eq!(one(&off, "SELECT count(*) FROM events"), 0);
}

/// The nice value of each thread of process `pid` whose name starts with `name`
/// (`/proc/<pid>/task/*/comm`, cut at 15 bytes; field 19 of its `stat`).
#[cfg(target_os = "linux")]
fn nice_of_threads(pid: u32, name: &str) -> Vec<i32> {
    let mut out = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let task = task.unwrap().path();
        let comm = std::fs::read_to_string(task.join("comm")).unwrap_or_default();
        if !comm.starts_with(name) {
            continue;
        }
        let stat = std::fs::read_to_string(task.join("stat")).unwrap();
        let after_name = &stat[stat.rfind(')').unwrap() + 2..];
        out.push(after_name.split(' ').nth(16).unwrap().parse().unwrap());
    }
    out
}

/// The archive's thread runs below ingest's priority (`archive_nice`, 10 by default), so that
/// on a shared core its Parquet encoding waits for ingest's stages; ingest's threads keep the
/// service's own priority; `--archive-nice` sets it. Rows are archived either way.
#[cfg(target_os = "linux")]
#[test]
fn the_archive_thread_runs_below_ingest_priority() {
    let base = std::fs::read_to_string("/proc/thread-self/stat").unwrap();
    let base: i32 = base[base.rfind(')').unwrap() + 2..]
        .split(' ')
        .nth(16)
        .unwrap()
        .parse()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    for (flags, nice) in [(&[][..], 10), (&["--archive-nice", "15"][..], 15)] {
        let svc = TestService::start(
            &fencewatch_tests::made_dir(dir.path().join(format!("n{nice}"))),
            ORDERS_CONTRACT,
            flags,
        );
        let lines = history_to_now(now_ns());
        assert_eq!(svc.post_ndjson(&lines.join("\n")).status, 200);
        let pid = svc.pid();
        // A thread may lower its own priority, never raise it: from the test's own.
        assert_eq!(nice_of_threads(pid, "fencewatch-arc"), [nice.max(base)]);
        for ingest in ["fencewatch-app", "fencewatch-wri", "fencewatch-dec"] {
            assert_eq!(nice_of_threads(pid, ingest), [base], "{ingest}");
        }
        let data = svc.data_dir.clone();
        let (status, log) = svc.terminate();
        assert!(status.success(), "{log}");
        assert_eq!(offline(&data, "SELECT count(*) FROM events"), [json!([61])]);
    }
}

#[test]
fn sigkill_at_random_moments_leaves_every_acknowledged_event_archived_once() {
    let dir = tempfile::tempdir().unwrap();
    let now = now_ns();
    // 40 batches of 25 events with emitters and seqs: a batch resent after a kill is a
    // duplicate delivery, not archived again.
    let mut batches: Vec<String> = Vec::new();
    let mut seq = 0u64;
    for b in 0..40i64 {
        let mut lines = Vec::new();
        for i in 0..25i64 {
            seq += 1;
            let k = b * 25 + i;
            let epoch = if k % 97 == 0 { 1 } else { (k / 37 + 2) as u64 };
            lines.push(format!(
                r#"{{"kind":"commit","ts":{},"scope":"s{}","epoch":{epoch},"route":"{}","emitter":"e1","seq":{seq}}}"#,
                now - 120 * SEC + k * 100_000_000,
                k % 37,
                ROUTES[(k % 2) as usize]
            ));
        }
        batches.push(lines.join("\n"));
    }
    // Flushes every 50 ms: kills land before, during and after them.
    let flags = ["--archive-flush-interval", "50ms"];
    let svc = TestService::start(dir.path(), ORDERS_CONTRACT, &flags);
    let (svc, kills) = post_with_kills(svc, &batches, 0x2545_f491_4f6c_dd1d, 3, 60_000);
    assert!(kills >= 5, "only {kills} kills");
    let sql = "SELECT count(*), count(DISTINCT source), count(DISTINCT seq) FROM events";
    assert_eq!(
        rows(&svc, sql),
        [json!([1000, 1000, 1000])],
        "after {kills} kills"
    );
    let cx = "SELECT count(*), count(DISTINCT id) FROM counterexamples";
    let live = rows(&svc, cx);
    let data = svc.data_dir.clone();
    let (status, log) = svc.terminate();
    assert!(status.success(), "{log}");
    assert_eq!(offline(&data, sql), [json!([1000, 1000, 1000])]);
    let archived = offline(&data, cx);
    assert_eq!(
        archived[0][0], archived[0][1],
        "a counterexample archived twice"
    );
    assert!(archived[0][0].as_i64().unwrap() <= live[0][0].as_i64().unwrap());
    let w = offline(
        &data,
        "SELECT count(*), count(DISTINCT concat(property, '/', CAST(start AS VARCHAR), '/', CAST(revision AS VARCHAR))) FROM window_revisions",
    );
    assert_eq!(w[0][0], w[0][1], "a window revision archived twice");
}

#[test]
fn attestations_are_archived_and_a_late_one_revises_the_archived_windows() {
    let dir = tempfile::tempdir().unwrap();
    let contract = format!(
        "{ORDERS_CONTRACT}  [[property.premise]]\n  name = \"durable_fence\"\n  max_age = \"24h\"\n"
    );
    let svc = TestService::start(
        dir.path(),
        &contract,
        &["--archive-flush-interval", "200ms"],
    );
    let now = now_ns();
    let lines = history_to_now(now);
    assert_eq!(svc.post_ndjson(&lines.join("\n")).status, 200);
    let unattested = "SELECT count(*) FROM window_revisions WHERE final AND revision = 0 AND unknown LIKE '%\"premise_unattested\":1%'";
    // `live`: through the service (rows not yet written included); else only what is
    // flushed, read offline.
    let wait_for = |sql: &str, live: bool, ok: &dyn Fn(i64) -> bool| {
        let until = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            let n = if live {
                one(&svc, sql)
            } else {
                offline(&svc.data_dir, sql)[0][0].clone()
            };
            let n = n.as_i64().unwrap();
            if ok(n) {
                return n;
            }
            assert!(
                std::time::Instant::now() < until,
                "{sql}: {n}; {:?}",
                rows(
                    &svc,
                    "SELECT start, revision, revised, final, verdict, unknown FROM window_revisions ORDER BY start, revision"
                )
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    // Unattested: every final window says so, archived (flushed) as revision 0.
    let finals = wait_for(unattested, false, &|n| n > 0);
    // A late attestation covering the history: the archived windows are revised, premise
    // reasons only, and rise.
    let t0 = now - 300 * SEC;
    let att = format!(
        r#"{{"kind":"attestation","premise":"durable_fence","ts":{t0},"valid_for":"1h","attester":"deploy","evidence":"sha256:00ff"}}"#
    );
    assert_eq!(svc.post_ndjson(&att).status, 200);
    let revised = "SELECT count(*) FROM window_revisions WHERE revised AND revision = 1 AND unknown NOT LIKE '%premise%'";
    assert!(wait_for(revised, false, &|n| n >= finals) >= finals);
    assert_eq!(
        one(
            &svc,
            "SELECT count(*) FROM windows WHERE unknown LIKE '%premise%'"
        ),
        0,
        "each window's latest revision is supported"
    );
    let a = rows(
        &svc,
        "SELECT kind, property, premise, outcome, valid_for, attester, evidence FROM events WHERE kind = 'attestation'",
    );
    assert_eq!(
        a,
        [json!([
            "attestation",
            "order-mutation",
            "durable_fence",
            "holds",
            3_600_000_000_000i64,
            "deploy",
            "sha256:00ff"
        ])]
    );
}

/// A table folder that cannot be written (here a file in its place: root ignores permissions)
/// fails the archive's next flush: the service stops by itself, non-zero, at once rather than
/// at its next checkpoint (an hour away here); every event it acknowledged, before and after
/// the failure, is archived exactly once after the folder is back and the service restarted.
#[test]
fn a_failed_archive_stops_the_service_and_a_restart_archives_every_acknowledged_event_once() {
    let dir = tempfile::tempdir().unwrap();
    let flags = [
        "--archive-flush-interval",
        "100ms",
        "--checkpoint-interval",
        "1h",
    ];
    let mut svc = TestService::start(dir.path(), ORDERS_CONTRACT, &flags);
    let now = now_ns();
    let line = |k: i64| {
        format!(
            r#"{{"kind":"commit","ts":{},"scope":"s{}","epoch":{},"route":"{}","emitter":"e1","seq":{}}}"#,
            now - 60 * SEC + k * 1_000_000,
            k % 7,
            k / 7 + 1,
            ROUTES[(k % 2) as usize],
            k + 1
        )
    };
    let first: Vec<String> = (0..50).map(line).collect();
    assert_eq!(svc.post_ndjson(&first.join("\n")).status, 200);
    svc.wait_for("the first events archived", 30, |s| {
        s.rows("SELECT count(*) FROM events") == [json!([50])]
    });
    let events = svc.data_dir.join("archive").join("events");
    let aside = svc.data_dir.join("events-aside");
    std::fs::rename(&events, &aside).unwrap();
    std::fs::write(&events, b"not a folder").unwrap();
    // Acknowledged: in the log, whatever the archive does.
    let second: Vec<String> = (50..100).map(line).collect();
    let acked = svc.post_ndjson(&second.join("\n")).status;
    let (status, log) = svc
        .wait_exit(30)
        .expect("the service stops by itself after its archive failed");
    assert!(!status.success(), "{log}");
    assert!(log.contains("evidence archive failed"), "{log}");
    std::fs::remove_file(&events).unwrap();
    std::fs::rename(&aside, &events).unwrap();
    let svc = TestService::restart(svc.kill9());
    let want = if acked == 200 { 100 } else { 50 };
    let sql = "SELECT count(*), count(DISTINCT seq) FROM events";
    svc.wait_for("every acknowledged event archived", 30, |s| {
        s.rows(sql) == [json!([want, want])]
    });
    assert_eq!(acked, 200, "the events after the failure were acknowledged");
}
