//! The internal-queue sinks against real brokers: RabbitMQ (Debian's `rabbitmq-server`, started
//! by the harness, `support::rabbitmq`). Each broker is one file.

mod rabbitmq;
