//! OTLP/JSON times written as JSON numbers. The OTLP/JSON encoding follows protobuf's JSON
//! mapping, under which a 64-bit integer is a decimal string *or* a number: most exporters
//! write strings, opentelemetry-proto's serde reads only strings. A body with a time written as
//! a JSON integer is read with those integers quoted ([`quote_times`], a scan of the body before
//! it is parsed once); everything else is read as opentelemetry-proto reads it.

/// The OTLP/JSON keys of 64-bit times (spans, span events, log records): the only 64-bit
/// integers in a trace or logs request besides attribute values (`intValue`, which
/// opentelemetry-proto reads either way).
const TIME_KEYS: [&[u8]; 4] = [
    b"startTimeUnixNano",
    b"endTimeUnixNano",
    b"timeUnixNano",
    b"observedTimeUnixNano",
];

/// `body` with each number that is the value of a [`TIME_KEYS`] key put in quotes, or `None`
/// if there is none (or the text is not JSON enough to tell keys from values: it is refused
/// as it was). One pass over the bytes, a copy of the body.
pub(super) fn quote_times(body: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let mut copied = 0;
    let mut i = 0;
    while i < body.len() {
        match body[i] {
            b'"' => {
                let end = string_end(body, i)?;
                let key = &body[i + 1..end];
                i = end + 1;
                let colon = skip_space(body, i);
                if body.get(colon) != Some(&b':') || !TIME_KEYS.contains(&key) {
                    continue;
                }
                let start = skip_space(body, colon + 1);
                let len = integer_len(&body[start..]);
                if len == 0 {
                    i = start;
                    continue;
                }
                if copied == 0 {
                    // Two quotes a time: most bodies have one to four.
                    out.reserve(body.len() + 64);
                }
                out.extend_from_slice(&body[copied..start]);
                out.push(b'"');
                out.extend_from_slice(&body[start..start + len]);
                out.push(b'"');
                copied = start + len;
                i = copied;
            }
            _ => i += 1,
        }
    }
    if copied == 0 {
        return None;
    }
    out.extend_from_slice(&body[copied..]);
    Some(out)
}

/// The length of the JSON integer `text` starts with (`-?(0|[1-9][0-9]*)`, then a delimiter or
/// the end), or 0: a fraction, an exponent, a `+` or leading zeros stay as they are, refused as
/// serde_json refuses them (quoted, Rust's `u64` parse would take `+5` and `007`).
fn integer_len(text: &[u8]) -> usize {
    let sign = usize::from(text.first() == Some(&b'-'));
    let digits = text[sign..]
        .iter()
        .take_while(|b| b.is_ascii_digit())
        .count();
    let len = sign + digits;
    let leading_zero = digits > 1 && text[sign] == b'0';
    let delimited = text.get(len).is_none_or(|b| b",}] \t\r\n".contains(b));
    if digits == 0 || leading_zero || !delimited {
        return 0;
    }
    len
}

/// The index of the quote closing the string opened at `open`.
fn string_end(body: &[u8], open: usize) -> Option<usize> {
    let mut i = open + 1;
    loop {
        match *body.get(i)? {
            b'"' => return Some(i),
            b'\\' => i += 2,
            _ => i += 1,
        }
    }
}

fn skip_space(body: &[u8], mut i: usize) -> usize {
    while body.get(i).is_some_and(|b| b" \t\r\n".contains(b)) {
        i += 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::quote_times;

    fn quoted(s: &str) -> Option<String> {
        quote_times(s.as_bytes()).map(|v| String::from_utf8(v).unwrap())
    }

    #[test]
    fn only_the_times_numbers_are_quoted() {
        assert_eq!(
            quoted(r#"{"startTimeUnixNano": 17, "endTimeUnixNano":18,"name":"endTimeUnixNano","x":{"timeUnixNano" :"19"}}"#)
                .as_deref(),
            Some(r#"{"startTimeUnixNano": "17", "endTimeUnixNano":"18","name":"endTimeUnixNano","x":{"timeUnixNano" :"19"}}"#)
        );
        // A key's text inside a value, escaped quotes, another key's number: untouched.
        assert_eq!(quoted(r#"{"a":"\"timeUnixNano\": 5","intValue":7}"#), None);
        assert_eq!(
            quoted("{\"observedTimeUnixNano\":\n-15,\"timeUnixNano\":0}").as_deref(),
            Some("{\"observedTimeUnixNano\":\n\"-15\",\"timeUnixNano\":\"0\"}")
        );
        // Not JSON integers: left for serde_json to refuse (quoted, `+5` and `007` would parse).
        for bad in ["+5", "007", "-0012", "1.5", "1e3", "12x", "-", "\"5\""] {
            assert_eq!(
                quoted(&format!("{{\"timeUnixNano\":{bad}}}")),
                None,
                "{bad}"
            );
        }
        assert_eq!(
            quoted(r#"{"timeUnixNano":5"#).as_deref(),
            Some(r#"{"timeUnixNano":"5""#)
        );
        // Unterminated: not JSON enough to tell.
        assert_eq!(quoted(r#"{"timeUnixNano":1,"a":"b"#), None);
        assert_eq!(quoted(""), None);
    }
}
