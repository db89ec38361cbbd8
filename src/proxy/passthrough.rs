//! The requests the proxy does not key: passed through to the upstream, streaming both ways and
//! storing nothing.

use std::net::SocketAddr;
use std::time::Instant;

use axum::body::Body;
use axum::http::{Request, Response};

use super::{error_chain, upstream, Ending, Proxy, ProxyReply};
use crate::outcome::ProxyOutcome;
use crate::timer::RequestTimer;
use crate::util::declared_length;
use upstream::UpstreamError;

impl Proxy {
    /// Forwards a request that gets no idempotency, streaming both ways; stores nothing.
    pub(super) async fn pass_through(
        &self,
        request: Request<Body>,
        peer: SocketAddr,
    ) -> ProxyReply {
        if declared_length(request.headers()).is_some_and(|n| n > self.body_limit as u64) {
            return ProxyReply::refused(ProxyOutcome::TooLarge, "body over server.body_limit");
        }
        // Streamed, so there is no body to wait for first: the permit is held from here until the
        // upstream's head is back (`upstream_timeout` bounds it).
        let Some(_admitted) = self.admission.try_admit() else {
            return Self::overloaded();
        };
        let (mut parts, body) = request.into_parts();
        let outcome = ProxyOutcome::PassedThrough;
        if let Err(detail) = self.upstream.prepare(&mut parts, peer) {
            return ProxyReply::refused(ProxyOutcome::Unavailable, detail);
        }
        let timer = RequestTimer::take(&mut parts.extensions);
        let request = Request::from_parts(parts, self.upstream.limit(body));
        let started = Instant::now();
        let timeout = self.upstream.timeout();
        let sending = std::pin::pin!(self.upstream.send(request));
        let result = timer
            .within(started + timeout, sending)
            .await
            .unwrap_or(Err(UpstreamError::Timeout(timeout)));
        self.metrics
            .upstream
            .record(started.elapsed().as_secs_f64());
        match result {
            Ok(response) => ProxyReply {
                outcome,
                ending: Ending::Upstream(downstream(response.map(Body::new))),
                detail: None,
            },
            Err(error) => failed(outcome, error),
        }
    }
}

/// A request that ended with an upstream failure (timeout, refused or reset connection).
pub(super) fn failed(outcome: ProxyOutcome, error: UpstreamError) -> ProxyReply {
    ProxyReply {
        outcome,
        detail: Some(error_chain(&error)),
        ending: Ending::Failed(error),
    }
}

/// An upstream response on its way to the client, without its hop-by-hop headers.
pub(super) fn downstream(mut response: Response<Body>) -> Response<Body> {
    upstream::strip_hop_by_hop(response.headers_mut());
    response
}
