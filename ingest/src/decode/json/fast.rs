//! The fast path of [`decode_str`](super::decode_str): a flat object of known fields whose
//! values are escape-free strings, non-negative integers or `null`, with no duplicate key and
//! nothing after it but whitespace — what well-behaved emitters send. Anything else, valid or
//! not, returns `None` and goes to [`decode_slow`](super::decode_slow), so the fast path never
//! has to word an error and never accepts a line the general decoder would reject.
//!
//! It keeps what it reads in locals and builds the [`Decoded`] once, at the end: no visitor
//! state, no error, no key set moved around per line. An attestation's own fields (SPEC §10)
//! are left to the general decoder, so the common line carries no attestation state here.

use super::Decoded;
use super::strict::{FIRST_ATTESTATION_FIELD, field_index};
use fencewatch_assess::event::{Epoch, Event, Incarnation, Kind, Order, Outcome, Seq};
use fencewatch_assess::time::EventTime;

/// A value the fast path reads.
enum Value<'a> {
    Null,
    Str(&'a str),
    U64(u64),
}

/// Decodes line `b` when it is a line the fast path takes (module docs).
#[inline]
pub(super) fn fast(b: &[u8]) -> Option<Decoded<'_>> {
    fast_event(b).map(Decoded::borrowed)
}

/// [`fast`], as the event itself: what `check` reads of a line, without the owned-or-borrowed
/// strings of a [`Decoded`] built, moved through two results and dropped (~3% of its
/// instructions). No attestation field is ever set (they go to the general decoder).
/// Inlined into its callers: in another codegen unit, returning the event costs a copy.
///
/// It reads bytes, not text: a line it takes is valid UTF-8 (all it reads outside strings is
/// ASCII, and [`string_end`] checks each string), so its caller need not check the line, or
/// the chunk it is cut from, first (that check was ~5% of `check`'s CPU). A line that is not
/// valid UTF-8 is never taken: it goes to the general decoder, which words the error.
#[inline]
pub(super) fn fast_event<'a>(b: &'a [u8]) -> Option<Event<'a>> {
    scan::<false>(b).map(|(ev, _)| ev)
}

/// [`fast_event`] of the line at the start of `rest` (the rest of an NDJSON chunk), cut where
/// it ends, not before: the event, and the end of its line (the index of its `\n`, or
/// `rest.len()`). What reads a chunk then finds no line's end ahead of decoding it (memchr was
/// ~2% of `check`'s CPU). The line is that of [`fast_event`]`(&rest[..end])`, an optional
/// `\r` before its `\n` as whitespace; `None` for a line it does not take.
#[inline]
pub(crate) fn fast_line(rest: &[u8]) -> Option<(Event<'_>, usize)> {
    scan::<true>(rest)
}

/// [`fast_event`] (`LINE_OF_CHUNK` false: `b` is the line) or [`fast_line`] (true: `b` is the
/// rest of a chunk, and whitespace does not include `\n`, which ends the line).
#[inline]
fn scan<'a, const LINE_OF_CHUNK: bool>(b: &'a [u8]) -> Option<(Event<'a>, usize)> {
    // Whitespace is rare between tokens: one compare when there is none.
    let ws = |i: &mut usize| {
        while let Some(&c @ (b' ' | b'\t' | b'\n' | b'\r')) = b.get(*i) {
            if LINE_OF_CHUNK && c == b'\n' {
                break;
            }
            *i += 1;
        }
    };
    // The next byte that is not whitespace, `*i` moved to it: one load and one compare when
    // it is the next byte (whitespace is at most a space), the byte then read once rather
    // than by a skip and again by the caller's check.
    let peek = |i: &mut usize| -> Option<u8> {
        let c = *b.get(*i)?;
        if c > b' ' {
            return Some(c);
        }
        ws(i);
        b.get(*i).copied()
    };
    let string = |i: usize| string(b, i);
    let mut kind = None;
    let mut ts = None;
    // property, scope, route, holder, op_id, emitter.
    let mut strs: [Option<&'a str>; 6] = [None; 6];
    let mut epoch = None;
    let mut outcome = None;
    let mut incarnation = 0;
    let mut order = None;
    let mut seq = None;
    let mut seen = 0u32;
    let mut i = 0;
    if peek(&mut i)? != b'{' {
        return None;
    }
    i += 1;
    if peek(&mut i)? == b'}' {
        i += 1;
    } else {
        loop {
            if peek(&mut i)? != b'"' {
                return None;
            }
            let (f, kend) = match known_key(b, i + 1) {
                Some(k) => k,
                None => {
                    let (key, kend) = string(i + 1)?;
                    (field_index(key)?, kend)
                }
            };
            if f >= FIRST_ATTESTATION_FIELD || seen & (1 << f) != 0 {
                return None;
            }
            seen |= 1 << f;
            i = kend + 1;
            if peek(&mut i)? != b':' {
                return None;
            }
            i += 1;
            let v = match peek(&mut i)? {
                b'"' => {
                    let (text, end) = string(i + 1)?;
                    let v = Value::Str(text);
                    i = end + 1;
                    v
                }
                b'n' if b.get(i..i + 4) == Some(b"null") => {
                    i += 4;
                    Value::Null
                }
                b'0'..=b'9' => {
                    let start = i;
                    let n = number(b, &mut i)?;
                    if (b[start] == b'0' && i - start > 1)
                        || matches!(b.get(i), Some(b'.' | b'e' | b'E'))
                    {
                        return None;
                    }
                    Value::U64(n)
                }
                _ => return None,
            };
            // As the general decoder's `apply` takes them; any error is its to word.
            match (f, v) {
                (0, Value::Str(s)) => kind = Some(Kind::parse(s)?),
                (1, Value::U64(n)) => ts = Some(EventTime::from_nanos(i128::from(n)).ok()?),
                (1, Value::Str(s)) => ts = Some(EventTime::parse_rfc3339(s).ok()?),
                (0 | 1, _) => return None,
                (6, Value::Str(s)) => outcome = Some(Outcome::parse(s)?),
                (2 | 3 | 5 | 7 | 8 | 11, Value::Str(s)) => strs[str_slot(f)] = Some(s),
                (4, Value::U64(n)) => epoch = Some(Epoch(n)),
                (9, Value::U64(n)) => incarnation = n,
                (10, Value::U64(n)) => order = Some(Order(n)),
                (12, Value::U64(n)) => seq = Some(Seq(n)),
                // Absent, as a missing field is.
                (_, Value::Null) => {}
                _ => return None,
            }
            match peek(&mut i)? {
                b',' => i += 1,
                b'}' => {
                    i += 1;
                    break;
                }
                _ => return None,
            }
        }
    }
    ws(&mut i);
    if i != b.len() && !(LINE_OF_CHUNK && b[i] == b'\n') {
        return None;
    }
    let (kind, ts) = (kind?, ts?);
    let [property, scope, route, holder, op_id, emitter] = strs;
    let ev = Event {
        kind,
        ts,
        property,
        scope,
        epoch,
        route,
        outcome: outcome.unwrap_or(Outcome::default_of(kind)),
        holder,
        op_id,
        incarnation: Incarnation(incarnation),
        order,
        emitter,
        seq,
        premise: None,
        valid_for: None,
        attester: None,
        evidence: None,
    };
    Some((ev, i))
}

/// The field and closing quote of the key whose text starts at `i` (after its opening quote)
/// when it is one of the common keys, told by one 8-byte load and compare: `None` for any
/// other text (the caller then reads the key as any string).
#[inline]
fn known_key(b: &[u8], i: usize) -> Option<(usize, usize)> {
    /// `key` and its closing quote, little-endian, and the mask of their bytes.
    const fn pattern(key: &[u8]) -> (u64, u64) {
        let mut bytes = [0u8; 8];
        let mut k = 0;
        while k < key.len() {
            bytes[k] = key[k];
            k += 1;
        }
        bytes[key.len()] = b'"';
        let n = key.len() + 1;
        let mask = if n == 8 {
            u64::MAX
        } else {
            (1u64 << (8 * n)) - 1
        };
        (u64::from_le_bytes(bytes), mask)
    }
    // (first byte, pattern, mask, field index in `FIELDS`, key length).
    const KEYS: [(u8, (u64, u64), usize, usize); 10] = [
        (b'k', pattern(b"kind"), 0, 4),
        (b't', pattern(b"ts"), 1, 2),
        (b's', pattern(b"scope"), 3, 5),
        (b'e', pattern(b"epoch"), 4, 5),
        (b'r', pattern(b"route"), 5, 5),
        (b'o', pattern(b"outcome"), 6, 7),
        (b'h', pattern(b"holder"), 7, 6),
        (b'o', pattern(b"order"), 10, 5),
        (b'e', pattern(b"emitter"), 11, 7),
        (b's', pattern(b"seq"), 12, 3),
    ];
    let w = u64::from_le_bytes(b.get(i..i + 8)?.try_into().expect("eight bytes"));
    let first = w as u8;
    KEYS.iter()
        .find(|(c, (p, m), _, _)| *c == first && w & m == *p)
        .map(|&(_, _, f, len)| (f, i + len))
}

/// The escape-free string of `b` that starts at `start` (after its opening quote), and its
/// end (the closing quote): [`string_end`], as text.
#[inline]
fn string(b: &[u8], start: usize) -> Option<(&str, usize)> {
    let end = string_end(b, start)?;
    let s = &b[start..end];
    debug_assert!(std::str::from_utf8(s).is_ok(), "{s:?}");
    // SAFETY: `string_end` returns `Some(end)` only when `b[start..end]` is valid UTF-8 (all
    // ASCII, or checked as UTF-8 whole).
    #[allow(unsafe_code)]
    let text = unsafe { std::str::from_utf8_unchecked(s) };
    Some((text, end))
}

/// The end (the closing quote) of the escape-free string of `b` that starts at `i`, after its
/// opening quote: `None` at a backslash, a control character or the end of `b` first, or when
/// the string is not valid UTF-8. Sixteen bytes at a time while they are ASCII ([`special16`],
/// on x86_64: the 8-byte loop alone took 77 instructions a string in `check`, this 57, and
/// decoding 3-4% less time in `cargo bench`), then eight (the strings of a line are short,
/// and memchr's setup cost more than the scan), then byte by byte; a string with a byte of
/// 0x80 or above is finished and checked as UTF-8 by [`non_ascii_end`].
/// Inlined: left to the compiler, a change elsewhere in the crate once moved it out of
/// [`fast`] (+1.6% of `check`'s instructions).
#[inline]
fn string_end(b: &[u8], start: usize) -> Option<usize> {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGH: u64 = u64::from_ne_bytes([0x80; 8]);
    // The high bit of each byte of `x` that is zero (exact up to the first such byte).
    let zero = |x: u64| x.wrapping_sub(ONES) & !x & HIGH;
    // What the first special byte `at` (`"`, `\`, below 0x20 or 0x80 and above) makes of it.
    let ended_at = |at: usize| match b[at] {
        b'"' => Some(at),
        0x80.. => non_ascii_end(b, start, at),
        _ => None,
    };
    let mut i = start;
    #[cfg(target_arch = "x86_64")]
    while let Some(chunk) = b.get(i..i + 16) {
        let special = special16(chunk.try_into().expect("sixteen bytes"));
        if special != 0 {
            return ended_at(i + special.trailing_zeros() as usize);
        }
        i += 16;
    }
    while let Some(chunk) = b.get(i..i + 8) {
        let v = u64::from_le_bytes(chunk.try_into().expect("eight bytes"));
        // Bytes that are `"`, `\`, below 0x20 or 0x80 and above (exact up to the first).
        let special = zero(v ^ (ONES * u64::from(b'"')))
            | zero(v ^ (ONES * u64::from(b'\\')))
            | (v.wrapping_sub(ONES * 0x20) & !v & HIGH)
            | (v & HIGH);
        if special != 0 {
            return ended_at(i + (special.trailing_zeros() / 8) as usize);
        }
        i += 8;
    }
    loop {
        match *b.get(i)? {
            b'"' => return Some(i),
            b'\\' | 0..=0x1f => return None,
            0x80.. => return non_ascii_end(b, start, i),
            _ => i += 1,
        }
    }
}

/// A bit for each of the sixteen bytes that is `"`, `\`, below 0x20 or 0x80 and above (the
/// first byte the lowest bit): one compare of each kind for all sixteen (SSE2, in every
/// x86_64 CPU).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn special16(bytes: &[u8; 16]) -> u32 {
    use std::arch::x86_64::{
        __m128i, _mm_cmpeq_epi8, _mm_cmplt_epi8, _mm_loadu_si128, _mm_movemask_epi8, _mm_or_si128,
        _mm_set1_epi8,
    };
    // SAFETY: an unaligned load of the sixteen bytes of `bytes`; SSE2, which every intrinsic
    // here needs, is in every x86_64 CPU (the architecture's baseline).
    #[allow(unsafe_code)]
    unsafe {
        let x = _mm_loadu_si128(bytes.as_ptr().cast::<__m128i>());
        let quote = _mm_cmpeq_epi8(x, _mm_set1_epi8(b'"' as i8));
        let backslash = _mm_cmpeq_epi8(x, _mm_set1_epi8(b'\\' as i8));
        // Signed: below 0x20 are the control characters and, as negative bytes, 0x80 and up.
        let below = _mm_cmplt_epi8(x, _mm_set1_epi8(0x20));
        _mm_movemask_epi8(_mm_or_si128(_mm_or_si128(quote, backslash), below)) as u32
    }
}

/// [`string_end`] of the string from `start` whose first byte of 0x80 or above is at `at`:
/// its end, when the whole string is valid UTF-8 (rare in events: out of line).
#[cold]
#[inline(never)]
fn non_ascii_end(b: &[u8], start: usize, at: usize) -> Option<usize> {
    let end = at
        + b[at..]
            .iter()
            .position(|&c| c == b'"' || c == b'\\' || c < 0x20)?;
    (b[end] == b'"' && simdutf8::basic::from_utf8(&b[start..end]).is_ok()).then_some(end)
}

/// The unsigned integer of the digits of `b` from `*i` (at least one), which `*i` is moved
/// past: `None` when it is over `u64::MAX`. Eight bytes at a time: while eight digits follow
/// (an event time has nineteen) they are added whole; the digits before the first non-digit
/// of the last eight bytes are added at once, padded with leading zeros (a digit at a time,
/// each a checked multiply whose result went through the stack, was a quarter of the fast
/// path's samples: `epoch` and `seq` are a digit or two, and a time ends in three).
/// Always inlined: out of line (once the scanner was inlined into the chunk's loop), `*i`
/// went through memory, and it was ~11% of `check`'s CPU.
#[inline(always)]
fn number(b: &[u8], i: &mut usize) -> Option<u64> {
    const ZEROS: u64 = u64::from_ne_bytes([b'0'; 8]);
    let mut n: u64 = 0;
    loop {
        let Some(v) = load8(b, *i) else {
            // A line of fewer than eight bytes: one by one.
            while let Some(&c @ b'0'..=b'9') = b.get(*i) {
                n = n.checked_mul(10)?.checked_add(u64::from(c - b'0'))?;
                *i += 1;
            }
            return Some(n);
        };
        let t = (non_digits(v).trailing_zeros() / 8) as usize;
        if t == 8 {
            n = n
                .checked_mul(100_000_000)?
                .checked_add(eight_digits_value(v))?;
            *i += 8;
            continue;
        }
        if t > 0 {
            // The `t` digits moved to the high bytes, zeros before them.
            let w = (v << (8 * (8 - t))) | (ZEROS >> (8 * t));
            n = n
                .checked_mul(POW10[t])?
                .checked_add(eight_digits_value(w))?;
            *i += t;
        }
        return Some(n);
    }
}

/// Powers of ten below 10^8.
const POW10: [u64; 8] = [1, 10, 100, 1_000, 10_000, 100_000, 1_000_000, 10_000_000];

/// The eight bytes of `b` from `i`, little-endian; near the end of `b`, the bytes left there
/// with zero bytes (never a digit) after them. `None` when `b` is shorter than eight bytes.
#[inline]
fn load8(b: &[u8], i: usize) -> Option<u64> {
    if let Some(chunk) = b.get(i..i + 8) {
        return Some(u64::from_le_bytes(chunk.try_into().expect("eight bytes")));
    }
    let tail = b.len().checked_sub(8)?;
    let v = u64::from_le_bytes(b[tail..].try_into().expect("eight bytes"));
    // `i` is past `tail`: drop the bytes before it.
    Some(
        v.checked_shr(8 * (i.checked_sub(tail)? as u32))
            .unwrap_or(0),
    )
}

/// The high bit of each byte of `v` that is not an ASCII digit, exact up to and including the
/// first such byte (a carry out of a byte of 0xFA or more can only disturb the bytes after it).
#[inline]
fn non_digits(v: u64) -> u64 {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const LOW7: u64 = u64::from_ne_bytes([0x7F; 8]);
    // Zero in each byte that is a digit: its high nibble 3 and adding 6 keeps it 3.
    let x = ((v & (ONES * 0xF0)) | ((v.wrapping_add(ONES * 0x06) & (ONES * 0xF0)) >> 4))
        ^ (ONES * 0x33);
    (((x & LOW7) + LOW7) | x) & !LOW7
}

/// The value of eight ASCII digits (little-endian in `v`, so the first digit is the most
/// significant): pairs, then quads, then the whole, each step one multiply and mask.
#[inline]
fn eight_digits_value(v: u64) -> u64 {
    let v = v - u64::from_ne_bytes([b'0'; 8]);
    let v = (v.wrapping_mul(10) + (v >> 8)) & 0x00FF_00FF_00FF_00FF;
    let v = (v.wrapping_mul(100) + (v >> 16)) & 0x0000_FFFF_0000_FFFF;
    (v.wrapping_mul(10_000) + (v >> 32)) & 0xFFFF_FFFF
}

/// The slot in `strs` of string field `f` (an index of `FIELDS`).
fn str_slot(f: usize) -> usize {
    match f {
        2 => 0,
        3 => 1,
        5 => 2,
        7 => 3,
        8 => 4,
        _ => 5,
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::Strategy as _;

    #[test]
    fn known_keys_are_the_common_fields() {
        for key in [
            "kind", "ts", "scope", "epoch", "route", "outcome", "holder", "order", "emitter", "seq",
        ] {
            let line = format!("{key}\":0,\"x\":1}}");
            let f = super::field_index(key).unwrap();
            assert_eq!(
                super::known_key(line.as_bytes(), 0),
                Some((f, key.len())),
                "{key}"
            );
        }
        for miss in [
            "kin\"", "kinds\"", "emitte\"", "emitters", "seqs\"", "t\"", "tss\"", "order_\"",
        ] {
            let line = format!("{miss}:0}}");
            assert_eq!(super::known_key(line.as_bytes(), 0), None, "{miss}");
        }
    }

    #[test]
    fn numbers_eight_digits_at_a_time() {
        for text in [
            "0",
            "7",
            "12345678",
            "123456789",
            "1764417600000000000",
            "18446744073709551615",
            "99999999999999999999",
            "18446744073709551616",
            "00000000000000000000000000001",
        ] {
            for tail in ["", "}", ",\"x\":1}", "12345678"] {
                let line = format!("{text}{tail}");
                let digits = line.bytes().take_while(u8::is_ascii_digit).count();
                let mut i = 0;
                let got = super::number(line.as_bytes(), &mut i);
                let want = line[..digits].parse::<u64>().ok();
                assert_eq!(got, want, "{line}");
                if want.is_some() {
                    assert_eq!(i, digits, "{line}");
                }
            }
        }
        for v in [
            *b"12345678",
            *b"1234567/",
            *b"1234567:",
            *b"a2345678",
            *b"\xb22345678",
        ] {
            let all = v.iter().all(u8::is_ascii_digit);
            assert_eq!(super::non_digits(u64::from_le_bytes(v)) == 0, all, "{v:?}");
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 5000, ..Default::default() })]
        #[test]
        fn known_keys_are_read_as_any_key_is(
            key in proptest::collection::vec(proptest::prop_oneof![
                proptest::prelude::Just(b'"'),
                proptest::prelude::Just(b'\\'),
                proptest::prelude::Just(b'_'),
                proptest::sample::select(b"kindtscopehrmqua".to_vec()),
            ], 0..12),
            known in proptest::sample::select(super::super::strict::FIELDS.to_vec()),
            whole in proptest::prelude::any::<bool>(),
        ) {
            // A known key, or an arbitrary text, then a quote and a tail.
            let mut line = if whole { known.as_bytes().to_vec() } else { key };
            line.extend_from_slice(b"\":1}");
            if let Some((f, end)) = super::known_key(&line, 0) {
                let want_end = super::string_end(&line, 0);
                proptest::prop_assert_eq!(Some(end), want_end);
                let text = std::str::from_utf8(&line[..end]).unwrap();
                proptest::prop_assert_eq!(super::field_index(text), Some(f));
            }
        }

        #[test]
        fn eight_digits_is_exact(v in proptest::prelude::any::<[u8; 8]>(), n in 0u64..100_000_000) {
            let all = v.iter().all(u8::is_ascii_digit);
            let first = v.iter().position(|c| !c.is_ascii_digit()).unwrap_or(8);
            let mask = super::non_digits(u64::from_le_bytes(v));
            proptest::prop_assert_eq!(mask == 0, all);
            proptest::prop_assert_eq!((mask.trailing_zeros() / 8) as usize, first);
            let text = format!("{n:08}");
            let w = u64::from_le_bytes(text.as_bytes().try_into().unwrap());
            proptest::prop_assert_eq!(super::non_digits(w), 0);
            proptest::prop_assert_eq!(super::eight_digits_value(w), n);
        }

        #[test]
        fn number_reads_the_digits_wherever_the_line_ends(
            digits in "[0-9]{1,24}",
            tail in proptest::prop_oneof![
                proptest::prelude::Just(String::new()),
                "[}, 0-9a-z\\x00\\xff]{1,10}",
            ],
            lead in "[ a-z\"]{0,10}",
        ) {
            // The digits anywhere in a line, the line ending at them or a few bytes later.
            let line = format!("{lead}{digits}{tail}");
            let b = line.as_bytes();
            let start = lead.len();
            let n = b[start..].iter().take_while(|c| c.is_ascii_digit()).count();
            let mut i = start;
            let got = super::number(b, &mut i);
            let want = line[start..start + n].parse::<u64>().ok();
            proptest::prop_assert_eq!(got, want, "{:?}", line);
            if want.is_some() {
                proptest::prop_assert_eq!(i, start + n);
            }
        }

        #[test]
        fn string_end_finds_the_first_quote_of_an_escape_free_utf8_string(
            // Letters mostly: runs across the sixteen- and eight-byte blocks before the first
            // byte that ends the scan.
            pieces in proptest::collection::vec(proptest::prop_oneof![
                3 => (b'a'..=b'z').prop_map(|c| vec![c]),
                1 => proptest::prop_oneof![
                    proptest::prelude::Just(vec![b'"']),
                    proptest::prelude::Just(vec![b'\\']),
                    proptest::prelude::Just(vec![0x1fu8]),
                    proptest::prelude::Just(vec![0x00u8]),
                    proptest::prelude::Just(vec![0x20u8]),
                    proptest::prelude::Just(vec![0x7fu8]),
                    // Stray and truncated sequences, and whole characters of two, three and four
                    // bytes.
                    proptest::prelude::Just(vec![0x80u8]),
                    proptest::prelude::Just(vec![0xffu8]),
                    proptest::prelude::Just(vec![0xc3u8]),
                    proptest::prelude::Just(vec![0xe2u8, 0x82]),
                    proptest::prelude::Just("é".as_bytes().to_vec()),
                    proptest::prelude::Just("€".as_bytes().to_vec()),
                    proptest::prelude::Just("𝄞".as_bytes().to_vec()),
                ],
            ], 0..80),
            start in 0usize..12,
        ) {
            let bytes = pieces.concat();
            let start = start.min(bytes.len());
            // The first quote, backslash or control byte; a quote ends the string when what
            // it closes is valid UTF-8.
            let want = bytes[start..]
                .iter()
                .position(|&c| c == b'"' || c == b'\\' || c < 0x20)
                .map(|n| start + n)
                .filter(|&at| bytes[at] == b'"' && std::str::from_utf8(&bytes[start..at]).is_ok());
            proptest::prop_assert_eq!(super::string_end(&bytes, start), want);
        }
    }
}
