//! One place that reports. Everything a source or a partition has to tell an operator is an
//! internal event (in the style of Vector's `InternalEvent`): a struct that says what happened,
//! whose [`InternalEvent::emit`] writes its log line and moves its metrics, here and nowhere
//! else. Every source emits the same events, so a finding counts the same whether it came over
//! HTTP, from a file or from Kafka.
//!
//! [`metrics`] holds the families (names and labels as the README documents them); the gauges
//! derived from the merged view are set before each scrape by
//! [`Registry::refresh_gauges`](crate::registry::Registry::refresh_gauges), from the partitions
//! and the local writer's [`Durability`].

pub mod metrics;
mod refresh;

pub use metrics::Metrics;
pub use refresh::Durability;

use crate::checkpoint::{PassedOver, Quarantined};
use fencewatch_assess::contract::Property;
use fencewatch_assess::live::NewCounterexample;
use metrics::{PropertyLabels, RejectedLabels, SourceLabels, counterexample_labels};
use std::time::Duration;

/// Something that happened inside fencewatch that an operator may need to know: it emits its
/// log line and its metrics.
pub trait InternalEvent {
    /// Logs the event and moves its metrics.
    fn emit(self, metrics: &Metrics);
}

/// Valid events (assessed, unattributed or duplicate deliveries) taken from a source.
#[derive(Debug, Clone, Copy)]
pub struct EventsIngested<'a> {
    /// The source label: `http`, `kafka`, a file's name.
    pub source: &'a str,
    /// How many.
    pub count: u64,
}

impl InternalEvent for EventsIngested<'_> {
    fn emit(self, metrics: &Metrics) {
        tracing::trace!(source = self.source, count = self.count, "events ingested");
        let labels = SourceLabels {
            source: self.source.into(),
        };
        metrics
            .events_ingested
            .get_or_create(&labels)
            .inc_by(self.count);
    }
}

/// Items of a source that are not events (each also `malformed_event` evidence).
#[derive(Debug, Clone, Copy)]
pub struct EventsRejected<'a> {
    /// The source label.
    pub source: &'a str,
    /// Why: `malformed`.
    pub reason: &'a str,
    /// How many.
    pub count: u64,
}

impl InternalEvent for EventsRejected<'_> {
    fn emit(self, metrics: &Metrics) {
        if self.count == 0 {
            return;
        }
        tracing::debug!(
            source = self.source,
            reason = self.reason,
            count = self.count,
            "events rejected"
        );
        let labels = RejectedLabels {
            source: self.source.into(),
            reason: self.reason.into(),
        };
        metrics
            .events_rejected
            .get_or_create(&labels)
            .inc_by(self.count);
    }
}

/// Items of a request that carry no evidence (OTLP spans and log records without
/// `fencing.kind`): neither taken nor rejected.
#[derive(Debug, Clone, Copy)]
pub struct ItemsIgnored {
    /// `traces` or `logs`.
    pub signal: &'static str,
    /// How many.
    pub count: u64,
}

impl InternalEvent for ItemsIgnored {
    fn emit(self, metrics: &Metrics) {
        if self.count == 0 {
            return;
        }
        tracing::trace!(
            signal = self.signal,
            count = self.count,
            "items without evidence ignored"
        );
        let labels = metrics::SignalLabels {
            signal: self.signal,
        };
        metrics
            .otlp_items_ignored
            .get_or_create(&labels)
            .inc_by(self.count);
    }
}

/// A counterexample an assessor found (provisional until the horizon passes its events).
#[derive(Debug, Clone, Copy)]
pub struct CounterexampleFound<'a> {
    /// Its property.
    pub property: &'a Property,
    /// The counterexample.
    pub counterexample: &'a NewCounterexample,
}

impl InternalEvent for CounterexampleFound<'_> {
    fn emit(self, metrics: &Metrics) {
        let (p, cx) = (self.property, self.counterexample);
        tracing::warn!(property = %p.name, kind = cx.kind.as_str(), id = %cx.id, route = %cx.route, "counterexample (provisional until the horizon passes its events)");
        let labels = counterexample_labels(p, cx.kind, &cx.route);
        metrics.counterexamples.get_or_create(&labels).inc();
    }
}

/// A provisional counterexample withdrawn: its stale or superseding event is one of
/// conflicting deliveries.
#[derive(Debug, Clone, Copy)]
pub struct CounterexampleWithdrawn<'a> {
    /// Its property.
    pub property: &'a Property,
    /// The counterexample.
    pub counterexample: &'a NewCounterexample,
}

impl InternalEvent for CounterexampleWithdrawn<'_> {
    fn emit(self, metrics: &Metrics) {
        let (p, cx) = (self.property, self.counterexample);
        tracing::warn!(property = %p.name, kind = cx.kind.as_str(), id = %cx.id, route = %cx.route, "counterexample withdrawn: its stale or superseding event is one of conflicting deliveries");
        let labels = counterexample_labels(p, cx.kind, &cx.route);
        metrics
            .counterexamples_withdrawn
            .get_or_create(&labels)
            .inc();
    }
}

/// Stale commits that the resource rejected: the fence working.
#[derive(Debug, Clone, Copy)]
pub struct StaleRejected<'a> {
    /// Their property.
    pub property: &'a str,
    /// How many since the last report.
    pub count: u64,
}

impl InternalEvent for StaleRejected<'_> {
    fn emit(self, metrics: &Metrics) {
        if self.count == 0 {
            return;
        }
        tracing::debug!(
            property = self.property,
            count = self.count,
            "stale commits rejected by the resource"
        );
        let labels = PropertyLabels {
            property: self.property.into(),
        };
        metrics
            .stale_rejections
            .get_or_create(&labels)
            .inc_by(self.count);
    }
}

/// A partition's assessor restored from its newest usable checkpoint (or started empty), and
/// the recovery steps that took, each at WARN.
#[derive(Debug, Clone, Copy)]
pub struct PartitionRestored<'a> {
    /// The partition (`wal`, `topic/partition`).
    pub partition: &'a str,
    /// The checkpoint's offset, if one was restored.
    pub restored_from: Option<u64>,
    /// Where reading the partition goes on from.
    pub next_offset: u64,
    /// Batches replayed from a local log, if the partition has one.
    pub replayed: Option<u64>,
    /// Newer checkpoints passed over as damaged or undecodable, newest first.
    pub passed_over: &'a [PassedOver],
    /// Checkpoints moved aside, none of which was usable.
    pub quarantined: Option<&'a Quarantined>,
    /// Time restoring (and replaying) took.
    pub elapsed: Duration,
}

impl InternalEvent for PartitionRestored<'_> {
    fn emit(self, _: &Metrics) {
        let partition = self.partition;
        for p in self.passed_over {
            tracing::warn!(
                partition,
                checkpoint = %p.path.display(),
                offset = p.offset,
                bytes = p.bytes,
                reason = %p.reason,
                restored_offset = self.restored_from,
                "passed over a damaged checkpoint (or one that does not decode): restoring an older one and reading the partition again from its offset"
            );
        }
        if let Some(q) = self.quarantined {
            for c in &q.checkpoints {
                let reason = c.problem.as_deref().unwrap_or("not restorable");
                tracing::warn!(partition, checkpoint = %c.path.display(), offset = c.offset, bytes = c.bytes, reason, quarantine = %q.to.display(), "a damaged checkpoint was moved aside");
            }
            let newest_offset = q.checkpoints.first().map_or(0, |c| c.offset);
            tracing::warn!(partition, checkpoints = q.checkpoints.len(), newest_offset, quarantine = %q.to.display(), "no checkpoint of the partition is valid; rebuilding it from the earliest retained offset (exact as long as the source still retains it from its beginning)");
        }
        tracing::info!(
            partition,
            restored_from = ?self.restored_from,
            offset = self.next_offset,
            replayed_records = self.replayed,
            elapsed_ms = self.elapsed.as_millis() as u64,
            "partition restored"
        );
    }
}

/// A partition's checkpoint saved durably.
#[derive(Debug, Clone, Copy)]
pub struct CheckpointSaved<'a> {
    /// The partition.
    pub partition: &'a str,
    /// The offset it covers (the next to apply).
    pub offset: u64,
    /// Its size.
    pub bytes: usize,
    /// Time taken to write it.
    pub elapsed: Duration,
}

impl InternalEvent for CheckpointSaved<'_> {
    fn emit(self, _: &Metrics) {
        tracing::info!(
            partition = self.partition,
            offset = self.offset,
            bytes = self.bytes,
            elapsed_ms = self.elapsed.as_millis() as u64,
            "checkpoint"
        );
    }
}

/// Kafka messages consumed (valid or not).
#[derive(Debug, Clone, Copy)]
pub struct KafkaMessagesConsumed {
    /// How many.
    pub count: u64,
}

impl InternalEvent for KafkaMessagesConsumed {
    fn emit(self, metrics: &Metrics) {
        tracing::trace!(count = self.count, "kafka messages consumed");
        metrics.kafka_messages.inc_by(self.count);
    }
}

/// Kafka messages at offsets `from..end` of a partition, deleted by the broker before they
/// were read (or skipped, and the broker's log start could not be read: `checked` false).
#[derive(Debug, Clone, Copy)]
pub struct KafkaMessagesLost<'a> {
    /// `topic/partition`.
    pub partition: &'a str,
    /// The first offset lost.
    pub from: u64,
    /// The offset after the last.
    pub end: u64,
    /// Whether the broker said that its log now starts at or beyond `end`.
    pub checked: &'a Result<(), String>,
}

impl InternalEvent for KafkaMessagesLost<'_> {
    fn emit(self, metrics: &Metrics) {
        let count = self.end.saturating_sub(self.from);
        match self.checked {
            Ok(()) => tracing::error!(
                partition = self.partition,
                from = self.from,
                end = self.end,
                count,
                "kafka: messages deleted by the broker before they were read; counted as one malformed event (unknown(malformed_event))"
            ),
            Err(e) => tracing::error!(
                partition = self.partition,
                from = self.from,
                end = self.end,
                error = %e,
                "kafka: offsets skipped and the broker's log start unreadable; counted as lost, one malformed event"
            ),
        }
        metrics.kafka_lost.inc_by(count);
    }
}

/// A malformed Kafka message copied with its reason to the dead-letter topic or file.
#[derive(Debug, Clone, Copy)]
pub struct DeadLettered<'a> {
    /// `topic/partition:offset`.
    pub source: &'a str,
    /// Why it is not an event.
    pub reason: &'a str,
}

impl InternalEvent for DeadLettered<'_> {
    fn emit(self, metrics: &Metrics) {
        tracing::debug!(
            source = self.source,
            reason = self.reason,
            "kafka: dead-lettered"
        );
        metrics.kafka_dead_lettered.inc();
    }
}

/// A consumer group rebalance (an assignment or a revocation).
#[derive(Debug, Clone, Copy)]
pub struct Rebalanced<'a> {
    /// `assign` or `revoke` (or the error).
    pub what: &'a str,
    /// The partitions listed.
    pub partitions: usize,
}

impl InternalEvent for Rebalanced<'_> {
    fn emit(self, metrics: &Metrics) {
        tracing::debug!(
            what = self.what,
            partitions = self.partitions,
            "kafka: rebalance"
        );
        metrics.kafka_rebalances.inc();
    }
}
