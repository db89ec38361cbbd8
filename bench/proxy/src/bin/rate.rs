//! An open-loop client at a fixed rate (wrk2 is not packaged in Debian): request `i` is due at
//! `start + i / RATE` and its latency is measured from that instant, not from when it was sent,
//! so a slow answer cannot hide the requests queued behind it (no coordinated omission). Each
//! request is a POST with a fresh `Idempotency-Key` unless KEY is given.
//!
//! Usage: `rate URL RATE SECONDS [KEY]`; prints one JSON line: sent, ok (2xx), p50/p90/p99 in µs.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

const BODY: &[u8] = br#"{"sku":"sku_42","quantity":1,"customer":"cus_0123456789"}"#;

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [url, rate, seconds, rest @ ..] = args.as_slice() else {
        panic!("usage: rate URL RATE SECONDS [KEY]");
    };
    let rate: f64 = rate.parse().unwrap();
    let seconds: f64 = seconds.parse().unwrap();
    let fixed_key = rest.first().cloned();
    let run: u64 = rand::random();
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build(connector);
    let total = (rate * seconds) as u64;
    let start = Instant::now() + Duration::from_millis(100);
    let mut tasks = Vec::with_capacity(total as usize);
    for i in 0..total {
        let due = start + Duration::from_secs_f64(i as f64 / rate);
        tokio::time::sleep_until(due.into()).await;
        let key = fixed_key
            .clone()
            .unwrap_or_else(|| format!("rate-{run:x}-{i}"));
        let request = hyper::Request::post(url.as_str())
            .header("content-type", "application/json")
            .header("authorization", "Bearer bench")
            .header("idempotency-key", key)
            .body(Full::new(Bytes::from_static(BODY)))
            .unwrap();
        let client = client.clone();
        tasks.push(tokio::spawn(async move {
            let ok = match client.request(request).await {
                Ok(response) => {
                    let ok = response.status().is_success();
                    ok && response.into_body().collect().await.is_ok()
                }
                Err(_) => false,
            };
            (ok, due.elapsed())
        }));
    }
    let mut latencies = Vec::with_capacity(tasks.len());
    let mut ok = 0u64;
    for task in tasks {
        let (success, latency) = task.await.unwrap();
        ok += u64::from(success);
        latencies.push(latency.as_micros() as u64);
    }
    latencies.sort_unstable();
    let at = |q: f64| latencies[((latencies.len() as f64 * q) as usize).min(latencies.len() - 1)];
    println!(
        r#"{{"sent":{},"ok":{ok},"p50_us":{},"p90_us":{},"p99_us":{}}}"#,
        latencies.len(),
        at(0.5),
        at(0.9),
        at(0.99)
    );
}
