//! The internal-queue sinks against brokers started by the harness: RabbitMQ (Debian's
//! `rabbitmq-server`, `support::rabbitmq`) and Kafka (librdkafka's mock cluster, not an Apache
//! Kafka broker, `support::kafka`). Each broker is one file, and the Kafka sink's keys another.

mod kafka;
mod kafka_config;
mod rabbitmq;
