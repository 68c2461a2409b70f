//! Counterexamples link to traces (issue 13): every event in a `/v1` answer whose source is a
//! span (`otlp:<trace_id>/<span_id>`) also gets `trace_id` and `span_id`, and `trace_url` when
//! `trace_url_template` is set (`{trace_id}` and `{span_id}` filled in), which the page shows as
//! links. Done as a layer over the JSON answers, so every route that shows events (assurance,
//! counterexamples, scopes) shows them alike.

use axum::extract::{Request, State};
use axum::http::{Method, header};
use axum::middleware::Next;
use axum::response::Response;
use serde_json::Value;
use std::sync::Arc;

/// The trace and span ids of a span's provenance.
pub fn span_ids(source: &str) -> Option<(&str, &str)> {
    let (trace, span) = source.strip_prefix("otlp:")?.split_once('/')?;
    let hex = |s: &str, n: usize| {
        s.len() == n
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    (hex(trace, 32) && hex(span, 16)).then_some((trace, span))
}

/// Adds the ids (and the link) to every object of `v` whose `source` is a span; returns
/// whether any was found.
pub fn add_links(v: &mut Value, template: Option<&str>) -> bool {
    match v {
        Value::Array(a) => a.iter_mut().fold(false, |f, x| add_links(x, template) | f),
        Value::Object(o) => {
            let mut found = false;
            let ids = o
                .get("source")
                .and_then(Value::as_str)
                .and_then(span_ids)
                .map(|(t, s)| (t.to_string(), s.to_string()));
            if let Some((trace, span)) = ids {
                if let Some(t) = template {
                    let url = t.replace("{trace_id}", &trace).replace("{span_id}", &span);
                    o.insert("trace_url".into(), Value::String(url));
                }
                o.insert("trace_id".into(), Value::String(trace));
                o.insert("span_id".into(), Value::String(span));
                found = true;
            }
            for x in o.values_mut() {
                found |= add_links(x, template);
            }
            found
        }
        _ => false,
    }
}

/// Middleware: adds the ids and links to the JSON answers of `GET /v1/*` that hold spans.
pub async fn trace_links(
    State(template): State<Option<Arc<str>>>,
    req: Request,
    next: Next,
) -> Response {
    let wanted = req.method() == Method::GET && req.uri().path().starts_with("/v1/");
    let res = next.run(req).await;
    let json = res
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if !wanted || !json || !res.status().is_success() {
        return res;
    }
    let (mut parts, body) = res.into_parts();
    // The answers are built in memory: nothing is streamed.
    let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
        return Response::from_parts(parts, axum::body::Body::empty());
    };
    if memchr::memmem::find(&bytes, b"\"otlp:").is_none() {
        return Response::from_parts(parts, axum::body::Body::from(bytes));
    }
    let Ok(mut v) = serde_json::from_slice::<Value>(&bytes) else {
        return Response::from_parts(parts, axum::body::Body::from(bytes));
    };
    if !add_links(&mut v, template.as_deref()) {
        return Response::from_parts(parts, axum::body::Body::from(bytes));
    }
    parts.headers.remove(header::CONTENT_LENGTH);
    let body = serde_json::to_vec(&v).unwrap_or_else(|_| bytes.to_vec());
    Response::from_parts(parts, axum::body::Body::from(body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_get_their_ids_and_link() {
        let mut v = serde_json::json!({"counterexamples": [{
            "stale": {"source": "otlp:0af7651916cd43dd8448eb211c80319c/b7ad6b7169203331"},
            "superseding": {"source": "http:12"},
            "context": [{"source": "otlp:0af7651916cd43dd8448eb211c80319c/00f067aa0ba902b7"}],
        }]});
        assert!(add_links(
            &mut v,
            Some("https://grafana.example/explore?traceId={trace_id}&span={span_id}")
        ));
        let c = &v["counterexamples"][0];
        assert_eq!(c["stale"]["trace_id"], "0af7651916cd43dd8448eb211c80319c");
        assert_eq!(c["stale"]["span_id"], "b7ad6b7169203331");
        assert_eq!(
            c["stale"]["trace_url"],
            "https://grafana.example/explore?traceId=0af7651916cd43dd8448eb211c80319c&span=b7ad6b7169203331"
        );
        assert!(c["superseding"].get("trace_id").is_none());
        assert_eq!(c["context"][0]["span_id"], "00f067aa0ba902b7");
        let mut plain = serde_json::json!({"source": "otlp:7", "x": [{"source": "otlp:ABC/def"}]});
        assert!(!add_links(&mut plain, None));
        assert_eq!(
            span_ids("otlp:0af7651916cd43dd8448eb211c80319c/b7ad6b716920333"),
            None
        );
    }
}
