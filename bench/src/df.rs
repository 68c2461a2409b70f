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

/// The explicit schema of the file: every column nullable, `ts` as text when `text_ts`.
fn schema(text_ts: bool) -> Schema {
    let ts = if text_ts {
        DataType::Utf8
    } else {
        DataType::Int64
    };
    Schema::new(vec![
        Field::new("kind", DataType::Utf8, true),
        Field::new("scope", DataType::Utf8, true),
        Field::new("epoch", DataType::UInt64, true),
        Field::new("ts", ts, true),
        Field::new("route", DataType::Utf8, true),
        Field::new("holder", DataType::Utf8, true),
        Field::new("outcome", DataType::Utf8, true),
    ])
}

/// Table `events` over a file whose `ts` is RFC 3339 text (table `raw`): the text cast to a
/// nanosecond timestamp (Arrow's parser: offsets applied, nine fraction digits kept), then to
/// its integer.
pub(crate) const TEXT_TS_VIEW: &str = "CREATE VIEW events AS SELECT kind, scope, epoch, \
CAST(CAST(ts AS TIMESTAMP) AS BIGINT) AS ts, route, holder, outcome FROM raw";

/// Registers `path` as table `events` and runs the SQL on a multi-threaded Tokio runtime with
/// DataFusion's default configuration (one partition per core). Returns the stale count. With
/// `text_ts`, the file's `ts` is RFC 3339 text, converted in the table ([`TEXT_TS_VIEW`]).
pub(crate) fn count_stale(path: &Path, skew_ns: i64, text_ts: bool) -> Result<u64> {
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
        let schema = schema(text_ts);
        let options = JsonReadOptions::default()
            .schema(&schema)
            .file_extension(&extension);
        let table = if text_ts { "raw" } else { "events" };
        ctx.register_json(table, &path_str, options)
            .await
            .with_context(|| format!("registering {path_str} as table {table}"))?;
        if text_ts {
            ctx.sql(TEXT_TS_VIEW)
                .await
                .context("creating the view of ts as nanoseconds")?;
        }
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
    fn rfc3339_times_count_as_their_nanoseconds() {
        let text = fixture::write("df-text", fixture::TEXT);
        let nanos = fixture::write("df-nanos", fixture::NANOS);
        for (skew, want) in fixture::STALE {
            assert_eq!(count_stale(&text, skew, true).unwrap(), want, "skew {skew}");
            assert_eq!(
                count_stale(&nanos, skew, false).unwrap(),
                want,
                "skew {skew}"
            );
        }
        // Read as integers, text times fail the run (what `--text-ts` is for).
        let e = count_stale(&text, 0, false).unwrap_err();
        assert!(format!("{e:#}").contains("as Int64"), "{e:#}");
        std::fs::remove_file(&text).unwrap();
        std::fs::remove_file(&nanos).unwrap();
    }

    #[test]
    fn substitutes_the_offset() {
        let s = sql(50_000_000).unwrap();
        assert!(s.contains("AND 50000001 PRECEDING"));
        assert!(!s.contains('<'));
        assert!(sql(i64::MAX).is_err());
    }
}

/// Files of three commits of one scope, epoch 2 then two of epoch 1, for both SQL peers' tests.
#[cfg(test)]
pub(crate) mod fixture {
    use std::path::PathBuf;

    /// Their times as RFC 3339 text: offsets applied, lower case taken, nine fraction digits
    /// kept, they are 12:00:00.000000001 UTC, 12:00:00.000000002 and 12:00:01.
    pub(crate) const TEXT: [&str; 3] = [
        r#""2025-11-29t14:00:00.000000001+02:00""#,
        r#""2025-11-29T10:30:00.000000002-01:30""#,
        r#""2025-11-29T12:00:01Z""#,
    ];
    /// The same instants in integer nanoseconds.
    pub(crate) const NANOS: [&str; 3] = [
        "1764417600000000001",
        "1764417600000000002",
        "1764417601000000000",
    ];
    /// (skew in ns, stale commits): both epoch-1 commits are stale with a skew of 0, only the
    /// last with a skew of 1 ns (the first one's window ends skew + 1 before it).
    pub(crate) const STALE: [(i64, u64); 2] = [(0, 2), (1, 1)];

    /// The file of the commits at times `ts` (JSON values), named after `name` and this
    /// process in the temporary directory.
    pub(crate) fn write(name: &str, ts: [&str; 3]) -> PathBuf {
        let path = std::env::temp_dir().join(format!("fwb-{name}-{}.ndjson", std::process::id()));
        let body: String = ts
            .iter()
            .zip([2, 1, 1])
            .map(|(t, epoch)| {
                format!("{{\"kind\":\"commit\",\"ts\":{t},\"scope\":\"s\",\"epoch\":{epoch}}}\n")
            })
            .collect();
        std::fs::write(&path, body).unwrap();
        path
    }
}
