//! The test harness: a daemon in this process or as a child, real redis-server and nats-server
//! processes, and the small helpers the suites share.
//!
//! Tests reach the library through this module (and its submodules) only, so a change of the
//! library's module paths is fixed here: `hookonce::app`, `hookonce::config`,
//! `hookonce::webhooks::providers` and `hookonce::server`.

pub mod app;
pub mod binary;
pub mod cluster;
pub mod daemon;
pub mod freezer;
pub mod http;
pub mod kafka;
pub mod metrics;
pub mod nats;
pub mod otlp;
pub mod rabbitmq;
pub mod redis;
pub mod relay_worker;
pub mod replica;
pub mod sentinel;
pub mod settings;
pub mod tls;
pub mod upstream;
pub mod worker;

use std::time::{Duration, Instant};

pub use hookonce::webhooks::providers::SignOptions;

pub use self::app::{Backend, TestApp};
pub use self::redis::RedisServer;

pub fn now_unix() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// Sign options for "now".
pub fn now() -> SignOptions {
    SignOptions {
        now_unix: now_unix(),
        ..SignOptions::default()
    }
}

/// Sign options with a header-carried event ID.
pub fn with_id(id: &str) -> SignOptions {
    SignOptions {
        event_id: Some(id.to_owned()),
        now_unix: now_unix(),
        ..SignOptions::default()
    }
}

/// A Stripe-shaped event body of roughly `size` bytes.
pub fn stripe_body(id: &str, size: usize) -> Vec<u8> {
    let head = format!(
        r#"{{"id":"{id}","object":"event","type":"payment_intent.succeeded","api_version":"2024-06-20","data":{{"object":{{"id":"pi_1","amount":4200,"currency":"eur","description":""#
    );
    let tail = r#""}}}"#;
    let pad = size.saturating_sub(head.len() + tail.len());
    let mut body = head.into_bytes();
    body.extend(std::iter::repeat_n(b'x', pad));
    body.extend_from_slice(tail.as_bytes());
    body
}

/// Polls `probe` until it returns true, for at most `seconds`.
pub async fn eventually<F, Fut>(seconds: u64, what: &str, mut probe: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(seconds);
    while !probe().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Generates one `#[tokio::test]` per backend from an async fn taking a [`Backend`].
macro_rules! both_backends {
    ($($name:ident),* $(,)?) => {
        mod redis_backend {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::support::Backend::Redis).await;
                }
            )*
        }
        mod memory_backend {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::support::Backend::Memory).await;
                }
            )*
        }
    };
}
pub(crate) use both_backends;
