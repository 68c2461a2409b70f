//! A compact string interner: one byte arena, one offset table, one hash table of ids.
//! About 13 bytes of overhead per distinct string beyond its bytes.

use hashbrown::HashTable;
use std::hash::BuildHasher;

/// Interned strings, each identified by a dense `u32`.
///
/// The hash table holds the string's position and a 32-bit tag of its hash next to its id, so
/// a lookup reads the table's control bytes, one entry and (on a tag match) the bytes: three
/// memory accesses, which matter when a million scopes do not fit in cache.
#[derive(Debug, Default, Clone)]
pub struct Interner {
    arena: String,
    spans: Vec<(u32, u32)>,
    table: HashTable<Entry>,
    hasher: foldhash::fast::FixedState,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    start: u32,
    len: u32,
    tag: u32,
    id: u32,
}

impl Interner {
    /// An empty interner.
    pub fn new() -> Interner {
        Interner::default()
    }

    /// The id of `s`, adding it when new.
    pub fn intern(&mut self, s: &str) -> u32 {
        let hash = self.hasher.hash_one(s);
        let tag = (hash >> 32) as u32;
        let Interner {
            arena,
            spans,
            table,
            hasher,
        } = self;
        let found = table.find(hash, |e| {
            e.tag == tag
                && e.len as usize == s.len()
                && &arena[e.start as usize..(e.start + e.len) as usize] == s
        });
        if let Some(e) = found {
            return e.id;
        }
        let id = u32::try_from(spans.len()).expect("fewer than 2^32 distinct strings");
        let start = u32::try_from(arena.len()).expect("interned strings fit in 4 GiB");
        arena.push_str(s);
        spans.push((start, s.len() as u32));
        let entry = Entry {
            start,
            len: s.len() as u32,
            tag,
            id,
        };
        table.insert_unique(hash, entry, |e| {
            hasher.hash_one(&arena[e.start as usize..(e.start + e.len) as usize])
        });
        id
    }

    /// The id of `s` if interned.
    pub fn get(&self, s: &str) -> Option<u32> {
        let hash = self.hasher.hash_one(s);
        let tag = (hash >> 32) as u32;
        self.table
            .find(hash, |e| {
                e.tag == tag && &self.arena[e.start as usize..(e.start + e.len) as usize] == s
            })
            .map(|e| e.id)
    }

    /// The string of an id.
    pub fn resolve(&self, id: u32) -> &str {
        let (start, len) = self.spans[id as usize];
        &self.arena[start as usize..(start + len) as usize]
    }

    /// Number of distinct strings.
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    /// Whether nothing is interned.
    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// Heap bytes held.
    pub fn heap_bytes(&self) -> usize {
        self.arena.capacity()
            + self.spans.capacity() * 8
            + self.table.capacity() * (std::mem::size_of::<Entry>() + 1)
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
}
