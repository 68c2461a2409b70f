//! The SQL side: the tables over files and rows not yet written, the refusals, the limits.

use super::*;
use datafusion::arrow::array::cast::AsArray;
use datafusion::arrow::datatypes::Int64Type;
use datafusion::parquet::arrow::ArrowWriter;
use fencewatch_assess::EventTime;
use fencewatch_assess::Verdict;
use fencewatch_assess::event::{Epoch, Event, Kind};
use fencewatch_assess::window::{WindowDetail, WindowSummary};
use fencewatch_ingest::archive::Origin;
use fencewatch_ingest::archive::rows::{EventRows, Rows, WindowRows};
use std::path::Path;

fn events(from: u64, n: u64) -> RecordBatch {
    let mut rows = EventRows::default();
    for i in from..from + n {
        let mut ev = Event::new(Kind::Commit, EventTime(i as i64 * 1_000_000_000));
        let scope = format!("s{}", i % 3);
        ev.scope = Some(&scope);
        ev.epoch = Some(Epoch(i));
        ev.route = Some("r");
        let at = Origin {
            partition: "wal",
            received: 1,
        };
        rows.push(at, &ev, Some("p"), format_args!("http:{i}"), i);
    }
    rows.finish()
}

fn parquet(dir: &Path, name: &str, b: &RecordBatch) -> std::path::PathBuf {
    let path = dir.join(name);
    let mut w =
        ArrowWriter::try_new(std::fs::File::create(&path).unwrap(), b.schema(), None).unwrap();
    w.write(b).unwrap();
    w.close().unwrap();
    path
}

/// Events 0..10 in a file, 10..13 in memory.
fn snapshot(dir: &Path) -> Snapshot {
    let mut s = Snapshot::default();
    s.files.insert(
        Table::Events,
        vec![parquet(dir, "e.parquet", &events(0, 10))],
    );
    s.batches.insert(Table::Events, vec![events(10, 3)]);
    s
}

use fencewatch_ingest::archive::Table;

fn queries(limits: Limits) -> Queries {
    Queries::new(limits).unwrap()
}

fn count(a: &Answer) -> i64 {
    a.batches[0].column(0).as_primitive::<Int64Type>().value(0)
}

#[test]
fn tables_unite_the_files_and_the_rows_not_yet_written() {
    let dir = tempfile::tempdir().unwrap();
    let q = queries(Limits::default());
    let a = q
        .run_blocking(
            "SELECT count(*), count(DISTINCT source) FROM events",
            snapshot(dir.path()),
        )
        .unwrap();
    assert_eq!(count(&a), 13);
    assert_eq!(
        a.batches[0].column(1).as_primitive::<Int64Type>().value(0),
        13
    );
    // Every table exists, empty or not.
    for t in tables::NAMES {
        let a = q
            .run_blocking(&format!("SELECT count(*) FROM {t}"), snapshot(dir.path()))
            .unwrap();
        assert!(count(&a) >= 0);
    }
    // A filter over a time column.
    let a = q
        .run_blocking(
            "SELECT count(*) FROM events WHERE ts >= TIMESTAMP '1970-01-01T00:00:05Z' AND scope = 's1'",
            snapshot(dir.path()),
        )
        .unwrap();
    assert_eq!(count(&a), 2, "5..13 with i % 3 == 1: 7 and 10");
}

#[test]
fn windows_are_the_latest_revision_of_each() {
    let mut rows = WindowRows::default();
    let d = |start: i64, verdict| WindowDetail {
        index: start,
        start,
        end: start + 1,
        verdict,
        is_final: true,
        revised: false,
        summary: WindowSummary::default(),
    };
    rows.push("p", &d(0, Verdict::Holds), 0);
    rows.push("p", &d(0, Verdict::Unknown), 1);
    rows.push("p", &d(1, Verdict::Holds), 0);
    let mut s = Snapshot::default();
    s.batches
        .insert(Table::WindowRevisions, vec![rows.finish()]);
    let q = queries(Limits::default());
    let a = q
        .run_blocking(
            "SELECT verdict, revision FROM windows ORDER BY start",
            s.clone(),
        )
        .unwrap();
    let v = a.batches[0].column(0).as_string::<i32>();
    assert_eq!((v.value(0), v.value(1)), ("unknown", "holds"));
    let a = q
        .run_blocking("SELECT count(*) FROM window_revisions", s)
        .unwrap();
    assert_eq!(count(&a), 3);
}

#[test]
fn everything_but_one_read_only_query_is_refused_naming_what() {
    let q = queries(Limits::default());
    let cases = [
        ("SELECT 1; SELECT 2", "statements"),
        ("INSERT INTO events VALUES (1)", "dml"),
        ("DELETE FROM events", "dml"),
        ("UPDATE events SET scope = 'x'", "dml"),
        ("CREATE TABLE t AS SELECT 1", "ddl"),
        ("CREATE VIEW v AS SELECT 1", "ddl"),
        ("DROP TABLE events", "ddl"),
        (
            "CREATE EXTERNAL TABLE t STORED AS CSV LOCATION '/etc/passwd'",
            "ddl",
        ),
        ("COPY (SELECT 1) TO '/tmp/x.csv'", "copy"),
        ("COPY events TO '/tmp/x.parquet'", "copy"),
        ("SET datafusion.execution.batch_size = 1", "statement"),
        ("EXPLAIN COPY (SELECT 1) TO '/tmp/x.csv'", "copy"),
        ("SELECT * FROM '/etc/passwd'", "file_table"),
        ("SELECT * FROM 'events/0.parquet'", "file_table"),
        (
            "SELECT * FROM read_parquet('/tmp/x.parquet')",
            "table_function",
        ),
        ("SELECT * FROM read_csv('/etc/passwd')", "table_function"),
        ("SELECT * FROM read_json('/etc/passwd')", "table_function"),
        (
            "SELECT * FROM parquet_metadata('/tmp/x.parquet')",
            "table_function",
        ),
        (
            "SELECT * FROM events e JOIN read_csv('/etc/passwd') c ON true",
            "table_function",
        ),
        (
            "WITH x AS (SELECT * FROM 's3://bucket/x') SELECT * FROM x",
            "file_table",
        ),
    ];
    for (sql, want) in cases {
        match q.run_blocking(sql, Snapshot::default()) {
            Err(QueryError::Refused { refused, detail }) => {
                assert_eq!(refused, want, "{sql}: {detail}")
            }
            other => panic!("{sql}: {other:?}"),
        }
    }
    // A table that is not one of the archive's is not found (no URL tables).
    let e = q
        .run_blocking("SELECT * FROM passwd", Snapshot::default())
        .unwrap_err();
    assert!(matches!(e, QueryError::Invalid { .. }), "{e:?}");
    // Read-only queries pass, EXPLAIN and generate_series included.
    for sql in [
        "EXPLAIN SELECT count(*) FROM events",
        "SELECT count(*) FROM generate_series(1, 10)",
        "WITH x AS (SELECT scope FROM events) SELECT count(*) FROM x",
        // information_schema, as the README says (hostile test, session 27: refused).
        "SHOW TABLES",
        "SHOW COLUMNS FROM events",
        "SELECT * FROM information_schema.df_settings",
    ] {
        q.run_blocking(sql, Snapshot::default())
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    let a = q.run_blocking("SHOW TABLES", Snapshot::default()).unwrap();
    let shown = datafusion::arrow::util::pretty::pretty_format_batches(&a.batches)
        .unwrap()
        .to_string();
    assert!(
        shown.contains("events") && shown.contains("windows"),
        "{shown}"
    );
}

#[test]
fn the_session_itself_reads_no_file_and_writes_nothing() {
    // Past the statement check, DataFusion's session still refuses: no URL table, no
    // file-reading function, DDL, DML and statements off in its SQLOptions.
    let dir = tempfile::tempdir().unwrap();
    let file = parquet(dir.path(), "x.parquet", &events(0, 3));
    let csv = dir.path().join("x.csv");
    std::fs::write(&csv, "a\n1\n").unwrap();
    let (p, c) = (file.display(), csv.display());
    let pool: Arc<dyn MemoryPool> = Arc::new(GreedyMemoryPool::new(64 << 20));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    for sql in [
        format!("SELECT * FROM '{p}'"),
        format!("SELECT * FROM \"{p}\""),
        format!("SELECT * FROM read_parquet('{p}')"),
        format!("SELECT * FROM read_csv('{c}')"),
        format!("SELECT * FROM parquet_metadata('{p}')"),
        format!("CREATE EXTERNAL TABLE t STORED AS CSV LOCATION '{c}'"),
        format!(
            "COPY (SELECT 1) TO '{}'",
            dir.path().join("out.csv").display()
        ),
        "CREATE TABLE t AS SELECT 1".to_string(),
        "INSERT INTO events SELECT * FROM events".to_string(),
        "SET datafusion.execution.batch_size = 1".to_string(),
    ] {
        let r = rt.block_on(execute(
            &sql,
            Vec::new(),
            Snapshot::default(),
            Limits::default(),
            pool.clone(),
            tables::Footers::default(),
        ));
        assert!(r.is_err(), "{sql}: answered {:?}", r.map(|a| a.rows()));
    }
    assert!(!dir.path().join("out.csv").exists());
}

#[test]
fn rows_beyond_query_max_rows_are_cut_and_marked() {
    let dir = tempfile::tempdir().unwrap();
    let q = queries(Limits {
        max_rows: 4,
        ..Limits::default()
    });
    let a = q
        .run_blocking("SELECT * FROM events", snapshot(dir.path()))
        .unwrap();
    assert_eq!((a.rows(), a.truncated), (4, true));
    let a = q
        .run_blocking("SELECT * FROM events LIMIT 4", snapshot(dir.path()))
        .unwrap();
    assert_eq!((a.rows(), a.truncated), (4, false), "exactly at the limit");
    let a = q
        .run_blocking("SELECT * FROM events LIMIT 3", snapshot(dir.path()))
        .unwrap();
    assert_eq!((a.rows(), a.truncated), (3, false));
}

#[test]
fn a_query_past_query_memory_is_ended_naming_the_limit() {
    let q = queries(Limits {
        memory: 8 << 20,
        ..Limits::default()
    });
    let sql = "SELECT v, count(*) FROM (SELECT value % 3000000 AS v FROM generate_series(1, 6000000)) GROUP BY v ORDER BY v";
    let e = q.run_blocking(sql, Snapshot::default()).unwrap_err();
    assert!(matches!(e, QueryError::Memory { .. }), "{e:?}");
    assert_eq!(e.limit(), Some("query_memory"));
    // The pool is given back: a small query runs after it.
    let a = q
        .run_blocking(
            "SELECT count(*) FROM generate_series(1, 1000)",
            Snapshot::default(),
        )
        .unwrap();
    assert_eq!(count(&a), 1000);
}

#[test]
fn a_query_past_query_timeout_is_ended_by_its_deadline() {
    // 2 s, not less: the query after the runaway one runs under the same limit, and planning
    // it in a debug build on a loaded machine (CI starts every test at once) took over 300 ms.
    let q = queries(Limits {
        timeout: Duration::from_secs(2),
        ..Limits::default()
    });
    let sql = "SELECT count(*) FROM generate_series(1, 100000) a, generate_series(1, 100000) b WHERE a.value + b.value = 7";
    let started = std::time::Instant::now();
    let e = q.run_blocking(sql, Snapshot::default()).unwrap_err();
    assert!(matches!(e, QueryError::Timeout(_)), "{e:?}");
    assert_eq!(e.limit(), Some("query_timeout"));
    // Without the deadline the join (10^10 pairs) runs for hours; 20 s leaves a loaded
    // machine's debug build room to plan and cancel, and still fails a deadline not enforced.
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    // The next query runs.
    let a = q
        .run_blocking(
            "SELECT count(*) FROM generate_series(1, 10)",
            Snapshot::default(),
        )
        .unwrap();
    assert_eq!(count(&a), 10);
}

#[test]
fn answers_render_as_json_csv_arrow_and_a_table() {
    let dir = tempfile::tempdir().unwrap();
    let q = queries(Limits::default());
    let a = q
        .run_blocking(
            "SELECT ts, scope, epoch, epoch IS NULL AS none, 1.5 AS x FROM events ORDER BY ts LIMIT 2",
            snapshot(dir.path()),
        )
        .unwrap();
    let j: serde_json::Value =
        serde_json::from_slice(&render(&a, Format::Json).unwrap().body).unwrap();
    assert_eq!(
        j["columns"][0],
        serde_json::json!({"name": "ts", "type": "timestamp"})
    );
    assert_eq!(j["columns"][2]["type"], "uint64");
    assert_eq!(
        j["rows"][1],
        serde_json::json!(["1970-01-01T00:00:01.000000000Z", "s1", 1, false, 1.5])
    );
    assert_eq!(j["truncated"], false);
    let csv = String::from_utf8(render(&a, Format::Csv).unwrap().body).unwrap();
    assert!(csv.starts_with("ts,scope,epoch,none,x\n"), "{csv}");
    assert!(csv.contains("s1"), "{csv}");
    let ipc = render(&a, Format::Arrow).unwrap().body;
    let r = datafusion::arrow::ipc::reader::StreamReader::try_new(std::io::Cursor::new(ipc), None)
        .unwrap();
    assert_eq!(r.map(|b| b.unwrap().num_rows()).sum::<usize>(), 2);
    let t = String::from_utf8(render(&a, Format::Table).unwrap().body).unwrap();
    assert!(t.contains("| scope"), "{t}");
    // No rows: the columns still.
    let a = q
        .run_blocking("SELECT scope FROM events WHERE false", snapshot(dir.path()))
        .unwrap();
    let j: serde_json::Value =
        serde_json::from_slice(&render(&a, Format::Json).unwrap().body).unwrap();
    assert_eq!(j["rows"], serde_json::json!([]));
    assert_eq!(
        String::from_utf8(render(&a, Format::Csv).unwrap().body).unwrap(),
        "scope\n"
    );
}

/// The nice value of the calling thread, from `/proc/thread-self/stat` (field 19).
#[cfg(target_os = "linux")]
fn own_nice() -> i32 {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap();
    let after_name = &stat[stat.rfind(')').unwrap() + 2..];
    after_name.split(' ').nth(16).unwrap().parse().unwrap()
}

#[cfg(target_os = "linux")]
#[test]
fn queries_run_at_the_lowest_cpu_priority_and_ingest_keeps_its_own() {
    // A runaway query shares the cores with ingest: the scheduler must favour ingest.
    let before = own_nice();
    let q = queries(Limits::default());
    let handle = q.handle().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let (worker, blocking) = rt.block_on(async {
        let worker = handle.spawn(async { own_nice() }).await.unwrap();
        let blocking = handle.spawn_blocking(own_nice).await.unwrap();
        (worker, blocking)
    });
    assert_eq!((worker, blocking), (QUERY_NICE, QUERY_NICE));
    assert_eq!(own_nice(), before, "the caller's thread is left as it was");
    // `query_nice` sets it (a thread may lower its own priority, never raise it).
    let q = queries(Limits {
        nice: 7.max(before),
        ..Limits::default()
    });
    let handle = q.handle().unwrap();
    let worker = rt.block_on(async { handle.spawn(async { own_nice() }).await.unwrap() });
    assert_eq!(worker, 7.max(before));
}

/// A chain of operators parses into a tree as deep as it is long, which checking walks and
/// dropping frees recursively: a 100 KB `SELECT 1+1+…+1` aborted the service on a stack
/// overflow (hostile test, session 40). Beyond `MAX_SQL_OPERATORS` it is refused unparsed;
/// up to it, checked on this thread's stack (a runtime thread's size).
#[test]
fn a_long_chain_of_operators_is_refused_before_it_is_parsed() {
    let chain = |op: &str, n: usize| format!("SELECT 1{}", format!(" {op} 1").repeat(n));
    check(&chain("+", MAX_SQL_OPERATORS)).expect("at the bound");
    check(&format!(
        "SELECT 1 FROM events WHERE {}",
        vec!["epoch = 1"; MAX_SQL_OPERATORS / 2].join(" OR ")
    ))
    .expect("conditions at the bound");
    // Operators inside literals, names and comments are not operators.
    let quoted = "+".repeat(5 * MAX_SQL_OPERATORS);
    check(&format!(
        "SELECT '{quoted}' AS \"{quoted}\" FROM events -- {quoted}"
    ))
    .expect("quoted");
    let q = queries(Limits::default());
    for (op, n) in [
        ("+", MAX_SQL_OPERATORS + 1),
        ("+", 50_000),
        ("||", 50_000),
        ("AND", 50_000),
        ("*", 200_000),
    ] {
        let sql = chain(op, n);
        match q.run_blocking(&sql, Snapshot::default()) {
            Err(QueryError::Refused { refused, detail }) => {
                assert_eq!(refused, "operators", "{op} x {n}: {detail}");
                assert!(detail.contains(&n.to_string()), "{detail}");
            }
            other => panic!("{op} x {n}: {other:?}"),
        }
    }
}
