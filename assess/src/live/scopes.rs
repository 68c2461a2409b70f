//! The per-property scope table of the live assessor: scope ids interned in one arena, states
//! in one dense vector by id. An idle scope costs its id bytes, about 13 bytes of interner
//! overhead and one [`ScopeState`] (56 bytes): no per-scope allocation unless it folded an
//! `order` or grants (SPEC §7, at most 150 bytes per idle scope; `cargo run --release -p
//! fencewatch-assess --example idle_live_scopes`). A scope is never removed: its high-water
//! mark is never forgotten.
//!
//! **Grants outlive the horizon** (SPEC §4 "`serve` is exact within the lateness horizon"): a
//! lease may be held far longer than the retention margin, and its commits must still be
//! checked against its grant. So folding keeps, per scope, the grants whose (incarnation,
//! epoch) is at or above the folded high-water mark, whole (holder, time, provenance), and
//! they take part in every later decision as the kept events do. Grants below the mark go (a
//! commit of such an epoch arriving in order is stale against the mark anyway); that some
//! went is remembered, so a commit that would need one of them is `late_evidence` when it is
//! itself older than the horizon and is never called ungranted. What is kept is bounded per
//! scope by the epochs granted above the highest folded commit.

use super::{ASIDE, Ev, HAS_ORDER, NONE};
use crate::intern::Interner;
use crate::tracker::Tracker;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// What one (property, scope) keeps.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct ScopeState {
    /// The folded high-water mark (no intervals are kept in it: recent events are).
    pub(super) tracker: Tracker,
    /// What folding keeps besides the mark; `None` (a null pointer) while there is nothing.
    cold: Option<Box<Cold>>,
    /// Events of the scope (not heartbeats) inside the horizon, in arrival order, with their
    /// summary; `None` when there are none, so an idle scope holds a null pointer.
    recent: Option<Box<Active>>,
}

/// What a scope keeps of its folded events besides the high-water mark.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Cold {
    /// The smallest `order` among the folded events of the mark's (incarnation, epoch);
    /// `u64::MAX` when none.
    mark_order: u64,
    /// Whether grants below the mark were dropped: a commit of such an epoch can then not be
    /// told ungranted, and its holder not checked.
    grants_dropped: bool,
    /// Folded grants at or above the mark, the earliest per (incarnation, epoch, holder).
    grants: Vec<Ev>,
}

impl Cold {
    fn is_empty(&self) -> bool {
        self.mark_order == u64::MAX && !self.grants_dropped && self.grants.is_empty()
    }
}

/// The kept events of an active scope and a summary of them, on one cache line with the
/// vector's header, so the steady case decides without reading the events.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Active {
    summary: Summary,
    events: Vec<Ev>,
}

/// What [`super::changes_nothing`] needs to know about the kept events (not set aside).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Summary {
    /// The highest (incarnation, epoch) of committed events with an epoch.
    pub(super) top: Option<(u64, u64)>,
    /// The holder of the `top` events: `NONE` when none has one, [`MIXED`] when they differ.
    pub(super) top_holder: u32,
    /// The latest time of committed events with an epoch.
    pub(super) max_ts: i64,
    /// Whether a grant is kept.
    pub(super) grants: bool,
    /// Whether a committed event with an epoch carries `order`.
    pub(super) ordered: bool,
}

/// [`Summary::top_holder`] when the top epoch's events name different holders.
pub(super) const MIXED: u32 = u32::MAX - 2;

impl Default for Summary {
    fn default() -> Summary {
        Summary {
            top: None,
            top_holder: NONE,
            max_ts: i64::MIN,
            grants: false,
            ordered: false,
        }
    }
}

impl Summary {
    fn add(&mut self, e: &Ev) {
        if e.has(ASIDE) {
            return;
        }
        match e.class() {
            0 => {
                self.ordered |= e.has(HAS_ORDER);
                self.max_ts = self.max_ts.max(e.ts);
                let key = (e.inc, e.epoch);
                match self.top {
                    Some(t) if t > key => {}
                    Some(t) if t == key => {
                        if self.top_holder == NONE {
                            self.top_holder = e.holder;
                        } else if e.holder != NONE && e.holder != self.top_holder {
                            self.top_holder = MIXED;
                        }
                    }
                    _ => {
                        self.top = Some(key);
                        self.top_holder = e.holder;
                    }
                }
            }
            1 => self.grants = true,
            _ => {}
        }
    }

    fn of(events: &[Ev]) -> Summary {
        let mut s = Summary::default();
        for e in events {
            s.add(e);
        }
        s
    }
}

impl ScopeState {
    /// The smallest `order` of the mark's folded events, if any carried one.
    pub(super) fn mark_order(&self) -> Option<u64> {
        self.cold
            .as_deref()
            .map(|c| c.mark_order)
            .filter(|&o| o != u64::MAX)
    }

    /// The folded grants kept (at or above the mark).
    pub(super) fn folded_grants(&self) -> &[Ev] {
        self.cold.as_deref().map_or(&[], |c| c.grants.as_slice())
    }

    /// Whether the grants of (`inc`, `epoch`) may be incomplete: grants below the mark were
    /// dropped and (`inc`, `epoch`) is below it.
    pub(super) fn grants_unknown(&self, inc: u64, epoch: u64) -> bool {
        self.cold.as_deref().is_some_and(|c| c.grants_dropped)
            && self
                .tracker
                .high_water()
                .is_some_and(|m| (inc, epoch) < (m.incarnation, m.epoch))
    }

    /// Whether a grant of (`inc`, `epoch`), kept or folded, is known; with `holder`, one to
    /// that holder.
    pub(super) fn has_grant(&self, inc: u64, epoch: u64, holder: Option<u32>) -> bool {
        self.events()
            .iter()
            .filter(|e| e.class() == 1 && !e.has(ASIDE))
            .chain(self.folded_grants())
            .any(|e| (e.inc, e.epoch) == (inc, epoch) && holder.is_none_or(|h| e.holder == h))
    }

    /// Events inside the horizon.
    pub(super) fn events(&self) -> &[Ev] {
        self.recent.as_deref().map_or(&[], |a| a.events.as_slice())
    }

    /// The summary of the kept events, if any are kept.
    pub(super) fn summary(&self) -> Option<&Summary> {
        self.recent.as_deref().map(|a| &a.summary)
    }

    /// Keeps one more event; returns its index.
    pub(super) fn push(&mut self, e: Ev) -> usize {
        let a = self.recent.get_or_insert_with(|| {
            Box::new(Active {
                summary: Summary::default(),
                events: Vec::with_capacity(4),
            })
        });
        a.summary.add(&e);
        a.events.push(e);
        a.events.len() - 1
    }

    /// Sets `flag` on event `i` (the per-event reason flags, not `ASIDE`).
    pub(super) fn toggle_flag(&mut self, i: usize, flag: u8) {
        debug_assert_ne!(flag, ASIDE, "use set_aside");
        if let Some(a) = self.recent.as_mut() {
            a.events[i].flags ^= flag;
        }
    }

    /// Sets event `i` aside (a conflicting duplicate): it no longer takes part.
    pub(super) fn set_aside(&mut self, i: usize) {
        if let Some(a) = self.recent.as_mut() {
            a.events[i].flags |= ASIDE;
            a.summary = Summary::of(&a.events);
        }
    }

    /// Keeps the events `keep` accepts; frees the list when none is left.
    pub(super) fn retain_events(&mut self, keep: impl FnMut(&Ev) -> bool) {
        if let Some(a) = self.recent.as_mut() {
            a.events.retain(keep);
            if a.events.is_empty() {
                self.recent = None;
            } else {
                a.summary = Summary::of(&a.events);
            }
        }
    }

    /// Folds the committed events older than `horizon` into the high-water mark, keeps the
    /// older grants at or above the new mark (see the module doc) and drops every other event
    /// older than it.
    pub(super) fn fold(&mut self, horizon: i64, skew: i64) {
        let Some(events) = self.recent.as_ref().map(|a| &a.events) else {
            return;
        };
        if events.iter().all(|e| e.ts >= horizon) {
            return;
        }
        let before = self.tracker.high_water().map(|m| (m.incarnation, m.epoch));
        let folding = |e: &&Ev| e.ts < horizon && e.class() == 0 && !e.has(ASIDE);
        for e in events.iter().filter(folding) {
            self.tracker.observe(e.inc, e.epoch, e.ts, skew, i64::MIN);
        }
        self.tracker.fold(i64::MAX);
        let mark = self.tracker.high_water();
        let cold = self.cold.get_or_insert_with(|| {
            Box::new(Cold {
                mark_order: u64::MAX,
                grants_dropped: false,
                grants: Vec::new(),
            })
        });
        if let Some(m) = mark {
            if before != Some((m.incarnation, m.epoch)) {
                cold.mark_order = u64::MAX;
            }
            for e in events.iter().filter(folding) {
                if (e.inc, e.epoch) == (m.incarnation, m.epoch)
                    && let Some(o) = e.order()
                {
                    cold.mark_order = cold.mark_order.min(o);
                }
            }
        }
        let at_or_above =
            |e: &Ev| mark.is_none_or(|m| (e.inc, e.epoch) >= (m.incarnation, m.epoch));
        let kept = cold.grants.len();
        cold.grants.retain(|g| at_or_above(g));
        cold.grants_dropped |= cold.grants.len() < kept;
        for g in events
            .iter()
            .filter(|e| e.ts < horizon && e.class() == 1 && !e.has(ASIDE))
        {
            if !at_or_above(g) {
                cold.grants_dropped = true;
                continue;
            }
            let same = |o: &Ev| (o.inc, o.epoch, o.holder) == (g.inc, g.epoch, g.holder);
            match cold.grants.iter_mut().find(|o| same(o)) {
                Some(o) if (g.ts, g.source, g.position) < (o.ts, o.source, o.position) => *o = *g,
                Some(_) => {}
                None => cold.grants.push(*g),
            }
        }
        if cold.is_empty() {
            self.cold = None;
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
    pub(super) fn get(&self, scope: &str) -> Option<&ScopeState> {
        self.ids.get(scope).map(|i| &self.states[i as usize])
    }

    pub(super) fn get_mut(&mut self, scope: &str) -> Option<&mut ScopeState> {
        self.ids.get(scope).map(|i| &mut self.states[i as usize])
    }

    /// The state of `scope`, created empty on first use, and its id.
    pub(super) fn get_or_insert(&mut self, scope: &str) -> (u32, &mut ScopeState) {
        let id = self.ids.intern(scope);
        if id as usize == self.states.len() {
            self.states.push(ScopeState::default());
        }
        (id, &mut self.states[id as usize])
    }

    /// The name of scope `id`.
    pub(super) fn name(&self, id: u32) -> &str {
        self.ids.resolve(id)
    }

    /// The id of `scope`, if known.
    pub(super) fn id(&self, scope: &str) -> Option<u32> {
        self.ids.get(scope)
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
        self.cold_grants = self.states.iter().map(|s| s.folded_grants().len()).sum();
    }

    /// Calls `f` with every name id the scopes refer to (holders, routes and emitters of kept
    /// events and folded grants, and the kept events' top holder).
    pub(super) fn for_each_name(&self, f: &mut impl FnMut(u32)) {
        for st in &self.states {
            for e in st.events().iter().chain(st.folded_grants()) {
                f(e.holder);
                f(e.route);
                f(e.emitter);
            }
            if let Some(s) = st.summary() {
                f(s.top_holder);
            }
        }
    }

    /// Counts one more kept event.
    pub(super) fn note_kept(&mut self) {
        self.retained += 1;
    }

    /// Approximate heap bytes, in O(1): ids, states, kept events.
    pub(super) fn heap_bytes(&self) -> usize {
        self.ids.heap_bytes()
            + self.states.capacity() * std::mem::size_of::<ScopeState>()
            + (self.retained + self.cold_grants) * std::mem::size_of::<Ev>() * 5 / 4
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
