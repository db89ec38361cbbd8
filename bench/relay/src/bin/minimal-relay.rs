//! SPEED-OF-LIGHT RELAY (benchmark reference only): XREADGROUP + POST + XACK in a tight loop.
//!
//! One consumer group on one stream; up to CONCURRENCY POSTs in flight, each entry acknowledged
//! when its POST is answered 2xx. It sends the headers hookonce's relay sends (so the trivial
//! worker measures both the same way) and leaves out everything else on purpose: retries,
//! backoff, dead letters, takeover of other consumers' entries, route matching, trimming,
//! metrics, logs, shutdown. The gap between hookonce's relay and this is the price of those.
//!
//! Usage: `minimal-relay REDIS_URL STREAM GROUP URL [CONCURRENCY=16] [START=$]`

use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use redis::streams::{StreamReadOptions, StreamReadReply};
use redis::AsyncCommands;
use tokio::sync::Semaphore;

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 5 {
        eprintln!("usage: minimal-relay REDIS_URL STREAM GROUP URL [CONCURRENCY] [START]");
        std::process::exit(2);
    }
    let (stream, group, url) = (args[2].clone(), args[3].clone(), args[4].clone());
    let concurrency: usize = args.get(5).map_or(16, |c| c.parse().expect("CONCURRENCY"));
    let start = args.get(6).cloned().unwrap_or_else(|| "$".to_owned());
    let client = redis::Client::open(args[1].as_str()).expect("REDIS_URL");
    let mut redis = client
        .get_multiplexed_async_connection()
        .await
        .expect("connect to Redis");
    // A second connection for the blocking read, so acknowledgements never wait behind it. Its
    // response timeout is above the read's BLOCK: a read given up on by the client would leave
    // the entries it was handed pending for good (this relay never claims), and those pending
    // entries would hold back `sink.trim = "acknowledged"` for the whole stream.
    let reader_config = redis::AsyncConnectionConfig::new()
        .set_response_timeout(Some(std::time::Duration::from_secs(5)));
    let mut reader = client
        .get_multiplexed_async_connection_with_config(&reader_config)
        .await
        .expect("connect to Redis");
    let _: Result<(), _> = redis.xgroup_create_mkstream(&stream, &group, &start).await;
    // The key prefix of the dedup key, from the stream's name (`<prefix>:{<source>}:events`).
    let prefix = stream.split(":{").next().unwrap_or("hookonce").to_owned();
    let http: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let permits = Arc::new(Semaphore::new(concurrency));
    let consumer = format!("minimal-{}", std::process::id());
    eprintln!("minimal-relay: {stream} group {group} → {url}, concurrency {concurrency}");
    loop {
        let first = Arc::clone(&permits).acquire_owned().await.unwrap();
        let mut held = vec![first];
        while let Ok(permit) = Arc::clone(&permits).try_acquire_owned() {
            held.push(permit);
        }
        let options = StreamReadOptions::default()
            .group(&group, &consumer)
            .count(held.len())
            .block(1000);
        let reply: StreamReadReply = match reader.xread_options(&[&stream], &[">"], &options).await
        {
            Ok(reply) => reply,
            Err(error) => {
                eprintln!("XREADGROUP: {error}");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        for entry in reply.keys.into_iter().flat_map(|key| key.ids) {
            let Some(permit) = held.pop() else { break };
            let field = |name: &str| -> Vec<u8> { entry.get(name).unwrap_or_default() };
            let text = |name: &str| String::from_utf8(field(name)).unwrap_or_default();
            let content_type = Some(text("content_type"))
                .filter(|t| !t.is_empty())
                .unwrap_or_else(|| "application/json".to_owned());
            let request = hyper::Request::post(url.as_str())
                .header("content-type", content_type)
                .header(
                    "idempotency-key",
                    format!("{prefix}:{{{}}}:d:{}", text("source"), text("event_id")),
                )
                .header("x-hookonce-source", text("source"))
                .header("x-hookonce-provider", text("provider"))
                .header("x-hookonce-event-id", text("event_id"))
                .header("x-hookonce-event-type", text("event_type"))
                .header("x-hookonce-received-at", text("received_at"))
                .header("x-hookonce-attempt", "1")
                .body(Full::new(Bytes::from(field("body"))))
                .unwrap();
            let (http, mut redis) = (http.clone(), redis.clone());
            let (stream, group, id) = (stream.clone(), group.clone(), entry.id.clone());
            tokio::spawn(async move {
                let _permit = permit;
                match http.request(request).await {
                    Ok(response) if response.status().is_success() => {
                        let _: Result<i64, _> = redis.xack(&stream, &group, &[&id]).await;
                    }
                    Ok(response) => eprintln!("{id}: {}", response.status()),
                    Err(error) => eprintln!("{id}: {error}"),
                }
            });
        }
    }
}
