//! The `fencing.*` attributes of an item, its scope and its resource, as the mapping reads
//! them (SPEC §8: looked up on the item, then the scope, then the resource).

use super::{KEYS, Key, PREFIX};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value::Value};

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
    /// The unknown `fencing.*` keys seen, to tell when one is repeated.
    unknown: Vec<&'a str>,
}

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
        if self.unknown.contains(&key) {
            self.repeated.get_or_insert(key);
        } else {
            self.unknown.push(key);
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

/// [`key_index`] of a key's bytes (the keys are ASCII: a match is valid UTF-8).
pub(super) fn key_index_bytes(key: &[u8]) -> Option<Key> {
    Some(match key.strip_prefix(PREFIX.as_bytes())? {
        b"kind" => 0,
        b"scope" => 1,
        b"epoch" => 2,
        b"route" => 3,
        b"property" => 4,
        b"holder" => 5,
        b"op_id" => 6,
        b"incarnation" => 7,
        b"order" => 8,
        b"outcome" => 9,
        b"emitter" => 10,
        b"seq" => 11,
        b"premise" => 12,
        b"valid_for" => 13,
        b"attester" => 14,
        b"evidence" => 15,
        _ => return None,
    })
}

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
