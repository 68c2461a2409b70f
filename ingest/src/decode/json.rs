//! Strict JSON decoding of schema-v1 events (SPEC §2).
//!
//! One pass of serde_json over the line with a hand-written visitor: known fields are read as
//! scalars without building a `Value`, unknown fields are walked (to enforce the nesting limit
//! and reject duplicate keys at every level) but not kept. A wrong type in one field does not
//! stop the pass, so the error can carry the event time when that parsed (SPEC: a malformed
//! event lands in the window of its `ts`).

use fencewatch_assess::event::{Epoch, Event, Incarnation, Kind, Order, Outcome, Seq};
use fencewatch_assess::time::{Duration, EventTime};
use serde::de::{self, DeserializeSeed, SeqAccess, Visitor};
use std::borrow::Cow;
use std::fmt;

/// The default line size limit: 1 MiB.
pub const DEFAULT_MAX_LINE_BYTES: usize = 1 << 20;
/// Maximum nesting depth of a line (the event object is depth 1).
pub const MAX_DEPTH: usize = 64;

/// Why a line is malformed: the field at fault (when one is) and the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError {
    /// The field, e.g. `epoch`; `None` for errors of the line as a whole.
    pub field: Option<&'static str>,
    /// What is wrong, lowercase, no trailing period.
    pub reason: String,
    /// The event time, when it parsed before the error.
    pub ts: Option<EventTime>,
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.field {
            Some(field) => write!(f, "field `{field}`: {}", self.reason),
            None => f.write_str(&self.reason),
        }
    }
}

impl DecodeError {
    fn line(reason: impl Into<String>) -> DecodeError {
        DecodeError {
            field: None,
            reason: reason.into(),
            ts: None,
        }
    }
}

/// A decoded event whose strings borrow from the line where they had no escapes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decoded<'a> {
    kind: Kind,
    ts: EventTime,
    property: Option<Cow<'a, str>>,
    scope: Option<Cow<'a, str>>,
    epoch: Option<Epoch>,
    route: Option<Cow<'a, str>>,
    outcome: Outcome,
    holder: Option<Cow<'a, str>>,
    op_id: Option<Cow<'a, str>>,
    incarnation: Incarnation,
    order: Option<Order>,
    emitter: Option<Cow<'a, str>>,
    seq: Option<Seq>,
    /// An attestation's own fields, `None` on every other kind.
    attest: Option<Box<AttestFields<'a>>>,
}

/// An attestation's own fields (SPEC §10), boxed: on the lines of every other kind, the
/// common case, they cost one null pointer, not 90 bytes moved with every decoded event.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct AttestFields<'a> {
    premise: Option<Cow<'a, str>>,
    valid_for: Option<Duration>,
    attester: Option<Cow<'a, str>>,
    evidence: Option<Cow<'a, str>>,
    /// The first error in these fields, which matters only when the event is an attestation
    /// (they are ignored on other kinds).
    error: Option<(&'static str, String)>,
}

impl Decoded<'_> {
    /// A decoded event of `ev`'s borrowed strings; `ev` has no attestation field (the fast
    /// path reads none).
    pub(crate) fn borrowed<'a>(ev: Event<'a>) -> Decoded<'a> {
        debug_assert!(ev.premise.is_none() && ev.valid_for.is_none());
        debug_assert!(ev.attester.is_none() && ev.evidence.is_none());
        Decoded {
            kind: ev.kind,
            ts: ev.ts,
            property: ev.property.map(Cow::Borrowed),
            scope: ev.scope.map(Cow::Borrowed),
            epoch: ev.epoch,
            route: ev.route.map(Cow::Borrowed),
            outcome: ev.outcome,
            holder: ev.holder.map(Cow::Borrowed),
            op_id: ev.op_id.map(Cow::Borrowed),
            incarnation: ev.incarnation,
            order: ev.order,
            emitter: ev.emitter.map(Cow::Borrowed),
            seq: ev.seq,
            attest: None,
        }
    }

    /// The event view the core takes.
    #[inline]
    pub fn event(&self) -> Event<'_> {
        let (premise, valid_for, attester, evidence) = match &self.attest {
            None => (None, None, None, None),
            Some(a) => (
                a.premise.as_deref(),
                a.valid_for,
                a.attester.as_deref(),
                a.evidence.as_deref(),
            ),
        };
        Event {
            kind: self.kind,
            ts: self.ts,
            property: self.property.as_deref(),
            scope: self.scope.as_deref(),
            epoch: self.epoch,
            route: self.route.as_deref(),
            outcome: self.outcome,
            holder: self.holder.as_deref(),
            op_id: self.op_id.as_deref(),
            incarnation: self.incarnation,
            order: self.order,
            emitter: self.emitter.as_deref(),
            seq: self.seq,
            premise,
            valid_for,
            attester,
            evidence,
        }
    }
}

/// Whether a line is blank (only spaces, tabs and a carriage return), which NDJSON skips.
pub fn is_blank(line: &[u8]) -> bool {
    line.iter().all(|b| matches!(b, b' ' | b'\t' | b'\r'))
}

/// Decodes one NDJSON line (without its `\n`; a trailing `\r` is allowed). `max_bytes` is the
/// line size limit. Blank lines must be skipped by the caller ([`is_blank`]).
pub fn decode_line(line: &[u8], max_bytes: usize) -> Result<Decoded<'_>, DecodeError> {
    line_limits(line, max_bytes)?;
    let text = utf8(line).map_err(|at| DecodeError::line(format!("invalid UTF-8 at byte {at}")))?;
    decode_str(text)
}

/// [`decode_line`] of a line already known to be UTF-8 (its body was checked whole): the
/// same answer, the same errors.
fn decode_valid_line(line: &str, max_bytes: usize) -> Result<Decoded<'_>, DecodeError> {
    line_limits(line.as_bytes(), max_bytes)?;
    decode_str(line)
}

/// An NDJSON body (a request's, a chunk of a file) checked as UTF-8 at most once, not line by
/// line (simdutf8 a call per line was 3-4% of `check`'s samples), and only when a line needs
/// it: the fast path checks what it reads itself ([`fast::fast_event`]), and a body whose
/// lines it all takes is never checked whole (that was ~5% of `check`'s CPU). The first line
/// it does not take checks the body: when it is valid, so is each of its lines, cut at a
/// newline, an ASCII byte, and each is decoded from its text. When it is not, each line is
/// checked alone, and only its bad ones fail.
#[derive(Debug)]
pub struct Body<'a> {
    bytes: &'a [u8],
    text: std::cell::OnceCell<Option<&'a str>>,
}

impl<'a> Body<'a> {
    /// `bytes`, to be checked when a line needs it.
    pub fn new(bytes: &'a [u8]) -> Body<'a> {
        Body {
            bytes,
            text: std::cell::OnceCell::new(),
        }
    }

    /// [`decode_line`] of `line`, a slice of the body's bytes.
    #[inline]
    pub fn decode_line(
        &self,
        line: &'a [u8],
        max_bytes: usize,
    ) -> Result<Decoded<'a>, DecodeError> {
        match self.line_text(line) {
            Some(text) => decode_valid_line(text, max_bytes),
            None => decode_line(line, max_bytes),
        }
    }

    /// The text of `line`, a slice of the body's bytes, when the body is valid UTF-8.
    #[inline]
    fn line_text(&self, line: &'a [u8]) -> Option<&'a str> {
        let text = (*self.text.get_or_init(|| utf8(self.bytes).ok()))?;
        let at = (line.as_ptr() as usize)
            .checked_sub(self.bytes.as_ptr() as usize)
            .filter(|at| at + line.len() <= self.bytes.len())
            .expect("a line of the body");
        Some(&text[at..at + line.len()])
    }

    /// `f` of the event of [`Body::decode_line`]`(line, max_bytes)`, or its error: a line the
    /// fast path takes becomes the event directly, no [`Decoded`] in between.
    #[inline]
    pub fn with_line<R>(
        &self,
        line: &'a [u8],
        max_bytes: usize,
        f: impl FnOnce(&Event<'_>) -> R,
    ) -> Result<R, DecodeError> {
        // As `decode_line`: the size and byte-order mark first, then the fast path, which
        // takes only valid UTF-8, then the general decoder on the line's text.
        line_limits(line, max_bytes)?;
        // Read in place: moving the event out of the option was a 200-byte copy a line.
        if let Some(ev) = &fast::fast_event(line) {
            return Ok(f(ev));
        }
        self.with_slow_line(line, max_bytes, f)
    }

    /// [`Body::with_line`] of a line the fast path does not take (such as one [`fast_line`]
    /// did not): the general decoder's answer.
    pub fn with_slow_line<R>(
        &self,
        line: &'a [u8],
        max_bytes: usize,
        f: impl FnOnce(&Event<'_>) -> R,
    ) -> Result<R, DecodeError> {
        line_limits(line, max_bytes)?;
        if let Some(text) = self.line_text(line) {
            return decode_slow(text).map(|d| f(&d.event()));
        }
        decode_line(line, max_bytes).map(|d| f(&d.event()))
    }
}

/// The checks of a line before its text: its size and no byte-order mark.
fn line_limits(line: &[u8], max_bytes: usize) -> Result<(), DecodeError> {
    if line.len() > max_bytes {
        return Err(DecodeError::line(format!(
            "line is {} bytes, over the {max_bytes}-byte limit",
            line.len()
        )));
    }
    if line.starts_with(&[0xEF, 0xBB, 0xBF]) {
        return Err(DecodeError::line("byte-order mark is not allowed"));
    }
    Ok(())
}

/// `bytes` as a string, or the offset of its first invalid byte. SIMD validation (std's took 4%
/// of `check`'s instructions); one helper for lines, array bodies and their elements, so each
/// gets the same speed and the same message.
pub(crate) fn utf8(bytes: &[u8]) -> Result<&str, usize> {
    // `basic` is the faster (callgrind: `compat` alone cost `check` +0.5%); `compat` only to
    // place an error.
    simdutf8::basic::from_utf8(bytes)
        .or_else(|_| simdutf8::compat::from_utf8(bytes).map_err(|e| e.valid_up_to()))
}

/// Decodes one JSON object from a string.
pub fn decode_str(text: &str) -> Result<Decoded<'_>, DecodeError> {
    if let Some(d) = fast(text.as_bytes()) {
        return Ok(d);
    }
    decode_slow(text)
}

/// The general decoder: serde_json with the strict visitor. It accepts and rejects exactly what
/// [`decode_str`] does, and is the one that words the errors.
pub fn decode_slow(text: &str) -> Result<Decoded<'_>, DecodeError> {
    let mut de = serde_json::Deserializer::from_str(text);
    let mut state = State::default();
    let result = EventSeed { state: &mut state }
        .deserialize(&mut de)
        .and_then(|()| de.end());
    if let Err(e) = result {
        return Err(DecodeError {
            field: state.field_at_error,
            reason: json_reason(&e),
            ts: state.ts,
        });
    }
    state.finish()
}

/// Why a JSON-array document is refused whole (SPEC §2): it is not well-formed JSON (a syntax
/// error, `NaN`, invalid UTF-8, trailing data) or not an array. Nothing of such a document is
/// kept.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a well-formed JSON array: {0}")]
pub struct ArrayError(pub String);

/// Walks a JSON-array document element by element, checking that the whole document is
/// well-formed JSON, and calls `each` with every element's index and text; returns the count.
/// The elements are not decoded: one that is well-formed but not a valid event (a duplicate
/// key, nesting deeper than [`MAX_DEPTH`], a bad field) is for [`decode_element`] to reject,
/// alone. Nested values are walked without recursion (a deeply nested element costs no stack)
/// and nothing is collected (an array of a million tiny elements costs no memory here).
pub fn for_each_element<'a>(
    body: &'a [u8],
    mut each: impl FnMut(usize, &'a str),
) -> Result<usize, ArrayError> {
    let text = utf8(body).map_err(|at| ArrayError(format!("invalid UTF-8 at byte {at}")))?;
    let mut de = serde_json::Deserializer::from_str(text);
    let mut count = 0;
    Elements {
        each: &mut each,
        count: &mut count,
    }
    .deserialize(&mut de)
    .and_then(|()| de.end())
    .map_err(|e| ArrayError(e.to_string()))?;
    Ok(count)
}

/// The elements of a JSON-array document as texts (see [`for_each_element`]).
pub fn split_array(body: &[u8]) -> Result<Vec<&str>, ArrayError> {
    let mut out = Vec::new();
    for_each_element(body, |_, e| out.push(e))?;
    Ok(out)
}

struct Elements<'e, F> {
    each: &'e mut F,
    count: &'e mut usize,
}

impl<'de, F: FnMut(usize, &'de str)> DeserializeSeed<'de> for Elements<'_, F> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de, F: FnMut(usize, &'de str)> Visitor<'de> for Elements<'_, F> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON array of events")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(raw) = seq.next_element::<&'de serde_json::value::RawValue>()? {
            (self.each)(*self.count, raw.get());
            *self.count += 1;
        }
        Ok(())
    }
}

/// Decodes one element of a JSON array (from [`for_each_element`]) as an event; `max_bytes` is the
/// size limit of an element, as of a line.
pub fn decode_element(text: &str, max_bytes: usize) -> Result<Decoded<'_>, DecodeError> {
    if text.len() > max_bytes {
        return Err(DecodeError::line(format!(
            "element is {} bytes, over the {max_bytes}-byte limit",
            text.len()
        )));
    }
    if !text.starts_with('{') {
        let found = match text.as_bytes().first() {
            Some(b'[') => "an array",
            Some(b'"') => "a string",
            Some(b'n') => "null",
            Some(b't' | b'f') => "a boolean",
            _ => "a number",
        };
        return Err(DecodeError::line(format!(
            "expected an event object, found {found}"
        )));
    }
    decode_str(text)
}

/// Decodes a JSON-array document (an HTTP body, a `.json` file): refused whole when it is not
/// well-formed, else one result per element, in order.
pub fn decode_array(
    body: &[u8],
    max_element_bytes: usize,
) -> Result<Vec<Result<Decoded<'_>, DecodeError>>, ArrayError> {
    Ok(split_array(body)?
        .into_iter()
        .map(|e| decode_element(e, max_element_bytes))
        .collect())
}

/// Bytes of an input value quoted in an error message at most: an error names what it
/// rejected without copying a megabyte of it into every sample and answer.
pub const QUOTED_BYTES: usize = 64;

/// `s` as an error message quotes it: whole when short, else its first [`QUOTED_BYTES`] (at a
/// character boundary) and how long it was.
fn quoted(s: &str) -> Cow<'_, str> {
    if s.len() <= QUOTED_BYTES {
        return Cow::Borrowed(s);
    }
    let mut end = QUOTED_BYTES;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    Cow::Owned(format!("{}… ({} bytes)", &s[..end], s.len()))
}

fn json_reason(e: &serde_json::Error) -> String {
    let s = e.to_string();
    let s = match s.rfind(" at line ") {
        Some(i) => s[..i].to_string(),
        None => s,
    };
    match e.classify() {
        serde_json::error::Category::Eof => format!("truncated JSON: {s}"),
        serde_json::error::Category::Syntax => format!("invalid JSON: {s} (column {})", e.column()),
        _ => s,
    }
}

mod fast;
mod strict;
use fast::fast;
pub(crate) use fast::fast_line;
use strict::{EventSeed, State};

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(s: &str) -> Decoded<'_> {
        decode_line(s.as_bytes(), DEFAULT_MAX_LINE_BYTES).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    fn bad(s: &[u8]) -> DecodeError {
        match decode_line(s, DEFAULT_MAX_LINE_BYTES) {
            Ok(d) => panic!("accepted {:?}: {d:?}", String::from_utf8_lossy(s)),
            Err(e) => e,
        }
    }

    #[test]
    fn decodes_a_full_event() {
        let d = ok(
            r#"{"kind":"commit","ts":"2025-11-29T12:00:02Z","property":"p","scope":"o\u002d1","epoch":41,"route":"r","outcome":"rejected","holder":"a","op_id":"x","incarnation":2,"order":9,"emitter":"e","seq":3,"extra":{"a":[1,2,{"b":null}]}}"#,
        );
        let e = d.event();
        assert_eq!(e.kind, Kind::Commit);
        assert_eq!(e.scope, Some("o-1"));
        assert_eq!(e.epoch, Some(Epoch(41)));
        assert_eq!(e.outcome, Outcome::Rejected);
        assert_eq!(e.incarnation, Incarnation(2));
        assert_eq!(e.order, Some(Order(9)));
        assert_eq!(e.seq, Some(Seq(3)));
        assert_eq!(e.ts.to_string(), "2025-11-29T12:00:02.000000000Z");
    }

    #[test]
    fn nulls_are_absent_and_integers_are_nanoseconds() {
        let d = ok(
            r#"{"kind":"fence","ts":1764417600000000000,"epoch":null,"scope":null,"incarnation":null,"outcome":null}"#,
        );
        let e = d.event();
        assert_eq!(e.epoch, None);
        assert_eq!(e.scope, None);
        assert_eq!(e.incarnation, Incarnation(0));
        assert_eq!(e.ts.0, 1_764_417_600_000_000_000);
    }

    #[test]
    fn malformed_lines_name_their_field() {
        let cases: &[(&[u8], Option<&str>, &str)] = &[
            (
                br#"{"kind":"commit","ts":1,"epoch":"5"}"#,
                Some("epoch"),
                "expected an unsigned",
            ),
            (
                br#"{"kind":"commit","ts":1,"epoch":18446744073709551616}"#,
                Some("epoch"),
                "exceeds",
            ),
            (
                br#"{"kind":"commit","ts":1,"epoch":-1}"#,
                Some("epoch"),
                "negative",
            ),
            (
                br#"{"kind":"commit","ts":1,"epoch":1.5}"#,
                Some("epoch"),
                "integer",
            ),
            (br#"{"kind":"merge","ts":1}"#, Some("kind"), "unknown kind"),
            (
                br#"{"kind":"commit","ts":"12:00Z"}"#,
                Some("ts"),
                "RFC 3339",
            ),
            (br#"{"kind":"commit","ts":-5}"#, Some("ts"), "before 1970"),
            (
                br#"{"kind":"commit","ts":1.5}"#,
                Some("ts"),
                "expected integer",
            ),
            (
                br#"{"kind":"commit","ts":"2025-11-29T12:00:60Z"}"#,
                Some("ts"),
                "range",
            ),
            (br#"{"ts":1}"#, Some("kind"), "required"),
            (br#"{"kind":"commit"}"#, Some("ts"), "required"),
            (
                br#"{"kind":"commit","ts":1,"outcome":"maybe"}"#,
                Some("outcome"),
                "unknown outcome",
            ),
            (
                br#"{"kind":"commit","ts":1,"kind":"fence"}"#,
                Some("kind"),
                "duplicate key",
            ),
            (
                br#"{"kind":"commit","ts":1,"x":1,"x":2}"#,
                None,
                "duplicate key `x`",
            ),
            (
                br#"{"kind":"commit","ts":1,"x":{"y":1,"y":2}}"#,
                None,
                "duplicate key `y`",
            ),
            (br#"{"kind":"commit","ts":NaN}"#, Some("ts"), "invalid JSON"),
            (br#"{"kind":"commit","ts":1"#, None, "truncated"),
            (br#"[1,2]"#, None, "invalid type"),
            (br#"{"kind":"commit","ts":1} x"#, None, "trailing"),
            (
                b"\xEF\xBB\xBF{\"kind\":\"commit\",\"ts\":1}",
                None,
                "byte-order mark",
            ),
            (
                b"{\"kind\":\"commit\",\"ts\":1,\"scope\":\"\xff\"}",
                None,
                "UTF-8",
            ),
        ];
        for (line, field, needle) in cases {
            let e = bad(line);
            assert_eq!(e.field, *field, "{:?}: {e}", String::from_utf8_lossy(line));
            assert!(
                e.to_string().contains(needle),
                "{:?}: {e}",
                String::from_utf8_lossy(line)
            );
        }
    }

    #[test]
    fn decodes_attestations() {
        let d = ok(
            r#"{"kind":"attestation","premise":"conditional_commit","route":"r","ts":"2025-11-29T12:00:00Z","valid_for":"24h","attester":"ci","evidence":"sha256:ab"}"#,
        );
        let e = d.event();
        assert_eq!(e.kind, Kind::Attestation);
        assert_eq!(e.outcome, Outcome::Holds, "holds by default");
        assert_eq!(e.premise, Some("conditional_commit"));
        assert_eq!(e.valid_for, Some(Duration(86_400_000_000_000)));
        assert_eq!((e.attester, e.evidence), (Some("ci"), Some("sha256:ab")));
        assert!(e.validate().is_ok());
        let d = ok(
            r#"{"kind":"attestation","premise":"p","ts":1,"valid_for":5000,"outcome":"failed"}"#,
        );
        assert_eq!(d.event().valid_for, Some(Duration(5000)));
        assert_eq!(d.event().outcome, Outcome::Failed);
        // On another kind the premise fields are ignored, whatever their type.
        let d = ok(r#"{"kind":"commit","ts":1,"premise":7,"valid_for":"soon","evidence":"e"}"#);
        let e = d.event();
        assert_eq!((e.premise, e.valid_for, e.evidence), (None, None, None));
        assert_eq!(e.outcome, Outcome::Committed);
        // `holds` on a commit and `rejected` on an attestation decode, and the core's
        // validation (shared by every source) refuses them.
        let d = ok(r#"{"kind":"commit","ts":1,"outcome":"holds"}"#);
        assert_eq!(d.event().validate().unwrap_err().field(), "outcome");
        let d = ok(r#"{"kind":"attestation","ts":1,"premise":"p","outcome":"rejected"}"#);
        assert_eq!(d.event().validate().unwrap_err().field(), "outcome");
        let d = ok(r#"{"kind":"attestation","ts":1}"#);
        assert_eq!(d.event().validate().unwrap_err().field(), "premise");
        for (line, field, needle) in [
            (
                r#"{"kind":"attestation","ts":1,"premise":"p","valid_for":0}"#,
                "valid_for",
                "greater than zero",
            ),
            (
                r#"{"kind":"attestation","ts":1,"premise":"p","valid_for":"0s"}"#,
                "valid_for",
                "greater than zero",
            ),
            (
                r#"{"kind":"attestation","ts":1,"premise":"p","valid_for":-3}"#,
                "valid_for",
                "negative",
            ),
            (
                r#"{"kind":"attestation","ts":1,"premise":"p","valid_for":9223372036854775808}"#,
                "valid_for",
                "2^63-1",
            ),
            (
                r#"{"kind":"attestation","ts":1,"premise":"p","valid_for":"1d"}"#,
                "valid_for",
                "not a duration",
            ),
            (
                r#"{"kind":"attestation","ts":1,"premise":"p","valid_for":1.5}"#,
                "valid_for",
                "found a number",
            ),
            (
                r#"{"kind":"attestation","ts":1,"premise":5}"#,
                "premise",
                "expected a string",
            ),
            (
                r#"{"premise":["x"],"ts":1,"kind":"attestation"}"#,
                "premise",
                "expected a string",
            ),
            (
                r#"{"kind":"attestation","ts":1,"premise":"p","attester":1}"#,
                "attester",
                "expected a string",
            ),
        ] {
            let e = bad(line.as_bytes());
            assert_eq!(e.field, Some(field), "{line}: {e}");
            assert!(e.to_string().contains(needle), "{line}: {e}");
            assert_eq!(e.ts, Some(EventTime(1)), "{line}");
        }
    }

    #[test]
    fn keeps_the_time_of_a_malformed_event() {
        let e = bad(br#"{"ts":"2025-11-29T12:00:02Z","kind":"commit","epoch":"x"}"#);
        assert_eq!(
            e.ts.map(|t| t.to_string()).as_deref(),
            Some("2025-11-29T12:00:02.000000000Z")
        );
        let e = bad(br#"{"epoch":"x","kind":"commit","ts":"2025-11-29T12:00:02Z"}"#);
        assert!(e.ts.is_some(), "type errors do not stop the pass");
    }

    #[test]
    fn nesting_limit() {
        let deep = |n: usize| {
            format!(
                "{{\"kind\":\"commit\",\"ts\":1,\"x\":{}{}}}",
                "[".repeat(n),
                "]".repeat(n)
            )
        };
        assert!(decode_line(deep(63).as_bytes(), DEFAULT_MAX_LINE_BYTES).is_ok());
        let e = bad(deep(64).as_bytes());
        assert!(e.reason.contains("nesting deeper than 64"), "{e}");
        assert!(bad(deep(100_000).as_bytes()).reason.contains("nesting"));
    }

    #[test]
    fn many_keys_and_their_duplicates() {
        let keys: Vec<String> = (0..30_000)
            .map(|i| format!("\"k{i}\":{{\"a\":1,\"b\":2}}"))
            .collect();
        let line = format!(
            "{{\"kind\":\"heartbeat\",\"route\":\"r\",\"ts\":1,{}}}",
            keys.join(",")
        );
        assert!(line.len() < DEFAULT_MAX_LINE_BYTES);
        assert!(decode_line(line.as_bytes(), DEFAULT_MAX_LINE_BYTES).is_ok());
        let dup = format!("{},\"k7\":0}}", &line[..line.len() - 1]);
        assert!(
            decode_line(dup.as_bytes(), DEFAULT_MAX_LINE_BYTES)
                .unwrap_err()
                .reason
                .contains("duplicate key `k7`")
        );
    }

    #[test]
    fn size_limit() {
        let line = format!(
            "{{\"kind\":\"commit\",\"ts\":1,\"pad\":\"{}\"}}",
            "x".repeat(100)
        );
        assert!(decode_line(line.as_bytes(), 200).is_ok());
        assert!(
            decode_line(line.as_bytes(), 100)
                .unwrap_err()
                .reason
                .contains("over the 100-byte limit")
        );
    }

    #[test]
    fn arrays_decode_per_element() {
        let max = DEFAULT_MAX_LINE_BYTES;
        let out = decode_array(
            br#"[{"kind":"commit","ts":1},{"kind":"x","ts":1},5,{"kind":"heartbeat","ts":2,"route":"r"}]"#,
            max,
        )
        .unwrap();
        assert_eq!(out.len(), 4);
        assert!(out[0].is_ok() && out[1].is_err() && out[2].is_err() && out[3].is_ok());
        assert_eq!(
            out[2].as_ref().unwrap_err().reason,
            "expected an event object, found a number"
        );
        // Not well-formed: refused whole.
        for bad in [
            &br#"[{"kind":"commit","ts":1},{"kind""#[..],
            br#"[{"kind":"commit","ts":1}, NaN]"#,
            br#"[{"kind":"commit","ts":1}] x"#,
            b"[{\"kind\":\"commit\",\"ts\":1,\"x\":\"\xff\"}]",
            br#"{"kind":"commit","ts":1}"#,
        ] {
            assert!(
                decode_array(bad, max).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn errors_quote_long_values_short() {
        let long = "k".repeat(10_000);
        for line in [
            format!(r#"{{"kind":"{long}","ts":1}}"#),
            format!(r#"{{"kind":"commit","ts":"{long}"}}"#),
            format!(r#"{{"kind":"commit","ts":1,"outcome":"{long}"}}"#),
            format!(r#"{{"kind":"commit","ts":1,"{long}":1,"{long}":2}}"#),
            format!(r#"{{"kind":"commit","ts":1,"x":{{"{long}":1,"{long}":2}}}}"#),
        ] {
            let e = bad(line.as_bytes());
            assert!(e.reason.len() < 200, "{}", e.reason);
            assert!(e.reason.contains("(10000 bytes)"), "{}", e.reason);
        }
    }

    #[test]
    fn a_bad_element_costs_only_itself() {
        let max = 200;
        let deep = format!("{}1{}", "[".repeat(100_000), "]".repeat(100_000));
        let body = format!(
            r#"[{{"kind":"commit","ts":1,"kind":"fence"}},{{"kind":"commit","ts":2,"x":{deep}}},{{"kind":"commit","ts":3,"pad":"{}"}},{{"kind":"heartbeat","ts":4,"route":"r"}}]"#,
            "x".repeat(300)
        );
        let out = decode_array(body.as_bytes(), max).unwrap();
        assert_eq!(out.len(), 4);
        assert!(
            out[0]
                .as_ref()
                .unwrap_err()
                .reason
                .contains("duplicate key")
        );
        assert!(
            out[1]
                .as_ref()
                .unwrap_err()
                .reason
                .contains("over the 200-byte limit")
        );
        assert!(
            out[2]
                .as_ref()
                .unwrap_err()
                .reason
                .contains("over the 200-byte limit")
        );
        assert!(out[3].is_ok());
        let nested = format!(
            r#"[{{"kind":"commit","ts":2,"x":{}1{}}},{{"kind":"heartbeat","ts":4,"route":"r"}}]"#,
            "[".repeat(70),
            "]".repeat(70)
        );
        let out = decode_array(nested.as_bytes(), DEFAULT_MAX_LINE_BYTES).unwrap();
        assert!(
            out[0]
                .as_ref()
                .unwrap_err()
                .reason
                .contains("nesting deeper"),
            "{:?}",
            out[0]
        );
        assert!(out[1].is_ok());
    }

    fn arb_line() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let key = prop_oneof![
            Just("kind".to_string()),
            Just("ts".to_string()),
            Just("scope".to_string()),
            Just("epoch".to_string()),
            Just("route".to_string()),
            Just("outcome".to_string()),
            Just("seq".to_string()),
            Just("order".to_string()),
            Just("premise".to_string()),
            Just("valid_for".to_string()),
            Just("x".to_string()),
            Just("k\\u0069nd".to_string()),
            Just("holder".to_string()),
            Just("emitter".to_string()),
            Just("op_id".to_string()),
            Just("property".to_string()),
            Just("incarnation".to_string()),
            // Near misses of the keys the fast path knows by one load and compare.
            Just("kin".to_string()),
            Just("kinds".to_string()),
            Just("emitte".to_string()),
            Just("emitters".to_string()),
            Just("seqs".to_string()),
            Just("t".to_string()),
            Just("\\u0074s".to_string())
        ];
        let value = prop_oneof![
            Just("\"commit\"".to_string()),
            Just("\"grant\"".to_string()),
            Just("\"heartbeat\"".to_string()),
            Just("\"attestation\"".to_string()),
            Just("\"rejected\"".to_string()),
            Just("\"failed\"".to_string()),
            Just("\"1h\"".to_string()),
            Just("\"2025-11-29T12:00:00Z\"".to_string()),
            Just("null".to_string()),
            Just("\"s\\\"1\"".to_string()),
            Just("\"\"".to_string()),
            // Non-ASCII text: read by the fast path, which checks it as UTF-8 itself.
            Just("\"ordre-é\"".to_string()),
            Just("\"注文-1\"".to_string()),
            Just("\"𝄞\"".to_string()),
            Just("true".to_string()),
            Just("[1]".to_string()),
            (0u64..3).prop_map(|n| n.to_string()),
            Just("007".to_string()),
            Just("-1".to_string()),
            Just("1.0".to_string()),
            Just("1e3".to_string()),
            Just("18446744073709551615".to_string()),
            Just("18446744073709551616".to_string()),
            Just("9223372036854775808".to_string()),
            // Eight digits at a time in the fast path: runs of 8, 16 and 19 digits, a leading
            // zero, a fraction or exponent after a full run, one digit over u64::MAX.
            Just("12345678".to_string()),
            Just("1234567812345678".to_string()),
            Just("1764417600000000000".to_string()),
            Just("01234567".to_string()),
            Just("12345678.5".to_string()),
            Just("1234567812345678e2".to_string()),
            Just("99999999999999999999".to_string()),
            Just("184467440737095516150".to_string()),
        ];
        let ws = prop_oneof![Just(""), Just(" "), Just("\t"), Just(" \r")];
        (
            prop::collection::vec((key, value, ws.clone()), 0..7),
            ws,
            any::<bool>(),
        )
            .prop_map(|(kvs, w, trailing)| {
                let body: Vec<String> = kvs
                    .iter()
                    .map(|(k, v, w)| format!("{w}\"{k}\"{w}:{w}{v}{w}"))
                    .collect();
                format!(
                    "{w}{{{}}}{w}{}",
                    body.join(","),
                    if trailing { "" } else { "x" }
                )
            })
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 5000, ..Default::default() })]
        #[test]
        fn fast_path_agrees_with_the_general_decoder(line in arb_line()) {
            let slow = decode_slow(&line);
            if let Some(fast) = fast(line.as_bytes()) {
                proptest::prop_assert_eq!(Ok(fast), slow, "fast path accepted {}", line);
            }
            proptest::prop_assert_eq!(decode_str(&line), decode_slow(&line));
        }

        #[test]
        fn the_fast_path_takes_no_line_that_is_not_utf8(
            line in arb_line(),
            at in proptest::prelude::any::<proptest::sample::Index>(),
            stray in proptest::prop_oneof![
                proptest::prelude::Just(vec![0x80u8]),
                proptest::prelude::Just(vec![0xffu8]),
                proptest::prelude::Just(vec![0xc3u8]),
                proptest::prelude::Just(vec![0xe2u8, 0x82]),
                proptest::prelude::Just(vec![0xedu8, 0xa0, 0x80]),
                proptest::prelude::Just(vec![0xc0u8, 0xaf]),
            ],
        ) {
            // The line's bytes with a bad sequence inserted anywhere (inside a string, a key,
            // a number, between tokens): the fast path, which no longer relies on a body
            // checked whole, must not take it, and a body must answer as for the line alone.
            let mut bad = line.into_bytes();
            let i = at.index(bad.len() + 1);
            bad.splice(i..i, stray);
            proptest::prop_assert!(std::str::from_utf8(&bad).is_err());
            proptest::prop_assert!(fast(&bad).is_none());
            let want = decode_line(&bad, DEFAULT_MAX_LINE_BYTES);
            proptest::prop_assert!(want.is_err());
            let body = [b"{}\n".as_slice(), &bad, b"\n"].concat();
            let whole = Body::new(&body);
            let got = whole.with_line(&body[3..3 + bad.len()], DEFAULT_MAX_LINE_BYTES, |ev| format!("{ev:?}"));
            proptest::prop_assert_eq!(got, want.map(|d| format!("{:?}", d.event())));
        }

        #[test]
        fn a_line_known_to_be_utf8_decodes_as_its_bytes_do(
            line in arb_line(),
            bom in proptest::prelude::any::<bool>(),
            cr in proptest::prelude::any::<bool>(),
            max in proptest::prop_oneof![proptest::prelude::Just(DEFAULT_MAX_LINE_BYTES), 0usize..64],
        ) {
            // A chunk checked whole hands each line over as text: the same answers and errors
            // (size, byte-order mark, then the JSON) as the line's bytes get.
            let line = format!("{}{line}{}", if bom { "\u{feff}" } else { "" }, if cr { "\r" } else { "" });
            proptest::prop_assert_eq!(
                decode_valid_line(&line, max),
                decode_line(line.as_bytes(), max)
            );
            // And through a body: valid whole, then with a bad line before it.
            let body = format!("{{}}\n{line}\n");
            let at = 3..3 + line.len();
            let whole = Body::new(body.as_bytes());
            proptest::prop_assert_eq!(
                whole.decode_line(&body.as_bytes()[at.clone()], max),
                decode_line(line.as_bytes(), max)
            );
            let want = decode_line(line.as_bytes(), max);
            let want_event = want.as_ref().map(|d| format!("{:?}", d.event())).map_err(Clone::clone);
            proptest::prop_assert_eq!(
                whole.with_line(&body.as_bytes()[at.clone()], max, |ev| format!("{ev:?}")),
                want_event.clone()
            );
            let mut bad = body.clone().into_bytes();
            bad[1] = 0xff;
            let broken = Body::new(&bad);
            proptest::prop_assert_eq!(
                broken.with_line(&bad[at.clone()], max, |ev| format!("{ev:?}")),
                want_event
            );
            proptest::prop_assert_eq!(
                broken.decode_line(&bad[at], max),
                decode_line(line.as_bytes(), max)
            );
        }

        #[test]
        fn utf8_places_the_first_bad_byte_as_std_does(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..80),
            text in "\\PC{0,40}",
        ) {
            // Raw bytes (mostly invalid) and valid text with one stray byte inside.
            let mut mixed = text.clone().into_bytes();
            mixed.insert(mixed.len() / 2, 0x80);
            for b in [&bytes[..], text.as_bytes(), &mixed[..]] {
                let want = std::str::from_utf8(b).map_err(|e| e.valid_up_to());
                proptest::prop_assert_eq!(utf8(b), want);
            }
        }
    }

    #[test]
    fn fast_path_takes_the_common_line() {
        let line = r#"{"kind":"commit","ts":1764417600000000000,"scope":"order-1","epoch":41,"route":"r","holder":"a","emitter":"e","seq":9}"#;
        assert!(fast(line.as_bytes()).is_some());
        let line = r#"{"kind":"commit","ts":"2025-11-29T12:00:00Z","scope":null}"#;
        assert!(fast(line.as_bytes()).is_some());
        // An attestation's own fields are the general decoder's (SPEC §10: rare lines).
        let line = r#"{"kind":"attestation","ts":1,"premise":"durable_fence"}"#;
        assert!(fast(line.as_bytes()).is_none());
        assert_eq!(
            decode_str(line).unwrap().event().premise,
            Some("durable_fence")
        );
    }
}
