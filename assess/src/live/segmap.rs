//! A hash map split over [`SEGMENTS`] tables by six middle bits of the key's hash, each grown
//! on its own (by hashbrown, when full): one table, grown whole, stopped the applier at each
//! doubling of the emitters or names it held (194 ms and 109 ms at 1M emitters,
//! `examples/name_growth`), every answer waiting. Uniform hashes fill the tables alike, but
//! not to the entry: their growths, each a 64th of the whole, come over the ~1% of inserts by
//! which their fills differ (longest push 3.4 ms there). Not staggered as the interner's
//! tables are ([`crate::intern::grows_at`]): an emitter's entry is ~100 bytes, and tables grown
//! early cost 220 bytes an idle emitter against 136. Serialized as one map, as the `HashMap`
//! it replaces was.

use crate::intern::SEGMENTS;
use foldhash::fast::FixedState;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hash};

/// See the module doc.
#[derive(Clone)]
pub(super) struct SegMap<K, V> {
    tables: Box<[HashMap<K, V, FixedState>; SEGMENTS]>,
    len: usize,
}

impl<K, V> Default for SegMap<K, V> {
    fn default() -> Self {
        SegMap {
            tables: Box::new(std::array::from_fn(|_| HashMap::default())),
            len: 0,
        }
    }
}

impl<K: std::fmt::Debug, V: std::fmt::Debug> std::fmt::Debug for SegMap<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.tables.iter().flatten()).finish()
    }
}

impl<K: PartialEq + Eq + Hash, V: PartialEq> PartialEq for SegMap<K, V> {
    fn eq(&self, o: &Self) -> bool {
        self.len == o.len && self.iter().all(|(k, v)| o.get(k) == Some(v))
    }
}

impl<K: Eq + Hash, V: Eq> Eq for SegMap<K, V> {}

/// The table of a key: six bits from the middle of its hash, as the interner picks its
/// tables ([`crate::intern::segment_of`]; the table's own hash of the key takes the low bits
/// for the bucket, the top seven for the tag).
fn segment_of<Q: Hash + ?Sized>(k: &Q) -> usize {
    crate::intern::segment_of(FixedState::default().hash_one(k))
}

impl<K: Eq + Hash, V> SegMap<K, V> {
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Entries the tables have room for.
    pub(super) fn capacity(&self) -> usize {
        self.tables.iter().map(HashMap::capacity).sum()
    }

    pub(super) fn get<Q: Hash + Eq + ?Sized>(&self, k: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
    {
        self.tables[segment_of(k)].get(k)
    }

    pub(super) fn get_mut<Q: Hash + Eq + ?Sized>(&mut self, k: &Q) -> Option<&mut V>
    where
        K: Borrow<Q>,
    {
        self.tables[segment_of(k)].get_mut(k)
    }

    pub(super) fn contains_key<Q: Hash + Eq + ?Sized>(&self, k: &Q) -> bool
    where
        K: Borrow<Q>,
    {
        self.get(k).is_some()
    }

    pub(super) fn insert(&mut self, k: K, v: V) -> Option<V> {
        let old = self.tables[segment_of(&k)].insert(k, v);
        self.len += usize::from(old.is_none());
        old
    }

    /// The value of `k`, inserted as `V::default()` when missing.
    pub(super) fn get_or_default(&mut self, k: K) -> &mut V
    where
        V: Default,
    {
        use std::collections::hash_map::Entry;
        match self.tables[segment_of(&k)].entry(k) {
            Entry::Occupied(o) => o.into_mut(),
            Entry::Vacant(v) => {
                self.len += 1;
                v.insert(V::default())
            }
        }
    }

    pub(super) fn remove<Q: Hash + Eq + ?Sized>(&mut self, k: &Q) -> Option<V>
    where
        K: Borrow<Q>,
    {
        let old = self.tables[segment_of(k)].remove(k);
        self.len -= usize::from(old.is_some());
        old
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.tables.iter().flatten()
    }

    pub(super) fn keys(&self) -> impl Iterator<Item = &K> {
        self.iter().map(|(k, _)| k)
    }

    pub(super) fn values(&self) -> impl Iterator<Item = &V> {
        self.iter().map(|(_, v)| v)
    }
}

impl<K: Eq + Hash, V> FromIterator<(K, V)> for SegMap<K, V> {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(it: I) -> Self {
        let mut m = SegMap::default();
        for (k, v) in it {
            m.insert(k, v);
        }
        m
    }
}

impl<K: Serialize, V: Serialize> Serialize for SegMap<K, V> {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = ser.serialize_map(Some(self.len))?;
        for (k, v) in self.tables.iter().flatten() {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

impl<'de, K: Deserialize<'de> + Eq + Hash, V: Deserialize<'de>> Deserialize<'de> for SegMap<K, V> {
    fn deserialize<D: Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        let m: Vec<(K, V)> = de.deserialize_map(PairsVisitor(std::marker::PhantomData))?;
        Ok(m.into_iter().collect())
    }
}

/// A map's entries in the order serialized.
struct PairsVisitor<K, V>(std::marker::PhantomData<(K, V)>);

impl<'de, K: Deserialize<'de>, V: Deserialize<'de>> serde::de::Visitor<'de> for PairsVisitor<K, V> {
    type Value = Vec<(K, V)>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a map")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut a: A) -> Result<Self::Value, A::Error> {
        // A length read from the input is not trusted for the allocation.
        let mut out = Vec::with_capacity(a.size_hint().unwrap_or(0).min(4096));
        while let Some(kv) = a.next_entry()? {
            out.push(kv);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_grow_one_after_the_other_and_hold_what_a_map_would() {
        let mut m: SegMap<u32, u64> = SegMap::default();
        let mut plain = std::collections::HashMap::new();
        let mut grown_at = Vec::new();
        for i in 0..200_000u32 {
            let before = m.capacity();
            m.insert(i, u64::from(i) * 3);
            plain.insert(i, u64::from(i) * 3);
            if m.capacity() != before {
                grown_at.push(i);
                // One table grew: about a 64th of the room (a whole map's growth doubles it).
                let grown = m.capacity() - before;
                assert!(grown <= before / 16 + 64, "{before} -> {}", m.capacity());
            }
            if i % 7 == 0 {
                *m.get_or_default(i / 2) += 1;
                *plain.entry(i / 2).or_default() += 1;
            }
        }
        for i in (0..200_000u32).step_by(3) {
            assert_eq!(m.remove(&i), plain.remove(&i));
        }
        assert_eq!(m.len(), plain.len());
        assert!(plain.iter().all(|(k, v)| m.get(k) == Some(v)));
        // Growths spread: at the last doubling, the 64 tables grew over hundreds of inserts.
        let last: Vec<u32> = grown_at.iter().copied().filter(|&i| i > 100_000).collect();
        assert!(last.len() >= SEGMENTS, "{last:?}");
        assert!(last[last.len() - 1] - last[0] > 300, "{last:?}");
        // Serialized as a map, and read back to equal entries.
        let bytes = postcard::to_allocvec(&m).unwrap();
        let back: SegMap<u32, u64> = postcard::from_bytes(&bytes).unwrap();
        assert!(back == m);
        let as_map: std::collections::BTreeMap<u32, u64> = postcard::from_bytes(&bytes).unwrap();
        assert_eq!(as_map.len(), m.len());
    }
}
