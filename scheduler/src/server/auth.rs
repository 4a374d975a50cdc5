//! Authentication of the Flight SQL port and the live page: with a token
//! configured, every Flight SQL call must carry `authorization: Bearer
//! <token>`; others are refused with `Unauthenticated` before any handler
//! (and so any statement) runs. The live page takes the same token
//! (`accepts`), from the header or a `?token=` query parameter.

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

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
