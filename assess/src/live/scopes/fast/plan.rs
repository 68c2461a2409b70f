//! The fast path's plans: what one event changes when [`Fast`](super::Fast) or the scope's
//! summary settles it ([`plan`]; `Live::apply_plan` applies it), and how a scope's
//! cleanliness follows a full decision ([`decided`]) and a fold ([`folded`]).

use super::{Clean, Fast, HOT_EVENTS};
use crate::live::scopes::ScopeState;
use crate::rules::{ASIDE, HAS_ORDER, NONE, Rec};

/// What the fast path does for one event: the flags the full decision would set, the
/// counterexamples it would find (of the event), and whether the scope stays calm. Nothing
/// else changes.
#[derive(Debug)]
pub(in crate::live) struct Plan {
    /// Kept commits that become `ambiguous_order`, ascending.
    pub(in crate::live) ambiguous: Vec<usize>,
    /// The event is `ambiguous_order`.
    pub(in crate::live) ambiguous_self: bool,
    /// The event is `ungranted_epoch`.
    pub(in crate::live) ungranted: bool,
    /// The event is `late_evidence`.
    pub(in crate::live) late: bool,
    /// The event is stale against this commit (a sweep index)...
    pub(in crate::live) stale: Option<u32>,
    /// ... a holder mismatch against this grant ...
    pub(in crate::live) mismatch: Option<u32>,
    /// ... and stale against this commit of a higher incarnation.
    pub(in crate::live) stale_incarnation: Option<u32>,
    pub(in crate::live) calm: bool,
}

impl Plan {
    pub(in crate::live) fn quiet(st: &ScopeState) -> Plan {
        Plan {
            ambiguous: Vec::new(),
            ambiguous_self: false,
            ungranted: false,
            late: false,
            stale: None,
            mismatch: None,
            stale_incarnation: None,
            calm: st.clean().calm,
        }
    }
}

/// The plan for `rec` (a commit/fence with an epoch, or a grant) about to be kept in `st`,
/// when the fast path can make it; `None` for the full decision. `due`: a holder mismatch of
/// the property waits with a commit older than the watermark `wm` (this event moved it).
pub(in crate::live) fn plan(
    st: &ScopeState,
    rec: &Rec,
    skew: i64,
    horizon: i64,
    required: bool,
    (wm, due): (i64, bool),
) -> Option<Plan> {
    // A grant older than the horizon plus the skew may be earliest among the folded ones; a
    // commit whose `order` is not above the folded ones' may precede them.
    if !st.clean().clean
        || (rec.class() == 1 && rec.ts < horizon.saturating_add(skew))
        || (rec.class() == 0
            && rec
                .order()
                .is_some_and(|o| st.order_may_precede_folded(rec.inc, o)))
    {
        return None;
    }
    // A mismatch of the scope that this event made due: the full decision records it now,
    // before the watermark settles the others.
    match st.fast() {
        Some(f) if f.pending_min < wm => return None,
        None if due => return None,
        _ => {}
    }
    match (rec.class(), st.fast()) {
        (0, Some(f)) => f.commit(st, rec, skew, required, (horizon, wm)),
        (1, Some(f)) => f.grant(st, rec, skew),
        (0, None) if rec.ts >= horizon.saturating_add(skew) => {
            quiet(st, rec, skew, required).then(|| Plan::quiet(st))
        }
        _ => None,
    }
}

/// Whether commit `rec` changes no finding, from the summary alone (a scope without a
/// [`Fast`]): no kept grant nor `order`, `rec` unordered, at the highest (incarnation, epoch)
/// — the one of its kept commits and the mark — and no earlier than those commits, with their
/// holder and the mark's (known) or none; or above it and later than them by more than the skew. Its grant checks
/// are settled by the folded grants.
fn quiet(st: &ScopeState, rec: &Rec, skew: i64, required: bool) -> bool {
    if rec.has(HAS_ORDER) {
        return false;
    }
    let key = (rec.inc, rec.epoch);
    let mark = st.evidence().map(|m| (m.incarnation, m.epoch));
    let (kept, holder, max_ts) = match st.summary() {
        None => (None, NONE, i64::MIN),
        Some(s) if s.grants || s.ordered => return false,
        Some(s) => (s.top, s.top_holder, s.max_ts),
    };
    let fits = |h: u32| rec.holder == NONE || h == NONE || h == rec.holder;
    let settled = match kept.max(mark) {
        Some(t) if t > key => false,
        Some(t) if t == key => {
            rec.ts >= max_ts
                && (kept != Some(key) || fits(holder))
                && (mark != Some(key) || (!st.holder_unsure() && fits(st.mark_holder())))
        }
        _ => max_ts.saturating_add(skew) < rec.ts,
    };
    settled && grant_settled(st.folded_grants(), rec, required)
}

/// Whether the folded grants settle the grant checks of `rec` (no grant is kept): no holder
/// mismatch and, when grants are required, granted.
fn grant_settled(folded: &[Rec], rec: &Rec, required: bool) -> bool {
    let mut granted = false;
    let mut holders = false;
    let mut matched = false;
    for g in folded
        .iter()
        .filter(|g| (g.inc, g.epoch) == (rec.inc, rec.epoch))
    {
        granted = true;
        holders |= g.holder != NONE;
        matched |= g.holder != NONE && g.holder == rec.holder;
    }
    let no_mismatch = rec.holder == NONE || !holders || matched;
    no_mismatch && (granted || !required)
}

/// What a full decision found that the fast path needs.
#[derive(Debug, Clone, Copy)]
pub(in crate::live) struct Decided {
    /// Nothing about the kept events: no counterexample (also none the decision dropped: a
    /// reuse through the mark left to `late_evidence`, one of the folded detail), no
    /// ambiguous order, no holder mismatch waiting.
    pub(in crate::live) calm: bool,
    /// The earliest holder mismatch it left waiting (`i64::MAX`: none).
    pub(in crate::live) pending_min: i64,
    /// The latest stale event of what it found (`i64::MIN`: none).
    pub(in crate::live) cx_max: i64,
}

/// After a full decision of `st`: clean, with a [`Fast`] when hot.
pub(in crate::live) fn decided(st: &mut ScopeState, d: Decided) {
    st.set_clean(Clean {
        clean: true,
        calm: d.calm,
    });
    let fast = (st.events().len() >= HOT_EVENTS).then(|| Box::new(Fast::build(st, &d)));
    st.set_fast(fast);
}

/// After `st` folded what fell behind the horizon (`was`: clean and calm before): still clean
/// if it was calm and every kept commit is at or above the new mark (the module doc), its
/// [`Fast`] rebuilt; else dirty.
pub(in crate::live) fn folded(st: &mut ScopeState, was: Clean) {
    if st.events().is_empty() {
        return;
    }
    let mark = st.high_water().map(|m| (m.incarnation, m.epoch));
    let stays = was.clean
        && was.calm
        && st
            .events()
            .iter()
            .filter(|e| e.class() == 0 && !e.has(ASIDE))
            .all(|e| mark.is_none_or(|m| (e.inc, e.epoch) >= m));
    if !stays {
        st.set_clean(Clean::default());
        st.set_fast(None);
        return;
    }
    st.set_clean(was);
    let fast = (st.events().len() >= HOT_EVENTS && st.fast().is_some()).then(|| {
        let d = Decided {
            calm: true,
            pending_min: i64::MAX,
            cx_max: i64::MIN,
        };
        Box::new(Fast::build(st, &d))
    });
    st.set_fast(fast);
}
