//! A compact string interner: one byte arena, one offset per id, hash tables of ids.
//! About 13 bytes of overhead per distinct string beyond its bytes at a million strings (a
//! length byte, a 4-byte offset, and a 9-byte table slot at 7/8 to 7/16 load).

use hashbrown::HashTable;
use std::hash::BuildHasher;

/// Interned strings, each identified by a dense `u32`.
///
/// Each string sits in the arena behind its length (LEB128). The hash table holds the
/// string's position next to its id, so a lookup reads the table's control bytes (whose 7-bit
/// tag rules out most other strings), one entry and the bytes: three memory accesses, which
/// matter when a million scopes do not fit in cache.
///
/// The ids are split over [`SEGMENTS`] tables by bits of their hash that neither a table's
/// bucket (low bits) nor its tag (top bits) uses, each grown on its own at a staggered fill
/// ([`grows_at`]): one table, grown whole (every string hashed again), stopped its caller for
/// 438 ms at 3.7M ids and 729 ms at 7.3M (`examples/intern_growth.rs`) — a `serve` taking on
/// millions of scopes answered nothing meanwhile.
#[derive(Debug, Clone)]
pub struct Interner {
    arena: Vec<u8>,
    starts: Vec<u32>,
    tables: Box<[HashTable<Entry>; SEGMENTS]>,
    hasher: foldhash::fast::FixedState,
}

impl Default for Interner {
    fn default() -> Interner {
        Interner {
            arena: Vec::new(),
            starts: Vec::new(),
            tables: empty_tables(),
            hasher: foldhash::fast::FixedState::default(),
        }
    }
}

/// [`SEGMENTS`] empty tables (none allocates until it takes an entry).
pub(crate) fn empty_tables<T>() -> Box<[HashTable<T>; SEGMENTS]> {
    Box::new(std::array::from_fn(|_| HashTable::new()))
}

/// The tables an [`Interner`] is split over (a power of two).
pub(crate) const SEGMENTS: usize = 64;

/// The table of a hash: six bits from its middle (a table's bucket takes the low bits, its
/// tag the top seven). Also how the live assessor's split tables pick theirs.
#[inline(always)]
pub(crate) fn segment_of(hash: u64) -> usize {
    ((hash >> 32) as usize) & (SEGMENTS - 1)
}

/// Whether table `at`, holding `len` ids in room for `capacity`, grows before taking one
/// more: at 3/4 of its room for the first table up to all of it for the last, so that tables
/// filled alike by uniform hashes grow one after the other over a third more ids, not all
/// within a few calls (hashbrown grows a table when it is full).
#[inline(always)]
fn grows_at(at: usize, len: usize, capacity: usize) -> bool {
    len >= capacity * (3 * SEGMENTS + at) / (4 * SEGMENTS)
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    start: u32,
    id: u32,
}

/// The bytes of the string stored at `start`.
fn at(arena: &[u8], start: u32) -> &[u8] {
    let mut len = 0usize;
    let mut shift = 0;
    let mut i = start as usize;
    loop {
        let b = arena[i];
        i += 1;
        len |= usize::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            break;
        }
        shift += 7;
    }
    &arena[i..i + len]
}

/// The bucket count of a hash table of `capacity` (hashbrown's: a power of two, at least 8/7
/// of the capacity; capacity + 1 when small).
fn buckets(capacity: usize) -> usize {
    match capacity {
        0 => 0,
        c if c < 8 => c + 1,
        c => (c * 8 / 7).next_power_of_two(),
    }
}

/// Appends `s` behind its length (LEB128) to `arena`; where it starts.
fn append(arena: &mut Vec<u8>, s: &str) -> u32 {
    let start = u32::try_from(arena.len()).expect("interned strings fit in 4 GiB");
    reserve_for(arena, s.len() + 10);
    let mut len = s.len();
    loop {
        let low = (len & 0x7f) as u8;
        len >>= 7;
        if len == 0 {
            arena.push(low);
            break;
        }
        arena.push(low | 0x80);
    }
    arena.extend_from_slice(s.as_bytes());
    start
}

/// Grows `v` by a quarter once it is large (realloc of a block that size moves pages, not
/// bytes), by doubling before: the capacity never runs far ahead of the length.
pub(crate) fn reserve_for<T>(v: &mut Vec<T>, additional: usize) {
    if v.capacity() - v.len() >= additional {
        return;
    }
    const LARGE: usize = 1 << 20;
    let len = v.len();
    if len * std::mem::size_of::<T>() < LARGE {
        v.reserve(additional);
    } else {
        v.reserve_exact(additional.max(len / 4));
    }
}

impl Interner {
    /// An empty interner.
    pub fn new() -> Interner {
        Interner::default()
    }

    /// Room for `n` more strings of `bytes` bytes in all (their tables' share of `n` each,
    /// and a margin).
    pub fn reserve(&mut self, n: usize, bytes: usize) {
        self.arena.reserve_exact(bytes);
        self.starts.reserve_exact(n);
        let Interner {
            arena,
            tables,
            hasher,
            ..
        } = self;
        let share = n.div_ceil(SEGMENTS) + n.div_ceil(4 * SEGMENTS);
        for table in tables.iter_mut() {
            table.reserve(share, |e| hasher.hash_one(at(arena, e.start)));
        }
    }

    /// The id of `s`, adding it when new.
    pub fn intern(&mut self, s: &str) -> u32 {
        let hash = self.hasher.hash_one(s.as_bytes());
        let Interner {
            arena,
            starts,
            tables,
            hasher,
        } = self;
        let seg = segment_of(hash);
        let table = &mut tables[seg];
        if let Some(e) = table.find(hash, |e| at(arena, e.start) == s.as_bytes()) {
            return e.id;
        }
        let id = u32::try_from(starts.len()).expect("fewer than 2^32 distinct strings");
        let start = append(arena, s);
        reserve_for(starts, 1);
        starts.push(start);
        let rehash = |e: &Entry| hasher.hash_one(at(arena, e.start));
        if grows_at(seg, table.len(), table.capacity()) {
            table.reserve(table.capacity().max(1), rehash);
        }
        table.insert_unique(hash, Entry { start, id }, rehash);
        id
    }

    /// The id of `s` if interned.
    pub fn get(&self, s: &str) -> Option<u32> {
        self.get_hashed(s, self.hash(s))
    }

    /// The hash [`Interner::get`] looks `s` up by.
    pub fn hash(&self, s: &str) -> u64 {
        self.hasher.hash_one(s.as_bytes())
    }

    /// [`Interner::get`] of `s`, whose [`Interner::hash`] is `hash`.
    pub fn get_hashed(&self, s: &str, hash: u64) -> Option<u32> {
        self.tables[segment_of(hash)]
            .find(hash, |e| at(&self.arena, e.start) == s.as_bytes())
            .map(|e| e.id)
    }

    /// Reads, changing nothing, one level of what a lookup of a string hashing to `hash`
    /// reads: 0, the table's control bytes; 1, the entries whose tag matches; 2, their
    /// strings' first bytes. A lookup chains the three, a cache miss each at a million
    /// strings; called for many strings a level at a time, their misses overlap. No answer
    /// depends on it (pass the value to [`std::hint::black_box`]).
    pub fn warm_level(&self, hash: u64, level: u8) -> u32 {
        let mut seen = 0u32;
        let table = &self.tables[segment_of(hash)];
        let found = match level {
            0 => table.find(hash, |_| false),
            1 => table.find(hash, |e| {
                seen ^= e.start;
                false
            }),
            _ => table.find(hash, |e| {
                seen ^= u32::from(self.arena.get(e.start as usize).copied().unwrap_or(0));
                false
            }),
        };
        seen ^ u32::from(found.is_some())
    }

    /// The string of an id.
    pub fn resolve(&self, id: u32) -> &str {
        std::str::from_utf8(at(&self.arena, self.starts[id as usize])).expect("interned text")
    }

    /// Number of distinct strings.
    pub fn len(&self) -> usize {
        self.starts.len()
    }

    /// Whether nothing is interned.
    pub fn is_empty(&self) -> bool {
        self.starts.is_empty()
    }

    /// Heap bytes held: the arena and offsets as far as they are written (their spare
    /// capacity is not touched, so not resident), the whole hash tables (their slots are
    /// written all over).
    pub fn heap_bytes(&self) -> usize {
        let buckets: usize = self.tables.iter().map(|t| buckets(t.capacity())).sum();
        self.arena.len() + self.starts.len() * 4 + buckets * (std::mem::size_of::<Entry>() + 1)
    }
}

/// A front of an [`Interner`] for names that repeat: routes, holders and emitters, a few dozen
/// values over millions of events. A name of up to 24 bytes is told by its length and three
/// 8-byte words that cover it, kept with its id in one of 1,024 slots (32 KiB) picked by a hash
/// of those words: a name seen before costs a few loads and compares, not a hash of its bytes,
/// a probe of the table and a `memcmp` (`check` interned three names an event at ~145
/// instructions each, 11% of its instructions). Longer names, and those whose slot holds
/// another, go to the interner (and take the slot): with 256 slots, a few of fifty holders
/// shared one and missed whenever the two alternated (6.6% of `check`'s lookups; 1,024 slots:
/// decoding 3% faster). Tied to one interner: its ids are that interner's, which never change.
#[derive(Clone)]
pub struct NameCache {
    slots: Box<[CacheSlot; CACHE_SLOTS]>,
}

const CACHE_BITS: u32 = 10;
const CACHE_SLOTS: usize = 1 << CACHE_BITS;

#[derive(Debug, Clone, Copy)]
struct CacheSlot {
    words: [u64; 3],
    /// The name's length, `u32::MAX` in an empty slot.
    len: u32,
    id: u32,
}

impl Default for NameCache {
    fn default() -> NameCache {
        NameCache {
            slots: Box::new(
                [CacheSlot {
                    words: [0; 3],
                    len: u32::MAX,
                    id: 0,
                }; CACHE_SLOTS],
            ),
        }
    }
}

impl std::fmt::Debug for NameCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let used = self.slots.iter().filter(|s| s.len != u32::MAX).count();
        f.debug_struct("NameCache").field("used", &used).finish()
    }
}

/// Three words that, with the length, tell apart every string of up to 24 bytes (their
/// windows cover all its bytes); `None` for a longer one.
#[inline]
fn name_words(b: &[u8]) -> Option<[u64; 3]> {
    let n = b.len();
    let w8 = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("eight bytes"));
    let w4 = |i: usize| u64::from(u32::from_le_bytes(b[i..i + 4].try_into().expect("four")));
    match n {
        25.. => None,
        8.. => Some([w8(0), w8((n - 8).min(8)), w8(n - 8)]),
        4.. => Some([w4(0), w4(n - 4), 0]),
        _ => Some([
            b.iter()
                .enumerate()
                .fold(0, |x, (k, &c)| x | u64::from(c) << (8 * k)),
            0,
            0,
        ]),
    }
}

impl NameCache {
    /// An empty cache.
    pub fn new() -> NameCache {
        NameCache::default()
    }

    /// Forgets every name: for ids that were freed, or an interner that was cleared.
    pub fn clear(&mut self) {
        for slot in self.slots.iter_mut() {
            slot.len = u32::MAX;
        }
    }

    /// `strings.intern(s)`, from the cache when `s` is in it. `strings` must be the interner
    /// every earlier call was given.
    #[inline]
    pub fn intern(&mut self, strings: &mut Interner, s: &str) -> u32 {
        if let Some(id) = self.get(s) {
            return id;
        }
        let id = strings.intern(s);
        self.put(s, id);
        id
    }

    /// The id cached for `s`, if any.
    #[inline]
    pub fn get(&self, s: &str) -> Option<u32> {
        let words = name_words(s.as_bytes())?;
        let slot = &self.slots[slot_of(&words, s.len())];
        // Word by word in registers: an array compare loads the words back from the stack as
        // 16 bytes, which the three 8-byte stores that made them cannot forward (perf: the
        // compare was most of the cache's samples, 5% of `check`'s).
        let differ =
            (slot.words[0] ^ words[0]) | (slot.words[1] ^ words[1]) | (slot.words[2] ^ words[2]);
        (slot.len == s.len() as u32 && differ == 0).then_some(slot.id)
    }

    /// Caches `id` for `s` (a name over 24 bytes is not cached), in place of the slot's name.
    #[inline]
    pub fn put(&mut self, s: &str, id: u32) {
        if let Some(words) = name_words(s.as_bytes()) {
            let len = s.len() as u32;
            self.slots[slot_of(&words, s.len())] = CacheSlot { words, len, id };
        }
    }
}

/// The slot of a name of length `len` and `words`.
#[inline]
fn slot_of(words: &[u64; 3], len: usize) -> usize {
    let mix = (words[0] ^ words[1].rotate_left(21) ^ words[2].rotate_left(42))
        .wrapping_add(len as u64)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (mix >> (64 - CACHE_BITS)) as usize
}

/// An interner built from strings known to be distinct (a checkpoint's scope ids), in id
/// order: the strings are appended first, then the table is filled in the order of the
/// buckets the hashes start at, so that its slots are written front to back. Interning ten
/// million ids one by one on a restore missed the cache (and the TLB) on every table access:
/// 1.6–2.7 µs an id here, most of a restart at ten million scopes.
#[derive(Debug, Default)]
pub struct Bulk {
    arena: Vec<u8>,
    starts: Vec<u32>,
}

/// A string given twice to [`Bulk`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Duplicate(pub String);

impl Bulk {
    /// Room for `n` strings of `bytes` bytes in all.
    pub fn with_capacity(n: usize, bytes: usize) -> Bulk {
        Bulk {
            arena: Vec::with_capacity(bytes + n),
            starts: Vec::with_capacity(n),
        }
    }

    /// Appends `s`; its id is the number of strings appended before it.
    pub fn push(&mut self, s: &str) {
        u32::try_from(self.starts.len()).expect("fewer than 2^32 distinct strings");
        let start = append(&mut self.arena, s);
        reserve_for(&mut self.starts, 1);
        self.starts.push(start);
    }

    /// The interner, each string's id its position; the first string appended twice, if any.
    pub fn finish(self) -> Result<Interner, Duplicate> {
        let Bulk { arena, starts } = self;
        let hasher = foldhash::fast::FixedState::default();
        let hashed: Vec<(u64, Entry)> = starts
            .iter()
            .enumerate()
            .map(|(id, &start)| {
                let entry = Entry {
                    start,
                    id: id as u32,
                };
                (hasher.hash_one(at(&arena, start)), entry)
            })
            .collect();
        // One counting-sort pass by table, then each table's ids sorted by the bucket their
        // probe starts at (a table is a sixty-fourth of the whole: it stays in cache while it
        // is filled front to back) and hash: equal strings, whose hashes are equal, end up
        // side by side.
        let mut next = vec![0usize; SEGMENTS + 1];
        for &(hash, _) in &hashed {
            next[segment_of(hash) + 1] += 1;
        }
        for g in 1..next.len() {
            next[g] += next[g - 1];
        }
        let bounds = next.clone();
        let mut order = vec![(0u64, Entry { start: 0, id: 0 }); hashed.len()];
        for &(hash, entry) in &hashed {
            let slot = &mut next[segment_of(hash)];
            order[*slot] = (hash, entry);
            *slot += 1;
        }
        drop(hashed);
        let mut tables = empty_tables();
        for (seg, table) in tables.iter_mut().enumerate() {
            let ids = &mut order[bounds[seg]..bounds[seg + 1]];
            *table = HashTable::with_capacity(ids.len());
            // A hash's probe starts at `hash & mask`.
            let mask = buckets(table.capacity()).saturating_sub(1) as u64;
            ids.sort_unstable_by_key(|&(hash, _)| (hash & mask, hash));
            for run in ids.chunk_by(|a, b| a.0 == b.0).filter(|r| r.len() > 1) {
                for (i, (_, a)) in run.iter().enumerate() {
                    let text = at(&arena, a.start);
                    if run[i + 1..]
                        .iter()
                        .any(|(_, b)| at(&arena, b.start) == text)
                    {
                        return Err(Duplicate(String::from_utf8_lossy(text).into_owned()));
                    }
                }
            }
            for &(hash, entry) in ids.iter() {
                table.insert_unique(hash, entry, |e| hasher.hash_one(at(&arena, e.start)));
            }
        }
        Ok(Interner {
            arena,
            starts,
            tables,
            hasher,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 300, ..Default::default() })]
        #[test]
        fn the_name_cache_gives_the_interners_ids(
            names in proptest::collection::vec("[ab\\x00\\u{e9}-]{0,30}", 1..400),
            seed in proptest::prelude::any::<u64>(),
        ) {
            // Few letters: many names differ in one byte, some only in a middle one.
            let (mut cached, mut cache, mut plain) = (Interner::new(), NameCache::new(), Interner::new());
            let mut x = seed | 1;
            for _ in 0..4 * names.len() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let s = &names[(x % names.len() as u64) as usize];
                proptest::prop_assert_eq!(cache.intern(&mut cached, s), plain.intern(s), "{:?}", s);
            }
            proptest::prop_assert_eq!(cached.len(), plain.len());
        }
    }

    #[test]
    fn name_words_tell_apart_names_of_one_length() {
        // Every length up to the cache's limit and over it, each byte changed in turn.
        for n in 0..=30usize {
            let base: Vec<u8> = (0..n as u8).map(|i| b'a' + i % 26).collect();
            let w = name_words(&base);
            assert_eq!(w.is_some(), n <= 24, "{n}");
            for k in 0..n {
                let mut other = base.clone();
                other[k] = b'-';
                if n <= 24 {
                    assert_ne!(name_words(&other), w, "length {n}, byte {k}");
                }
            }
        }
    }

    #[test]
    fn a_bulk_built_interner_is_the_one_interning_gives() {
        for n in [0usize, 1, 3, 7, 8, 9, 100, 5000] {
            let strings: Vec<String> = (0..n).map(|i| format!("order-{i:010}")).collect();
            let mut bulk = Bulk::with_capacity(n, n * 16);
            let mut one_by_one = Interner::new();
            for s in &strings {
                bulk.push(s);
                one_by_one.intern(s);
            }
            let mut bulk = bulk.finish().unwrap();
            assert_eq!(bulk.len(), n);
            for (id, s) in strings.iter().enumerate() {
                assert_eq!(bulk.get(s), Some(id as u32), "{s}");
                assert_eq!(bulk.resolve(id as u32), s);
            }
            assert_eq!(bulk.get("order-x"), None);
            // Its tables sized once for what they hold: never larger than those grown one id
            // at a time (which may have grown early: `grows_at`).
            assert!(bulk.heap_bytes() <= one_by_one.heap_bytes(), "{n}");
            // It goes on as any interner: known strings keep their ids, new ones come next.
            assert_eq!(bulk.intern("new"), n as u32);
            if n > 0 {
                assert_eq!(bulk.intern(&strings[n - 1]), n as u32 - 1);
            }
        }
    }

    #[test]
    fn a_string_given_twice_to_bulk_is_named() {
        let mut bulk = Bulk::default();
        for s in ["a", "b", "c", "b", "d"] {
            bulk.push(s);
        }
        assert_eq!(bulk.finish().unwrap_err(), Duplicate("b".into()));
        let mut bulk = Bulk::default();
        for s in ["", "x", ""] {
            bulk.push(s);
        }
        assert_eq!(bulk.finish().unwrap_err(), Duplicate(String::new()));
    }

    #[test]
    fn interns_and_resolves() {
        let mut i = Interner::new();
        let a = i.intern("order-1");
        let b = i.intern("order-2");
        assert_ne!(a, b);
        assert_eq!(i.intern("order-1"), a);
        assert_eq!(i.resolve(b), "order-2");
        assert_eq!(i.get("order-2"), Some(b));
        assert_eq!(i.get("nope"), None);
        for n in 0..10_000 {
            i.intern(&format!("s{n}"));
        }
        assert_eq!(i.get("order-1"), Some(a));
        assert_eq!(i.len(), 10_002);
    }

    #[test]
    fn strings_of_any_length_keep_their_bytes() {
        let mut i = Interner::new();
        let long: Vec<String> = [0, 1, 127, 128, 300, 16_384, 70_000]
            .iter()
            .map(|&n| "é".repeat(n / 2) + &"x".repeat(n % 2))
            .collect();
        let ids: Vec<u32> = long.iter().map(|s| i.intern(s)).collect();
        i.reserve(100, 1000);
        for (s, &id) in long.iter().zip(&ids) {
            assert_eq!(i.resolve(id), s);
            assert_eq!(i.get(s), Some(id));
            assert_eq!(i.intern(s), id);
        }
        assert_eq!(i.len(), long.len());
        assert!(i.heap_bytes() >= long.iter().map(String::len).sum::<usize>());
    }
}
