//! Problem details from handlers, the fallback and axum's own rejections.

use super::*;
use axum::Router;
use axum::routing::{get, post};
use tower::ServiceExt;

fn app() -> Router {
    let ctx = ProblemContext {
        max_body_bytes: 64,
        request_timeout: Duration(30_000_000_000),
    };
    Router::new()
        .route(
            "/prop",
            get(|| async { Err::<(), _>(ApiError::UnknownProperty { name: "x".into() }) }),
        )
        .route(
            "/lines",
            get(|| async {
                Err::<(), _>(ApiError::Unprocessable {
                    detail: "2 lines rejected".into(),
                    errors: vec![serde_json::json!({"line": 3})],
                    extra: vec![("malformed".into(), serde_json::json!(2))],
                })
            }),
        )
        .route(
            "/json",
            post(|axum::Json(v): axum::Json<serde_json::Value>| async move { v.to_string() }),
        )
        .route(
            "/query",
            get(
                |q: axum::extract::Query<std::collections::HashMap<String, u32>>| async move {
                    q.len().to_string()
                },
            ),
        )
        .route(
            "/secret",
            get(|| async { Err::<(), _>(ApiError::Internal { detail: "x".into() }) }),
        )
        .fallback(not_found)
        .layer(axum::extract::DefaultBodyLimit::max(64))
        .layer(axum::middleware::from_fn_with_state(ctx, problem_details))
}

async fn call(req: Request) -> (StatusCode, axum::http::HeaderMap, Problem) {
    let res = app().oneshot(req).await.unwrap();
    let (parts, body) = res.into_parts();
    assert_eq!(parts.headers[header::CONTENT_TYPE], PROBLEM_JSON);
    let bytes = axum::body::to_bytes(body, 1 << 20).await.unwrap();
    let problem: Problem = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(problem.status, parts.status.as_u16());
    (parts.status, parts.headers, problem)
}

fn get_req(uri: &str) -> Request {
    Request::get(uri).body(Body::empty()).unwrap()
}

fn post_req(uri: &str, content_type: &str, body: &'static str) -> Request {
    Request::post(uri)
        .header(header::CONTENT_TYPE, content_type)
        .body(Body::from(body))
        .unwrap()
}

#[tokio::test]
async fn handler_errors_are_problems() {
    let (status, _, p) = call(get_req("/prop")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(p.type_, "https://fencewatch.dev/problems/unknown-property");
    assert_eq!(p.detail, "no property `x` in the contract");
    assert_eq!(p.title, "Unknown property");

    let (status, _, p) = call(get_req("/lines")).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(p.extensions["errors"], serde_json::json!([{"line": 3}]));
    assert_eq!(p.extensions["malformed"], 2);

    let (status, _, p) = call(get_req("/secret")).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    assert!(!p.detail.contains("x"), "{}", p.detail);
}

#[tokio::test]
async fn fallback_and_method_are_problems() {
    let (status, _, p) = call(get_req("/nope")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(p.detail, "`/nope` not found");
    assert_eq!(p.instance.as_deref(), Some("/nope"));

    let (status, headers, p) = call(post_req("/prop", "text/plain", "")).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    assert!(headers.contains_key(header::ALLOW));
    assert_eq!(
        p.type_,
        "https://fencewatch.dev/problems/method-not-allowed"
    );
}

#[tokio::test]
async fn rejections_are_problems() {
    let (status, _, p) = call(post_req("/json", "application/json", "{oops")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(p.detail.contains("JSON"), "{}", p.detail);
    assert_eq!(p.instance.as_deref(), Some("/json"));

    let (status, _, p) = call(post_req("/json", "text/csv", "{}")).await;
    assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    assert_eq!(p.detail, "unsupported content type `text/csv`");

    let (status, _, p) = call(get_req("/query?a=notanumber")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(p.detail.contains("query"), "{}", p.detail);

    let big = "[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]";
    let (status, _, p) = call(post_req("/json", "application/json", big)).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(p.detail, "the request body exceeds the limit of 64 bytes");
}

#[test]
fn unauthorized_carries_www_authenticate() {
    let res = ApiError::Unauthorized.into_response();
    assert_eq!(res.status(), StatusCode::UNAUTHORIZED);
    assert!(
        res.headers()[header::WWW_AUTHENTICATE]
            .to_str()
            .unwrap()
            .starts_with("Bearer")
    );
}
