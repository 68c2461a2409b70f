//! What reading keeps of an event, and [`Batch`]es of events decoded off the caller's thread.

use super::ahead::{Ahead, Populate};
use crate::contract::Contract;
use crate::event::{Event, Kind};
use crate::intern::{Interner, NameCache};
use crate::rules::{self, Malformed, NONE, Rec, UNATTRIBUTED};
use crate::time::EventTime;

/// A source of events (a file, stdin): its index in [`History`](super::History).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SourceId(pub u32);

/// Counts every reader keeps: valid events, unattributed ones, the greatest valid event time.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Tally {
    pub(super) valid: u64,
    pub(super) unattributed: u64,
    pub(super) max_valid_ts: Option<i64>,
}

impl Tally {
    pub(super) fn add(&mut self, other: Tally) {
        self.valid += other.valid;
        self.unattributed += other.unattributed;
        self.max_valid_ts = later(self.max_valid_ts, other.max_valid_ts);
    }
}

pub(super) fn later(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

/// The scope hash as kept: the top 96 bits of XXH3's 128-bit variant, most significant word
/// first (12 bytes; all of it was 16 and nothing read the low 32 bits: see
/// `History::assess_events` for the odds of two scopes sharing 96 bits).
fn scope_hash(s: &str) -> [u32; 3] {
    let h = xxhash_rust::xxh3::xxh3_128(s.as_bytes());
    [(h >> 96) as u32, (h >> 64) as u32, (h >> 32) as u32]
}

/// The scope of every scoped event, in reading order (a record's `scope` indexes it): the names
/// in one arena, each with its hash, which is what tells scopes apart.
#[derive(Debug, Default)]
pub(super) struct ScopeTexts {
    hashes: Vec<[u32; 3]>,
    text: String,
    /// Where each name ends in `text`, its low 32 bits; `wraps` holds the high ones.
    ends: Vec<u32>,
    /// For each multiple k of 2^32 that `text` reached, the first name ending at or past it:
    /// a name's end is `ends[i]` plus 2^32 for each entry at or before `i` (4 bytes a scope
    /// instead of 8, for a text that rarely passes 4 GiB).
    wraps: Vec<u32>,
    /// How far `hashes`, `ends` and `text` were made resident ([`ScopeTexts::append`]).
    ahead: [Ahead; 3],
}

impl ScopeTexts {
    /// Room for `events` names, their text at 16 bytes a name (see [`ScopeTexts::reserve`]).
    pub(super) fn with_capacity(events: usize) -> ScopeTexts {
        ScopeTexts {
            hashes: Vec::with_capacity(events),
            text: String::with_capacity(events.saturating_mul(16)),
            ends: Vec::with_capacity(events),
            wraps: Vec::new(),
            ahead: Default::default(),
        }
    }

    pub(super) fn push(&mut self, s: &str) -> u32 {
        let i = u32::try_from(self.hashes.len())
            .ok()
            .filter(|&i| i < NONE)
            .expect("fewer than 2^32 - 1 scoped events");
        self.hashes.push(scope_hash(s));
        self.text.push_str(s);
        self.push_end(i, self.text.len() as u64);
        i
    }

    /// Notes that name `i` ends at `end`, the next to be noted.
    #[inline(always)]
    fn push_end(&mut self, i: u32, end: u64) {
        while end >> 32 > self.wraps.len() as u64 {
            self.wraps.push(i);
        }
        self.ends.push(end as u32);
    }

    /// Scope `i`'s hash: its 96 bits, as the top of a `u128` (the low 32 bits zero).
    #[inline(always)]
    pub(super) fn hash(&self, i: u32) -> u128 {
        let [a, b, c] = self.hashes[i as usize];
        (u128::from(a) << 96) | (u128::from(b) << 64) | (u128::from(c) << 32)
    }

    /// The hash of a record's scope, which tells scopes apart (see `History::assess_events`).
    pub(super) fn key(&self, r: &Rec) -> Option<u128> {
        r.has_scope().then(|| self.hash(r.scope))
    }

    /// Room for `n` more, and for their text at 16 bytes a scope (an address space reserved,
    /// touched only as it fills: no doubling copies of a text of tens of megabytes, each
    /// faulting in a new buffer).
    pub(super) fn reserve(&mut self, n: usize) {
        self.hashes.reserve(n);
        self.ends.reserve(n);
        self.text.reserve(n.saturating_mul(16));
    }

    /// Where name `i` ends in `text`.
    fn end(&self, i: usize) -> usize {
        let high = self.wraps.partition_point(|&w| w as usize <= i) as u64;
        ((high << 32) | u64::from(self.ends[i])) as usize
    }

    pub(super) fn get(&self, i: u32) -> &str {
        let i = i as usize;
        let start = if i == 0 { 0 } else { self.end(i - 1) };
        &self.text[start..self.end(i)]
    }

    /// Appends `other`'s strings, this one's pages made resident ahead through `hook` (see
    /// `ahead`); returns the index its first one gets.
    pub(super) fn append(&mut self, other: ScopeTexts, hook: Option<Populate>) -> u32 {
        let base = self.hashes.len() as u32;
        u32::try_from(self.hashes.len() + other.hashes.len())
            .ok()
            .filter(|&n| n < NONE)
            .expect("fewer than 2^32 - 1 scoped events");
        let offset = self.text.len() as u64;
        let [hashes, ends, text] = &mut self.ahead;
        let cap = self.hashes.capacity();
        hashes.before_append(hook, (&self.hashes, cap), &other.hashes);
        ends.before_append(hook, (&self.ends, self.ends.capacity()), &other.ends);
        let t = (self.text.as_bytes(), self.text.capacity());
        text.before_append(hook, t, other.text.as_bytes());
        self.hashes.extend_from_slice(&other.hashes);
        self.text.push_str(&other.text);
        self.append_ends(base, offset, &other);
        base
    }

    /// Notes the ends of `other`'s names, the first of them name `base`, its text appended at
    /// `offset`.
    fn append_ends(&mut self, base: u32, offset: u64, other: &ScopeTexts) {
        let last = other
            .ends
            .len()
            .checked_sub(1)
            .map_or(0, |j| other.end(j) as u64);
        if offset >> 32 == (offset + last) >> 32 {
            // Within one 4 GiB stretch (every append but one in 4 GiB): low words only.
            let low = offset as u32;
            self.ends.extend(other.ends.iter().map(|&e| low + e));
        } else {
            for j in 0..other.ends.len() {
                self.push_end(base + j as u32, offset + other.end(j) as u64);
            }
        }
    }

    /// `(base, len, cap)` of `hashes`, `ends` and `text`, in bytes (tests).
    #[cfg(test)]
    pub(super) fn extents(&self) -> [(usize, usize, usize); 3] {
        [
            super::ahead::extent(&self.hashes, self.hashes.capacity()),
            super::ahead::extent(&self.ends, self.ends.capacity()),
            super::ahead::extent(self.text.as_bytes(), self.text.capacity()),
        ]
    }

    pub(super) fn heap_bytes(&self) -> usize {
        self.hashes.capacity() * std::mem::size_of::<[u32; 3]>()
            + self.text.capacity()
            + (self.ends.capacity() + self.wraps.capacity()) * 4
    }
}

/// Admits a decoded event ([`rules::admit`]) into a record with its names interned (through
/// the cache in front of the interner), counted in `tally`: `Ok(None)` when it is valid but
/// not kept (unattributed, without an (emitter, seq) to track). Always inlined: out of line,
/// its 72-byte record went back through a `Result` (decoding a 2.1M-event file's chunks on
/// one thread 0.244 -> 0.240 s, best of 9, four alternated rounds).
#[inline(always)]
pub(super) fn admit(
    contract: &Contract,
    ev: &Event<'_>,
    source: u32,
    position: u64,
    tally: &mut Tally,
    (strings, names): (&mut Interner, &mut NameCache),
    scopes: &mut ScopeTexts,
) -> Result<Option<Rec>, Malformed> {
    let prop = rules::admit(contract, ev, None)?;
    tally.valid += 1;
    // Attestations move no watermark (SPEC §10): nor what a malformed event is placed by.
    if ev.kind != Kind::Attestation {
        tally.max_valid_ts = later(tally.max_valid_ts, Some(ev.ts.0));
    }
    if prop == UNATTRIBUTED {
        tally.unattributed += 1;
        if !rules::keeps_unattributed(ev) {
            return Ok(None);
        }
    }
    let mut r = Rec::of(ev, prop, source, position);
    r.scope = ev.scope.map_or(NONE, |s| scopes.push(s));
    let mut name = |s: Option<&str>| s.map_or(NONE, |s| names.intern(strings, s));
    r.holder = name(ev.holder);
    r.route = name(ev.route);
    r.emitter = name(ev.emitter);
    Ok(Some(r))
}

/// What reading saw of one emitter's seqs. While they arrive increasing, which is the usual
/// case, this is all `finish` needs to know of the emitter: it has no duplicate by seq and its
/// gaps are listed here, so only emitters whose seqs went back are sorted by seq.
#[derive(Debug, Clone, Default)]
pub(super) struct SeqTrack {
    pub(super) events: u64,
    pub(super) first: u64,
    pub(super) last: u64,
    last_idx: u32,
    /// Every seq was greater than the one read before it.
    pub(super) increasing: bool,
    /// While increasing: the record indices on either side of each gap.
    pub(super) gaps: Vec<(u32, u32)>,
    /// Properties of the events (`UNATTRIBUTED` included).
    pub(super) props: Vec<u16>,
}

impl SeqTrack {
    /// Notes record `idx`, read after every other one noted.
    pub(super) fn note(tracks: &mut Vec<SeqTrack>, r: &Rec, idx: u32) {
        let Some((e, _)) = r.seq_key() else {
            return;
        };
        let e = e as usize;
        if e >= tracks.len() {
            tracks.resize_with(e + 1, Default::default);
        }
        let t = &mut tracks[e];
        if t.events == 0 {
            t.first = r.seq;
            t.increasing = true;
        } else if t.increasing {
            if r.seq <= t.last {
                t.increasing = false;
                t.gaps = Vec::new();
            } else if r.seq > t.last + 1 {
                t.gaps.push((t.last_idx, idx));
            }
        }
        t.events += 1;
        t.last = r.seq;
        t.last_idx = idx;
        if !t.props.contains(&r.prop) {
            t.props.push(r.prop);
        }
    }
}

#[derive(Debug)]
pub(super) struct BatchMalformed {
    pub(super) position: u64,
    pub(super) ts: Option<EventTime>,
    /// The greatest valid event time of the batch before it.
    pub(super) prior: Option<i64>,
    pub(super) message: String,
}

/// Events of one source decoded off the caller's thread (a chunk of a file, by a worker), for
/// [`History::append`](super::History::append), which adds them exactly as if each had been pushed in order. Building
/// a batch does the per-event work (validation, string and scope keys) so that appending is
/// little more than a copy.
#[derive(Debug)]
pub struct Batch {
    pub(super) source: SourceId,
    pub(super) recs: Vec<Rec>,
    pub(super) strings: Interner,
    /// The front of `strings` for names.
    pub(super) names: NameCache,
    pub(super) scopes: ScopeTexts,
    pub(super) malformed: Vec<BatchMalformed>,
    pub(super) tally: Tally,
    /// The attestations among `recs`, by record index.
    pub(super) attests: Vec<(u32, super::attest::AttestRec)>,
    /// Added to every position when the batch is appended ([`Batch::shift_positions`]).
    pub(super) shift: u64,
}

impl Batch {
    /// An empty batch of events read from `source`.
    pub fn new(source: SourceId) -> Batch {
        Batch::with_capacity(source, 0)
    }

    /// An empty batch with room for `events` events.
    pub fn with_capacity(source: SourceId, events: usize) -> Batch {
        Batch {
            source,
            recs: Vec::with_capacity(events),
            strings: Interner::new(),
            names: NameCache::new(),
            // Scope texts at 16 bytes a scope (as `ScopeTexts::reserve`): grown by doubling
            // from nothing, they were ~800 reallocs and copies over 210k events.
            scopes: ScopeTexts::with_capacity(events),
            malformed: Vec::new(),
            tally: Tally::default(),
            attests: Vec::new(),
            shift: 0,
        }
    }

    /// Adds `by` to the position of each of the batch's events, pushed or to be pushed, as
    /// it is appended: a reader can number a chunk's lines from 1 before it knows the line
    /// the chunk starts at.
    pub fn shift_positions(&mut self, by: u64) {
        self.shift += by;
    }

    /// Adds a decoded event read at `position`, checked against `contract` (the history's).
    pub fn push(&mut self, contract: &Contract, ev: &Event<'_>, position: u64) {
        match admit(
            contract,
            ev,
            self.source.0,
            position,
            &mut self.tally,
            (&mut self.strings, &mut self.names),
            &mut self.scopes,
        ) {
            Ok(Some(rec)) => super::attest::keep(&mut self.recs, &mut self.attests, rec, ev),
            Ok(None) => {}
            Err(why) => self.push_malformed(position, Some(ev.ts), why.to_string()),
        }
    }

    /// Adds a malformed event (see [`History::push_malformed`](super::History::push_malformed)).
    pub fn push_malformed(&mut self, position: u64, ts: Option<EventTime>, message: String) {
        self.malformed.push(BatchMalformed {
            position,
            ts,
            prior: self.tally.max_valid_ts,
            message,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::ScopeTexts;

    /// Names of `lens` bytes noted from `start` (no text: only where each ends), and the ends
    /// a 64-bit array would hold.
    fn ends_from(t: &mut ScopeTexts, start: u64, lens: &[u64]) -> Vec<u64> {
        let mut end = start;
        lens.iter()
            .map(|&n| {
                end += n;
                t.push_end(t.ends.len() as u32, end);
                end
            })
            .collect()
    }

    proptest::proptest! {
        /// Ends kept in 32 bits and the 4 GiB marks passed give back the 64-bit ends, names
        /// noted one by one or appended a batch at a time, across any number of marks.
        #[test]
        fn ends_past_4_gib_are_read_back(
            batches in proptest::collection::vec(
                proptest::collection::vec(
                    proptest::prop_oneof![0u64..64, 1u64 << 30..3u64 << 31],
                    0..6,
                ),
                1..8,
            ),
            start in proptest::prop_oneof![0u64..16, (1u64 << 32) - 40..(1u64 << 32)],
        ) {
            let mut whole = ScopeTexts::default();
            let mut want = ends_from(&mut whole, 0, &[start]);
            for lens in &batches {
                let mut batch = ScopeTexts::default();
                let rel = ends_from(&mut batch, 0, lens);
                let offset = *want.last().expect("one end");
                let base = whole.ends.len() as u32;
                whole.append_ends(base, offset, &batch);
                want.extend(rel.iter().map(|e| e + offset));
            }
            let got: Vec<u64> = (0..want.len()).map(|i| whole.end(i) as u64).collect();
            proptest::prop_assert_eq!(got, want);
        }
    }

    #[test]
    fn hashes_keep_the_top_96_bits() {
        let mut t = ScopeTexts::default();
        let i = t.push("order-1");
        let full = xxhash_rust::xxh3::xxh3_128(b"order-1");
        assert_eq!(t.hash(i), full & !u128::from(u32::MAX));
        assert_eq!(t.get(i), "order-1");
        let j = t.push("order-2");
        assert_ne!(t.hash(j), t.hash(i));
    }
}
