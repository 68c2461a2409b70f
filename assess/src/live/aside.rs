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

use super::conflicts::ConflictKey;
use super::state::Live;
use crate::event::Event;
use crate::finding::Reason;
use crate::rules::{self, ASIDE, HAS_ORDER, Reasons, Rec};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A delivery set aside on arrival, noted by its order key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct Noted {
    ts: i64,
    /// Its content hash (`rules::content_hash`).
    hash: u64,
    prop: u16,
    /// A different delivery of the key was seen (`conflicts` holds the key's span).
    conflicted: bool,
}

/// The noted deliveries (the module doc), swept when they hold twice the entries alive
/// after the last sweep (at least 1,024).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct AsideOrders {
    map: BTreeMap<u128, Noted>,
    sweep_at: usize,
}

const SWEEP_MIN: usize = 1 << 10;

impl Default for AsideOrders {
    fn default() -> AsideOrders {
        AsideOrders {
            map: BTreeMap::new(),
            sweep_at: SWEEP_MIN,
        }
    }
}

impl AsideOrders {
    /// Whether a sweep is due.
    pub(super) fn needs_sweep(&self) -> bool {
        self.map.len() > self.sweep_at
    }

    /// Drops the deliveries behind `horizon`.
    pub(super) fn sweep(&mut self, horizon: i64) {
        self.map.retain(|_, n| n.ts >= horizon);
        self.sweep_at = (2 * self.map.len()).max(SWEEP_MIN);
    }

    /// Approximate heap bytes.
    pub(super) fn heap_bytes(&self) -> usize {
        self.map.len() * (std::mem::size_of::<(u128, Noted)>() + 16)
    }

    pub(super) fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

/// The 128-bit hash of the order key (scope, incarnation, order, epoch) of `rec`, naming
/// `scope`, if it has one: a committed or rejected commit or fence with an `order`.
fn order_key(rec: &Rec, scope: Option<&str>) -> Option<u128> {
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

impl Live {
    /// Settles the order key of `rec` (of property `p`, event `ev`), set aside on arrival by
    /// another of its keys (the module doc).
    pub(super) fn settle_aside_order(&mut self, p: usize, rec: &Rec, ev: &Event<'_>) {
        let Some(scope) = ev.scope else { return };
        let Some(hash) = order_key(rec, Some(scope)) else {
            return;
        };
        let same_key = |e: &Rec| e.order_key() == Some((rec.inc, rec.order, rec.epoch()));
        let kept = (0..self.state.props.len()).find_map(|q| {
            let st = self.state.props[q].scopes.get(scope)?;
            let first = st.events().iter().find(|e| same_key(e))?;
            Some((q, *first))
        });
        let Some((q, first)) = kept else {
            self.note_aside_order(p, rec, ev, hash);
            return;
        };
        let key = ConflictKey::Order(first.source, first.position);
        if first.has(ASIDE) && self.state.conflicts.contains(&key) {
            self.place_conflict_again(key, p, rec, (p == q).then_some(first.ts));
            return;
        }
        let equal = first.same_content(rec);
        if !equal {
            let scope = scope.to_string();
            let detail = move |_: &Live| {
                format!(
                    "two different events of scope `{scope}` carry incarnation {}, order {} and {}",
                    rec.inc,
                    rec.order,
                    rec.epoch()
                        .map_or_else(|| "no epoch".to_string(), |e| format!("epoch {e}"))
                )
            };
            let d = detail(self);
            self.raise_span(p, rec, first.ts, Reason::ConflictingDuplicate, |_| {
                d.clone()
            });
            if p != q {
                self.raise_span(q, &first, rec.ts, Reason::ConflictingDuplicate, |_| d);
            }
            self.note_conflict(key, first.ts, rec.ts, [p, q]);
        }
        // Equal or not, a kept delivery of a key with a delivery set aside is set aside.
        if !first.has(ASIDE) {
            self.set_aside_first(q, first);
        }
    }

    /// Notes `rec` (of property `p`, event `ev`), set aside on arrival, under its order key
    /// `hash`, which no kept event shares; or settles it against the delivery noted there.
    fn note_aside_order(&mut self, p: usize, rec: &Rec, ev: &Event<'_>, hash: u128) {
        let content = rules::content_hash(ev, p as u16);
        match self.state.aside_orders.map.get(&hash).copied() {
            None => {
                let n = Noted {
                    ts: rec.ts,
                    hash: content,
                    prop: p as u16,
                    conflicted: false,
                };
                self.state.aside_orders.map.insert(hash, n);
            }
            Some(n) => {
                self.settle_noted(p, rec, hash, n, content);
            }
        }
    }

    /// Settles `rec` (of property `p`, `content` its content hash), a delivery of the order
    /// key `hash`, against the delivery `n` noted under it: `true` when it is to be set aside
    /// or dropped rather than applied (an equal delivery: dropped, uncounted; a different
    /// one: set aside with the noted one, `conflicting_duplicate` raised for the properties
    /// they name).
    fn settle_noted(&mut self, p: usize, rec: &Rec, hash: u128, n: Noted, content: u64) -> bool {
        let key = ConflictKey::Noted(hash);
        if n.conflicted {
            self.place_conflict_again(key, p, rec, (usize::from(n.prop) == p).then_some(n.ts));
            return true;
        }
        if n.hash == content {
            return true;
        }
        let q = usize::from(n.prop);
        let detail = "differs from a delivery of the same scope, incarnation, order and epoch set aside before";
        self.raise_span(p, rec, n.ts, Reason::ConflictingDuplicate, |_| {
            detail.to_string()
        });
        if q != p {
            let was = Rec {
                ts: n.ts,
                prop: n.prop,
                ..*rec
            };
            self.raise_span(q, &was, rec.ts, Reason::ConflictingDuplicate, |_| {
                detail.to_string()
            });
        }
        self.note_conflict(key, n.ts, rec.ts, [p, q]);
        if let Some(n) = self.state.aside_orders.map.get_mut(&hash) {
            n.conflicted = true;
        }
        true
    }

    /// A new delivery `rec` (of property `p`, event `ev`) whose order key no kept event
    /// shares: whether it is to be set aside (`Some(true)`: counted as an event of its
    /// property) or dropped (`Some(false)`) against a delivery set aside before under that
    /// key, `None` to apply it.
    pub(super) fn settle_order_aside(
        &mut self,
        p: usize,
        rec: &Rec,
        ev: &Event<'_>,
    ) -> Option<bool> {
        if self.state.aside_orders.is_empty() {
            return None;
        }
        let hash = order_key(rec, ev.scope)?;
        let n = *self.state.aside_orders.map.get(&hash)?;
        let content = rules::content_hash(ev, p as u16);
        let equal = !n.conflicted && n.hash == content;
        self.settle_noted(p, rec, hash, n, content);
        Some(!equal)
    }

    /// Sets aside `first`, kept in property `q`, a delivery of a key whose other delivery is
    /// set aside: its per-event reasons taken back (once: its (emitter, seq) then takes back
    /// nothing again), its scope decided again without it.
    pub(super) fn set_aside_first(&mut self, q: usize, first: Rec) {
        let route = self.route_ids.route(q, first.route);
        let reasons = Reasons::of(&first, route, &self.contract.properties[q]);
        self.withdraw_reasons(q, first.ts, reasons);
        if let Some((em, seq)) = first.seq_key()
            && let Some(d) = (self.state.emitters.get_mut(&em))
                .and_then(|e| e.recent.get_mut(seq))
                .filter(|d| d.ts == first.ts && usize::from(d.prop) == q)
        {
            d.reasons = Reasons::EMPTY;
        }
        let (src, pos) = (first.source, first.position);
        self.set_aside_kept(q, first.scope, move |e: &Rec| {
            (e.source, e.position) == (src, pos)
        });
    }
}
