//! A compact string interner: one byte arena, one offset per id, one hash table of ids.
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
#[derive(Debug, Default, Clone)]
pub struct Interner {
    arena: Vec<u8>,
    starts: Vec<u32>,
    table: HashTable<Entry>,
    hasher: foldhash::fast::FixedState,
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

    /// Room for `n` more strings of `bytes` bytes in all, without growing on the way.
    pub fn reserve(&mut self, n: usize, bytes: usize) {
        self.arena.reserve_exact(bytes);
        self.starts.reserve_exact(n);
        let Interner {
            arena,
            table,
            hasher,
            ..
        } = self;
        table.reserve(n, |e| hasher.hash_one(at(arena, e.start)));
    }

    /// The id of `s`, adding it when new.
    pub fn intern(&mut self, s: &str) -> u32 {
        let hash = self.hasher.hash_one(s.as_bytes());
        let Interner {
            arena,
            starts,
            table,
            hasher,
        } = self;
        if let Some(e) = table.find(hash, |e| at(arena, e.start) == s.as_bytes()) {
            return e.id;
        }
        let id = u32::try_from(starts.len()).expect("fewer than 2^32 distinct strings");
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
        reserve_for(starts, 1);
        starts.push(start);
        table.insert_unique(hash, Entry { start, id }, |e| {
            hasher.hash_one(at(arena, e.start))
        });
        id
    }

    /// The id of `s` if interned.
    pub fn get(&self, s: &str) -> Option<u32> {
        let hash = self.hasher.hash_one(s.as_bytes());
        self.table
            .find(hash, |e| at(&self.arena, e.start) == s.as_bytes())
            .map(|e| e.id)
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
    /// capacity is not touched, so not resident), the whole hash table (its slots are written
    /// all over).
    pub fn heap_bytes(&self) -> usize {
        let buckets = match self.table.capacity() {
            0 => 0,
            c if c < 8 => c + 1,
            c => (c * 8 / 7).next_power_of_two(),
        };
        self.arena.len() + self.starts.len() * 4 + buckets * (std::mem::size_of::<Entry>() + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
