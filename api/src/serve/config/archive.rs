//! The evidence archive's and the queries' keys (SPEC §9): `archive`,
//! `archive_flush_interval`, `archive_retention`, `archive_max_bytes`, `archive_nice`,
//! `query_timeout`, `query_max_rows`, `query_memory`, `query_nice`.

use super::{Layer, Loader, Origin, pick};
use clap::Args;
use fencewatch_assess::Duration;

/// The flags of the archive's and the queries' keys (in `fencewatch serve`); each also reads a
/// `FENCEWATCH_*` variable.
#[derive(Debug, Clone, Default, Args)]
pub struct ArchiveArgs {
    /// The evidence archive, Parquet under <data_dir>/archive: true or false [default: true].
    #[arg(long, env = "FENCEWATCH_ARCHIVE", value_name = "BOOL")]
    pub archive: Option<String>,
    /// Archive rows wait at most this long before they are written [default: 10s].
    #[arg(
        long,
        env = "FENCEWATCH_ARCHIVE_FLUSH_INTERVAL",
        value_name = "DURATION"
    )]
    pub archive_flush_interval: Option<String>,
    /// Archive files older than this are deleted [default: 720h].
    #[arg(long, env = "FENCEWATCH_ARCHIVE_RETENTION", value_name = "DURATION")]
    pub archive_retention: Option<String>,
    /// Beyond this many bytes of archive files the oldest are deleted; 0: no limit [default: 0].
    #[arg(long, env = "FENCEWATCH_ARCHIVE_MAX_BYTES", value_name = "BYTES")]
    pub archive_max_bytes: Option<String>,
    /// The archive thread's CPU priority (nice), 0 to 19: above 0, ingest's threads go first
    /// on a shared core [default: 10].
    #[arg(long, env = "FENCEWATCH_ARCHIVE_NICE", value_name = "N")]
    pub archive_nice: Option<String>,
    /// A SQL query is ended after this [default: 30s].
    #[arg(long, env = "FENCEWATCH_QUERY_TIMEOUT", value_name = "DURATION")]
    pub query_timeout: Option<String>,
    /// Rows a SQL query answers at most, then `truncated` [default: 100000].
    #[arg(long, env = "FENCEWATCH_QUERY_MAX_ROWS", value_name = "N")]
    pub query_max_rows: Option<String>,
    /// Bytes of memory SQL queries may hold together [default: 512 MiB].
    #[arg(long, env = "FENCEWATCH_QUERY_MEMORY", value_name = "BYTES")]
    pub query_memory: Option<String>,
    /// The query threads' CPU priority (nice), 0 to 19: 19 yields every core to ingest
    /// [default: 19].
    #[arg(long, env = "FENCEWATCH_QUERY_NICE", value_name = "N")]
    pub query_nice: Option<String>,
}

/// The archive's settings; `None` in [`super::ServeConfig`] when `archive = false`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchiveConfig {
    /// Rows wait at most this long before they are written.
    pub flush_interval: Duration,
    /// Files older than this are dropped.
    pub retention: Duration,
    /// Beyond this many bytes of files the oldest are dropped (`None`: no limit).
    pub max_bytes: Option<u64>,
    /// The archive thread's niceness (0 to 19).
    pub nice: i32,
}

/// The limits of `POST /v1/query` and `fencewatch query`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueryConfig {
    /// A query is ended after this.
    pub timeout: Duration,
    /// Rows answered at most (then `truncated`).
    pub max_rows: u64,
    /// Bytes the queries may hold together.
    pub memory: u64,
    /// The query threads' niceness (0 to 19).
    pub nice: i32,
}

/// The smallest accepted `query_memory`.
pub(super) const MIN_QUERY_MEMORY: u64 = 1 << 20;

/// The three layers of one key: flag (a string, checked here), file, default.
type Keys<T> = (Option<String>, Option<T>, Option<T>);

/// Reads the keys of the archive and of queries from the flags `a`, the file `f` and the
/// defaults `d`.
pub(super) fn load(
    l: &mut Loader,
    a: ArchiveArgs,
    f: &Layer,
    d: &Layer,
) -> (Option<ArchiveConfig>, QueryConfig) {
    let archive: Keys<bool> = (a.archive, f.archive, d.archive);
    let flush_interval: Keys<String> = (
        a.archive_flush_interval,
        f.archive_flush_interval.clone(),
        d.archive_flush_interval.clone(),
    );
    let retention: Keys<String> = (
        a.archive_retention,
        f.archive_retention.clone(),
        d.archive_retention.clone(),
    );
    let max_bytes: Keys<u64> = (
        a.archive_max_bytes,
        f.archive_max_bytes,
        d.archive_max_bytes,
    );
    let nice: Keys<u64> = (a.query_nice, f.query_nice, d.query_nice);
    let archive_nice: Keys<u64> = (a.archive_nice, f.archive_nice, d.archive_nice);
    let query: (Keys<String>, Keys<u64>, Keys<u64>) = (
        (
            a.query_timeout,
            f.query_timeout.clone(),
            d.query_timeout.clone(),
        ),
        (a.query_max_rows, f.query_max_rows, d.query_max_rows),
        (a.query_memory, f.query_memory, d.query_memory),
    );
    let flag = archive
        .0
        .and_then(|s| match s.trim().to_ascii_lowercase().as_str() {
            "true" | "on" | "yes" | "1" => Some(true),
            "false" | "off" | "no" | "0" => Some(false),
            _ => {
                l.error(
                    "archive",
                    Origin::Flag,
                    format_args!("`{s}` is not true or false"),
                );
                None
            }
        });
    let on = pick(flag, archive.1, archive.2).is_none_or(|(b, _)| b);
    let every = l
        .duration(
            "archive_flush_interval",
            pick(flush_interval.0, flush_interval.1, flush_interval.2),
        )
        .unwrap_or_default();
    let keep = l
        .duration(
            "archive_retention",
            pick(retention.0, retention.1, retention.2),
        )
        .unwrap_or_default();
    let (max_bytes, _) = l.number(
        "archive_max_bytes",
        max_bytes.0,
        max_bytes.1,
        max_bytes.2,
        0,
    );
    let (timeout, rows, memory) = query;
    let timeout = l
        .duration("query_timeout", pick(timeout.0, timeout.1, timeout.2))
        .unwrap_or_default();
    let (max_rows, _) = l.number("query_max_rows", rows.0, rows.1, rows.2, 1);
    let (memory, _) = l.number(
        "query_memory",
        memory.0,
        memory.1,
        memory.2,
        MIN_QUERY_MEMORY,
    );
    let mut nice_of = |key: &str, (flag, file, default): Keys<u64>| {
        let (nice, origin) = l.number(key, flag, file, default, 0);
        if nice > 19 {
            l.error(
                key,
                origin,
                format_args!("{nice} is not a nice value from 0 to 19"),
            );
        }
        i32::try_from(nice.min(19)).unwrap_or(19)
    };
    let archive_nice = nice_of("archive_nice", archive_nice);
    let nice = nice_of("query_nice", nice);
    let archive = on.then_some(ArchiveConfig {
        flush_interval: every,
        retention: keep,
        max_bytes: (max_bytes > 0).then_some(max_bytes),
        nice: archive_nice,
    });
    (
        archive,
        QueryConfig {
            timeout,
            max_rows,
            memory,
            nice,
        },
    )
}
