//! The internal-queue sinks against brokers started by the harness: RabbitMQ (Debian's
//! `rabbitmq-server`, `support::rabbitmq`) and Kafka (librdkafka's mock cluster, not an Apache
//! Kafka broker, `support::kafka`). Each broker is one file, and the Kafka sink's keys another;
//! this one holds what their tests share: a daemon on a sink, and a provider's retries.

mod kafka;
mod kafka_config;
mod rabbitmq;

use std::time::Duration;

use crate::support::settings::SinkSettings;
use crate::support::{with_id, Backend, TestApp};

/// A daemon over a fresh Redis (two-phase mode's ledger) forwarding to `sink`.
async fn start(sink: SinkSettings) -> TestApp {
    TestApp::builder(Backend::Redis)
        .sink(|s| *s = sink)
        .start()
        .await
}

/// Delivers like a provider: retries 409 and 503 every 10 ms until a 2xx, for up to 120 s, and
/// returns how many 503s it saw.
async fn deliver_until_accepted(t: &TestApp, body: &[u8], id: &str) -> u32 {
    let mut unavailable = 0;
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while std::time::Instant::now() < deadline {
        let response = t.deliver("github", body, &with_id(id)).await;
        match response.status().as_u16() {
            200 => return unavailable,
            503 => unavailable += 1,
            409 => {}
            other => panic!("{id}: unexpected status {other}"),
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{id} was never accepted");
}
