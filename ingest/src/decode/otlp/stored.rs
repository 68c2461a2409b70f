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

use super::level::Val;
use super::{BodyError, Decoded, Entry, Item, ItemError, KEYS, Text};
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

/// A string: its length, then its bytes (room for both reserved by the caller).
#[inline(always)]
fn string(out: &mut Vec<u8>, s: &[u8]) {
    match u8::try_from(s.len()) {
        Ok(n) if n < 0x80 => out.push(n),
        _ => varint(out, s.len() as u64),
    }
    out.extend_from_slice(s);
}

/// A string field's value: a string, or an integer in decimal.
#[inline(always)]
fn text(out: &mut Vec<u8>, v: Val<'_>) {
    match v {
        Val::Str(s) => string(out, s),
        Val::Int(i) => {
            use std::io::Write as _;
            let mut digits = [0u8; 20];
            let mut w: &mut [u8] = &mut digits;
            write!(w, "{i}").expect("an i64 takes at most 20 bytes");
            let n = 20 - w.len();
            string(out, &digits[..n]);
        }
        // Never kept: a string field of another type is malformed.
        Val::Other => string(out, b""),
    }
}

/// The strings of an item, in the order of their presence bits.
fn strings<'a>(it: &Item<'a>) -> [Text<'a>; 9] {
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

/// The length of the WAL form of `items` ([`encode_into`]), to size its buffer once.
pub fn encoded_len(items: &Decoded) -> usize {
    items.stored().len()
}

/// Appends the WAL form of `items` to `out`.
pub fn encode_into(items: &Decoded, out: &mut Vec<u8>) {
    out.extend_from_slice(items.stored());
}

/// The bytes of a record's item count as the mapping writes it: a LEB128 varint padded to a
/// fixed width (its first bytes carry a continuation bit over zero bits), so that the count
/// is written in place once the items are.
pub const COUNT_BYTES: usize = 5;

/// `n` (below 2^35: items of a request bounded in bytes) in [`COUNT_BYTES`].
pub(super) fn count_bytes(n: usize) -> [u8; COUNT_BYTES] {
    debug_assert!(n < 1 << (7 * COUNT_BYTES), "{n} items in one request");
    let n = (n as u64).min((1 << (7 * COUNT_BYTES)) - 1);
    let mut out = [0; COUNT_BYTES];
    for (i, b) in out.iter_mut().enumerate() {
        *b = ((n >> (7 * i)) & 0x7f) as u8 | if i + 1 < COUNT_BYTES { 0x80 } else { 0 };
    }
    out
}

/// The index of `kind` in [`KINDS`].
fn kind_index(kind: Kind) -> u8 {
    match kind {
        Kind::Commit => 0,
        Kind::Fence => 1,
        Kind::Grant => 2,
        Kind::Heartbeat => 3,
        Kind::Attestation => 4,
    }
}

/// The index of `outcome` in [`OUTCOMES`].
fn outcome_index(outcome: Outcome) -> u8 {
    match outcome {
        Outcome::Committed => 0,
        Outcome::Rejected => 1,
        Outcome::Holds => 2,
        Outcome::Failed => 3,
    }
}

/// The fixed part of an item's WAL form: a tag, a span id, kind, outcome and mask, six
/// varints at most.
struct Head {
    buf: [u8; 1 + 24 + 4 + 6 * 10],
    len: usize,
}

impl Default for Head {
    fn default() -> Head {
        Head {
            buf: [0; 1 + 24 + 4 + 6 * 10],
            len: 0,
        }
    }
}

impl Head {
    #[inline(always)]
    fn push(&mut self, b: u8) {
        self.buf[self.len] = b;
        self.len += 1;
    }

    #[inline(always)]
    fn bytes(&mut self, b: &[u8]) {
        self.buf[self.len..self.len + b.len()].copy_from_slice(b);
        self.len += b.len();
    }

    #[inline(always)]
    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.push(v as u8 | 0x80);
            v >>= 7;
        }
        self.push(v as u8);
    }

    fn written(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

/// Appends the WAL form of one item (an event or why it is malformed, with its span's ids)
/// to `out`.
pub(super) fn write_item(
    out: &mut Vec<u8>,
    item: &Result<Item<'_>, DecodeError>,
    span: Option<&SpanId>,
) {
    let tag = (u8::from(item.is_err()) * MALFORMED) | (u8::from(span.is_some()) * SPAN);
    // The fixed part of an event is assembled on the stack and appended at once.
    let mut head = Head::default();
    head.push(tag);
    if let Some(s) = span {
        head.bytes(s);
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
                mask |= u16::from(s.is_some()) << (STRINGS as usize + bit);
            }
            head.bytes(&[kind_index(it.kind), outcome_index(it.outcome)]);
            head.bytes(&mask.to_le_bytes());
            head.varint(it.ts.0 as u64);
            head.varint(it.incarnation.0);
            for n in nums.into_iter().flatten() {
                head.varint(n);
            }
            // Each string takes its bytes and a length of up to 10 (20 digits for an integer).
            let room = |s: &Text<'_>| match s {
                Some(Val::Str(b)) => 10 + b.len(),
                Some(_) => 30,
                None => 0,
            };
            out.reserve(head.len + strs.iter().map(room).sum::<usize>());
            out.extend_from_slice(head.written());
            for s in strs.into_iter().flatten() {
                text(out, s);
            }
        }
        Err(e) => {
            out.extend_from_slice(head.written());
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
            string(out, reason.as_bytes());
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
        // The strings follow one another: their bytes are checked to be UTF-8 as one (each
        // one's range then taken from that `str`, at its character boundaries), else one by one.
        let region = self.rest;
        let mut ranges = [(0, 0); 9];
        for (bit, r) in ranges.iter_mut().enumerate() {
            if mask & (1 << (STRINGS as usize + bit)) != 0 {
                let n = usize::try_from(self.varint()?).map_err(|_| Bad)?;
                let at = region.len() - self.rest.len();
                self.bytes(n)?;
                *r = (at, at + n);
            }
        }
        let region = &region[..region.len() - self.rest.len()];
        let whole = std::str::from_utf8(region).ok();
        for (bit, (f, (from, to))) in fields.into_iter().zip(ranges).enumerate() {
            if mask & (1 << (STRINGS as usize + bit)) != 0 {
                *f = Some(match whole.and_then(|w| w.get(from..to)) {
                    Some(s) => s,
                    None => std::str::from_utf8(&region[from..to]).map_err(|_| Bad)?,
                });
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
    read(r, n)
}

fn read(mut r: Reader<'_>, n: u64) -> Result<Vec<Entry<'_>>, BodyError> {
    // Every item takes at least a byte: a count beyond the record is not trusted.
    let mut out = Vec::with_capacity(usize::try_from(n).unwrap_or(0).min(r.rest.len()));
    for _ in 0..n {
        out.push(r.entry().map_err(|Bad| bad())?);
    }
    if !r.rest.is_empty() {
        return Err(bad());
    }
    Ok(out)
}
