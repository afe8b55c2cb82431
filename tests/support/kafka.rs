//! Reading back what the agent produced: every partition of a topic, by explicit assignment
//! (tansu's consumer groups are not dependable; see docs/testing.md).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, OwnedMessage};
use rdkafka::{Message, Offset, TopicPartitionList};

/// One consumed message.
#[derive(Debug, Clone)]
pub struct Record {
    /// Partition it was on.
    pub partition: i32,
    /// Key as text.
    pub key: String,
    /// Headers as text.
    pub headers: BTreeMap<String, String>,
    /// Payload bytes.
    pub payload: Vec<u8>,
}

fn record(message: &OwnedMessage) -> Record {
    let headers = message
        .headers()
        .map(|h| {
            h.iter()
                .map(|h| {
                    (
                        h.key.to_string(),
                        String::from_utf8_lossy(h.value.unwrap_or_default()).into_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    Record {
        partition: message.partition(),
        key: String::from_utf8_lossy(message.key().unwrap_or_default()).into_owned(),
        headers,
        payload: message.payload().unwrap_or_default().to_vec(),
    }
}

/// Every message on every partition of `topic`, waiting until there are `at_least` (then a
/// little longer, so duplicates would show).
pub fn consume_all(brokers: &str, topic: &str, at_least: usize) -> Vec<Record> {
    let consumer: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", "gpuship-tests")
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    let metadata = consumer
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .expect("metadata");
    let partitions = metadata.topics()[0].partitions().len() as i32;
    assert!(partitions > 0, "topic {topic} has no partitions");
    let mut assignment = TopicPartitionList::new();
    for partition in 0..partitions {
        assignment
            .add_partition_offset(topic, partition, Offset::Beginning)
            .expect("partition");
    }
    consumer.assign(&assignment).expect("assign");
    let mut records = Vec::new();
    // Thirty seconds, and more while messages keep coming (millions take a while to read).
    let mut deadline = Instant::now() + Duration::from_secs(30);
    let mut quiet_since = Instant::now();
    loop {
        if quiet_since.elapsed() < Duration::from_secs(1) {
            deadline = deadline.max(Instant::now() + Duration::from_secs(5));
        }
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(message)) => {
                records.push(record(&message.detach()));
                quiet_since = Instant::now();
            }
            Some(Err(err)) => panic!("consuming {topic}: {err}"),
            None => {}
        }
        let settled = records.len() >= at_least && quiet_since.elapsed() > Duration::from_secs(1);
        if settled || Instant::now() > deadline {
            break;
        }
    }
    records
}
