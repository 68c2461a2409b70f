//! The service's metric registry and its HTTP families (SPEC §6), registered in an injected
//! registry (STYLE 6): the composition root builds one `Registry`, registers the evidence's
//! families ([`fencewatch_ingest::report::Metrics`]) and these, and `/metrics` encodes it
//! ([`encode`], OpenMetrics text, [`CONTENT_TYPE`]). No label is ever a scope.

use axum::extract::{MatchedPath, Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::Response;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

pub use fencewatch_ingest::report::Metrics;

/// The media type of the exposition.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Gauge: open HTTP connections.
pub const HTTP_CONNECTIONS: &str = "fencewatch_http_connections";
/// Counter {reason}: HTTP connections closed by the server: `limit` (over `max_connections`,
/// answered 503), `idle` (nothing in flight for `idle_timeout`), `header_timeout` (a request's
/// headers did not arrive within `header_read_timeout`).
pub const HTTP_CONNECTIONS_CLOSED: &str = "fencewatch_http_connections_closed";
/// Histogram {method, route, status}: time to the response head; `route` is the matched
/// path template (`/v1/counterexamples/{id}`), or `unmatched`.
pub const HTTP_REQUEST_DURATION_SECONDS: &str = "fencewatch_http_request_duration_seconds";

/// Labels {reason}.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    /// Why.
    pub reason: String,
}

/// Labels {method, route, status}.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HttpLabels {
    /// The request method (uncommon methods are `other`).
    pub method: String,
    /// The matched path template, or `unmatched`.
    pub route: String,
    /// The response status code.
    pub status: u16,
}

/// The HTTP families. Cloning shares the values.
#[derive(Debug, Clone)]
pub struct HttpMetrics {
    /// See [`HTTP_REQUEST_DURATION_SECONDS`].
    pub http_request_duration_seconds: Family<HttpLabels, Histogram>,
    /// See [`HTTP_CONNECTIONS`].
    pub http_connections: Gauge,
    /// See [`HTTP_CONNECTIONS_CLOSED`].
    pub http_connections_closed: Family<ReasonLabels, Counter>,
}

pub(crate) fn http_histogram() -> Histogram {
    Histogram::new([
        0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    ])
}

impl HttpMetrics {
    /// Registers the HTTP families in `registry` and returns handles to them.
    pub fn register(registry: &mut Registry) -> HttpMetrics {
        let m = HttpMetrics {
            http_request_duration_seconds: Family::new_with_constructor(http_histogram),
            http_connections: Gauge::default(),
            http_connections_closed: Family::default(),
        };
        registry.register(
            HTTP_REQUEST_DURATION_SECONDS,
            "HTTP request duration to the response head",
            m.http_request_duration_seconds.clone(),
        );
        registry.register(
            HTTP_CONNECTIONS,
            "Open HTTP connections",
            m.http_connections.clone(),
        );
        registry.register(
            HTTP_CONNECTIONS_CLOSED,
            "HTTP connections closed by the server (limit, idle, header_timeout)",
            m.http_connections_closed.clone(),
        );
        m
    }

    /// Counts a connection the server closed (`limit`, `idle` or `header_timeout`).
    pub fn connection_closed(&self, reason: &str) {
        let labels = ReasonLabels {
            reason: reason.to_string(),
        };
        self.http_connections_closed.get_or_create(&labels).inc();
    }
}

/// The OpenMetrics text exposition of `registry`, ending with `# EOF`.
pub fn encode(registry: &Registry) -> String {
    let mut out = String::new();
    // Writing into a String cannot fail; an encoder error would be a bug in a label value.
    if let Err(e) = prometheus_client::encoding::text::encode(&mut out, registry) {
        tracing::error!(error = %e, "encoding metrics failed");
    }
    out
}

/// Filled by [`note_matched_path`] (inside routing) and read by [`track_http`] (outside every
/// other layer), so that responses made by outer layers (timeout, body limit) still carry
/// the route template.
#[derive(Debug, Clone, Default)]
struct RouteSlot(Arc<OnceLock<MatchedPath>>);

/// Middleware for `Router::route_layer`: records the matched path template for
/// [`track_http`].
pub async fn note_matched_path(req: Request, next: Next) -> Response {
    let ext = req.extensions();
    if let (Some(slot), Some(path)) = (ext.get::<RouteSlot>(), ext.get::<MatchedPath>()) {
        let _ = slot.0.set(path.clone());
    }
    next.run(req).await
}

/// Middleware (`from_fn_with_state`, outermost layer): observes
/// [`HTTP_REQUEST_DURATION_SECONDS`] for every request.
pub async fn track_http(
    State(metrics): State<HttpMetrics>,
    mut req: Request,
    next: Next,
) -> Response {
    let start = Instant::now();
    let method = method_label(req.method());
    let slot = RouteSlot::default();
    req.extensions_mut().insert(slot.clone());
    let res = next.run(req).await;
    let labels = HttpLabels {
        method: method.into(),
        route: slot.0.get().map_or("unmatched", |p| p.as_str()).into(),
        status: res.status().as_u16(),
    };
    let elapsed = start.elapsed().as_secs_f64();
    metrics
        .http_request_duration_seconds
        .get_or_create(&labels)
        .observe(elapsed);
    res
}

fn method_label(m: &Method) -> &'static str {
    match *m {
        Method::GET => "GET",
        Method::HEAD => "HEAD",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::PATCH => "PATCH",
        Method::OPTIONS => "OPTIONS",
        _ => "other",
    }
}

pub mod archive;

#[cfg(test)]
mod tests;
