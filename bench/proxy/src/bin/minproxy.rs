//! SPEED-OF-LIGHT IDEMPOTENCY-KEY PROXY (benchmark reference only): the proxy's design with none
//! of hookonce's machinery.
//!
//! What it does, as the design does: hash the principal (`Authorization`) into the scope, take a
//! SHA-256 fingerprint of method, path, query and body, run one claim script (absent → processing
//! with a token and a lease; completed → the stored response; processing → 409; another
//! fingerprint → 422), forward the request to the upstream over pooled keep-alive connections,
//! then run one complete script (compare the token, store status, headers and body for the ttl)
//! and answer. A replay answers the stored response plus `Idempotency-Replayed: true`. What it
//! leaves out on purpose: configuration, key validation, routes, hop-by-hop handling,
//! X-Forwarded-*, timeouts, release on retryable answers, lease takeover, metrics, logs, error
//! bodies. The gap between hookonce and this is the price of that machinery.
//!
//! Usage: `minproxy LISTEN UPSTREAM_HOST:PORT REDIS_URL`

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Router;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use redis::aio::MultiplexedConnection;
use redis::Script;
use sha2::{Digest, Sha256};

/// absent → processing (token, fingerprint, lease); completed → the stored response.
const CLAIM: &str = r#"
local state = redis.call('HMGET', KEYS[1], 'fp', 'status', 'headers', 'body')
if not state[1] then
  redis.call('HSET', KEYS[1], 'fp', ARGV[2], 'token', ARGV[1])
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return {'claimed'}
end
if state[1] ~= ARGV[2] then return {'mismatch'} end
if state[2] then return {'done', state[2], state[3], state[4]} end
return {'busy'}
"#;

/// processing (our token) → completed with the response, for the ttl.
const COMPLETE: &str = r#"
if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'status', ARGV[2], 'headers', ARGV[3], 'body', ARGV[4])
redis.call('HDEL', KEYS[1], 'token')
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return 1
"#;

const LEASE_MS: u64 = 30_000;
const TTL_MS: u64 = 24 * 3600 * 1000;

struct App {
    redis: MultiplexedConnection,
    claim: Script,
    complete: Script,
    client: Client<HttpConnector, Full<Bytes>>,
    upstream: String,
}

fn sha(parts: &[&[u8]]) -> String {
    let mut hash = Sha256::new();
    for part in parts {
        hash.update((part.len() as u64).to_be_bytes());
        hash.update(part);
    }
    hex::encode(hash.finalize())
}

async fn handle(State(app): State<Arc<App>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    let target = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_owned();
    let key = parts.headers.get("idempotency-key").cloned();
    let Some(key) = key.filter(|_| parts.method == "POST") else {
        let (status, headers, body) = forward(&app, &parts, &target, body).await;
        return respond(status, &headers, body, false);
    };
    let principal = parts
        .headers
        .get("authorization")
        .map_or(&b""[..], |v| v.as_bytes());
    let path = parts.uri.path().as_bytes();
    let scope = sha(&[principal]);
    let redis_key = format!(
        "mp:{{p:bench}}:{}",
        sha(&[
            scope.as_bytes(),
            parts.method.as_str().as_bytes(),
            path,
            key.as_bytes()
        ])
    );
    let fingerprint = sha(&[parts.method.as_str().as_bytes(), target.as_bytes(), &body]);
    let token: u64 = rand::random();
    let mut redis = app.redis.clone();
    let claimed: Vec<Vec<u8>> = app
        .claim
        .key(&redis_key)
        .arg(token)
        .arg(&fingerprint)
        .arg(LEASE_MS)
        .invoke_async(&mut redis)
        .await
        .unwrap();
    match claimed[0].as_slice() {
        b"claimed" => {}
        b"done" => {
            let status = std::str::from_utf8(&claimed[1]).unwrap().parse().unwrap();
            let headers = decode_headers(&claimed[2]);
            return respond(status, &headers, Bytes::from(claimed[3].clone()), true);
        }
        b"mismatch" => return StatusCode::UNPROCESSABLE_ENTITY.into_response(),
        _ => return StatusCode::CONFLICT.into_response(),
    }
    let (status, headers, body) = forward(&app, &parts, &target, body).await;
    let _: i64 = app
        .complete
        .key(&redis_key)
        .arg(token)
        .arg(status.as_u16())
        .arg(encode_headers(&headers))
        .arg(body.as_ref())
        .arg(TTL_MS)
        .invoke_async(&mut redis)
        .await
        .unwrap();
    respond(status, &headers, body, false)
}

async fn forward(
    app: &App,
    parts: &http::request::Parts,
    target: &str,
    body: Bytes,
) -> (StatusCode, HeaderMap, Bytes) {
    let mut request = hyper::Request::builder()
        .method(parts.method.clone())
        .uri(format!("http://{}{target}", app.upstream))
        .body(Full::new(body))
        .unwrap();
    for (name, value) in &parts.headers {
        if name != "host" && name != "connection" && name != "content-length" {
            request.headers_mut().append(name, value.clone());
        }
    }
    let response = app.client.request(request).await.unwrap();
    let (parts, body) = response.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    let mut headers = parts.headers;
    for hop in [
        "connection",
        "keep-alive",
        "transfer-encoding",
        "date",
        "content-length",
    ] {
        headers.remove(hop);
    }
    (parts.status, headers, body)
}

fn respond(status: StatusCode, headers: &HeaderMap, body: Bytes, replayed: bool) -> Response {
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    response.headers_mut().extend(headers.clone());
    if replayed {
        response
            .headers_mut()
            .insert("idempotency-replayed", HeaderValue::from_static("true"));
    }
    response
}

fn encode_headers(headers: &HeaderMap) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, value) in headers {
        out.extend_from_slice(name.as_str().as_bytes());
        out.push(b':');
        out.extend_from_slice(value.as_bytes());
        out.push(b'\n');
    }
    out
}

fn decode_headers(encoded: &[u8]) -> HeaderMap {
    let mut headers = HeaderMap::new();
    for line in encoded.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        let colon = line.iter().position(|b| *b == b':').unwrap();
        headers.append(
            HeaderName::from_bytes(&line[..colon]).unwrap(),
            HeaderValue::from_bytes(&line[colon + 1..]).unwrap(),
        );
    }
    headers
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(listen), Some(upstream), Some(redis_url)) = (args.next(), args.next(), args.next())
    else {
        panic!("usage: minproxy LISTEN UPSTREAM_HOST:PORT REDIS_URL");
    };
    let redis = redis::Client::open(redis_url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    let app = Arc::new(App {
        redis,
        claim: Script::new(CLAIM),
        complete: Script::new(COMPLETE),
        client: Client::builder(TokioExecutor::new()).build(connector),
        upstream,
    });
    let router = Router::new().fallback(handle).with_state(app);
    let listener = tokio::net::TcpListener::bind(&listen).await.unwrap();
    axum::serve(listener, router).await.unwrap();
}
