//! The DataFusion peer of SPEC §7: the stale-commit SQL over the NDJSON file, in-process.

use anyhow::{Context, Result, bail};
use datafusion::arrow::array::Array;
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::common::cast::as_int64_array;
use datafusion::prelude::{JsonReadOptions, SessionContext};
use std::path::Path;

/// The SQL of SPEC §7, verbatim, with `<skew+1>` standing for the skew in nanoseconds plus one.
const SQL_TEMPLATE: &str = "WITH c AS (SELECT scope, epoch, ts FROM events WHERE kind IN ('commit','fence') AND epoch \
IS NOT NULL AND scope IS NOT NULL), m AS (SELECT epoch, MAX(epoch) OVER (PARTITION BY scope \
ORDER BY ts RANGE BETWEEN UNBOUNDED PRECEDING AND <skew+1> PRECEDING) AS prior FROM c) \
SELECT COUNT(*) FROM m WHERE prior > epoch";

/// The SQL for a clock skew of `skew_ns` nanoseconds.
pub(crate) fn sql(skew_ns: i64) -> Result<String> {
    let offset = skew_ns
        .checked_add(1)
        .filter(|o| *o > 0)
        .context("the clock skew must be between 0 and i64::MAX - 1 ns")?;
    Ok(SQL_TEMPLATE.replace("<skew+1>", &offset.to_string()))
}

/// The explicit schema of table `events`: every column nullable.
fn schema() -> Schema {
    Schema::new(vec![
        Field::new("kind", DataType::Utf8, true),
        Field::new("scope", DataType::Utf8, true),
        Field::new("epoch", DataType::UInt64, true),
        Field::new("ts", DataType::Int64, true),
        Field::new("route", DataType::Utf8, true),
        Field::new("holder", DataType::Utf8, true),
        Field::new("outcome", DataType::Utf8, true),
    ])
}

/// Registers `path` as table `events` and runs the SQL on a multi-threaded Tokio runtime with
/// DataFusion's default configuration (one partition per core). Returns the stale count.
pub(crate) fn count_stale(path: &Path, skew_ns: i64) -> Result<u64> {
    let sql = sql(skew_ns)?;
    let path = path
        .canonicalize()
        .with_context(|| format!("opening {}", path.display()))?;
    let path_str = path
        .to_str()
        .with_context(|| format!("{} is not valid UTF-8", path.display()))?
        .to_owned();
    // `register_json` only selects files whose name ends with the option's extension
    // (default ".json"), so it must be the file's own one (".ndjson" here).
    let extension = match path.extension().and_then(|e| e.to_str()) {
        Some(e) => format!(".{e}"),
        None => String::new(),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the Tokio runtime")?;
    runtime.block_on(async move {
        let ctx = SessionContext::new();
        let schema = schema();
        let options = JsonReadOptions::default()
            .schema(&schema)
            .file_extension(&extension);
        ctx.register_json("events", &path_str, options)
            .await
            .with_context(|| format!("registering {path_str} as table events"))?;
        let batches = ctx
            .sql(&sql)
            .await
            .context("planning the SQL")?
            .collect()
            .await
            .context("running the SQL")?;
        let mut rows = batches.iter().filter(|b| b.num_rows() > 0);
        let (Some(batch), None) = (rows.next(), rows.next()) else {
            bail!("COUNT(*) did not return exactly one batch with rows");
        };
        let column = as_int64_array(batch.column(0).as_ref())?;
        if column.len() != 1 || column.is_null(0) {
            bail!("COUNT(*) did not return one non-null row");
        }
        u64::try_from(column.value(0)).context("negative COUNT(*)")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn substitutes_the_offset() {
        let s = sql(50_000_000).unwrap();
        assert!(s.contains("AND 50000001 PRECEDING"));
        assert!(!s.contains('<'));
        assert!(sql(i64::MAX).is_err());
    }
}
