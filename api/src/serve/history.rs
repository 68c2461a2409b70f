//! A scope's whole history out of the evidence archive (SPEC §9), for `/v1/scopes/{scope}`:
//! its events of one property, flushed or not, by (`ts`, `source`), a page at a time.
//!
//! One parameterised query over the snapshot `POST /v1/query` would see (`WHERE scope = $1`,
//! the scope never spliced into the SQL): DataFusion prunes the archive's row groups by the
//! bloom filter the writer keeps on `scope`, so a scope's history costs the row groups that
//! hold it, not the archive. Pages are keyset pages on (`ts`, `source`, `partition`,
//! `offset`): a span delivered again after its first delivery left the horizon is another
//! event with the same (`ts`, `source`) (README, OTLP), and a cursor of those two alone
//! skipped the second delivery (hostile test, session 20).
//! A row archived after a page with a key below that page's cursor (an event older than those
//! already paged) is not in later pages: a new traversal shows it.

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
    ", received, partition, \"offset\" FROM events WHERE scope = $1 AND property = $2 AND ts >= $3 ",
    "AND (ts > $3 OR (ts = $3 AND (source > $4 OR (source = $4 AND (partition > $5 ",
    "OR (partition = $5 AND \"offset\" > $6)))))) ",
    "ORDER BY ts, source, partition, \"offset\" LIMIT $7"
);

/// A page cursor: the (`ts`, `source`, `partition`, `offset`) of the last event of the
/// previous page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor {
    ts: i64,
    source: String,
    partition: String,
    offset: u64,
}

impl Cursor {
    /// Parses `<ts>.<offset>.<bytes of partition>:<partition><source>` as [`page`] returns it.
    pub fn parse(s: &str) -> Result<Cursor, ApiError> {
        let bad = || ApiError::BadRequest {
            detail: format!(
                "query `cursor`: `{}` is not a cursor this service returned",
                s.chars().take(128).collect::<String>()
            ),
        };
        let (ts, rest) = s.split_once('.').ok_or_else(bad)?;
        let (offset, rest) = rest.split_once('.').ok_or_else(bad)?;
        let (len, rest) = rest.split_once(':').ok_or_else(bad)?;
        let len: usize = len.parse().map_err(|_| bad())?;
        let (partition, source) = rest.split_at_checked(len).ok_or_else(bad)?;
        Ok(Cursor {
            ts: ts.parse().ok().filter(|t| *t >= 0).ok_or_else(bad)?,
            source: source.to_string(),
            partition: partition.to_string(),
            offset: offset.parse().map_err(|_| bad())?,
        })
    }

    fn of(event: &Value) -> Cursor {
        let field = |k: &str| event[k].as_str().expect("a string column").to_string();
        Cursor {
            ts: event["ts_ns"].as_i64().expect("a ts"),
            source: field("source"),
            partition: field("partition"),
            offset: event["offset"].as_u64().expect("an offset"),
        }
    }
}

impl std::fmt::Display for Cursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Cursor {
            ts,
            source,
            partition,
            offset,
        } = self;
        write!(f, "{ts}.{offset}.{}:{partition}{source}", partition.len())
    }
}

/// The most text a page of a scope's history holds: past it the page ends (with one event at
/// least) and `next_cursor` goes on from there. Events are as long as their names, up to
/// `max_line_bytes`: 120 events with 1 MB holder names made 120 MB answers, and 16 clients
/// not reading theirs held 2.4 GB (hostile test, session 40).
pub const MAX_PAGE_BYTES: usize = 4 << 20;

/// About the bytes `event` takes as JSON: its strings' lengths, 16 a field besides.
fn text_bytes(event: &Value) -> usize {
    event.as_object().map_or(0, |o| {
        o.iter()
            .map(|(k, v)| k.len() + 16 + v.as_str().map_or(0, str::len))
            .sum()
    })
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
        partition: String::new(),
        offset: 0,
    });
    let ts = |t: i64| ScalarValue::TimestampNanosecond(Some(t), Some("UTC".into()));
    let params = vec![
        ScalarValue::Utf8(Some(scope.to_string())),
        ScalarValue::Utf8(Some(property.to_string())),
        ts(after.ts),
        ScalarValue::Utf8(Some(after.source)),
        ScalarValue::Utf8(Some(after.partition)),
        ScalarValue::UInt64(Some(after.offset)),
        ScalarValue::Int64(Some(limit as i64 + 1)),
    ];
    let answer = queries.run_with(SQL, params, snap).await?;
    let mut events = rows(&answer);
    drop(answer);
    // At most `limit` events, and past MAX_PAGE_BYTES of their text none more (one at least).
    let mut keep = events.len().min(limit);
    let mut bytes = 0;
    for (i, e) in events.iter().take(limit).enumerate() {
        bytes += text_bytes(e);
        if bytes > MAX_PAGE_BYTES && i > 0 {
            keep = i;
            break;
        }
    }
    let next = (events.len() > keep).then(|| {
        events.truncate(keep);
        Cursor::of(&events[keep - 1]).to_string()
    });
    for e in &mut events {
        let e = e.as_object_mut().expect("an object");
        for k in ["ts_ns", "partition", "offset"] {
            e.remove(k);
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A cursor reads back as written, whatever dots and colons its partition and source hold;
    /// anything else is refused.
    #[test]
    fn a_cursor_reads_back_as_written() {
        let c = Cursor {
            ts: 1_764_417_600_000_000_123,
            source: "otlp:0af7.../b7ad:9".into(),
            partition: "orders.v2/3".into(),
            offset: 42,
        };
        let text = c.to_string();
        assert_eq!(Cursor::parse(&text).unwrap(), c);
        for bad in [
            "",
            "12",
            "12.3",
            "12.3.x:ab",
            "12.3.9:ab",
            "-1.3.0:",
            "1.x.0:",
            "1.2.1:é",
        ] {
            assert!(Cursor::parse(bad).is_err(), "{bad}");
        }
    }

    /// A page of a scope's history ends past `MAX_PAGE_BYTES` of text, whatever `limit` allows,
    /// and the pages after it, by their cursors, give every event once, in order (hostile test,
    /// session 40: 120 events with 1 MB names made a 120 MB answer).
    #[test]
    fn a_scope_history_page_is_bounded_in_bytes_and_pages_on() {
        use crate::query::{Limits, Queries};
        use fencewatch_assess::event::{Epoch, Event, Kind};
        use fencewatch_ingest::archive::rows::{EventRows, Rows};
        use fencewatch_ingest::archive::{Origin, Table};
        let big = "h".repeat(600_000);
        let mut rows = EventRows::default();
        for i in 0..20u64 {
            let mut ev = Event::new(Kind::Commit, EventTime(i as i64 * 1_000_000_000));
            ev.scope = Some("big");
            ev.epoch = Some(Epoch(i));
            ev.holder = Some(&big);
            let at = Origin {
                partition: "wal",
                received: 1,
            };
            rows.push(at, &ev, Some("p"), format_args!("http:{i}"), i);
        }
        let mut snap = Snapshot::default();
        snap.batches.insert(Table::Events, vec![rows.finish()]);
        let q = Queries::new(Limits::default()).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let (mut after, mut epochs, mut pages) = (None, Vec::new(), 0);
        loop {
            let page = rt
                .block_on(page_of(&q, snap.clone(), ("p", "big"), after, 1000))
                .unwrap();
            pages += 1;
            let events = page["events"].as_array().unwrap();
            let text: usize = events.iter().map(|e| e.to_string().len()).sum();
            assert!(
                !events.is_empty() && text <= MAX_PAGE_BYTES + 700_000,
                "{text}"
            );
            epochs.extend(events.iter().map(|e| e["epoch"].as_u64().unwrap()));
            match page["next_cursor"].as_str() {
                Some(c) => after = Some(Cursor::parse(c).unwrap()),
                None => break,
            }
        }
        assert_eq!(epochs, (0..20).collect::<Vec<_>>());
        assert!(pages >= 3, "{pages} pages");
    }
}
