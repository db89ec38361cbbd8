//! An in-process HTTP worker for the HTTP sink: records what it receives, can hold or fail requests.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::Router;
use tokio::sync::Semaphore;

/// One POST the worker received.
#[derive(Debug, Clone)]
pub struct Received {
    pub headers: HeaderMap,
    pub body: Bytes,
}

#[derive(Default)]
struct Shared {
    received: Mutex<Vec<Received>>,
    status: AtomicU16,
    /// When set, each request takes a permit before answering (0 permits = hold everything).
    gate: Mutex<Option<Arc<Semaphore>>>,
}

#[derive(Clone)]
pub struct Worker {
    shared: Arc<Shared>,
    pub addr: SocketAddr,
}

impl Worker {
    pub async fn start() -> Self {
        let shared = Arc::new(Shared::default());
        shared.status.store(200, Ordering::SeqCst);
        let app = Router::new()
            .route("/events", post(receive))
            .with_state(Arc::clone(&shared));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Self { shared, addr }
    }

    pub fn url(&self) -> String {
        format!("http://{}/events", self.addr)
    }

    /// The status the worker answers with from now on.
    pub fn answer(&self, status: u16) {
        self.shared.status.store(status, Ordering::SeqCst);
    }

    /// Holds every request until `release` is called.
    pub fn hold(&self) -> Arc<Semaphore> {
        let gate = Arc::new(Semaphore::new(0));
        *self.shared.gate.lock().unwrap() = Some(Arc::clone(&gate));
        gate
    }

    pub fn release(&self) {
        if let Some(gate) = self.shared.gate.lock().unwrap().take() {
            gate.add_permits(Semaphore::MAX_PERMITS / 2);
        }
    }

    pub fn received(&self) -> Vec<Received> {
        self.shared.received.lock().unwrap().clone()
    }
}

async fn receive(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> StatusCode {
    shared
        .received
        .lock()
        .unwrap()
        .push(Received { headers, body });
    let gate = shared.gate.lock().unwrap().clone();
    if let Some(gate) = gate {
        let _permit = gate.acquire().await;
    }
    StatusCode::from_u16(shared.status.load(Ordering::SeqCst)).unwrap()
}
