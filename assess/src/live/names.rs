//! The name table of a partition: holders, routes and emitters interned in one table of the
//! state, and only what is kept (not a heartbeat's route unless declared, nor an unattributed
//! event's holder and route); and the sweep of the span table (the `spans` module), which
//! works the same way.
//!
//! The table is swept when it holds twice the names alive after the last sweep (at least
//! 65,536): every name no kept event, folded grant, counterexample, emitter or declared route
//! refers to is freed and its id reused, so it holds what retained state refers to, up to twice
//! that. Sweeping changes no answer. A name longer than [`MAX_NAME_BYTES`] (256) is kept as
//! its first 256 bytes, its length and a 128-bit hash ([`shortened`]): distinct names stay
//! distinct but for a hash collision, and a shortened name never equals one kept whole.

use super::spans::KeptSpan;
use super::state::{Live, MAX_NAME_BYTES, NAMES_SWEEP_MIN, UNDECLARED, heap_of};
use crate::rules::Rec;

impl Live {
    /// The id of name `s`, adding it when new. A name longer than [`MAX_NAME_BYTES`] is kept
    /// as [`shortened`]: distinct long names stay distinct but for a 128-bit hash collision, and
    /// a shortened name is longer than any name kept whole, so never equal to one. A declared
    /// route is kept whole (interned at start, found exactly first).
    ///
    /// A name seen before is found in [`Live::name_cache`] first (three names an event: the
    /// table's hash, probe and compare cost the serial applier ~100 instructions each).
    #[inline]
    pub(super) fn intern(&mut self, s: &str) -> u32 {
        if let Some(id) = self.name_cache.get(s) {
            return id;
        }
        let id = self.intern_in_table(s);
        self.name_cache.put(s, id);
        id
    }

    fn intern_in_table(&mut self, s: &str) -> u32 {
        if let Some(&id) = self.name_ids.get(s) {
            return id;
        }
        if s.len() > MAX_NAME_BYTES {
            let short = shortened(s);
            if let Some(&id) = self.name_ids.get(short.as_str()) {
                return id;
            }
            return self.add_name(short);
        }
        self.add_name(s.to_string())
    }

    fn add_name(&mut self, s: String) -> u32 {
        let id = match self.state.free_names.pop() {
            Some(id) => {
                self.state.names[id as usize] = s.clone();
                id
            }
            None => {
                let id = self.state.names.len() as u32;
                assert!(id < UNDECLARED, "name table full");
                self.state.names.push(s.clone());
                id
            }
        };
        self.name_heap += heap_of(&s);
        self.name_ids.insert(s, id);
        id
    }

    /// The id of a name already interned (a declared route is), without adding it.
    pub(super) fn name_id(&self, s: &str) -> Option<u32> {
        if let Some(&id) = self.name_ids.get(s) {
            return Some(id);
        }
        (s.len() > MAX_NAME_BYTES)
            .then(|| self.name_ids.get(shortened(s).as_str()).copied())
            .flatten()
    }

    pub(super) fn name(&self, id: u32) -> Option<&str> {
        self.state.names.get(id as usize).map(String::as_str)
    }

    /// Names interned and not freed.
    pub fn names_interned(&self) -> usize {
        self.state.names.len() - self.state.free_names.len()
    }

    /// Sweeps of the name table run since this assessor was made or restored.
    pub fn name_sweeps(&self) -> u64 {
        self.name_sweeps
    }

    /// Sweeps the name table when it doubled since the last sweep: frees every name that no
    /// retained event, folded grant, counterexample, emitter or declared route refers to, for
    /// its id to be reused. Run between events, never while one is being built.
    ///
    /// Put off to the next doubling while the emitters (each one's name alive for good)
    /// hold three quarters of the names or more: a sweep would free a quarter at most, and a
    /// table growing with new emitters (pods restarted) was walked with every scope at each
    /// doubling, every answer waiting (163 ms at 1M emitters beside 3M idle scopes,
    /// `examples/name_growth`). The names nothing refers to stay below a third of the
    /// emitters' then.
    pub(super) fn sweep_names(&mut self) {
        let interned = self.names_interned();
        if (interned as u64) <= self.state.names_sweep_at {
            return;
        }
        if 4 * self.state.emitters.len() >= 3 * interned {
            self.state.names_sweep_at = (2 * interned).max(NAMES_SWEEP_MIN) as u64;
            return;
        }
        self.name_sweeps += 1;
        let mut live = vec![false; self.state.names.len()];
        let mut mark = |id: u32| {
            if let Some(l) = live.get_mut(id as usize) {
                *l = true;
            }
        };
        let mark_ev = |e: &Rec, mark: &mut dyn FnMut(u32)| e.name_ids().into_iter().for_each(mark);
        for id in self.route_ids.ids() {
            mark(id);
        }
        for &id in self.state.emitters.keys() {
            mark(id);
        }
        for prop in &self.state.props {
            prop.scopes.for_each_name(&mut mark);
            for c in prop.cxs.values() {
                for e in c.events() {
                    mark_ev(e, &mut mark);
                }
            }
        }
        let mut free = vec![false; self.state.names.len()];
        for &i in &self.state.free_names {
            free[i as usize] = true;
        }
        for (i, alive) in live.iter().enumerate() {
            if !alive && !free[i] {
                let name = std::mem::take(&mut self.state.names[i]);
                self.name_heap = self.name_heap.saturating_sub(heap_of(&name));
                self.name_ids.remove(&name);
                self.state.free_names.push(i as u32);
            }
        }
        // A freed id is reused for another name: no cached name may keep one.
        self.name_cache.clear();
        // Free slots at the table's end go; the others are reused lowest first.
        let free = &mut self.state.free_names;
        free.sort_unstable();
        while let Some(&last) = free.last()
            && last as usize + 1 == self.state.names.len()
        {
            free.pop();
            self.state.names.pop();
        }
        free.reverse();
        self.state.names.shrink_to(self.state.names.len() * 2);
        self.state.names_sweep_at = (2 * self.names_interned()).max(NAMES_SWEEP_MIN) as u64;
    }

    /// Frees the span ids no kept event or counterexample refers to, when the table holds
    /// twice what was alive after the last sweep (the `spans` module). Put off to the next
    /// doubling while the events that may refer to a slot (kept events, folded grants,
    /// counterexamples' events) number three quarters of the slots or more: a sweep would free
    /// a quarter at most, and a table growing with the kept events was walked whole at every
    /// doubling, every answer waiting (95 ms at 2M spans kept, `apply_cost`). The slots no
    /// event refers to stay below a third of those events' number then (28 bytes a slot
    /// against 72 an event).
    pub(super) fn sweep_spans(&mut self) {
        if !self.state.spans.needs_sweep() {
            return;
        }
        let referrers: usize = (self.state.props.iter())
            .map(|p| {
                p.scopes.events_held() + p.cxs.values().map(|c| c.events().count()).sum::<usize>()
            })
            .sum();
        if 4 * referrers >= 3 * self.state.spans.len() {
            self.state.spans.put_off_sweep();
            return;
        }
        let mut alive = vec![false; self.state.spans.slots()];
        let mut mark = |e: &Rec| {
            if let Some(a) = e.span().and_then(|n| alive.get_mut(n as usize)) {
                *a = true;
            }
        };
        for prop in &self.state.props {
            prop.scopes.for_each_event(&mut mark);
            for c in prop.cxs.values() {
                c.events().for_each(&mut mark);
            }
        }
        self.state.spans.sweep(&alive);
        // Freed slots will be reused: no entry may name one.
        self.span_index.retain_alive(&alive);
    }

    /// Builds the span index from the kept events (the `spans` module), on restore.
    pub(super) fn index_spans(&mut self) {
        let index = &mut self.span_index;
        index.clear();
        let spans = &self.state.spans;
        for (q, prop) in self.state.props.iter().enumerate() {
            prop.scopes.for_each_kept(&mut |e: &Rec| {
                if let Some(k) = KeptSpan::of(q, e) {
                    index.insert(spans, k);
                }
            });
        }
    }
}

/// A name longer than [`MAX_NAME_BYTES`] as kept: its first [`MAX_NAME_BYTES`] bytes (to a
/// character boundary), then `…[N bytes, xxh3-128 HASH]` — always longer than
/// [`MAX_NAME_BYTES`], so never equal to a name kept whole.
pub(super) fn shortened(s: &str) -> String {
    let mut end = MAX_NAME_BYTES;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!(
        "{}…[{} bytes, xxh3-128 {:032x}]",
        &s[..end],
        s.len(),
        xxhash_rust::xxh3::xxh3_128(s.as_bytes())
    )
}
