//! librdkafka's mock cluster (`rdkafka::mocking::MockCluster`) on loopback ports, and a consumer
//! that reads a whole topic back.
//!
//! The mock cluster speaks Kafka's wire protocol and runs the idempotent producer's protocol; it
//! is not an Apache Kafka broker (none can be installed from the registries these machines
//! reach). Its brokers listen on 127.0.0.1 on ports the system picks. A `MockCluster` must stay
//! on the thread that made it, so [`KafkaMock`] keeps it on a thread of its own and sends it
//! commands (take every broker down, bring them up, create a topic).

use std::collections::BTreeMap;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::mocking::MockCluster;
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

/// How long reading a topic back may take on a loaded machine.
const READ_DEADLINE: Duration = Duration::from_secs(60);

enum Command {
    Down,
    Up,
    CreateTopic(String, i32),
}

/// A command and where its result goes.
type Sent = (Command, mpsc::Sender<Result<(), String>>);

/// A mock cluster of `brokers` brokers, alive until this is dropped.
pub struct KafkaMock {
    bootstrap: String,
    brokers: i32,
    commands: Option<mpsc::Sender<Sent>>,
    thread: Option<JoinHandle<()>>,
}

impl KafkaMock {
    pub fn start(brokers: i32) -> Self {
        let (commands, received) = mpsc::channel();
        let (ready, bootstrap) = mpsc::channel();
        let thread = std::thread::spawn(move || {
            let cluster = MockCluster::new(brokers).expect("start librdkafka's mock cluster");
            ready.send(cluster.bootstrap_servers()).unwrap();
            let received: mpsc::Receiver<Sent> = received;
            // Ends when the handle drops its sender.
            for (command, done) in received {
                let result = match command {
                    Command::Down => (1..=brokers).try_for_each(|id| cluster.broker_down(id)),
                    Command::Up => (1..=brokers).try_for_each(|id| cluster.broker_up(id)),
                    Command::CreateTopic(topic, partitions) => {
                        cluster.create_topic(&topic, partitions, brokers.min(3))
                    }
                };
                let _ = done.send(result.map_err(|e| e.to_string()));
            }
        });
        let bootstrap = bootstrap.recv().expect("the mock cluster's addresses");
        Self {
            bootstrap,
            brokers,
            commands: Some(commands),
            thread: Some(thread),
        }
    }

    /// The brokers' `host:port` addresses, as `sink.brokers` takes them.
    pub fn brokers(&self) -> Vec<String> {
        let brokers: Vec<String> = self.bootstrap.split(',').map(str::to_owned).collect();
        assert_eq!(brokers.len(), self.brokers as usize, "{}", self.bootstrap);
        brokers
    }

    pub fn bootstrap(&self) -> &str {
        &self.bootstrap
    }

    fn run(&self, command: Command) {
        let (done, result) = mpsc::channel();
        self.commands
            .as_ref()
            .unwrap()
            .send((command, done))
            .unwrap();
        result.recv().unwrap().expect("mock cluster command");
    }

    /// Every broker disconnects its clients and refuses new connections.
    pub fn all_down(&self) {
        self.run(Command::Down);
    }

    pub fn all_up(&self) {
        self.run(Command::Up);
    }

    pub fn create_topic(&self, topic: &str, partitions: i32) {
        self.run(Command::CreateTopic(topic.to_owned(), partitions));
    }
}

impl Drop for KafkaMock {
    fn drop(&mut self) {
        drop(self.commands.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// One message read back from a topic.
#[derive(Debug, Clone)]
pub struct Record {
    pub partition: i32,
    pub key: String,
    pub value: Vec<u8>,
    pub timestamp: Option<i64>,
    pub headers: BTreeMap<String, String>,
}

/// Reads every message of `topic`, from the beginning of each partition to its end when called.
pub async fn read_all(bootstrap: &str, topic: &str) -> Vec<Record> {
    let (bootstrap, topic) = (bootstrap.to_owned(), topic.to_owned());
    tokio::task::spawn_blocking(move || read_blocking(&bootstrap, &topic))
        .await
        .unwrap()
}

fn read_blocking(bootstrap: &str, topic: &str) -> Vec<Record> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", format!("hookonce-test-{}", std::process::id()))
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "false")
        .create()
        .expect("create a consumer");
    let metadata = consumer
        .fetch_metadata(Some(topic), READ_DEADLINE)
        .expect("topic metadata");
    let partitions: Vec<i32> = metadata.topics()[0]
        .partitions()
        .iter()
        .map(|p| p.id())
        .collect();
    assert!(!partitions.is_empty(), "{topic} has no partition");
    let mut assignment = TopicPartitionList::new();
    let mut remaining = BTreeMap::new();
    for &partition in &partitions {
        let (low, high) = consumer
            .fetch_watermarks(topic, partition, READ_DEADLINE)
            .expect("watermarks");
        if high > low {
            remaining.insert(partition, high);
        }
        assignment
            .add_partition_offset(topic, partition, Offset::Beginning)
            .unwrap();
    }
    consumer.assign(&assignment).expect("assign");
    let mut records = Vec::new();
    let deadline = Instant::now() + READ_DEADLINE;
    while !remaining.is_empty() {
        assert!(
            Instant::now() < deadline,
            "{topic}: still to read {remaining:?}"
        );
        let Some(message) = consumer.poll(Duration::from_millis(200)) else {
            continue;
        };
        let message = message.expect("consume");
        let (partition, offset) = (message.partition(), message.offset());
        if remaining
            .get(&partition)
            .is_some_and(|high| offset + 1 >= *high)
        {
            remaining.remove(&partition);
        }
        let headers = message
            .headers()
            .map(|h| {
                h.iter()
                    .map(|h| {
                        let value = h.value.map(|v| String::from_utf8_lossy(v).into_owned());
                        (h.key.to_owned(), value.unwrap_or_default())
                    })
                    .collect()
            })
            .unwrap_or_default();
        records.push(Record {
            partition,
            key: String::from_utf8_lossy(message.key().unwrap_or_default()).into_owned(),
            value: message.payload().unwrap_or_default().to_vec(),
            timestamp: message.timestamp().to_millis(),
            headers,
        });
    }
    records
}

/// How many messages of `records` carry each key.
pub fn count_by_key(records: &[Record]) -> BTreeMap<String, u32> {
    let mut counts = BTreeMap::new();
    for record in records {
        *counts.entry(record.key.clone()).or_default() += 1;
    }
    counts
}
