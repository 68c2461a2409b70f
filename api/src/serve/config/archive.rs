//! The evidence archive's and the queries' keys (SPEC §9): `archive`,
//! `archive_flush_interval`, `archive_retention`, `archive_max_bytes`, `query_timeout`,
//! `query_max_rows`, `query_memory`.

use super::{Loader, Origin, pick};
use fencewatch_assess::Duration;

/// The archive's settings; `None` in [`super::ServeConfig`] when `archive = false`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchiveConfig {
    /// Rows wait at most this long before they are written.
    pub flush_interval: Duration,
    /// Files older than this are dropped.
    pub retention: Duration,
    /// Beyond this many bytes of files the oldest are dropped (`None`: no limit).
    pub max_bytes: Option<u64>,
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
}

/// The smallest accepted `query_memory`.
pub(super) const MIN_QUERY_MEMORY: u64 = 1 << 20;

/// The three layers of one key: flag (a string, checked here), file, default.
pub(super) type Keys<T> = (Option<String>, Option<T>, Option<T>);

/// Reads the keys of the archive and of queries.
pub(super) fn load(
    l: &mut Loader,
    archive: Keys<bool>,
    flush_interval: Keys<String>,
    retention: Keys<String>,
    max_bytes: Keys<u64>,
    query: (Keys<String>, Keys<u64>, Keys<u64>),
) -> (Option<ArchiveConfig>, QueryConfig) {
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
    let archive = on.then_some(ArchiveConfig {
        flush_interval: every,
        retention: keep,
        max_bytes: (max_bytes > 0).then_some(max_bytes),
    });
    (
        archive,
        QueryConfig {
            timeout,
            max_rows,
            memory,
        },
    )
}
