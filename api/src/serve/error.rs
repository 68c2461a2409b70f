//! Errors of the HTTP API, rendered as RFC 9457 problem details (`application/problem+json`).
//!
//! [`ApiError`] is the one error type of the handlers; [`ApiError::parts`] is the one match
//! that decides each error's HTTP status, problem type and title (STYLE 5). Responses that
//! axum or a tower layer produce on their own — extractor rejections (400, 415, 422), the
//! 413 of the body limit, the 503 of the timeout, 405 — are plain text or empty;
//! [`problem_details`] re-renders every such response of status 400 and above as a problem, so
//! a client sees a single error format.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::header::{self, HeaderValue};
use axum::http::{Method, StatusCode, Uri};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use fencewatch_assess::Duration;
use serde::{Deserialize, Serialize};

/// The media type of a problem document.
pub const PROBLEM_JSON: &str = "application/problem+json";
/// Problem types are this base followed by a slug, e.g. `…/problems/unknown-property`.
pub const PROBLEM_TYPE_BASE: &str = "https://fencewatch.dev/problems/";

/// The result of a handler.
pub type Result<T, E = ApiError> = std::result::Result<T, E>;

/// Everything a request can fail with.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The request is malformed (bad query, bad JSON syntax…).
    #[error("{detail}")]
    BadRequest {
        /// What is wrong with it.
        detail: String,
    },
    /// The named thing does not exist.
    #[error("{what} not found")]
    NotFound {
        /// What was looked for, e.g. "counterexample `cx-…`".
        what: String,
    },
    /// The path exists, the method does not.
    #[error("method {method} not allowed here")]
    MethodNotAllowed {
        /// The method of the request.
        method: String,
    },
    /// A bearer token is required and was missing or wrong.
    #[error("a valid bearer token is required (Authorization: Bearer <token>)")]
    Unauthorized,
    /// The body exceeds `max_body_bytes`.
    #[error("the request body exceeds the limit of {limit} bytes")]
    PayloadTooLarge {
        /// The limit in bytes.
        limit: u64,
    },
    /// The body holds more items than `max_pending_bytes` can hold at once.
    #[error("{detail}")]
    TooManyItems {
        /// Why, with the most a request may hold.
        detail: String,
    },
    /// The body's media type is not one the endpoint reads.
    #[error("unsupported content type `{got}`{}", if expected.is_empty() { String::new() } else { format!(": {expected}") })]
    UnsupportedMediaType {
        /// The `Content-Type` of the request, or `none`.
        got: String,
        /// What the endpoint reads, when known.
        expected: &'static str,
    },
    /// The body's `Content-Encoding` is not one the service decodes.
    #[error(
        "unsupported Content-Encoding `{got}`: send the body as it is, or with gzip, deflate or zstd"
    )]
    UnsupportedEncoding {
        /// The `Content-Encoding` of the request.
        got: String,
    },
    /// The body is well-formed but its content cannot be used; `errors` lists the problems
    /// (e.g. one object per rejected line) as the `errors` extension member.
    #[error("{detail}")]
    Unprocessable {
        /// A summary.
        detail: String,
        /// Details, one JSON value each.
        errors: Vec<serde_json::Value>,
        /// More extension members (counts), in order.
        extra: Vec<(String, serde_json::Value)>,
    },
    /// The query names a property the contract does not declare.
    #[error("no property `{name}` in the contract")]
    UnknownProperty {
        /// The name asked for.
        name: String,
    },
    /// The request took longer than `request_timeout`.
    #[error("the request took longer than {after}")]
    Timeout {
        /// The configured timeout.
        after: Duration,
    },
    /// The service cannot answer yet (replaying the WAL) or any more (shutting down).
    #[error("{detail}")]
    ServiceUnavailable {
        /// Why.
        detail: String,
    },
    /// Ingest is saturated (`max_pending_bytes` of bodies in flight): 503 with
    /// `Retry-After: 1`.
    #[error("{detail}")]
    Saturated {
        /// Why.
        detail: String,
    },
    /// None of the media types the request accepts is one the endpoint answers with.
    #[error("cannot answer in `{got}`: {offered}")]
    NotAcceptable {
        /// The `Accept` header.
        got: String,
        /// What the endpoint offers.
        offered: &'static str,
    },
    /// A SQL statement that is not one read-only query (SPEC §9); `refused` names what it was
    /// (`statements`, `ddl`, `dml`, `copy`, `statement`, `file_table`, `table_function`,
    /// `operators`).
    #[error("{detail}")]
    QueryRefused {
        /// What was refused.
        refused: &'static str,
        /// Why.
        detail: String,
    },
    /// The SQL does not parse or plan (syntax, unknown table or column, types).
    #[error("{detail}")]
    QueryInvalid {
        /// DataFusion's message.
        detail: String,
    },
    /// A query ended by one of its limits: `limit` is its key (`query_timeout`,
    /// `query_memory`).
    #[error("{detail}")]
    QueryLimit {
        /// The key of the limit.
        limit: &'static str,
        /// What happened.
        detail: String,
    },
    /// A bug or a broken invariant. The detail is logged, never sent to the client.
    #[error("internal error: {detail}")]
    Internal {
        /// What went wrong, for the log.
        detail: String,
    },
    /// An error status produced by axum or a layer that no variant above names.
    #[error("{detail}")]
    Other {
        /// The status to answer with.
        status: StatusCode,
        /// What the layer said.
        detail: String,
    },
}

/// An RFC 9457 problem document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Problem {
    /// A URI naming the problem type, or `about:blank`.
    #[serde(rename = "type")]
    pub type_: String,
    /// A short summary of the problem type.
    pub title: String,
    /// The HTTP status.
    pub status: u16,
    /// What went wrong this time.
    pub detail: String,
    /// The request path, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
    /// Extension members, e.g. `errors`.
    #[serde(flatten)]
    pub extensions: serde_json::Map<String, serde_json::Value>,
}

impl ApiError {
    /// The one place deciding status, problem type slug (`None` for `about:blank`) and title.
    pub fn parts(&self) -> (StatusCode, Option<&'static str>, &'static str) {
        use ApiError::*;
        match self {
            BadRequest { .. } => (StatusCode::BAD_REQUEST, Some("bad-request"), "Bad request"),
            NotFound { .. } => (StatusCode::NOT_FOUND, Some("not-found"), "Not found"),
            MethodNotAllowed { .. } => (
                StatusCode::METHOD_NOT_ALLOWED,
                Some("method-not-allowed"),
                "Method not allowed",
            ),
            Unauthorized => (
                StatusCode::UNAUTHORIZED,
                Some("unauthorized"),
                "Unauthorized",
            ),
            PayloadTooLarge { .. } | TooManyItems { .. } => (
                StatusCode::PAYLOAD_TOO_LARGE,
                Some("payload-too-large"),
                "Request body too large",
            ),
            UnsupportedMediaType { .. } | UnsupportedEncoding { .. } => (
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                Some("unsupported-media-type"),
                "Unsupported media type",
            ),
            Unprocessable { .. } => (
                StatusCode::UNPROCESSABLE_ENTITY,
                Some("unprocessable"),
                "Unprocessable content",
            ),
            UnknownProperty { .. } => (
                StatusCode::NOT_FOUND,
                Some("unknown-property"),
                "Unknown property",
            ),
            Timeout { .. } => (
                StatusCode::SERVICE_UNAVAILABLE,
                Some("timeout"),
                "Request timed out",
            ),
            ServiceUnavailable { .. } => (
                StatusCode::SERVICE_UNAVAILABLE,
                Some("service-unavailable"),
                "Service unavailable",
            ),
            Saturated { .. } => (
                StatusCode::SERVICE_UNAVAILABLE,
                Some("saturated"),
                "Ingest saturated",
            ),
            NotAcceptable { .. } => (
                StatusCode::NOT_ACCEPTABLE,
                Some("not-acceptable"),
                "Not acceptable",
            ),
            QueryRefused { .. } => (
                StatusCode::BAD_REQUEST,
                Some("query-refused"),
                "Query refused: not one read-only, bounded query",
            ),
            QueryInvalid { .. } => (
                StatusCode::BAD_REQUEST,
                Some("query-invalid"),
                "Invalid query",
            ),
            QueryLimit { limit, .. } => (
                StatusCode::UNPROCESSABLE_ENTITY,
                Some(if *limit == "query_timeout" {
                    "query-timeout"
                } else {
                    "query-memory"
                }),
                "Query ended by a limit",
            ),
            Internal { .. } => (
                StatusCode::INTERNAL_SERVER_ERROR,
                Some("internal"),
                "Internal error",
            ),
            Other { status, .. } => (*status, None, status.canonical_reason().unwrap_or("Error")),
        }
    }

    /// The status of the response.
    pub fn status(&self) -> StatusCode {
        self.parts().0
    }

    /// The problem document (without `instance`).
    pub fn to_problem(&self) -> Problem {
        let (status, slug, title) = self.parts();
        let detail = match self {
            ApiError::Internal { .. } => "internal error; the server log has the details".into(),
            other => other.to_string(),
        };
        let mut extensions = serde_json::Map::new();
        match self {
            ApiError::QueryRefused { refused, .. } => {
                extensions.insert("refused".into(), (*refused).into());
            }
            ApiError::QueryLimit { limit, .. } => {
                extensions.insert("limit".into(), (*limit).into());
            }
            _ => {}
        }
        if let ApiError::Unprocessable { errors, extra, .. } = self {
            if !errors.is_empty() {
                extensions.insert("errors".into(), serde_json::Value::Array(errors.clone()));
            }
            for (k, v) in extra {
                extensions.insert(k.clone(), v.clone());
            }
        }
        Problem {
            type_: slug.map_or_else(
                || "about:blank".into(),
                |s| format!("{PROBLEM_TYPE_BASE}{s}"),
            ),
            title: title.into(),
            status: status.as_u16(),
            detail,
            instance: None,
            extensions,
        }
    }
}

impl Problem {
    /// Sets `instance` (the request path).
    #[must_use]
    pub fn with_instance(mut self, instance: impl Into<String>) -> Problem {
        self.instance = Some(instance.into());
        self
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = serde_json::to_vec(&self).unwrap_or_default();
        let mut res = (status, body).into_response();
        res.headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
        res
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if let ApiError::Internal { detail } = &self {
            tracing::error!(%detail, "internal error answering a request");
        }
        let mut res = self.to_problem().into_response();
        if matches!(self, ApiError::Saturated { .. }) {
            res.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        if matches!(self, ApiError::Unauthorized) {
            res.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"fencewatch\""),
            );
        }
        res
    }
}

/// The 404 fallback of the router.
pub async fn not_found(uri: Uri) -> ApiError {
    ApiError::NotFound {
        what: format!("`{}`", uri.path()),
    }
}

/// What [`problem_details`] needs to word the errors of the layers.
#[derive(Debug, Clone, Copy)]
pub struct ProblemContext {
    /// `max_body_bytes`, named in a 413.
    pub max_body_bytes: u64,
    /// `request_timeout`, named when a request times out.
    pub request_timeout: Duration,
}

/// Middleware: re-renders every error response (status ≥ 400) that is not already
/// problem+json as a problem, keeping `Allow`, `WWW-Authenticate` and `Retry-After`, and sets
/// `instance` to the request path.
pub async fn problem_details(
    State(ctx): State<ProblemContext>,
    req: Request,
    next: Next,
) -> Response {
    let path = req.uri().path().to_owned();
    let method = req.method().clone();
    let content_type = req.headers().get(header::CONTENT_TYPE).cloned();
    let res = next.run(req).await;
    if res.status().as_u16() < 400 {
        return res;
    }
    if is_problem(&res) {
        return with_instance(res, path).await;
    }
    let (parts, body) = res.into_parts();
    let text = if is_plain_text(&parts.headers) {
        axum::body::to_bytes(body, 8 << 10)
            .await
            .ok()
            .and_then(|b| String::from_utf8(b.to_vec()).ok())
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
    } else {
        None
    };
    let err = error_for_status(parts.status, text, &ctx, &method, &path, content_type);
    let mut res = err.to_problem().with_instance(path).into_response();
    for name in [header::ALLOW, header::WWW_AUTHENTICATE, header::RETRY_AFTER] {
        if let Some(v) = parts.headers.get(&name) {
            res.headers_mut().insert(name, v.clone());
        }
    }
    res
}

/// Sets `instance` of a problem response made by a handler, which does not know the path.
async fn with_instance(res: Response, path: String) -> Response {
    let (mut parts, body) = res.into_parts();
    // Problem bodies are built in memory by `Problem::into_response`; nothing is streamed.
    let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
        return ApiError::Internal {
            detail: "an error response body could not be read".into(),
        }
        .into_response();
    };
    match serde_json::from_slice::<Problem>(&bytes) {
        Ok(p) if p.instance.is_none() => {
            let body = serde_json::to_vec(&p.with_instance(path)).unwrap_or_default();
            parts.headers.remove(header::CONTENT_LENGTH);
            Response::from_parts(parts, Body::from(body))
        }
        _ => Response::from_parts(parts, Body::from(bytes)),
    }
}

fn error_for_status(
    status: StatusCode,
    text: Option<String>,
    ctx: &ProblemContext,
    method: &Method,
    path: &str,
    content_type: Option<HeaderValue>,
) -> ApiError {
    let detail = || text.clone().unwrap_or_else(|| status.to_string());
    match status {
        StatusCode::BAD_REQUEST => ApiError::BadRequest { detail: detail() },
        StatusCode::UNAUTHORIZED => ApiError::Unauthorized,
        StatusCode::NOT_FOUND => ApiError::NotFound {
            what: format!("`{path}`"),
        },
        StatusCode::METHOD_NOT_ALLOWED => ApiError::MethodNotAllowed {
            method: method.to_string(),
        },
        // The timeout layer is configured to answer 503 with an empty body.
        StatusCode::REQUEST_TIMEOUT => ApiError::Timeout {
            after: ctx.request_timeout,
        },
        StatusCode::SERVICE_UNAVAILABLE if text.is_none() => ApiError::Timeout {
            after: ctx.request_timeout,
        },
        StatusCode::PAYLOAD_TOO_LARGE => ApiError::PayloadTooLarge {
            limit: ctx.max_body_bytes,
        },
        StatusCode::UNSUPPORTED_MEDIA_TYPE => ApiError::UnsupportedMediaType {
            got: content_type
                .as_ref()
                .and_then(|v| v.to_str().ok())
                .unwrap_or("none")
                .chars()
                .take(128)
                .collect(),
            expected: "",
        },
        StatusCode::UNPROCESSABLE_ENTITY => ApiError::Unprocessable {
            detail: detail(),
            errors: Vec::new(),
            extra: Vec::new(),
        },
        _ => ApiError::Other {
            status,
            detail: detail(),
        },
    }
}

fn is_problem(res: &Response) -> bool {
    res.headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(PROBLEM_JSON.as_bytes()))
}

fn is_plain_text(headers: &axum::http::HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"text/plain"))
}

/// The response of a panicking handler (for `CatchPanicLayer::custom`).
pub fn panic_response(_panic: Box<dyn std::any::Any + Send + 'static>) -> Response<Body> {
    ApiError::Internal {
        detail: "a request handler panicked".into(),
    }
    .into_response()
}

#[cfg(test)]
mod tests;
