//! # `fencewatch serve` — the service's HTTP surface and composition root
//!
//! [`run`] builds everything once (configuration, registry, the sources of
//! `fencewatch-ingest`, the router) and serves until SIGTERM or Ctrl-C. Evidence enters
//! through the sources (`fencewatch_ingest::source`), is judged by the partitions' assessors
//! and reported by `fencewatch_ingest::report`; this module is the HTTP side of it:
//! [`config`] (layered, validated once), [`routes`] (the `/v1` API, the OpenAPI document and
//! the page), [`otlp`] (OTLP/HTTP), [`submit`] (a batch to the WAL source from a handler),
//! [`error`] (problem+json), [`auth`] (optional bearer token), [`body`] (bounded, decompressed
//! ingest bodies), [`metrics`] (the registry and the HTTP families), [`listener`] (the accept
//! loop and its limits), and [`base_router`] with the probes.

pub mod auth;
pub mod body;
pub mod config;
pub mod error;
pub mod history;
pub mod listener;
pub mod metrics;
pub mod otlp;
pub mod routes;
pub mod run;
pub mod sql;
pub mod submit;
pub mod telemetry;
pub mod witness;

use crate::serve::auth::{AuthToken, require_bearer};
use crate::serve::config::{LogFormat, ServeConfig};
use crate::serve::error::{ApiError, ProblemContext, not_found, panic_response, problem_details};
use crate::serve::metrics::{HttpMetrics, note_matched_path, track_http};
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{StatusCode, header};
use axum::middleware::{from_fn, from_fn_with_state};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use fencewatch_ingest::source::wal::Ready;
use prometheus_client::registry::Registry;
use std::io::IsTerminal;
use std::sync::Arc;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::timeout::TimeoutLayer;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::util::{SubscriberInitExt, TryInitError};

/// What the base router needs, built once in the composition root.
#[derive(Debug, Clone)]
pub struct Base {
    /// Set by the WAL source once the log is replayed.
    pub ready: Ready,
    /// The registry `/metrics` encodes; every component registered before it was shared.
    pub registry: Arc<Registry>,
    /// The HTTP metric handles.
    pub metrics: HttpMetrics,
    /// Token required on `/v1/*`, if any.
    pub auth_token: Option<AuthToken>,
    /// Largest accepted request body.
    pub max_body_bytes: u64,
    /// Requests taking longer answer 503.
    pub request_timeout: fencewatch_assess::Duration,
    /// Updates the gauges derived from the partitions before each scrape.
    pub refresh: Option<Refresh>,
    /// A readiness condition beyond the WAL source's, if any.
    pub upstream: Option<Upstream>,
}

/// A hook run before `/metrics` is encoded.
#[derive(Clone)]
pub struct Refresh(pub Arc<dyn Fn() + Send + Sync>);

impl std::fmt::Debug for Refresh {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Refresh")
    }
}

impl Base {
    /// Takes the limits and the token from the configuration.
    pub fn new(
        config: &ServeConfig,
        ready: Ready,
        registry: Arc<Registry>,
        metrics: HttpMetrics,
    ) -> Base {
        Base {
            ready,
            registry,
            metrics,
            auth_token: config.auth_token.clone(),
            max_body_bytes: config.max_body_bytes,
            request_timeout: config.request_timeout,
            refresh: None,
            upstream: None,
        }
    }
}

#[derive(Clone)]
struct Probe {
    ready: Ready,
    registry: Arc<Registry>,
    refresh: Option<Refresh>,
    upstream: Option<Upstream>,
}

/// A readiness condition beyond the WAL source's (a Kafka broker answering): `Some(why)` when
/// not ready.
#[derive(Clone)]
pub struct Upstream(pub Arc<dyn Fn() -> Option<String> + Send + Sync>);

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Upstream")
    }
}

async fn livez() -> Json<serde_json::Value> {
    Json(serde_json::json!({"status": "ok"}))
}

async fn readyz(State(p): State<Probe>) -> Result<Json<serde_json::Value>, ApiError> {
    if !p.ready.is_ready() {
        return Err(ApiError::ServiceUnavailable {
            detail: "replaying the write-ahead log; not ready yet".into(),
        });
    }
    if let Some(why) = p.upstream.as_ref().and_then(|u| (u.0)()) {
        return Err(ApiError::ServiceUnavailable { detail: why });
    }
    Ok(Json(serde_json::json!({"status": "ready"})))
}

async fn metrics_text(State(p): State<Probe>) -> Response {
    if let Some(r) = &p.refresh {
        let r = r.0.clone();
        // Deriving gauges reads the partitions under their locks: off the async workers.
        let _ = tokio::task::spawn_blocking(move || r()).await;
    }
    let body = metrics::encode(&p.registry);
    ([(header::CONTENT_TYPE, metrics::CONTENT_TYPE)], body).into_response()
}

/// The whole HTTP surface around `api`: the probes (`/livez`, `/readyz`, `/healthz`),
/// `/metrics`, the 404 fallback, and, from the inside out, the route-template recorder,
/// body limits, the timeout (503), bearer auth on `/v1/*`, panic catching, problem+json for
/// every error, and the request-duration histogram.
///
/// `api` is where `/v1/*`, `/openapi.json` and `/` are merged in (`routes.rs`): a router with
/// its state already applied and without a fallback of its own.
pub fn base_router(base: Base, api: Router) -> Router {
    base_router_with(base, api, Router::new())
}

/// [`base_router`], with `untimed` routes that keep a deadline of their own (`/v1/query`,
/// `query_timeout`) outside the request timeout; every other layer applies to them too.
pub fn base_router_with(base: Base, api: Router, untimed: Router) -> Router {
    let limit = usize::try_from(base.max_body_bytes).unwrap_or(usize::MAX);
    let timeout = std::time::Duration::from_nanos(base.request_timeout.0.max(0) as u64);
    let problems = ProblemContext {
        max_body_bytes: base.max_body_bytes,
        request_timeout: base.request_timeout,
    };
    let probe = Probe {
        ready: base.ready,
        registry: base.registry,
        refresh: base.refresh,
        upstream: base.upstream,
    };
    Router::new()
        .route("/livez", get(livez))
        .route("/readyz", get(readyz))
        .route("/healthz", get(readyz))
        .route("/metrics", get(metrics_text))
        .with_state(probe)
        // ── the /v1 API, /openapi.json and the page join here ──
        .merge(api)
        .route_layer(from_fn(note_matched_path))
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(limit))
        .layer(RequestBodyLimitLayer::new(limit))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::SERVICE_UNAVAILABLE,
            timeout,
        ))
        .merge(if untimed.has_routes() {
            untimed
                .route_layer(from_fn(note_matched_path))
                .layer(DefaultBodyLimit::max(limit))
                .layer(RequestBodyLimitLayer::new(limit))
        } else {
            untimed
        })
        .layer(from_fn_with_state(base.auth_token, require_bearer))
        .layer(CatchPanicLayer::custom(panic_response))
        .layer(from_fn_with_state(problems, problem_details))
        .layer(from_fn_with_state(base.metrics, track_http))
}

/// Installs the global `tracing` subscriber writing to stderr: text (coloured on a terminal)
/// or one JSON object per line; with `telemetry`, spans are exported too. `level` is a level
/// or `EnvFilter` directives, validated by the config already.
pub fn init_tracing(
    format: LogFormat,
    level: &str,
    telemetry: Option<&telemetry::Telemetry>,
) -> Result<(), TryInitError> {
    use tracing_subscriber::Layer;
    use tracing_subscriber::layer::SubscriberExt;
    let filter = || EnvFilter::try_new(level).unwrap_or_else(|_| EnvFilter::new("info"));
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    type Boxed = Box<dyn Layer<tracing_subscriber::Registry> + Send + Sync>;
    let mut layers: Vec<Boxed> = vec![match format {
        LogFormat::Text => fmt
            .with_ansi(std::io::stderr().is_terminal())
            .with_filter(filter())
            .boxed(),
        LogFormat::Json => fmt
            .json()
            .flatten_event(true)
            .with_ansi(false)
            .with_filter(filter())
            .boxed(),
    }];
    if let Some(t) = telemetry {
        layers.push(t.layer().with_filter(filter()).boxed());
    }
    tracing_subscriber::registry().with(layers).try_init()
}

/// Completes on SIGTERM or Ctrl-C (SIGINT), for `axum::serve(..).with_graceful_shutdown`.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::warn!(error = %e, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => tracing::info!("Ctrl-C received, shutting down"),
        () = terminate => tracing::info!("SIGTERM received, shutting down"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serve::error::{PROBLEM_JSON, Problem};
    use axum::body::Body;
    use axum::extract::Request;
    use axum::routing::post;
    use tower::ServiceExt;

    fn app(token: Option<&str>) -> (Router, Ready, HttpMetrics) {
        let mut registry = Registry::default();
        let metrics = HttpMetrics::register(&mut registry);
        let ready = Ready::new();
        let base = Base {
            ready: ready.clone(),
            registry: Arc::new(registry),
            metrics: metrics.clone(),
            auth_token: token.map(|t| t.parse().unwrap()),
            max_body_bytes: 1024,
            request_timeout: fencewatch_assess::Duration(50_000_000),
            refresh: None,
            upstream: None,
        };
        let api = Router::new()
            .route("/v1/contract", get(|| async { "contract" }))
            .route(
                "/v1/events",
                post(|body: String| async move { body.len().to_string() }),
            )
            .route(
                "/v1/slow",
                get(|| async {
                    tokio::time::sleep(std::time::Duration::from_secs(5)).await;
                    "late"
                }),
            )
            .route("/v1/panic", get(boom));
        (base_router(base, api), ready, metrics)
    }

    async fn boom() -> &'static str {
        panic!("boom")
    }

    async fn send(app: &Router, req: Request) -> (StatusCode, header::HeaderMap, String) {
        let res = app.clone().oneshot(req).await.unwrap();
        let (parts, body) = res.into_parts();
        let body = axum::body::to_bytes(body, 1 << 20).await.unwrap();
        (
            parts.status,
            parts.headers,
            String::from_utf8(body.to_vec()).unwrap(),
        )
    }

    fn get_req(uri: &str) -> Request {
        Request::get(uri).body(Body::empty()).unwrap()
    }

    fn problem(headers: &header::HeaderMap, body: &str) -> Problem {
        assert_eq!(headers[header::CONTENT_TYPE], PROBLEM_JSON);
        serde_json::from_str(body).unwrap()
    }

    #[tokio::test]
    async fn probes_and_metrics() {
        let (app, ready, _) = app(None);
        let (s, _, body) = send(&app, get_req("/livez")).await;
        assert_eq!((s, body.as_str()), (StatusCode::OK, r#"{"status":"ok"}"#));
        for path in ["/readyz", "/healthz"] {
            let (s, h, body) = send(&app, get_req(path)).await;
            assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE);
            assert!(problem(&h, &body).detail.contains("replaying"));
        }
        ready.set(true);
        for path in ["/readyz", "/healthz"] {
            let (s, _, body) = send(&app, get_req(path)).await;
            assert_eq!(
                (s, body.as_str()),
                (StatusCode::OK, r#"{"status":"ready"}"#)
            );
        }
        let (s, h, body) = send(&app, get_req("/metrics")).await;
        assert_eq!(s, StatusCode::OK);
        assert_eq!(h[header::CONTENT_TYPE], metrics::CONTENT_TYPE);
        assert!(body.ends_with("# EOF\n"), "{body}");
        for route in ["/readyz", "/healthz"] {
            let line = format!(
                r#"fencewatch_http_request_duration_seconds_count{{method="GET",route="{route}",status="503"}} 1"#
            );
            assert!(body.lines().any(|l| l == line), "no {line} in\n{body}");
        }
    }

    #[tokio::test]
    async fn errors_are_problems() {
        let (app, _, _) = app(None);
        let (s, h, body) = send(&app, get_req("/nope")).await;
        assert_eq!(s, StatusCode::NOT_FOUND);
        assert_eq!(problem(&h, &body).instance.as_deref(), Some("/nope"));

        let big = Request::post("/v1/events")
            .body(Body::from(vec![b'x'; 2048]))
            .unwrap();
        let (s, h, body) = send(&app, big).await;
        assert_eq!(s, StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(
            problem(&h, &body).detail,
            "the request body exceeds the limit of 1024 bytes"
        );

        let (s, h, body) = send(&app, get_req("/v1/slow")).await;
        assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE);
        let p = problem(&h, &body);
        assert_eq!(p.type_, "https://fencewatch.dev/problems/timeout");
        assert_eq!(p.detail, "the request took longer than 50ms");

        let (s, h, body) = send(&app, get_req("/v1/panic")).await;
        assert_eq!(s, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(
            problem(&h, &body).type_,
            "https://fencewatch.dev/problems/internal"
        );
    }

    #[tokio::test]
    async fn auth_guards_v1_only() {
        let (app, _, _) = app(Some("t0ken"));
        let (s, h, body) = send(&app, get_req("/v1/contract")).await;
        assert_eq!(s, StatusCode::UNAUTHORIZED);
        assert!(h.contains_key(header::WWW_AUTHENTICATE));
        assert_eq!(problem(&h, &body).status, 401);
        let req = Request::get("/v1/contract")
            .header(header::AUTHORIZATION, "Bearer t0ken")
            .body(Body::empty())
            .unwrap();
        assert_eq!(send(&app, req).await.0, StatusCode::OK);
        for open in ["/livez", "/metrics"] {
            assert_eq!(send(&app, get_req(open)).await.0, StatusCode::OK, "{open}");
        }
    }
}
