//! `POST /v1/query` in a process of its own, so that no SQL can take the service down.
//!
//! DataFusion's memory pool accounts for what its operators hold (sorts, joins, aggregates,
//! the answer), not for what a scalar function builds: `repeat`, `lpad`, `||` nested through
//! a few CTEs build values of any size from a short query, and an allocation that fails
//! aborts the process that made it (hostile test, session 20: one query aborted `serve`, another
//! took it to 3.9 GiB with `query_memory` at 512 MiB). So each HTTP query runs in a child
//! process, `fencewatch __query-worker`, whose data segment is limited (`RLIMIT_DATA`) to
//! `query_memory` plus [`BASE_BYTES`] for the process itself: a query that needs more ends
//! that process, and the service answers `422` with `limit: query_memory`. The child runs at
//! `query_nice`, is killed at `query_timeout`, and at most [`MAX_CONCURRENT`] run at once.
//!
//! The service checks the statement first (the refusals are its own, before any process
//! starts), then writes the child its request on stdin: one JSON line (the SQL, the limits,
//! the snapshot's files per table, and the byte length of each table's rows not yet written)
//! followed by those rows as Arrow IPC streams. The child answers on stdout: one JSON line
//! (`{"truncated": …}`, or `{"error": LABEL, "detail": …}`), then, for an answer, its rows as
//! one Arrow IPC stream. `/v1/scopes` and the witness pages run their own fixed SQL in the
//! service ([`Queries`](super::Queries)), and `fencewatch query --data-dir` in its own process.

use super::{Answer, Limits, MAX_CONCURRENT, Queries, QueryError, check};
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::ipc::reader::StreamReader;
use fencewatch_ingest::archive::{Snapshot, Table};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::{BufRead, Read, Write};
use std::path::PathBuf;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The argument that makes `fencewatch` a query's process.
pub const WORKER_ARG: &str = "__query-worker";

/// Bytes a query's process may hold beyond `query_memory`: its runtime, DataFusion's session
/// and plan, the Parquet readers' buffers, the request and the answer being written. A worker
/// on an empty archive maps ~60 MiB of data; this leaves room for the footers and readers of
/// a large one.
pub const BASE_BYTES: u64 = 448 << 20;

/// Bytes of an answer (Arrow IPC) the service takes from a query's process at most: beyond,
/// the query ends with `422` (`query_memory`). The service holds each answer while it renders
/// and sends it, a JSON rendering up to six times as large (a control character is `\u0001`),
/// and at most [`MAX_CONCURRENT`] of them at once ([`Isolated::run`]): a query whose
/// values fill a worker's memory no longer takes the service's (hostile test, session 20: a
/// 260 MB answer of control characters took the service to 1.95 GB, four clients that did not
/// read theirs to 6.5 GB). 32 MiB is 100,000 rows of ~330 bytes, more than a forensic answer.
pub const MAX_ANSWER_BYTES: u64 = 32 << 20;

/// The request's first line.
#[derive(Debug, Serialize, Deserialize)]
struct Request {
    sql: String,
    timeout_ms: u64,
    max_rows: usize,
    memory: usize,
    nice: i32,
    /// Per table name, its files.
    files: BTreeMap<String, Vec<PathBuf>>,
    /// Per table name, the byte length of the IPC stream of its rows not yet written, in this
    /// order after the line.
    pending: Vec<(String, u64)>,
}

/// The answer's first line.
#[derive(Debug, Serialize, Deserialize)]
struct Response {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    truncated: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    #[serde(default)]
    detail: String,
}

/// Queries run each in a process of its own.
#[derive(Debug)]
pub struct Isolated {
    exe: PathBuf,
    limits: Limits,
    /// Queries running or answers held by the service (rendered, being sent) at once at most:
    /// a permit lasts from before a query's process starts until its answer is sent.
    slots: std::sync::Arc<tokio::sync::Semaphore>,
}

impl Isolated {
    /// Queries run by `exe` (this program, [`WORKER_ARG`]) under `limits`.
    pub fn new(exe: PathBuf, limits: Limits) -> Isolated {
        Isolated {
            exe,
            limits,
            slots: std::sync::Arc::new(tokio::sync::Semaphore::new(MAX_CONCURRENT)),
        }
    }

    /// Runs `sql` over `snapshot` in a process of its own: the answer arrives by
    /// `query_timeout` at the latest (waiting for a slot included), and the service's memory
    /// is not the query's. With the answer comes its slot, for the caller to hold until the
    /// answer is sent (in the response's body): at most [`MAX_CONCURRENT`] answers are held.
    pub async fn run(
        &self,
        sql: &str,
        snapshot: Snapshot,
    ) -> Result<(Answer, tokio::sync::OwnedSemaphorePermit), QueryError> {
        check(sql)?;
        let limits = self.limits;
        let deadline = tokio::time::Instant::now() + limits.timeout;
        let slot = tokio::time::timeout_at(deadline, self.slots.clone().acquire_owned())
            .await
            .map_err(|_| QueryError::Timeout(limits.timeout))?
            .expect("never closed");
        let request = tokio::task::block_in_place(|| encode_request(sql, &snapshot, limits));
        drop(snapshot);
        let failed = |what: &str, e: std::io::Error| QueryError::Failed(format!("{what}: {e}"));
        let mut child = tokio::process::Command::new(&self.exe)
            .arg(WORKER_ARG)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            // Fewer malloc arenas: less data mapped for the same use.
            .env("MALLOC_ARENA_MAX", "2")
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| failed("cannot start the query's process", e))?;
        // Limited before it reads its request, so before it allocates for the query (its
        // threads, started after, inherit its priority).
        if let Some(pid) = child.id() {
            confine(pid, limits).map_err(|e| failed("cannot limit the query's process", e))?;
        }
        let (mut stdin, mut stdout, mut stderr) = (
            child.stdin.take().expect("piped"),
            child.stdout.take().expect("piped"),
            child.stderr.take().expect("piped"),
        );
        let io = async move {
            // A process that ended early closes its stdin: its status says why.
            let _ = stdin.write_all(&request).await;
            drop(stdin);
            // All of stderr is read beside (a full pipe would stop the process), its start kept.
            let stderr = tokio::spawn(async move {
                let mut err = Vec::new();
                drain(&mut stderr, &mut err).await;
                err
            });
            let mut out = Vec::new();
            let cap = MAX_ANSWER_BYTES + 4096;
            (&mut stdout)
                .take(cap + 1)
                .read_to_end(&mut out)
                .await
                .map_err(|e| failed("reading the query's answer", e))?;
            // Over the cap the process is ended at once (dropped with this future), not read on.
            if out.len() as u64 > cap {
                return Err(QueryError::Memory {
                    limit: limits.memory,
                    detail: format!(
                        "the answer is over {} MiB (Arrow); select fewer or narrower rows",
                        MAX_ANSWER_BYTES >> 20
                    ),
                });
            }
            let status = child
                .wait()
                .await
                .map_err(|e| failed("waiting for the query's process", e))?;
            let err = stderr.await.unwrap_or_default();
            Ok((out, err, status))
        };
        // Past the deadline the future is dropped, and the process with it (`kill_on_drop`).
        match tokio::time::timeout_at(deadline, io).await {
            Err(_) => Err(QueryError::Timeout(limits.timeout)),
            Ok(Err(e)) => Err(e),
            Ok(Ok((out, err, status))) => {
                tokio::task::block_in_place(|| decode_response(&out, &err, status, limits))
                    .map(|answer| (answer, slot))
            }
        }
    }
}

/// Reads `r` to its end, keeping its first 64 KiB in `kept`.
async fn drain(r: &mut (impl tokio::io::AsyncRead + Unpin), kept: &mut Vec<u8>) {
    let mut buf = [0u8; 8192];
    while let Ok(n @ 1..) = r.read(&mut buf).await {
        let room = (64usize << 10).saturating_sub(kept.len());
        kept.extend_from_slice(&buf[..n.min(room)]);
    }
}

/// This program, to start as a query's process: `/proc/self/exe` where there is one (still
/// this very binary after it was replaced or deleted on disk, as by a package upgrade under a
/// running service), else its path.
pub fn own_program() -> std::io::Result<PathBuf> {
    let proc = PathBuf::from("/proc/self/exe");
    if proc.exists() {
        return Ok(proc);
    }
    std::env::current_exe()
}

/// Limits process `pid`'s data to `query_memory` + [`BASE_BYTES`] and sets its CPU priority.
fn confine(pid: u32, limits: Limits) -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        use rustix::process::{Pid, Resource, Rlimit, prlimit, setpriority_process};
        let pid = Pid::from_raw(pid as i32).ok_or_else(|| std::io::Error::other("no pid"))?;
        let bytes = limits.memory as u64 + BASE_BYTES;
        let limit = Rlimit {
            current: Some(bytes),
            maximum: Some(bytes),
        };
        prlimit(Some(pid), Resource::Data, limit)?;
        setpriority_process(Some(pid), limits.nice)?;
        // Under a memory limit of the service's whole cgroup (a pod's), the kernel then ends
        // a query's process before the service. Raising one's own child's score needs no
        // privilege; where /proc is not writable the query runs without it.
        let _ = std::fs::write(
            format!("/proc/{}/oom_score_adj", pid.as_raw_nonzero()),
            "1000",
        );
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (pid, limits);
    Ok(())
}

/// `batches` as one Arrow IPC stream of `schema`, in memory.
fn ipc(batches: &[RecordBatch], schema: &datafusion::arrow::datatypes::SchemaRef) -> Vec<u8> {
    super::output::ipc_stream(schema, batches).expect("batches of their schema, into memory")
}

fn encode_request(sql: &str, snapshot: &Snapshot, limits: Limits) -> Vec<u8> {
    let mut streams = Vec::new();
    let mut pending = Vec::new();
    for (t, batches) in &snapshot.batches {
        if batches.is_empty() {
            continue;
        }
        let bytes = ipc(batches, &t.schema());
        pending.push((t.name().to_string(), bytes.len() as u64));
        streams.push(bytes);
    }
    let request = Request {
        sql: sql.to_string(),
        timeout_ms: limits.timeout.as_millis() as u64,
        max_rows: limits.max_rows,
        memory: limits.memory,
        nice: limits.nice,
        files: snapshot
            .files
            .iter()
            .map(|(t, f)| (t.name().to_string(), f.clone()))
            .collect(),
        pending,
    };
    let mut out = serde_json::to_vec(&request).expect("a request serializes");
    out.push(b'\n');
    for s in streams {
        out.extend_from_slice(&s);
    }
    out
}

fn decode_response(
    out: &[u8],
    err: &[u8],
    status: std::process::ExitStatus,
    limits: Limits,
) -> Result<Answer, QueryError> {
    let line_end = out.iter().position(|&b| b == b'\n');
    let response: Option<Response> = line_end.and_then(|n| serde_json::from_slice(&out[..n]).ok());
    match response {
        Some(Response {
            truncated: Some(truncated),
            ..
        }) if status.success() => {
            let rest = &out[line_end.expect("a line") + 1..];
            let reader = StreamReader::try_new(rest, None)
                .map_err(|e| QueryError::Failed(format!("the query's answer: {e}")))?;
            let schema = reader.schema();
            let batches = reader
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| QueryError::Failed(format!("the query's answer: {e}")))?;
            Ok(Answer {
                schema,
                batches,
                truncated,
            })
        }
        Some(Response {
            error: Some(label),
            detail,
            ..
        }) => Err(match label.as_str() {
            "invalid" => QueryError::Invalid { detail },
            "timeout" => QueryError::Timeout(limits.timeout),
            "memory" => QueryError::Memory {
                limit: limits.memory,
                detail,
            },
            _ => QueryError::Failed(detail),
        }),
        _ => Err(ended(err, status, limits)),
    }
}

/// Why a query's process ended without an answer: out of memory (an allocation refused under
/// its limit aborts it), or something else.
fn ended(err: &[u8], status: std::process::ExitStatus, limits: Limits) -> QueryError {
    let stderr = String::from_utf8_lossy(err);
    #[cfg(unix)]
    let signal = std::os::unix::process::ExitStatusExt::signal(&status);
    #[cfg(not(unix))]
    let signal: Option<i32> = None;
    // SIGABRT (6) after "memory allocation of N bytes failed", or SIGKILL (9) by the kernel.
    if stderr.contains("memory allocation of") || matches!(signal, Some(6 | 9)) {
        let first = stderr.lines().find(|l| l.contains("memory allocation of"));
        return QueryError::Memory {
            limit: limits.memory,
            detail: format!(
                "the query's process ran out of memory (query_memory plus {} MiB for the process){}",
                BASE_BYTES >> 20,
                first.map(|l| format!(": {}", l.trim())).unwrap_or_default()
            ),
        };
    }
    let last = stderr.lines().rev().find(|l| !l.trim().is_empty());
    QueryError::Failed(format!(
        "the query's process ended ({status}){}",
        last.map(|l| format!(": {}", l.trim())).unwrap_or_default()
    ))
}

/// `fencewatch __query-worker`: reads one request on stdin, answers on stdout, returns the
/// exit code (0 when it answered, even with an error line).
pub fn worker() -> i32 {
    let mut stdin = std::io::BufReader::new(std::io::stdin().lock());
    let mut stdout = std::io::stdout().lock();
    let answer = serve_one(&mut stdin);
    match respond(answer, &mut stdout).and_then(|()| stdout.flush()) {
        Ok(()) => 0,
        Err(_) => 1,
    }
}

/// Writes the answer's line, and for an answer its rows.
fn respond(answer: Result<Answer, QueryError>, out: &mut impl Write) -> std::io::Result<()> {
    let (line, rows) = match answer {
        Ok(a) => (
            Response {
                truncated: Some(a.truncated),
                error: None,
                detail: String::new(),
            },
            Some(ipc(&a.batches, &a.schema)),
        ),
        Err(e) => (
            Response {
                truncated: None,
                error: Some(e.label().to_string()),
                detail: match &e {
                    QueryError::Invalid { detail } | QueryError::Memory { detail, .. } => {
                        detail.clone()
                    }
                    e => e.to_string(),
                },
            },
            None,
        ),
    };
    serde_json::to_writer(&mut *out, &line).map_err(std::io::Error::other)?;
    out.write_all(b"\n")?;
    match rows {
        Some(rows) => out.write_all(&rows),
        None => Ok(()),
    }
}

fn serve_one(stdin: &mut impl BufRead) -> Result<Answer, QueryError> {
    let bad = |e: String| QueryError::Failed(format!("the query's request: {e}"));
    let mut line = Vec::new();
    stdin
        .read_until(b'\n', &mut line)
        .map_err(|e| bad(e.to_string()))?;
    let req: Request = serde_json::from_slice(&line).map_err(|e| bad(e.to_string()))?;
    let table = |name: &str| Table::parse(name).ok_or_else(|| bad(format!("no table {name}")));
    let mut snapshot = Snapshot::default();
    for (name, files) in req.files {
        snapshot.files.insert(table(&name)?, files);
    }
    for (name, len) in req.pending {
        let mut bytes = Vec::new();
        stdin
            .take(len)
            .read_to_end(&mut bytes)
            .map_err(|e| bad(e.to_string()))?;
        let reader = StreamReader::try_new(&bytes[..], None).map_err(|e| bad(e.to_string()))?;
        let batches = reader
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| bad(e.to_string()))?;
        snapshot.batches.insert(table(&name)?, batches);
    }
    let limits = Limits {
        timeout: Duration::from_millis(req.timeout_ms),
        max_rows: req.max_rows,
        memory: req.memory,
        nice: req.nice,
    };
    let queries = Queries::new(limits).map_err(|e| bad(e.to_string()))?;
    queries.run_blocking(&req.sql, snapshot)
}

#[cfg(test)]
mod tests {
    use super::*;
    use fencewatch_assess::{Event, EventTime, Kind};
    use fencewatch_ingest::archive::Origin;
    use fencewatch_ingest::archive::rows::{EventRows, Rows};
    use std::os::unix::process::ExitStatusExt;
    use std::process::ExitStatus;

    fn pending(n: u64) -> Snapshot {
        let mut rows = EventRows::default();
        let at = Origin {
            partition: "wal",
            received: 1_700_000_000_000_000_000,
        };
        for i in 0..n {
            let mut ev = Event::new(Kind::Commit, EventTime(1_700_000_000_000_000_000));
            ev.scope = Some("o-1");
            rows.push(at, &ev, Some("p"), format_args!("http:{i}"), i);
        }
        let mut snap = Snapshot::default();
        snap.batches.insert(Table::Events, vec![rows.finish()]);
        snap
    }

    /// What the service writes, a query's process reads: the rows not yet written included.
    #[test]
    fn a_request_carries_the_rows_not_yet_written() {
        let sql = "SELECT count(*) AS n, count(DISTINCT source) AS d FROM events";
        let request = encode_request(sql, &pending(300), Limits::default());
        let answer = serve_one(&mut &request[..]).unwrap();
        let mut out = Vec::new();
        respond(Ok(answer), &mut out).unwrap();
        let back = decode_response(&out, b"", ExitStatus::from_raw(0), Limits::default()).unwrap();
        let b = &back.batches[0];
        let n = |c: usize| {
            b.column(c)
                .as_any()
                .downcast_ref::<datafusion::arrow::array::Int64Array>()
                .unwrap()
                .value(0)
        };
        assert_eq!((n(0), n(1), back.truncated), (300, 300, false));
    }

    /// An error line is the error; a process that aborted in an allocation ran out of memory.
    #[test]
    fn errors_and_ended_processes_are_named() {
        let limits = Limits::default();
        let mut out = Vec::new();
        let invalid = QueryError::Invalid {
            detail: "no table x".into(),
        };
        respond(Err(invalid), &mut out).unwrap();
        let e = decode_response(&out, b"", ExitStatus::from_raw(0), limits).unwrap_err();
        assert!(
            matches!(&e, QueryError::Invalid { detail } if detail == "no table x"),
            "{e:?}"
        );
        let aborted = ExitStatus::from_raw(6); // killed by SIGABRT
        let stderr = b"memory allocation of 30000000000 bytes failed\n";
        let e = decode_response(b"", stderr, aborted, limits).unwrap_err();
        assert_eq!(e.limit(), Some("query_memory"), "{e:?}");
        assert!(
            e.to_string()
                .contains("memory allocation of 30000000000 bytes failed")
        );
        let crashed = ExitStatus::from_raw(11); // SIGSEGV
        let e = decode_response(b"", b"", crashed, limits).unwrap_err();
        assert_eq!(e.label(), "failed", "{e:?}");
    }
}
