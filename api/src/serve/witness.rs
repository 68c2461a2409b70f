//! A counterexample out of the evidence archive (SPEC §9) once its detail is no longer
//! resident (beyond `max_counterexamples`), for `/v1/counterexamples/{id}`: its archived row,
//! its stale and superseding events, and its context (the scope's last
//! [`CONTEXT_EVENTS`] events up to the stale one), from the archived events.
//!
//! Three parameterised queries on the query runtime over one snapshot, each `WHERE scope = $1`
//! (but the first, by `id`), so the archive's bloom filters on `scope` keep them to the row
//! groups of the counterexample's scope.

use crate::query::{Queries, QueryError};
use crate::serve::error::ApiError;
use crate::serve::history::{event_columns, rows};
use crate::serve::sql::{api_error, snapshot_for_request};
use datafusion::common::ScalarValue;
use fencewatch_assess::history::CONTEXT_EVENTS;
use fencewatch_ingest::archive::Snapshot;
use fencewatch_ingest::registry::Registry;
use serde_json::{Value, json};
use std::path::Path;

const CX_SQL: &str = "SELECT id, property, kind, scope, incarnation, stale_ts, stale_epoch, \
     stale_route, stale_holder, stale_source, superseding_ts, superseding_epoch, \
     superseding_source, explanation, \"final\", withdrawn FROM counterexamples WHERE id = $1 \
     LIMIT 1";

const EVENTS_SQL: &str = concat!(
    "SELECT ",
    event_columns!(),
    " FROM events WHERE scope = $1 AND (source = $2 OR source = $3)"
);

const CONTEXT_SQL: &str = concat!(
    "SELECT ",
    event_columns!(),
    " FROM events WHERE scope = $1 AND property = $2 AND ts <= $3 ",
    "ORDER BY ts DESC, source DESC LIMIT $4"
);

fn text(s: &str) -> ScalarValue {
    ScalarValue::Utf8(Some(s.to_string()))
}

fn str_of<'v>(v: &'v Value, k: &str) -> &'v str {
    v[k].as_str().unwrap_or("")
}

/// Counterexample `id` as archived, with its events from the archive; `None` when the
/// archive does not hold it.
pub async fn archived(
    registry: &Registry,
    data_dir: &Path,
    queries: &Queries,
    id: &str,
) -> Result<Option<Value>, ApiError> {
    let snap = snapshot_for_request(registry, data_dir)?;
    from_snapshot(queries, snap, id).await.map_err(api_error)
}

/// [`archived`] over `snap`.
pub async fn from_snapshot(
    queries: &Queries,
    snap: Snapshot,
    id: &str,
) -> Result<Option<Value>, QueryError> {
    let cx = queries
        .run_with(CX_SQL, vec![text(id)], snap.clone())
        .await?;
    let Some(row) = rows(&cx).into_iter().next() else {
        return Ok(None);
    };
    let (scope, stale_src, sup_src) = (
        str_of(&row, "scope"),
        str_of(&row, "stale_source"),
        str_of(&row, "superseding_source"),
    );
    let params = vec![text(scope), text(stale_src), text(sup_src)];
    let events = rows(&queries.run_with(EVENTS_SQL, params, snap.clone()).await?);
    let find = |src: &str| events.iter().find(|e| str_of(e, "source") == src).cloned();
    let stale_ts = row["stale_ts"].as_str().and_then(|t| {
        fencewatch_assess::EventTime::parse_rfc3339(t)
            .ok()
            .map(|t| t.0)
    });
    let mut context = match stale_ts {
        Some(ts) => {
            let params = vec![
                text(scope),
                text(str_of(&row, "property")),
                ScalarValue::TimestampNanosecond(Some(ts), Some("UTC".into())),
                ScalarValue::Int64(Some(CONTEXT_EVENTS as i64)),
            ];
            rows(&queries.run_with(CONTEXT_SQL, params, snap).await?)
        }
        None => Vec::new(),
    };
    context.reverse();
    let strip = |mut v: Value| {
        if let Some(o) = v.as_object_mut() {
            o.remove("ts_ns");
        }
        v
    };
    // Shown as archived when the event itself is not (it always is, but for retention).
    let stale = find(stale_src).map(strip).unwrap_or_else(|| {
        json!({"ts": row["stale_ts"], "epoch": row["stale_epoch"], "route": row["stale_route"],
               "holder": row["stale_holder"], "source": stale_src})
    });
    let superseding = find(sup_src).map(strip).unwrap_or_else(|| {
        json!({"ts": row["superseding_ts"], "epoch": row["superseding_epoch"], "source": sup_src})
    });
    let mut out = json!({
        "id": row["id"],
        "kind": row["kind"],
        "property": row["property"],
        "scope": scope,
        "incarnation": row["incarnation"],
        "stale": stale,
        "superseding": superseding,
        "context": context.into_iter().map(strip).collect::<Vec<_>>(),
        "explanation": row["explanation"],
        "final": row["final"],
        "archived": true,
    });
    if let Some(w) = row.get("withdrawn") {
        out["withdrawn"] = w.clone();
    }
    Ok(Some(out))
}
