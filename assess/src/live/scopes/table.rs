//! The scopes of one property: their ids interned, their states in one vector, and the
//! totals [`Scopes::heap_bytes`] reads without a walk.

use super::ScopeState;
use crate::intern::Interner;
use crate::rules::Rec;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Scopes of one property.
#[derive(Debug, Clone, Default)]
pub(in crate::live) struct Scopes {
    ids: Interner,
    states: Vec<ScopeState>,
    /// Events kept over all scopes, for [`Scopes::heap_bytes`] without a walk.
    retained: usize,
    /// Folded grants kept over all scopes, likewise.
    cold_grants: usize,
}

impl PartialEq for Scopes {
    fn eq(&self, other: &Scopes) -> bool {
        self.states == other.states
            && (0..self.states.len() as u32).all(|i| self.ids.resolve(i) == other.ids.resolve(i))
    }
}

impl Eq for Scopes {}

impl Scopes {
    pub(in crate::live) fn get(&self, scope: &str) -> Option<&ScopeState> {
        self.ids.get(scope).map(|i| &self.states[i as usize])
    }

    pub(in crate::live) fn get_mut(&mut self, scope: &str) -> Option<&mut ScopeState> {
        self.ids.get(scope).map(|i| &mut self.states[i as usize])
    }

    /// The state of scope `id`.
    pub(in crate::live) fn state_mut(&mut self, id: u32) -> &mut ScopeState {
        &mut self.states[id as usize]
    }

    /// The state of `scope`, created empty on first use, and its id.
    pub(in crate::live) fn get_or_insert(&mut self, scope: &str) -> (u32, &mut ScopeState) {
        let id = self.ids.intern(scope);
        if id as usize == self.states.len() {
            self.states.push(ScopeState::default());
        }
        (id, &mut self.states[id as usize])
    }

    /// The name of scope `id`.
    pub(in crate::live) fn name(&self, id: u32) -> &str {
        self.ids.resolve(id)
    }

    pub(in crate::live) fn contains(&self, scope: &str) -> bool {
        self.ids.get(scope).is_some()
    }

    pub(in crate::live) fn len(&self) -> usize {
        self.states.len()
    }

    /// Folds every scope (see [`ScopeState::fold`]).
    pub(in crate::live) fn fold(&mut self, horizon: i64, skew: i64, key_of: &dyn Fn(&Rec) -> u32) {
        for st in &mut self.states {
            st.fold(horizon, skew, key_of);
        }
        self.retained = self.states.iter().map(|s| s.events().len()).sum();
        self.cold_grants = self.states.iter().map(|s| s.folded_grants().len()).sum();
    }

    /// Calls `f` with every name id the scopes refer to (holders, routes and emitters of kept
    /// events and folded grants, and the kept events' top holder).
    pub(in crate::live) fn for_each_name(&self, f: &mut impl FnMut(u32)) {
        for st in &self.states {
            for e in st.events().iter().chain(st.folded_grants()) {
                e.name_ids().into_iter().for_each(&mut *f);
            }
            if let Some(s) = st.summary() {
                f(s.top_holder);
            }
        }
    }

    /// Calls `f` with every kept event and folded grant.
    pub(in crate::live) fn for_each_event(&self, f: &mut impl FnMut(&Rec)) {
        for st in &self.states {
            for e in st.events().iter().chain(st.folded_grants()) {
                f(e);
            }
        }
    }

    /// Counts one more kept event.
    pub(in crate::live) fn note_kept(&mut self) {
        self.retained += 1;
    }

    /// Approximate heap bytes, in O(1): ids, states, kept events.
    pub(in crate::live) fn heap_bytes(&self) -> usize {
        self.ids.heap_bytes()
            + self.states.capacity() * std::mem::size_of::<ScopeState>()
            + (self.retained + self.cold_grants) * std::mem::size_of::<Rec>() * 5 / 4
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
        let cold_grants = states.iter().map(|s| s.folded_grants().len()).sum();
        Ok(Scopes {
            ids: interner,
            states,
            retained,
            cold_grants,
        })
    }
}
