//! Scale-out: each instance publishes its partitions' mergeable summaries to the summaries
//! topic (postcard, keyed by `topic/partition`, every 500 ms for those that changed) and reads
//! every other instance's into the registry, so that any instance answers for all partitions.

use super::{KafkaSource, is_shared_setting};
use crate::registry::{Remote, read};
use fencewatch_assess::live::Summary;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use std::sync::atomic::Ordering;
use std::time::Duration;

/// One partition's mergeable summary as published to the summaries topic (postcard), keyed
/// by `topic/partition`.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Published {
    /// Format version of this envelope.
    pub version: u32,
    /// The publishing instance.
    pub owner: String,
    /// `topic/partition`.
    pub partition: String,
    /// The partition offset the summary covers (messages below it are in).
    pub next: i64,
    /// Whether the partition was idle (read to its end).
    pub idle: bool,
    /// Wall time of publication, ns.
    pub at: i64,
    /// The summary.
    pub summary: Summary,
}

/// The envelope version [`Published`] is written with.
const PUBLISHED_VERSION: u32 = 1;
/// How often changed partitions' summaries are published.
pub(super) const PUBLISH_EVERY: Duration = Duration::from_millis(500);

impl KafkaSource {
    /// Publishes the summary of every partition that changed since its last publication.
    pub(super) fn publish(&self, producer: &BaseProducer) {
        let Some(topic) = &self.opts.config.summaries_topic else {
            return;
        };
        let at = self.clock.now().0;
        let mut out = Vec::new();
        {
            let assigned = self.assigned();
            for (key, a) in assigned.iter() {
                let name = &a.name;
                let part = read(&a.part);
                let mark = (part.next(), part.is_idle());
                if a.published == Some(mark) {
                    continue;
                }
                let env = Published {
                    version: PUBLISHED_VERSION,
                    owner: self.owner.clone(),
                    partition: name.clone(),
                    next: mark.0 as i64,
                    idle: mark.1,
                    at,
                    summary: part.live().summary(),
                };
                out.push((key.clone(), mark, env));
            }
        }
        let mut sent = Vec::new();
        for (key, mark, env) in out {
            let bytes = postcard::to_stdvec(&env).expect("a summary serializes");
            let record: BaseRecord<'_, str, [u8]> = BaseRecord::to(topic)
                .key(env.partition.as_str())
                .payload(bytes.as_slice());
            match producer.send(record) {
                Ok(()) => sent.push((key, mark)),
                Err((e, _)) => {
                    tracing::warn!(partition = %env.partition, bytes = bytes.len(), error = %e, "kafka: publishing a summary failed")
                }
            }
        }
        let mut assigned = self.assigned();
        for (key, mark) in sent {
            if let Some(a) = assigned.get_mut(&key) {
                a.published = Some(mark);
            }
        }
    }

    /// Reads every instance's published summaries into the registry, keeping the newest per
    /// partition, until the source stops.
    pub(super) fn read_summaries(&self, reader: &BaseConsumer) {
        let topic = self
            .opts
            .config
            .summaries_topic
            .as_deref()
            .expect("a summaries topic");
        let mut assigned = false;
        let fingerprint = fencewatch_assess::live::fingerprint(self.registry.contract());
        while !self.stop.load(Ordering::Acquire) {
            if !assigned {
                // Every partition of the topic, from the beginning (a compacted topic keeps
                // the newest summary of each partition).
                match reader.fetch_metadata(Some(topic), Duration::from_secs(2)) {
                    Ok(md) => {
                        let mut tpl = TopicPartitionList::new();
                        for t in md.topics().iter().filter(|t| t.name() == topic) {
                            for p in t.partitions() {
                                let _ = tpl.add_partition_offset(topic, p.id(), Offset::Beginning);
                            }
                        }
                        if tpl.count() > 0 {
                            assigned = reader.assign(&tpl).is_ok();
                        }
                    }
                    Err(e) => tracing::debug!(error = %e, "kafka: summaries topic metadata"),
                }
                if !assigned {
                    std::thread::sleep(Duration::from_millis(500));
                    continue;
                }
            }
            let Some(Ok(msg)) = reader.poll(Duration::from_millis(200)) else {
                continue;
            };
            let Some(bytes) = msg.payload() else { continue };
            let env: Published = match postcard::from_bytes(bytes) {
                Ok(env) => env,
                Err(e) => {
                    tracing::warn!(error = %e, offset = msg.offset(), "kafka: unreadable summary");
                    continue;
                }
            };
            if env.version != PUBLISHED_VERSION || env.summary.fingerprint() != fingerprint {
                tracing::warn!(owner = %env.owner, partition = %env.partition, "kafka: a summary of another version or contract: ignored");
                continue;
            }
            if env.owner == self.owner {
                continue;
            }
            let remote = Remote {
                owner: env.owner,
                next: env.next,
                idle: env.idle,
                at: env.at,
                summary: env.summary,
            };
            self.registry.offer_remote(&env.partition, remote);
        }
    }
}

/// The consumer of the summaries topic: no group membership, offsets never committed.
pub(super) fn summaries_reader(
    kafka: &KafkaSource,
    topic: &str,
) -> Result<BaseConsumer, super::Error> {
    let c = &kafka.opts.config;
    let mut cc = ClientConfig::new();
    cc.set("bootstrap.servers", &c.brokers)
        .set("group.id", format!("{}-summaries-{}", c.group, kafka.owner))
        .set("enable.auto.commit", "false")
        .set("client.id", "fencewatch-summaries");
    for (k, v) in c.settings.iter().filter(|(k, _)| is_shared_setting(k)) {
        cc.set(k, v);
    }
    cc.create().map_err(|e| super::Error::Client {
        what: format!("summaries consumer for `{topic}`"),
        source: e,
    })
}
