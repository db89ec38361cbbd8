//! hookonce-kafka-mock: librdkafka's mock cluster on loopback for the benchmarks (bench/ab), and
//! a count of what a topic holds after a run. A mock cluster, not an Apache Kafka broker.
//!
//!   hookonce-kafka-mock serve [BROKERS] [TOPIC PARTITIONS]…
//!       starts the cluster (1 broker by default), creates each TOPIC, prints the bootstrap
//!       addresses on one line, and runs until it is killed;
//!   hookonce-kafka-mock count BOOTSTRAP TOPIC
//!       prints how many messages were ever appended to TOPIC: the sum of its partitions' high
//!       watermarks (the mock cluster drops a partition's oldest messages past a few MiB, so
//!       what it still holds can be fewer).

use std::io::Write;
use std::time::Duration;

use anyhow::{bail, Context};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::mocking::MockCluster;
use rdkafka::ClientConfig;

const DEADLINE: Duration = Duration::from_secs(30);

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("serve") => serve(&args[1..]),
        Some("count") if args.len() == 3 => {
            println!("{}", count(&args[1], &args[2])?);
            Ok(())
        }
        _ => bail!("usage: hookonce-kafka-mock serve [BROKERS] [TOPIC PARTITIONS]… | count BOOTSTRAP TOPIC"),
    }
}

fn serve(args: &[String]) -> anyhow::Result<()> {
    let (brokers, topics) = match args.len() % 2 {
        1 => (args[0].parse().context("BROKERS is a number")?, &args[1..]),
        _ => (1, args),
    };
    let cluster = MockCluster::new(brokers).context("start the mock cluster")?;
    for pair in topics.chunks(2) {
        let partitions = pair[1].parse().context("PARTITIONS is a number")?;
        cluster
            .create_topic(&pair[0], partitions, 1)
            .with_context(|| format!("create topic {}", pair[0]))?;
    }
    println!("{}", cluster.bootstrap_servers());
    std::io::stdout().flush()?;
    // The cluster's brokers run on librdkafka's threads until whoever started this kills it.
    loop {
        std::thread::park();
    }
}

fn count(bootstrap: &str, topic: &str) -> anyhow::Result<i64> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .context("create a client")?;
    let metadata = consumer
        .fetch_metadata(Some(topic), DEADLINE)
        .context("topic metadata")?;
    let mut total = 0;
    for partition in metadata.topics()[0].partitions() {
        let (_low, high) = consumer
            .fetch_watermarks(topic, partition.id(), DEADLINE)
            .context("watermarks")?;
        total += high;
    }
    Ok(total)
}
