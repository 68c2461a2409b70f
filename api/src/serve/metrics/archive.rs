//! Metrics of the evidence archive and of SQL queries (labels: a table name, a query outcome,
//! both fixed sets).

use fencewatch_ingest::archive::{Archive, Table};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

/// Counter {table}: rows written to the archive's files (`events`, `malformed`,
/// `counterexamples`, `window_revisions`).
pub const ARCHIVE_ROWS: &str = "fencewatch_archive_rows";
/// Counter: Parquet files written by flushes.
pub const ARCHIVE_FILES_WRITTEN: &str = "fencewatch_archive_files_written";
/// Counter: bytes written by flushes.
pub const ARCHIVE_BYTES_WRITTEN: &str = "fencewatch_archive_written_bytes";
/// Counter: small files merged by compaction.
pub const ARCHIVE_COMPACTIONS: &str = "fencewatch_archive_compactions";
/// Counter: files deleted by retention (`archive_retention`, `archive_max_bytes`).
pub const ARCHIVE_EXPIRED: &str = "fencewatch_archive_expired_files";
/// Gauge: files in the archive.
pub const ARCHIVE_FILES: &str = "fencewatch_archive_files";
/// Gauge: bytes of the archive's files.
pub const ARCHIVE_BYTES: &str = "fencewatch_archive_bytes";
/// Gauge: rows waiting in memory to be written.
pub const ARCHIVE_PENDING_ROWS: &str = "fencewatch_archive_pending_rows";
/// Gauge: when the last flush committed, Unix seconds.
pub const ARCHIVE_LAST_FLUSH: &str = "fencewatch_archive_last_flush_seconds";
/// Gauge: 1 when a flush failed (nothing more is archived, checkpoints stop).
pub const ARCHIVE_FAILED: &str = "fencewatch_archive_failed";
/// Counter: seconds ingest waited for the archive, which had fallen behind (more than two
/// files' worth of rows in memory).
pub const ARCHIVE_BACKPRESSURE: &str = "fencewatch_archive_backpressure_seconds";
/// Counter {outcome}: SQL queries by outcome: `ok`, `truncated`, `refused`, `invalid`,
/// `timeout`, `memory`, `failed`.
pub const QUERIES: &str = "fencewatch_queries";
/// Histogram: time to answer a SQL query (snapshot, plan, run), seconds.
pub const QUERY_DURATION: &str = "fencewatch_query_duration_seconds";

/// Labels {table}.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TableLabels {
    /// The table.
    pub table: String,
}

/// Labels {outcome}.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    /// How the query ended.
    pub outcome: String,
}

/// The handles.
#[derive(Debug, Clone)]
pub struct ArchiveMetrics {
    rows: Family<TableLabels, Counter>,
    files_written: Counter,
    bytes_written: Counter,
    compactions: Counter,
    expired: Counter,
    files: Gauge,
    bytes: Gauge,
    pending_rows: Gauge,
    last_flush: Gauge<f64, AtomicU64>,
    failed: Gauge,
    backpressure: Counter<f64, AtomicU64>,
    queries: Family<OutcomeLabels, Counter>,
    duration: Histogram,
    /// What the counters were last told of the archive's totals.
    seen: Arc<[AtomicU64; 9]>,
    seen_at: Arc<AtomicI64>,
}

impl ArchiveMetrics {
    /// Registers the families in `registry`.
    pub fn register(registry: &mut Registry) -> ArchiveMetrics {
        let m = ArchiveMetrics {
            rows: Family::default(),
            files_written: Counter::default(),
            bytes_written: Counter::default(),
            compactions: Counter::default(),
            expired: Counter::default(),
            files: Gauge::default(),
            bytes: Gauge::default(),
            pending_rows: Gauge::default(),
            last_flush: Gauge::default(),
            failed: Gauge::default(),
            backpressure: Counter::default(),
            queries: Family::default(),
            duration: Histogram::new([0.005, 0.02, 0.1, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0]),
            seen: Arc::new(Default::default()),
            seen_at: Arc::new(AtomicI64::new(0)),
        };
        let r = registry;
        r.register(
            ARCHIVE_ROWS,
            "Rows written to the evidence archive's files",
            m.rows.clone(),
        );
        r.register(
            ARCHIVE_FILES_WRITTEN,
            "Parquet files written by flushes",
            m.files_written.clone(),
        );
        r.register(
            ARCHIVE_BYTES_WRITTEN,
            "Bytes written by flushes",
            m.bytes_written.clone(),
        );
        r.register(
            ARCHIVE_COMPACTIONS,
            "Compactions of small archive files",
            m.compactions.clone(),
        );
        r.register(
            ARCHIVE_EXPIRED,
            "Archive files deleted by retention",
            m.expired.clone(),
        );
        r.register(
            ARCHIVE_FILES,
            "Files in the evidence archive",
            m.files.clone(),
        );
        r.register(
            ARCHIVE_BYTES,
            "Bytes of the evidence archive's files",
            m.bytes.clone(),
        );
        r.register(
            ARCHIVE_PENDING_ROWS,
            "Archive rows waiting in memory to be written",
            m.pending_rows.clone(),
        );
        r.register(
            ARCHIVE_LAST_FLUSH,
            "When the last archive flush committed, Unix seconds",
            m.last_flush.clone(),
        );
        r.register(
            ARCHIVE_FAILED,
            "1 when an archive flush failed",
            m.failed.clone(),
        );
        r.register(
            ARCHIVE_BACKPRESSURE,
            "Seconds ingest waited for the archive to catch up",
            m.backpressure.clone(),
        );
        r.register(QUERIES, "SQL queries by outcome", m.queries.clone());
        r.register(
            QUERY_DURATION,
            "Time to answer a SQL query",
            m.duration.clone(),
        );
        m
    }

    /// Counts a query that ended as `outcome` after `took`.
    pub fn query(&self, outcome: &str, took: Duration) {
        self.queries
            .get_or_create(&OutcomeLabels {
                outcome: outcome.to_string(),
            })
            .inc();
        self.duration.observe(took.as_secs_f64());
    }

    /// Brings the archive's figures in (before each scrape).
    pub fn refresh(&self, archive: &Archive) {
        let st = &archive.stats;
        let bump = |i: usize, now: u64, c: &Counter| {
            let before = self.seen[i].swap(now, Ordering::AcqRel);
            c.inc_by(now.saturating_sub(before));
        };
        for t in Table::ALL {
            let c = self.rows.get_or_create(&TableLabels {
                table: t.name().to_string(),
            });
            bump(t as usize, st.rows[t as usize].load(Ordering::Relaxed), &c);
        }
        bump(4, st.files.load(Ordering::Relaxed), &self.files_written);
        bump(5, st.bytes.load(Ordering::Relaxed), &self.bytes_written);
        bump(6, st.compactions.load(Ordering::Relaxed), &self.compactions);
        bump(7, st.expired.load(Ordering::Relaxed), &self.expired);
        // Microseconds, counted as seconds.
        let waited = st.waited_micros.load(Ordering::Relaxed);
        let before = self.seen[8].swap(waited, Ordering::AcqRel);
        self.backpressure
            .inc_by(waited.saturating_sub(before) as f64 / 1e6);
        let sizes = archive.sizes();
        self.files.set(sizes.files as i64);
        self.bytes.set(sizes.bytes as i64);
        self.pending_rows.set(sizes.pending_rows as i64);
        let at = st.last_flush_at.load(Ordering::Relaxed);
        if at > 0 && self.seen_at.swap(at, Ordering::AcqRel) != at {
            self.last_flush.set(at as f64 / 1e9);
        }
        self.failed.set(i64::from(archive.failure().is_some()));
    }
}
