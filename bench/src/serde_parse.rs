//! The `serde` baseline: bare parsing of every line into a borrowed struct, one thread.

use anyhow::{Context, Result};
use serde::Deserialize;
use std::fs::File;
use std::hint::black_box;
use std::io::{BufRead, BufReader};
use std::path::Path;

/// One event as the benchmark files carry it, `ts` of type `T` (integer nanoseconds, or RFC
/// 3339 text borrowed from the line and left unparsed), its strings borrowed from the line.
/// Only the fields of event schema v1; anything else on the line is skipped by serde.
#[derive(Debug, Deserialize)]
#[allow(
    dead_code,
    reason = "the fields are parsed for the measurement, never read"
)]
struct Ev<'a, T> {
    kind: &'a str,
    #[serde(borrow)]
    scope: Option<&'a str>,
    epoch: Option<u64>,
    incarnation: Option<u64>,
    order: Option<u64>,
    ts: T,
    #[serde(borrow)]
    route: Option<&'a str>,
    #[serde(borrow)]
    holder: Option<&'a str>,
    #[serde(borrow)]
    outcome: Option<&'a str>,
    #[serde(borrow)]
    emitter: Option<&'a str>,
    seq: Option<u64>,
}

/// What one pass over the file found.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ParseCount {
    /// Lines parsed into an [`Ev`].
    pub(crate) events: u64,
    /// Non-blank lines that did not parse (bad JSON, a string with escapes, a `ts` of the
    /// other form).
    pub(crate) errors: u64,
}

/// Reads `path` line by line through a 1 MiB `BufReader` and parses every non-blank line with
/// `serde_json::from_slice`, its `ts` as text when `text_ts`, else as an integer.
pub(crate) fn parse_file(path: &Path, text_ts: bool) -> Result<ParseCount> {
    let file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut reader = BufReader::with_capacity(1 << 20, file);
    let mut line = Vec::with_capacity(1024);
    let mut count = ParseCount::default();
    loop {
        line.clear();
        let n = reader
            .read_until(b'\n', &mut line)
            .with_context(|| format!("reading {}", path.display()))?;
        if n == 0 {
            break;
        }
        let mut bytes = line.as_slice();
        while let [rest @ .., b'\n' | b'\r' | b' ' | b'\t'] = bytes {
            bytes = rest;
        }
        if bytes.is_empty() {
            continue;
        }
        let parsed = if text_ts {
            serde_json::from_slice::<Ev<'_, &str>>(black_box(bytes)).map(|ev| {
                black_box(&ev);
            })
        } else {
            serde_json::from_slice::<Ev<'_, i64>>(black_box(bytes)).map(|ev| {
                black_box(&ev);
            })
        };
        match parsed {
            Ok(()) => count.events += 1,
            Err(_) => count.errors += 1,
        }
    }
    Ok(count)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_read_in_the_form_asked_for() {
        let path = std::env::temp_dir().join(format!("fwb-serde-{}.ndjson", std::process::id()));
        let text = r#"{"kind":"commit","ts":"2025-11-29T12:00:00Z","scope":"s","epoch":1}"#;
        let nanos = r#"{"kind":"commit","ts":1764417600000000000,"scope":"s","epoch":1}"#;
        std::fs::write(&path, format!("{text}\n{text}\n\n{nanos}\n")).unwrap();
        let as_text = parse_file(&path, true).unwrap();
        let as_nanos = parse_file(&path, false).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!((as_text.events, as_text.errors), (2, 1));
        assert_eq!((as_nanos.events, as_nanos.errors), (1, 2));
    }
}
