//! fencewatch's own traces (SPEC §8 "fencewatch's own traces"): with the standard `OTEL_*`
//! variables asking for it, `serve` exports spans of its work through opentelemetry-otlp over
//! OTLP/gRPC (tonic, on the service's runtime; the `reqwest` clients are not linked): one span
//! per HTTP request (ingest, queries; the route template names it), continuing a caller's W3C
//! `traceparent`, and one per WAL group commit. Logs written inside a request carry its
//! `trace_id` (JSON logs: in `span`). Unset, nothing of this is installed: no layer, no span.
//!
//! Asked for by `OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (or
//! `OTEL_TRACES_EXPORTER=otlp`, to `http://localhost:4317`); `OTEL_SDK_DISABLED=true` or
//! `OTEL_TRACES_EXPORTER=none` turn it off. The exporter reads the other `OTEL_EXPORTER_OTLP_*`
//! variables (headers, timeout) itself, and `OTEL_SERVICE_NAME` / `OTEL_RESOURCE_ATTRIBUTES`
//! name the service (default `fencewatch`). A protocol other than `grpc` is refused at start.

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The tracer provider while `serve` runs.
#[derive(Debug)]
pub struct Telemetry {
    provider: SdkTracerProvider,
}

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// Whether the environment asks for exported traces, and a refusal of what it asks for that
/// cannot be done.
pub fn wanted() -> Result<bool, String> {
    if var("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
        return Ok(false);
    }
    let exporter = var("OTEL_TRACES_EXPORTER");
    if exporter.as_deref().is_some_and(|e| e.trim() == "none") {
        return Ok(false);
    }
    if let Some(e) = exporter.as_deref().filter(|e| e.trim() != "otlp") {
        return Err(format!(
            "OTEL_TRACES_EXPORTER={e} is not supported: fencewatch exports its traces with otlp (or none)"
        ));
    }
    let wanted = exporter.is_some()
        || var("OTEL_EXPORTER_OTLP_ENDPOINT").is_some()
        || var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").is_some();
    if wanted {
        for p in [
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
            "OTEL_EXPORTER_OTLP_PROTOCOL",
        ] {
            if let Some(v) = var(p) {
                if v.trim() != "grpc" {
                    return Err(format!(
                        "{p}={v} is not supported: fencewatch exports its own traces over OTLP/gRPC; set it to grpc (the endpoint is then usually port 4317)"
                    ));
                }
                break;
            }
        }
    }
    Ok(wanted)
}

impl Telemetry {
    /// The provider with its OTLP/gRPC exporter and batch processor. Call inside the runtime
    /// (the tonic channel's tasks run on it).
    pub fn start() -> Result<Telemetry, String> {
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_tonic()
            .build()
            .map_err(|e| format!("the OTLP trace exporter: {e}"))?;
        let mut resource = opentelemetry_sdk::Resource::builder();
        if var("OTEL_SERVICE_NAME").is_none() {
            resource = resource.with_service_name("fencewatch");
        }
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource.build())
            .build();
        Ok(Telemetry { provider })
    }

    /// The `tracing` layer that turns spans into OpenTelemetry spans.
    pub fn layer<S>(&self) -> impl tracing_subscriber::Layer<S> + use<S>
    where
        S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    {
        tracing_opentelemetry::layer().with_tracer(self.provider.tracer("fencewatch"))
    }

    /// Flushes the spans still batched and stops the exporter (blocking).
    pub fn shutdown(self) {
        if let Err(e) = self.provider.shutdown() {
            eprintln!("fencewatch serve: exporting the last traces failed: {e}");
        }
    }
}

struct Headers<'a>(&'a axum::http::HeaderMap);

impl opentelemetry::propagation::Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }
    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(|k| k.as_str()).collect()
    }
}

/// Middleware (installed only with telemetry): one span per request, named by its method and
/// route template, the child of the caller's `traceparent` when it sends one; its `trace_id`
/// is recorded for the logs written inside it.
pub async fn trace_requests(req: Request, next: Next) -> Response {
    let path = req.uri().path();
    if matches!(path, "/livez" | "/readyz" | "/healthz" | "/metrics") {
        return next.run(req).await;
    }
    let route = route_of(path);
    let name = format!("{} {route}", req.method());
    let span = tracing::info_span!(
        "request",
        otel.name = %name,
        otel.kind = "server",
        http.request.method = %req.method(),
        http.route = %route,
        http.response.status_code = tracing::field::Empty,
        trace_id = tracing::field::Empty,
    );
    let parent = TraceContextPropagator::new().extract(&Headers(req.headers()));
    let _ = span.set_parent(parent);
    let trace_id = {
        use opentelemetry::trace::TraceContextExt;
        span.context().span().span_context().trace_id()
    };
    span.record("trace_id", tracing::field::display(trace_id));
    let res = next.run(req).instrument(span.clone()).await;
    let status = res.status().as_u16();
    span.record("http.response.status_code", status);
    if status >= 400 {
        // Inside the span: the log line carries its trace id.
        tracing::info!(parent: &span, status, route, "request answered with an error");
    }
    res
}

/// The route template of `path` (span names stay few: no id or scope in them).
fn route_of(path: &str) -> &'static str {
    const ROUTES: [&str; 10] = [
        "/",
        "/openapi.json",
        "/v1/assurance",
        "/v1/assurance/timeline",
        "/v1/counterexamples",
        "/v1/coverage",
        "/v1/contract",
        "/v1/events",
        "/v1/traces",
        "/v1/logs",
    ];
    if let Some(r) = ROUTES.iter().find(|r| **r == path) {
        return r;
    }
    if path.starts_with("/v1/counterexamples/") {
        "/v1/counterexamples/{id}"
    } else if path.starts_with("/v1/scopes/") {
        "/v1/scopes/{scope}"
    } else {
        "other"
    }
}
