//! The `fencing.*` attributes of an item, its scope and its resource, as the mapping reads
//! them (SPEC §8: looked up on the item, then the scope, then the resource).

use super::{KEYS, Key, PREFIX};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value::Value};
use std::collections::HashSet;

/// An attribute's value as the mapping reads it, borrowed from the request: a string, an
/// integer, or another kind of value (a wrong type for every `fencing.*` field).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Val<'a> {
    /// A string's bytes, UTF-8 (checked where it was read).
    Str(&'a [u8]),
    Int(i64),
    Other,
}

impl<'a> Val<'a> {
    /// The value of an `AnyValue`; `None` when it holds none.
    pub(super) fn of(v: &'a AnyValue) -> Option<Val<'a>> {
        Some(match v.value.as_ref()? {
            Value::StringValue(s) => Val::Str(s.as_bytes()),
            Value::IntValue(i) => Val::Int(*i),
            _ => Val::Other,
        })
    }
}

/// The `fencing.*` attributes of one level (item, scope or resource), by key (a key present
/// without a value is `Some(None)`), with the first key found repeated (unknown `fencing.*`
/// keys too).
#[derive(Debug, Default)]
pub(super) struct Level<'a> {
    values: [Option<Option<Val<'a>>>; KEYS.len()],
    pub(super) repeated: Option<&'a str>,
    /// The unknown `fencing.*` keys seen, to tell when one is repeated: a list while there
    /// are few ([`UNKNOWN_LISTED`]), then a set (an item of a hostile body can carry tens of
    /// thousands: searching the list for each was quadratic, about a second for 512 KiB).
    unknown: Vec<&'a str>,
    // Boxed: one word in every level (a level per span), the set only for an item that
    // needs one.
    #[allow(clippy::box_collection)]
    unknown_set: Option<Box<HashSet<&'a str>>>,
}

/// How many unknown `fencing.*` keys a level lists before it keeps them in a set.
const UNKNOWN_LISTED: usize = 16;

impl<'a> Level<'a> {
    pub(super) fn of(attrs: &'a [KeyValue]) -> Level<'a> {
        let mut level = Level::default();
        for kv in attrs {
            level.add(&kv.key, kv.value.as_ref().and_then(Val::of));
        }
        level
    }

    /// The next attribute of this level, in the request's order.
    pub(super) fn add(&mut self, key: &'a str, value: Option<Val<'a>>) {
        if !key.starts_with(PREFIX) {
            return;
        }
        match key_index(key) {
            Some(i) => self.add_known(i, value),
            None => self.add_unknown(key),
        }
    }

    /// The next attribute, `KEYS[i]`.
    pub(super) fn add_known(&mut self, i: Key, value: Option<Val<'a>>) {
        if self.values[i].is_none() {
            self.values[i] = Some(value);
        } else {
            self.repeated.get_or_insert(KEYS[i]);
        }
    }

    /// The next attribute, a `fencing.*` key of no field.
    pub(super) fn add_unknown(&mut self, key: &'a str) {
        // Only the first repeated key is kept: after it, nothing more to tell.
        if self.repeated.is_some() {
            return;
        }
        let seen = match &mut self.unknown_set {
            Some(set) => !set.insert(key),
            None if self.unknown.len() < UNKNOWN_LISTED => {
                let seen = self.unknown.contains(&key);
                if !seen {
                    self.unknown.push(key);
                }
                seen
            }
            None => {
                let mut set: HashSet<&'a str> = self.unknown.drain(..).collect();
                let seen = !set.insert(key);
                self.unknown_set = Some(Box::new(set));
                seen
            }
        };
        if seen {
            self.repeated = Some(key);
        }
    }

    /// This level over `lower` (a scope's over its resource's): each key's value from this
    /// one if it has it, else from `lower`, and the first repeated key of this one, else of
    /// `lower`. An item's fields are looked up in its own level, then in this one, once per
    /// scope rather than per item.
    pub(super) fn over(mut self, lower: &Level<'a>) -> Level<'a> {
        for (v, low) in self.values.iter_mut().zip(lower.values) {
            *v = v.or(low);
        }
        self.repeated = self.repeated.or(lower.repeated);
        self
    }

    pub(super) fn has(&self, key: Key) -> bool {
        self.values[key].is_some()
    }
}

/// The index of a `fencing.*` key in [`KEYS`] (one `match`, not a search).
pub(super) fn key_index(key: &str) -> Option<Key> {
    key_index_bytes(key.as_bytes())
}

/// [`key_index`] of a key's bytes (the keys are ASCII: a match is valid UTF-8): one table
/// slot, found by a multiplicative hash of the key's last eight bytes and its length, then
/// compared in three words, without a branch per key.
#[inline]
pub(super) fn key_index_bytes(key: &[u8]) -> Option<Key> {
    let n = key.len();
    // "fencing." and a name of 3 to 11 bytes.
    if !(PREFIX.len() + 3..=PREFIX.len() + 11).contains(&n) {
        return None;
    }
    let word = |at: usize| u64::from_le_bytes(key[at..at + 8].try_into().expect("8 bytes"));
    let last = word(n - 8);
    let slot = &KEY_TABLE[key_slot(last, n)];
    // The middle word only counts for names beyond 8 bytes (else `last` covers them).
    let mid = if n > 16 { word(8) } else { 0 };
    (slot.len as usize == n && slot.last == last && slot.mid == mid && word(0) == PREFIX_WORD)
        .then_some(slot.index as Key)
}

/// The table slot of a key's last eight bytes and length (a perfect hash of [`KEYS`]: the
/// table's construction fails to compile on a collision).
const fn key_slot(last: u64, n: usize) -> usize {
    ((last ^ n as u64).wrapping_mul(0xafbd_67f9_6196_99cf) >> 59) as usize
}

const PREFIX_WORD: u64 = word_at(PREFIX.as_bytes(), 0);

const fn word_at(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    let mut i = 0;
    while i < 8 {
        w[i] = b[at + i];
        i += 1;
    }
    u64::from_le_bytes(w)
}

#[derive(Clone, Copy)]
struct Slot {
    len: u8,
    index: u8,
    last: u64,
    mid: u64,
}

const KEY_TABLE: [Slot; 32] = {
    // An empty slot's length (0) matches no key.
    let mut t = [Slot {
        len: 0,
        index: 0,
        last: 0,
        mid: 0,
    }; 32];
    let mut i = 0;
    while i < KEYS.len() {
        let k = KEYS[i].as_bytes();
        let n = k.len();
        assert!(n >= PREFIX.len() + 3 && n <= PREFIX.len() + 11);
        let last = word_at(k, n - 8);
        let s = key_slot(last, n);
        assert!(
            t[s].len == 0,
            "two keys in one slot: choose another multiplier"
        );
        t[s] = Slot {
            len: n as u8,
            index: i as u8,
            last,
            mid: if n > 16 { word_at(k, 8) } else { 0 },
        };
        i += 1;
    }
    t
};

/// The levels an item's attributes are looked up in: the item's, then its scope's over its
/// resource's ([`Level::over`]).
pub(super) struct Lookup<'l, 'a> {
    pub(super) item: &'l Level<'a>,
    pub(super) up: &'l Level<'a>,
}

impl<'a> Lookup<'_, 'a> {
    /// The value of `key` on the first level that has it, if any (`Some(None)`: present
    /// without a value).
    pub(super) fn value(&self, key: Key) -> Option<Option<Val<'a>>> {
        self.item.values[key].or(self.up.values[key])
    }
}

#[cfg(test)]
#[test]
fn key_indices_name_their_keys() {
    for (i, k) in super::KEYS.iter().enumerate() {
        assert_eq!(key_index(k), Some(i), "{k}");
    }
    assert_eq!(key_index("fencing.other"), None);
    assert_eq!(key_index("kind"), None);
}

/// The table lookup agrees with a plain search of [`KEYS`] on the keys, on keys changed in
/// one byte, cut or extended, and on other prefixes.
#[cfg(test)]
#[test]
fn key_index_bytes_agrees_with_a_search() {
    let search = |k: &[u8]| super::KEYS.iter().position(|x| x.as_bytes() == k);
    let mut tried = 0;
    for k in super::KEYS {
        let k = k.as_bytes();
        let mut variants = vec![k.to_vec(), k[..k.len() - 1].to_vec(), [k, b"x"].concat()];
        variants.push([b"Fencing.", &k[8..]].concat());
        for i in 0..k.len() {
            for b in [b'a', b'_', b'.', 0, 0xff, k[i] ^ 0x20] {
                let mut v = k.to_vec();
                v[i] = b;
                variants.push(v);
            }
        }
        for v in variants {
            assert_eq!(
                key_index_bytes(&v),
                search(&v),
                "{:?}",
                String::from_utf8_lossy(&v)
            );
            tried += 1;
        }
    }
    assert!(tried > 1000);
}

/// The first repeated unknown key is the one a search of every key seen before finds, with
/// few unknown keys or many (beyond the list, a set), known keys repeated among them or not.
#[cfg(test)]
#[test]
fn the_first_repeated_unknown_key_is_found_in_a_list_or_a_set() {
    let keys: Vec<String> = (0..200).map(|i| format!("fencing.x{i}")).collect();
    let naive = |seq: &[&str]| -> Option<String> {
        seq.iter()
            .enumerate()
            .find(|(i, k)| seq[..*i].contains(k))
            .map(|(_, k)| k.to_string())
    };
    for n in [0usize, 1, 15, 16, 17, 40, 199] {
        for repeat in [None, Some(0), Some(n / 2), Some(n.saturating_sub(1))] {
            let mut seq: Vec<&str> = keys[..n].iter().map(String::as_str).collect();
            if let Some(r) = repeat.filter(|&r| r < n) {
                seq.push(keys[r].as_str());
                seq.push(keys[n - 1 - r].as_str());
            }
            seq.extend(keys[n..].iter().take(5).map(String::as_str));
            // A known key among them, repeated once it is past the list.
            seq.insert(seq.len() / 2, "fencing.scope");
            if n > UNKNOWN_LISTED {
                seq.push("fencing.scope");
            }
            let mut level = Level::default();
            for k in &seq {
                level.add(k, None);
            }
            assert_eq!(
                level.repeated.map(str::to_string),
                naive(&seq),
                "{n} keys, repeat {repeat:?}"
            );
            if n > UNKNOWN_LISTED && naive(&seq[..seq.len() - 1]).is_none() {
                assert!(
                    level.unknown_set.is_some(),
                    "{n} distinct unknown keys: a set"
                );
                assert_eq!(level.repeated, Some("fencing.scope"));
            }
        }
    }
}
