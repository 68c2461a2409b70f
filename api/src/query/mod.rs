//! Read-only, bounded SQL over the evidence archive (SPEC §9), with DataFusion.
//!
//! Every query gets its own session over one [`Snapshot`] of the archive: the Parquet files
//! the manifest lists (an explicit list, so a file written after the snapshot is never half
//! seen and a new one is seen by the next query) plus the rows not yet written, as the five
//! tables `events`, `malformed`, `counterexamples`, `window_revisions` and `windows` (each
//! window's latest revision). A session's runtime is new per query, so no directory listing
//! is cached between queries; the Parquet footers are (the files are immutable, their names
//! never reused).
//!
//! **Read-only.** One statement; a query or `EXPLAIN`. DDL, DML, `COPY` and other statements
//! are refused before planning and again by DataFusion's `SQLOptions`; a table named by a
//! string (a path or URL) or a table function other than `generate_series`/`range` is
//! refused, and no URL table or file-reading function is registered.
//!
//! **Bounded.** Queries run on a runtime of their own (one worker thread) apart from ingest,
//! at most [`MAX_CONCURRENT`] at a time. Each has a hard deadline (`query_timeout`), kept by the
//! caller's runtime: the answer is given when it passes even if an operator never yields, the
//! query is cancelled, and if it has not stopped a moment later its runtime is replaced (the
//! stuck thread ends when its operator returns; past a few such threads queries are refused
//! as busy). A shared memory pool of `query_memory` with spilling disabled (the result counts
//! too), and at most `query_max_rows` rows (`truncated` beyond).

mod isolated;
mod output;
mod tables;

pub use isolated::{BASE_BYTES, Isolated, MAX_ANSWER_BYTES, WORKER_ARG, own_program, worker};

pub use output::{Format, Rendered, render};

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::ScalarValue;
use datafusion::error::DataFusionError;
use datafusion::execution::memory_pool::{GreedyMemoryPool, MemoryConsumer, MemoryPool};
use datafusion::prelude::SQLOptions;
use datafusion::sql::parser::{DFParser, Statement as DfStatement};
use datafusion::sql::sqlparser::ast::{ObjectName, Statement, TableFactor, Visit, Visitor};
use datafusion::sql::sqlparser::dialect::GenericDialect;
use fencewatch_ingest::archive::Snapshot;
use futures_util::StreamExt;
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Queries running at once at most; more wait (within their deadline).
pub const MAX_CONCURRENT: usize = 2;

/// The limits of `query_timeout`, `query_max_rows` and `query_memory`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// A query is ended after this.
    pub timeout: Duration,
    /// Rows answered at most; beyond, `truncated`.
    pub max_rows: usize,
    /// Bytes of memory all queries together may hold (operators and results).
    pub memory: usize,
    /// The query threads' niceness, 0 to 19 (`query_nice`).
    pub nice: i32,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            timeout: Duration::from_secs(30),
            max_rows: 100_000,
            memory: 512 << 20,
            nice: QUERY_NICE,
        }
    }
}

/// Why a query got no answer. Each names what refused or ended it.
#[derive(Debug, Clone, thiserror::Error)]
pub enum QueryError {
    /// A statement that is not a read-only query (`refused` names what it is).
    #[error("{detail}")]
    Refused {
        /// What was refused: `statements`, `ddl`, `dml`, `copy`, `statement`, `file_table`,
        /// `table_function`, `operators`.
        refused: &'static str,
        /// Why, for a human.
        detail: String,
    },
    /// The SQL does not parse or plan (syntax, unknown table or column, types).
    #[error("{detail}")]
    Invalid {
        /// DataFusion's message.
        detail: String,
    },
    /// The query ran longer than `query_timeout`.
    #[error("the query ran longer than query_timeout ({0:?}) and was cancelled")]
    Timeout(Duration),
    /// The query needed more than `query_memory`.
    #[error("the query needed more memory than query_memory ({limit} bytes) allows: {detail}")]
    Memory {
        /// The limit.
        limit: usize,
        /// DataFusion's message.
        detail: String,
    },
    /// Too many queries past their deadline are still winding down: try again later.
    #[error("queries that ran past query_timeout are still winding down; try again shortly")]
    Busy,
    /// The query failed for another reason (a file of the snapshot unreadable, a bug).
    #[error("{0}")]
    Failed(String),
}

impl QueryError {
    /// The limit it names, if it is one (`query_timeout`, `query_memory`).
    pub fn limit(&self) -> Option<&'static str> {
        match self {
            QueryError::Timeout(_) => Some("query_timeout"),
            QueryError::Memory { .. } => Some("query_memory"),
            _ => None,
        }
    }

    /// A short label for metrics: `refused`, `invalid`, `timeout`, `memory`, `busy`, `failed`.
    pub fn label(&self) -> &'static str {
        match self {
            QueryError::Refused { .. } => "refused",
            QueryError::Invalid { .. } => "invalid",
            QueryError::Timeout(_) => "timeout",
            QueryError::Memory { .. } => "memory",
            QueryError::Busy => "busy",
            QueryError::Failed(_) => "failed",
        }
    }
}

/// The answer to a query: its rows (at most `query_max_rows`) and whether more were cut.
#[derive(Debug, Clone)]
pub struct Answer {
    /// Its schema.
    pub schema: SchemaRef,
    /// Its rows.
    pub batches: Vec<RecordBatch>,
    /// Whether rows beyond `query_max_rows` were left out.
    pub truncated: bool,
}

impl Answer {
    /// Rows answered.
    pub fn rows(&self) -> usize {
        self.batches.iter().map(RecordBatch::num_rows).sum()
    }
}

/// The query side: its runtime, memory pool and limits.
#[derive(Debug)]
pub struct Queries {
    limits: Limits,
    /// The runtime queries run on; replaced when a query past its deadline does not stop.
    runtime: Mutex<Option<tokio::runtime::Runtime>>,
    /// Query threads alive, of this runtime and of those replaced.
    threads: Arc<AtomicUsize>,
    pool: Arc<dyn MemoryPool>,
    slots: Arc<tokio::sync::Semaphore>,
    footers: tables::Footers,
}

/// Query threads alive at most (a replaced runtime's thread lives until the operator it is
/// stuck in returns): beyond, queries are refused as busy rather than pile up.
const MAX_THREADS: usize = 9;
/// How long a query past its deadline may take to notice its cancellation before its runtime
/// is replaced.
const CANCEL_GRACE: Duration = Duration::from_millis(250);

impl Queries {
    /// The query side (its runtime of one worker thread, `fencewatch-query`, starts with the
    /// first query).
    pub fn new(limits: Limits) -> std::io::Result<Queries> {
        let q = Queries {
            limits,
            runtime: Mutex::new(None),
            threads: Arc::new(AtomicUsize::new(0)),
            pool: Arc::new(GreedyMemoryPool::new(limits.memory)),
            slots: Arc::new(tokio::sync::Semaphore::new(MAX_CONCURRENT)),
            footers: tables::Footers::default(),
        };
        q.handle()?;
        Ok(q)
    }

    /// The limits.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// The current runtime's handle, starting one if needed.
    fn handle(&self) -> std::io::Result<tokio::runtime::Handle> {
        let mut rt = self.runtime.lock().unwrap_or_else(|p| p.into_inner());
        if rt.is_none() {
            let (up, down) = (self.threads.clone(), self.threads.clone());
            let nice = self.limits.nice;
            *rt = Some(
                tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(1)
                    .max_blocking_threads(2)
                    .thread_name("fencewatch-query")
                    .on_thread_start(move || {
                        up.fetch_add(1, Ordering::AcqRel);
                        lower_priority(nice);
                    })
                    .on_thread_stop(move || {
                        down.fetch_sub(1, Ordering::AcqRel);
                    })
                    .enable_all()
                    .build()?,
            );
        }
        Ok(rt.as_ref().expect("started").handle().clone())
    }

    /// Drops the current runtime without waiting for its threads: a thread stuck in a long
    /// operator ends when the operator returns; the next query gets a new runtime.
    fn replace_runtime(&self) {
        let old = self
            .runtime
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(rt) = old {
            rt.shutdown_background();
        }
    }

    /// Runs `sql` over `snapshot` on the query runtime, from any async context: the answer
    /// arrives by `query_timeout` at the latest, whatever the query does (the deadline is kept
    /// by the caller's runtime, not by the one the query may be monopolising).
    pub async fn run(&self, sql: &str, snapshot: Snapshot) -> Result<Answer, QueryError> {
        self.run_with(sql, Vec::new(), snapshot).await
    }

    /// [`Queries::run`] with the values of its parameters `$1`, `$2`, … (never spliced into
    /// the SQL text).
    pub async fn run_with(
        &self,
        sql: &str,
        params: Vec<ScalarValue>,
        snapshot: Snapshot,
    ) -> Result<Answer, QueryError> {
        check(sql)?;
        let limits = self.limits;
        let deadline = tokio::time::Instant::now() + limits.timeout;
        if self.threads.load(Ordering::Acquire) > MAX_THREADS {
            return Err(QueryError::Busy);
        }
        // Held here, not by the task: a query past its deadline gives its slot back at once.
        let _slot = tokio::time::timeout_at(deadline, self.slots.acquire())
            .await
            .map_err(|_| QueryError::Timeout(limits.timeout))?
            .expect("never closed");
        let handle = self
            .handle()
            .map_err(|e| QueryError::Failed(format!("cannot start the query runtime: {e}")))?;
        let (pool, footers, sql) = (self.pool.clone(), self.footers.clone(), sql.to_string());
        let (tx, rx) = tokio::sync::oneshot::channel();
        let task = handle.spawn(async move {
            let _ = tx.send(execute(&sql, params, snapshot, limits, pool, footers).await);
        });
        match tokio::time::timeout_at(deadline, rx).await {
            Ok(Ok(r)) => r,
            Ok(Err(_)) => Err(QueryError::Failed(
                "the query task ended without an answer".into(),
            )),
            Err(_) => {
                task.abort();
                if tokio::time::timeout(CANCEL_GRACE, task).await.is_err() {
                    self.replace_runtime();
                }
                Err(QueryError::Timeout(limits.timeout))
            }
        }
    }

    /// [`Queries::run`] from a thread outside any runtime (`fencewatch query`): the deadline
    /// is kept by a runtime of this thread.
    pub fn run_blocking(&self, sql: &str, snapshot: Snapshot) -> Result<Answer, QueryError> {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .map_err(|e| QueryError::Failed(e.to_string()))?
            .block_on(self.run(sql, snapshot))
    }
}

/// The default niceness of the query threads (`query_nice`): the lowest CPU priority, so that
/// on cores shared with ingest a runaway query takes only the time ingest, the API and the
/// archive leave idle (SPEC §9: a runaway join must not stall ingest or its latency). On an
/// idle machine a query still has every cycle; on a saturated one it waits.
pub const QUERY_NICE: i32 = 19;

/// Sets the calling thread's CPU priority to `nice` (Linux: a thread's own nice value;
/// elsewhere nothing): a query's, the archive's. A failure is logged, not fatal: the thread
/// still runs.
pub(crate) fn lower_priority(nice: i32) {
    #[cfg(target_os = "linux")]
    if let Err(e) = rustix::process::setpriority_process(Some(rustix::thread::gettid()), nice) {
        tracing::warn!(error = %e, nice, "cannot lower the thread's CPU priority");
    }
}

impl Drop for Queries {
    /// The runtime is shut down without waiting (it may be dropped in an async context).
    fn drop(&mut self) {
        self.replace_runtime();
    }
}

/// The most operators (`+`, `||`, `=`, `AND`, …) a query may chain: a chain parses, without
/// recursion, into an expression tree as deep as it is long, which checking and dropping it
/// then walk recursively (a 100 KB `SELECT 1+1+…+1` of 50,000 terms overflowed a runtime
/// thread's stack and aborted the service: hostile test, session 40). Parentheses and
/// function calls are bounded by the parser's own recursion limit.
pub const MAX_SQL_OPERATORS: usize = 1000;

/// Counts the tokens of `sql` that join two expressions (everything but names, literals,
/// commas, brackets and the like; `AND` and `OR` among the words), to refuse a query with more
/// than [`MAX_SQL_OPERATORS`] before it is parsed. A query that does not tokenize is left to
/// the parser, which words the error.
fn operators(sql: &str) -> usize {
    use datafusion::sql::sqlparser::keywords::Keyword;
    use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};
    let Ok(tokens) = Tokenizer::new(&GenericDialect {}, sql).tokenize() else {
        return 0;
    };
    tokens
        .iter()
        .filter(|t| match t {
            Token::Word(w) => matches!(w.keyword, Keyword::AND | Keyword::OR | Keyword::XOR),
            Token::EOF
            | Token::Number(..)
            | Token::Char(_)
            | Token::SingleQuotedString(_)
            | Token::DoubleQuotedString(_)
            | Token::NationalStringLiteral(_)
            | Token::EscapedStringLiteral(_)
            | Token::HexStringLiteral(_)
            | Token::Comma
            | Token::Whitespace(_)
            | Token::LParen
            | Token::RParen
            | Token::Period
            | Token::SemiColon
            | Token::LBracket
            | Token::RBracket
            | Token::Placeholder(_) => false,
            _ => true,
        })
        .count()
}

/// Refuses what is not one read-only query, with a message naming it.
fn check(sql: &str) -> Result<(), QueryError> {
    let n = operators(sql);
    if n > MAX_SQL_OPERATORS {
        return Err(QueryError::Refused {
            refused: "operators",
            detail: format!(
                "{n} operators in one query: at most {MAX_SQL_OPERATORS} (a longer chain is \
                 refused before it is parsed)"
            ),
        });
    }
    let statements = DFParser::parse_sql_with_dialect(sql, &GenericDialect {}).map_err(|e| {
        QueryError::Invalid {
            detail: e.to_string(),
        }
    })?;
    let refused = |refused, detail: String| Err(QueryError::Refused { refused, detail });
    let Some(first) = statements.front() else {
        return Err(QueryError::Invalid {
            detail: "no SQL statement".into(),
        });
    };
    if statements.len() > 1 {
        return refused(
            "statements",
            format!("one statement per query, this has {}", statements.len()),
        );
    }
    let mut s = first;
    while let DfStatement::Explain(e) = s {
        s = &e.statement;
    }
    let stmt = match s {
        DfStatement::Statement(stmt) => stmt,
        DfStatement::CreateExternalTable(_) => {
            return refused("ddl", "CREATE EXTERNAL TABLE: SQL here is read-only".into());
        }
        DfStatement::CopyTo(_) => return refused("copy", "COPY: SQL here is read-only".into()),
        DfStatement::Explain(_) => unreachable!("unwrapped above"),
        DfStatement::Reset(_) => {
            return refused("statement", "RESET: SQL here is read-only".into());
        }
    };
    let mut stmt: &Statement = stmt;
    while let Statement::Explain { statement, .. } = stmt {
        stmt = statement;
    }
    let verb = || {
        stmt.to_string()
            .split_whitespace()
            .next()
            .unwrap_or("")
            .to_ascii_uppercase()
    };
    match stmt {
        // SHOW TABLES and SHOW COLUMNS read `information_schema` (README).
        Statement::Query(_) | Statement::ShowTables { .. } | Statement::ShowColumns { .. } => {}
        Statement::Insert(_)
        | Statement::Update { .. }
        | Statement::Delete(_)
        | Statement::Merge { .. }
        | Statement::Truncate { .. } => {
            return refused("dml", format!("{}: SQL here is read-only", verb()));
        }
        Statement::Copy { .. } => return refused("copy", "COPY: SQL here is read-only".into()),
        Statement::CreateTable(_)
        | Statement::CreateView { .. }
        | Statement::CreateSchema { .. }
        | Statement::CreateDatabase { .. }
        | Statement::CreateFunction(_)
        | Statement::Drop { .. }
        | Statement::AlterTable { .. } => {
            return refused("ddl", format!("{}: SQL here is read-only", verb()));
        }
        _ => {
            return refused(
                "statement",
                format!(
                    "{}: only a query (SELECT, WITH, EXPLAIN) may run here",
                    verb()
                ),
            );
        }
    }
    let mut v = Relations;
    match stmt.visit(&mut v) {
        ControlFlow::Continue(()) => Ok(()),
        ControlFlow::Break((refused, detail)) => Err(QueryError::Refused { refused, detail }),
    }
}

/// The table functions a query may call: neither reads a file.
const TABLE_FUNCTIONS: [&str; 2] = ["generate_series", "range"];

/// Refuses tables named by a string (paths, URLs) and table functions other than
/// [`TABLE_FUNCTIONS`].
struct Relations;

fn quoted_as_string(name: &ObjectName) -> bool {
    name.0
        .iter()
        .any(|p| p.as_ident().is_some_and(|i| i.quote_style == Some('\'')))
}

fn function_refused(name: &ObjectName) -> Option<(&'static str, String)> {
    let n = name.to_string().to_ascii_lowercase();
    (!TABLE_FUNCTIONS.contains(&n.as_str())).then(|| {
        (
            "table_function",
            format!(
                "table function `{n}` is not available: queries read the archive's tables ({}), information_schema, and generate_series or range",
                tables::NAMES.join(", ")
            ),
        )
    })
}

impl Visitor for Relations {
    type Break = (&'static str, String);

    fn pre_visit_table_factor(&mut self, t: &TableFactor) -> ControlFlow<Self::Break> {
        let refused = match t {
            TableFactor::Table { name, .. } if quoted_as_string(name) => Some((
                "file_table",
                format!(
                    "table {name} is a path or URL: queries read the archive's tables ({}) and information_schema",
                    tables::NAMES.join(", ")
                ),
            )),
            TableFactor::Table {
                name,
                args: Some(_),
                ..
            } => function_refused(name),
            TableFactor::Function { name, .. } => function_refused(name),
            TableFactor::TableFunction { expr, .. } => {
                Some(("table_function", format!("TABLE({expr}) is not available")))
            }
            _ => None,
        };
        match refused {
            Some(r) => ControlFlow::Break(r),
            None => ControlFlow::Continue(()),
        }
    }
}

/// Plans and runs one checked query, collecting at most `max_rows` rows, its result counted
/// against the pool.
async fn execute(
    sql: &str,
    params: Vec<ScalarValue>,
    snapshot: Snapshot,
    limits: Limits,
    pool: Arc<dyn MemoryPool>,
    footers: tables::Footers,
) -> Result<Answer, QueryError> {
    let ctx = tables::session(&snapshot, pool.clone(), &footers)
        .await
        .map_err(|e| classify(e, limits))?;
    let options = SQLOptions::new()
        .with_allow_ddl(false)
        .with_allow_dml(false)
        .with_allow_statements(false);
    let mut df = ctx
        .sql_with_options(sql, options)
        .await
        .map_err(|e| classify(e, limits))?;
    if !params.is_empty() {
        df = df
            .with_param_values(params)
            .map_err(|e| classify(e, limits))?;
    }
    let schema: SchemaRef = Arc::new(df.schema().as_arrow().clone());
    let mut stream = df.execute_stream().await.map_err(|e| classify(e, limits))?;
    let held = MemoryConsumer::new("query result").register(&pool);
    let mut batches = Vec::new();
    let (mut rows, mut truncated) = (0usize, false);
    while let Some(b) = stream.next().await {
        let b = b.map_err(|e| classify(e, limits))?;
        let room = limits.max_rows - rows;
        let b = if b.num_rows() > room {
            truncated = true;
            b.slice(0, room)
        } else {
            b
        };
        held.try_grow(b.get_array_memory_size())
            .map_err(|e| classify(e, limits))?;
        rows += b.num_rows();
        if b.num_rows() > 0 {
            batches.push(b);
        }
        if truncated || rows == limits.max_rows {
            // One more row would be cut: look ahead only when at the limit exactly.
            if !truncated {
                while let Some(next) = stream.next().await {
                    let next = next.map_err(|e| classify(e, limits))?;
                    if next.num_rows() > 0 {
                        truncated = true;
                        break;
                    }
                }
            }
            break;
        }
    }
    Ok(Answer {
        schema,
        batches,
        truncated,
    })
}

/// The [`QueryError`] of a DataFusion error.
fn classify(e: DataFusionError, limits: Limits) -> QueryError {
    let root = e.find_root();
    match root {
        DataFusionError::ResourcesExhausted(m) => QueryError::Memory {
            limit: limits.memory,
            detail: m.clone(),
        },
        DataFusionError::SQL(..)
        | DataFusionError::Plan(_)
        | DataFusionError::SchemaError(..)
        | DataFusionError::NotImplemented(_) => QueryError::Invalid {
            detail: root.to_string(),
        },
        _ => {
            let m = root.to_string();
            // Spilling is disabled: an operator that would spill ran out of query_memory.
            if m.contains("spill") || m.contains("Disk manager") || m.contains("DiskManager") {
                QueryError::Memory {
                    limit: limits.memory,
                    detail: m,
                }
            } else {
                QueryError::Failed(e.to_string())
            }
        }
    }
}

#[cfg(test)]
mod tests;
