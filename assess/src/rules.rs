//! The per-event rules of SPEC §2, §4 and §8, one set for `check` ([`crate::history`]) and
//! `serve` ([`crate::live`]): the compact record both keep of an event ([`Rec`]), admission
//! ([`admit`]), what an applied event counts for ([`Applied`]: the route it observes, a stale
//! rejection, the per-event unknown reasons), the duplicate keys ([`Rec::seq_key`],
//! [`Rec::order_key`], [`Rec::span`]; `check` reads no spans) and what makes two deliveries one
//! event ([`Rec::same_content`], [`content_hash`]), and how a record is shown ([`Rec::view`]).
//! The per-scope sweeps that judge records against each other are in [`crate::scope`].
//!
//! Premises (SPEC §10): an attestation is one more [`Kind`], admitted by [`admit`] and kept as a
//! [`Rec`], so that its (emitter, seq) settles with every other kind's. Its premise,
//! `valid_for`, attester and evidence are content too: [`content_hash`] hashes them, and
//! `check` keeps them beside the record (the record has no byte to spare, and its other fields
//! are content an attestation may carry as well), comparing them with [`Rec::same_content`]'s.
//! An attestation extends no window, observes no route and raises no per-event reason: `check`
//! and `serve` take it to its premise's support ([`crate::premise`]) before [`Applied`] would
//! see it.

use crate::contract::{Contract, Property};
use crate::event::{Event, InvalidEvent, Kind, Outcome};
use crate::finding::{EventView, Provenance, Reason};
use crate::report::Sample;
use crate::scope::Slot;
use crate::time::{Duration, EventTime};
use crate::window::WindowSeries;
use serde::{Deserialize, Serialize};

/// A name id that names nothing: an absent holder, route, emitter or scope.
pub(crate) const NONE: u32 = u32::MAX;
/// [`Rec::prop`] of an event that names no property of the contract.
pub(crate) const UNATTRIBUTED: u16 = u16::MAX;

/// [`Rec::flags`]: the event carries `epoch`.
pub(crate) const HAS_EPOCH: u8 = 1;
/// [`Rec::flags`]: the event carries `order`.
pub(crate) const HAS_ORDER: u8 = 2;
/// [`Rec::flags`]: the event carries `seq`.
pub(crate) const HAS_SEQ: u8 = 4;
/// [`Rec::flags`]: outcome `rejected`.
pub(crate) const REJECTED: u8 = 8;
/// [`Rec::flags`]: one of conflicting deliveries of a duplicate key, set aside (SPEC §4
/// "Duplicates"): it counts as an event of its property and takes part in nothing else.
pub(crate) const ASIDE: u8 = 16;
/// [`Rec::flags`], `check`: an equal delivery of an event kept once, dropped.
pub(crate) const DUP: u8 = 32;
/// [`Rec::flags`], `serve`: a kept event whose `ambiguous_order` is raised.
pub(crate) const AMBIGUOUS: u8 = 64;
/// [`Rec::flags`], `serve`: a kept event whose `ungranted_epoch` is raised.
pub(crate) const UNGRANTED: u8 = 128;

/// [`Rec::source`]'s tag: the event has a provenance of its own (an OTLP span's source, trace
/// id and span id, SPEC §8), kept by its owner under the number in the other bits, rather than
/// a position in the source it was read from; its `position` is then its span key (for
/// `serve`, the span id's 8 bytes). Sources and such numbers stay below it.
pub(crate) const OWN_PROVENANCE: u32 = 1 << 31;

/// Events shown as a counterexample's context.
pub const CONTEXT_EVENTS: usize = 5;
/// Samples kept per (property, reason).
pub const SAMPLES_PER_REASON: usize = 3;
/// Malformed events whose message is kept.
pub const MALFORMED_SAMPLES: usize = 100;

/// One valid event, compact: 72 bytes, strings as ids into its owner's name table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Rec {
    pub(crate) ts: i64,
    /// 0 when absent ([`HAS_EPOCH`]), as `order` and `seq` are.
    pub(crate) epoch: u64,
    pub(crate) order: u64,
    pub(crate) inc: u64,
    pub(crate) seq: u64,
    /// Where it was read in its source: a line, an offset.
    pub(crate) position: u64,
    /// The owner's handle on the event's scope, [`NONE`] without one: `check` keeps each
    /// event's scope text, by reading order; `serve` the id of the scope it is kept under in
    /// its property (and [`NONE`] for what it does not keep in a scope).
    pub(crate) scope: u32,
    /// Name ids, [`NONE`] when absent (or, in `serve`, not kept: it interns only what it keeps).
    pub(crate) holder: u32,
    pub(crate) route: u32,
    pub(crate) emitter: u32,
    /// The owner's index of the source it was read from, or, tagged [`OWN_PROVENANCE`], the
    /// owner's number of the event's own provenance.
    pub(crate) source: u32,
    /// The property's index in the contract, [`UNATTRIBUTED`].
    pub(crate) prop: u16,
    pub(crate) kind: Kind,
    pub(crate) flags: u8,
}

const _: () = assert!(std::mem::size_of::<Rec>() == 72);

impl Rec {
    /// The record of an admitted event of property `prop`, read at `position` of `source`,
    /// without names ([`NONE`]): each assessor interns the ones it keeps.
    pub(crate) fn of(ev: &Event<'_>, prop: u16, source: u32, position: u64) -> Rec {
        let mut flags = 0;
        for (has, flag) in [
            (ev.epoch.is_some(), HAS_EPOCH),
            (ev.order.is_some(), HAS_ORDER),
            (ev.seq.is_some(), HAS_SEQ),
            (ev.outcome == Outcome::Rejected, REJECTED),
        ] {
            if has {
                flags |= flag;
            }
        }
        Rec {
            ts: ev.ts.0,
            epoch: ev.epoch.map_or(0, |e| e.0),
            order: ev.order.map_or(0, |o| o.0),
            inc: ev.incarnation.0,
            seq: ev.seq.map_or(0, |s| s.0),
            position,
            scope: NONE,
            holder: NONE,
            route: NONE,
            emitter: NONE,
            source,
            prop,
            kind: ev.kind,
            flags,
        }
    }

    pub(crate) fn has(&self, f: u8) -> bool {
        self.flags & f != 0
    }

    pub(crate) fn epoch(&self) -> Option<u64> {
        self.has(HAS_EPOCH).then_some(self.epoch)
    }

    pub(crate) fn order(&self) -> Option<u64> {
        self.has(HAS_ORDER).then_some(self.order)
    }

    pub(crate) fn has_scope(&self) -> bool {
        self.scope != NONE
    }

    /// A committed commit or fence: the events that establish or violate the fence.
    pub(crate) fn committed_mutation(&self) -> bool {
        self.kind.is_mutation() && !self.has(REJECTED)
    }

    /// Neither a dropped equal delivery nor set aside.
    pub(crate) fn applied(&self) -> bool {
        !self.has(DUP | ASIDE)
    }

    /// The sweep class ([`Slot::class`]): 0 a committed commit/fence with an epoch, 1 a grant,
    /// 2 anything else (which no sweep reads).
    pub(crate) fn class(&self) -> u8 {
        if self.committed_mutation() && self.has(HAS_EPOCH) {
            0
        } else if self.kind == Kind::Grant {
            1
        } else {
            2
        }
    }

    /// The record as the per-scope sweeps read it, as their event `idx`.
    pub(crate) fn slot(&self, idx: u32) -> Slot {
        Slot {
            inc: self.inc,
            epoch: self.epoch,
            ts: self.ts,
            order: self.order(),
            idx,
            holder: self.holder,
            prop: self.prop,
            class: self.class(),
        }
    }

    /// The (emitter, seq) duplicate key: every valid event with both.
    pub(crate) fn seq_key(&self) -> Option<(u32, u64)> {
        (self.emitter != NONE && self.has(HAS_SEQ)).then_some((self.emitter, self.seq))
    }

    /// The (incarnation, order, epoch) of the (scope, incarnation, order, epoch) duplicate key:
    /// attributed commit/fence events with a scope and an `order`; the scope is the owner's to
    /// compare (see [`Rec::scope`]).
    pub(crate) fn order_key(&self) -> Option<(u64, u64, Option<u64>)> {
        (self.prop != UNATTRIBUTED
            && self.kind.is_mutation()
            && self.has_scope()
            && self.has(HAS_ORDER))
        .then(|| (self.inc, self.order, self.epoch()))
    }

    /// Equal as deliveries of one event (SPEC §4 "Duplicates": kind, outcome, property, scope,
    /// incarnation, epoch, order, holder, route and ts), but for the scope, which is the
    /// owner's to compare (see [`Rec::scope`]). [`content_hash`] is the same rule for `serve`,
    /// which keeps a hash of each recent delivery rather than its record.
    pub(crate) fn same_content(&self, o: &Rec) -> bool {
        self.kind == o.kind
            && self.has(REJECTED) == o.has(REJECTED)
            && self.prop == o.prop
            && self.inc == o.inc
            && self.epoch() == o.epoch()
            && self.order() == o.order()
            && self.holder == o.holder
            && self.route == o.route
            && self.ts == o.ts
    }

    /// The name ids the record refers to (some may be [`NONE`]).
    pub(crate) fn name_ids(&self) -> [u32; 3] {
        [self.holder, self.route, self.emitter]
    }

    /// The owner's number of the event's own provenance ([`OWN_PROVENANCE`]), if it has one:
    /// one more duplicate key (SPEC §8: a span delivered again is one event).
    pub(crate) fn span(&self) -> Option<u32> {
        (self.source & OWN_PROVENANCE != 0).then_some(self.source & !OWN_PROVENANCE)
    }

    /// Where it was read, as a counterexample id hashes it: its own provenance (at position 0,
    /// the same however often and wherever it is delivered), else its source and position.
    pub(crate) fn provenance(&self, owner: &impl Resolve) -> Provenance {
        match self.span() {
            Some(n) => Provenance {
                source: owner.resolve_own(n),
                position: 0,
            },
            None => Provenance {
                source: owner.resolve_source(self.source).to_string(),
                position: self.position,
            },
        }
    }

    /// Where it was read, as findings show it: its own provenance, else `source:position`.
    pub(crate) fn shown_source(&self, owner: &impl Resolve) -> String {
        match self.span() {
            Some(n) => owner.resolve_own(n),
            None => format!("{}:{}", owner.resolve_source(self.source), self.position),
        }
    }

    /// A sample of an unknown reason raised by the event.
    pub(crate) fn sample(&self, owner: &impl Resolve, detail: String) -> Sample {
        Sample {
            source: self.shown_source(owner),
            ts: Some(EventTime(self.ts).to_string()),
            detail,
        }
    }

    /// The event as shown in a finding.
    pub(crate) fn view(&self, owner: &impl Resolve) -> EventView {
        let s = |id: u32| owner.resolve_name(id).map(str::to_string);
        EventView {
            kind: self.kind.as_str(),
            ts: EventTime(self.ts).to_string(),
            epoch: self.epoch(),
            incarnation: self.inc,
            order: self.order(),
            route: s(self.route),
            holder: s(self.holder),
            outcome: if self.has(REJECTED) {
                Outcome::Rejected.as_str()
            } else {
                Outcome::Committed.as_str()
            },
            emitter: s(self.emitter),
            seq: self.has(HAS_SEQ).then_some(self.seq),
            source: self.shown_source(owner),
        }
    }
}

/// What a record's ids stand for in the assessor that keeps it (`History`, `Live`).
pub(crate) trait Resolve {
    /// The name of id `id`; `None` for [`NONE`] and ids that name nothing.
    fn resolve_name(&self, id: u32) -> Option<&str>;
    /// The name of source `i` (not tagged [`OWN_PROVENANCE`]).
    fn resolve_source(&self, i: u32) -> &str;
    /// Own provenance `n` ([`Rec::span`]) as findings show it.
    fn resolve_own(&self, n: u32) -> String;
}

/// Why an event is malformed (SPEC §2, and §4 "Watermark" for `serve`); the message is what
/// reports and samples show.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Malformed {
    /// A per-kind rule of the event model.
    #[error("field `{field}`: {0}", field = .0.field())]
    Invalid(#[from] InvalidEvent),
    /// `serve`: an event too far ahead of the time its batch was received.
    #[error(
        "field `ts`: future timestamp {ts} is more than {tolerance} ahead of the time it was received ({received})"
    )]
    Future {
        ts: EventTime,
        tolerance: Duration,
        received: EventTime,
    },
    /// No `property` under a contract of several.
    #[error("field `property`: required when the contract declares more than one property")]
    NoProperty,
}

/// When `serve` received an event (ns) and how far ahead of that it may be (ns).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Received {
    pub(crate) at: i64,
    pub(crate) tolerance: i64,
}

/// Admits a decoded event: the per-kind rules ([`Event::validate`]), in `serve` (`received`)
/// the future timestamp rule, then its property ([`property_of`]).
///
/// Inlined into both callers (`check`'s and `serve`'s per-event paths): out of line, its call
/// cost more than the attestation rules it gained (README, Benchmarks).
#[inline(always)]
pub(crate) fn admit(
    contract: &Contract,
    ev: &Event<'_>,
    received: Option<Received>,
) -> Result<u16, Malformed> {
    ev.validate()?;
    if let Some(r) = received
        && ev.ts.0 > r.at.saturating_add(r.tolerance)
    {
        return Err(Malformed::Future {
            ts: ev.ts,
            tolerance: Duration(r.tolerance),
            received: EventTime(r.at),
        });
    }
    property_of(contract, ev)
}

/// The index of the property `ev` names, the only one when it names none, [`UNATTRIBUTED`]
/// when it names none of the contract's; malformed when it names none under several.
pub(crate) fn property_of(contract: &Contract, ev: &Event<'_>) -> Result<u16, Malformed> {
    match ev.property {
        Some(name) => Ok(contract
            .property_index(name)
            .map_or(UNATTRIBUTED, |i| i as u16)),
        None if contract.properties.len() == 1 => Ok(0),
        None => Err(Malformed::NoProperty),
    }
}

/// Places a malformed event in a property's windows (SPEC §2 and §4): at its `ts` if that
/// parsed, else at `prior`, the greatest valid event time read before it, else in the first
/// window (nowhere while the property has none).
pub(crate) fn place_malformed(series: &mut WindowSeries, ts: Option<i64>, prior: Option<i64>) {
    let at = ts
        .or(prior)
        .or_else(|| series.range().map(|(f, _)| series.start_of(f)));
    if let Some(t) = at {
        series.add_reason(t, Reason::MalformedEvent);
    }
}

/// An unattributed event matters only through its (emitter, seq) (seq tracking and
/// duplicates): one without both is counted and forgotten.
pub(crate) fn keeps_unattributed(ev: &Event<'_>) -> bool {
    ev.emitter.is_some() && ev.seq.is_some()
}

/// A record's route against its property's declared routes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Route {
    /// No `route`.
    Missing,
    /// A route the property does not declare.
    Undeclared,
    /// The property's declared route of that index.
    Declared(usize),
}

/// Every property's declared routes by name id, for [`RouteIds::route`].
#[derive(Debug, Clone, Default)]
pub(crate) struct RouteIds(Vec<Vec<(u32, usize)>>);

impl RouteIds {
    /// The declared routes of `contract`; `id` gives a route name's id, `None` when no event
    /// can carry it.
    pub(crate) fn new(contract: &Contract, mut id: impl FnMut(&str) -> Option<u32>) -> RouteIds {
        RouteIds(
            contract
                .properties
                .iter()
                .map(|p| {
                    p.routes
                        .iter()
                        .enumerate()
                        .filter_map(|(i, r)| id(&r.name).map(|id| (id, i)))
                        .collect()
                })
                .collect(),
        )
    }

    /// Route name id `id` against property `p`'s declared routes.
    pub(crate) fn route(&self, p: usize, id: u32) -> Route {
        if id == NONE {
            return Route::Missing;
        }
        self.0[p]
            .iter()
            .find(|(r, _)| *r == id)
            .map_or(Route::Undeclared, |&(_, i)| Route::Declared(i))
    }

    /// The name ids of every declared route.
    pub(crate) fn ids(&self) -> impl Iterator<Item = u32> + '_ {
        self.0.iter().flatten().map(|&(id, _)| id)
    }
}

/// What a route observation is (SPEC §4 `route_silent`: commit/fence events of either outcome
/// and heartbeats observe their route; grants never do).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Observes {
    Nothing,
    /// The property's declared route of that index.
    Declared(usize),
    /// A commit/fence on an undeclared route (counted by name).
    UndeclaredByMutation,
    /// A heartbeat on an undeclared route.
    UndeclaredByHeartbeat,
}

/// What an applied event (not a dropped duplicate, not set aside) of a property counts for,
/// besides its scope's sweeps (SPEC §4): every such event counts as an event of its property
/// in the window of its time; these are the rest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Applied {
    pub(crate) observes: Observes,
    /// A rejected commit/fence: positive evidence that the fence worked.
    pub(crate) stale_rejection: bool,
    /// Its per-event unknown reasons.
    pub(crate) reasons: Reasons,
}

impl Applied {
    /// What `rec`, on `route` of property `prop`, counts for.
    pub(crate) fn of(rec: &Rec, route: Route, prop: &Property) -> Applied {
        let observes = match (rec.kind, route) {
            (Kind::Grant, _) | (_, Route::Missing) => Observes::Nothing,
            (_, Route::Declared(i)) => Observes::Declared(i),
            (Kind::Heartbeat, Route::Undeclared) => Observes::UndeclaredByHeartbeat,
            (_, Route::Undeclared) => Observes::UndeclaredByMutation,
        };
        Applied {
            observes,
            stale_rejection: rec.kind.is_mutation() && rec.has(REJECTED),
            reasons: Reasons::of(rec, route, prop),
        }
    }
}

/// The per-event unknown reasons of SPEC §4 (`missing_scope`, `missing_epoch`,
/// `missing_route`, `undeclared_route`, `unfenced_route`), raised by committed commit/fence
/// events only, as a set (`serve` remembers it to withdraw them when the event is set aside).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Reasons(u8);

impl Reasons {
    /// No reason.
    pub(crate) const EMPTY: Reasons = Reasons(0);

    const ALL: [Reason; 5] = [
        Reason::MissingScope,
        Reason::MissingEpoch,
        Reason::MissingRoute,
        Reason::UndeclaredRoute,
        Reason::UnfencedRoute,
    ];

    /// The reasons `rec`, on `route` of property `prop`, raises.
    pub(crate) fn of(rec: &Rec, route: Route, prop: &Property) -> Reasons {
        if !rec.committed_mutation() {
            return Reasons::EMPTY;
        }
        // Bits in the order of `ALL`.
        let route = match route {
            Route::Missing => 1 << 2,
            Route::Undeclared => 1 << 3,
            Route::Declared(i) if !prop.routes[i].fenced => 1 << 4,
            Route::Declared(_) => 0,
        };
        Reasons(u8::from(!rec.has_scope()) | (u8::from(!rec.has(HAS_EPOCH)) << 1) | route)
    }

    pub(crate) fn iter(self) -> impl Iterator<Item = Reason> {
        (0..Reasons::ALL.len())
            .filter(move |bit| self.0 & (1 << bit) != 0)
            .map(|bit| Reasons::ALL[bit])
    }
}

/// The sample detail of per-event reason `reason` of a `kind` event whose route is named
/// `route`.
pub(crate) fn detail(reason: Reason, kind: Kind, route: Option<&str>) -> String {
    let k = kind.as_str();
    let route = route.unwrap_or_default();
    match reason {
        Reason::MissingScope => format!("{k} without `scope`"),
        Reason::MissingEpoch => format!("{k} without `epoch`"),
        Reason::MissingRoute => format!("{k} without `route`"),
        Reason::UndeclaredRoute => format!("route `{route}` is not in the contract"),
        Reason::UnfencedRoute => format!("route `{route}` is declared `fenced = false`"),
        _ => unreachable!("{reason} is not a per-event reason"),
    }
}

/// The sample detail of a reason the sweeps raise for an event of epoch `epoch` of `scope`
/// (`ambiguous_order`, `ungranted_epoch`).
pub(crate) fn sweep_detail(reason: Reason, epoch: u64, scope: &str) -> String {
    match reason {
        Reason::AmbiguousOrder => format!(
            "epoch {epoch} of scope `{scope}` has a higher-epoch or higher-incarnation partner within the clock skew and no `order` to decide"
        ),
        Reason::UngrantedEpoch => format!("epoch {epoch} of scope `{scope}` was never granted"),
        _ => unreachable!("{reason} is not raised by the sweeps"),
    }
}

/// A counterexample's context (SPEC §4, "the scope's last few events"): of `by_time`, a scope's
/// applied events sorted by (time, index), the last [`CONTEXT_EVENTS`] up to the stale event
/// `stale` (included); `ts` gives an event's time.
pub(crate) fn context(by_time: &[u32], ts: impl Fn(u32) -> i64, stale: u32) -> &[u32] {
    let at = (ts(stale), stale);
    let upto = by_time.partition_point(|&i| (ts(i), i) <= at);
    &by_time[upto.saturating_sub(CONTEXT_EVENTS)..upto]
}

/// The content of a delivery (SPEC §4 "Duplicates") as a 64-bit hash, `prop` its property as
/// admitted: equal for two deliveries, but for collisions, exactly when their records are
/// [`Rec::same_content`] and their scopes equal. For `serve`, which keeps a hash of each
/// recent (emitter, seq) delivery rather than its record (in checkpoints too: the hash of a
/// content never changes within a state layout; XXH3 is a fixed algorithm).
///
/// The fixed-width fields are packed into words beside each string's own XXH3 (under a seed
/// per field; an absent string is the seed's complement), and the words hashed at once:
/// ~200 instructions an event, where gathering every piece behind its length into a buffer
/// and hashing that took ~700 (callgrind of the OTLP applier, session 28; state layout 9).
pub(crate) fn content_hash(ev: &Event<'_>, prop: u16) -> u64 {
    use xxhash_rust::xxh3::{xxh3_64, xxh3_64_with_seed};
    let text =
        |s: Option<&str>, seed: u64| s.map_or(!seed, |s| xxh3_64_with_seed(s.as_bytes(), seed));
    let opt = |v: Option<u64>| v.map_or((0, 0), |v| (v, 1));
    let (epoch, has_epoch) = opt(ev.epoch.map(|e| e.0));
    let (order, has_order) = opt(ev.order.map(|o| o.0));
    // An attestation's own content (SPEC §10), ignored on other kinds.
    let attestation = ev.kind == Kind::Attestation;
    let (valid_for, has_valid) = match ev.valid_for {
        Some(d) if attestation => (d.0 as u64, 1),
        _ => (0, 0),
    };
    let head = (ev.kind as u64)
        | (ev.outcome as u64) << 8
        | u64::from(prop) << 16
        | has_epoch << 32
        | has_order << 33
        | has_valid << 34;
    let mut words = [
        head,
        ev.incarnation.0,
        epoch,
        order,
        ev.ts.0 as u64,
        text(ev.scope, 1),
        text(ev.holder, 2),
        text(ev.route, 3),
        0,
        0,
        0,
        0,
    ];
    let n = if attestation {
        words[8] = text(ev.premise, 4);
        words[9] = valid_for;
        words[10] = text(ev.attester, 5);
        words[11] = text(ev.evidence, 6);
        12
    } else {
        8
    };
    let mut bytes = [0u8; 96];
    for (to, w) in bytes.chunks_exact_mut(8).zip(&words[..n]) {
        to.copy_from_slice(&w.to_le_bytes());
    }
    xxh3_64(&bytes[..n * 8])
}

/// XXH3-64 of the pieces it takes ([`Hasher::array`], [`Hasher::raw`]): the same value as
/// `Xxh3Default` updated with them (a mark's key hash is, kept in checkpoints), for a fraction
/// of the instructions: the pieces are gathered in a buffer and hashed at once (a streaming
/// hasher spent ~30 instructions an update). Beyond the buffer (long strings) it falls back
/// to streaming.
pub(crate) struct Hasher {
    buf: [u8; Hasher::BUF],
    len: usize,
    streaming: Option<Box<xxhash_rust::xxh3::Xxh3Default>>,
}

impl Hasher {
    const BUF: usize = 256;

    pub(crate) fn new() -> Hasher {
        Hasher {
            buf: [0; Hasher::BUF],
            len: 0,
            streaming: None,
        }
    }

    /// Adds `b` as it is.
    #[inline]
    pub(crate) fn raw(&mut self, b: &[u8]) {
        match self.buf.get_mut(self.len..self.len + b.len()) {
            Some(to) if self.streaming.is_none() => {
                to.copy_from_slice(b);
                self.len += b.len();
            }
            _ => self.spill(b),
        }
    }

    /// Adds the array `b` as it is ([`Hasher::raw`] inlined with a constant length).
    #[inline]
    pub(crate) fn array<const N: usize>(&mut self, b: [u8; N]) {
        self.raw(&b);
    }

    /// `b` goes beyond the buffer, or went before: the streaming hasher takes it.
    #[cold]
    #[inline(never)]
    fn spill(&mut self, b: &[u8]) {
        let (buf, len) = (&self.buf, self.len);
        let h = self.streaming.get_or_insert_with(|| {
            let mut h = Box::new(xxhash_rust::xxh3::Xxh3Default::new());
            h.update(&buf[..len]);
            h
        });
        h.update(b);
    }

    pub(crate) fn digest(&self) -> u64 {
        match &self.streaming {
            Some(h) => h.digest(),
            None => xxhash_rust::xxh3::xxh3_64(&self.buf[..self.len]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Epoch, Incarnation, Order};
    use crate::intern::Interner;
    use proptest::prelude::*;

    fn arb_event() -> impl Strategy<Value = (Event<'static>, bool)> {
        let name = || prop_oneof![Just(None), Just(Some("a")), Just(Some("b"))];
        (
            prop_oneof![Just(Kind::Commit), Just(Kind::Fence), Just(Kind::Grant)],
            0i64..2,
            name(),
            prop::option::of(0u64..2),
            prop::option::of(0u64..2),
            name(),
            name(),
            0u64..2,
            any::<bool>(),
            any::<bool>(),
        )
            .prop_map(
                |(kind, ts, scope, epoch, order, holder, route, inc, rejected, named)| {
                    let mut e = Event::new(kind, EventTime(ts));
                    e.scope = scope;
                    e.epoch = epoch.map(Epoch);
                    e.order = order.map(Order);
                    e.holder = holder;
                    e.route = route;
                    e.incarnation = Incarnation(inc);
                    if rejected {
                        e.outcome = Outcome::Rejected;
                    }
                    (e, named)
                },
            )
    }

    fn rec(ev: &Event<'_>, prop: u16, names: &mut Interner) -> Rec {
        let mut r = Rec::of(ev, prop, 0, 0);
        let mut id = |s: Option<&str>| s.map_or(NONE, |s| names.intern(s));
        r.holder = id(ev.holder);
        r.route = id(ev.route);
        r.scope = id(ev.scope);
        r
    }

    /// `content_hash` as it was: a streaming XXH3 updated with each piece after its length.
    fn streamed(pieces: &[Vec<u8>]) -> u64 {
        let mut h = xxhash_rust::xxh3::Xxh3Default::new();
        for p in pieces {
            h.update(&(p.len() as u32).to_le_bytes());
            h.update(p);
        }
        h.digest()
    }

    proptest! {
        /// The gathering hasher gives what the streaming one gave, below, across and beyond
        /// its buffer: hashes kept in checkpoints stay comparable.
        #[test]
        fn the_hasher_is_the_streaming_xxh3(
            pieces in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..120), 0..12),
        ) {
            let mut h = Hasher::new();
            for p in &pieces {
                h.array((p.len() as u32).to_le_bytes());
                match p.len() {
                    8 => h.array::<8>(p[..].try_into().unwrap()),
                    _ => h.raw(p),
                }
            }
            prop_assert_eq!(h.digest(), streamed(&pieces));
        }
        /// The two forms of "one event delivered twice" agree.
        #[test]
        fn content_hash_is_same_content(
            (a, a_named) in arb_event(),
            (b, b_named) in arb_event(),
            pa in 0u16..2,
            pb in 0u16..2,
        ) {
            let mut names = Interner::new();
            let (pa, pb) = (if a_named { pa } else { UNATTRIBUTED }, if b_named { pb } else { UNATTRIBUTED });
            let (ra, rb) = (rec(&a, pa, &mut names), rec(&b, pb, &mut names));
            let same = ra.same_content(&rb) && ra.scope == rb.scope;
            prop_assert_eq!(same, content_hash(&a, pa) == content_hash(&b, pb));
            prop_assert!(ra.same_content(&ra));
        }
    }

    #[test]
    fn malformed_messages() {
        let c = Contract::parse(
            "c.toml",
            "[[property]]\nname=\"p\"\nsubject=\"S\"\nstrategy=\"lease_epoch\"\n[[property.route]]\nname=\"r\"\n[[property]]\nname=\"q\"\nsubject=\"S\"\nstrategy=\"lease_epoch\"\n[[property.route]]\nname=\"r\"\n",
        )
        .unwrap();
        let ev = Event::new(Kind::Heartbeat, EventTime(5_000_000_000));
        assert_eq!(
            admit(&c, &ev, None).unwrap_err().to_string(),
            "field `route`: is required on a heartbeat"
        );
        let mut ev = Event::new(Kind::Commit, EventTime(5_000_000_000));
        assert_eq!(
            admit(&c, &ev, None).unwrap_err().to_string(),
            "field `property`: required when the contract declares more than one property"
        );
        let received = Received {
            at: 1_000_000_000,
            tolerance: 2_000_000_000,
        };
        assert_eq!(
            admit(&c, &ev, Some(received)).unwrap_err().to_string(),
            "field `ts`: future timestamp 1970-01-01T00:00:05.000000000Z is more than 2s ahead of the time it was received (1970-01-01T00:00:01.000000000Z)"
        );
        ev.property = Some("q");
        assert_eq!(admit(&c, &ev, None), Ok(1));
        ev.property = Some("x");
        assert_eq!(admit(&c, &ev, None), Ok(UNATTRIBUTED));
    }

    #[test]
    fn reasons_of_committed_mutations_only() {
        let c = Contract::parse(
            "c.toml",
            "[[property]]\nname=\"p\"\nsubject=\"S\"\nstrategy=\"lease_epoch\"\n[[property.route]]\nname=\"r\"\nfenced=false\n",
        )
        .unwrap();
        let p = &c.properties[0];
        let mut ev = Event::new(Kind::Commit, EventTime(0));
        let r = Rec::of(&ev, 0, 0, 0);
        assert_eq!(
            Reasons::of(&r, Route::Missing, p)
                .iter()
                .collect::<Vec<_>>(),
            [
                Reason::MissingScope,
                Reason::MissingEpoch,
                Reason::MissingRoute
            ]
        );
        assert_eq!(
            Reasons::of(&r, Route::Declared(0), p).iter().last(),
            Some(Reason::UnfencedRoute)
        );
        ev.outcome = Outcome::Rejected;
        let r = Rec::of(&ev, 0, 0, 0);
        assert_eq!(Reasons::of(&r, Route::Undeclared, p), Reasons::EMPTY);
        let applied = Applied::of(&r, Route::Undeclared, p);
        assert!(applied.stale_rejection);
        assert_eq!(applied.observes, Observes::UndeclaredByMutation);
        let g = Rec::of(&Event::new(Kind::Grant, EventTime(0)), 0, 0, 0);
        assert_eq!(
            Applied::of(&g, Route::Declared(0), p).observes,
            Observes::Nothing
        );
    }
}
