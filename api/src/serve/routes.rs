//! The `/v1` API of SPEC §6 and its OpenAPI document (utoipa): queries answered by the
//! partition registry, `POST /v1/events` submitted to the WAL source.
//!
//! Times in queries are RFC 3339 or integer nanoseconds since the Unix epoch; durations use the
//! contract's syntax (`15m`, `30s`). Every error is problem+json (see [`super::error`]).

use crate::serve::body;
use crate::serve::error::ApiError;
use crate::serve::submit::submit;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use fencewatch_assess::report::ContractSummary;
use fencewatch_assess::{Duration, EventTime, Verdict};
use fencewatch_ingest::batch::{self, Format};
use fencewatch_ingest::clock::SharedClock;
use fencewatch_ingest::registry::Registry;
use fencewatch_ingest::source::wal::{SubmitError, WalSource};
use serde::Deserialize;
use serde_json::{Value, json};
use std::sync::Arc;
use utoipa::{IntoParams, OpenApi};

/// Counterexamples per page by default, and at most.
const DEFAULT_LIMIT: usize = 100;
const MAX_LIMIT: usize = 1000;
/// Emitters a coverage answer lists at most (those with gaps first).
const MAX_EMITTERS_LISTED: usize = 1000;
/// Timeline entries at most (runs of equal windows beyond).
const MAX_TIMELINE: u64 = 10_000;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "fencewatch",
        description = "Whether the fencing tokens protecting your data actually work: verdicts (refuted, unknown, holds) over time, counterexamples, coverage, and event ingest."
    ),
    paths(
        assurance,
        timeline,
        counterexamples,
        counterexample,
        coverage,
        premises,
        scope,
        contract,
        ingest,
        crate::serve::otlp::http::traces,
        crate::serve::otlp::http::logs,
        crate::serve::sql::query
    )
)]
struct ApiDoc;

/// The OpenAPI document.
pub fn openapi() -> utoipa::openapi::OpenApi {
    ApiDoc::openapi()
}

/// What the handlers share.
#[derive(Debug, Clone)]
pub struct App {
    /// Every partition, for queries.
    pub registry: Arc<Registry>,
    /// Where `POST /v1/events` goes.
    pub wal: Arc<WalSource>,
    /// "Now" for queries that do not say when.
    pub clock: SharedClock,
    /// The data directory (a scope's history is read from its archive).
    pub data_dir: std::path::PathBuf,
    /// The query runtime and limits (a scope's history is one query).
    pub queries: Arc<crate::query::Queries>,
}

impl App {
    fn now(&self) -> i64 {
        self.clock.now().0
    }
}

/// The `/v1` routes and `/openapi.json`.
pub fn router(app: App) -> Router {
    Router::new()
        .route("/v1/assurance", get(assurance))
        .route("/v1/assurance/timeline", get(timeline))
        .route("/v1/counterexamples", get(counterexamples))
        .route("/v1/counterexamples/{id}", get(counterexample))
        .route("/v1/coverage", get(coverage))
        .route("/v1/premises", get(premises))
        .route("/v1/scopes/{scope}", get(scope))
        .route("/v1/contract", get(contract))
        .route("/v1/events", post(ingest))
        .route("/openapi.json", get(|| async { Json(openapi()) }))
        .route("/", get(page))
        .with_state(app)
}

/// The page: each property's verdict, timeline and counterexamples, readable without Grafana.
/// Static HTML and script (no external resources) that reads the `/v1` API every 5 s; when a
/// bearer token is configured it asks for it and keeps it in the browser's local storage.
const PAGE: &str = include_str!("page.html");

async fn page() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        PAGE,
    )
        .into_response()
}

fn parse_time(name: &str, s: &str) -> Result<i64, ApiError> {
    if let Ok(n) = s.parse::<i64>() {
        if n < 0 {
            return Err(ApiError::BadRequest {
                detail: format!(
                    "query `{name}`: `{s}` is before 1970 (times are RFC 3339 or nanoseconds since the Unix epoch, 0 to 2^63-1)"
                ),
            });
        }
        return Ok(n);
    }
    EventTime::parse_rfc3339(s)
        .map(|t| t.0)
        .map_err(|e| ApiError::BadRequest {
            detail: format!(
                "query `{name}`: `{s}` is neither RFC 3339 nor integer nanoseconds ({e})"
            ),
        })
}

fn parse_duration(name: &str, s: &str) -> Result<i64, ApiError> {
    match Duration::parse(s) {
        Ok(d) if d.0 > 0 => Ok(d.0),
        Ok(_) => Err(ApiError::BadRequest {
            detail: format!("query `{name}`: must be positive"),
        }),
        Err(e) => Err(ApiError::BadRequest {
            detail: format!("query `{name}`: {e}"),
        }),
    }
}

/// Runs a query over every partition. It may wait for a read lock while a source applies a
/// batch: the runtime moves this worker's other tasks elsewhere meanwhile, so that slow
/// queries never stall `/livez`, ingest or each other.
fn query<R>(app: &App, f: impl FnOnce(&fencewatch_assess::live::View<'_>) -> R) -> R {
    tokio::task::block_in_place(|| app.registry.query(f))
}

fn ready(app: &App) -> Result<(), ApiError> {
    if app.wal.is_ready() {
        Ok(())
    } else {
        Err(ApiError::ServiceUnavailable {
            detail: "replaying the write-ahead log; not ready yet".into(),
        })
    }
}

/// The property index named by `name`, or the only one.
fn property(app: &App, name: Option<&str>) -> Result<Option<usize>, ApiError> {
    match name {
        Some(n) => app
            .registry
            .contract()
            .property_index(n)
            .map(Some)
            .ok_or_else(|| ApiError::UnknownProperty {
                name: n.to_string(),
            }),
        None => Ok(None),
    }
}

fn one_property(app: &App, name: Option<&str>) -> Result<usize, ApiError> {
    match property(app, name)? {
        Some(p) => Ok(p),
        None if app.registry.contract().properties.len() == 1 => Ok(0),
        None => Err(ApiError::BadRequest {
            detail: format!(
                "query `property` is required: the contract declares {}",
                app.registry
                    .contract()
                    .properties
                    .iter()
                    .map(|p| format!("`{}`", p.name))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }),
    }
}

/// Query of `/v1/assurance`.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
struct AssuranceQuery {
    /// The property (default: every property).
    property: Option<String>,
    /// The time assessed, RFC 3339 or ns (default: now).
    at: Option<String>,
    /// The trailing window, e.g. `15m` (default: the property's `assurance_window`).
    window: Option<String>,
}

/// The verdict at a time over a trailing window, with counterexamples, unknown reasons and the
/// evidence watermark and lag. Without `property`, every property and the worst verdict.
#[utoipa::path(get, path = "/v1/assurance", params(AssuranceQuery),
    responses((status = 200, description = "The assessment", body = Value),
              (status = 400, description = "Bad query", content_type = "application/problem+json", body = Value),
              (status = 404, description = "Unknown property", content_type = "application/problem+json", body = Value)))]
async fn assurance(
    State(app): State<App>,
    Query(q): Query<AssuranceQuery>,
) -> Result<Json<Value>, ApiError> {
    ready(&app)?;
    let now = app.now();
    let at =
        q.at.as_deref()
            .map(|s| parse_time("at", s))
            .transpose()?
            .unwrap_or(now);
    let window = q
        .window
        .as_deref()
        .map(|s| parse_duration("window", s))
        .transpose()?;
    let chosen = property(&app, q.property.as_deref())?;
    let props: Vec<usize> = match chosen {
        Some(p) => vec![p],
        None => (0..app.registry.contract().properties.len()).collect(),
    };
    let answers: Vec<_> = query(&app, |view| {
        props
            .iter()
            .map(|&p| {
                let w = window.unwrap_or(app.registry.contract().properties[p].assurance_window.0);
                // A window reaching before 1970 is the whole history.
                let w = w.min(at.max(1));
                view.assurance(p, at, w, now)
            })
            .collect()
    });
    if chosen.is_some() {
        return Ok(Json(
            serde_json::to_value(&answers[0]).expect("serializable"),
        ));
    }
    let verdict = answers
        .iter()
        .map(|a| a.verdict)
        .max()
        .unwrap_or(Verdict::Unknown);
    Ok(Json(
        json!({"verdict": verdict, "at": EventTime(at).to_string(), "properties": answers}),
    ))
}

/// Query of `/v1/assurance/timeline`.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
struct TimelineQuery {
    /// The property (required when the contract has several).
    property: Option<String>,
    /// Start, RFC 3339 or ns (default: 24 hours before `to`).
    from: Option<String>,
    /// End, exclusive (default: now).
    to: Option<String>,
}

/// The window series of a property: each window's verdict, finality and revision; long
/// stretches of equal windows as runs.
#[utoipa::path(get, path = "/v1/assurance/timeline", params(TimelineQuery),
    responses((status = 200, description = "The windows", body = Value),
              (status = 400, description = "Bad query", content_type = "application/problem+json", body = Value)))]
async fn timeline(
    State(app): State<App>,
    Query(q): Query<TimelineQuery>,
) -> Result<Json<Value>, ApiError> {
    ready(&app)?;
    let p = one_property(&app, q.property.as_deref())?;
    let to =
        q.to.as_deref()
            .map(|s| parse_time("to", s))
            .transpose()?
            .unwrap_or_else(|| app.now());
    let from = q
        .from
        .as_deref()
        .map(|s| parse_time("from", s))
        .transpose()?
        .unwrap_or(to.saturating_sub(86_400_000_000_000));
    if from >= to {
        return Err(ApiError::BadRequest {
            detail: "query `from` must be before `to`".into(),
        });
    }
    let (windows, wm) = query(&app, |view| {
        (view.timeline(p, from, to, MAX_TIMELINE), view.watermark(p))
    });
    Ok(Json(json!({
        "property": app.registry.contract().properties[p].name,
        "from": EventTime(from).to_string(),
        "to": EventTime(to).to_string(),
        "window": app.registry.contract().properties[p].window.to_string(),
        "watermark": (wm != EventTime::MIN).then(|| wm.to_string()),
        "windows": windows,
    })))
}

/// Query of `/v1/counterexamples`.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
struct CxQuery {
    /// Only this property.
    property: Option<String>,
    /// Only this scope.
    scope: Option<String>,
    /// Stale event at or after, RFC 3339 or ns.
    from: Option<String>,
    /// Stale event before.
    to: Option<String>,
    /// Page size (default 100, at most 1000).
    limit: Option<usize>,
    /// `next_cursor` of the previous page.
    cursor: Option<String>,
}

/// Counterexamples by stale event time, paged with a cursor.
#[utoipa::path(get, path = "/v1/counterexamples", params(CxQuery),
    responses((status = 200, description = "One page: `counterexamples` and `next_cursor`", body = Value),
              (status = 400, description = "Bad query", content_type = "application/problem+json", body = Value)))]
async fn counterexamples(
    State(app): State<App>,
    Query(q): Query<CxQuery>,
) -> Result<Json<Value>, ApiError> {
    ready(&app)?;
    let p = property(&app, q.property.as_deref())?;
    let from = q
        .from
        .as_deref()
        .map(|s| parse_time("from", s))
        .transpose()?;
    let to = q.to.as_deref().map(|s| parse_time("to", s)).transpose()?;
    let limit = q.limit.unwrap_or(DEFAULT_LIMIT);
    if limit == 0 || limit > MAX_LIMIT {
        return Err(ApiError::BadRequest {
            detail: format!("query `limit` must be 1..={MAX_LIMIT}"),
        });
    }
    let cursor = match q.cursor.as_deref() {
        None => None,
        Some(c) => {
            let bad = || ApiError::BadRequest {
                detail: format!("query `cursor`: `{c}` is not a cursor this service returned"),
            };
            let (t, id) = c.split_once('.').ok_or_else(bad)?;
            Some((t.parse::<i64>().map_err(|_| bad())?, id.to_string()))
        }
    };
    let nprops = app.registry.contract().properties.len();
    let (page, not_kept) = query(&app, |view| {
        let page = view.counterexamples(
            p,
            q.scope.as_deref(),
            from,
            to,
            cursor.as_ref().map(|(t, id)| (*t, id.as_str())),
            limit,
        );
        let props = p.map_or(0..nprops, |p| p..p + 1);
        let not_kept: u64 = props.map(|p| view.counterexamples_dropped(p)).sum();
        (page, not_kept)
    });
    let mut v = serde_json::to_value(page).expect("serializable");
    // Beyond `max_counterexamples` the oldest final ones keep refuting their windows but their
    // detail is no longer kept: say how many the pages cannot list.
    v["not_kept"] = json!(not_kept);
    Ok(Json(v))
}

/// One counterexample: stale event, witness, context and explanation. One whose detail is no
/// longer resident (beyond `max_counterexamples`) comes from the evidence archive, its events
/// and context from the archived events (`"archived": true`).
#[utoipa::path(get, path = "/v1/counterexamples/{id}",
    params(("id" = String, Path, description = "A counterexample id, `cx-…`")),
    responses((status = 200, description = "The counterexample", body = Value),
              (status = 404, description = "No such counterexample", content_type = "application/problem+json", body = Value)))]
async fn counterexample(
    State(app): State<App>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    ready(&app)?;
    if let Some(cx) = query(&app, |view| view.counterexample(&id)) {
        return Ok(Json(serde_json::to_value(cx).expect("serializable")));
    }
    // Its detail is no longer resident (beyond `max_counterexamples`): the archive's.
    let archived =
        crate::serve::witness::archived(&app.registry, &app.data_dir, &app.queries, &id).await?;
    archived.map(Json).ok_or_else(|| ApiError::NotFound {
        what: format!(
            "counterexample `{}`",
            id.chars().take(128).collect::<String>()
        ),
    })
}

/// Query naming one property.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
struct PropertyQuery {
    /// The property (required when the contract has several).
    property: Option<String>,
}

/// Routes declared, observed, last seen and silent; undeclared routes; emitters and their gaps.
#[utoipa::path(get, path = "/v1/coverage", params(PropertyQuery),
    responses((status = 200, description = "Coverage", body = Value)))]
async fn coverage(
    State(app): State<App>,
    Query(q): Query<PropertyQuery>,
) -> Result<Json<Value>, ApiError> {
    ready(&app)?;
    let p = one_property(&app, q.property.as_deref())?;
    let mut coverage = query(&app, |view| view.coverage(p));
    // Emitters are as many as the producers ever were: the answer lists those with gaps first,
    // then the rest by name, at most MAX_EMITTERS_LISTED, and counts them all.
    let total = coverage.emitters.len();
    let with_gaps = coverage.emitters.iter().filter(|e| e.gaps > 0).count();
    if total > MAX_EMITTERS_LISTED {
        (coverage.emitters)
            .sort_by(|a, b| (a.gaps == 0, &a.emitter).cmp(&(b.gaps == 0, &b.emitter)));
        coverage.emitters.truncate(MAX_EMITTERS_LISTED);
    }
    let mut v = serde_json::to_value(coverage).expect("serializable");
    v["emitters_total"] = json!(total);
    v["emitters_with_gaps"] = json!(with_gaps);
    v["emitters_not_listed"] = json!(total.saturating_sub(MAX_EMITTERS_LISTED));
    Ok(Json(v))
}

/// Query of `/v1/premises`.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
struct PremisesQuery {
    /// Only this property (default: every property).
    property: Option<String>,
    /// The time each premise's state is given at, RFC 3339 or ns (default: now).
    at: Option<String>,
}

/// Each required premise (SPEC §10): its state at `at` (supported, unattested or failed),
/// until when it is supported, its latest attestation with who attested and the evidence,
/// and its history of support intervals, merged over every partition.
#[utoipa::path(get, path = "/v1/premises", params(PremisesQuery),
    responses((status = 200, description = "`at` and `premises`, each with `property`, `name`, `route`, `state`, `supported_until`, `last`, `supported`, `failed`", body = Value),
              (status = 400, description = "Bad query", content_type = "application/problem+json", body = Value),
              (status = 404, description = "Unknown property", content_type = "application/problem+json", body = Value)))]
async fn premises(
    State(app): State<App>,
    Query(q): Query<PremisesQuery>,
) -> Result<Json<Value>, ApiError> {
    ready(&app)?;
    let at =
        q.at.as_deref()
            .map(|s| parse_time("at", s))
            .transpose()?
            .unwrap_or_else(|| app.now());
    let props: Vec<usize> = match property(&app, q.property.as_deref())? {
        Some(p) => vec![p],
        None => (0..app.registry.contract().properties.len()).collect(),
    };
    let list: Vec<_> = query(&app, |view| {
        props.iter().flat_map(|&p| view.premises(p, at)).collect()
    });
    Ok(Json(
        json!({"at": EventTime(at).to_string(), "premises": list}),
    ))
}

/// Query of `/v1/scopes/{scope}`.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
struct ScopeQuery {
    /// The property (required when the contract has several).
    property: Option<String>,
    /// History events per page (default 100, at most 1000).
    limit: Option<usize>,
    /// `history.next_cursor` of the previous page.
    cursor: Option<String>,
}

/// One scope: its events inside the horizon (`events`), its folded high-water mark, its
/// counterexamples, and `history`: one page of its whole history out of the evidence archive
/// (every applied event of the scope and property, flushed or not, by `ts` then `source`;
/// `next_cursor` pages on, null on the last page).
#[utoipa::path(get, path = "/v1/scopes/{scope}",
    params(("scope" = String, Path, description = "The scope id"), ScopeQuery),
    responses((status = 200, description = "The scope: `events`, `high_water`, `counterexamples`, and `history` (`events`, `next_cursor`, `archive`)", body = Value),
              (status = 400, description = "Bad query (`limit`, `cursor`)", content_type = "application/problem+json", body = Value),
              (status = 404, description = "Never seen, nor archived", content_type = "application/problem+json", body = Value)))]
async fn scope(
    State(app): State<App>,
    Path(scope): Path<String>,
    Query(q): Query<ScopeQuery>,
) -> Result<Json<Value>, ApiError> {
    use crate::serve::history::{self, Cursor};
    ready(&app)?;
    let p = one_property(&app, q.property.as_deref())?;
    let limit = q.limit.unwrap_or(history::DEFAULT_LIMIT);
    if limit == 0 || limit > history::MAX_LIMIT {
        return Err(ApiError::BadRequest {
            detail: format!("query `limit` must be 1..={}", history::MAX_LIMIT),
        });
    }
    let cursor = q.cursor.as_deref().map(Cursor::parse).transpose()?;
    let paging = cursor.is_some();
    let name = app.registry.contract().properties[p].name.clone();
    let view = tokio::task::block_in_place(|| app.registry.scope(p, &scope));
    let page = history::page(
        &app.registry,
        &app.data_dir,
        &app.queries,
        (&name, &scope),
        cursor,
        limit,
    )
    .await?;
    let mut v = match view {
        Some(view) => serde_json::to_value(view).expect("serializable"),
        None if paging || page["events"].as_array().is_some_and(|e| !e.is_empty()) => json!({
            "property": name,
            "scope": scope,
            "events": [],
            "high_water": null,
            "counterexamples": [],
        }),
        None => {
            return Err(ApiError::NotFound {
                what: format!(
                    "scope `{}` of property `{name}`",
                    scope.chars().take(128).collect::<String>(),
                ),
            });
        }
    };
    v["history"] = page;
    Ok(Json(v))
}

/// The contract in force: properties, routes, durations, and its compiled status with
/// obligations.
#[utoipa::path(get, path = "/v1/contract",
    responses((status = 200, description = "The contract", body = Value)))]
async fn contract(State(app): State<App>) -> Json<Value> {
    let c = app.registry.contract();
    let compiled = c.compile();
    let props: Vec<Value> = c
        .properties
        .iter()
        .map(|p| {
            json!({
                "name": p.name,
                "subject": p.subject,
                "strategy": p.strategy.as_str(),
                "window": p.window.to_string(),
                "clock_skew": p.clock_skew.to_string(),
                "allowed_lateness": p.allowed_lateness.to_string(),
                "route_freshness": p.route_freshness.to_string(),
                "assurance_window": p.assurance_window.to_string(),
                "grants": format!("{:?}", p.grants).to_lowercase(),
                "routes": p.routes.iter().map(|r| json!({"name": r.name, "fenced": r.fenced})).collect::<Vec<_>>(),
                "premises": p.premises.iter().map(|x| json!({"name": x.name, "route": x.route, "max_age": x.max_age.to_string()})).collect::<Vec<_>>(),
            })
        })
        .collect();
    Json(json!({"properties": props, "status": ContractSummary::from(&compiled)}))
}

/// The body format a `Content-Type` names: NDJSON, or `application/json` (a JSON array when
/// its first non-blank byte is `[`, decided once the body is read; else NDJSON).
fn body_format(headers: &HeaderMap) -> Result<Option<Format>, ApiError> {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("none");
    let mime = ct
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    match mime.as_str() {
        "application/x-ndjson"
        | "application/ndjson"
        | "application/jsonl"
        | "application/x-jsonlines"
        | "application/jsonlines" => Ok(Some(Format::Ndjson)),
        "application/json" => Ok(None),
        _ => Err(ApiError::UnsupportedMediaType {
            got: ct.chars().take(128).collect(),
            expected: "send `application/x-ndjson` with one event per line, or `application/json` with an array of events",
        }),
    }
}

/// Ingests events: NDJSON (one object per line) or a JSON array, optionally compressed
/// (`Content-Encoding: gzip` or `deflate`; the body limit applies after decompression). A `200`
/// means every event is durable in the write-ahead log and assessed. Malformed lines answer
/// `422` problem+json: `malformed` counts them, `errors` lists the first 100 (one entry per line
/// or element) and `errors_not_listed` the rest; the valid lines of the same body are kept (do
/// not resend them), and the malformed ones count as `malformed_event` evidence. A JSON array
/// that is not well-formed JSON is refused whole (`400`, nothing stored). `503` with
/// `Retry-After` means nothing was stored: retry.
#[utoipa::path(post, path = "/v1/events",
    request_body(content = String, description = "NDJSON or a JSON array of events (schema v1)",
        content_type = "application/x-ndjson"),
    responses((status = 200, description = "Durable and assessed: `accepted`, `duplicates`, `first_offset`, `next_offset`", body = Value),
              (status = 400, description = "Nothing stored: an empty body, a JSON array that is not well-formed JSON, a body that does not decompress", content_type = "application/problem+json", body = Value),
              (status = 413, description = "Body over the limit (after decompression); nothing stored", content_type = "application/problem+json", body = Value),
              (status = 415, description = "Not NDJSON or JSON, or a Content-Encoding other than gzip, deflate or zstd", content_type = "application/problem+json", body = Value),
              (status = 422, description = "Some lines malformed (`malformed`, the first 100 in `errors`, `errors_not_listed`); the others durable and assessed", content_type = "application/problem+json", body = Value),
              (status = 503, description = "Nothing stored, retry (`Retry-After`): ingest saturated (`max_pending_bytes`), too many connections, not ready or shutting down", content_type = "application/problem+json", body = Value)))]
async fn ingest(
    State(app): State<App>,
    request: axum::extract::Request,
) -> Result<Response, ApiError> {
    ready(&app)?;
    let (parts, body) = request.into_parts();
    let declared = body_format(&parts.headers)?;
    let source = "http";
    let header = batch::header_len(source);
    let encoding = body::encoding(&parts.headers)?;
    let hint = match encoding {
        body::Encoding::Identity => body::length_hint(&parts.headers),
        _ => 0,
    };
    let mut payload = batch::encode_header(Format::Ndjson, app.now(), source, None, hint);
    let mut held = app.wal.budget().reserve();
    let max_pending = app.wal.budget().max();
    if encoding == body::Encoding::Identity {
        if let Err(refused) = body::read(body, &mut payload, &mut held, max_pending).await {
            return Ok(refused.into_response());
        }
    } else {
        let mut raw = Vec::new();
        if let Err(refused) = body::read(body, &mut raw, &mut held, max_pending).await {
            return Ok(refused.into_response());
        }
        // Decoded whole before anything is stored: a body that does not decode to its end
        // keeps nothing.
        let limit = app.wal.max_body_bytes();
        let decoded = tokio::task::spawn_blocking(move || {
            let r = body::decode(encoding, &raw, &mut payload, limit, &mut held, max_pending);
            r.map(|()| (payload, held))
        })
        .await
        .map_err(|e| ApiError::Internal {
            detail: e.to_string(),
        })?;
        match decoded {
            Ok((p, h)) => (payload, held) = (p, h),
            Err(refused) => return Ok(refused.into_response()),
        }
    }
    let body = &payload[header..];
    if body.iter().all(|b| b.is_ascii_whitespace()) {
        return Err(ApiError::BadRequest {
            detail: "the body holds no events".into(),
        });
    }
    let format = declared.unwrap_or_else(|| match body.iter().find(|b| !b.is_ascii_whitespace()) {
        Some(b'[') => Format::Array,
        _ => Format::Ndjson,
    });
    batch::set_format(&mut payload, format);
    // Lines are counted in place (memchr: microseconds for a 1000-event body); an array's
    // JSON is checked while its elements are counted, off the async workers.
    let (payload, items) = match format {
        Format::Array => tokio::task::spawn_blocking(move || {
            let items =
                fencewatch_ingest::decode::json::for_each_element(&payload[header..], |_, _| {})
                    .map(|n| n as u64);
            (payload, items)
        })
        .await
        .map_err(|e| ApiError::Internal {
            detail: e.to_string(),
        })?,
        _ => {
            let items = batch::items(format, &payload[header..]);
            (payload, Ok(items))
        }
    };
    let items = items.map_err(|e| ApiError::BadRequest {
        detail: format!("{e}; nothing of this body was stored"),
    })?;
    if items == 0 {
        return Err(ApiError::BadRequest {
            detail: "the body holds no events (an empty array)".into(),
        });
    }
    let done = submit(&app.wal, items, payload, held)
        .await
        .map_err(|e| match e {
            SubmitError::TooManyItems { .. } => ApiError::TooManyItems {
                detail: format!("{e}; nothing of this body was stored"),
            },
            SubmitError::Saturated(_) => ApiError::Saturated {
                detail: e.to_string(),
            },
            e => ApiError::ServiceUnavailable {
                detail: e.to_string(),
            },
        })?;
    let a = &done.applied;
    if a.malformed == 0 {
        return Ok(Json(json!({
            "accepted": a.accepted,
            "duplicates": a.duplicates,
            "first_offset": done.first_offset,
            "next_offset": done.next_offset,
        }))
        .into_response());
    }
    let unit = match format {
        Format::Array => "element",
        _ => "line",
    };
    let listed = a.errors.len() as u64;
    let omitted = a.malformed - listed;
    Err(ApiError::Unprocessable {
        detail: format!(
            "{} {unit}(s) malformed and counted as malformed_event evidence{}; the other {} event(s) are durable and assessed (offsets {}..{}), do not resend them",
            a.malformed,
            if omitted > 0 {
                format!(" (the first {listed} listed in `errors`, {omitted} more not listed)")
            } else {
                String::new()
            },
            a.accepted,
            done.first_offset,
            done.next_offset
        ),
        errors: a
            .errors
            .iter()
            .map(|e| {
                json!({
                    unit: e.item,
                    "offset": e.offset,
                    "field": e.error.field,
                    "reason": e.error.reason,
                })
            })
            .collect(),
        extra: vec![
            ("malformed".into(), json!(a.malformed)),
            ("errors_not_listed".into(), json!(omitted)),
            ("accepted".into(), json!(a.accepted)),
        ],
    })
}
