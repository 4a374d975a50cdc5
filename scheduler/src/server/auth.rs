//! Authentication of the Flight SQL port and the HTTP ports (live page,
//! metrics): with a token configured, every Flight SQL call must carry
//! `authorization: Bearer <token>`; others are refused with
//! `Unauthenticated` before any handler (and so any statement) runs. The
//! HTTP ports take the same token (`require_token`, a middleware before
//! every route), from the header or a `?token=` query parameter; anything
//! else is answered 401.

use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tonic::{Request, Status};

/// The Flight SQL port's authentication.
#[derive(Debug, Clone, Default)]
pub struct Auth {
    /// The bearer token every call must carry; `None`: no check.
    pub token: Option<String>,
}

impl Auth {
    /// Whether a request carrying `given` (the bearer token it sent, if
    /// any) may be served; always with no token configured.
    pub fn accepts(&self, given: Option<&str>) -> bool {
        match (&self.token, given) {
            (None, _) => true,
            (Some(token), Some(given)) => constant_time_eq(given.as_bytes(), token.as_bytes()),
            (Some(_), None) => false,
        }
    }

    /// Lets a request through only with `authorization: Bearer <token>`.
    #[allow(clippy::result_large_err)]
    pub fn check(&self, request: Request<()>) -> Result<Request<()>, Status> {
        let Some(token) = &self.token else {
            return Ok(request);
        };
        let given = request
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        match given {
            Some(given) if constant_time_eq(given.as_bytes(), token.as_bytes()) => Ok(request),
            Some(_) => Err(Status::unauthenticated("invalid bearer token")),
            None => Err(Status::unauthenticated(
                "this icemerge scheduler requires 'authorization: Bearer <token>'",
            )),
        }
    }
}

/// Answers 401 to an HTTP request without the configured token.
pub async fn require_token(auth: Auth, request: axum::extract::Request, next: Next) -> Response {
    if auth.accepts(given_token(&request).as_deref()) {
        return next.run(request).await;
    }
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, "Bearer")],
        "this icemerge scheduler requires its token: \
         'authorization: Bearer <token>' or ?token=<token>\n",
    )
        .into_response()
}

/// The token an HTTP request carries: the bearer header, else `?token=`.
fn given_token(request: &axum::extract::Request) -> Option<String> {
    let header = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_string);
    header.or_else(|| query_token(request.uri().query()))
}

/// `token` of a query string, percent-decoded.
pub fn query_token(query: Option<&str>) -> Option<String> {
    query?
        .split('&')
        .find_map(|pair| pair.strip_prefix("token="))
        .map(percent_decode)
}

pub(super) fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push((h * 16 + l) as u8);
                    i += 3;
                    continue;
                }
                _ => out.push(b'%'),
            },
            b'+' => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
