//! A compact string interner: one byte arena, one offset table, one hash table of ids.
//! About 13 bytes of overhead per distinct string beyond its bytes.

use hashbrown::HashTable;
use std::hash::BuildHasher;

/// Interned strings, each identified by a dense `u32`.
#[derive(Debug, Default, Clone)]
pub struct Interner {
    arena: String,
    spans: Vec<(u32, u32)>,
    table: HashTable<u32>,
    hasher: foldhash::fast::FixedState,
}

impl Interner {
    /// An empty interner.
    pub fn new() -> Interner {
        Interner::default()
    }

    /// The id of `s`, adding it when new.
    pub fn intern(&mut self, s: &str) -> u32 {
        let hash = self.hasher.hash_one(s);
        let Interner {
            arena,
            spans,
            table,
            hasher,
        } = self;
        let found = table.find(hash, |&id| {
            let (start, len) = spans[id as usize];
            &arena[start as usize..(start + len) as usize] == s
        });
        if let Some(&id) = found {
            return id;
        }
        let id = u32::try_from(spans.len()).expect("fewer than 2^32 distinct strings");
        let start = u32::try_from(arena.len()).expect("interned strings fit in 4 GiB");
        arena.push_str(s);
        spans.push((start, s.len() as u32));
        table.insert_unique(hash, id, |&id| {
            let (start, len) = spans[id as usize];
            hasher.hash_one(&arena[start as usize..(start + len) as usize])
        });
        id
    }

    /// The id of `s` if interned.
    pub fn get(&self, s: &str) -> Option<u32> {
        let hash = self.hasher.hash_one(s);
        self.table.find(hash, |&id| self.resolve(id) == s).copied()
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
        self.arena.capacity() + self.spans.capacity() * 8 + self.table.capacity() * 5
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
