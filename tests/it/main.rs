//! The integration suite, one test binary: real daemons over loopback against real
//! redis-server, nats-server and rabbitmq-server processes, and librdkafka's mock Kafka cluster.
//! Each module is one topic; `support` is the harness.

mod access;
mod architecture;
mod behaviour;
mod body_dedup;
mod check_config_edges;
mod cli;
mod coalesce;
mod coalesce_unreadable;
mod console;
mod crash;
mod docs;
mod hostile_config;
mod hostile_http;
mod link_order;
mod partitions;
mod providers;
mod proxy;
mod queues;
mod redis_store;
mod relay;
mod reload;
mod server;
mod support;
mod telemetry;
mod tls;
mod tls_topologies;
mod topology;
mod two_phase;
