//! The strict visitor behind [`decode_slow`](super::decode_slow): one pass of serde_json that
//! reads known fields as scalars, walks unknown ones (nesting limit, duplicate keys at every
//! level) and keeps the first error with the field it belongs to.

use super::{AttestFields, DecodeError, Decoded, MAX_DEPTH, QUOTED_BYTES, quoted};
use fencewatch_assess::event::{Epoch, Incarnation, Kind, Order, Outcome, Seq};
use fencewatch_assess::time::{Duration, EventTime};
use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use std::borrow::Cow;
use std::fmt;

#[derive(Default)]
pub(super) struct State<'de> {
    pub(super) kind: Option<Kind>,
    pub(super) ts: Option<EventTime>,
    pub(super) ev: Fields<'de>,
    pub(super) seen: u32,
    pub(super) unknown_keys: KeySet<'de>,
    pub(super) first_error: Option<(&'static str, String)>,
    pub(super) field_at_error: Option<&'static str>,
}

#[derive(Default)]
pub(super) struct Fields<'de> {
    pub(super) property: Option<Cow<'de, str>>,
    pub(super) scope: Option<Cow<'de, str>>,
    pub(super) epoch: Option<Epoch>,
    pub(super) route: Option<Cow<'de, str>>,
    /// `None`: the kind's default ([`Outcome::default_of`]).
    pub(super) outcome: Option<Outcome>,
    pub(super) holder: Option<Cow<'de, str>>,
    pub(super) op_id: Option<Cow<'de, str>>,
    pub(super) incarnation: Incarnation,
    pub(super) order: Option<Order>,
    pub(super) emitter: Option<Cow<'de, str>>,
    pub(super) seq: Option<Seq>,
    pub(super) attest: Option<Box<AttestFields<'de>>>,
}

impl<'de> State<'de> {
    pub(super) fn finish(self) -> Result<Decoded<'de>, DecodeError> {
        if let Some((field, reason)) = self.first_error {
            return Err(DecodeError {
                field: Some(field),
                reason,
                ts: self.ts,
            });
        }
        let missing = |field| DecodeError {
            field: Some(field),
            reason: "is required".into(),
            ts: self.ts,
        };
        let kind = self.kind.ok_or_else(|| missing("kind"))?;
        let ts = self.ts.ok_or_else(|| missing("ts"))?;
        let f = self.ev;
        // Ignored on other kinds.
        let attest = if kind == Kind::Attestation {
            match f.attest {
                Some(a) if a.error.is_some() => {
                    let (field, reason) = a.error.expect("checked");
                    return Err(DecodeError {
                        field: Some(field),
                        reason,
                        ts: self.ts,
                    });
                }
                a => a,
            }
        } else {
            None
        };
        Ok(Decoded {
            kind,
            ts,
            property: f.property,
            scope: f.scope,
            epoch: f.epoch,
            route: f.route,
            outcome: f.outcome.unwrap_or(Outcome::default_of(kind)),
            holder: f.holder,
            op_id: f.op_id,
            incarnation: f.incarnation,
            order: f.order,
            emitter: f.emitter,
            seq: f.seq,
            attest,
        })
    }

    fn fail(&mut self, field: &'static str, reason: String) {
        if self.first_error.is_none() {
            self.first_error = Some((field, reason));
        }
    }
}

/// Keys seen in one object, to reject duplicates: a short list, then a hash set, so that a line
/// of a hundred thousand keys costs linear time, not quadratic.
#[derive(Default)]
pub(super) struct KeySet<'de> {
    few: Vec<Cow<'de, str>>,
    many: std::collections::HashSet<Cow<'de, str>>,
}

impl<'de> KeySet<'de> {
    /// Adds `k`; false when it was already there.
    fn insert(&mut self, k: Cow<'de, str>) -> bool {
        if self.many.is_empty() {
            if self.few.contains(&k) {
                return false;
            }
            self.few.push(k);
            if self.few.len() > 16 {
                self.many.extend(self.few.drain(..));
            }
            true
        } else {
            self.many.insert(k)
        }
    }
}

/// A JSON value read without building a tree; composites are walked and summarised.
pub(super) enum Scalar<'de> {
    Null,
    Bool,
    U64(u64),
    I64,
    F64(f64),
    Str(Cow<'de, str>),
    Array,
    Object,
}

impl Scalar<'_> {
    fn type_name(&self) -> &'static str {
        match self {
            Scalar::Null => "null",
            Scalar::Bool => "a boolean",
            Scalar::U64(_) | Scalar::I64 => "an integer",
            Scalar::F64(_) => "a number",
            Scalar::Str(_) => "a string",
            Scalar::Array => "an array",
            Scalar::Object => "an object",
        }
    }
}

/// The index of a known field in [`FIELDS`].
#[inline]
pub(super) fn field_index(key: &str) -> Option<usize> {
    Some(match key {
        "kind" => 0,
        "ts" => 1,
        "property" => 2,
        "scope" => 3,
        "epoch" => 4,
        "route" => 5,
        "outcome" => 6,
        "holder" => 7,
        "op_id" => 8,
        "incarnation" => 9,
        "order" => 10,
        "emitter" => 11,
        "seq" => 12,
        "premise" => 13,
        "valid_for" => 14,
        "attester" => 15,
        "evidence" => 16,
        _ => return None,
    })
}

/// The index in [`FIELDS`] of `premise`, the first of an attestation's own fields.
pub(super) const FIRST_ATTESTATION_FIELD: usize = 13;

pub(super) const FIELDS: [&str; 17] = [
    "kind",
    "ts",
    "property",
    "scope",
    "epoch",
    "route",
    "outcome",
    "holder",
    "op_id",
    "incarnation",
    "order",
    "emitter",
    "seq",
    "premise",
    "valid_for",
    "attester",
    "evidence",
];

pub(super) struct EventSeed<'s, 'de> {
    pub(super) state: &'s mut State<'de>,
}

impl<'de> DeserializeSeed<'de> for EventSeed<'_, 'de> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for EventSeed<'_, 'de> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an event object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let st = self.state;
        while let Some(key) = map.next_key_seed(KeySeed)? {
            let Some(i) = field_index(&key) else {
                if !st.unknown_keys.insert(key.clone()) {
                    return Err(de::Error::custom(format!(
                        "duplicate key `{}`",
                        quoted(&key)
                    )));
                }
                map.next_value_seed(ScalarSeed { depth: 2 })?;
                continue;
            };
            let field = FIELDS[i];
            if st.seen & (1 << i) != 0 {
                st.field_at_error = Some(field);
                return Err(de::Error::custom(format!("duplicate key `{field}`")));
            }
            st.seen |= 1 << i;
            st.field_at_error = Some(field);
            let v = map.next_value_seed(ScalarSeed { depth: 2 })?;
            st.field_at_error = None;
            if let Err(reason) = apply(st, i, v) {
                st.fail(field, reason);
            }
        }
        Ok(())
    }
}

fn string<'de>(v: Scalar<'de>) -> Result<Option<Cow<'de, str>>, String> {
    match v {
        Scalar::Null => Ok(None),
        Scalar::Str(s) => Ok(Some(s)),
        other => Err(format!("expected a string, found {}", other.type_name())),
    }
}

fn unsigned(v: Scalar<'_>) -> Result<Option<u64>, String> {
    match v {
        Scalar::Null => Ok(None),
        Scalar::U64(n) => Ok(Some(n)),
        Scalar::I64 => Err("must not be negative (expected an unsigned 64-bit integer)".into()),
        Scalar::F64(x) if x.fract() == 0.0 && x >= 18_446_744_073_709_551_615.0 => {
            Err("exceeds the unsigned 64-bit range (0..=18446744073709551615)".into())
        }
        Scalar::F64(_) => Err("must be an integer (expected an unsigned 64-bit integer)".into()),
        other => Err(format!(
            "expected an unsigned 64-bit integer, found {}",
            other.type_name()
        )),
    }
}

pub(super) fn apply<'de>(st: &mut State<'de>, field: usize, v: Scalar<'de>) -> Result<(), String> {
    let f = &mut st.ev;
    match field {
        0 => match v {
            Scalar::Str(s) => {
                st.kind = Some(Kind::parse(&s).ok_or_else(|| {
                    format!(
                        "unknown kind `{}` (expected commit, fence, grant, heartbeat or attestation)",
                        quoted(&s)
                    )
                })?);
            }
            Scalar::Null => return Err("is required (null given)".into()),
            other => return Err(format!("expected a string, found {}", other.type_name())),
        },
        1 => {
            st.ts = Some(match v {
                Scalar::U64(n) => {
                    EventTime::from_nanos(i128::from(n)).map_err(|e| e.to_string())?
                }
                Scalar::I64 => return Err("is before 1970 (negative nanoseconds)".into()),
                Scalar::Str(s) => {
                    EventTime::parse_rfc3339(&s).map_err(|e| format!("`{}`: {e}", quoted(&s)))?
                }
                Scalar::Null => return Err("is required (null given)".into()),
                other => {
                    return Err(format!(
                        "expected integer nanoseconds or an RFC 3339 string, found {}",
                        other.type_name()
                    ));
                }
            });
        }
        2 => f.property = string(v)?,
        3 => f.scope = string(v)?,
        5 => f.route = string(v)?,
        7 => f.holder = string(v)?,
        8 => f.op_id = string(v)?,
        11 => f.emitter = string(v)?,
        4 => f.epoch = unsigned(v)?.map(Epoch),
        9 => f.incarnation = Incarnation(unsigned(v)?.unwrap_or(0)),
        10 => f.order = unsigned(v)?.map(Order),
        12 => f.seq = unsigned(v)?.map(Seq),
        6 => {
            f.outcome = match string(v)? {
                None => None,
                Some(s) => Some(Outcome::parse(&s).ok_or_else(|| {
                    format!(
                        "unknown outcome `{}` (expected committed or rejected; on an attestation holds or failed)",
                        quoted(&s)
                    )
                })?),
            }
        }
        // An attestation's own fields: an error in them matters only on an attestation, so it
        // is kept beside them (and reported by `State::finish` if the kind is one).
        13..=16 => {
            let a = f.attest.get_or_insert_default();
            let r = match field {
                13 => string(v).map(|s| a.premise = s),
                14 => valid_for(v).map(|d| a.valid_for = d),
                15 => string(v).map(|s| a.attester = s),
                _ => string(v).map(|s| a.evidence = s),
            };
            if let Err(reason) = r {
                a.error.get_or_insert((FIELDS[field], reason));
            }
        }
        _ => unreachable!("every index of FIELDS is handled"),
    }
    Ok(())
}

/// An attestation's `valid_for` (SPEC §10): a contract duration such as `"24h"`, or integer
/// nanoseconds, greater than zero either way.
fn valid_for(v: Scalar<'_>) -> Result<Option<Duration>, String> {
    let d = match v {
        Scalar::Null => return Ok(None),
        Scalar::U64(n) => {
            Duration(i64::try_from(n).map_err(|_| "exceeds 2^63-1 nanoseconds".to_string())?)
        }
        Scalar::I64 => return Err("must not be negative".into()),
        Scalar::Str(s) => Duration::parse(&s).map_err(|e| {
            if s.len() > QUOTED_BYTES {
                format!("`{}` is not a duration", quoted(&s))
            } else {
                e.to_string()
            }
        })?,
        other => {
            return Err(format!(
                "expected a duration such as \"24h\" or integer nanoseconds, found {}",
                other.type_name()
            ));
        }
    };
    if d.0 == 0 {
        return Err("must be greater than zero".into());
    }
    Ok(Some(d))
}

struct KeySeed;

impl<'de> DeserializeSeed<'de> for KeySeed {
    type Value = Cow<'de, str>;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(KeySeed)
    }
}

impl<'de> Visitor<'de> for KeySeed {
    type Value = Cow<'de, str>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string key")
    }
    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Cow::Borrowed(v))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v.to_string()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v))
    }
}

/// Reads any value at nesting `depth`, walking composites to check depth and duplicate keys.
struct ScalarSeed {
    depth: usize,
}

impl<'de> DeserializeSeed<'de> for ScalarSeed {
    type Value = Scalar<'de>;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ScalarSeed {
    type Value = Scalar<'de>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(Scalar::Null)
    }
    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(Scalar::Null)
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
        Ok(Scalar::Bool)
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        Ok(Scalar::U64(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        Ok(if v >= 0 {
            Scalar::U64(v as u64)
        } else {
            Scalar::I64
        })
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
        Ok(Scalar::F64(v))
    }
    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Scalar::Str(Cow::Borrowed(v)))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Scalar::Str(Cow::Owned(v.to_string())))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
        Ok(Scalar::Str(Cow::Owned(v)))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        if self.depth > MAX_DEPTH {
            return Err(de::Error::custom(format!(
                "nesting deeper than {MAX_DEPTH}"
            )));
        }
        while seq
            .next_element_seed(ScalarSeed {
                depth: self.depth + 1,
            })?
            .is_some()
        {}
        Ok(Scalar::Array)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        if self.depth > MAX_DEPTH {
            return Err(de::Error::custom(format!(
                "nesting deeper than {MAX_DEPTH}"
            )));
        }
        let mut keys = KeySet::default();
        while let Some(k) = map.next_key_seed(KeySeed)? {
            if !keys.insert(k.clone()) {
                return Err(de::Error::custom(format!("duplicate key `{}`", quoted(&k))));
            }
            map.next_value_seed(ScalarSeed {
                depth: self.depth + 1,
            })?;
        }
        Ok(Scalar::Object)
    }
}
