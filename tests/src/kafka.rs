//! Kafka for the tests: producing keyed messages and reading a group's committed offsets with
//! librdkafka (rdkafka), against `rdkafka::mocking::MockCluster` or a real broker.

use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use std::time::Duration;

/// Produces `(key, payload)` messages to `topic` (partitioned by key) and waits until every
/// one is acknowledged.
pub fn produce(brokers: &str, topic: &str, messages: &[(String, String)]) {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("linger.ms", "5")
        .set("enable.idempotence", "true")
        .create()
        .expect("a producer");
    for (key, payload) in messages {
        let mut record = BaseRecord::to(topic)
            .key(key.as_str())
            .payload(payload.as_str());
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((e, r)) => {
                    assert!(
                        matches!(
                            e.rdkafka_error_code(),
                            Some(rdkafka::types::RDKafkaErrorCode::QueueFull)
                        ),
                        "produce: {e}"
                    );
                    producer.poll(Duration::from_millis(10));
                    record = r;
                }
            }
        }
    }
    producer
        .flush(Duration::from_secs(30))
        .expect("every message acknowledged");
}

/// The offsets group `group` committed on partitions `0..partitions` of `topic` (-1 where
/// none).
pub fn committed(brokers: &str, group: &str, topic: &str, partitions: i32) -> Vec<i64> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", group)
        .create()
        .expect("a consumer");
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition(topic, p);
    }
    match consumer.committed_offsets(tpl, Duration::from_secs(10)) {
        Ok(tpl) => tpl
            .elements()
            .iter()
            .map(|e| match e.offset() {
                Offset::Offset(n) => n,
                _ => -1,
            })
            .collect(),
        Err(_) => vec![-1; partitions as usize],
    }
}
