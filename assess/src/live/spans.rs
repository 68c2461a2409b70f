//! The own provenance of events that carry one ([`Live::push_span`]: an OTLP span's source,
//! trace and span ids), 28 bytes each in a table the records point into ([`Rec::span`]): no
//! string, no hash, no allocation per event. Rendered `<source>:<trace_id>/<span_id>` in
//! lower-case hex. Swept like the name table: when it holds twice the ids alive after the last
//! sweep (at least 65,536), every slot no kept event or counterexample refers to is freed and
//! reused — unless those events are too many for a sweep to free a quarter
//! (`Live::sweep_spans`): it is put off to the next doubling then.
//!
//! A [`SpanIndex`] finds, by span id, the kept delivery of a span wherever it is kept (SPEC §8:
//! the span source is one more duplicate key under §4's Duplicates rule, whatever scope or
//! property a delivery names).
//!
//! [`Live::push_span`]: super::Live::push_span
//! [`Rec::span`]: crate::rules::Rec::span

use crate::event::Kind;
use crate::rules::{OWN_PROVENANCE, Reasons, Rec};
use serde::{Deserialize, Serialize};
use std::hash::BuildHasher;

/// A span's identity: its 16-byte trace id, then its 8-byte span id.
pub type SpanId = [u8; 24];

const SWEEP_MIN: usize = 1 << 16;

/// The table of spans: each slot a span id and the source it was read from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Spans {
    ids: Vec<(SpanId, u32)>,
    /// Freed slots, reused first.
    free: Vec<u32>,
    /// Sweep when more than this many are alive.
    sweep_at: u64,
}

impl Default for Spans {
    fn default() -> Spans {
        Spans {
            ids: Vec::new(),
            free: Vec::new(),
            sweep_at: SWEEP_MIN as u64,
        }
    }
}

impl Spans {
    /// Adds `id`, read from `source`; its slot.
    pub(super) fn add(&mut self, id: &SpanId, source: u32) -> u32 {
        match self.free.pop() {
            Some(i) => {
                self.ids[i as usize] = (*id, source);
                i
            }
            None => {
                let i = self.ids.len() as u32;
                assert!(i < OWN_PROVENANCE, "span table full");
                self.ids.push((*id, source));
                i
            }
        }
    }

    /// The span id in slot `i`.
    pub(super) fn get(&self, i: u32) -> Option<&SpanId> {
        self.ids.get(i as usize).map(|(id, _)| id)
    }

    /// The span id in slot `i` and the source it was read from.
    pub(super) fn get_with_source(&self, i: u32) -> Option<(&SpanId, u32)> {
        self.ids.get(i as usize).map(|(id, s)| (id, *s))
    }

    /// Heap bytes of the table.
    pub(super) fn heap_bytes(&self) -> usize {
        self.ids.capacity() * std::mem::size_of::<(SpanId, u32)>()
            + self.free.capacity() * std::mem::size_of::<u32>()
    }

    /// Slots in use.
    pub(super) fn len(&self) -> usize {
        self.ids.len() - self.free.len()
    }

    /// Whether a sweep is due.
    pub(super) fn needs_sweep(&self) -> bool {
        self.len() as u64 > self.sweep_at
    }

    /// Puts the due sweep off until the table holds twice what it holds now.
    pub(super) fn put_off_sweep(&mut self) {
        self.sweep_at = (2 * self.len()).max(SWEEP_MIN) as u64;
    }

    /// The number of slots, for the marks of a sweep.
    pub(super) fn slots(&self) -> usize {
        self.ids.len()
    }

    /// Frees every slot not marked `alive`.
    pub(super) fn sweep(&mut self, alive: &[bool]) {
        self.free = (0..self.ids.len() as u32)
            .filter(|&i| !alive.get(i as usize).copied().unwrap_or(false))
            .collect();
        // Free slots at the end go; the others are reused lowest first.
        while let Some(&last) = self.free.last()
            && last as usize + 1 == self.ids.len()
        {
            self.free.pop();
            self.ids.pop();
        }
        self.free.reverse();
        self.ids.shrink_to(self.ids.len() * 2);
        self.sweep_at = (2 * self.len()).max(SWEEP_MIN) as u64;
    }
}

/// Where a span's kept delivery is: its slot, and the property and scope id that keep it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct KeptSpan {
    pub(super) slot: u32,
    pub(super) prop: u16,
    pub(super) scope: u32,
}

impl KeptSpan {
    /// Where `rec`, kept (or about to be) in property `p`, is, if it has a span of its own.
    pub(super) fn of(p: usize, rec: &Rec) -> Option<KeptSpan> {
        Some(KeptSpan {
            slot: rec.span()?,
            prop: p as u16,
            scope: rec.scope,
        })
    }
}

/// The kept deliveries of spans by span id, in open-addressing tables of 8-byte entries
/// (32 bits of the span id's hash, the slot + 1; 0 is empty) probed linearly and kept at most
/// half full ([`grow_above`]), so a lookup and the insert after it read one cache line, which
/// [`SpanIndex::warm`] fetches ahead (a table of 16-byte entries and control bytes read two,
/// the second a miss). Where each indexed slot's delivery is kept (property, scope id) is beside
/// it, by slot, read only when a span is found again. One index for every kept event with a
/// span, where a set per hot scope found only the deliveries of the scope a re-delivery names.
/// Derived from the kept events: not checkpointed ([`Live`](super::Live) builds it on
/// restore), and the entries of slots a sweep of the span table frees are dropped with them,
/// so an entry never names a slot reused by another span. An entry whose delivery has since
/// folded or gone is found stale where it is looked up, and replaced. Keyed by a randomly
/// seeded hash: span ids come from clients.
///
/// The entries are split over [`SEGMENTS`] tables by the hash's top bits, each grown (doubled,
/// every entry placed again) on its own: one table of every entry stopped the applier while
/// it was placed again, 168 ms at 2M spans (every batch's answer waiting: the longest
/// request of `serve_bench`'s OTLP runs, ~200 ms at each doubling), where a segment's growth
/// takes a sixty-fourth of that.
#[derive(Default)]
pub(super) struct SpanIndex {
    /// By the top bits of the hash ([`segment_of`]); empty until the first insert.
    segments: Vec<Segment>,
    /// Entries in use, over the segments.
    len: usize,
    /// Per slot of the span table, where its delivery is kept (valid for indexed slots).
    kept: Vec<(u32, u16)>,
    hasher: foldhash::fast::RandomState,
}

/// The tables a [`SpanIndex`] is split over (a power of two).
const SEGMENTS: usize = 64;
/// A segment's least length once it holds an entry.
const SEGMENT_MIN: usize = 64;

/// One table of a [`SpanIndex`].
#[derive(Default)]
struct Segment {
    /// A power of two long (or empty).
    entries: Vec<u64>,
    /// Entries in use.
    len: usize,
}

impl Segment {
    /// The first position probed for `hash` (the table is not empty).
    fn home(&self, hash: u32) -> usize {
        (hash as usize) & (self.entries.len() - 1)
    }

    /// The position of the entry of span `id` (hash `hash`), or of the empty one where it
    /// would go; the table is not empty.
    fn probe(&self, spans: &Spans, id: &SpanId, hash: u32) -> usize {
        let mask = self.entries.len() - 1;
        let mut i = self.home(hash);
        loop {
            let e = self.entries[i];
            if e == 0 || ((e >> 32) as u32 == hash && spans.get(slot_of(e)) == Some(id)) {
                return i;
            }
            i = (i + 1) & mask;
        }
    }

    /// Puts entry `e` (of a span not in the table) in the first empty position from its home.
    fn place(&mut self, e: u64) {
        let mask = self.entries.len() - 1;
        let mut i = self.home((e >> 32) as u32);
        while self.entries[i] != 0 {
            i = (i + 1) & mask;
        }
        self.entries[i] = e;
    }

    /// Makes the table `cap` long (a power of two, above twice its entries) and places
    /// `entries` in it.
    fn rebuild(&mut self, cap: usize, entries: impl IntoIterator<Item = u64>) {
        self.entries = written_zeros(cap);
        self.len = 0;
        for e in entries {
            self.place(e);
            self.len += 1;
        }
    }

    /// Doubles the table (at least [`SEGMENT_MIN`] entries), placing every entry again.
    fn grow(&mut self) {
        let cap = (2 * self.entries.len()).max(SEGMENT_MIN);
        let old = std::mem::take(&mut self.entries);
        self.rebuild(cap, old.into_iter().filter(|&e| e != 0));
    }
}

impl std::fmt::Debug for SpanIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpanIndex").field("len", &self.len).finish()
    }
}

/// `len` zeros, every page of them written before any is read. A table of fresh memory
/// (`vec![0; len]` is calloc) maps the kernel's shared zero page when a probe first reads a
/// page, and the first write to it then copies that page and flushes the TLB of every core the
/// process ran on, an interrupt to each (in a VM, an exit to the host): 4% of `serve`'s
/// samples while the index grew in an OTLP run. A page written first takes one fault, no flush.
fn written_zeros(len: usize) -> Vec<u64> {
    const PAGE: usize = 4096 / std::mem::size_of::<u64>();
    let mut v = vec![0; len];
    for x in v.iter_mut().step_by(PAGE) {
        // An opaque zero: a known one would not be stored, calloc's memory being zero already.
        *x = std::hint::black_box(0);
    }
    v
}

/// An entry: `hash` and `slot`.
fn entry(hash: u32, slot: u32) -> u64 {
    (u64::from(hash) << 32) | (u64::from(slot) + 1)
}

/// The slot of a non-empty entry.
fn slot_of(e: u64) -> u32 {
    (e as u32).wrapping_sub(1)
}

/// The fill, in 128ths, above which segment `at` grows: from 3/8 to 1/2 over the segments, so
/// that their growths, reached at about one total count by uniform hashes, come one after the
/// other over a third more entries rather than in a few batches (64 growths of ~2.6 ms at
/// 2M spans landed within ten batches, up to 35 ms in one).
fn grow_above(at: usize) -> usize {
    48 + at * 16 / SEGMENTS
}

/// The segment of a hash: its top bits (a segment's position takes its low ones).
fn segment_of(hash: u32) -> usize {
    (hash >> (32 - SEGMENTS.trailing_zeros())) as usize
}

impl SpanIndex {
    /// 32 bits of `id`'s hash, its three words written whole (hashing the array wrote its
    /// length and then its bytes: ~50 instructions).
    fn hash(&self, id: &SpanId) -> u32 {
        use std::hash::Hasher;
        let mut h = self.hasher.build_hasher();
        for w in id.chunks_exact(8) {
            h.write_u64(u64::from_le_bytes(w.try_into().expect("eight bytes")));
        }
        h.finish() as u32
    }

    /// The segment of `hash`, if it holds a table.
    fn segment(&self, hash: u32) -> Option<&Segment> {
        self.segments
            .get(segment_of(hash))
            .filter(|s| !s.entries.is_empty())
    }

    /// Reads, changing nothing, the entry a lookup of `id` reads first, so that its cache
    /// line is fetched ahead of the lookup (as [`Live::warm`](super::Live::warm) does for
    /// scopes): no answer depends on it.
    pub(super) fn warm(&self, id: &SpanId) {
        let hash = self.hash(id);
        if let Some(s) = self.segment(hash) {
            std::hint::black_box(s.entries[s.home(hash)]);
        }
    }

    /// Where the kept delivery of span `id` is, if one is indexed.
    pub(super) fn find(&self, spans: &Spans, id: &SpanId) -> Option<KeptSpan> {
        if self.len == 0 {
            return None;
        }
        let hash = self.hash(id);
        let s = self.segment(hash)?;
        let e = s.entries[s.probe(spans, id, hash)];
        (e != 0).then(|| {
            let slot = slot_of(e);
            let (scope, prop) = self.kept[slot as usize];
            KeptSpan { slot, prop, scope }
        })
    }

    /// Indexes `k` as the kept delivery of the span in its slot, in place of an entry of the
    /// same span.
    pub(super) fn insert(&mut self, spans: &Spans, k: KeptSpan) {
        let Some(id) = spans.get(k.slot) else { return };
        let hash = self.hash(id);
        if self.segments.is_empty() {
            self.segments.resize_with(SEGMENTS, Segment::default);
        }
        let at = segment_of(hash);
        let s = &mut self.segments[at];
        if (s.len + 1) * 128 > s.entries.len() * grow_above(at) {
            s.grow();
        }
        let i = s.probe(spans, id, hash);
        let new = usize::from(s.entries[i] == 0);
        s.len += new;
        self.len += new;
        s.entries[i] = entry(hash, k.slot);
        let at = k.slot as usize;
        if self.kept.len() <= at {
            let more = at + 1 - self.kept.len();
            crate::intern::reserve_for(&mut self.kept, more);
            self.kept.resize(at + 1, (0, 0));
        }
        self.kept[at] = (k.scope, k.prop);
    }

    /// Drops the entries of the slots not marked `alive` (a sweep of the span table frees
    /// them).
    pub(super) fn retain_alive(&mut self, alive: &[bool]) {
        let is_alive =
            |e: &u64| *e != 0 && alive.get(slot_of(*e) as usize).copied().unwrap_or(false);
        self.len = 0;
        for s in &mut self.segments {
            let live: Vec<u64> = s.entries.iter().copied().filter(is_alive).collect();
            if live.is_empty() {
                *s = Segment::default();
                continue;
            }
            let cap = (2 * live.len()).next_power_of_two().max(SEGMENT_MIN);
            s.rebuild(cap, live);
            self.len += s.len;
        }
        self.kept.truncate(alive.len());
    }

    /// Forgets every entry (to be built again).
    pub(super) fn clear(&mut self) {
        self.segments.clear();
        self.len = 0;
        self.kept.clear();
    }

    /// Heap bytes of the index.
    pub(super) fn heap_bytes(&self) -> usize {
        let tables: usize = self.segments.iter().map(|s| s.entries.capacity() * 8).sum();
        tables
            + self.segments.capacity() * std::mem::size_of::<Segment>()
            + self.kept.capacity() * std::mem::size_of::<(u32, u16)>()
    }
}

/// A delivery of a span that no scope keeps (a heartbeat, an event without a scope or without
/// a property, an attestation): what its re-deliveries are compared with (SPEC §8: the span
/// source is a duplicate key whatever the event is).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Unkept {
    pub(super) id: SpanId,
    /// Its content hash (`rules::content_hash`).
    pub(super) hash: u64,
    pub(super) ts: i64,
    pub(super) kind: Kind,
    /// Its property, `UNATTRIBUTED` when it named none the contract has.
    pub(super) prop: u16,
    /// The per-event reasons it raised (taken back when a different delivery sets it aside).
    pub(super) reasons: Reasons,
    /// A different delivery was seen: every delivery is set aside.
    pub(super) conflicted: bool,
    /// Its (emitter, seq) key, if it has one (`emitter` is `NONE` when not): the same delivery
    /// as that key's, whose effects are taken back once, by whichever key conflicts first.
    pub(super) emitter: u32,
    pub(super) seq: u64,
    /// The declared route it observed, as `dups::OBSERVED` + its index (`NONE` when none).
    pub(super) route: u32,
}

// 64 bytes an entry (and the table's control byte), as the README says.
const _: () = assert!(std::mem::size_of::<Unkept>() == 64);

/// Attestation spans kept behind the lowest horizon, the newest this many (4 MiB of entries):
/// attestations are never late (SPEC §10), so one may be delivered again at any time, and a
/// re-delivery forgotten would be applied a second time (supporting its premise twice).
const ATTESTATION_SPANS: usize = 1 << 16;

/// Whether entry `e` is still compared with re-deliveries under `horizon`: within it, or an
/// attestation (bounded by [`ATTESTATION_SPANS`] instead).
fn noted(e: &Unkept, horizon: i64) -> bool {
    e.ts >= horizon || e.kind == Kind::Attestation
}

/// The least of `keys` beyond the greatest `keep` of them (in no order): what a table bounded
/// to `keep` entries drops, `keys` ordered by what it keeps first.
pub(super) fn least_beyond<K: Ord>(mut keys: Vec<K>, keep: usize) -> Vec<K> {
    let Some(cut) = keys.len().checked_sub(keep).filter(|&c| c > 0) else {
        return Vec::new();
    };
    keys.select_nth_unstable(cut - 1);
    keys.truncate(cut);
    keys
}

/// The deliveries of spans no scope keeps, by span id, until their time falls behind the
/// lowest horizon of the properties (as the (emitter, seq) deliveries do), and the newest
/// [`ATTESTATION_SPANS`] attestations behind it: tables of 64-byte entries, swept when they
/// hold twice the entries alive after the last sweep (at least 65,536). Keyed by a randomly
/// seeded hash: span ids come from clients; 64 tables by six middle bits of it (as the
/// interner's, `intern::segment_of`), each grown
/// alone by hashbrown (one table grown whole stopped the applier 183 ms at 1.8M heartbeat
/// spans inside the horizon, `examples/unkept_growth`). Checkpointed with
/// the state, as its entries in span-id order (and the tables built again, under a new seed,
/// on restore): a re-delivery after a restart is compared with a first delivery applied
/// before the checkpoint as it would have been without the restart.
#[derive(Clone)]
pub(super) struct UnkeptSpans {
    tables: Box<[hashbrown::HashTable<Unkept>; crate::intern::SEGMENTS]>,
    len: usize,
    /// No entry's time is below this: a sweep with nothing behind the horizon is put off
    /// without walking the tables (they grow with heartbeats inside the horizon).
    oldest: i64,
    hasher: foldhash::fast::RandomState,
    sweep_at: usize,
}

impl Default for UnkeptSpans {
    fn default() -> UnkeptSpans {
        UnkeptSpans {
            tables: crate::intern::empty_tables(),
            len: 0,
            oldest: i64::MAX,
            hasher: Default::default(),
            sweep_at: 0,
        }
    }
}

/// [`UnkeptSpans`] as a checkpoint holds it.
#[derive(Serialize, Deserialize)]
struct SavedUnkept {
    entries: Vec<Unkept>,
    sweep_at: u64,
}

impl Serialize for UnkeptSpans {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut entries: Vec<Unkept> = self.entries().copied().collect();
        entries.sort_unstable_by_key(|e| e.id);
        SavedUnkept {
            entries,
            sweep_at: self.sweep_at as u64,
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for UnkeptSpans {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<UnkeptSpans, D::Error> {
        let saved = SavedUnkept::deserialize(d)?;
        let mut t = UnkeptSpans {
            sweep_at: usize::try_from(saved.sweep_at).map_err(serde::de::Error::custom)?,
            ..UnkeptSpans::default()
        };
        for e in saved.entries {
            t.insert(e);
        }
        Ok(t)
    }
}

/// Equal when they hold the same entries (whatever the order of their tables) and sweep at
/// the same count.
impl PartialEq for UnkeptSpans {
    fn eq(&self, other: &UnkeptSpans) -> bool {
        self.sweep_at == other.sweep_at
            && self.len == other.len
            && self
                .entries()
                .all(|e| other.find(&e.id).is_some_and(|x| x == e))
    }
}

impl Eq for UnkeptSpans {}

impl std::fmt::Debug for UnkeptSpans {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UnkeptSpans")
            .field("len", &self.len)
            .finish()
    }
}

impl UnkeptSpans {
    fn hash(&self, id: &SpanId) -> u64 {
        self.hasher.hash_one(id)
    }

    /// Every entry, table by table.
    fn entries(&self) -> impl Iterator<Item = &Unkept> {
        self.tables.iter().flat_map(|t| t.iter())
    }

    fn find(&self, id: &SpanId) -> Option<&Unkept> {
        let h = self.hash(id);
        self.tables[crate::intern::segment_of(h)].find(h, |e| e.id == *id)
    }

    /// The delivery of span `id` at or after `horizon` (or an attestation's, [`noted`]), if one
    /// was noted.
    pub(super) fn get_mut(&mut self, id: &SpanId, horizon: i64) -> Option<&mut Unkept> {
        let h = self.hash(id);
        self.tables[crate::intern::segment_of(h)]
            .find_mut(h, |e| e.id == *id)
            .filter(|e| noted(e, horizon))
    }

    /// Whether an attestation's delivery of span `id` is noted (at any time).
    pub(super) fn holds_attestation(&self, id: &SpanId) -> bool {
        self.find(id).is_some_and(|e| e.kind == Kind::Attestation)
    }

    /// Notes `e`, in place of an earlier delivery of its span (one behind the horizon).
    pub(super) fn insert(&mut self, e: Unkept) {
        self.oldest = self.oldest.min(e.ts);
        let h = self.hash(&e.id);
        let hasher = &self.hasher;
        match self.tables[crate::intern::segment_of(h)].entry(
            h,
            |x| x.id == e.id,
            |x| hasher.hash_one(x.id),
        ) {
            hashbrown::hash_table::Entry::Occupied(mut o) => *o.get_mut() = e,
            hashbrown::hash_table::Entry::Vacant(v) => {
                v.insert(e);
                self.len += 1;
            }
        }
    }

    /// Whether a sweep is due.
    pub(super) fn needs_sweep(&self) -> bool {
        self.len > self.sweep_at.max(SWEEP_MIN)
    }

    /// Drops the deliveries behind `horizon` but the newest [`ATTESTATION_SPANS`] attestations.
    pub(super) fn sweep(&mut self, horizon: i64) {
        self.sweep_keeping(horizon, ATTESTATION_SPANS);
    }

    /// [`UnkeptSpans::sweep`], keeping `attestations` behind the horizon.
    fn sweep_keeping(&mut self, horizon: i64, attestations: usize) {
        if self.oldest >= horizon {
            self.sweep_at = 2 * self.len;
            return;
        }
        for t in self.tables.iter_mut() {
            t.retain(|e| noted(e, horizon));
        }
        let behind: Vec<(i64, SpanId)> = (self.entries())
            .filter(|e| e.ts < horizon)
            .map(|e| (e.ts, e.id))
            .collect();
        // The oldest go (by time, then span id: exactly `attestations` stay).
        for (_, id) in least_beyond(behind, attestations) {
            let h = self.hasher.hash_one(id);
            if let Ok(e) = self.tables[crate::intern::segment_of(h)].find_entry(h, |e| e.id == id) {
                e.remove();
            }
        }
        let hasher = &self.hasher;
        for t in self.tables.iter_mut() {
            t.shrink_to(t.len() * 2, |x| hasher.hash_one(x.id));
        }
        self.len = self.tables.iter().map(hashbrown::HashTable::len).sum();
        self.oldest = self.entries().map(|e| e.ts).min().unwrap_or(i64::MAX);
        self.sweep_at = 2 * self.len;
    }

    /// Deliveries noted.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Heap bytes of the tables.
    pub(super) fn heap_bytes(&self) -> usize {
        self.tables.iter().map(|t| t.allocation_size()).sum()
    }
}

/// `<source>:<trace_id>/<span_id>`, lower-case hex.
pub(super) fn render(source: &str, id: &SpanId) -> String {
    let mut s = String::with_capacity(source.len() + 50);
    std::fmt::Write::write_fmt(&mut s, format_args!("{}", SpanProvenance(source, id)))
        .expect("a String");
    s
}

/// A span's provenance, displayed `<source>:<trace_id>/<span_id>` in lower-case hex (as
/// findings name it) without allocating.
#[derive(Debug, Clone, Copy)]
pub struct SpanProvenance<'a>(pub &'a str, pub &'a SpanId);

impl SpanProvenance<'_> {
    /// The text after the source, `:<trace_id>/<span_id>`, written into `out`: each byte's
    /// two digits copied from a table (a digit at a time, with its bounds checks, was 2.3% of
    /// the applier's samples under OTLP ingest with the archive on, which writes every
    /// event's provenance).
    pub fn position<'o>(&self, out: &'o mut [u8; 50]) -> &'o str {
        /// Each byte's two lower-case hex digits.
        const PAIRS: [[u8; 2]; 256] = {
            const DIGITS: &[u8; 16] = b"0123456789abcdef";
            let mut t = [[0u8; 2]; 256];
            let mut i = 0;
            while i < 256 {
                t[i] = [DIGITS[i >> 4], DIGITS[i & 15]];
                i += 1;
            }
            t
        };
        let (trace, span) = self.1.split_at(16);
        out[0] = b':';
        for (o, &b) in out[1..33].chunks_exact_mut(2).zip(trace) {
            o.copy_from_slice(&PAIRS[b as usize]);
        }
        out[33] = b'/';
        for (o, &b) in out[34..50].chunks_exact_mut(2).zip(span) {
            o.copy_from_slice(&PAIRS[b as usize]);
        }
        std::str::from_utf8(&out[..]).expect("ascii")
    }
}

impl std::fmt::Display for SpanProvenance<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)?;
        f.write_str(self.position(&mut [0u8; 50]))
    }
}

/// The position of a span's record: its span id's bytes.
pub(super) fn span_key(id: &SpanId) -> u64 {
    u64::from_le_bytes(id[16..].try_into().expect("8 bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The index finds every span kept, through its growth, a delivery kept again in place of
    /// the first, and a sweep that frees slots; spans never indexed are not found.
    #[test]
    fn the_span_index_finds_each_kept_delivery_through_growth_and_sweeps() {
        let id = |n: u32| {
            let mut id = [0u8; 24];
            id[..4].copy_from_slice(&n.to_le_bytes());
            id[20..].copy_from_slice(&n.wrapping_mul(7).to_le_bytes());
            id
        };
        let mut spans = Spans::default();
        let mut index = SpanIndex::default();
        let n = 5_000u32;
        let mut slot_of_span = Vec::new();
        for i in 0..n {
            let slot = spans.add(&id(i), 0);
            index.insert(
                &spans,
                KeptSpan {
                    slot,
                    prop: (i % 3) as u16,
                    scope: i,
                },
            );
            slot_of_span.push(slot);
        }
        assert_eq!(index.len, n as usize);
        let half_full = |index: &SpanIndex| {
            index.segments.iter().all(|s| 2 * s.len <= s.entries.len())
                && index.segments.iter().map(|s| s.len).sum::<usize>() == index.len
        };
        assert!(half_full(&index), "each segment at most half full");
        // Spread over the segments: none holds more than twice its share, so that none
        // grows by more than a small part of the index at once.
        let largest = index.segments.iter().map(|s| s.len).max().unwrap_or(0);
        assert!(
            largest <= 2 * (n as usize) / SEGMENTS,
            "largest segment {largest}"
        );
        // Every third span delivered again and kept in its new slot.
        for i in (0..n).step_by(3) {
            let slot = spans.add(&id(i), 1);
            index.insert(
                &spans,
                KeptSpan {
                    slot,
                    prop: 7,
                    scope: n + i,
                },
            );
            slot_of_span[i as usize] = slot;
        }
        assert_eq!(index.len, n as usize, "replaced, not added");
        for i in 0..n {
            let k = index.find(&spans, &id(i)).expect("indexed");
            assert_eq!(k.slot, slot_of_span[i as usize]);
            let want = if i % 3 == 0 {
                (7, n + i)
            } else {
                ((i % 3) as u16, i)
            };
            assert_eq!((k.prop, k.scope), want);
        }
        assert_eq!(index.find(&spans, &id(n + 1)), None);
        // A sweep keeps the even spans' slots alive.
        let mut alive = vec![false; spans.slots()];
        for i in (0..n).step_by(2) {
            alive[slot_of_span[i as usize] as usize] = true;
        }
        spans.sweep(&alive);
        index.retain_alive(&alive);
        assert!(half_full(&index), "after the sweep");
        assert_eq!(index.len, n.div_ceil(2) as usize);
        for i in 0..n {
            let found = index.find(&spans, &id(i)).map(|k| k.slot);
            assert_eq!(found, (i % 2 == 0).then(|| slot_of_span[i as usize]), "{i}");
        }
        // Freed slots are reused by new spans, which the old entries never name.
        for i in n..n + 100 {
            let slot = spans.add(&id(i), 0);
            assert_eq!(index.find(&spans, &id(i)), None);
            index.insert(
                &spans,
                KeptSpan {
                    slot,
                    prop: 1,
                    scope: i,
                },
            );
            assert_eq!(index.find(&spans, &id(i)).map(|k| k.slot), Some(slot));
        }
    }

    #[test]
    fn a_sweep_keeps_the_newest_attestations_behind_the_horizon() {
        let entry = |n: u8, ts: i64, kind: Kind| Unkept {
            id: [n; 24],
            hash: 0,
            ts,
            kind,
            prop: 0,
            reasons: Reasons::default(),
            conflicted: false,
            emitter: crate::rules::NONE,
            seq: 0,
            route: crate::rules::NONE,
        };
        let mut t = UnkeptSpans::default();
        // Behind the horizon (100): heartbeats at 1..=3, attestations at 4..=9 (two at 9);
        // within it, one of each.
        for n in 1..=3 {
            t.insert(entry(n, i64::from(n), Kind::Heartbeat));
        }
        for n in 4..=9 {
            t.insert(entry(n, i64::from(n), Kind::Attestation));
        }
        t.insert(entry(10, 9, Kind::Attestation));
        t.insert(entry(11, 100, Kind::Heartbeat));
        t.insert(entry(12, 150, Kind::Attestation));
        let horizon = 100;
        for n in 1..=3 {
            assert!(
                t.get_mut(&[n; 24], horizon).is_none(),
                "a heartbeat behind it"
            );
        }
        assert!(
            t.get_mut(&[4; 24], horizon).is_some(),
            "an attestation behind it"
        );
        // Nothing behind an older horizon: put off, nothing walked or dropped.
        t.sweep_keeping(1, 0);
        assert_eq!((t.len(), t.sweep_at), (12, 24));
        t.sweep_keeping(horizon, 3);
        let mut left: Vec<u8> = t.entries().map(|e| e.id[0]).collect();
        left.sort_unstable();
        assert_eq!(
            left,
            [8, 9, 10, 11, 12],
            "the three newest attestations behind it"
        );
        t.sweep_keeping(horizon, 0);
        assert_eq!(t.len(), 2);
        // The oldest left is at the horizon: a sweep there is put off; one past it drops it.
        assert_eq!(t.oldest, 100);
        t.sweep_keeping(101, 0);
        assert_eq!(t.len(), 1);
        assert!(t.get_mut(&[12; 24], 101).is_some());
    }

    #[test]
    fn ids_render_and_slots_are_reused_after_a_sweep() {
        let mut id = [0u8; 24];
        id[0] = 0x0a;
        id[23] = 0xff;
        assert_eq!(
            render("otlp", &id),
            "otlp:0a000000000000000000000000000000/00000000000000ff"
        );
        let mut t = Spans::default();
        let (a, b, c) = (t.add(&[1; 24], 0), t.add(&[2; 24], 0), t.add(&[3; 24], 0));
        assert_eq!((a, b, c), (0, 1, 2));
        t.sweep(&[true, false, false]);
        assert_eq!(t.len(), 1, "the trailing slots went");
        assert_eq!(t.get(0), Some(&[1; 24]));
        assert_eq!(t.add(&[4; 24], 0), 1);
    }
}
