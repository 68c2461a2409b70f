//! The scopes of one property: their ids interned, their states in one vector, the scopes
//! that keep events (what folding visits) and those that keep folded grants (with the others,
//! what the name and span sweeps visit: an idle scope refers to no name or span), and the
//! totals [`Scopes::heap_bytes`] reads without a walk.

use super::{MIXED, ScopeState, Tainted};
use crate::intern::{Bulk, Duplicate, Interner, reserve_for};
use crate::rules::{NONE, Rec};
use serde::de::{DeserializeSeed, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Scopes of one property.
#[derive(Debug, Clone, Default)]
pub(in crate::live) struct Scopes {
    ids: Interner,
    states: Vec<ScopeState>,
    /// The scopes that keep events, each once: folding visits these, not every scope.
    active: Vec<u32>,
    /// The scopes that keep folded grants, each once (only folding changes those).
    granted: Vec<u32>,
    /// Events kept over all scopes, for [`Scopes::heap_bytes`] without a walk.
    retained: usize,
    /// Folded grants kept over all scopes, likewise.
    cold_grants: usize,
    /// The name ids the scopes' marks hold as their holder ([`ScopeState::mark_holder`]), with
    /// how many marks hold each: the name sweep keeps them alive without visiting every scope.
    /// Derived (rebuilt on restore).
    mark_holders: MarkHolders,
}

/// Name id → how many marks hold it.
type MarkHolders = std::collections::HashMap<u32, u32, foldhash::fast::FixedState>;

/// Counts holder `h` (a mark's, [`ScopeState::mark_holder`]) in or out of `holders`
/// (`add`: in); `NONE` and `MIXED` are no name.
fn count_holder(holders: &mut MarkHolders, h: u32, add: bool) {
    if h == NONE || h == MIXED {
        return;
    }
    if add {
        *holders.entry(h).or_insert(0) += 1;
    } else if let Some(n) = holders.get_mut(&h) {
        *n -= 1;
        if *n == 0 {
            holders.remove(&h);
        }
    }
}

/// Moves the count of a mark's holder from `before` to `after`, if it changed (folding
/// mostly keeps it: no table operation then).
fn recount_holder(holders: &mut MarkHolders, before: u32, after: u32) {
    if before != after {
        count_holder(holders, before, false);
        count_holder(holders, after, true);
    }
}

impl PartialEq for Scopes {
    fn eq(&self, other: &Scopes) -> bool {
        self.states == other.states
            && (0..self.states.len() as u32).all(|i| self.ids.resolve(i) == other.ids.resolve(i))
    }
}

impl Eq for Scopes {}

impl Scopes {
    /// The scope ids' interner, to read ahead ([`Interner::warm_level`]).
    pub(in crate::live) fn ids(&self) -> &Interner {
        &self.ids
    }

    /// [`Scopes::get`] of `scope`, whose [`Interner::hash`] in [`Scopes::ids`] is `hash`.
    pub(in crate::live) fn get_hashed(&self, scope: &str, hash: u64) -> Option<&ScopeState> {
        (self.ids.get_hashed(scope, hash)).map(|i| &self.states[i as usize])
    }

    pub(in crate::live) fn get(&self, scope: &str) -> Option<&ScopeState> {
        self.ids.get(scope).map(|i| &self.states[i as usize])
    }

    pub(in crate::live) fn get_mut(&mut self, scope: &str) -> Option<&mut ScopeState> {
        self.ids.get(scope).map(|i| &mut self.states[i as usize])
    }

    /// Takes the folded grants of `scope` that `is_it` accepts out of it
    /// ([`ScopeState::take_folded_grants`]); returns how many went.
    pub(in crate::live) fn take_folded_grants(
        &mut self,
        scope: &str,
        is_it: impl Fn(&Rec) -> bool,
    ) -> usize {
        let Some(id) = self.ids.get(scope) else {
            return 0;
        };
        let st = &mut self.states[id as usize];
        let taken = st.take_folded_grants(is_it);
        self.cold_grants -= taken;
        if taken > 0 && st.folded_grants().is_empty() {
            self.granted.retain(|&g| g != id);
        }
        taken
    }

    /// The state of scope `id`.
    pub(in crate::live) fn state(&self, id: u32) -> &ScopeState {
        &self.states[id as usize]
    }

    /// The state of scope `id`.
    pub(in crate::live) fn state_mut(&mut self, id: u32) -> &mut ScopeState {
        &mut self.states[id as usize]
    }

    /// The state of `scope`, created empty on first use, and its id.
    pub(in crate::live) fn get_or_insert(&mut self, scope: &str) -> (u32, &mut ScopeState) {
        let id = self.ids.intern(scope);
        if id as usize == self.states.len() {
            reserve_for(&mut self.states, 1);
            self.states.push(ScopeState::default());
        }
        (id, &mut self.states[id as usize])
    }

    /// [`ScopeState::taint`] of `scope`, keeping the count of mark holders.
    pub(in crate::live) fn taint(
        &mut self,
        scope: &str,
        key: u32,
        horizon: i64,
    ) -> Option<Tainted> {
        let id = self.ids.get(scope)?;
        let st = &mut self.states[id as usize];
        let before = st.mark_holder();
        let t = st.taint(key, horizon);
        recount_holder(&mut self.mark_holders, before, st.mark_holder());
        t
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

    /// Folds every scope that keeps events (see [`ScopeState::fold`]; the others have nothing
    /// to fold), in O(those scopes).
    pub(in crate::live) fn fold(&mut self, horizon: i64, skew: i64, key_of: &dyn Fn(&Rec) -> u32) {
        let Scopes {
            states,
            active,
            granted,
            retained,
            cold_grants,
            mark_holders,
            ..
        } = self;
        *retained = 0;
        let mut ungranted = false;
        active.retain(|&id| {
            let st = &mut states[id as usize];
            let before = st.folded_grants().len();
            let holder = st.mark_holder();
            st.fold(horizon, skew, key_of);
            recount_holder(mark_holders, holder, st.mark_holder());
            let after = st.folded_grants().len();
            *cold_grants = *cold_grants - before + after;
            if before == 0 && after > 0 {
                reserve_for(granted, 1);
                granted.push(id);
            }
            ungranted |= before > 0 && after == 0;
            *retained += st.events().len();
            !st.events().is_empty()
        });
        if ungranted {
            granted.retain(|&id| !states[id as usize].folded_grants().is_empty());
        }
    }

    /// Calls `f` with every name id the scopes refer to (holders, routes and emitters of kept
    /// events and folded grants, the kept events' top holder, the marks' holders), visiting
    /// only the scopes that keep events or grants.
    pub(in crate::live) fn for_each_name(&self, f: &mut impl FnMut(u32)) {
        self.for_each_event(&mut |e| e.name_ids().into_iter().for_each(&mut *f));
        self.mark_holders.keys().copied().for_each(&mut *f);
        for &id in &self.active {
            if let Some(s) = self.states[id as usize].summary() {
                f(s.top_holder);
            }
        }
    }

    /// Calls `f` with every kept event and folded grant, visiting only the scopes that keep
    /// either.
    pub(in crate::live) fn for_each_event(&self, f: &mut impl FnMut(&Rec)) {
        for &id in &self.active {
            self.states[id as usize].events().iter().for_each(&mut *f);
        }
        for &id in &self.granted {
            self.states[id as usize]
                .folded_grants()
                .iter()
                .for_each(&mut *f);
        }
    }

    /// Calls `f` with every kept event (not the folded grants), visiting only the scopes that
    /// keep events.
    pub(in crate::live) fn for_each_kept(&self, f: &mut impl FnMut(&Rec)) {
        for &id in &self.active {
            self.states[id as usize].events().iter().for_each(&mut *f);
        }
    }

    /// The events [`Scopes::for_each_event`] visits, at most: kept events and folded grants.
    pub(in crate::live) fn events_held(&self) -> usize {
        self.retained + self.cold_grants
    }

    /// Counts one more event kept by scope `id`, its first if `first` (it keeps events now).
    pub(in crate::live) fn note_kept(&mut self, id: u32, first: bool) {
        self.retained += 1;
        if first {
            reserve_for(&mut self.active, 1);
            self.active.push(id);
        }
    }

    /// Approximate resident heap bytes, in O(1): ids, states (as far as written: the spare
    /// capacity of a large vector is not touched), the scopes that keep events (their event
    /// list, summary and allocator header), kept events and folded grants, the marks' holders.
    pub(in crate::live) fn heap_bytes(&self) -> usize {
        const ACTIVE: usize = 96;
        self.ids.heap_bytes()
            + self.states.len() * std::mem::size_of::<ScopeState>()
            + self.active.len() * (ACTIVE + 4)
            + self.granted.len() * 4
            + (self.retained + self.cold_grants) * std::mem::size_of::<Rec>() * 5 / 4
            + self.mark_holders.capacity() * 9
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
        (IdsInOrder(self), &self.states).serialize(s)
    }
}

/// The ids of [`Scopes`] in id order, serialized as a sequence of strings straight from the
/// interner (no vector of them beside it: 16 bytes a scope, 160 MB at ten million).
struct IdsInOrder<'a>(&'a Scopes);

impl Serialize for IdsInOrder<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let Scopes { ids, states, .. } = self.0;
        s.collect_seq((0..states.len() as u32).map(|i| ids.resolve(i)))
    }
}

/// Read straight into the interner and the state vector: no scope id is allocated on its own
/// on the way (a restore holds the checkpoint's bytes and the state, nothing in between).
impl<'de> Deserialize<'de> for Scopes {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Scopes, D::Error> {
        struct Pair;
        impl<'de> Visitor<'de> for Pair {
            type Value = Scopes;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("scope ids and their states")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Scopes, A::Error> {
                let missing = || serde::de::Error::custom("scope ids and states missing");
                let ids = seq.next_element_seed(Ids)?.ok_or_else(missing)?;
                let states: Vec<ScopeState> = seq.next_element_seed(States)?.ok_or_else(missing)?;
                if ids.len() != states.len() {
                    return Err(serde::de::Error::custom(
                        "scope ids and states differ in number",
                    ));
                }
                let (mut active, mut granted) = (Vec::new(), Vec::new());
                let (mut retained, mut cold_grants) = (0, 0);
                let mut mark_holders = MarkHolders::default();
                for (id, st) in states.iter().enumerate() {
                    count_holder(&mut mark_holders, st.mark_holder(), true);
                    if !st.events().is_empty() {
                        active.push(id as u32);
                        retained += st.events().len();
                    }
                    if !st.folded_grants().is_empty() {
                        granted.push(id as u32);
                        cold_grants += st.folded_grants().len();
                    }
                }
                Ok(Scopes {
                    ids,
                    states,
                    active,
                    granted,
                    retained,
                    cold_grants,
                    mark_holders,
                })
            }
        }
        d.deserialize_tuple(2, Pair)
    }
}

/// The ids, appended as read and interned at the end ([`Bulk`]); a duplicate is an error.
struct Ids;

impl<'de> DeserializeSeed<'de> for Ids {
    type Value = Interner;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Interner, D::Error> {
        struct Each;
        impl<'de> Visitor<'de> for Each {
            type Value = Interner;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("scope ids")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                // As for the states below: a cautious bound (16-byte ids assumed).
                let hint = seq.size_hint().unwrap_or(0).min(1 << 24);
                let mut ids = Bulk::with_capacity(hint, hint * 16);
                while seq.next_element_seed(Intern(&mut ids))?.is_some() {}
                let ids = ids.finish().map_err(|Duplicate(id)| {
                    serde::de::Error::custom(format!("scope id {id:?} given twice"))
                })?;
                Ok(ids)
            }
        }
        d.deserialize_seq(Each)
    }
}

/// One id, appended (read as a `String` would be: a streaming reader then reuses its scratch
/// space for every id).
struct Intern<'a>(&'a mut Bulk);

impl<'de> DeserializeSeed<'de> for Intern<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_string(self)
    }
}

impl<'de> Visitor<'de> for Intern<'_> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a scope id")
    }
    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<(), E> {
        self.0.push(v);
        Ok(())
    }
}

/// The states, in a vector grown as [`reserve_for`] grows it.
struct States;

impl<'de> DeserializeSeed<'de> for States {
    type Value = Vec<ScopeState>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Vec<ScopeState>, D::Error> {
        struct Each;
        impl<'de> Visitor<'de> for Each {
            type Value = Vec<ScopeState>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("scope states")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut states = Vec::new();
                // Trusted only as far as a cautious bound: the checkpoint's crc held, but a
                // length is no proof that as many states follow.
                states.reserve_exact(seq.size_hint().unwrap_or(0).min(1 << 20));
                while let Some(st) = seq.next_element()? {
                    reserve_for(&mut states, 1);
                    states.push(st);
                }
                Ok(states)
            }
        }
        d.deserialize_seq(Each)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Epoch, Event, Kind};
    use crate::time::EventTime;

    fn commit(scopes: &mut Scopes, name: &str, ts: i64) {
        let mut ev = Event::new(Kind::Commit, EventTime(ts));
        ev.epoch = Some(Epoch(1));
        let (id, st) = scopes.get_or_insert(name);
        let mut rec = Rec::of(&ev, 0, 0, ts as u64);
        rec.scope = id;
        let first = st.push(rec) == 0;
        scopes.note_kept(id, first);
    }

    #[test]
    fn sweeps_visit_the_folded_grants_of_idle_scopes_and_only_the_scopes_that_keep_anything() {
        let mut scopes = Scopes::default();
        for i in 0..10 {
            commit(&mut scopes, &format!("idle{i}"), i);
        }
        let mut grant = Event::new(Kind::Grant, EventTime(20));
        grant.epoch = Some(Epoch(5));
        let (id, st) = scopes.get_or_insert("leased");
        let mut rec = Rec::of(&grant, 0, 0, 20);
        (rec.scope, rec.holder, rec.route, rec.emitter) = (id, 41, 42, 43);
        let first = st.push(rec) == 0;
        scopes.note_kept(id, first);
        commit(&mut scopes, "busy", 900);
        let names = |scopes: &Scopes| {
            let mut ids = Vec::new();
            scopes.for_each_name(&mut |i| ids.push(i));
            let mut events = 0;
            scopes.for_each_event(&mut |_| events += 1);
            ids.sort_unstable();
            ids.dedup();
            (ids, events)
        };
        let before = names(&scopes);
        scopes.fold(500, 0, &|_| 0);
        // The grant is folded (its scope keeps no event) and still visited; idle scopes are not.
        assert!(scopes["leased"].events().is_empty());
        assert_eq!(scopes["leased"].folded_grants().len(), 1);
        assert_eq!((scopes.active.len(), scopes.granted.len()), (1, 1));
        let after = names(&scopes);
        assert!(
            before.0.contains(&41) && after.0 == before.0,
            "{before:?} {after:?}"
        );
        assert_eq!((before.1, after.1), (12, 2), "the grant and busy's commit");
        let back: Scopes = postcard::from_bytes(&postcard::to_stdvec(&scopes).unwrap()).unwrap();
        assert_eq!((back.active, back.granted), (scopes.active, scopes.granted));
    }

    #[test]
    fn folding_visits_the_scopes_that_keep_events_and_a_round_trip_keeps_them() {
        let mut scopes = Scopes::default();
        for i in 0..100 {
            commit(&mut scopes, &format!("s{i}"), 10 * i);
        }
        commit(&mut scopes, "s3", 995);
        assert_eq!(scopes.active.len(), 100);
        scopes.fold(500, 0, &|_| 0);
        // s50..s99 and s3 keep events; everything else is its mark alone.
        let mut active: Vec<&str> = scopes.active.iter().map(|&i| scopes.name(i)).collect();
        active.sort_unstable();
        assert_eq!(active.len(), 51);
        assert!(active.contains(&"s3") && !active.contains(&"s4"));
        assert_eq!(scopes.retained, 51);
        assert!(scopes["s4"].events().is_empty() && scopes["s4"].high_water().is_some());
        let bytes = postcard::to_stdvec(&scopes).unwrap();
        // The layout checkpoints have always had: the ids as a vector of strings, the states.
        let ids: Vec<&str> = (0..100).map(|i| scopes.name(i)).collect();
        assert_eq!(bytes, postcard::to_stdvec(&(ids, &scopes.states)).unwrap());
        let back: Scopes = postcard::from_bytes(&bytes).unwrap();
        assert_eq!(back, scopes);
        // The restored ids' tables are sized once: never larger than those grown one by one.
        assert!(back.heap_bytes() <= scopes.heap_bytes());
        let mut a = back.active.clone();
        let mut b = scopes.active.clone();
        a.sort_unstable();
        b.sort_unstable();
        assert_eq!(a, b);
        scopes.fold(i64::MAX, 0, &|_| 0);
        assert!(scopes.active.is_empty());
        assert_eq!(scopes.retained, 0);
    }

    #[test]
    fn a_checkpoint_naming_a_scope_twice_does_not_decode() {
        let mut scopes = Scopes::default();
        for name in ["a", "b", "c"] {
            commit(&mut scopes, name, 1);
        }
        let back: Scopes = postcard::from_bytes(&postcard::to_stdvec(&scopes).unwrap()).unwrap();
        assert_eq!(back.get("b"), scopes.get("b"));
        // The same layout with "b" in the place of "c".
        let ids = vec!["a", "b", "b"];
        let bytes = postcard::to_stdvec(&(ids, &scopes.states)).unwrap();
        let err = postcard::from_bytes::<Scopes>(&bytes).unwrap_err();
        assert!(matches!(err, postcard::Error::SerdeDeCustom), "{err:?}");
    }
}
