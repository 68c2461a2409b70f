//! OTLP protobuf requests mapped straight from the body, without building the request:
//! [`map`] gives the same [`Mapped`] as parsing the body into `opentelemetry-proto`'s types
//! (prost) and mapping those ([`super::map_traces`], [`super::map_logs`]), and refuses
//! exactly the bodies prost refuses — for the same schema, with prost's key and varint
//! decoding, its recursion limit (100 nested messages) and its rules for repeated fields
//! (a repeated message appends, a message field met twice merges, a scalar or a `oneof`
//! takes the last). The property tests in `tests.rs` hold it to that on generated, merged,
//! cut and corrupted bodies.
//!
//! Why: prost builds the owned types with about twenty allocations per span (every key,
//! value, id and name) that the mapping reads a handful of and drops; here a span costs none
//! (its fencing strings are copied once, into the mapped items' table). Every field of the
//! schema is still read and checked (wire type, length, UTF-8 of strings, nesting), ignored
//! attributes, events and links included, so that what is accepted does not depend on which
//! path parsed it. OTLP/HTTP and OTLP/gRPC protobuf bodies both come here (gRPC through a
//! tonic codec that keeps the message's bytes); OTLP/JSON requests (serde) keep the
//! generated types.

use super::level::{Level, Val, key_index_bytes};
use super::{Builder, Mapped, PREFIX, Signal, SpanFacts};
use prost::encoding::{WireType, decode_key, decode_varint};

/// Why a body is not a valid request: what prost would refuse, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WireError {
    /// The message being read, e.g. `Span`.
    pub message: &'static str,
    /// What is wrong.
    pub reason: String,
}

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "in {}: {}", self.message, self.reason)
    }
}

/// Boxed: a `Result` of a word or two comes back in registers, and errors are rare.
type R<T> = Result<T, Box<WireError>>;

/// prost's recursion limit: how many messages deep a body may nest.
const RECURSION_LIMIT: u32 = 100;

/// The fields of one message, read in order; `depth` is what prost's decode context holds for
/// them (the limit at the request, one less per message entered).
#[derive(Clone, Copy)]
struct Msg<'a> {
    name: &'static str,
    buf: &'a [u8],
    depth: u32,
}

impl<'a> Msg<'a> {
    #[cold]
    fn err(&self, reason: impl Into<String>) -> Box<WireError> {
        Box::new(WireError {
            message: self.name,
            reason: reason.into(),
        })
    }

    #[cold]
    fn prost(&self, e: prost::DecodeError) -> Box<WireError> {
        self.err(e.to_string())
    }

    /// Whether fields are left.
    #[inline(always)]
    fn more(&self) -> bool {
        !self.buf.is_empty()
    }

    /// The next field's tag and wire type (while [`Msg::more`]).
    #[inline(always)]
    fn key(&mut self) -> R<(u32, WireType)> {
        // A key of one byte (tags 1 to 15, nearly all of them) without the general decoder.
        if let Some(&first) = self.buf.first() {
            let wt = match first & 7 {
                0 => Some(WireType::Varint),
                1 => Some(WireType::SixtyFourBit),
                2 => Some(WireType::LengthDelimited),
                5 => Some(WireType::ThirtyTwoBit),
                _ => None,
            };
            if let (true, Some(wt)) = ((8..0x80).contains(&first), wt) {
                self.buf = &self.buf[1..];
                return Ok((u32::from(first >> 3), wt));
            }
        }
        self.key_slow()
    }

    #[inline(never)]
    fn key_slow(&mut self) -> R<(u32, WireType)> {
        decode_key(&mut self.buf).map_err(|e| self.prost(e))
    }

    #[inline(always)]
    fn wire(&self, expected: WireType, actual: WireType) -> R<()> {
        if expected == actual {
            Ok(())
        } else {
            Err(self.wrong_wire(expected, actual))
        }
    }

    #[cold]
    fn wrong_wire(&self, expected: WireType, actual: WireType) -> Box<WireError> {
        self.err(format!(
            "invalid wire type: {actual:?} (expected {expected:?})"
        ))
    }

    /// A varint (of one or two bytes without the general decoder).
    #[inline(always)]
    fn raw_varint(&mut self) -> R<u64> {
        if let Some((v, n)) = short_varint(self.buf) {
            self.buf = &self.buf[n..];
            return Ok(v);
        }
        self.varint_slow()
    }

    #[inline(never)]
    fn varint_slow(&mut self) -> R<u64> {
        decode_varint(&mut self.buf).map_err(|e| self.prost(e))
    }

    #[inline(always)]
    fn varint(&mut self, wt: WireType) -> R<u64> {
        self.wire(WireType::Varint, wt)?;
        self.raw_varint()
    }

    #[inline(always)]
    fn take(&mut self, n: usize) -> R<&'a [u8]> {
        match self.buf.split_at_checked(n) {
            Some((b, rest)) => {
                self.buf = rest;
                Ok(b)
            }
            None => Err(self.underflow()),
        }
    }

    #[cold]
    fn underflow(&self) -> Box<WireError> {
        self.err("buffer underflow")
    }

    #[inline(always)]
    fn fixed64(&mut self, wt: WireType) -> R<u64> {
        self.wire(WireType::SixtyFourBit, wt)?;
        let b = self.take(8)?;
        Ok(u64::from_le_bytes(b.try_into().expect("8 bytes")))
    }

    #[inline(always)]
    fn fixed32(&mut self, wt: WireType) -> R<()> {
        self.wire(WireType::ThirtyTwoBit, wt)?;
        self.take(4).map(drop)
    }

    #[inline(always)]
    fn bytes(&mut self, wt: WireType) -> R<&'a [u8]> {
        self.wire(WireType::LengthDelimited, wt)?;
        let len = self.raw_varint()?;
        // Beyond the body (or usize) is an underflow, as in prost.
        self.take(usize::try_from(len).unwrap_or(usize::MAX))
    }

    #[cold]
    fn not_utf8(&self) -> Box<WireError> {
        self.err("invalid string value: data is not UTF-8 encoded")
    }

    /// A string field: its bytes, checked to be UTF-8 (made a `&str` only where needed).
    #[inline(always)]
    fn checked(&mut self, wt: WireType) -> R<&'a [u8]> {
        let b = self.bytes(wt)?;
        if utf8(b) { Ok(b) } else { Err(self.not_utf8()) }
    }

    /// A nested message named `name`.
    #[inline(always)]
    fn message(&mut self, wt: WireType, name: &'static str) -> R<Msg<'a>> {
        self.wire(WireType::LengthDelimited, wt)?;
        if self.depth == 0 {
            return Err(self.too_deep());
        }
        let buf = self.bytes(wt)?;
        Ok(Msg {
            name,
            buf,
            depth: self.depth - 1,
        })
    }

    #[cold]
    fn too_deep(&self) -> Box<WireError> {
        self.err("recursion limit reached")
    }

    /// A field this schema does not declare (prost's `skip_field`).
    fn skip(&mut self, wt: WireType, tag: u32) -> R<()> {
        let mut buf = self.buf;
        skip_field(wt, tag, &mut buf, self.depth).map_err(|why| self.err(why))?;
        self.buf = buf;
        Ok(())
    }
}

/// A varint of one or two bytes at the start of `b` (lengths below 16 KiB, small integers),
/// and its length, as prost reads it; `None` for a longer one (or too few bytes).
#[inline(always)]
fn short_varint(b: &[u8]) -> Option<(u64, usize)> {
    match *b {
        [b0, ..] if b0 < 0x80 => Some((u64::from(b0), 1)),
        [b0, b1, ..] if b1 < 0x80 => Some((u64::from(b0 & 0x7f) | (u64::from(b1) << 7), 2)),
        _ => None,
    }
}

/// Whether `b` is UTF-8, ASCII (nearly every string) checked first ([`ascii`]).
#[inline]
fn utf8(b: &[u8]) -> bool {
    ascii(b) || std::str::from_utf8(b).is_ok()
}

/// Whether `b` is ASCII: up to 16 bytes (the keys and most values of attributes) in two
/// overlapping loads and one test, with fewer branches on the length than `is_ascii`'s.
#[inline(always)]
fn ascii(b: &[u8]) -> bool {
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let n = b.len();
    let word = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"));
    let half = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"));
    match n {
        0 => true,
        1..=3 => (b[0] | b[n / 2] | b[n - 1]) < 0x80,
        4..=7 => (half(0) | half(n - 4)) & HIGH as u32 == 0,
        8..=16 => (word(0) | word(n - 8)) & HIGH == 0,
        _ => b.is_ascii(),
    }
}

fn skip_field(wt: WireType, tag: u32, buf: &mut &[u8], depth: u32) -> Result<(), String> {
    if depth == 0 {
        return Err("recursion limit reached".into());
    }
    let len = match wt {
        WireType::Varint => decode_varint(buf).map(|_| 0).map_err(|e| e.to_string())?,
        WireType::ThirtyTwoBit => 4,
        WireType::SixtyFourBit => 8,
        WireType::LengthDelimited => decode_varint(buf).map_err(|e| e.to_string())?,
        WireType::StartGroup => loop {
            let (inner_tag, inner_wt) = decode_key(buf).map_err(|e| e.to_string())?;
            match inner_wt {
                WireType::EndGroup if inner_tag == tag => break 0,
                WireType::EndGroup => return Err("unexpected end group tag".into()),
                _ => skip_field(inner_wt, inner_tag, buf, depth - 1)?,
            }
        },
        WireType::EndGroup => return Err("unexpected end group tag".into()),
    };
    let len = usize::try_from(len)
        .ok()
        .filter(|&n| n <= buf.len())
        .ok_or_else(|| "buffer underflow".to_string())?;
    *buf = &buf[len..];
    Ok(())
}

/// An `AnyValue`: its `oneof` after every field (the last one set wins), checked whole.
fn any_value<'a>(mut m: Msg<'a>) -> R<Option<Val<'a>>> {
    let mut v = None;
    while m.more() {
        let (tag, wt) = m.key()?;
        v = Some(match tag {
            1 => Val::Str(m.checked(wt)?),
            2 | 3 => {
                let n = m.varint(wt)?;
                if tag == 3 {
                    Val::Int(n as i64)
                } else {
                    Val::Other
                }
            }
            4 => {
                m.fixed64(wt)?;
                Val::Other
            }
            5 => {
                array(m.message(wt, "ArrayValue")?)?;
                Val::Other
            }
            6 => {
                kvlist(m.message(wt, "KeyValueList")?)?;
                Val::Other
            }
            7 => {
                m.bytes(wt)?;
                Val::Other
            }
            _ => {
                m.skip(wt, tag)?;
                continue;
            }
        });
    }
    Ok(v)
}

fn array(mut m: Msg<'_>) -> R<()> {
    while m.more() {
        let (tag, wt) = m.key()?;
        match tag {
            1 => drop(any_value(m.message(wt, "AnyValue")?)?),
            _ => m.skip(wt, tag)?,
        }
    }
    Ok(())
}

fn kvlist(mut m: Msg<'_>) -> R<()> {
    while m.more() {
        let (tag, wt) = m.key()?;
        match tag {
            1 => drop(key_value(m.message(wt, "KeyValue")?)?),
            _ => m.skip(wt, tag)?,
        }
    }
    Ok(())
}

/// A `KeyValue`: its key's bytes (the last one, checked) and its value (`AnyValue`s met
/// twice merge: a later one that sets no value keeps the earlier one's).
fn key_value<'a>(mut m: Msg<'a>) -> R<(&'a [u8], Option<Val<'a>>)> {
    let (mut key, mut value): (&[u8], _) = (&[], None);
    while m.more() {
        let (tag, wt) = m.key()?;
        match tag {
            1 => key = m.checked(wt)?,
            2 => {
                if let Some(v) = any_value(m.message(wt, "AnyValue")?)? {
                    value = Some(v);
                }
            }
            _ => m.skip(wt, tag)?,
        }
    }
    Ok((key, value))
}

/// A `KeyValue` as every SDK writes one: its key, then its value holding a string or an
/// integer, each length below 128, nothing else, all valid but the key, which the caller
/// checks. `None` for any other form (read by [`key_value`], which also finds what is wrong):
/// the same key and value either way.
#[inline(always)]
fn common_key_value<'a>(kv: &Msg<'a>) -> Option<(&'a [u8], Val<'a>)> {
    // The AnyValue inside is one message deeper.
    if kv.depth == 0 {
        return None;
    }
    let [0x0a, klen, rest @ ..] = kv.buf else {
        return None;
    };
    let (key, rest) = rest.split_at_checked(usize::from(*klen).min(0x80))?;
    let [0x12, vlen, value @ ..] = rest else {
        return None;
    };
    if *klen >= 0x80 || *vlen >= 0x80 || value.len() != usize::from(*vlen) {
        return None;
    }
    let raw = match value {
        [0x0a, slen, s @ ..] if usize::from(*slen) == s.len() && *slen < 0x80 && utf8(s) => {
            Val::Str(s)
        }
        [0x18, v @ ..] => {
            let (n, len) = match short_varint(v) {
                Some(short) => short,
                None => {
                    let mut rest: &[u8] = v;
                    let n = decode_varint(&mut rest).ok()?;
                    (n, v.len() - rest.len())
                }
            };
            if len != v.len() {
                return None;
            }
            Val::Int(n as i64)
        }
        _ => return None,
    };
    Some((key, raw))
}

/// Adds an attribute (a `KeyValue` field) to `level`: only `fencing.*` keys are kept, their
/// known names matched as bytes.
#[inline(always)]
fn attribute<'a>(m: &mut Msg<'a>, wt: WireType, level: &mut Level<'a>) -> R<()> {
    let kv = m.message(wt, "KeyValue")?;
    let (key, value, known) = match common_key_value(&kv) {
        // A known key is ASCII: only another one's bytes are checked.
        Some((key, value)) => match key_index_bytes(key) {
            Some(i) => (key, Some(value), Some(i)),
            None if utf8(key) => (key, Some(value), None),
            None => return key_value(kv).map(drop),
        },
        None => {
            let (key, value) = key_value(kv)?;
            (key, value, key_index_bytes(key))
        }
    };
    match known {
        Some(i) => level.add_known(i, value),
        None if key.starts_with(PREFIX.as_bytes()) => {
            level.add_unknown(std::str::from_utf8(key).map_err(|_| kv.not_utf8())?)
        }
        None => {}
    }
    Ok(())
}

/// Attributes only checked (of span events and links).
fn attributes_checked(m: &mut Msg<'_>, wt: WireType) -> R<()> {
    key_value(m.message(wt, "KeyValue")?).map(drop)
}

fn entity_ref(mut m: Msg<'_>) -> R<()> {
    while m.more() {
        let (tag, wt) = m.key()?;
        match tag {
            1..=4 => drop(m.checked(wt)?),
            _ => m.skip(wt, tag)?,
        }
    }
    Ok(())
}

fn resource<'a>(mut m: Msg<'a>, level: &mut Level<'a>) -> R<()> {
    while m.more() {
        let (tag, wt) = m.key()?;
        match tag {
            1 => attribute(&mut m, wt, level)?,
            2 => drop(m.varint(wt)?),
            3 => entity_ref(m.message(wt, "EntityRef")?)?,
            _ => m.skip(wt, tag)?,
        }
    }
    Ok(())
}

fn scope<'a>(mut m: Msg<'a>, level: &mut Level<'a>) -> R<()> {
    while m.more() {
        let (tag, wt) = m.key()?;
        match tag {
            1 | 2 => drop(m.checked(wt)?),
            3 => attribute(&mut m, wt, level)?,
            4 => drop(m.varint(wt)?),
            _ => m.skip(wt, tag)?,
        }
    }
    Ok(())
}

fn span_event(mut m: Msg<'_>) -> R<()> {
    while m.more() {
        let (tag, wt) = m.key()?;
        match tag {
            1 => drop(m.fixed64(wt)?),
            2 => drop(m.checked(wt)?),
            3 => attributes_checked(&mut m, wt)?,
            4 => drop(m.varint(wt)?),
            _ => m.skip(wt, tag)?,
        }
    }
    Ok(())
}

fn span_link(mut m: Msg<'_>) -> R<()> {
    while m.more() {
        let (tag, wt) = m.key()?;
        match tag {
            1 | 2 => drop(m.bytes(wt)?),
            3 => drop(m.checked(wt)?),
            4 => attributes_checked(&mut m, wt)?,
            5 => drop(m.varint(wt)?),
            6 => m.fixed32(wt)?,
            _ => m.skip(wt, tag)?,
        }
    }
    Ok(())
}

/// A `Status`: its code, if it sets one (a status met twice merges).
fn status(mut m: Msg<'_>, code: &mut i32) -> R<()> {
    while m.more() {
        let (tag, wt) = m.key()?;
        match tag {
            2 => drop(m.checked(wt)?),
            // An enumeration is an int32: the varint's low 32 bits, as prost reads it.
            3 => *code = m.varint(wt)? as i32,
            _ => m.skip(wt, tag)?,
        }
    }
    Ok(())
}

/// One item (a span or a log record) mapped into `b`.
trait Items {
    /// The items' message (`Span`, `LogRecord`), and those of their scope, resource and
    /// request, as errors name them.
    const NAME: &'static str;
    const SCOPE: &'static str;
    const RESOURCE: &'static str;
    const REQUEST: &'static str;
    fn item<'a>(b: &mut Builder, m: Msg<'a>, up: &Level<'a>, at: [usize; 3]) -> R<()>;
}

struct Spans;

impl Items for Spans {
    const NAME: &'static str = "Span";
    const SCOPE: &'static str = "ScopeSpans";
    const RESOURCE: &'static str = "ResourceSpans";
    const REQUEST: &'static str = "ExportTraceServiceRequest";

    fn item<'a>(b: &mut Builder, mut m: Msg<'a>, up: &Level<'a>, at: [usize; 3]) -> R<()> {
        let mut item = Level::default();
        let (mut trace_id, mut span_id): (&[u8], &[u8]) = (&[], &[]);
        let (mut end, mut code) = (0, 0);
        while m.more() {
            let (tag, wt) = m.key()?;
            match tag {
                1 => trace_id = m.bytes(wt)?,
                2 => span_id = m.bytes(wt)?,
                3 | 5 => drop(m.checked(wt)?),
                4 => drop(m.bytes(wt)?),
                6 | 10 | 12 | 14 => drop(m.varint(wt)?),
                7 => drop(m.fixed64(wt)?),
                8 => end = m.fixed64(wt)?,
                9 => attribute(&mut m, wt, &mut item)?,
                11 => span_event(m.message(wt, "Event")?)?,
                13 => span_link(m.message(wt, "Link")?)?,
                15 => status(m.message(wt, "Status")?, &mut code)?,
                16 => m.fixed32(wt)?,
                _ => m.skip(wt, tag)?,
            }
        }
        let facts = SpanFacts {
            trace_id,
            span_id,
            end_time_unix_nano: end,
            errored: code == super::StatusCode::Error as i32,
        };
        b.span(&item, up, at, facts);
        Ok(())
    }
}

struct Logs;

impl Items for Logs {
    const NAME: &'static str = "LogRecord";
    const SCOPE: &'static str = "ScopeLogs";
    const RESOURCE: &'static str = "ResourceLogs";
    const REQUEST: &'static str = "ExportLogsServiceRequest";

    fn item<'a>(b: &mut Builder, mut m: Msg<'a>, up: &Level<'a>, at: [usize; 3]) -> R<()> {
        let mut item = Level::default();
        let (mut time, mut observed) = (0, 0);
        while m.more() {
            let (tag, wt) = m.key()?;
            match tag {
                1 => time = m.fixed64(wt)?,
                11 => observed = m.fixed64(wt)?,
                2 | 7 => drop(m.varint(wt)?),
                3 | 12 => drop(m.checked(wt)?),
                5 => drop(any_value(m.message(wt, "AnyValue")?)?),
                6 => attribute(&mut m, wt, &mut item)?,
                8 => m.fixed32(wt)?,
                9 | 10 => drop(m.bytes(wt)?),
                _ => m.skip(wt, tag)?,
            }
        }
        b.log(&item, up, at, time, observed);
        Ok(())
    }
}

/// The first pass over a `Resource*` or `Scope*` message: its field 1 (its resource or scope,
/// a `head` message, wherever and however often it occurs, merged) to `read`, its items (field
/// 2, `child` messages) only delimited, its `schema_url` checked.
fn heads<'a>(
    mut m: Msg<'a>,
    head: &'static str,
    child: &'static str,
    mut read: impl FnMut(Msg<'a>) -> R<()>,
) -> R<()> {
    while m.more() {
        let (tag, wt) = m.key()?;
        match tag {
            1 => read(m.message(wt, head)?)?,
            2 => drop(m.message(wt, child)?),
            3 => drop(m.checked(wt)?),
            _ => m.skip(wt, tag)?,
        }
    }
    Ok(())
}

/// The second pass: each item (field 2, a `child` message) to `each` with its index.
fn children<'a>(
    mut m: Msg<'a>,
    child: &'static str,
    mut each: impl FnMut(Msg<'a>, usize) -> R<()>,
) -> R<()> {
    let mut i = 0;
    while m.more() {
        let (tag, wt) = m.key()?;
        match tag {
            2 => {
                each(m.message(wt, child)?, i)?;
                i += 1;
            }
            1 | 3 => drop(m.bytes(wt)?),
            _ => m.skip(wt, tag)?,
        }
    }
    Ok(())
}

/// A `ScopeSpans` / `ScopeLogs` (index `at[1]` of resource `at[0]`): its scope first, then
/// its items.
///
/// In one pass over the message when its scope comes before its items (as every SDK writes
/// it): a second pass that only delimits thousands of items costs a dependent load per item,
/// a cache miss each on a body not in cache. Else (a scope after an item, or any error) what
/// the pass added is forgotten and the message read again in two passes
/// ([`scope_items_two_pass`]), which find the same items or the same error as prost.
fn scope_items<'a, I: Items>(
    b: &mut Builder,
    m: Msg<'a>,
    res: &Level<'a>,
    at: [usize; 2],
) -> R<()> {
    let mark = b.mark();
    match scope_items_one_pass::<I>(b, m, res, at) {
        Ok(true) => Ok(()),
        Ok(false) | Err(_) => {
            b.rewind(mark);
            scope_items_two_pass::<I>(b, m, res, at)
        }
    }
}

/// [`scope_items`] in one pass: `Ok(false)` if the scope (field 1) comes after an item.
fn scope_items_one_pass<'a, I: Items>(
    b: &mut Builder,
    mut m: Msg<'a>,
    res: &Level<'a>,
    at: [usize; 2],
) -> R<bool> {
    let mut level = Some(Level::default());
    let mut up = None;
    let mut i = 0;
    while m.more() {
        let (tag, wt) = m.key()?;
        match tag {
            1 => match &mut level {
                Some(level) => scope(m.message(wt, "InstrumentationScope")?, level)?,
                None => return Ok(false),
            },
            2 => {
                let item = m.message(wt, I::NAME)?;
                if let Some(level) = level.take() {
                    up = Some(level.over(res));
                }
                let up = up.as_ref().expect("set at the first item");
                I::item(b, item, up, [at[0], at[1], i])?;
                i += 1;
            }
            3 => drop(m.checked(wt)?),
            _ => m.skip(wt, tag)?,
        }
    }
    Ok(true)
}

/// [`scope_items`] in two passes: the scope wherever it is, then the items.
fn scope_items_two_pass<'a, I: Items>(
    b: &mut Builder,
    m: Msg<'a>,
    res: &Level<'a>,
    at: [usize; 2],
) -> R<()> {
    let mut level = Level::default();
    heads(m, "InstrumentationScope", I::NAME, |h| scope(h, &mut level))?;
    let up = level.over(res);
    children(m, I::NAME, |item, i| {
        I::item(b, item, &up, [at[0], at[1], i])
    })
}

/// A `ResourceSpans` / `ResourceLogs`: its resource first, then its scopes.
fn resource_items<I: Items>(b: &mut Builder, m: Msg<'_>, r: usize) -> R<()> {
    let mut level = Level::default();
    heads(m, "Resource", I::SCOPE, |h| resource(h, &mut level))?;
    children(m, I::SCOPE, |sc, s| scope_items::<I>(b, sc, &level, [r, s]))
}

fn request<I: Items>(body: &[u8], buf: Vec<u8>) -> R<Mapped> {
    // Room for a fencing item per ~200 bytes of body: no list grows for a typical request.
    let mut b = Builder::after(buf, body.len() / 200);
    let mut m = Msg {
        name: I::REQUEST,
        buf: body,
        depth: RECURSION_LIMIT,
    };
    let mut r = 0;
    while m.more() {
        let (tag, wt) = m.key()?;
        match tag {
            1 => {
                resource_items::<I>(&mut b, m.message(wt, I::RESOURCE)?, r)?;
                r += 1;
            }
            _ => m.skip(wt, tag)?,
        }
    }
    Ok(b.finish())
}

/// Maps an OTLP protobuf request body of `signal` to its fencing items, as parsing it with
/// prost and mapping the request would ([`super::map_traces`], [`super::map_logs`]); an
/// error where prost's decoding fails.
pub fn map(signal: Signal, body: &[u8]) -> Result<Mapped, WireError> {
    map_into(signal, body, Vec::new())
}

/// [`map`], the items' WAL form written after what `buf` holds (a WAL payload's header:
/// [`super::Decoded::into_buffer`] is then the payload, written once, in one allocation).
pub fn map_into(signal: Signal, body: &[u8], buf: Vec<u8>) -> Result<Mapped, WireError> {
    match signal {
        Signal::Traces => request::<Spans>(body, buf),
        Signal::Logs => request::<Logs>(body, buf),
    }
    .map_err(|e| *e)
}

#[cfg(test)]
mod tests;
