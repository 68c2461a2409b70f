//! The duplicate keys whose deliveries conflicted (SPEC §4 "Duplicates"), each with the
//! properties it named and the times its deliveries span, so that a further delivery is
//! placed as `check` places one group of a key: `conflicting_duplicate` counted once for
//! each property any delivery names, over every window from the earliest delivery to the
//! latest. A further delivery naming a property the key had not named counts there; one
//! beyond the span widens it, for every property counted.
//!
//! Conflicts are rare (a delivery that differs from another of its key), so a sorted map is
//! enough: kept until their latest delivery falls behind the lowest horizon of the
//! properties, checkpointed with the state. One whose entry is gone (behind the horizon) is
//! placed at the further delivery's window alone, as before this table.
//!
//! `Live`'s placing of a further delivery is in the `resettle` module (this one holds the table,
//! which the state does).

use super::spans::SpanId;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A duplicate key, as a conflict is found again by it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub(super) enum ConflictKey {
    /// An (emitter, seq).
    Seq(u32, u64),
    /// The order key of the kept event with this provenance (source, position): its first
    /// delivery, kept in a scope and set aside there.
    Order(u32, u64),
    /// A span id.
    Span(SpanId),
    /// The 128-bit hash of an order key whose first delivery was set aside on arrival (the
    /// `aside` module).
    Noted(u128),
}

/// One conflicted key: the properties counted, and the times its deliveries span.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Conflict {
    pub(super) lo: i64,
    pub(super) hi: i64,
    pub(super) props: Vec<u16>,
}

/// The conflicted keys (the module doc).
pub(super) type Conflicts = Aging<ConflictKey, Conflict>;

/// A time an entry of an [`Aging`] table holds: it is dropped once that falls behind the
/// lowest horizon of the properties.
pub(super) trait Dated {
    fn time(&self) -> i64;
}

impl Dated for Conflict {
    /// Its latest delivery.
    fn time(&self) -> i64 {
        self.hi
    }
}

/// A table of rare entries kept until their time ([`Dated`]) falls behind the lowest
/// horizon: swept when it holds twice the entries alive after the last sweep (at least
/// 1,024). The conflicts here, the order keys and links of the `aside` module.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Aging<K: Ord, V> {
    pub(super) map: BTreeMap<K, V>,
    sweep_at: usize,
}

const SWEEP_MIN: usize = 1 << 10;

impl<K: Ord, V> Default for Aging<K, V> {
    fn default() -> Aging<K, V> {
        Aging {
            map: BTreeMap::new(),
            sweep_at: SWEEP_MIN,
        }
    }
}

impl<K: Ord, V: Dated> Aging<K, V> {
    pub(super) fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Whether `key` is held.
    pub(super) fn contains(&self, key: &K) -> bool {
        self.map.contains_key(key)
    }

    /// Whether a sweep is due.
    pub(super) fn needs_sweep(&self) -> bool {
        self.map.len() > self.sweep_at
    }

    /// Drops the entries behind `horizon`.
    pub(super) fn sweep(&mut self, horizon: i64) {
        self.sweep_keeping(horizon, |_| false);
    }

    /// Drops the entries behind `horizon` but those whose key `keep` holds.
    pub(super) fn sweep_keeping(&mut self, horizon: i64, keep: impl Fn(&K) -> bool) {
        self.map.retain(|k, v| v.time() >= horizon || keep(k));
        self.sweep_at = (2 * self.map.len()).max(SWEEP_MIN);
    }

    /// Approximate heap bytes.
    pub(super) fn heap_bytes(&self) -> usize {
        self.map.len() * (std::mem::size_of::<(K, V)>() + 16)
    }
}
