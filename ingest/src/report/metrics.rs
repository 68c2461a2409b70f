//! The metric families of the evidence (SPEC §6), registered in an injected registry (STYLE 6):
//! [`Metrics::register`] adds them to the caller's `Registry` (the service's, or a test's);
//! there is no global registry. Names are the constants below (all prefixed `fencewatch_`);
//! prometheus-client appends `_total` to counters when encoding, so `EVENTS_INGESTED` is
//! scraped as `fencewatch_events_ingested_total`. No label is ever a scope: label values are
//! sources, reasons, properties, kinds, routes and verdicts, all bounded by the contract or by
//! code. Counters move only through the events of [`crate::report`]; gauges are set from the
//! merged view before each scrape ([`crate::registry::Registry::refresh_gauges`]). The HTTP families are the
//! service's own (`fencewatch-api`).

use fencewatch_assess::{CounterexampleKind, EventTime, Reason, Verdict};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

/// Counter {source}: events accepted into the WAL.
pub const EVENTS_INGESTED: &str = "fencewatch_events_ingested";
/// Counter {source, reason}: events rejected before the WAL (malformed, too long, too far
/// in the future…).
pub const EVENTS_REJECTED: &str = "fencewatch_events_rejected";
/// Counter {property, kind, route}: counterexamples found.
pub const COUNTEREXAMPLES: &str = "fencewatch_counterexamples";
/// Counter {property, kind, route}: provisional counterexamples later withdrawn (their stale
/// or superseding event was one of conflicting deliveries). `fencewatch_counterexamples_total`
/// counts them too, when found: counters never go down.
pub const COUNTEREXAMPLES_WITHDRAWN: &str = "fencewatch_counterexamples_withdrawn";
/// Gauge {property}: counterexamples not yet final (a conflicting delivery could still
/// withdraw them) and not withdrawn.
pub const COUNTEREXAMPLES_PROVISIONAL: &str = "fencewatch_counterexamples_provisional";
/// Gauge {property, reason}: current count of unknown evidence.
pub const UNKNOWN_EVIDENCE: &str = "fencewatch_unknown_evidence";
/// Gauge {property, verdict}: a state set, 1 for the current verdict and 0 for the others.
pub const ASSURANCE: &str = "fencewatch_assurance";
/// Gauge {property}: wall clock minus the evidence watermark.
pub const EVIDENCE_LAG_SECONDS: &str = "fencewatch_evidence_lag_seconds";
/// Gauge {property}: the evidence watermark, Unix seconds.
pub const WATERMARK_SECONDS: &str = "fencewatch_watermark_seconds";
/// Gauge {property, route}: when the route was last observed, Unix seconds.
pub const ROUTE_LAST_SEEN_SECONDS: &str = "fencewatch_route_last_seen_seconds";
/// Gauge {property, premise, route}: whether each required premise is supported now (SPEC
/// §10), 1 or 0 (`route` empty for a property-wide premise).
pub const PREMISE_SUPPORTED: &str = "fencewatch_premise_supported";
/// Gauge {property, premise, route}: when each required premise's current support ends (Unix
/// seconds; 0 when unsupported, +Inf when it has no end).
pub const PREMISE_SUPPORT_END_SECONDS: &str = "fencewatch_premise_support_end_seconds";
/// Gauge {property}: attestations naming a premise or route the contract does not require.
pub const ATTESTATIONS_IGNORED: &str = "fencewatch_attestations_ignored";
/// Counter {property}: commits that the resource rejected as stale (the fence working).
pub const STALE_REJECTIONS: &str = "fencewatch_stale_rejections";
/// Gauge: scopes with resident state.
pub const ACTIVE_SCOPES: &str = "fencewatch_active_scopes";
/// Gauge: approximate bytes of the resident assessor state (scopes, emitters, names, spans).
pub const STATE_BYTES: &str = "fencewatch_state_bytes";
/// Gauge: bytes of the WAL on disk.
pub const WAL_BYTES: &str = "fencewatch_wal_bytes";
/// Gauge: the offset the next WAL append gets.
pub const WAL_NEXT_OFFSET: &str = "fencewatch_wal_next_offset";
/// Gauge: seconds since the last durable checkpoint.
pub const CHECKPOINT_AGE_SECONDS: &str = "fencewatch_checkpoint_age_seconds";
/// Gauge: the WAL offset the last durable checkpoint covers.
pub const CHECKPOINT_OFFSET: &str = "fencewatch_checkpoint_offset";
/// Gauge {topic, partition}: messages between the consumer's position and the partition's end.
pub const KAFKA_CONSUMER_LAG: &str = "fencewatch_kafka_consumer_lag";
/// Gauge: Kafka partitions assigned to this instance.
pub const KAFKA_ASSIGNED_PARTITIONS: &str = "fencewatch_kafka_assigned_partitions";
/// Counter: consumer group rebalances (assignments and revocations).
pub const KAFKA_REBALANCES: &str = "fencewatch_kafka_rebalances";
/// Counter: malformed messages copied to the dead-letter topic or file.
pub const KAFKA_DEAD_LETTERED: &str = "fencewatch_kafka_dead_lettered_messages";
/// Counter: Kafka messages deleted by the broker (retention) before they were read.
pub const KAFKA_LOST: &str = "fencewatch_kafka_lost_messages";
/// Counter: Kafka messages consumed.
pub const KAFKA_MESSAGES: &str = "fencewatch_kafka_messages";
/// Gauge: 1 while a Kafka broker answers, 0 when all are down.
pub const KAFKA_CONNECTED: &str = "fencewatch_kafka_connected";
/// Gauge: bytes of ingest bodies in flight (read, queued or being applied).
pub const INGEST_PENDING_BYTES: &str = "fencewatch_ingest_pending_bytes";
/// Counter {signal}: OTLP spans and log records without `fencing.kind`, neither taken nor
/// rejected.
pub const OTLP_ITEMS_IGNORED: &str = "fencewatch_otlp_items_ignored";
/// Labels {signal}.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SignalLabels {
    /// `traces` or `logs`.
    pub signal: &'static str,
}

/// Labels {source}.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SourceLabels {
    /// `http`, `file`, `kafka`, `otlp`.
    pub source: String,
}

/// Labels {source, reason}.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RejectedLabels {
    /// Where the event came from.
    pub source: String,
    /// Why it was rejected.
    pub reason: String,
}

/// The `route` label of a counterexample whose route the contract does not declare.
pub const UNDECLARED_ROUTE: &str = "undeclared";

/// Labels {property, kind, route}.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CounterexampleLabels {
    /// The contract property.
    pub property: String,
    /// The counterexample kind's wire name.
    pub kind: String,
    /// The route of the stale commit when declared, [`UNDECLARED_ROUTE`] for any other, empty
    /// when it had none.
    pub route: String,
}

/// Labels {property, reason}.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UnknownLabels {
    /// The contract property.
    pub property: String,
    /// The unknown reason's wire name.
    pub reason: String,
}

/// Labels {property, verdict}.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AssuranceLabels {
    /// The contract property.
    pub property: String,
    /// `holds`, `unknown` or `refuted`.
    pub verdict: String,
}

/// Labels {property}.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PropertyLabels {
    /// The contract property.
    pub property: String,
}

/// Labels {property, route}.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabels {
    /// The contract property.
    pub property: String,
    /// A route of the property.
    pub route: String,
}

/// Labels {topic, partition}.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PartitionLabels {
    /// The Kafka topic.
    pub topic: String,
    /// The partition number.
    pub partition: i32,
}

/// A gauge of seconds.
pub type FloatGauge = Gauge<f64, AtomicU64>;

pub(crate) fn counterexample_labels(
    property: &fencewatch_assess::contract::Property,
    kind: CounterexampleKind,
    route: &str,
) -> CounterexampleLabels {
    let declared = route.is_empty() || property.routes.iter().any(|r| r.name == route);
    CounterexampleLabels {
        property: property.name.clone(),
        kind: kind.as_str().into(),
        route: if declared { route } else { UNDECLARED_ROUTE }.into(),
    }
}

/// Every metric family of `serve`. Cloning shares the values.
#[derive(Debug, Clone)]
pub struct Metrics {
    /// See [`EVENTS_INGESTED`].
    pub events_ingested: Family<SourceLabels, Counter>,
    /// See [`EVENTS_REJECTED`].
    pub events_rejected: Family<RejectedLabels, Counter>,
    /// See [`COUNTEREXAMPLES`].
    pub counterexamples: Family<CounterexampleLabels, Counter>,
    /// See [`COUNTEREXAMPLES_WITHDRAWN`].
    pub counterexamples_withdrawn: Family<CounterexampleLabels, Counter>,
    /// See [`COUNTEREXAMPLES_PROVISIONAL`].
    pub counterexamples_provisional: Family<PropertyLabels, Gauge>,
    /// See [`UNKNOWN_EVIDENCE`].
    pub unknown_evidence: Family<UnknownLabels, Gauge>,
    /// See [`ASSURANCE`]; written through [`Metrics::set_assurance`].
    pub assurance: Family<AssuranceLabels, Gauge>,
    /// See [`EVIDENCE_LAG_SECONDS`].
    pub evidence_lag_seconds: Family<PropertyLabels, FloatGauge>,
    /// See [`WATERMARK_SECONDS`].
    pub watermark_seconds: Family<PropertyLabels, FloatGauge>,
    /// See [`ROUTE_LAST_SEEN_SECONDS`].
    pub route_last_seen_seconds: Family<RouteLabels, FloatGauge>,
    /// See [`STALE_REJECTIONS`].
    pub stale_rejections: Family<PropertyLabels, Counter>,
    /// See [`ACTIVE_SCOPES`].
    pub active_scopes: Gauge,
    /// See [`STATE_BYTES`].
    pub state_bytes: Gauge,
    /// See [`WAL_BYTES`].
    pub wal_bytes: Gauge,
    /// See [`WAL_NEXT_OFFSET`].
    pub wal_next_offset: Gauge,
    /// See [`CHECKPOINT_AGE_SECONDS`].
    pub checkpoint_age_seconds: FloatGauge,
    /// See [`CHECKPOINT_OFFSET`].
    pub checkpoint_offset: Gauge,
    /// See [`INGEST_PENDING_BYTES`].
    pub ingest_pending_bytes: Gauge,
    /// See [`OTLP_ITEMS_IGNORED`].
    pub otlp_items_ignored: Family<SignalLabels, Counter>,
    /// See [`KAFKA_CONSUMER_LAG`].
    pub kafka_consumer_lag: Family<PartitionLabels, Gauge>,
    /// See [`KAFKA_ASSIGNED_PARTITIONS`].
    pub kafka_assigned_partitions: Gauge,
    /// See [`KAFKA_REBALANCES`].
    pub kafka_rebalances: Counter,
    /// See [`KAFKA_DEAD_LETTERED`].
    pub kafka_dead_lettered: Counter,
    /// See [`KAFKA_LOST`].
    pub kafka_lost: Counter,
    /// See [`KAFKA_MESSAGES`].
    pub kafka_messages: Counter,
    /// See [`KAFKA_CONNECTED`].
    pub kafka_connected: Gauge,
    /// See [`PREMISE_SUPPORTED`].
    pub premise_supported: Family<PremiseLabels, Gauge>,
    /// See [`PREMISE_SUPPORT_END_SECONDS`].
    pub premise_support_end_seconds: Family<PremiseLabels, FloatGauge>,
    /// See [`ATTESTATIONS_IGNORED`].
    pub attestations_ignored: Family<PropertyLabels, Gauge>,
}

/// Labels {property, premise, route}.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PremiseLabels {
    /// The contract property.
    pub property: String,
    /// A required premise.
    pub premise: String,
    /// Its fenced route, empty for a property-wide premise.
    pub route: String,
}

fn seconds(t: EventTime) -> f64 {
    t.0 as f64 / 1e9
}

impl Metrics {
    /// Registers every family in `registry` and returns handles to them.
    pub fn register(registry: &mut Registry) -> Metrics {
        let m = Metrics {
            events_ingested: Family::default(),
            events_rejected: Family::default(),
            counterexamples: Family::default(),
            counterexamples_withdrawn: Family::default(),
            counterexamples_provisional: Family::default(),
            unknown_evidence: Family::default(),
            assurance: Family::default(),
            evidence_lag_seconds: Family::default(),
            watermark_seconds: Family::default(),
            route_last_seen_seconds: Family::default(),
            stale_rejections: Family::default(),
            active_scopes: Gauge::default(),
            state_bytes: Gauge::default(),
            wal_bytes: Gauge::default(),
            wal_next_offset: Gauge::default(),
            checkpoint_age_seconds: FloatGauge::default(),
            checkpoint_offset: Gauge::default(),
            ingest_pending_bytes: Gauge::default(),
            otlp_items_ignored: Family::default(),
            kafka_consumer_lag: Family::default(),
            kafka_assigned_partitions: Gauge::default(),
            kafka_rebalances: Counter::default(),
            kafka_dead_lettered: Counter::default(),
            kafka_lost: Counter::default(),
            kafka_messages: Counter::default(),
            kafka_connected: Gauge::default(),
            premise_supported: Family::default(),
            premise_support_end_seconds: Family::default(),
            attestations_ignored: Family::default(),
        };
        let r = registry;
        r.register(
            PREMISE_SUPPORTED,
            "Whether each required premise is supported by a fresh attestation now (1) or not (0)",
            m.premise_supported.clone(),
        );
        r.register(
            PREMISE_SUPPORT_END_SECONDS,
            "When each required premise's current support ends (0 when unsupported)",
            m.premise_support_end_seconds.clone(),
        );
        r.register(
            ATTESTATIONS_IGNORED,
            "Attestations naming a premise or route the contract does not require",
            m.attestations_ignored.clone(),
        );
        r.register(
            EVENTS_INGESTED,
            "Events accepted into the WAL",
            m.events_ingested.clone(),
        );
        r.register(
            EVENTS_REJECTED,
            "Events rejected before the WAL",
            m.events_rejected.clone(),
        );
        r.register(
            COUNTEREXAMPLES,
            "Counterexamples found",
            m.counterexamples.clone(),
        );
        r.register(
            COUNTEREXAMPLES_WITHDRAWN,
            "Provisional counterexamples later withdrawn (they rested on a conflicting delivery)",
            m.counterexamples_withdrawn.clone(),
        );
        r.register(
            COUNTEREXAMPLES_PROVISIONAL,
            "Counterexamples not yet final and not withdrawn",
            m.counterexamples_provisional.clone(),
        );
        r.register(
            UNKNOWN_EVIDENCE,
            "Current count of unknown evidence",
            m.unknown_evidence.clone(),
        );
        r.register(
            ASSURANCE,
            "Current verdict as a state set (1 = current)",
            m.assurance.clone(),
        );
        r.register(
            EVIDENCE_LAG_SECONDS,
            "Wall clock minus the evidence watermark",
            m.evidence_lag_seconds.clone(),
        );
        r.register(
            WATERMARK_SECONDS,
            "Evidence watermark, Unix seconds",
            m.watermark_seconds.clone(),
        );
        r.register(
            ROUTE_LAST_SEEN_SECONDS,
            "Last observation of a route, Unix seconds",
            m.route_last_seen_seconds.clone(),
        );
        r.register(
            STALE_REJECTIONS,
            "Stale commits the resource rejected",
            m.stale_rejections.clone(),
        );
        r.register(
            ACTIVE_SCOPES,
            "Scopes with resident state",
            m.active_scopes.clone(),
        );
        r.register(
            STATE_BYTES,
            "Approximate bytes of the resident assessor state: scopes, emitters, names, spans",
            m.state_bytes.clone(),
        );
        r.register(
            WAL_BYTES,
            "Bytes of the write-ahead log on disk",
            m.wal_bytes.clone(),
        );
        r.register(
            WAL_NEXT_OFFSET,
            "Offset of the next WAL append",
            m.wal_next_offset.clone(),
        );
        r.register(
            CHECKPOINT_AGE_SECONDS,
            "Seconds since the last durable checkpoint",
            m.checkpoint_age_seconds.clone(),
        );
        r.register(
            CHECKPOINT_OFFSET,
            "WAL offset covered by the last durable checkpoint",
            m.checkpoint_offset.clone(),
        );
        r.register(
            INGEST_PENDING_BYTES,
            "Bytes of ingest bodies in flight",
            m.ingest_pending_bytes.clone(),
        );
        r.register(
            OTLP_ITEMS_IGNORED,
            "OTLP spans and log records without fencing.kind (neither taken nor rejected)",
            m.otlp_items_ignored.clone(),
        );
        m
    }

    /// Registers the Kafka families too (only a service that consumes Kafka exposes them, so
    /// that an HTTP-only one does not look like a disconnected consumer).
    pub fn register_kafka(&self, registry: &mut Registry) {
        let (m, r) = (self, registry);
        r.register(
            KAFKA_CONSUMER_LAG,
            "Kafka messages between the consumer's position and the partition's end",
            m.kafka_consumer_lag.clone(),
        );
        r.register(
            KAFKA_ASSIGNED_PARTITIONS,
            "Kafka partitions assigned to this instance",
            m.kafka_assigned_partitions.clone(),
        );
        r.register(
            KAFKA_REBALANCES,
            "Kafka consumer group rebalances",
            m.kafka_rebalances.clone(),
        );
        r.register(
            KAFKA_DEAD_LETTERED,
            "Malformed Kafka messages dead-lettered",
            m.kafka_dead_lettered.clone(),
        );
        r.register(
            KAFKA_LOST,
            "Kafka messages deleted by the broker (retention) before they were read, each range one malformed event",
            m.kafka_lost.clone(),
        );
        r.register(
            KAFKA_MESSAGES,
            "Kafka messages consumed",
            m.kafka_messages.clone(),
        );
        r.register(
            KAFKA_CONNECTED,
            "1 while a Kafka broker answers",
            m.kafka_connected.clone(),
        );
    }

    /// Sets the count of provisional counterexamples of `property`.
    pub fn set_provisional(&self, property: &str, n: usize) {
        let labels = PropertyLabels {
            property: property.into(),
        };
        self.counterexamples_provisional
            .get_or_create(&labels)
            .set(n as i64);
    }

    /// Sets the current count of unknown evidence of `property` for `reason`.
    pub fn set_unknown(&self, property: &str, reason: Reason, count: i64) {
        let labels = UnknownLabels {
            property: property.into(),
            reason: reason.as_str().into(),
        };
        self.unknown_evidence.get_or_create(&labels).set(count);
    }

    /// Writes the state set of `property`: 1 for `verdict`, 0 for the two others.
    pub fn set_assurance(&self, property: &str, verdict: Verdict) {
        for v in [Verdict::Holds, Verdict::Unknown, Verdict::Refuted] {
            let labels = AssuranceLabels {
                property: property.into(),
                verdict: v.as_str().into(),
            };
            self.assurance
                .get_or_create(&labels)
                .set(i64::from(v == verdict));
        }
    }

    /// Sets the watermark of `property` and its lag behind the wall clock `now`.
    pub fn set_watermark(&self, property: &str, watermark: EventTime, now: EventTime) {
        let labels = PropertyLabels {
            property: property.into(),
        };
        self.watermark_seconds
            .get_or_create(&labels)
            .set(seconds(watermark));
        let lag = seconds(now) - seconds(watermark);
        self.evidence_lag_seconds
            .get_or_create(&labels)
            .set(lag.max(0.0));
    }

    /// Sets whether a required premise is supported now and until when (`end` in ns,
    /// `i64::MAX` for no end).
    pub fn set_premise(&self, labels: PremiseLabels, end: Option<i64>) {
        self.premise_supported
            .get_or_create(&labels)
            .set(i64::from(end.is_some()));
        let end = match end {
            None => 0.0,
            Some(i64::MAX) => f64::INFINITY,
            Some(t) => seconds(EventTime(t)),
        };
        self.premise_support_end_seconds
            .get_or_create(&labels)
            .set(end);
    }

    /// Sets the attestations of `property` that were ignored.
    pub fn set_attestations_ignored(&self, property: &str, n: u64) {
        let labels = PropertyLabels {
            property: property.into(),
        };
        self.attestations_ignored
            .get_or_create(&labels)
            .set(n as i64);
    }

    /// Sets when `route` of `property` was last observed.
    pub fn set_route_last_seen(&self, property: &str, route: &str, at: EventTime) {
        let labels = RouteLabels {
            property: property.into(),
            route: route.into(),
        };
        self.route_last_seen_seconds
            .get_or_create(&labels)
            .set(seconds(at));
    }
}
