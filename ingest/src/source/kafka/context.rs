//! The consumer's callbacks, served by librdkafka while the consumer thread polls: statistics
//! (partition ends, idleness, broker state), errors, and rebalances (assignments restore their
//! partitions and start their workers, revocations stop the workers, which checkpoint and
//! commit, and drop the partitions).

use super::KafkaSource;
use crate::registry::write;
use crate::report::{InternalEvent, Rebalanced};
use rdkafka::client::ClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, RebalanceProtocol};
use rdkafka::error::KafkaError;
use rdkafka::statistics::Statistics;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use rdkafka::types::{RDKafkaErrorCode, RDKafkaRespErr};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

/// The consumer's callbacks.
pub(super) struct Context {
    pub(super) kafka: Arc<KafkaSource>,
}

impl ClientContext for Context {
    fn stats(&self, stats: Statistics) {
        let mut ends = BTreeMap::new();
        for (name, topic) in &stats.topics {
            for (&p, part) in &topic.partitions {
                if p >= 0 && part.desired && part.hi_offset >= 0 {
                    ends.insert((name.clone(), p), part.hi_offset);
                }
            }
        }
        // A partition whose applied position reached the end the broker last reported has
        // nothing in flight: idle, left out of the watermark until its next message.
        {
            let assigned = self.kafka.assigned();
            for (key, &end) in &ends {
                let Some(a) = assigned.get(key) else {
                    continue;
                };
                let mut part = write(&a.part);
                let next = part.next() as i64;
                if next > end {
                    // The partition's end is below what was applied: the topic was recreated
                    // or the broker lost its log. Its offsets start over; read it again from
                    // its beginning (the consumer thread seeks).
                    tracing::error!(topic = %key.0, partition = key.1, applied = next, end, "kafka: the partition's end went back (topic recreated or broker data lost); reading it again from its beginning");
                    self.kafka
                        .rewound
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push(key.clone());
                } else if next >= end {
                    part.set_idle(true);
                }
            }
        }
        *self
            .kafka
            .status
            .ends
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = ends;
        let up = stats
            .brokers
            .values()
            .any(|b| b.nodeid >= 0 && b.state == "UP");
        self.kafka.status.connected.store(up, Ordering::Release);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        if let KafkaError::Global(RDKafkaErrorCode::PartitionEOF) = error {
            // Reaching a partition's end is news, not an error (idleness comes from statistics).
            return;
        }
        if reason.contains("receive.message.max.bytes") {
            // A fetch response (a message) over receive.message.max.bytes: the connection is
            // dropped and the fetch retried forever, so the partition cannot move until the
            // setting is raised. Said once, loudly, and kept for /readyz.
            let mut last = self
                .kafka
                .status
                .too_large
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            if last.is_none() {
                tracing::error!(error = %error, reason, "kafka: a message larger than receive.message.max.bytes cannot be received; its partition does not move (nor, behind the same fetch, the others of its broker) until `receive.message.max.bytes` (and `fetch.max.bytes`) are raised in [kafka] above the broker's message.max.bytes");
            }
            *last = Some((Instant::now(), reason.to_string()));
            return;
        }
        if matches!(
            error.rdkafka_error_code(),
            Some(RDKafkaErrorCode::AllBrokersDown)
        ) {
            self.kafka.status.connected.store(false, Ordering::Release);
        }
        tracing::warn!(error = %error, reason, "kafka");
    }
}

impl ConsumerContext for Context {
    fn rebalance(
        &self,
        consumer: &BaseConsumer<Context>,
        err: RDKafkaRespErr,
        tpl: &mut TopicPartitionList,
    ) {
        let cooperative = matches!(
            consumer.rebalance_protocol(),
            RebalanceProtocol::Cooperative
        );
        let listed: Vec<(String, i32)> = tpl
            .elements()
            .iter()
            .map(|e| (e.topic().to_string(), e.partition()))
            .collect();
        let k = &self.kafka;
        match err {
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => {
                Rebalanced {
                    what: "assign",
                    partitions: listed.len(),
                }
                .emit(&k.metrics);
                for (topic, p) in &listed {
                    match k.open_part(topic, *p) {
                        Ok(next) => {
                            let offset = if next > 0 {
                                Offset::Offset(next as i64)
                            } else {
                                Offset::Beginning
                            };
                            let _ = tpl.set_partition_offset(topic, *p, offset);
                        }
                        Err(e) => k.fail(&e),
                    }
                }
                let r = if cooperative {
                    consumer.incremental_assign(tpl)
                } else {
                    consumer.assign(tpl)
                };
                if let Err(e) = r {
                    tracing::error!(error = %e, "kafka: assigning partitions failed");
                }
            }
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS => {
                Rebalanced {
                    what: "revoke",
                    partitions: listed.len(),
                }
                .emit(&k.metrics);
                // Each worker ends its batch, checkpoints and commits before the partition is
                // given up.
                k.release(&listed);
                let r = if cooperative {
                    consumer.incremental_unassign(tpl)
                } else {
                    consumer.unassign()
                };
                if let Err(e) = r {
                    tracing::error!(error = %e, "kafka: releasing partitions failed");
                }
            }
            other => {
                Rebalanced {
                    what: "error",
                    partitions: listed.len(),
                }
                .emit(&k.metrics);
                tracing::error!(error = ?other, "kafka: rebalance failed");
                k.release(&listed);
                let _ = consumer.unassign();
            }
        }
    }
}
