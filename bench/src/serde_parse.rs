//! The `serde` baseline: bare parsing of every line into a borrowed struct, one thread.

use anyhow::{Context, Result};
use serde::Deserialize;
use std::fs::File;
use std::hint::black_box;
use std::io::{BufRead, BufReader};
use std::path::Path;

/// One event as the benchmark files carry it (integer `ts`), borrowing its strings from the
/// line. Only the fields of event schema v1; anything else on the line is skipped by serde.
#[derive(Debug, Deserialize)]
#[allow(
    dead_code,
    reason = "the fields are parsed for the measurement, never read"
)]
struct Ev<'a> {
    kind: &'a str,
    #[serde(borrow)]
    scope: Option<&'a str>,
    epoch: Option<u64>,
    incarnation: Option<u64>,
    order: Option<u64>,
    ts: i64,
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
    /// Non-blank lines that did not parse (bad JSON, a string with escapes, a string `ts`).
    pub(crate) errors: u64,
}

/// Reads `path` line by line through a 1 MiB `BufReader` and parses every non-blank line with
/// `serde_json::from_slice`.
pub(crate) fn parse_file(path: &Path) -> Result<ParseCount> {
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
        match serde_json::from_slice::<Ev<'_>>(black_box(bytes)) {
            Ok(ev) => {
                black_box(&ev);
                count.events += 1;
            }
            Err(_) => count.errors += 1,
        }
    }
    Ok(count)
}
