//! The per-property scope table of the live assessor: scope ids interned in one arena, states
//! in one dense vector by id. An idle scope costs its id bytes, about 13 bytes of interner
//! overhead and one [`ScopeState`] (56 bytes): no per-scope allocation (SPEC §7, at most 150
//! bytes per idle scope; `cargo run --release -p fencewatch-assess --example idle_live_scopes`).
//! A scope is never removed: its high-water mark is never forgotten.

use super::Ev;
use crate::intern::Interner;
use crate::tracker::Tracker;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// What one (property, scope) keeps.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct ScopeState {
    /// The folded high-water mark (no intervals are kept in it: recent events are).
    pub(super) tracker: Tracker,
    /// The smallest `order` among the folded events of the mark's (incarnation, epoch).
    pub(super) mark_order: Option<u64>,
    /// Events of the scope (not heartbeats) inside the horizon, in arrival order; `None` when
    /// there are none, so an idle scope holds a null pointer.
    #[allow(clippy::box_collection)]
    recent: Option<Box<Vec<Ev>>>,
}

impl ScopeState {
    /// Events inside the horizon.
    pub(super) fn events(&self) -> &[Ev] {
        self.recent.as_deref().map_or(&[], Vec::as_slice)
    }

    /// Events inside the horizon, for changes (allocated on first use).
    pub(super) fn events_mut(&mut self) -> &mut Vec<Ev> {
        self.recent
            .get_or_insert_with(|| Box::new(Vec::with_capacity(4)))
    }

    /// Keeps the events `keep` accepts; frees the list when none is left.
    pub(super) fn retain_events(&mut self, keep: impl FnMut(&Ev) -> bool) {
        if let Some(v) = self.recent.as_mut() {
            v.retain(keep);
            if v.is_empty() {
                self.recent = None;
            }
        }
    }

    /// Folds the committed events older than `horizon` into the high-water mark and drops
    /// every event older than it.
    pub(super) fn fold(&mut self, horizon: i64, skew: i64) {
        let Some(events) = self.recent.as_mut() else {
            return;
        };
        if events.iter().all(|e| e.ts >= horizon) {
            return;
        }
        let before = self.tracker.high_water().map(|m| (m.incarnation, m.epoch));
        let folding = |e: &&Ev| e.ts < horizon && e.class() == 0 && !e.has(super::ASIDE);
        for e in events.iter().filter(folding) {
            self.tracker.observe(e.inc, e.epoch, e.ts, skew, i64::MIN);
        }
        self.tracker.fold(i64::MAX);
        if let Some(m) = self.tracker.high_water() {
            if before != Some((m.incarnation, m.epoch)) {
                self.mark_order = None;
            }
            for e in events.iter().filter(folding) {
                if (e.inc, e.epoch) == (m.incarnation, m.epoch)
                    && let Some(o) = e.order()
                {
                    self.mark_order = Some(self.mark_order.map_or(o, |x| x.min(o)));
                }
            }
        }
        self.retain_events(|e| e.ts >= horizon);
    }
}

/// Scopes of one property.
#[derive(Debug, Clone, Default)]
pub(super) struct Scopes {
    ids: Interner,
    states: Vec<ScopeState>,
    /// Events kept over all scopes, for [`Scopes::heap_bytes`] without a walk.
    retained: usize,
}

impl PartialEq for Scopes {
    fn eq(&self, other: &Scopes) -> bool {
        self.states == other.states
            && (0..self.states.len() as u32).all(|i| self.ids.resolve(i) == other.ids.resolve(i))
    }
}

impl Eq for Scopes {}

impl Scopes {
    pub(super) fn get(&self, scope: &str) -> Option<&ScopeState> {
        self.ids.get(scope).map(|i| &self.states[i as usize])
    }

    pub(super) fn get_mut(&mut self, scope: &str) -> Option<&mut ScopeState> {
        self.ids.get(scope).map(|i| &mut self.states[i as usize])
    }

    pub(super) fn get_or_insert(&mut self, scope: &str) -> &mut ScopeState {
        let id = self.ids.intern(scope) as usize;
        if id == self.states.len() {
            self.states.push(ScopeState::default());
        }
        &mut self.states[id]
    }

    pub(super) fn contains(&self, scope: &str) -> bool {
        self.ids.get(scope).is_some()
    }

    pub(super) fn len(&self) -> usize {
        self.states.len()
    }

    /// Folds every scope (see [`ScopeState::fold`]).
    pub(super) fn fold(&mut self, horizon: i64, skew: i64) {
        for st in &mut self.states {
            st.fold(horizon, skew);
        }
        self.retained = self.states.iter().map(|s| s.events().len()).sum();
    }

    /// Counts one more kept event.
    pub(super) fn note_kept(&mut self) {
        self.retained += 1;
    }

    /// Approximate heap bytes, in O(1): ids, states, kept events.
    pub(super) fn heap_bytes(&self) -> usize {
        self.ids.heap_bytes()
            + self.states.capacity() * std::mem::size_of::<ScopeState>()
            + self.retained * std::mem::size_of::<Ev>() * 5 / 4
    }
}

impl std::ops::Index<&str> for Scopes {
    type Output = ScopeState;

    fn index(&self, scope: &str) -> &ScopeState {
        self.get(scope).expect("a known scope")
    }
}

/// Serialized as the ids in id order and the states.
impl Serialize for Scopes {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let ids: Vec<&str> = (0..self.states.len() as u32)
            .map(|i| self.ids.resolve(i))
            .collect();
        (ids, &self.states).serialize(s)
    }
}

impl<'de> Deserialize<'de> for Scopes {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Scopes, D::Error> {
        let (ids, states): (Vec<String>, Vec<ScopeState>) = Deserialize::deserialize(d)?;
        if ids.len() != states.len() {
            return Err(serde::de::Error::custom(
                "scope ids and states differ in number",
            ));
        }
        let mut interner = Interner::new();
        for id in &ids {
            interner.intern(id);
        }
        if interner.len() != ids.len() {
            return Err(serde::de::Error::custom("duplicate scope ids"));
        }
        let retained = states.iter().map(|s| s.events().len()).sum();
        Ok(Scopes {
            ids: interner,
            states,
            retained,
        })
    }
}
