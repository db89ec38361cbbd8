//! The HTTP client of the daemon's outgoing hops to a team's own services: the proxy's upstream
//! and the relay's workers. One pool of keep-alive HTTP/1.1 connections, plain or TLS (rustls,
//! the public CAs), `TCP_NODELAY` on, no redirects followed (a worker or upstream that redirects
//! is misconfigured, and following would resend the body elsewhere).
//!
//! hyper's own pooled client rather than reqwest's: reqwest parses the request's URL again from
//! text twice per request (its redirect layer and its response), a tenth of a relayed event's
//! instructions; here a request goes out with the `http::Uri` it was built with.

use std::time::Duration;

use axum::body::Body;
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};

/// Idle pooled connections are closed after this long; a peer closing first is handled (a
/// request never sent is retried on a fresh connection).
const POOL_IDLE: Duration = Duration::from_secs(60);

/// The pooled client type.
pub type Pooled = Client<HttpsConnector<HttpConnector>, Body>;

/// A pooled client whose connection attempts give up after `connect_timeout` (none: only the
/// caller's deadline bounds them), keeping at most `max_idle_per_host` idle connections per peer.
pub fn pooled(connect_timeout: Option<Duration>, max_idle_per_host: usize) -> Pooled {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_connect_timeout(connect_timeout);
    let connector = HttpsConnectorBuilder::new()
        .with_webpki_roots()
        .https_or_http()
        .enable_http1()
        .wrap_connector(http);
    Client::builder(TokioExecutor::new())
        .pool_timer(TokioTimer::new())
        .pool_idle_timeout(POOL_IDLE)
        .pool_max_idle_per_host(max_idle_per_host)
        .build(connector)
}
