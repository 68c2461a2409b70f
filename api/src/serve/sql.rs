//! `POST /v1/query` (SPEC §9): read-only SQL over the evidence archive, and the archive's own
//! thread (windows, flushes, retention, compaction).

use crate::query::{Format, Isolated, QueryError, render};
use crate::serve::error::ApiError;
use crate::serve::metrics::archive::ArchiveMetrics;
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use fencewatch_ingest::archive::{Archive, Due, Snapshot};
use fencewatch_ingest::registry::Registry;
use fencewatch_ingest::source::wal::WalSource;
use serde::Deserialize;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

/// What the query route needs.
#[derive(Debug, Clone)]
pub struct Sql {
    /// Every partition, and the archive they feed.
    pub registry: Arc<Registry>,
    /// The WAL source (whether it is ready).
    pub wal: Arc<WalSource>,
    /// The data directory (its archive is read when `archive = false`).
    pub data_dir: PathBuf,
    /// Queries, each run in a process of its own (`query::isolated`).
    pub queries: Arc<Isolated>,
    /// Query metrics.
    pub metrics: ArchiveMetrics,
}

/// The route, to be merged outside the request timeout (a query has its own,
/// `query_timeout`).
pub fn router(sql: Sql) -> Router {
    Router::new()
        .route("/v1/query", post(query))
        .with_state(sql)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Body {
    sql: String,
}

/// The header that says an answer in CSV or Arrow was cut at `query_max_rows`.
pub const TRUNCATED_HEADER: &str = "fencewatch-truncated";

const OFFERED: &str =
    "this endpoint answers `application/json`, `text/csv` or `application/vnd.apache.arrow.stream`";

/// The answer format an `Accept` header asks for: the first it lists that is offered.
fn negotiate(accept: Option<&HeaderValue>) -> Result<Format, ApiError> {
    let Some(v) = accept else {
        return Ok(Format::Json);
    };
    let s = v.to_str().unwrap_or("");
    for part in s.split(',') {
        let mt = part
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        match mt.as_str() {
            "" | "*/*" | "application/*" | "application/json" => return Ok(Format::Json),
            "text/csv" | "text/*" => return Ok(Format::Csv),
            "application/vnd.apache.arrow.stream" => return Ok(Format::Arrow),
            _ => {}
        }
    }
    Err(ApiError::NotAcceptable {
        got: s.chars().take(128).collect(),
        offered: OFFERED,
    })
}

/// Runs one read-only SQL statement over the archive's tables (`events`, `malformed`,
/// `counterexamples`, `windows`, `window_revisions`): the Parquet files plus the rows not
/// written yet, as one snapshot. Answers `{"columns":[{"name","type"}],"rows":[[…]],
/// "truncated":bool}`, CSV (`Accept: text/csv`) or an Arrow IPC stream (`Accept:
/// application/vnd.apache.arrow.stream`), `406` for anything else. At most `query_max_rows`
/// rows (`truncated`, and the `fencewatch-truncated: true` header in CSV and Arrow). A
/// statement that is not one read-only query is refused (`400`, `refused` names it); a query
/// ended by `query_timeout` or `query_memory` answers `422` with `limit` naming it.
#[utoipa::path(post, path = "/v1/query",
    request_body(content = Value, description = "`{\"sql\": \"SELECT …\"}`", content_type = "application/json"),
    responses((status = 200, description = "The rows: `columns`, `rows`, `truncated` (or CSV, or an Arrow IPC stream)", body = Value),
              (status = 400, description = "Not one read-only query (`refused`: statements, ddl, dml, copy, statement, file_table, table_function, operators), or SQL that does not parse or plan", content_type = "application/problem+json", body = Value),
              (status = 406, description = "An Accept header this endpoint cannot answer", content_type = "application/problem+json", body = Value),
              (status = 422, description = "Ended by a limit (`limit`: query_timeout or query_memory)", content_type = "application/problem+json", body = Value),
              (status = 503, description = "Not ready yet", content_type = "application/problem+json", body = Value)))]
pub async fn query(
    State(sql): State<Sql>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let format = negotiate(headers.get(header::ACCEPT))?;
    if !sql.wal.is_ready() {
        return Err(ApiError::ServiceUnavailable {
            detail: "replaying the write-ahead log; not ready yet".into(),
        });
    }
    let Body { sql: text } = serde_json::from_slice(&body).map_err(|e| ApiError::BadRequest {
        detail: format!("the body must be {{\"sql\": \"…\"}}: {e}"),
    })?;
    let started = Instant::now();
    let snapshot = snapshot_for_request(&sql.registry, &sql.data_dir)?;
    let result = sql.queries.run(&text, snapshot).await;
    let outcome = match &result {
        Ok((a, _)) if a.truncated => "truncated",
        Ok(_) => "ok",
        Err(e) => e.label(),
    };
    sql.metrics.query(outcome, started.elapsed());
    // The slot is held until the answer is sent (in its body): at most two answers in the
    // service's memory.
    let (answer, permit) = result.map_err(api_error)?;
    let rendered = tokio::task::block_in_place(|| render(&answer, format)).map_err(|e| {
        ApiError::Internal {
            detail: format!("rendering the answer: {e}"),
        }
    })?;
    let truncated = answer.truncated;
    drop(answer);
    // The permit ends with the body: hyper asks for the end of the stream once the bytes are
    // written (or the connection is gone).
    let end = futures_util::stream::poll_fn(move |_| {
        let _held = &permit;
        std::task::Poll::Ready(None)
    });
    let bytes = futures_util::stream::once(std::future::ready(Ok::<_, std::convert::Infallible>(
        Bytes::from(rendered.body),
    )));
    let body = axum::body::Body::from_stream(futures_util::StreamExt::chain(bytes, end));
    let mut res = ([(header::CONTENT_TYPE, rendered.content_type)], body).into_response();
    if truncated {
        res.headers_mut()
            .insert(TRUNCATED_HEADER, HeaderValue::from_static("true"));
    }
    Ok(res)
}

/// What a SQL query over the archive sees (SPEC §9): its files, the rows not written yet, the
/// windows not archived yet and the counterexamples not settled, in one snapshot taken with
/// every partition read at once. The archive off, what an earlier run archived.
pub fn snapshot(
    registry: &Registry,
    data_dir: &std::path::Path,
) -> Result<Snapshot, fencewatch_ingest::archive::Error> {
    match registry.archive() {
        Some(a) => registry
            .query_parts(|view, parts| {
                let unsettled: Vec<_> = parts
                    .iter()
                    .flat_map(|p| p.live().unsettled_counterexamples())
                    .collect();
                a.take_snapshot(Some(view), &unsettled)
            })
            // Events not read yet are read with the assessors released (`take_snapshot`).
            .map(fencewatch_ingest::archive::Taken::read),
        None => Snapshot::of_dir(&data_dir.join("archive")),
    }
}

/// [`snapshot`] from a request's handler, its error as the problem to answer: 503 once the
/// archive has failed (a restart re-archives from the log), 500 for a manifest that cannot
/// be read.
pub fn snapshot_for_request(
    registry: &Registry,
    data_dir: &std::path::Path,
) -> Result<Snapshot, ApiError> {
    use fencewatch_ingest::archive::Error;
    tokio::task::block_in_place(|| snapshot(registry, data_dir)).map_err(|e| match e {
        Error::Failed(why) => ApiError::ServiceUnavailable {
            detail: format!(
                "the evidence archive stopped writing ({why}); its queries are refused until a restart archives again from the log"
            ),
        },
        e => ApiError::Internal {
            detail: format!("the archive's manifest: {e}"),
        },
    })
}

/// The problem of a query error.
pub fn api_error(e: QueryError) -> ApiError {
    match e {
        QueryError::Refused { refused, detail } => ApiError::QueryRefused { refused, detail },
        QueryError::Invalid { detail } => ApiError::QueryInvalid { detail },
        e @ (QueryError::Timeout(_) | QueryError::Memory { .. }) => ApiError::QueryLimit {
            limit: e.limit().expect("a limit"),
            detail: e.to_string(),
        },
        QueryError::Busy => ApiError::Saturated {
            detail: QueryError::Busy.to_string(),
        },
        QueryError::Failed(detail) => ApiError::Internal { detail },
    }
}

/// The archive's thread: every `archive_flush_interval` (or sooner when enough rows wait) it
/// collects the windows that became final or were revised, flushes, then applies retention
/// and compaction; after [`Archive::close`] it does a last tick and flush and ends. A failed
/// flush ends it (the archive stops writing; checkpoints then stop too, and the service with
/// them).
///
/// It runs at niceness `nice` (`archive_nice`): its work (Parquet encoding, ~0.4 µs of CPU an
/// event) waits while ingest's threads run on a shared core, so it takes the time they leave
/// idle instead of delaying each batch's stages (HTTP ingest is latency-bound: each
/// connection waits for its batch's answer). It cannot starve: when rows beyond two files'
/// worth wait, ingest waits for it ([`Archive::wait_for_room`]).
pub fn start(
    archive: Arc<Archive>,
    registry: Arc<Registry>,
    wal: Arc<WalSource>,
    nice: i32,
) -> std::thread::JoinHandle<Result<(), String>> {
    std::thread::Builder::new()
        .name("fencewatch-archive".into())
        .spawn(move || {
            if nice > 0 {
                crate::query::lower_priority(nice);
            }
            let mut last = Instant::now();
            loop {
                let due = archive.wait_due(last);
                if due != Due::Size {
                    last = Instant::now();
                    // Windows come from every partition's state: not while one is written
                    // (a long batch must not hold the flushes it may wait for), but at the end.
                    let n = if due == Due::Closing {
                        Some(registry.query(|view| archive.tick_windows(view)))
                    } else if wal.is_ready() {
                        registry.try_query(|view| archive.tick_windows(view))
                    } else {
                        None
                    };
                    if let Some(n) = n.filter(|&n| n > 0) {
                        tracing::debug!(windows = n, "archive: window rows");
                    }
                }
                // Rows as they come into the open files' row groups; a flush at each interval
                // (or size, or checkpoint) cuts the files.
                let written = if due == Due::Size {
                    archive.write_some()
                } else {
                    archive.flush().map(drop)
                };
                if let Err(e) = written {
                    tracing::error!(error = %e, "archive: a flush failed; nothing more is archived until a restart");
                    return Err(e.to_string());
                }
                if due == Due::Size {
                    continue;
                }
                match archive.maintain() {
                    Ok(m) if m.expired + m.compacted > 0 => {
                        tracing::info!(expired = m.expired, compacted = m.compacted, "archive: retention and compaction")
                    }
                    Ok(_) => {}
                    Err(e) => tracing::warn!(error = %e, "archive: retention or compaction failed; retried next time"),
                }
                if due == Due::Closing {
                    tracing::info!("archive: flushed");
                    return Ok(());
                }
            }
        })
        .expect("spawn the archive thread")
}
