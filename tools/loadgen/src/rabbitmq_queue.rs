//! The audit's RabbitMQ reader: every message of a queue bound to the sink's exchange, read without
//! being consumed, and the copies of one event that two-phase mode's window explains.
//!
//! RabbitMQ keeps no duplicate window of its own (JetStream's `Nats-Msg-Id` has one): when the
//! daemon dies, or Redis fails, between the broker's confirm and the completion of the claim, the
//! next delivery after the claim's lease publishes the event again under the same `message_id`
//! (docs/design.md, "Guarantees and their limits"). Such a republish cannot come sooner after the
//! copy before it than the smaller of `sink.lease` (a claim left behind expires) and
//! `sink.timeout` (a confirm that came too late released the claim), less the time the second
//! delivery took from its arrival to its claim (at most one Redis call, `store.timeout`). Copies of
//! one event at least that far apart by their `hookonce-received-at` are therefore counted as
//! **republished**, apart from the audit's duplicates; copies closer together (two concurrent
//! deliveries that both claimed the event) remain **duplicated**, and fail the audit.
//!
//! The messages are consumed with manual acknowledgement and never acknowledged: when the audit's
//! connection closes the broker puts every one of them back, so the audit can run again and a
//! worker still finds them.
//!
//! [`declare`] is the broker side a scenario sets up before the daemon starts (hookonce checks its
//! exchange but never declares one): a durable direct exchange and a durable queue bound to it.

use std::collections::HashMap;
use std::time::Duration;

use futures_util::StreamExt;
use hookonce::config::{parse_amqp_url, redact_url};
use lapin::options::{
    BasicConsumeOptions, ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable, LongString};
use lapin::{BasicProperties, Connection, ConnectionProperties, ExchangeKind};

/// Every copy of each event ID in the queue, with its `hookonce-received-at` (unix ms) when the
/// message carries one.
pub type Copies = HashMap<String, Vec<Option<u64>>>;

/// The copies of each event ID, split into those the audit counts and the republishes the
/// two-phase window explains.
#[derive(Debug, Default, PartialEq)]
pub struct Sorted {
    pub counted: HashMap<String, u32>,
    pub republished: HashMap<String, u32>,
    /// The shortest time between a republish and the copy before it, in milliseconds: how far
    /// above the gap the closest call was.
    pub closest_republish_ms: Option<u64>,
}

/// A connection to the broker at `url`. Errors name the redacted URL only: an AMQP password is
/// never part of a message.
async fn connect(url: &str, name: &str) -> Result<Connection, String> {
    let redacted = redact_url(url);
    let uri = parse_amqp_url(url).map_err(|e| e.to_string())?;
    let properties = ConnectionProperties::default()
        .with_connection_name(LongString::from(name.as_bytes().to_vec()));
    Connection::connect_uri(uri, properties)
        .await
        .map_err(|e| format!("cannot connect to RabbitMQ at {redacted}: {e}"))
}

/// Declares a durable direct `exchange` (unless it is the default one, `""`) and a durable `queue`
/// bound to it with `binding`; declaring what already exists alike is a no-op.
pub async fn declare(url: &str, exchange: &str, queue: &str, binding: &str) -> Result<(), String> {
    let connection = connect(url, "hookonce-loadgen declare").await?;
    let declared = async {
        let channel = connection
            .create_channel()
            .await
            .map_err(|e| format!("cannot open a channel: {e}"))?;
        if !exchange.is_empty() {
            let options = ExchangeDeclareOptions {
                durable: true,
                ..ExchangeDeclareOptions::default()
            };
            channel
                .exchange_declare(
                    exchange.into(),
                    ExchangeKind::Direct,
                    options,
                    FieldTable::default(),
                )
                .await
                .map_err(|e| format!("exchange {exchange:?}: {e}"))?;
        }
        let options = QueueDeclareOptions {
            durable: true,
            ..QueueDeclareOptions::default()
        };
        channel
            .queue_declare(queue.into(), options, FieldTable::default())
            .await
            .map_err(|e| format!("queue {queue:?}: {e}"))?;
        if !exchange.is_empty() {
            channel
                .queue_bind(
                    queue.into(),
                    exchange.into(),
                    binding.into(),
                    QueueBindOptions::default(),
                    FieldTable::default(),
                )
                .await
                .map_err(|e| format!("binding {queue:?} to {exchange:?}: {e}"))?;
        }
        Ok(())
    }
    .await;
    let _ = connection.close(200, "declared".into()).await;
    declared
}

/// Reads every message now ready in `queue` on the broker at `url`, leaving it there.
pub async fn read(url: &str, queue: &str) -> Result<Copies, String> {
    let connection = connect(url, "hookonce-loadgen audit").await?;
    let read = read_on(&connection, queue).await;
    // Closing the connection returns every unacknowledged message to the queue.
    let _ = connection.close(200, "audited".into()).await;
    read
}

async fn read_on(connection: &Connection, queue: &str) -> Result<Copies, String> {
    let channel = connection
        .create_channel()
        .await
        .map_err(|e| format!("cannot open a channel: {e}"))?;
    let options = QueueDeclareOptions {
        passive: true,
        ..QueueDeclareOptions::default()
    };
    let declared = channel
        .queue_declare(queue.into(), options, FieldTable::default())
        .await
        .map_err(|e| {
            format!("queue {queue:?}: {e} (declare it, bound to sink.exchange, before the daemon starts)")
        })?;
    if declared.consumer_count() > 0 {
        return Err(format!(
            "queue {queue:?} has {} consumer(s): the messages they hold are invisible to the audit; stop them first",
            declared.consumer_count()
        ));
    }
    let expected = declared.message_count();
    let mut copies = Copies::new();
    if expected == 0 {
        return Ok(copies);
    }
    // No prefetch limit (a new channel has none): nothing is acknowledged, so a limit would stall
    // the delivery after that many messages.
    let mut consumer = channel
        .basic_consume(
            queue.into(),
            "hookonce-loadgen-audit".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .map_err(|e| format!("cannot consume from {queue:?}: {e}"))?;
    let mut seen = 0;
    while seen < expected {
        let delivery = consumer
            .next()
            .await
            .ok_or_else(|| {
                format!("the broker stopped delivering after {seen} of {expected} messages")
            })?
            .map_err(|e| format!("reading {queue:?}: {e}"))?;
        seen += 1;
        let (id, received_at) = identify(&delivery.properties)
            .map_err(|problem| format!("message {seen} of {queue:?} {problem}"))?;
        copies.entry(id).or_default().push(received_at);
    }
    Ok(copies)
}

/// The event ID (`message_id`, which must agree with the `hookonce-event-id` header when both are
/// there) and the `hookonce-received-at` header of one message.
fn identify(properties: &BasicProperties) -> Result<(String, Option<u64>), String> {
    let header = |name: &str| -> Option<String> {
        match properties.headers().as_ref()?.inner().get(name)? {
            AMQPValue::LongString(s) => Some(String::from_utf8_lossy(s.as_bytes()).into_owned()),
            AMQPValue::ShortString(s) => Some(s.to_string()),
            _ => None,
        }
    };
    let message_id = properties.message_id().as_ref().map(|id| id.to_string());
    let header_id = header("hookonce-event-id");
    let id = match (message_id, header_id) {
        (Some(id), Some(other)) if id != other => {
            return Err(format!(
                "has message_id {id:?} but hookonce-event-id {other:?}"
            ))
        }
        (Some(id), _) | (None, Some(id)) => id,
        (None, None) => {
            return Err(
                "has neither a message_id nor a hookonce-event-id header: not hookonce's"
                    .to_owned(),
            )
        }
    };
    let received_at = header("hookonce-received-at").and_then(|v| v.parse().ok());
    Ok((id, received_at))
}

/// Splits each event's copies: the first is counted, and so is every later copy that came sooner
/// than `gap` after the one before it (or whose arrival is unknown); the others are republishes.
pub fn sort(copies: Copies, gap: Duration) -> Sorted {
    let gap_ms = u64::try_from(gap.as_millis()).unwrap_or(u64::MAX);
    let mut sorted = Sorted::default();
    for (id, mut times) in copies {
        // Unknown arrivals first: they can never be shown to be a republish.
        times.sort_unstable();
        let mut counted = 0;
        let mut republished = 0;
        let mut previous: Option<u64> = None;
        for time in times {
            match (previous, time) {
                (Some(before), Some(now)) if now.saturating_sub(before) >= gap_ms => {
                    republished += 1;
                    let apart = now - before;
                    sorted.closest_republish_ms =
                        Some(sorted.closest_republish_ms.map_or(apart, |c| c.min(apart)));
                }
                _ => counted += 1,
            }
            previous = time;
        }
        sorted.counted.insert(id.clone(), counted);
        if republished > 0 {
            sorted.republished.insert(id, republished);
        }
    }
    sorted
}

#[cfg(test)]
mod tests {
    use super::*;

    fn copies(list: &[(&str, &[Option<u64>])]) -> Copies {
        list.iter()
            .map(|(id, times)| ((*id).to_owned(), times.to_vec()))
            .collect()
    }

    fn map(list: &[(&str, u32)]) -> HashMap<String, u32> {
        list.iter().map(|(id, n)| ((*id).to_owned(), *n)).collect()
    }

    #[test]
    fn copies_a_lease_apart_are_republishes_and_closer_ones_duplicates() {
        let sorted = sort(
            copies(&[
                ("once", &[Some(1_000)]),
                // Killed after the confirm: the retry after the 2 s lease publishes again.
                ("window", &[Some(4_100), Some(1_000)]),
                // Twice through the window.
                ("twice", &[Some(1_000), Some(2_600), Some(4_200)]),
                // Two concurrent deliveries that both published: a real duplicate.
                ("racing", &[Some(1_000), Some(1_003)]),
                // A republish, then a racing copy of it.
                ("both", &[Some(1_000), Some(3_000), Some(3_010)]),
                // Without arrival times nothing can be explained.
                ("unknown", &[None, Some(9_000)]),
            ]),
            Duration::from_millis(1_500),
        );
        assert_eq!(
            sorted.counted,
            map(&[
                ("once", 1),
                ("window", 1),
                ("twice", 1),
                ("racing", 2),
                ("both", 2),
                ("unknown", 2),
            ])
        );
        assert_eq!(
            sorted.republished,
            map(&[("window", 1), ("twice", 2), ("both", 1)])
        );
        assert_eq!(sorted.closest_republish_ms, Some(1_600));
    }

    #[test]
    fn a_message_is_identified_by_its_message_id_and_headers() {
        let headers = |pairs: &[(&str, &str)]| {
            let mut table = FieldTable::default();
            for (name, value) in pairs {
                table.insert(
                    (*name).into(),
                    AMQPValue::LongString(LongString::from(value.as_bytes().to_vec())),
                );
            }
            table
        };
        let message = BasicProperties::default()
            .with_message_id("evt_1".into())
            .with_headers(headers(&[
                ("hookonce-event-id", "evt_1"),
                ("hookonce-received-at", "1700000000123"),
            ]));
        assert_eq!(
            identify(&message),
            Ok(("evt_1".to_owned(), Some(1_700_000_000_123)))
        );
        let header_only =
            BasicProperties::default().with_headers(headers(&[("hookonce-event-id", "evt_2")]));
        assert_eq!(identify(&header_only), Ok(("evt_2".to_owned(), None)));
        let disagreeing = BasicProperties::default()
            .with_message_id("evt_1".into())
            .with_headers(headers(&[("hookonce-event-id", "evt_9")]));
        assert!(identify(&disagreeing).unwrap_err().contains("evt_9"));
        let foreign = BasicProperties::default();
        assert!(identify(&foreign).unwrap_err().contains("not hookonce's"));
    }

    #[tokio::test]
    async fn an_unreachable_broker_is_named_without_its_password() {
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = closed.local_addr().unwrap().port();
        drop(closed);
        let error = read(
            &format!("amqp://hook:Zq7auditSecret@127.0.0.1:{port}/%2f"),
            "q",
        )
        .await
        .unwrap_err();
        assert!(error.contains("cannot connect to RabbitMQ"), "{error}");
        assert!(!error.contains("Zq7auditSecret"), "{error}");
        let error = read("http://hook:Zq7auditSecret@mq/", "q")
            .await
            .unwrap_err();
        assert!(error.contains("sink.url"), "{error}");
        assert!(!error.contains("Zq7auditSecret"), "{error}");
    }
}
