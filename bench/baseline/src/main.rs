//! SPEED-OF-LIGHT BASELINE (benchmark reference only): hookonce's design with none of its machinery.
//!
//! What it does, exactly as hookonce does: check the provider's HMAC over the raw body in
//! constant time (GitHub `X-Hub-Signature-256`; Stripe `t=…,v1=…` over `t.body` with the
//! timestamp tolerance; Adyen per-item signatures, every item of a batch), take the event ID,
//! then run the same Lua script (GET record → XADD → SET PX) by SHA on one multiplexed Redis
//! connection, and answer 200 with the provider's acknowledgement (`Idempotency-Replayed` on a
//! duplicate). What it leaves out on purpose: configuration, secrets rotation, metrics, logs,
//! timeouts, admission control, body limits beyond axum's default, graceful shutdown, error
//! bodies. The gap between hookonce and this is the price of that machinery.
//!
//! Usage: `hookonce-baseline LISTEN REDIS_URL` (secrets: the ones in bench/hookonce.toml).

use std::time::{SystemTime, UNIX_EPOCH};

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use base64::Engine;
use bytes::Bytes;
use hmac::{Hmac, Mac};
use redis::aio::MultiplexedConnection;
use redis::{Script, Value};
use serde::Deserialize;
use serde_json::value::RawValue;
use sha2::{Digest, Sha256};

/// The minimal form of hookonce's atomic-mode script (src/forward/atomic.rs): one event per call,
/// no body records, no coalescing: GET, then XADD and SET for a new event.
const FORWARD_SCRIPT: &str = r#"#!lua
local record = redis.call('GET', KEYS[1])
if record then
  return record
end
local id
if ARGV[3] == '0' then
  id = redis.call('XADD', KEYS[2], '*',
    'source', ARGV[4], 'provider', ARGV[5], 'event_id', ARGV[6],
    'event_type', ARGV[7], 'received_at', ARGV[8], 'body', ARGV[9])
else
  id = redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[3], '*',
    'source', ARGV[4], 'provider', ARGV[5], 'event_id', ARGV[6],
    'event_type', ARGV[7], 'received_at', ARGV[8], 'body', ARGV[9])
end
redis.call('SET', KEYS[1], id .. ' ' .. ARGV[1], 'PX', ARGV[2])
return {id}
"#;

const STRIPE_SECRET: &str = "whsec_bench_0123456789abcdefghijklmnop";
const GITHUB_SECRET: &str = "bench-github-secret";
const ADYEN_KEY_HEX: &str = "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056";
const TTL_MS: u64 = 4 * 24 * 3600 * 1000;

#[derive(Clone)]
struct App {
    redis: MultiplexedConnection,
    script: Script,
    adyen_key: Vec<u8>,
}

type HmacSha256 = Hmac<Sha256>;

fn mac(key: &[u8], parts: &[&[u8]]) -> HmacSha256 {
    let mut mac = HmacSha256::new_from_slice(key).expect("any key");
    for part in parts {
        mac.update(part);
    }
    mac
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl App {
    /// The claim-and-XADD of one event: Ok(true) when it was a duplicate.
    async fn forward(&self, source: &str, id: &str, kind: &str, body: &[u8]) -> Result<bool, ()> {
        let digest = Sha256::digest(body);
        let fingerprint = base64::engine::general_purpose::STANDARD_NO_PAD.encode(&digest[..16]);
        let mut redis = self.redis.clone();
        let reply: Value = self
            .script
            .key(format!("hookonce:{{{source}}}:d:{id}"))
            .key(format!("hookonce:{{{source}}}:events"))
            .arg(&fingerprint)
            .arg(TTL_MS)
            .arg(0)
            .arg(source)
            .arg(source)
            .arg(id)
            .arg(kind)
            .arg(unix_ms())
            .arg(body)
            .invoke_async(&mut redis)
            .await
            .map_err(|_| ())?;
        Ok(matches!(reply, Value::BulkString(_)))
    }
}

fn answer(result: Result<bool, ()>, ack: &'static str) -> Response {
    match result {
        Ok(false) => (StatusCode::OK, ack).into_response(),
        Ok(true) => (StatusCode::OK, [("idempotency-replayed", "true")], ack).into_response(),
        Err(()) => StatusCode::SERVICE_UNAVAILABLE.into_response(),
    }
}

async fn github(State(app): State<App>, headers: HeaderMap, body: Bytes) -> Response {
    let header = |name| headers.get(name).and_then(|v| v.to_str().ok());
    let Some(signature) = header("x-hub-signature-256")
        .and_then(|s| s.strip_prefix("sha256="))
        .and_then(|s| hex::decode(s).ok())
    else {
        return StatusCode::UNAUTHORIZED.into_response();
    };
    if mac(GITHUB_SECRET.as_bytes(), &[&body])
        .verify_slice(&signature)
        .is_err()
    {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    let (Some(id), kind) = (header("x-github-delivery"), header("x-github-event")) else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    let result = app.forward("github", id, kind.unwrap_or(""), &body).await;
    answer(result, "{\"received\":true}")
}

#[derive(Deserialize)]
struct StripeEvent<'a> {
    #[serde(borrow)]
    id: std::borrow::Cow<'a, str>,
    #[serde(borrow, rename = "type", default)]
    kind: std::borrow::Cow<'a, str>,
}

async fn stripe(State(app): State<App>, headers: HeaderMap, body: Bytes) -> Response {
    let Some(header) = headers
        .get("stripe-signature")
        .and_then(|v| v.to_str().ok())
    else {
        return StatusCode::UNAUTHORIZED.into_response();
    };
    let (mut timestamp, mut signatures) = ("", Vec::new());
    for item in header.split(',') {
        match item.split_once('=') {
            Some(("t", t)) => timestamp = t,
            Some(("v1", v)) => signatures.extend(hex::decode(v).ok()),
            _ => {}
        }
    }
    let signed = mac(
        STRIPE_SECRET.as_bytes(),
        &[timestamp.as_bytes(), b".", &body],
    );
    if !signatures
        .iter()
        .any(|s| signed.clone().verify_slice(s).is_ok())
    {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    let now = (unix_ms() / 1000) as i64;
    if timestamp
        .parse::<i64>()
        .map_or(true, |t| (now - t).abs() > 300)
    {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    let Ok(event) = serde_json::from_slice::<StripeEvent<'_>>(&body) else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    let result = app.forward("stripe", &event.id, &event.kind, &body).await;
    answer(result, "{\"received\":true}")
}

#[derive(Deserialize)]
struct Batch<'a> {
    #[serde(borrow, default)]
    live: Option<&'a RawValue>,
    #[serde(rename = "notificationItems", borrow)]
    items: Vec<Wrapper<'a>>,
}

#[derive(Deserialize)]
struct Wrapper<'a> {
    #[serde(rename = "NotificationRequestItem", borrow)]
    item: &'a RawValue,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct Item {
    psp_reference: String,
    original_reference: String,
    merchant_account_code: String,
    merchant_reference: String,
    amount: Amount,
    event_code: String,
    success: String,
    additional_data: AdditionalData,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Amount {
    value: i64,
    currency: String,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct AdditionalData {
    #[serde(rename = "hmacSignature")]
    hmac_signature: String,
}

async fn adyen(State(app): State<App>, body: Bytes) -> Response {
    let Ok(batch) = serde_json::from_slice::<Batch<'_>>(&body) else {
        return StatusCode::UNAUTHORIZED.into_response();
    };
    let mut events = Vec::with_capacity(batch.items.len());
    for wrapper in &batch.items {
        let Ok(item) = serde_json::from_str::<Item>(wrapper.item.get()) else {
            return StatusCode::UNAUTHORIZED.into_response();
        };
        let signed = format!(
            "{}:{}:{}:{}:{}:{}:{}:{}",
            item.psp_reference,
            item.original_reference,
            item.merchant_account_code,
            item.merchant_reference,
            item.amount.value,
            item.amount.currency,
            item.event_code,
            item.success
        );
        let signature = base64::engine::general_purpose::STANDARD
            .decode(&item.additional_data.hmac_signature)
            .unwrap_or_default();
        if mac(&app.adyen_key, &[signed.as_bytes()])
            .verify_slice(&signature)
            .is_err()
        {
            return StatusCode::UNAUTHORIZED.into_response();
        }
        let id = format!(
            "{}:{}:{}:{}",
            item.merchant_account_code, item.psp_reference, item.event_code, item.success
        );
        // The forwarded body is a one-item notification, the same bytes hookonce forwards.
        let mut one = Vec::with_capacity(wrapper.item.get().len() + 64);
        one.extend_from_slice(b"{\"live\":");
        one.extend_from_slice(batch.live.map_or("\"false\"", |l| l.get()).as_bytes());
        one.extend_from_slice(b",\"notificationItems\":[{\"NotificationRequestItem\":");
        one.extend_from_slice(wrapper.item.get().as_bytes());
        one.extend_from_slice(b"}]}");
        events.push((id, item.event_code, one));
    }
    let forwards = events
        .iter()
        .map(|(id, code, one)| app.forward("adyen", id, code, one));
    // Started together, the batch's scripts are pipelined on the one connection.
    let results = futures_util::future::join_all(forwards).await;
    let result = results
        .into_iter()
        .try_fold(true, |all, r| r.map(|d| all && d));
    answer(result, "[accepted]")
}

async fn route(
    state: State<App>,
    Path(source): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    match source.as_str() {
        "github" => github(state, headers, body).await,
        "stripe" => stripe(state, headers, body).await,
        "adyen" => adyen(state, body).await,
        _ => StatusCode::NOT_FOUND.into_response(),
    }
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let listen = args.next().unwrap_or_else(|| "127.0.0.1:18081".to_owned());
    let redis_url = args
        .next()
        .unwrap_or_else(|| "redis://127.0.0.1:16379".to_owned());
    let client = redis::Client::open(redis_url).expect("Redis URL");
    let mut redis = client
        .get_multiplexed_async_connection()
        .await
        .expect("connect to Redis");
    let script = Script::new(FORWARD_SCRIPT);
    script
        .prepare_invoke()
        .load_async(&mut redis)
        .await
        .expect("load script");
    let app = App {
        redis,
        script,
        adyen_key: hex::decode(ADYEN_KEY_HEX).expect("hex key"),
    };
    let router = Router::new()
        .route("/webhooks/{source}", post(route))
        .with_state(app);
    let listener = tokio::net::TcpListener::bind(&listen).await.expect("bind");
    axum::serve(listener, router).await.expect("serve");
}
