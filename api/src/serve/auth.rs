//! Optional bearer-token authentication of the `/v1` API.
//!
//! When a token is configured, every request whose path is `/v1` or starts with `/v1/` must
//! carry `Authorization: Bearer <token>`; the probes, `/metrics`, `/openapi.json` and the page
//! stay open. The check is by path prefix, not by route, so an unknown `/v1/…` path answers
//! 401 rather than telling an unauthenticated client which routes exist. Tokens are compared
//! in constant time; the token never appears in `Debug` output or logs.

use crate::serve::error::ApiError;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use subtle::{Choice, ConstantTimeEq};

/// A bearer token: non-empty, printable ASCII without spaces.
#[derive(Clone, PartialEq, Eq)]
pub struct AuthToken(Arc<str>);

impl AuthToken {
    /// Whether `presented` equals the token. The time taken depends only on the lengths of
    /// the token and of `presented`, not on their contents.
    pub fn matches(&self, presented: &[u8]) -> bool {
        let expected = self.0.as_bytes();
        let mut equal: Choice = (expected.len() as u64).ct_eq(&(presented.len() as u64));
        for (i, e) in expected.iter().enumerate() {
            let p = presented.get(i).copied().unwrap_or(0);
            equal &= e.ct_eq(&p);
        }
        bool::from(equal)
    }
}

/// Why a string is not a token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// Nothing but whitespace.
    #[error("the auth token is empty")]
    Empty,
    /// A space, a control character or a non-ASCII one.
    #[error("the auth token must be printable ASCII without spaces")]
    NotPrintable,
}

impl FromStr for AuthToken {
    type Err = TokenError;

    /// Trims surrounding whitespace (a token file usually ends with a newline).
    fn from_str(s: &str) -> Result<AuthToken, TokenError> {
        let s = s.trim();
        if s.is_empty() {
            return Err(TokenError::Empty);
        }
        if !s.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(TokenError::NotPrintable);
        }
        Ok(AuthToken(s.into()))
    }
}

impl fmt::Debug for AuthToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AuthToken(<redacted>)")
    }
}

/// Whether `path` is under the authenticated API.
pub fn is_protected(path: &str) -> bool {
    path == "/v1" || path.starts_with("/v1/")
}

/// The credentials of an `Authorization: Bearer <credentials>` header (scheme
/// case-insensitive), if present.
pub fn bearer(headers: &HeaderMap) -> Option<&[u8]> {
    let value = headers.get(header::AUTHORIZATION)?.as_bytes();
    let (scheme, rest) = value.split_at(value.iter().position(|&b| b == b' ')?);
    if !scheme.eq_ignore_ascii_case(b"bearer") {
        return None;
    }
    let start = rest.iter().position(|&b| b != b' ')?;
    Some(&rest[start..])
}

/// Middleware (`from_fn_with_state`): 401 problem+json with `WWW-Authenticate: Bearer` for a
/// protected path without the right token; everything passes when no token is configured.
pub async fn require_bearer(
    State(token): State<Option<AuthToken>>,
    req: Request,
    next: Next,
) -> Response {
    let Some(token) = token else {
        return next.run(req).await;
    };
    if !is_protected(req.uri().path()) {
        return next.run(req).await;
    }
    match bearer(req.headers()) {
        Some(presented) if token.matches(presented) => next.run(req).await,
        _ => ApiError::Unauthorized.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::Router;
    use axum::body::Body;
    use axum::http::StatusCode;
    use axum::routing::get;
    use tower::ServiceExt;

    fn token(s: &str) -> AuthToken {
        s.parse().unwrap()
    }

    #[test]
    fn compares_whole_tokens() {
        let t = token("s3cret");
        assert!(t.matches(b"s3cret"));
        for wrong in [
            &b""[..],
            b"s3cre",
            b"s3cret ",
            b"s3creT",
            b"s3crets3cret",
            b"\0",
        ] {
            assert!(!t.matches(wrong), "{wrong:?}");
        }
        assert_eq!(format!("{t:?}"), "AuthToken(<redacted>)");
        assert_eq!(token(" abc\n"), token("abc"));
        assert!("".parse::<AuthToken>().is_err());
        assert!(" \n".parse::<AuthToken>().is_err());
        assert!("a b".parse::<AuthToken>().is_err());
    }

    #[test]
    fn parses_the_header() {
        let mut h = HeaderMap::new();
        assert_eq!(bearer(&h), None);
        for (v, want) in [
            ("Bearer abc", Some(&b"abc"[..])),
            ("bearer  abc", Some(b"abc")),
            ("Basic abc", None),
            ("Bearer", None),
            ("Bearerabc", None),
        ] {
            h.insert(header::AUTHORIZATION, v.parse().unwrap());
            assert_eq!(bearer(&h), want, "{v}");
        }
    }

    fn app(t: Option<AuthToken>) -> Router {
        Router::new()
            .route("/v1/contract", get(|| async { "contract" }))
            .route("/livez", get(|| async { "ok" }))
            .route("/metrics", get(|| async { "m" }))
            .layer(axum::middleware::from_fn_with_state(t, require_bearer))
    }

    async fn status(app: Router, uri: &str, auth: Option<&str>) -> (StatusCode, Response) {
        let mut req = Request::get(uri);
        if let Some(a) = auth {
            req = req.header(header::AUTHORIZATION, a);
        }
        let res = app.oneshot(req.body(Body::empty()).unwrap()).await.unwrap();
        (res.status(), res)
    }

    #[tokio::test]
    async fn guards_only_v1() {
        let t = Some(token("s3cret"));
        let (s, res) = status(app(t.clone()), "/v1/contract", None).await;
        assert_eq!(s, StatusCode::UNAUTHORIZED);
        assert_eq!(
            res.headers()[header::WWW_AUTHENTICATE],
            "Bearer realm=\"fencewatch\""
        );
        assert_eq!(
            res.headers()[header::CONTENT_TYPE],
            crate::serve::error::PROBLEM_JSON
        );
        let (s, _) = status(app(t.clone()), "/v1/contract", Some("Bearer wrong")).await;
        assert_eq!(s, StatusCode::UNAUTHORIZED);
        let (s, _) = status(app(t.clone()), "/v1/unknown", None).await;
        assert_eq!(s, StatusCode::UNAUTHORIZED);
        let (s, _) = status(app(t.clone()), "/v1/contract", Some("Bearer s3cret")).await;
        assert_eq!(s, StatusCode::OK);
        for open in ["/livez", "/metrics"] {
            let (s, _) = status(app(t.clone()), open, None).await;
            assert_eq!(s, StatusCode::OK, "{open}");
        }
        let (s, _) = status(app(None), "/v1/contract", None).await;
        assert_eq!(s, StatusCode::OK);
    }
}
