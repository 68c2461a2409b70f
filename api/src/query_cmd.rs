//! `fencewatch query [--data-dir D | --url URL] [--format table|json|csv] SQL` (SPEC §9): the
//! same read-only SQL as `POST /v1/query`, offline over a data directory's archive (also while
//! `serve` runs on it: it sees what is flushed) or against a running service. Exit 0 with the
//! rows (a note on stderr when they were cut at `--max-rows`), 3 when the query is refused,
//! invalid, ended by a limit or cannot be run.

use crate::exit::EXIT_ERROR;
use crate::query::{Answer, Format, Limits, Queries, render};
use clap::{Args, ValueEnum};
use fencewatch_ingest::archive::Snapshot;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;

/// How rows are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutFormat {
    /// A table for a terminal.
    Table,
    /// `{"columns", "rows", "truncated"}`.
    Json,
    /// CSV with a header line.
    Csv,
}

/// The flags of `fencewatch query`.
#[derive(Debug, Args)]
pub struct QueryArgs {
    /// The data directory whose archive to read [default: ./fencewatch-data].
    #[arg(long, value_name = "DIR", conflicts_with = "url")]
    data_dir: Option<PathBuf>,
    /// A running service to ask instead (`http://host:port`).
    #[arg(long, value_name = "URL")]
    url: Option<String>,
    /// Bearer token for --url.
    #[arg(
        long,
        env = "FENCEWATCH_AUTH_TOKEN",
        hide_env_values = true,
        requires = "url"
    )]
    auth_token: Option<String>,
    /// Output format [default: table on a terminal, else json].
    #[arg(long, value_enum)]
    format: Option<OutFormat>,
    /// Offline: a query is ended after this many seconds.
    #[arg(
        long,
        value_name = "SECS",
        default_value_t = 30,
        conflicts_with = "url"
    )]
    timeout: u64,
    /// Offline: rows printed at most.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 100_000,
        conflicts_with = "url"
    )]
    max_rows: usize,
    /// Offline: bytes of memory the query may use.
    #[arg(long, value_name = "BYTES", default_value_t = 512 << 20, conflicts_with = "url")]
    memory: usize,
    /// One read-only SQL statement over `events`, `malformed`, `counterexamples`, `windows`
    /// and `window_revisions`.
    sql: String,
}

/// Runs `fencewatch query`; returns the exit code.
pub fn run(args: QueryArgs) -> i32 {
    let format = args.format.unwrap_or(if std::io::stdout().is_terminal() {
        OutFormat::Table
    } else {
        OutFormat::Json
    });
    let out = match &args.url {
        Some(url) => remote(url, args.auth_token.as_deref(), &args.sql, format),
        None => local(&args, format),
    };
    match out {
        Ok((body, truncated)) => {
            let mut stdout = std::io::stdout().lock();
            let _ = stdout.write_all(&body);
            let _ = stdout.flush();
            if truncated {
                eprintln!("fencewatch query: more rows than the row limit; the rest were left out");
            }
            0
        }
        Err(e) => {
            eprintln!("fencewatch query: {e}");
            EXIT_ERROR
        }
    }
}

fn local(args: &QueryArgs, format: OutFormat) -> Result<(Vec<u8>, bool), String> {
    let dir = args
        .data_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from("./fencewatch-data"));
    let archive = dir.join("archive");
    if !archive.is_dir() {
        return Err(format!(
            "{}: no evidence archive (is this the data directory of `fencewatch serve`?)",
            archive.display()
        ));
    }
    let snapshot = Snapshot::of_dir(&archive).map_err(|e| e.to_string())?;
    let queries = Queries::new(Limits {
        timeout: std::time::Duration::from_secs(args.timeout.max(1)),
        max_rows: args.max_rows.max(1),
        memory: args.memory.max(1 << 20),
        ..Limits::default()
    })
    .map_err(|e| e.to_string())?;
    let answer = queries
        .run_blocking(&args.sql, snapshot)
        .map_err(|e| match e.limit() {
            Some(l) => format!("{e} ({l})"),
            None => e.to_string(),
        })?;
    print(&answer, format)
}

fn print(answer: &Answer, format: OutFormat) -> Result<(Vec<u8>, bool), String> {
    let f = match format {
        OutFormat::Table => Format::Table,
        OutFormat::Json => Format::Json,
        OutFormat::Csv => Format::Csv,
    };
    let mut body = render(answer, f)?.body;
    if f == Format::Json {
        body.push(b'\n');
    }
    Ok((body, answer.truncated))
}

/// Asks a running service: JSON and CSV are printed as it answers them, a table is rendered
/// here from its Arrow answer.
fn remote(
    url: &str,
    token: Option<&str>,
    sql: &str,
    format: OutFormat,
) -> Result<(Vec<u8>, bool), String> {
    let accept = match format {
        OutFormat::Table => "application/vnd.apache.arrow.stream",
        OutFormat::Json => "application/json",
        OutFormat::Csv => "text/csv",
    };
    let endpoint = format!("{}/v1/query", url.trim_end_matches('/'));
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let mut req = agent.post(&endpoint).header("Accept", accept);
    if let Some(t) = token {
        req = req.header("Authorization", &format!("Bearer {t}"));
    }
    let body = serde_json::json!({ "sql": sql }).to_string();
    let mut res = req
        .content_type("application/json")
        .send(body.as_bytes())
        .map_err(|e| format!("{endpoint}: {e}"))?;
    let status = res.status();
    let truncated = res
        .headers()
        .get(crate::serve::sql::TRUNCATED_HEADER)
        .is_some_and(|v| v == "true");
    let bytes = res
        .body_mut()
        .with_config()
        .limit(1 << 30)
        .read_to_vec()
        .map_err(|e| format!("{endpoint}: {e}"))?;
    if !status.is_success() {
        let detail = serde_json::from_slice::<serde_json::Value>(&bytes)
            .ok()
            .and_then(|p| {
                let d = p.get("detail")?.as_str()?.to_string();
                let named = p
                    .get("limit")
                    .or_else(|| p.get("refused"))
                    .and_then(|v| v.as_str())
                    .map(|n| format!(" ({n})"))
                    .unwrap_or_default();
                Some(format!("{d}{named}"))
            })
            .unwrap_or_else(|| String::from_utf8_lossy(&bytes).into_owned());
        return Err(format!("{endpoint} answered {status}: {detail}"));
    }
    match format {
        OutFormat::Table => {
            let reader = datafusion::arrow::ipc::reader::StreamReader::try_new(
                std::io::Cursor::new(bytes),
                None,
            )
            .map_err(|e| format!("{endpoint}: not an Arrow stream: {e}"))?;
            let schema = reader.schema();
            let batches = reader
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("{endpoint}: {e}"))?;
            let answer = Answer {
                schema,
                batches,
                truncated,
            };
            print(&answer, format)
        }
        OutFormat::Json => {
            let truncated = serde_json::from_slice::<serde_json::Value>(&bytes)
                .ok()
                .and_then(|v| v.get("truncated")?.as_bool())
                .unwrap_or(false);
            let mut bytes = bytes;
            bytes.push(b'\n');
            Ok((bytes, truncated))
        }
        OutFormat::Csv => Ok((bytes, truncated)),
    }
}
