//! The WAL form of an OTLP request (batch format `Otlp`): its fencing items as the handler
//! mapped them, events and errors, so that the client's request is decoded once. A record is
//! read back without protobuf, its strings borrowed from the record; replay reads the same
//! items live ingest applied. (Formats `OtlpTraces` / `OtlpLogs`, the reduced request as
//! protobuf, are records of earlier builds: [`super::decode`] still reads them.)
//!
//! Layout: the item count (LEB128), then per item a tag byte (bit 0: malformed, bit 1: a span
//! id follows), the 24-byte span id, then for an event its kind and outcome bytes, a 16-bit
//! presence mask, `ts` and `incarnation`, the present numbers (LEB128) and the present strings
//! (length, bytes); for a malformed item its field (an index of the `fencing.*` keys, or none),
//! its event time if known, and its reason.

use super::{BodyError, Decoded, Entry, Item, ItemError, KEYS, NO_STR};
use crate::decode::json::DecodeError;
use fencewatch_assess::event::{Epoch, Event, Incarnation, Kind, Order, Outcome, Seq};
use fencewatch_assess::live::SpanId;
use fencewatch_assess::time::{Duration, EventTime};

const MALFORMED: u8 = 1;
const SPAN: u8 = 2;
const NO_FIELD: u8 = u8::MAX;
const KINDS: [Kind; 5] = [
    Kind::Commit,
    Kind::Fence,
    Kind::Grant,
    Kind::Heartbeat,
    Kind::Attestation,
];
const OUTCOMES: [Outcome; 4] = [
    Outcome::Committed,
    Outcome::Rejected,
    Outcome::Holds,
    Outcome::Failed,
];
// Presence bits: four numbers, then nine strings.
const EPOCH: u16 = 1;
const ORDER: u16 = 1 << 1;
const SEQ: u16 = 1 << 2;
const VALID_FOR: u16 = 1 << 3;
const STRINGS: u32 = 4;

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn string(out: &mut Vec<u8>, s: &str) {
    varint(out, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}

/// The strings of an item, in the order of their presence bits.
fn strings(it: &Item) -> [u32; 9] {
    [
        it.property,
        it.scope,
        it.route,
        it.holder,
        it.op_id,
        it.emitter,
        it.premise,
        it.attester,
        it.evidence,
    ]
}

/// An upper bound of the length of the WAL form of `items` ([`encode_into`]), to size its
/// buffer once.
pub fn encoded_len(items: &Decoded) -> usize {
    const VARINT: usize = 10;
    let str_len = |s: u32| match s {
        NO_STR => 0,
        s => VARINT + items.get(s).len(),
    };
    let each = |(item, _): &(Result<Item, DecodeError>, Option<SpanId>)| {
        let fixed = 1 + 24;
        fixed
            + match item {
                Ok(it) => 4 + 6 * VARINT + strings(it).into_iter().map(str_len).sum::<usize>(),
                Err(e) => 2 + 2 * VARINT + e.to_string().len(),
            }
    };
    VARINT + items.items.iter().map(each).sum::<usize>()
}

/// Appends the WAL form of `items` to `out`.
pub fn encode_into(items: &Decoded, out: &mut Vec<u8>) {
    varint(out, items.items.len() as u64);
    for (item, span) in &items.items {
        let tag = (u8::from(item.is_err()) * MALFORMED) | (u8::from(span.is_some()) * SPAN);
        out.push(tag);
        if let Some(s) = span {
            out.extend_from_slice(s);
        }
        match item {
            Ok(it) => {
                let strs = strings(it);
                let nums = [
                    it.epoch.map(|e| e.0),
                    it.order.map(|o| o.0),
                    it.seq.map(|s| s.0),
                    it.valid_for.map(|d| d.0 as u64),
                ];
                let mut mask = 0u16;
                for (bit, n) in nums.iter().enumerate() {
                    mask |= u16::from(n.is_some()) << bit;
                }
                for (bit, s) in strs.iter().enumerate() {
                    mask |= u16::from(*s != NO_STR) << (STRINGS as usize + bit);
                }
                let kind = KINDS.iter().position(|k| *k == it.kind).expect("a kind");
                let outcome = OUTCOMES.iter().position(|o| *o == it.outcome);
                out.extend_from_slice(&[kind as u8, outcome.expect("an outcome") as u8]);
                out.extend_from_slice(&mask.to_le_bytes());
                varint(out, it.ts.0 as u64);
                varint(out, it.incarnation.0);
                for n in nums.into_iter().flatten() {
                    varint(out, n);
                }
                for s in strs.into_iter().filter(|s| *s != NO_STR) {
                    string(out, items.get(s));
                }
            }
            Err(e) => {
                let field = e.field.and_then(|f| KEYS.iter().position(|k| *k == f));
                // A field outside the keys (none is) is kept in the reason's wording.
                let reason = match (e.field, field) {
                    (Some(_), None) => e.to_string(),
                    _ => e.reason.clone(),
                };
                out.push(field.map_or(NO_FIELD, |f| f as u8));
                match e.ts {
                    Some(t) => {
                        out.push(1);
                        varint(out, t.0 as u64);
                    }
                    None => out.push(0),
                }
                string(out, &reason);
            }
        }
    }
}

/// Reads a record.
struct Reader<'a> {
    rest: &'a [u8],
}

/// A record cut short or not of this layout.
struct Bad;

impl<'a> Reader<'a> {
    fn byte(&mut self) -> Result<u8, Bad> {
        let (&b, rest) = self.rest.split_first().ok_or(Bad)?;
        self.rest = rest;
        Ok(b)
    }

    fn bytes(&mut self, n: usize) -> Result<&'a [u8], Bad> {
        let (b, rest) = self.rest.split_at_checked(n).ok_or(Bad)?;
        self.rest = rest;
        Ok(b)
    }

    fn varint(&mut self) -> Result<u64, Bad> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            v |= u64::from(b & 0x7f) << shift;
            if b < 0x80 {
                return Ok(v);
            }
        }
        Err(Bad)
    }

    fn str(&mut self) -> Result<&'a str, Bad> {
        let n = usize::try_from(self.varint()?).map_err(|_| Bad)?;
        std::str::from_utf8(self.bytes(n)?).map_err(|_| Bad)
    }

    fn i63(&mut self) -> Result<i64, Bad> {
        i64::try_from(self.varint()?).map_err(|_| Bad)
    }

    fn event(&mut self) -> Result<Event<'a>, Bad> {
        let kind = *KINDS.get(usize::from(self.byte()?)).ok_or(Bad)?;
        let outcome = *OUTCOMES.get(usize::from(self.byte()?)).ok_or(Bad)?;
        let mask = u16::from_le_bytes([self.byte()?, self.byte()?]);
        let mut ev = Event::new(kind, EventTime(self.i63()?));
        ev.outcome = outcome;
        ev.incarnation = Incarnation(self.varint()?);
        let num = |r: &mut Self, bit: u16| -> Result<Option<u64>, Bad> {
            (mask & bit != 0).then(|| r.varint()).transpose()
        };
        ev.epoch = num(self, EPOCH)?.map(Epoch);
        ev.order = num(self, ORDER)?.map(Order);
        ev.seq = num(self, SEQ)?.map(Seq);
        ev.valid_for = match num(self, VALID_FOR)? {
            Some(d) => Some(Duration(i64::try_from(d).map_err(|_| Bad)?)),
            None => None,
        };
        let fields = [
            &mut ev.property,
            &mut ev.scope,
            &mut ev.route,
            &mut ev.holder,
            &mut ev.op_id,
            &mut ev.emitter,
            &mut ev.premise,
            &mut ev.attester,
            &mut ev.evidence,
        ];
        for (bit, f) in fields.into_iter().enumerate() {
            if mask & (1 << (STRINGS as usize + bit)) != 0 {
                *f = Some(self.str()?);
            }
        }
        Ok(ev)
    }

    fn error(&mut self) -> Result<DecodeError, Bad> {
        let field = match self.byte()? {
            NO_FIELD => None,
            f => Some(*KEYS.get(usize::from(f)).ok_or(Bad)?),
        };
        let ts = match self.byte()? {
            0 => None,
            _ => Some(EventTime(self.i63()?)),
        };
        Ok(DecodeError {
            field,
            reason: self.str()?.to_string(),
            ts,
        })
    }

    fn entry(&mut self) -> Result<Entry<'a>, Bad> {
        let tag = self.byte()?;
        if tag & !(MALFORMED | SPAN) != 0 {
            return Err(Bad);
        }
        let span: Option<&'a SpanId> = if tag & SPAN != 0 {
            Some(self.bytes(24)?.try_into().map_err(|_| Bad)?)
        } else {
            None
        };
        Ok(if tag & MALFORMED != 0 {
            Entry::Malformed(ItemError {
                span: span.copied(),
                error: self.error()?,
            })
        } else {
            Entry::Event(self.event()?, span)
        })
    }
}

fn bad() -> BodyError {
    BodyError("not an OTLP record of this layout (cut short or corrupt)".into())
}

/// The number of items of a record ([`encode_into`]).
pub fn count(body: &[u8]) -> Result<u64, BodyError> {
    Reader { rest: body }.varint().map_err(|Bad| bad())
}

/// The items of a record ([`encode_into`]), in order, borrowing from it.
pub fn decode(body: &[u8]) -> Result<Vec<Entry<'_>>, BodyError> {
    let mut r = Reader { rest: body };
    let n = r.varint().map_err(|Bad| bad())?;
    // Every item takes at least a byte: a count beyond the record is not trusted.
    let mut out = Vec::with_capacity(usize::try_from(n).unwrap_or(0).min(body.len()));
    for _ in 0..n {
        out.push(r.entry().map_err(|Bad| bad())?);
    }
    if !r.rest.is_empty() {
        return Err(bad());
    }
    Ok(out)
}
