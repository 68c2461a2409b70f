//! One query's session: the archive's five tables over one [`Snapshot`].

use datafusion::arrow::array::RecordBatch;
use datafusion::catalog::TableProvider;
use datafusion::datasource::MemTable;
use datafusion::datasource::file_format::parquet::ParquetFormat;
use datafusion::datasource::listing::{
    ListingOptions, ListingTable, ListingTableConfig, ListingTableUrl,
};
use datafusion::error::Result;
use datafusion::execution::cache::cache_manager::{CacheManagerConfig, FileMetadataCache};
use datafusion::execution::disk_manager::{DiskManagerBuilder, DiskManagerMode};
use datafusion::execution::memory_pool::MemoryPool;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::execution::session_state::SessionStateBuilder;
use datafusion::prelude::{SessionConfig, SessionContext};
use fencewatch_ingest::archive::{Snapshot, Table};
use std::sync::{Arc, Mutex};

/// The tables a query sees.
pub(super) const NAMES: [&str; 5] = [
    "events",
    "malformed",
    "counterexamples",
    "windows",
    "window_revisions",
];

/// The Parquet footers read so far, shared by the queries: the archive's files are immutable
/// and their names never reused, so what was read of one stays true.
#[derive(Clone, Default)]
pub(super) struct Footers(Arc<Mutex<Option<Arc<FileMetadataCache>>>>);

impl std::fmt::Debug for Footers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Footers")
    }
}

/// `windows`: the latest revision of each window.
const WINDOWS: &str = "SELECT property, start, \"end\", verdict, final, revised, counterexamples, unknown, revision \
     FROM (SELECT *, row_number() OVER (PARTITION BY property, start ORDER BY revision DESC) AS fencewatch_rank \
     FROM window_revisions) WHERE fencewatch_rank = 1";

/// A session over `snapshot`: a runtime of its own (no listing cache kept between queries,
/// spilling disabled, the shared memory pool) and the five tables.
pub(super) async fn session(
    snapshot: &Snapshot,
    pool: Arc<dyn MemoryPool>,
    footers: &Footers,
) -> Result<SessionContext> {
    let mut cache = CacheManagerConfig::default();
    let known = footers.0.lock().unwrap_or_else(|p| p.into_inner()).clone();
    if let Some(f) = known.clone() {
        cache = cache.with_file_metadata_cache(Some(f));
    }
    let runtime = RuntimeEnvBuilder::new()
        .with_memory_pool(pool)
        .with_disk_manager_builder(
            DiskManagerBuilder::default().with_mode(DiskManagerMode::Disabled),
        )
        .with_cache_manager(cache)
        .build_arc()?;
    if known.is_none() {
        *footers.0.lock().unwrap_or_else(|p| p.into_inner()) =
            Some(runtime.cache_manager.get_file_metadata_cache());
    }
    let mut config = SessionConfig::new()
        .with_target_partitions(2)
        .with_information_schema(true);
    // Parquet: prune row groups by statistics and bloom filters; read what is needed.
    config.options_mut().execution.parquet.pushdown_filters = true;
    let state = SessionStateBuilder::new()
        .with_config(config)
        .with_runtime_env(runtime)
        .with_default_features()
        .build();
    let ctx = SessionContext::new_with_state(state);
    for t in Table::ALL {
        let files = snapshot.files.get(&t).map(Vec::as_slice).unwrap_or(&[]);
        let batches = snapshot.batches.get(&t).cloned().unwrap_or_default();
        ctx.register_table(t.name(), table(&ctx, t, files, batches)?)?;
    }
    let windows = ctx.sql(WINDOWS).await?;
    ctx.register_table("windows", windows.into_view())?;
    Ok(ctx)
}

/// Table `t`: its files (an explicit list) united with the rows not yet written.
fn table(
    ctx: &SessionContext,
    t: Table,
    files: &[std::path::PathBuf],
    batches: Vec<RecordBatch>,
) -> Result<Arc<dyn TableProvider>> {
    let schema = t.schema();
    let mem: Arc<dyn TableProvider> = Arc::new(MemTable::try_new(schema.clone(), vec![batches])?);
    if files.is_empty() {
        return Ok(mem);
    }
    let urls = files
        .iter()
        .map(|p| ListingTableUrl::parse(p.to_string_lossy()))
        .collect::<Result<Vec<_>>>()?;
    let options =
        ListingOptions::new(Arc::new(ParquetFormat::default())).with_file_extension(".parquet");
    let config = ListingTableConfig::new_with_multi_paths(urls)
        .with_listing_options(options)
        .with_schema(schema);
    let listed: Arc<dyn TableProvider> = Arc::new(ListingTable::try_new(config)?);
    let united = ctx.read_table(listed)?.union(ctx.read_table(mem)?)?;
    Ok(united.into_view())
}
