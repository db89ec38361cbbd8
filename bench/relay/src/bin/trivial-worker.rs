//! The relay benchmark's worker: answers 200 to every POST at once and measures, per path, the
//! deliveries and their end-to-end latency — `X-Hookonce-Received-At` (unix ms, set by hookonce
//! when it received the webhook) to the moment the request arrived here, in microseconds. The
//! header has millisecond resolution, so each latency is over-estimated by less than 1 ms.
//!
//! `GET /stats` answers JSON per path: count, first and last arrival (unix ms), deliveries per
//! second between them, and latency percentiles in ms. `POST /reset` forgets everything.
//!
//! Usage: `trivial-worker LISTEN`

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;

#[derive(Default)]
struct PathStats {
    latencies_us: Vec<u64>,
    first_ms: u64,
    last_ms: u64,
}

type Stats = Arc<Mutex<BTreeMap<String, PathStats>>>;

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64
}

fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1] as f64 / 1000.0
}

fn report(stats: &Stats) -> String {
    let stats = stats.lock().unwrap();
    let mut out = serde_json::Map::new();
    for (path, s) in stats.iter() {
        let mut sorted = s.latencies_us.clone();
        sorted.sort_unstable();
        let span = s.last_ms.saturating_sub(s.first_ms).max(1) as f64 / 1000.0;
        out.insert(
            path.clone(),
            serde_json::json!({
                "count": sorted.len(),
                "first_ms": s.first_ms,
                "last_ms": s.last_ms,
                "per_second": sorted.len() as f64 / span,
                "p50_ms": percentile(&sorted, 50.0),
                "p90_ms": percentile(&sorted, 90.0),
                "p99_ms": percentile(&sorted, 99.0),
                "p999_ms": percentile(&sorted, 99.9),
                "max_ms": percentile(&sorted, 100.0),
            }),
        );
    }
    serde_json::Value::Object(out).to_string()
}

async fn handle(stats: Stats, request: Request<hyper::body::Incoming>) -> Response<Full<Bytes>> {
    let arrived = now_us();
    let path = request.uri().path().to_owned();
    match (request.method().as_str(), path.as_str()) {
        ("GET", "/stats") => return Response::new(Full::new(Bytes::from(report(&stats)))),
        ("POST", "/reset") => {
            stats.lock().unwrap().clear();
            return Response::new(Full::new(Bytes::new()));
        }
        _ => {}
    }
    let received_at: Option<u64> = request
        .headers()
        .get("x-hookonce-received-at")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok());
    let _ = request.into_body().collect().await;
    {
        let mut stats = stats.lock().unwrap();
        let s = stats.entry(path).or_default();
        let ms = arrived / 1000;
        if s.first_ms == 0 {
            s.first_ms = ms;
        }
        s.last_ms = ms;
        if let Some(at) = received_at {
            s.latencies_us.push(arrived.saturating_sub(at * 1000));
        }
    }
    Response::new(Full::new(Bytes::new()))
}

#[tokio::main]
async fn main() {
    let listen = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:8099".to_owned());
    let listener = tokio::net::TcpListener::bind(&listen).await.expect("bind");
    let stats: Stats = Stats::default();
    eprintln!("trivial-worker on {listen}");
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let stats = Arc::clone(&stats);
        tokio::spawn(async move {
            let service = service_fn(move |request| {
                let stats = Arc::clone(&stats);
                async move { Ok::<_, Infallible>(handle(stats, request).await) }
            });
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}
