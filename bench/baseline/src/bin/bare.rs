//! BARE HANDLER (benchmark reference only): the least a webhook deduplicator can do per request.
//!
//! axum 0.8, HMAC-SHA256 over the body (GitHub's `X-Hub-Signature-256`), then one `EVALSHA` of
//! `if SET <dd:id> <id> NX PX <ttl> then return XADD <stream> * id <id> body <body> end` on one
//! multiplexed redis-rs connection. No configuration, metrics, logs, timeouts, admission,
//! coalescing or provider layer: hookonce's CPU per request is measured against this one
//! (BENCHMARKS.md), beside the heavier baseline (`hookonce-baseline`), which runs hookonce's own
//! script.
//!
//! Usage: `hookonce-bare LISTEN REDIS_URL` (the GitHub secret of bench/hookonce.toml; events go
//! to `hookonce:{github}:events`, so the benchmarks count them as they count hookonce's).

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::Router;
use bytes::Bytes;
use hmac::{Hmac, Mac};
use redis::aio::MultiplexedConnection;
use redis::{Script, Value};
use sha2::Sha256;

const SCRIPT: &str = r#"
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return redis.call('XADD', KEYS[2], '*', 'id', ARGV[1], 'body', ARGV[3])
end
return false
"#;

const GITHUB_SECRET: &[u8] = b"bench-github-secret";
const TTL_MS: u64 = 4 * 24 * 3600 * 1000;
const STREAM: &str = "hookonce:{github}:events";

#[derive(Clone)]
struct App {
    redis: MultiplexedConnection,
    script: Script,
}

async fn github(State(app): State<App>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let header = |name| headers.get(name).and_then(|v| v.to_str().ok());
    let Some(signature) = header("x-hub-signature-256")
        .and_then(|s| s.strip_prefix("sha256="))
        .and_then(|s| hex::decode(s).ok())
    else {
        return StatusCode::UNAUTHORIZED;
    };
    let mut mac = Hmac::<Sha256>::new_from_slice(GITHUB_SECRET).expect("any key");
    mac.update(&body);
    if mac.verify_slice(&signature).is_err() {
        return StatusCode::UNAUTHORIZED;
    }
    let Some(id) = header("x-github-delivery") else {
        return StatusCode::BAD_REQUEST;
    };
    let mut redis = app.redis.clone();
    let reply: Result<Value, _> = app
        .script
        .key(format!("dd:{id}"))
        .key(STREAM)
        .arg(id)
        .arg(TTL_MS)
        .arg(body.as_ref())
        .invoke_async(&mut redis)
        .await;
    match reply {
        Ok(_) => StatusCode::OK,
        Err(_) => StatusCode::SERVICE_UNAVAILABLE,
    }
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let listen = args.next().unwrap_or_else(|| "127.0.0.1:8090".to_owned());
    let url = args
        .next()
        .unwrap_or_else(|| "redis://127.0.0.1:6379".to_owned());
    let client = redis::Client::open(url).expect("a Redis URL");
    let redis = client
        .get_multiplexed_async_connection()
        .await
        .expect("Redis reachable");
    let app = App {
        redis,
        script: Script::new(SCRIPT),
    };
    let router = Router::new()
        .route("/webhooks/github", post(github))
        .with_state(app);
    let listener = tokio::net::TcpListener::bind(&listen)
        .await
        .expect("listen address free");
    axum::serve(listener, router).await.expect("serve");
}
