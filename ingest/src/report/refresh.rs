//! What the local partition's writer keeps for the scrape ([`Durability`]); the gauges derived
//! from the merged view are set by [`Registry::refresh_gauges`](crate::registry::Registry::refresh_gauges).

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64};

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
