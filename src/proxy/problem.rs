//! The answers the proxy makes itself, as `application/problem+json` (RFC 9457), with the
//! titles of the IETF Idempotency-Key draft where it has one.
//!
//! A problem body never echoes the key, the principal or the upstream's address: the detail
//! is a fixed sentence per kind.

use axum::body::Body;
use axum::http::{header, HeaderValue, Response, StatusCode};

/// Something the proxy answers instead of the upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Problem {
    MissingKey,
    InvalidKey,
    KeyReused,
    InFlight,
    TooLarge,
    Unavailable,
    UpstreamTimeout,
    UpstreamFailed,
    Malformed,
    BodyTimeout,
    NonCanonicalPath,
    Incomplete,
}

impl Problem {
    pub fn status(self) -> StatusCode {
        match self {
            Problem::MissingKey | Problem::InvalidKey => StatusCode::BAD_REQUEST,
            Problem::KeyReused => StatusCode::UNPROCESSABLE_ENTITY,
            Problem::InFlight => StatusCode::CONFLICT,
            Problem::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Problem::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            Problem::UpstreamTimeout => StatusCode::GATEWAY_TIMEOUT,
            Problem::UpstreamFailed | Problem::Incomplete => StatusCode::BAD_GATEWAY,
            Problem::Malformed | Problem::NonCanonicalPath => StatusCode::BAD_REQUEST,
            Problem::BodyTimeout => StatusCode::REQUEST_TIMEOUT,
        }
    }

    fn title_and_detail(self) -> (&'static str, &'static str) {
        match self {
            Problem::MissingKey => (
                "Idempotency-Key is missing",
                "This operation requires an Idempotency-Key header.",
            ),
            Problem::InvalidKey => (
                "Idempotency-Key is invalid",
                "Send 1-255 visible ASCII characters, bare or as a quoted string, in one header.",
            ),
            Problem::KeyReused => (
                "Idempotency-Key is already used",
                "This key was used with another request payload; use a new key for a new request.",
            ),
            Problem::InFlight => (
                "A request is outstanding for this Idempotency-Key",
                "The first request with this key is still being processed; retry later.",
            ),
            Problem::TooLarge => (
                "Request body too large",
                "The request body exceeds the size this proxy accepts.",
            ),
            Problem::Unavailable => (
                "Service unavailable",
                "The request was not executed; retry with the same Idempotency-Key.",
            ),
            Problem::UpstreamTimeout => (
                "Upstream timed out",
                "The service did not answer in time; retry with the same Idempotency-Key.",
            ),
            Problem::UpstreamFailed => (
                "Upstream unreachable",
                "The service could not be reached; retry with the same Idempotency-Key.",
            ),
            Problem::Malformed => (
                "Malformed request body",
                "The request body's framing is broken; nothing was executed.",
            ),
            Problem::BodyTimeout => (
                "Request body timed out",
                "The request body was not complete in time; nothing was executed.",
            ),
            Problem::NonCanonicalPath => (
                "Request path is not canonical",
                "Send the path in its canonical form: no empty, '.' or '..' segments, no \
                 percent-encoded unreserved characters, no ';' parameters, and the route's own \
                 letter case and trailing slash.",
            ),
            Problem::Incomplete => (
                "Upstream answer incomplete",
                "The request was executed but its answer broke before it was complete; retries \
                 with this Idempotency-Key get this answer until the key is forgotten.",
            ),
        }
    }

    /// The problem+json answer; 409 and 503 carry `Retry-After`.
    pub fn response(self, retry_after: &HeaderValue) -> Response<Body> {
        let (title, detail) = self.title_and_detail();
        let status = self.status();
        let body = serde_json::json!({
            "type": "about:blank",
            "title": title,
            "status": status.as_u16(),
            "detail": detail,
        });
        let mut response = Response::new(Body::from(body.to_string()));
        *response.status_mut() = status;
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        if matches!(self, Problem::InFlight | Problem::Unavailable) {
            headers.insert(header::RETRY_AFTER, retry_after.clone());
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[tokio::test]
    async fn problems_carry_the_drafts_titles() {
        let retry = HeaderValue::from(2);
        let response = Problem::InFlight.response(&retry);
        assert_eq!(response.status(), StatusCode::CONFLICT);
        assert_eq!(response.headers()[header::RETRY_AFTER], "2");
        assert_eq!(
            response.headers()[header::CONTENT_TYPE],
            "application/problem+json"
        );
        let body = response.into_body().collect().await.unwrap().to_bytes();
        let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            json["title"],
            "A request is outstanding for this Idempotency-Key"
        );
        assert_eq!(json["status"], 409);
        assert!(Problem::KeyReused
            .response(&retry)
            .headers()
            .get(header::RETRY_AFTER)
            .is_none());
        assert_eq!(
            Problem::Unavailable.response(&retry).headers()[header::RETRY_AFTER],
            "2"
        );
    }
}
