//! Two-phase mode: the sink publish is a client span beneath the webhook's, and the HTTP, NATS,
//! RabbitMQ and Kafka sinks' messages carry its context in `traceparent`.

use std::collections::BTreeMap;

use hookonce::config::{SinkKind, SinkSettings};

use super::*;
use crate::support::otlp::CLIENT;
use crate::support::settings::secs;
use crate::support::worker::Worker;

const TRACE: &str = "5bf92f3577b34da6a3ce929d0e0e4737";
const PARENT: &str = "10f067aa0ba902b8";

/// Delivers the event `id` with an inbound `traceparent` through a daemon whose sink is `sink`
/// and whose spans go to a fresh collector, and finds its `sink publish`
/// span, checked to be a client span beneath it; returns that span.
async fn publish_span(sink: SinkSettings, id: &str) -> ReceivedSpan {
    let collector = Collector::start().await;
    let app = TestApp::builder(crate::support::Backend::Redis)
        .sink(|s| *s = sink)
        .telemetry(telemetry_to(collector.endpoint(), 1.0))
        .start()
        .await;
    let inbound = format!("00-{TRACE}-{PARENT}-01");
    let response = post_event(&app, id, &[("traceparent", &inbound)]).await;
    assert_eq!(response.status(), 200);
    let request = span_of(&collector, "webhook", TRACE).await;
    assert_eq!(request.parent_span_id, PARENT);
    let publish = span_of(&collector, "sink publish", TRACE).await;
    assert_eq!(publish.parent_span_id, request.span_id, "{publish:?}");
    assert_eq!(publish.kind, CLIENT);
    publish
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http_sink_s_message_carries_the_publish_span_s_context() {
    let worker = Worker::start().await;
    let sink = SinkSettings {
        kind: SinkKind::Http,
        url: Some(worker.url()),
        timeout: Some(secs(2)),
        headers: BTreeMap::new(),
        ..SinkSettings::default()
    };
    let publish = publish_span(sink, "evt_sink").await;
    let received = worker.received();
    assert_eq!(received.len(), 1);
    assert_eq!(
        received[0].headers["traceparent"],
        format!("00-{TRACE}-{}-01", publish.span_id)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rabbitmq_sink_s_message_carries_the_publish_span_s_context() {
    use crate::support::rabbitmq::{declare, drain, RabbitBroker};
    let broker = RabbitBroker::shared();
    let tag = std::process::id();
    let (exchange, queue) = (format!("hk-ex-otel-{tag}"), format!("hk-q-otel-{tag}"));
    declare(&broker.url(), &exchange, &queue, Some("stripe")).await;
    let sink = SinkSettings {
        kind: SinkKind::Rabbitmq,
        url: Some(broker.url()),
        exchange: Some(exchange.clone()),
        timeout: Some(secs(5)),
        lease: Some(secs(5)),
        ..SinkSettings::default()
    };
    let publish = publish_span(sink, "evt_rabbit").await;
    let messages = drain(&broker.url(), &queue).await;
    assert_eq!(messages.len(), 1);
    assert_eq!(
        messages[0].header("traceparent").as_deref(),
        Some(format!("00-{TRACE}-{}-01", publish.span_id).as_str())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_nats_sink_s_message_carries_the_publish_span_s_context() {
    use crate::support::nats::NatsServer;
    use hookonce::config::ServiceUrl;
    let nats = NatsServer::start();
    let sink = SinkSettings {
        kind: SinkKind::Nats,
        nats_url: Some(ServiceUrl(nats.url())),
        timeout: Some(secs(5)),
        lease: Some(secs(5)),
        ..SinkSettings::default()
    };
    let publish = publish_span(sink, "evt_nats").await;
    let messages = nats.raw_messages("HOOKONCE").await;
    assert_eq!(messages.len(), 1);
    let traceparent = messages[0]
        .headers
        .get("traceparent")
        .map(|v| v.to_string());
    assert_eq!(
        traceparent.as_deref(),
        Some(format!("00-{TRACE}-{}-01", publish.span_id).as_str())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kafka_sink_s_message_carries_the_publish_span_s_context() {
    use crate::support::kafka::{read_all, KafkaMock};
    let mock = KafkaMock::start(1);
    mock.create_topic("hookonce.stripe", 1);
    let sink = SinkSettings {
        kind: SinkKind::Kafka,
        brokers: mock.brokers(),
        timeout: Some(secs(5)),
        lease: Some(secs(10)),
        ..SinkSettings::default()
    };
    let publish = publish_span(sink, "evt_kafka").await;
    let records = read_all(mock.bootstrap(), "hookonce.stripe").await;
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].key, "evt_kafka");
    assert_eq!(
        records[0].headers.get("traceparent").map(String::as_str),
        Some(format!("00-{TRACE}-{}-01", publish.span_id).as_str())
    );
}
