//! The gauges derived from the merged view and from the local partition's durability, set
//! before each scrape.

use super::Metrics;
use crate::registry::Registry;
use fencewatch_assess::EventTime;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};

/// WAL and checkpoint figures of the local partition, kept by its writer for the scrape.
#[derive(Debug, Default)]
pub struct Durability {
    /// Bytes of WAL segments on disk.
    pub wal_bytes: AtomicU64,
    /// Next WAL offset.
    pub next_offset: AtomicU64,
    /// Offset of the last checkpoint.
    pub checkpoint_offset: AtomicU64,
    /// Wall time of the last checkpoint (ns), 0 before the first.
    pub checkpoint_at: AtomicI64,
    /// Whether the WAL failed (the writer then refuses batches).
    pub failed: AtomicBool,
}

/// Sets every gauge of `metrics` derived from the partitions of `registry` at wall time `now`
/// (ns), the local partition's `durability` and the ingest bytes in flight.
pub fn refresh(
    metrics: &Metrics,
    registry: &Registry,
    durability: &Durability,
    pending_bytes: u64,
    now: EventTime,
) {
    let now = now.0;
    let contract = registry.contract();
    registry.query(|view| {
        for (p, prop) in contract.properties.iter().enumerate() {
            let a = view.assurance(p, now, prop.assurance_window.0, now);
            metrics.set_assurance(&prop.name, a.verdict);
            metrics.set_provisional(&prop.name, view.provisional_count(p));
            let counts = view.unknown_counts(p);
            for r in fencewatch_assess::Reason::ALL {
                let n = counts.get(&r).copied().unwrap_or(0) as i64;
                metrics.set_unknown(&prop.name, r, n);
            }
            let wm = view.watermark(p);
            if wm != EventTime::MIN {
                metrics.set_watermark(&prop.name, wm, EventTime(now));
            }
            for r in view.coverage(p).routes {
                if let Some(t) = r.last_seen_ns {
                    metrics.set_route_last_seen(&prop.name, &r.name, EventTime(t));
                }
            }
            for pv in view.premises(p, now) {
                let labels = super::metrics::PremiseLabels {
                    property: prop.name.clone(),
                    premise: pv.premise.name,
                    route: pv.premise.route.unwrap_or_default(),
                };
                metrics.set_premise(labels, pv.supported_until_ns);
            }
            metrics.set_attestations_ignored(&prop.name, view.attestations_ignored(p));
        }
    });
    let (mut scopes, mut bytes) = (0, 0);
    registry.for_each(|_, part| {
        scopes += part.live().active_scopes();
        bytes += part.live().state_bytes();
    });
    metrics.active_scopes.set(scopes as i64);
    metrics.ingest_pending_bytes.set(pending_bytes as i64);
    metrics.state_bytes.set(bytes as i64);
    let d = durability;
    metrics
        .wal_bytes
        .set(d.wal_bytes.load(Ordering::Acquire) as i64);
    metrics
        .wal_next_offset
        .set(d.next_offset.load(Ordering::Acquire) as i64);
    metrics
        .checkpoint_offset
        .set(d.checkpoint_offset.load(Ordering::Acquire) as i64);
    let at = d.checkpoint_at.load(Ordering::Acquire);
    if at > 0 {
        metrics.checkpoint_age_seconds.set((now - at) as f64 / 1e9);
    }
}
