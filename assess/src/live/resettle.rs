//! `serve`'s settlement of keys beyond the first conflict (the `conflicts` module: further
//! deliveries placed as `check` places a key's group) and of the order keys of deliveries set
//! aside on arrival (the `aside` module).

use super::aside::{Dropped, LinkKey, Linked, Noted, order_key};
use super::conflicts::{Conflict, ConflictKey};
use super::dups::Seen;
use super::spans::SpanId;
use super::state::Live;
use crate::event::{Event, Kind};
use crate::finding::Reason;
use crate::rules::{self, ASIDE, NONE, Reasons, Rec};

impl Live {
    /// Notes that `key`'s deliveries at `a` and `b` conflicted, `conflicting_duplicate`
    /// counted and placed over them for `props` (the caller did).
    pub(super) fn note_conflict(
        &mut self,
        key: ConflictKey,
        a: i64,
        b: i64,
        props: impl IntoIterator<Item = usize>,
    ) {
        let mut props: Vec<u16> = props.into_iter().map(|p| p as u16).collect();
        props.sort_unstable();
        props.dedup();
        let c = Conflict {
            lo: a.min(b),
            hi: a.max(b),
            props,
        };
        self.state.conflicts.insert(key, c);
    }

    /// Places `conflicting_duplicate` for `rec`, a further delivery (of property `p`) of
    /// `key`, whose deliveries conflicted already (the module doc): counted and placed over
    /// the key's whole span if the key had not named `p`; otherwise the span widened to `rec`
    /// for every property counted. `fallback`: where the key's entry is gone, the time of its
    /// first delivery of property `p`'s, whose window `rec`'s shares adds nothing.
    pub(super) fn place_conflict_again(
        &mut self,
        key: ConflictKey,
        p: usize,
        rec: &Rec,
        fallback: Option<i64>,
    ) {
        let ts = rec.ts;
        let Some(c) = self.state.conflicts.map.get_mut(&key) else {
            let series = &mut self.state.props[p].tally.series;
            if fallback.is_none_or(|f| series.index(ts) != series.index(f)) {
                series.add_reason(ts, Reason::ConflictingDuplicate);
            }
            return;
        };
        let (lo, hi) = (c.lo, c.hi);
        (c.lo, c.hi) = (lo.min(ts), hi.max(ts));
        let new = !c.props.contains(&(p as u16));
        if new {
            c.props.push(p as u16);
        }
        let props = c.props.clone();
        for q in props.into_iter().map(usize::from) {
            if q == p && new {
                self.count(p, rec, Reason::ConflictingDuplicate, |_| {
                    "differs from another delivery under the same key".to_string()
                });
                let series = &mut self.state.props[p].tally.series;
                if rec.kind != Kind::Attestation {
                    series.cover(ts);
                }
                series.add_reason_span(lo.min(ts), hi.max(ts), Reason::ConflictingDuplicate);
                continue;
            }
            let series = &mut self.state.props[q].tally.series;
            if rec.kind != Kind::Attestation && q == p {
                series.cover(ts);
            }
            let (klo, khi, kts) = (series.index(lo), series.index(hi), series.index(ts));
            if kts > khi {
                series.add_reason(ts, Reason::ConflictingDuplicate);
                if kts - khi > 1 {
                    series.add_span(khi + 1, kts - 1, Reason::ConflictingDuplicate);
                }
            } else if kts < klo {
                series.add_reason(ts, Reason::ConflictingDuplicate);
                if klo - kts > 1 {
                    series.add_span(kts + 1, klo - 1, Reason::ConflictingDuplicate);
                }
            }
        }
    }
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
        if !first.same_content(rec) {
            let d = super::dups::order_conflict(scope, rec);
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
                self.state.aside_orders.insert(hash, n);
            }
            Some(n) => {
                self.settle_noted(p, rec, hash, n, content);
            }
        }
    }

    /// Settles `rec` (of property `p`, `content` its content hash), a delivery of the order
    /// key `hash`, against the delivery `n` noted under it, which it is never applied beside:
    /// `false` when it is equal (dropped, uncounted), `true` when it is set aside (with the
    /// noted one, `conflicting_duplicate` raised for the properties they name).
    fn settle_noted(&mut self, p: usize, rec: &Rec, hash: u128, n: Noted, content: u64) -> bool {
        let key = ConflictKey::Noted(hash);
        if n.conflicted {
            self.place_conflict_again(key, p, rec, (usize::from(n.prop) == p).then_some(n.ts));
            return true;
        }
        if n.hash == content {
            return false;
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
        Some(self.settle_noted(p, rec, hash, n, content))
    }

    /// Sets aside `first`, kept in property `q`, a delivery of a key whose other delivery is
    /// set aside: its per-event reasons taken back (once: its (emitter, seq) then takes back
    /// nothing again), its scope decided again without it.
    pub(super) fn set_aside_first(&mut self, q: usize, first: Rec) {
        let route = self.route_ids.route(q, first.route);
        let reasons = Reasons::of(&first, route, &self.contract.properties[q]);
        self.withdraw_reasons(q, first.ts, reasons);
        if let Some((em, seq)) = first.seq_key()
            && let Some(d) = (self.state.delivery_mut(em, seq))
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

impl Live {
    /// Links the keys of a dropped delivery (at `ts`) that the kept event it equals lacks —
    /// its (emitter, seq) `seq`, its span `span` — to that event (the `aside` module).
    pub(super) fn link_dropped(
        &mut self,
        seq: Option<(u32, u64)>,
        span: Option<&SpanId>,
        ts: i64,
        linked: Linked,
    ) {
        let links = &mut self.state.links;
        let link = Dropped { ts, linked };
        if let Some((em, s)) = seq {
            links.insert(LinkKey::Seq(em, s), link);
        }
        if let Some(id) = span {
            links.insert(LinkKey::Span(*id), link);
        }
    }

    /// The delivery under `key` was just set aside: the kept event it was dropped as equal
    /// to, if one is linked, is set aside too (as `check` sets equal deliveries aside
    /// together), with what it did taken back once.
    pub(super) fn follow_link(&mut self, key: LinkKey) {
        let Some(Dropped { linked, .. }) = self.state.links.map.remove(&key) else {
            return;
        };
        match linked {
            Linked::Kept {
                prop,
                scope,
                source,
                position,
            } => {
                let q = usize::from(prop);
                let Some(first) = (self.state.props.get(q))
                    .map(|pr| pr.scopes.state(scope).events())
                    .and_then(|es| {
                        es.iter()
                            .find(|e| (e.source, e.position) == (source, position))
                            .copied()
                    })
                else {
                    return;
                };
                if !first.has(ASIDE) {
                    self.set_aside_first(q, first);
                }
            }
            Linked::Seq(em, seq) => self.take_back_seq(em, seq),
            Linked::Unkept(id) => {
                let horizon = self.min_horizon();
                let Some(noted) = self.state.unkept_spans.get_mut(&id, horizon) else {
                    return;
                };
                if noted.conflicted {
                    return;
                }
                noted.conflicted = true;
                let first = *noted;
                let q =
                    (first.prop != crate::rules::UNATTRIBUTED).then_some(usize::from(first.prop));
                self.take_back_unkept(q, &first);
            }
        }
    }

    /// Takes back what the delivery of (`em`, `seq`) did, once (a delivery it was dropped as
    /// equal to, or dropped as equal to it, was set aside): its reasons, its route
    /// observation, its place in its scope; and follows its own link, if it has one.
    fn take_back_seq(&mut self, em: u32, seq: u64) {
        let Some(d) = (self.state.delivery_mut(em, seq)).filter(|d| !d.conflicted) else {
            return;
        };
        let first = *d;
        d.reasons = Reasons::EMPTY;
        if super::dups::observed_route(first.scope).is_some() {
            d.scope = NONE;
        }
        if first.prop == crate::rules::UNATTRIBUTED {
            return;
        }
        self.undo_delivery(usize::from(first.prop), em, seq, &first);
        // That delivery may have been dropped as equal to another in turn.
        self.follow_link(LinkKey::Seq(em, seq));
    }

    /// Settles the (emitter, seq) of `rec` (of property `prop`, event `ev`), a delivery of a
    /// span settled against the span's first delivery: `dropped` as equal to it (`linked`:
    /// that first delivery, when it lacks this key), or set aside. `check` groups the
    /// delivery under each of its keys: its seq is seen, a conflict under it sets aside what
    /// it is equal to, and a delivery it equals under it is set aside with it.
    pub(super) fn settle_seq_of_span(
        &mut self,
        prop: Option<usize>,
        rec: &Rec,
        ev: &Event<'_>,
        dropped: bool,
        linked: Option<Linked>,
    ) {
        let Some((em, seq)) = rec.seq_key() else {
            return;
        };
        if let Some(l) = linked {
            self.link_dropped(Some((em, seq)), None, rec.ts, l);
        }
        let before = self.state.duplicates;
        let seen = self.settle_seq(prop, rec, ev);
        if let Seen::Duplicate = seen {
            // Counted once, as the span's duplicate or not at all (set aside).
            self.state.duplicates = before;
        }
        if dropped || matches!(seen, Seen::Aside) {
            return;
        }
        if let Seen::Duplicate = seen {
            // The delivery it equals under its (emitter, seq) goes aside with it.
            self.take_back_seq(em, seq);
        }
        // Set aside by its span: its seq's later deliveries are settled as such.
        if let Some(d) = self.state.delivery_mut(em, seq) {
            d.conflicted = true;
            d.reasons = Reasons::EMPTY;
        }
    }
}
