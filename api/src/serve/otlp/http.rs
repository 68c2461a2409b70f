//! OTLP/HTTP (SPEC §8): `POST /v1/traces` and `POST /v1/logs` on the service's listener,
//! protobuf (`application/x-protobuf`) or OTLP/JSON (`application/json`), `Content-Encoding:
//! gzip`, `deflate` or `zstd`, or none. Bodies are read under the ingest budget and the body limit
//! applies after decompression too (`body.rs`), as for `/v1/events`; auth is the `/v1/*` bearer
//! token.
//!
//! Every answer is in the request's content type: `200` with an export response (its
//! `partial_success` set when some items were malformed), and every error — the handler's, and
//! those of the layers around it (401, 413, 503 timeouts) — as a `google.rpc.Status` ([`answers`]
//! re-renders the problem+json of the service's error layer for these two routes).

use super::{Failure, Otlp, Prepared, Request, RpcStatus, Taken, code};
use crate::serve::body;
use crate::serve::error::{ApiError, Problem};
use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use fencewatch_ingest::decode::otlp::{Signal, logs_service, trace_service};
use prost::Message;

/// The OTLP/HTTP trace route.
pub const TRACES: &str = "/v1/traces";
/// The OTLP/HTTP logs route.
pub const LOGS: &str = "/v1/logs";
const PROTOBUF: &str = "application/x-protobuf";
const JSON: &str = "application/json";

/// The two routes.
pub fn router(otlp: Otlp) -> Router {
    Router::new()
        .route(TRACES, post(traces))
        .route(LOGS, post(logs))
        .with_state(otlp)
}

/// Ingests OTLP spans: those carrying `fencing.kind` are events (SPEC §8). `200` means durable
/// in the write-ahead log and assessed; with `partial_success.rejected_spans` the malformed ones
/// (named in `error_message`) are kept as `malformed_event` evidence and must not be retried.
#[utoipa::path(post, path = "/v1/traces",
    request_body(description = "An OTLP ExportTraceServiceRequest: protobuf, or OTLP/JSON; gzip, deflate or zstd allowed",
        content(("application/x-protobuf"), ("application/json"))),
    responses((status = 200, description = "Durable and assessed: an ExportTraceServiceResponse in the request's content type, `partial_success` set when some spans were malformed",
                content(("application/x-protobuf"), ("application/json"))),
              (status = 400, description = "Not an OTLP trace request (google.rpc.Status); nothing stored", content_type = "application/x-protobuf"),
              (status = 413, description = "Body over max_body_bytes, compressed or not (google.rpc.Status); nothing stored", content_type = "application/x-protobuf"),
              (status = 415, description = "Neither protobuf nor JSON, or an unknown Content-Encoding (google.rpc.Status)", content_type = "application/json"),
              (status = 503, description = "Saturated, not ready or shutting down, `Retry-After` (google.rpc.Status); nothing stored, retry", content_type = "application/x-protobuf")))]
pub async fn traces(State(otlp): State<Otlp>, req: axum::extract::Request) -> Response {
    export(otlp, Signal::Traces, req).await
}

/// Ingests OTLP log records: those carrying `fencing.kind` are events (SPEC §8), each named by
/// its WAL offset (`otlp:<offset>`). Answers as `/v1/traces` does, `rejected_log_records` for
/// the malformed ones.
#[utoipa::path(post, path = "/v1/logs",
    request_body(description = "An OTLP ExportLogsServiceRequest: protobuf, or OTLP/JSON; gzip, deflate or zstd allowed",
        content(("application/x-protobuf"), ("application/json"))),
    responses((status = 200, description = "Durable and assessed: an ExportLogsServiceResponse in the request's content type, `partial_success` set when some log records were malformed",
                content(("application/x-protobuf"), ("application/json"))),
              (status = 400, description = "Not an OTLP logs request (google.rpc.Status); nothing stored", content_type = "application/x-protobuf"),
              (status = 413, description = "Body over max_body_bytes, compressed or not (google.rpc.Status); nothing stored", content_type = "application/x-protobuf"),
              (status = 415, description = "Neither protobuf nor JSON, or an unknown Content-Encoding (google.rpc.Status)", content_type = "application/json"),
              (status = 503, description = "Saturated, not ready or shutting down, `Retry-After` (google.rpc.Status); nothing stored, retry", content_type = "application/x-protobuf")))]
pub async fn logs(State(otlp): State<Otlp>, req: axum::extract::Request) -> Response {
    export(otlp, Signal::Logs, req).await
}

/// Whether the body is OTLP/JSON (`true`) or protobuf; 415 for anything else.
fn is_json(headers: &HeaderMap) -> Result<bool, ApiError> {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let media = ct
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    match media.as_str() {
        PROTOBUF => Ok(false),
        JSON => Ok(true),
        _ => Err(ApiError::UnsupportedMediaType {
            got: ct.chars().take(128).collect(),
            expected: "send OTLP as `application/x-protobuf` or OTLP/JSON as `application/json`",
        }),
    }
}

async fn export(otlp: Otlp, signal: Signal, req: axum::extract::Request) -> Response {
    match take(&otlp, signal, req).await {
        Ok((json, taken)) => success(signal, json, &taken),
        Err(res) => res,
    }
}

async fn take(
    otlp: &Otlp,
    signal: Signal,
    req: axum::extract::Request,
) -> Result<(bool, Taken), Response> {
    let wal = &otlp.wal;
    if !wal.is_ready() {
        return Err(ApiError::ServiceUnavailable {
            detail: "replaying the write-ahead log; not ready yet".into(),
        }
        .into_response());
    }
    let (parts, body) = req.into_parts();
    let json = is_json(&parts.headers).map_err(IntoResponse::into_response)?;
    let encoding = body::encoding(&parts.headers).map_err(IntoResponse::into_response)?;
    let mut held = wal.budget().reserve();
    let max_pending = wal.budget().max();
    let mut raw = Vec::with_capacity(body::length_hint(&parts.headers));
    body::read(body, &mut raw, &mut held, max_pending)
        .await
        .map_err(IntoResponse::into_response)?;
    let limit = wal.max_body_bytes();
    let now = wal.clock().now().0;
    if encoding == body::Encoding::Identity && !json {
        let request = otlp
            .map_protobuf(signal, raw.into())
            .await
            .map_err(failure)?;
        let taken = otlp.store(Prepared::of(request, now), held).await;
        return Ok((json, taken.map_err(failure)?));
    }
    // Else decompressed (under the limit), parsed and mapped off the async workers, a request
    // a core at a time (`Otlp::mapping_permits`).
    let permit = otlp.mapping_permit().await;
    let parsed = tokio::task::spawn_blocking(move || {
        let _permit = permit;
        let body = if encoding == body::Encoding::Identity {
            raw
        } else {
            let mut out = Vec::new();
            body::decode(encoding, &raw, &mut out, limit, &mut held, max_pending).map_err(Err)?;
            out
        };
        let request = Request::parse(signal, body.into(), json).map_err(Ok)?;
        Ok((Prepared::of(request, now), held))
    })
    .await
    .map_err(|e| {
        ApiError::Internal {
            detail: e.to_string(),
        }
        .into_response()
    })?;
    let (prepared, held) = parsed.map_err(|e: Result<Failure, body::Refused>| match e {
        Ok(f) => failure(f),
        Err(refused) => refused.into_response(),
    })?;
    let taken = otlp.store(prepared, held).await.map_err(failure)?;
    Ok((json, taken))
}

fn failure(f: Failure) -> Response {
    match f {
        Failure::Invalid(detail) => ApiError::BadRequest {
            detail: format!("{detail}; nothing of this body was stored"),
        },
        Failure::TooLarge(_) => return StatusCode::PAYLOAD_TOO_LARGE.into_response(),
        Failure::Unavailable(detail) => ApiError::ServiceUnavailable { detail },
    }
    .into_response()
}

/// The export response: `partial_success` set only when some items were malformed.
fn success(signal: Signal, json: bool, t: &Taken) -> Response {
    let body = if json {
        let partial = (t.rejected > 0).then(|| {
            let count = match signal {
                Signal::Traces => "rejectedSpans",
                Signal::Logs => "rejectedLogRecords",
            };
            serde_json::json!({count: t.rejected.to_string(), "errorMessage": t.error_message})
        });
        let v = match partial {
            Some(p) => serde_json::json!({ "partialSuccess": p }),
            None => serde_json::json!({}),
        };
        serde_json::to_vec(&v).unwrap_or_default()
    } else {
        let rejected = i64::try_from(t.rejected).unwrap_or(i64::MAX);
        let message = t.error_message.clone();
        match signal {
            Signal::Traces => trace_service::ExportTraceServiceResponse {
                partial_success: (t.rejected > 0).then_some(
                    trace_service::ExportTracePartialSuccess {
                        rejected_spans: rejected,
                        error_message: message,
                    },
                ),
            }
            .encode_to_vec(),
            Signal::Logs => logs_service::ExportLogsServiceResponse {
                partial_success: (t.rejected > 0).then_some(
                    logs_service::ExportLogsPartialSuccess {
                        rejected_log_records: rejected,
                        error_message: message,
                    },
                ),
            }
            .encode_to_vec(),
        }
    };
    let ct = if json { JSON } else { PROTOBUF };
    ([(header::CONTENT_TYPE, ct)], body).into_response()
}

/// Whether `path` is an OTLP/HTTP route.
pub fn is_otlp(path: &str) -> bool {
    path == TRACES || path == LOGS
}

/// Middleware, outside the service's problem+json layer: on the OTLP routes, renders an error
/// answer as a `google.rpc.Status` in the request's content type (protobuf for
/// `application/x-protobuf`, else JSON), keeping `Retry-After` and `WWW-Authenticate`.
pub async fn answers(req: axum::extract::Request, next: Next) -> Response {
    if !is_otlp(req.uri().path()) {
        return next.run(req).await;
    }
    let json = is_json(req.headers()).unwrap_or(true);
    let res = next.run(req).await;
    if res.status().as_u16() < 400 {
        return res;
    }
    let (mut parts, body) = res.into_parts();
    let bytes = axum::body::to_bytes(body, 1 << 20)
        .await
        .unwrap_or_default();
    let message = serde_json::from_slice::<Problem>(&bytes)
        .map(|p| p.detail)
        .unwrap_or_else(|_| parts.status.to_string());
    let status = RpcStatus {
        code: grpc_code(parts.status),
        message,
    };
    let (ct, body) = if json {
        (JSON, serde_json::to_vec(&status).unwrap_or_default())
    } else {
        (PROTOBUF, status.encode_to_vec())
    };
    parts.headers.remove(header::CONTENT_LENGTH);
    parts
        .headers
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(ct));
    Response::from_parts(parts, axum::body::Body::from(body))
}

/// The gRPC code an HTTP error status stands for (the `code` of its `google.rpc.Status`).
fn grpc_code(status: StatusCode) -> i32 {
    match status {
        StatusCode::BAD_REQUEST | StatusCode::UNSUPPORTED_MEDIA_TYPE => code::INVALID_ARGUMENT,
        StatusCode::UNAUTHORIZED => code::UNAUTHENTICATED,
        StatusCode::PAYLOAD_TOO_LARGE => code::RESOURCE_EXHAUSTED,
        StatusCode::SERVICE_UNAVAILABLE | StatusCode::TOO_MANY_REQUESTS => code::UNAVAILABLE,
        StatusCode::NOT_FOUND => code::NOT_FOUND,
        StatusCode::METHOD_NOT_ALLOWED => code::UNIMPLEMENTED,
        _ => code::INTERNAL,
    }
}
