//! HTTP serving: routes, admission control, header-read timeout, lingering close and graceful
//! shutdown.
//!
//! Connections are served by hyper directly (rather than `axum::serve`) because hyper is where a
//! header-read timeout and a graceful, bounded drain can be set: a client that trickles its headers
//! is cut off, and SIGTERM stops accepting, lets in-flight requests finish, then returns. It is
//! also where a connection's error says that hyper refused a request head (400, 414, 431), which
//! is counted like the requests the router refuses (404, 405).
//!
//! Admission (`server.max_in_flight`, one pool for every listener: `crate::admission`) comes after
//! a webhook's or a keyed proxy request's body is in, never before: a body is read under its own
//! deadline and memory budget (`crate::body`), so clients that send headers and then stall cannot
//! hold the permits that signed deliveries and keyed requests need.
//!
//! Listeners: the webhook listener (`server.listen`), the metrics listener
//! (`server.metrics_listen`) and one per Idempotency-Key proxy (`proxies.NAME.listen`), which
//! forwards every path. Bind them first, so that port 0 resolves before serving:
//!
//! - [`Listeners::bind_for`]`(&settings)` binds all of them; [`Listeners::bind`]`(http, metrics)`
//!   binds only the first two (a configuration without proxies).
//! - [`Listeners::http_addr`], [`Listeners::metrics_addr`] and
//!   [`Listeners::proxy_addr`]`("orders") -> io::Result<SocketAddr>` give the bound addresses.
//! - [`run`]`(app, listeners, shutdown)` serves them all; a proxy listener without a proxy of
//!   its name in `app` is closed with a warning.

mod linger;

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{ConnectInfo, Path, Request, State};
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tower::ServiceExt;

use crate::app::App;
use crate::config::Settings;
use crate::proxy::Proxy;
use crate::timer::{HeadTimer, RequestTimer};

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
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    source: Result<Path<String>, PathRejection>,
    request: Request<Body>,
) -> Response {
    // A name that does not decode (`/webhooks/%FF`) names no configured source.
    let source = source.map(|Path(name)| name).unwrap_or_default();
    let (mut parts, body) = request.into_parts();
    let timer = RequestTimer::take(&mut parts.extensions);
    let received = match app
        .ingest
        .receive(source, peer.ip(), parts.headers, body, timer)
        .await
    {
        Ok(received) => received,
        Err(answered) => return answered,
    };
    // The permit is taken only now that the body is in: a client that stalls its body has been
    // cut by its deadline above without ever holding one.
    let Some(_admitted) = app.admission.try_admit() else {
        return app.ingest.overloaded(received);
    };
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

/// The router of one proxy's listener: every method and path goes to the proxy, which takes its
/// admission permit itself (after a keyed request's body is in).
pub fn proxy_router(proxy: Arc<Proxy>) -> Router {
    Router::new().fallback(proxied).with_state(proxy)
}

async fn proxied(
    State(proxy): State<Arc<Proxy>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    request: Request<Body>,
) -> Response {
    proxy.handle(request, peer).await
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

/// The bound listeners; bind first so that port 0 can be resolved before serving.
pub struct Listeners {
    pub http: TcpListener,
    pub metrics: TcpListener,
    /// One per configured proxy, by name.
    pub proxies: Vec<(String, TcpListener)>,
    /// The console's (`console.listen`).
    pub console: Option<TcpListener>,
}

impl Listeners {
    /// The webhook and metrics listeners only.
    pub async fn bind(http: SocketAddr, metrics: SocketAddr) -> io::Result<Self> {
        Ok(Self {
            http: TcpListener::bind(http).await?,
            metrics: TcpListener::bind(metrics).await?,
            proxies: Vec::new(),
            console: None,
        })
    }

    /// Every listener `settings` names: webhooks, metrics and each proxy's.
    pub async fn bind_for(settings: &Settings) -> io::Result<Self> {
        let mut listeners =
            Self::bind(settings.server.listen, settings.server.metrics_listen).await?;
        for (name, proxy) in &settings.proxies {
            let listener = TcpListener::bind(proxy.listen).await.map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("proxies.{name}.listen = {}: {e}", proxy.listen),
                )
            })?;
            listeners.proxies.push((name.clone(), listener));
        }
        if let Some(listen) = settings.console.listen {
            let listener = TcpListener::bind(listen)
                .await
                .map_err(|e| io::Error::new(e.kind(), format!("console.listen = {listen}: {e}")))?;
            listeners.console = Some(listener);
        }
        Ok(listeners)
    }

    pub fn http_addr(&self) -> io::Result<SocketAddr> {
        self.http.local_addr()
    }

    pub fn metrics_addr(&self) -> io::Result<SocketAddr> {
        self.metrics.local_addr()
    }

    /// The bound address of the console's listener.
    pub fn console_addr(&self) -> io::Result<SocketAddr> {
        self.console
            .as_ref()
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no console listener"))?
            .local_addr()
    }

    /// The bound address of the proxy `name`'s listener.
    pub fn proxy_addr(&self, name: &str) -> io::Result<SocketAddr> {
        self.proxies
            .iter()
            .find(|(n, _)| n == name)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("no proxy {name:?}")))?
            .1
            .local_addr()
    }
}

/// Serves until `shutdown` resolves, then drains in-flight requests for up to
/// `server.shutdown_timeout` and returns.
pub async fn run(app: Arc<App>, listeners: Listeners, shutdown: impl Future<Output = ()>) {
    let drain = app.settings.server.shutdown_timeout.0;
    // Only the webhook listener's refusals are counted (`/metrics` is not a webhook route, and
    // a proxy counts its own requests).
    let mut served = vec![
        (listeners.http, router(Arc::clone(&app)), Kind::Webhooks),
        (
            listeners.metrics,
            metrics_router(Arc::clone(&app)),
            Kind::Other,
        ),
    ];
    for (name, listener) in listeners.proxies {
        match app.proxy(&name) {
            Some(proxy) => {
                let router = proxy_router(Arc::clone(proxy));
                served.push((listener, router, Kind::Proxy));
            }
            None => tracing::warn!(
                message = "No proxy of this name; its listener is closed.",
                proxy = name
            ),
        }
    }
    if let (Some(listener), Some(console)) = (listeners.console, &app.console) {
        served.push((
            listener,
            crate::console::router(Arc::clone(console)),
            Kind::Other,
        ));
    }
    let graceful = Arc::new(GracefulShutdown::new());
    let (stop, stopped) = watch::channel(false);
    let mut loops = tokio::task::JoinSet::new();
    for (listener, router, kind) in served {
        let graceful = Arc::clone(&graceful);
        let served = Served { router, kind };
        loops.spawn(accept_loop(
            Arc::clone(&app),
            listener,
            served,
            graceful,
            stopped.clone(),
        ));
    }
    shutdown.await;
    // The relay drains its deliveries while the listeners drain their requests.
    let relay = tokio::spawn({
        let app = Arc::clone(&app);
        async move { app.stop_relay().await }
    });
    // Stop accepting on every listener before draining, so that no connection is watched late.
    let _ = stop.send(true);
    while loops.join_next().await.is_some() {}
    tracing::info!(message = "Shutting down: draining in-flight requests.", timeout = ?drain);
    // Every accept loop has ended and dropped its handle, so this is the last one.
    let drained = match Arc::try_unwrap(graceful) {
        Ok(graceful) => tokio::time::timeout(drain, graceful.shutdown())
            .await
            .is_ok(),
        Err(_) => false,
    };
    if !drained {
        tracing::warn!(message = "Shutdown timeout reached with requests still in flight.");
    }
    let _ = relay.await;
}

/// What one listener serves: its router, and its [`Kind`] (whether the requests hyper refuses on
/// it are counted, and whether its requests carry their connection's [`RequestTimer`]).
struct Served {
    router: Router,
    kind: Kind,
}

/// What a listener serves.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Webhooks: the requests hyper refuses are counted, and each request carries its
    /// connection's [`RequestTimer`].
    Webhooks,
    /// A proxy: each request carries its connection's [`RequestTimer`].
    Proxy,
    /// Metrics, the console.
    Other,
}

/// The most a connection's read buffer grows to; hyper's default is about 400 KiB. hyper grows
/// it while a client sends faster than it is read, and it is not part of
/// `server.body_memory_limit`: this bounds what each connection can hold beside its body. 96 KiB
/// still takes a head with a URI as long as hyper allows (64 KiB; a longer one is answered 414),
/// and a larger head is answered 431.
const READ_BUFFER_MAX: usize = 96 * 1024;

/// Accepts connections on one listener until `stopped` turns true, serving each with its router;
/// the peer's address reaches handlers as `ConnectInfo`, and on the webhook and proxy listeners
/// the connection's [`RequestTimer`] as an extension of its own.
fn accept_loop(
    app: Arc<App>,
    listener: TcpListener,
    served: Served,
    graceful: Arc<GracefulShutdown>,
    mut stopped: watch::Receiver<bool>,
) -> impl Future<Output = ()> + Send + 'static {
    let server = &app.settings.server;
    let header_timeout = server.header_read_timeout.0;
    let drain = linger::Drain::for_limits(server.body_limit.0, server.body_read_timeout.0);
    async move {
        loop {
            let accepted = tokio::select! {
                accepted = listener.accept() => accepted,
                _ = stopped.wait_for(|stop| *stop) => return,
            };
            let (stream, peer) = match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(message = "Accept failed.", %error);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            let timer = (served.kind != Kind::Other).then(RequestTimer::default);
            let service = served.router.clone().map_request(
                move |mut request: Request<hyper::body::Incoming>| {
                    request.extensions_mut().insert(ConnectInfo(peer));
                    if let Some(timer) = &timer {
                        request.extensions_mut().insert(timer.clone());
                    }
                    let expects_continue = request
                        .headers()
                        .get(axum::http::header::EXPECT)
                        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
                    request.map(|body| linger::Lingering::new(body, drain, expects_continue))
                },
            );
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(HeadTimer::default())
                .header_read_timeout(header_timeout)
                .max_buf_size(READ_BUFFER_MAX)
                .serve_connection(TokioIo::new(stream), TowerToHyperService::new(service));
            let connection = graceful.watch(connection);
            let counted = (served.kind == Kind::Webhooks).then(|| Arc::clone(&app));
            tokio::spawn(async move {
                if let (Err(error), Some(app)) = (connection.await, counted) {
                    if let Some(status) = refused_status(&error) {
                        app.ingest.refused(None, status);
                    }
                }
            });
        }
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
