//! The order keys of deliveries set aside on arrival (SPEC §4 "Duplicates"): a commit or
//! fence with a scope and an `order` that conflicted through another of its keys (its
//! (emitter, seq) or its span) is kept in no scope, yet `check` groups every delivery of its
//! (scope, incarnation, order, epoch) with it. So its order key is settled too: against the
//! kept events of its scope (an equal one is set aside with it, a different one conflicts),
//! or, when none is kept, noted here, for a later delivery of that key to be settled against
//! it (an equal one is set aside, uncounted, as `check` drops it; a different one sets both
//! aside and raises `conflicting_duplicate`). Without this, such a later delivery was
//! applied, and could refute where `check` finds nothing.
//!
//! Rare entries (deliveries that conflicted), in a sorted map by the key's 128-bit hash,
//! until their time falls behind the lowest horizon of the properties; checkpointed.
//!
//! `Live`'s settling of these keys is in the `resettle` module (this one holds the table, which
//! the state does).

use super::conflicts::{Aging, Dated};
use crate::rules::{HAS_ORDER, Rec};
use serde::{Deserialize, Serialize};

/// A delivery set aside on arrival, noted by its order key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Noted {
    pub(super) ts: i64,
    /// Its content hash (`rules::content_hash`).
    pub(super) hash: u64,
    pub(super) prop: u16,
    /// A different delivery of the key was seen (`conflicts` holds the key's span).
    pub(super) conflicted: bool,
}

/// The noted deliveries (the module doc), by the order key's 128-bit hash.
pub(super) type AsideOrders = Aging<u128, Noted>;

impl Dated for Noted {
    fn time(&self) -> i64 {
        self.ts
    }
}

/// The 128-bit hash of the order key (scope, incarnation, order, epoch) of `rec`, naming
/// `scope`, if it has one: a committed or rejected commit or fence with an `order`.
pub(super) fn order_key(rec: &Rec, scope: Option<&str>) -> Option<u128> {
    let scope = scope?;
    if !rec.kind.is_mutation() || !rec.has(HAS_ORDER) {
        return None;
    }
    let mut b = Vec::with_capacity(scope.len() + 27);
    b.extend_from_slice(&rec.inc.to_le_bytes());
    b.extend_from_slice(&rec.order.to_le_bytes());
    match rec.epoch() {
        Some(e) => {
            b.push(1);
            b.extend_from_slice(&e.to_le_bytes());
        }
        None => b.push(0),
    }
    b.extend_from_slice(scope.as_bytes());
    Some(xxhash_rust::xxh3::xxh3_128(&b))
}

/// A key of a delivery dropped as equal to a kept event by another of its keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub(super) enum LinkKey {
    Seq(u32, u64),
    Span(super::spans::SpanId),
}

/// The kept event a dropped delivery was equal to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(super) enum Linked {
    /// Kept in scope `scope` of property `prop`, with this provenance.
    Kept {
        prop: u16,
        scope: u32,
        source: u32,
        position: u64,
    },
    /// The delivery of this (emitter, seq).
    Seq(u32, u64),
    /// The delivery of this span that no scope keeps.
    Unkept(super::spans::SpanId),
}

/// Deliveries dropped as equal to a kept event by one key whose other keys the kept event
/// lacks (its (emitter, seq), its span): `check` links equal deliveries, so a later conflict
/// on those keys sets the kept event aside too. By key, with the dropped delivery's time;
/// rare, swept with the horizon like [`AsideOrders`], checkpointed.
pub(super) type Links = Aging<LinkKey, Dropped>;

/// A link of [`Links`]: the dropped delivery's time, and the kept event it was equal to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Dropped {
    pub(super) ts: i64,
    pub(super) linked: Linked,
}

impl Dated for Dropped {
    fn time(&self) -> i64 {
        self.ts
    }
}
