//! What a conflicting delivery does to what a scope folded (the parent module's doc,
//! "Tainted marks" and "Grants outlive the horizon").

use super::fast::Clean;
use super::{HAS_BELOW, HAS_MARK, Mark, NONE, Rec, SOLO, ScopeState, TAINTED, Tainted};

/// [`ScopeState::top_key`] once the mark's folded events are no longer known apart
/// ([`ScopeState::taint`]): a taint left it standing on the others, or a conflicting delivery
/// may have taken one of them away. The next conflicting delivery naming the scope taints it
/// whole. A key hashing to it is taken for it: more taints, never fewer (difference test
/// against `check`, session 35: the mark refuted on behalf of events all set aside).
pub(super) const FELL_BACK: u32 = u32::MAX;

impl ScopeState {
    /// The mark rests on the folded event whose (emitter, seq) hashes to `key`
    /// ([`key_hash`](super::key_hash)), which turned out to be one of conflicting deliveries
    /// (the `scopes` module doc, "Tainted marks"),
    /// given the current `horizon` (every folded event is older): the mark
    /// stays (it is never forgotten) but its earliest time is only bounded by the horizon now,
    /// and when its (incarnation, epoch) rested on that event alone it is [`TAINTED`]: evidence
    /// falls back to the highest other folded one. Once a taint left it standing on other
    /// events ([`FELL_BACK`]), any conflicting delivery naming the scope may take the last of
    /// them away: it is [`TAINTED`] then, and falls back to nothing. `None` when the mark does
    /// not rest on it.
    pub(super) fn taint(&mut self, key: u32, horizon: i64) -> Option<Tainted> {
        let fell_back = self.top_key == FELL_BACK;
        if key == 0 || self.flags() & TAINTED != 0 {
            return None;
        }
        let m = self.high_water()?;
        let top = (m.incarnation, m.epoch);
        if self.top_key != key && !fell_back {
            // Another folded event may have been that delivery's: the earliest time stands,
            // what else the mark rests on is no longer known apart ([`FELL_BACK`]).
            self.top_key = FELL_BACK;
            self.doubt_holders();
            self.set_clean(Clean::default());
            return Some(Tainted::Other(top));
        }
        self.top_key = 0;
        if let Some(c) = self.cold.as_mut() {
            // The smallest order of the mark's events may have been that event's.
            c.mark_order = u64::MAX;
            if c.is_empty() {
                self.cold = None;
            }
        }
        let first = m.first.max(horizon.saturating_sub(1));
        self.set_mark(Some(Mark { first, ..m }));
        // The scope is decided again.
        self.set_clean(Clean::default());
        if self.flags() & SOLO == 0 && !fell_back {
            // The event may have been the only one naming the mark's holder.
            self.doubt_holders();
            self.top_key = FELL_BACK;
            return Some(Tainted::First(top, first));
        }
        // What lies below a mark that fell back once is not known either.
        let keep = if fell_back {
            HAS_MARK
        } else {
            HAS_BELOW | HAS_MARK
        };
        self.set_flags((self.flags() & keep) | TAINTED);
        // The holders of the epoch it falls back to were not kept.
        self.set_mark_holder(NONE, true);
        Some(Tainted::Top(top))
    }

    /// The mark's holder stays, unsure when it names one: an event taken away may have been the
    /// only one naming it, or another.
    fn doubt_holders(&mut self) {
        let h = self.mark_holder();
        self.set_mark_holder(h, self.holder_unsure() || h != NONE);
    }

    /// Takes the folded grants `is_it` accepts out of the scope, which is then decided again;
    /// returns how many went. A conflicting delivery shows a folded grant to be one of
    /// conflicting deliveries, which `check` sets aside: it grants nothing.
    pub(super) fn take_folded_grants(&mut self, is_it: impl Fn(&Rec) -> bool) -> usize {
        let Some(c) = self.cold.as_mut() else {
            return 0;
        };
        let before = c.grants.len();
        c.grants.retain(|g| !is_it(g));
        let taken = before - c.grants.len();
        if taken > 0 {
            if c.is_empty() {
                self.cold = None;
            }
            self.set_clean(Clean::default());
        }
        taken
    }
}
