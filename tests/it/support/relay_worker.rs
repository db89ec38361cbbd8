//! An HTTP worker for the relay: records every delivery (path, headers, body, the status it
//! answered), answers as scripted per route and event (fail N times, 429/503 with `Retry-After`,
//! a poison event that always fails), can hold requests in flight, and can be stopped (every open
//! connection closed) and restarted on the same port. With [`RelayWorker::record_to`] it also
//! appends one JSON line per delivery to a file, the record `hookonce-loadgen audit-relay` reads.
//!
//! One worker serves any number of routes: a route's URL is [`RelayWorker::url`]`(route)`, so the
//! first path segment of each delivery names the route it was sent for.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io::Write;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use hookonce::util::unix_ms;

use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Router;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio::sync::{Notify, Semaphore};
use tokio::task::JoinHandle;

/// One answer of the worker: a status and, optionally, `Retry-After` in seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    pub retry_after: Option<u64>,
}

impl Answer {
    pub const OK: Answer = Answer::status(200);

    pub const fn status(status: u16) -> Self {
        Self {
            status,
            retry_after: None,
        }
    }

    pub const fn retry_after(status: u16, seconds: u64) -> Self {
        Self {
            status,
            retry_after: Some(seconds),
        }
    }
}

/// One POST the worker received, and what it answered.
#[derive(Debug, Clone)]
pub struct Delivery {
    /// The route: the first path segment.
    pub route: String,
    pub headers: HeaderMap,
    pub body: Bytes,
    pub status: u16,
    /// Wall clock at arrival, unix ms.
    pub at_ms: u64,
    pub at: Instant,
}

impl Delivery {
    /// A header's value, "" when absent.
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .map(|v| v.to_str().unwrap())
            .unwrap_or("")
    }

    pub fn event_id(&self) -> &str {
        self.header("x-hookonce-event-id")
    }

    pub fn key(&self) -> &str {
        self.header("idempotency-key")
    }

    /// `X-Hookonce-Attempt`, 0 when absent or not a number.
    pub fn attempt(&self) -> u32 {
        self.header("x-hookonce-attempt").parse().unwrap_or(0)
    }

    pub fn ok(&self) -> bool {
        (200..300).contains(&self.status)
    }
}

#[derive(Default)]
struct Shared {
    deliveries: Mutex<Vec<Delivery>>,
    default: Mutex<Option<Answer>>,
    /// Answers still to give, per (route, event ID), before the default.
    scripted: Mutex<HashMap<(String, String), VecDeque<Answer>>>,
    /// Answers given to every delivery of (route, event ID) until healed.
    poisoned: Mutex<HashMap<(String, String), Answer>>,
    gate: Mutex<Option<Arc<Semaphore>>>,
    record: Mutex<Option<std::fs::File>>,
    arrived: Notify,
}

/// A worker on a fixed loopback port; stopped when dropped.
pub struct RelayWorker {
    shared: Arc<Shared>,
    pub addr: SocketAddr,
    server: Mutex<Option<JoinHandle<()>>>,
}

impl RelayWorker {
    /// Starts on a free loopback port, answering 200 to everything.
    pub async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared::default());
        *shared.default.lock().unwrap() = Some(Answer::OK);
        let worker = Self {
            shared,
            addr,
            server: Mutex::new(None),
        };
        worker.serve(listener);
        worker
    }

    fn serve(&self, listener: tokio::net::TcpListener) {
        let app = Router::new()
            .fallback(receive)
            .with_state(Arc::clone(&self.shared));
        let task = tokio::spawn(async move {
            // Connections live in this set, so aborting the accept task closes them all.
            let mut connections = tokio::task::JoinSet::new();
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let service = TowerToHyperService::new(app.clone());
                connections.spawn(async move {
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
                while connections.try_join_next().is_some() {}
            }
        });
        *self.server.lock().unwrap() = Some(task);
    }

    /// The URL of `route` on this worker.
    pub fn url(&self, route: &str) -> String {
        format!("http://{}/{route}", self.addr)
    }

    /// Appends one JSON line per delivery to `path` from now on.
    pub fn record_to(&self, path: &Path) {
        let file = std::fs::File::options()
            .create(true)
            .append(true)
            .open(path)
            .unwrap();
        *self.shared.record.lock().unwrap() = Some(file);
    }

    /// Stops listening and closes every open connection (a request in flight gets no answer).
    pub async fn stop(&self) {
        let task = self.server.lock().unwrap().take();
        if let Some(task) = task {
            task.abort();
            let _ = task.await;
        }
    }

    /// Listens again on the same port.
    pub async fn restart(&self) {
        self.stop().await;
        let listener = tokio::net::TcpListener::bind(self.addr).await.unwrap();
        self.serve(listener);
    }

    /// What every delivery without a scripted answer gets from now on.
    pub fn answer(&self, answer: Answer) {
        *self.shared.default.lock().unwrap() = Some(answer);
    }

    /// The next deliveries of `event_id` on `route` get these answers, in order, then the default.
    pub fn script(&self, route: &str, event_id: &str, answers: &[Answer]) {
        self.shared.scripted.lock().unwrap().insert(
            (route.to_owned(), event_id.to_owned()),
            answers.iter().copied().collect(),
        );
    }

    /// Every delivery of `event_id` on `route` gets `answer` until [`RelayWorker::heal`].
    pub fn poison(&self, route: &str, event_id: &str, answer: Answer) {
        self.shared
            .poisoned
            .lock()
            .unwrap()
            .insert((route.to_owned(), event_id.to_owned()), answer);
    }

    pub fn heal(&self, route: &str, event_id: &str) {
        self.shared
            .poisoned
            .lock()
            .unwrap()
            .remove(&(route.to_owned(), event_id.to_owned()));
    }

    /// Holds every request (after recording it) until [`RelayWorker::release`].
    pub fn hold(&self) {
        *self.shared.gate.lock().unwrap() = Some(Arc::new(Semaphore::new(0)));
    }

    pub fn release(&self) {
        if let Some(gate) = self.shared.gate.lock().unwrap().take() {
            gate.add_permits(Semaphore::MAX_PERMITS / 2);
        }
    }

    /// Every delivery so far, in arrival order.
    pub fn deliveries(&self) -> Vec<Delivery> {
        self.shared.deliveries.lock().unwrap().clone()
    }

    /// The deliveries sent for `route`.
    pub fn to(&self, route: &str) -> Vec<Delivery> {
        self.deliveries()
            .into_iter()
            .filter(|d| d.route == route)
            .collect()
    }

    /// The deliveries of `event_id` sent for `route`.
    pub fn of(&self, route: &str, event_id: &str) -> Vec<Delivery> {
        self.to(route)
            .into_iter()
            .filter(|d| d.event_id() == event_id)
            .collect()
    }

    /// Per event ID, how many times `route` had it answered 2xx.
    pub fn acknowledged(&self, route: &str) -> BTreeMap<String, usize> {
        let mut counts = BTreeMap::new();
        for delivery in self.to(route).into_iter().filter(Delivery::ok) {
            *counts.entry(delivery.event_id().to_owned()).or_default() += 1;
        }
        counts
    }

    /// Waits up to `seconds` until `route` has acknowledged every one of `ids` at least once.
    pub async fn wait_acknowledged(&self, route: &str, ids: &[String], seconds: u64) {
        super::eventually(seconds, &format!("{route} to acknowledge {ids:?}"), || {
            let acknowledged = self.acknowledged(route);
            let done = ids.iter().all(|id| acknowledged.contains_key(id));
            async move { done }
        })
        .await;
    }

    /// Waits up to `seconds` for at least `n` deliveries in all.
    pub async fn wait_deliveries(&self, n: usize, seconds: u64) {
        let deadline = Instant::now() + std::time::Duration::from_secs(seconds);
        loop {
            let arrived = self.shared.arrived.notified();
            if self.shared.deliveries.lock().unwrap().len() >= n {
                return;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "timed out waiting for {n} deliveries: {:?}",
                self.summary()
            );
            let _ = tokio::time::timeout(left, arrived).await;
        }
    }

    /// (route, event ID, attempt, status) of every delivery, for failure messages.
    pub fn summary(&self) -> Vec<(String, String, u32, u16)> {
        self.deliveries()
            .iter()
            .map(|d| {
                (
                    d.route.clone(),
                    d.event_id().to_owned(),
                    d.attempt(),
                    d.status,
                )
            })
            .collect()
    }
}

impl Drop for RelayWorker {
    fn drop(&mut self) {
        if let Some(task) = self.server.lock().unwrap().take() {
            task.abort();
        }
    }
}

async fn receive(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let at = Instant::now();
    let at_ms = unix_ms();
    let (parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, usize::MAX)
        .await
        .unwrap_or_default();
    let route = parts
        .uri
        .path()
        .trim_start_matches('/')
        .split('/')
        .next()
        .unwrap_or("")
        .to_owned();
    let event_id = parts
        .headers
        .get("x-hookonce-event-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let slot = (route.clone(), event_id);
    let answer = {
        let poisoned = shared.poisoned.lock().unwrap().get(&slot).copied();
        let scripted = shared
            .scripted
            .lock()
            .unwrap()
            .get_mut(&slot)
            .and_then(VecDeque::pop_front);
        poisoned
            .or(scripted)
            .unwrap_or_else(|| shared.default.lock().unwrap().unwrap_or(Answer::OK))
    };
    let delivery = Delivery {
        route,
        headers: parts.headers,
        body,
        status: answer.status,
        at_ms,
        at,
    };
    if let Some(file) = shared.record.lock().unwrap().as_mut() {
        let line = serde_json::json!({
            "route": delivery.route,
            "source": delivery.header("x-hookonce-source"),
            "event_id": delivery.event_id(),
            "event_type": delivery.header("x-hookonce-event-type"),
            "idempotency_key": delivery.key(),
            "attempt": delivery.attempt(),
            "status": delivery.status,
            "at_ms": delivery.at_ms,
        });
        writeln!(file, "{line}").unwrap();
    }
    shared.deliveries.lock().unwrap().push(delivery);
    shared.arrived.notify_waiters();
    let gate = shared.gate.lock().unwrap().clone();
    if let Some(gate) = gate {
        let _permit = gate.acquire().await;
    }
    let mut response = StatusCode::from_u16(answer.status).unwrap().into_response();
    if let Some(seconds) = answer.retry_after {
        response
            .headers_mut()
            .insert("retry-after", HeaderValue::from(seconds));
    }
    response
}

/// Checks a delivery signed with a Standard Webhooks secret (`whsec_` + base64 key) by the
/// specification's rules, computed here rather than with hookonce's code: `webhook-signature`
/// holds a `v1,<base64 HMAC-SHA256 of "{webhook-id}.{webhook-timestamp}.{body}">`, and the
/// timestamp is within five minutes of now.
pub fn verify_standard_webhook(secret: &str, delivery: &Delivery) -> Result<(), String> {
    use base64::Engine;
    use hmac::{Hmac, Mac};
    let engine = base64::engine::general_purpose::STANDARD;
    let key = secret
        .strip_prefix("whsec_")
        .ok_or("the secret has no whsec_ prefix")?;
    let key = engine.decode(key).map_err(|e| format!("secret: {e}"))?;
    let id = delivery.header("webhook-id");
    let timestamp = delivery.header("webhook-timestamp");
    if id.is_empty() || timestamp.is_empty() {
        return Err("webhook-id or webhook-timestamp missing".to_owned());
    }
    let seconds: i64 = timestamp
        .parse()
        .map_err(|_| format!("webhook-timestamp {timestamp:?} is not a number"))?;
    if (seconds - super::now_unix()).abs() > 300 {
        return Err(format!(
            "webhook-timestamp {seconds} is not within 5 minutes"
        ));
    }
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(&key).unwrap();
    mac.update(format!("{id}.{timestamp}.").as_bytes());
    mac.update(&delivery.body);
    let expected = engine.encode(mac.finalize().into_bytes());
    let signatures = delivery.header("webhook-signature");
    if signatures
        .split(' ')
        .filter_map(|s| s.strip_prefix("v1,"))
        .any(|s| s == expected)
    {
        Ok(())
    } else {
        Err(format!("no v1 signature matches in {signatures:?}"))
    }
}
