//! The internal-queue sinks against brokers started by the harness: RabbitMQ (Debian's
//! `rabbitmq-server`, `support::rabbitmq`) and Kafka (librdkafka's mock cluster, not an Apache
//! Kafka broker, `support::kafka`). Each broker is one file, and the Kafka sink's keys another;
//! this one holds what their tests share: a daemon on a sink, and a provider's retries.

mod kafka;
mod kafka_config;
mod rabbitmq;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::freezer::Freezer;
use crate::support::metrics::LEASE_RECLAIMS;
use crate::support::settings::{secs, SinkSettings};
use crate::support::{with_id, Backend, RedisServer, TestApp};

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

/// The two-phase window's daemons on one Redis: `frozen` reaches it through a [`Freezer`], `retry`
/// directly, as a provider's retry may reach another replica. Fields drop in this order.
struct Window {
    retry: TestApp,
    _frozen: TestApp,
    _freezer: Freezer,
    _redis: RedisServer,
}

/// Starts the window's daemons on `sink` and sends the event `window-1` through `frozen`, whose
/// Redis stops answering after the claim: the broker confirms the publish, the completion never
/// lands, and the request is answered 503 with its claim left to its lease.
async fn publish_through_a_lost_completion(sink: SinkSettings) -> Window {
    let redis = RedisServer::start();
    let upstream = format!("127.0.0.1:{}", redis.port).parse().unwrap();
    let freezer = Freezer::start(upstream).await;
    let frozen = TestApp::builder(Backend::Redis)
        .shared_redis(format!("redis://{}", freezer.addr))
        .store(|s| s.timeout = secs(1))
        .sink({
            let sink = sink.clone();
            |s| *s = sink
        })
        .start()
        .await;
    let retry = TestApp::builder(Backend::Redis)
        .shared_redis(redis.url())
        .sink(|s| *s = sink)
        .start()
        .await;
    freezer.freeze_after_next_script();
    let first = frozen.deliver("github", b"{}", &with_id("window-1")).await;
    assert_eq!(
        first.status(),
        503,
        "a completion that did not happen is not a 200"
    );
    Window {
        retry,
        _frozen: frozen,
        _freezer: freezer,
        _redis: redis,
    }
}

/// The provider's retry of `window-1`: held (409) until the claim's lease ends, then reclaimed,
/// published again and answered 200, counted as one reclaim.
async fn retry_after_the_lease(retry: &TestApp) {
    let again = retry.deliver("github", b"{}", &with_id("window-1")).await;
    assert_eq!(
        again.status(),
        409,
        "the claim is held until its lease ends"
    );
    assert_eq!(deliver_until_accepted(retry, b"{}", "window-1").await, 0);
    assert_eq!(
        retry.metric(LEASE_RECLAIMS, &[("source", "github")]).await,
        1.0
    );
}

/// Per event ID, the 503s its deliveries saw before one was accepted (the outage audits').
type Accepted = Arc<Mutex<BTreeMap<String, u32>>>;

/// A client that delivers the events `outage-N` for each N of `range`, each twice, as a provider
/// that retries after a lost answer would, and records each event's 503s in `accepted`.
fn deliver_range(
    t: &Arc<TestApp>,
    accepted: &Accepted,
    range: std::ops::Range<u32>,
) -> tokio::task::JoinHandle<()> {
    let (t, accepted) = (Arc::clone(t), Arc::clone(accepted));
    tokio::spawn(async move {
        for n in range {
            let id = format!("outage-{n}");
            for _ in 0..2 {
                let body = format!("{{\"n\":{n}}}");
                let unavailable = deliver_until_accepted(&t, body.as_bytes(), &id).await;
                *accepted.lock().unwrap().entry(id.clone()).or_default() += unavailable;
            }
        }
    })
}
