//! HTTP serving: routes, admission control, header-read timeout and graceful shutdown.
//!
//! Connections are served by hyper directly (rather than `axum::serve`) because hyper is where a
//! header-read timeout and a graceful, bounded drain can be set: a client that trickles its headers
//! is cut off, and SIGTERM stops accepting, lets in-flight requests finish, then returns.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;

use crate::app::App;

/// The routes of the webhook listener.
pub fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/webhooks/{source}", post(webhook))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(ready))
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
    Path(source): Path<String>,
    request: Request<Body>,
) -> Response {
    let Ok(_permit) = app.in_flight.try_acquire() else {
        return app.ingest.overloaded(&source);
    };
    app.metrics.in_flight.increment(1.0);
    let _in_flight = scopeguard(|| app.metrics.in_flight.decrement(1.0));
    let (parts, body) = request.into_parts();
    app.ingest.handle(&source, parts.headers, body).await
}

/// Runs `f` when dropped, also when the request future is cancelled.
fn scopeguard(f: impl FnOnce()) -> impl Drop {
    struct Guard<F: FnOnce()>(Option<F>);
    impl<F: FnOnce()> Drop for Guard<F> {
        fn drop(&mut self) {
            if let Some(f) = self.0.take() {
                f();
            }
        }
    }
    Guard(Some(f))
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
        let (stream, router) = tokio::select! {
            accepted = listeners.http.accept() => (accepted, &webhooks),
            accepted = listeners.metrics.accept() => (accepted, &metrics),
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
        tokio::spawn(async move {
            let _ = connection.await;
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
