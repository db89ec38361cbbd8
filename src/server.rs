//! HTTP serving: routes, admission control, header-read timeout and graceful shutdown.
//!
//! Connections are served by hyper directly (rather than `axum::serve`) because hyper is where a
//! header-read timeout and a graceful, bounded drain can be set: a client that trickles its headers
//! is cut off, and SIGTERM stops accepting, lets in-flight requests finish, then returns. It is
//! also where a connection's error says that hyper refused a request head (400, 414, 431), which
//! is counted like the requests the router refuses (404, 405).
//!
//! Admission (`server.max_in_flight`) comes after a webhook's body is in, never before: a body is
//! read under its own deadline and memory budget (`webhooks::body`), so clients that send headers
//! and then stall cannot hold the permits that signed deliveries need.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, Request, State};
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;

use crate::app::App;
use crate::util::scopeguard;

/// The routes of the webhook listener.
pub fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/webhooks/{source}", post(webhook))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(ready))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(app)
}

/// The routes of the metrics listener.
pub fn metrics_router(app: Arc<App>) -> Router {
    Router::new()
        .route("/metrics", get(render_metrics))
        .with_state(app)
}

async fn webhook(
    State(app): State<Arc<App>>,
    source: Result<Path<String>, PathRejection>,
    request: Request<Body>,
) -> Response {
    // A name that does not decode (`/webhooks/%FF`) names no configured source.
    let source = source.map(|Path(name)| name).unwrap_or_default();
    let (parts, body) = request.into_parts();
    let received = match app.ingest.receive(source, parts.headers, body).await {
        Ok(received) => received,
        Err(answered) => return answered,
    };
    // The permit is taken only now that the body is in: a client that stalls its body has been
    // cut by its deadline above without ever holding one.
    let Ok(_permit) = app.in_flight.try_acquire() else {
        return app.ingest.overloaded(received);
    };
    app.metrics.in_flight.increment(1.0);
    let _in_flight = scopeguard(|| app.metrics.in_flight.decrement(1.0));
    app.ingest.process(received).await
}

/// Any path without a route; counted, so that scanners and misrouted providers show up.
async fn not_found(State(app): State<Arc<App>>, uri: Uri) -> StatusCode {
    app.ingest
        .refused(webhook_source(uri.path()), StatusCode::NOT_FOUND);
    StatusCode::NOT_FOUND
}

/// Another method on a route (`GET /webhooks/stripe`); the router adds the `Allow` header.
async fn method_not_allowed(State(app): State<Arc<App>>, uri: Uri) -> StatusCode {
    app.ingest
        .refused(webhook_source(uri.path()), StatusCode::METHOD_NOT_ALLOWED);
    StatusCode::METHOD_NOT_ALLOWED
}

/// The source segment of a webhook path, as written; `Ingest::refused` counts it only when it is
/// a configured name, so no raw path becomes a label value.
fn webhook_source(path: &str) -> Option<&str> {
    path.strip_prefix("/webhooks/")
}

/// The status hyper answered a request head it could not parse with (it answers those itself,
/// before any route), or `None` when it sent nothing: a connection that closed, broke or timed
/// out, or an HTTP/2 preface.
fn refused_status(error: &hyper::Error) -> Option<StatusCode> {
    if !error.is_parse() || error.is_parse_version_h2() || error.is_parse_status() {
        return None;
    }
    if error.is_parse_too_large() {
        // hyper answers 414 when the URI alone is over its limit and 431 when the whole head is;
        // its error tells the two apart only in its message.
        let uri = error.to_string().contains("URI");
        return Some(if uri {
            StatusCode::URI_TOO_LONG
        } else {
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE
        });
    }
    Some(StatusCode::BAD_REQUEST)
}

async fn ready(State(app): State<Arc<App>>) -> Response {
    if app.check_ready().await {
        (StatusCode::OK, "ready").into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "store unreachable").into_response()
    }
}

async fn render_metrics(State(app): State<Arc<App>>) -> Response {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        app.metrics.render(),
    )
        .into_response()
}

/// The two bound listeners; bind first so that port 0 can be resolved before serving.
pub struct Listeners {
    pub http: TcpListener,
    pub metrics: TcpListener,
}

impl Listeners {
    pub async fn bind(http: SocketAddr, metrics: SocketAddr) -> io::Result<Self> {
        Ok(Self {
            http: TcpListener::bind(http).await?,
            metrics: TcpListener::bind(metrics).await?,
        })
    }

    pub fn http_addr(&self) -> io::Result<SocketAddr> {
        self.http.local_addr()
    }

    pub fn metrics_addr(&self) -> io::Result<SocketAddr> {
        self.metrics.local_addr()
    }
}

/// Serves until `shutdown` resolves, then drains in-flight requests for up to
/// `server.shutdown_timeout` and returns.
pub async fn run(app: Arc<App>, listeners: Listeners, shutdown: impl Future<Output = ()>) {
    let header_timeout = app.settings.server.header_read_timeout.0;
    let drain = app.settings.server.shutdown_timeout.0;
    let graceful = GracefulShutdown::new();
    let webhooks = router(Arc::clone(&app));
    let metrics = metrics_router(Arc::clone(&app));
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (stream, router, counted) = tokio::select! {
            accepted = listeners.http.accept() => (accepted, &webhooks, Some(&app)),
            accepted = listeners.metrics.accept() => (accepted, &metrics, None),
            () = &mut shutdown => break,
        };
        let stream = match stream {
            Ok((stream, _)) => stream,
            Err(error) => {
                // Out of file descriptors and the like: back off instead of spinning.
                tracing::warn!(message = "Accept failed.", %error);
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(router.clone());
        let connection = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(header_timeout)
            .serve_connection(TokioIo::new(stream), service);
        let connection = graceful.watch(connection);
        // Only the webhook listener's refusals are counted: `/metrics` is not a webhook route.
        let counted = counted.map(Arc::clone);
        tokio::spawn(async move {
            if let (Err(error), Some(app)) = (connection.await, counted) {
                if let Some(status) = refused_status(&error) {
                    app.ingest.refused(None, status);
                }
            }
        });
    }
    drop(listeners);
    tracing::info!(message = "Shutting down: draining in-flight requests.", timeout = ?drain);
    if tokio::time::timeout(drain, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(message = "Shutdown timeout reached with requests still in flight.");
    }
}

/// Resolves on SIGTERM or SIGINT.
pub async fn termination_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
}
