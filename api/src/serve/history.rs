//! A scope's whole history out of the evidence archive (SPEC §9), for `/v1/scopes/{scope}`:
//! its events of one property, flushed or not, by (`ts`, `source`), a page at a time.
//!
//! One parameterised query over the snapshot `POST /v1/query` would see (`WHERE scope = $1`,
//! the scope never spliced into the SQL): DataFusion prunes the archive's row groups by the
//! bloom filter the writer keeps on `scope`, so a scope's history costs the row groups that
//! hold it, not the archive. Pages are keyset pages: the cursor is the last row's
//! `<ts>.<source>` (both together unique), so a page never repeats or skips a row however many
//! rows arrive between two pages.

use crate::query::{Answer, Queries, QueryError};
use crate::serve::error::ApiError;
use crate::serve::sql::{api_error, snapshot_for_request};
use datafusion::arrow::array::{Array, AsArray};
use datafusion::arrow::datatypes::{DataType, TimestampNanosecondType, UInt64Type};
use datafusion::common::ScalarValue;
use fencewatch_assess::EventTime;
use fencewatch_ingest::archive::Snapshot;
use fencewatch_ingest::registry::Registry;
use serde_json::{Map, Value, json};
use std::path::Path;

/// Events per page by default, and at most.
pub const DEFAULT_LIMIT: usize = 100;
/// See [`DEFAULT_LIMIT`].
pub const MAX_LIMIT: usize = 1000;

/// The columns an archived event is shown with (as a counterexample's events are, and its
/// `op_id`).
macro_rules! event_columns {
    () => {
        "ts, kind, epoch, incarnation, \"order\", route, holder, op_id, outcome, emitter, seq, source"
    };
}
pub(crate) use event_columns;

/// `limit + 1` rows after the cursor: the one more says whether a next page exists. `ts >=
/// $3` is implied by the cursor's condition, and prunes row groups by their `ts` statistics
/// (the OR alone does not).
const SQL: &str = concat!(
    "SELECT ",
    event_columns!(),
    ", received FROM events WHERE scope = $1 AND property = $2 AND ts >= $3 ",
    "AND (ts > $3 OR (ts = $3 AND source > $4)) ORDER BY ts, source LIMIT $5"
);

/// A page cursor: the (`ts`, `source`) of the last event of the previous page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor {
    ts: i64,
    source: String,
}

impl Cursor {
    /// Parses `<ts>.<source>` as [`page`] returns it.
    pub fn parse(s: &str) -> Result<Cursor, ApiError> {
        let bad = || ApiError::BadRequest {
            detail: format!(
                "query `cursor`: `{}` is not a cursor this service returned",
                s.chars().take(128).collect::<String>()
            ),
        };
        let (ts, source) = s.split_once('.').ok_or_else(bad)?;
        Ok(Cursor {
            ts: ts.parse().ok().filter(|t| *t >= 0).ok_or_else(bad)?,
            source: source.to_string(),
        })
    }
}

/// One page of the history of `scope` under `property`: `{"events", "next_cursor",
/// "archive"}` (`archive`: whether this run archives, else the files an earlier run wrote).
pub async fn page(
    registry: &Registry,
    data_dir: &Path,
    queries: &Queries,
    (property, scope): (&str, &str),
    after: Option<Cursor>,
    limit: usize,
) -> Result<Value, ApiError> {
    let snap = snapshot_for_request(registry, data_dir)?;
    let mut page = page_of(queries, snap, (property, scope), after, limit)
        .await
        .map_err(api_error)?;
    page["archive"] = json!(registry.archive().is_some());
    Ok(page)
}

/// [`page`] over `snap`: `{"events", "next_cursor"}`.
pub async fn page_of(
    queries: &Queries,
    snap: Snapshot,
    (property, scope): (&str, &str),
    after: Option<Cursor>,
    limit: usize,
) -> Result<Value, QueryError> {
    let after = after.unwrap_or(Cursor {
        ts: -1,
        source: String::new(),
    });
    let ts = |t: i64| ScalarValue::TimestampNanosecond(Some(t), Some("UTC".into()));
    let params = vec![
        ScalarValue::Utf8(Some(scope.to_string())),
        ScalarValue::Utf8(Some(property.to_string())),
        ts(after.ts),
        ScalarValue::Utf8(Some(after.source)),
        ScalarValue::Int64(Some(limit as i64 + 1)),
    ];
    let answer = queries.run_with(SQL, params, snap).await?;
    let mut events = rows(&answer);
    let next = (events.len() > limit).then(|| {
        events.truncate(limit);
        let last = &events[limit - 1];
        format!(
            "{}.{}",
            last["ts_ns"].as_i64().expect("a ts"),
            last["source"].as_str().expect("a source")
        )
    });
    for e in &mut events {
        e.as_object_mut().expect("an object").remove("ts_ns");
    }
    Ok(json!({"events": events, "next_cursor": next}))
}

/// The answer's rows as objects by column name (null columns left out; times RFC 3339), each
/// with its `ts` also as `ts_ns` when it has one.
pub(crate) fn rows(a: &Answer) -> Vec<Value> {
    let mut out = Vec::with_capacity(a.rows());
    for b in &a.batches {
        let schema = b.schema();
        for i in 0..b.num_rows() {
            let mut o = Map::new();
            for (col, field) in b.columns().iter().zip(schema.fields()) {
                if col.is_null(i) {
                    continue;
                }
                let name = field.name();
                let v = match col.data_type() {
                    DataType::Timestamp(..) => {
                        let t = col.as_primitive::<TimestampNanosecondType>().value(i);
                        if name == "ts" {
                            o.insert("ts_ns".into(), json!(t));
                        }
                        json!(EventTime(t).to_string())
                    }
                    DataType::UInt64 => json!(col.as_primitive::<UInt64Type>().value(i)),
                    DataType::Boolean => json!(col.as_boolean().value(i)),
                    DataType::Utf8View => json!(col.as_string_view().value(i)),
                    DataType::LargeUtf8 => json!(col.as_string::<i64>().value(i)),
                    _ => json!(col.as_string::<i32>().value(i)),
                };
                o.insert(name.clone(), v);
            }
            out.push(Value::Object(o));
        }
    }
    out
}
