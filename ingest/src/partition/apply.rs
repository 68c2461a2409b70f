//! Applying one decoded batch to an assessor: each item pushed in order, what it came to
//! counted, a malformed item's error worded again from its text.

use super::Applied;
use crate::batch::{Batch, DecodedItems, Format, decode_item, for_each_item};
use crate::decode::json::{self, DecodeError};
use fencewatch_assess::live::{Live, Pushed};

/// Feeds a batch decoded by [`batch::decode_items`] (with the same `max_line_bytes`) at
/// offset `base` to the assessor, in item order. A malformed item's error is worded again
/// from its text, in one pass over the items, and only when the batch has some.
pub(super) fn apply_decoded(
    live: &mut Live,
    base: u64,
    batch: &Batch<'_>,
    items: DecodedItems<'_>,
    max_line_bytes: usize,
) -> Applied {
    if batch.format.is_otlp() {
        return otlp_apply(live, base, batch, items);
    }
    let source = live.add_source(batch.source);
    let mut out = Applied::default();
    let position = |i: u64| batch.first_line.map_or(base + i, |l| l + i);
    let push_event = |live: &mut Live, out: &mut Applied, i: u32, d: &json::Decoded<'_>| {
        let i = u64::from(i);
        let ev = d.event();
        let pushed = live.push(&ev, source, position(i), batch.received_at);
        // Partitioning by scope is what keeps a scope's events together.
        if pushed == Pushed::Assessed
            && let Some(key) = batch.key
            && ev.scope.is_some_and(|s| s.as_bytes() != key)
        {
            let key = String::from_utf8_lossy(key);
            live.note_misrouted(&ev, source, position(i), &key);
        }
        count_pushed(live, out, pushed, i, base + i, ev.ts);
    };
    let push_bad = |live: &mut Live, out: &mut Applied, i: u32, error: DecodeError| {
        let i = u64::from(i);
        live.push_malformed(source, position(i), error.ts, error.to_string());
        out.malformed(i, base + i, error);
    };
    if items.bad.is_empty() {
        for (i, d) in &items.events {
            push_event(live, &mut out, *i, d);
        }
        return out;
    }
    let mut events = items.events.iter().peekable();
    let mut bad = items.bad.iter().copied().peekable();
    let walked = for_each_item(batch, |i, item| {
        if events.peek().is_some_and(|(e, _)| *e == i) {
            let (_, d) = events.next().expect("peeked");
            push_event(live, &mut out, i, d);
        } else if bad.peek() == Some(&i) {
            bad.next();
            match decode_item(batch.format, item, max_line_bytes) {
                Err(e) => push_bad(live, &mut out, i, e),
                Ok(_) => unreachable!("an item decodes the same way twice"),
            }
        }
    });
    if let Err(e) = walked {
        // An array that is not well-formed (an old record): one malformed item.
        let error = DecodeError {
            field: None,
            reason: e.to_string(),
            ts: None,
        };
        push_bad(live, &mut out, 0, error);
    }
    debug_assert!(batch.format != Format::Message || out.accepted + out.malformed == 1);
    out
}

/// Feeds a decoded OTLP body: a span with its own provenance (`otlp:<trace_id>/<span_id>`), a
/// log record at its offset. A body that does not decode (a build without OTLP, or a record
/// another build wrote) is one malformed item.
fn otlp_apply(live: &mut Live, base: u64, batch: &Batch<'_>, items: DecodedItems<'_>) -> Applied {
    let source = live.add_source(batch.source);
    let mut out = Applied::default();
    #[cfg(feature = "otlp")]
    if let Some(otlp) = items.otlp {
        use crate::batch::OtlpItems;
        let received_at = batch.received_at;
        let mut each =
            |i: usize, entry| otlp_entry(live, &mut out, source, base, received_at, i, entry);
        match otlp {
            OtlpItems::Stored(entries) => entries
                .into_iter()
                .enumerate()
                .for_each(|(i, e)| each(i, e)),
            OtlpItems::Request(d) => d.entries().enumerate().for_each(|(i, e)| each(i, e)),
        }
        return out;
    }
    let _ = items;
    let reason = "an OTLP record this build cannot decode".to_string();
    live.push_malformed(source, base, None, reason.clone());
    out.malformed(
        0,
        base,
        DecodeError {
            field: None,
            reason,
            ts: None,
        },
    );
    out
}

/// Feeds item `i` of an OTLP body at `base`.
#[cfg(feature = "otlp")]
fn otlp_entry(
    live: &mut Live,
    out: &mut Applied,
    source: u32,
    base: u64,
    received_at: i64,
    i: usize,
    entry: crate::decode::otlp::Entry<'_>,
) {
    use crate::decode::otlp::Entry;
    let (i, at) = (i as u64, base + i as u64);
    match entry {
        Entry::Event(ev, span) => {
            let pushed = match span {
                Some(s) => live.push_span(&ev, s, source, at, received_at),
                None => live.push(&ev, source, at, received_at),
            };
            count_pushed(live, out, pushed, i, at, ev.ts);
        }
        Entry::Malformed(e) => {
            let message = e.error.to_string();
            match &e.span {
                Some(s) => live.push_malformed_span(s, source, at, e.error.ts, message),
                None => live.push_malformed(source, at, e.error.ts, message),
            }
            out.malformed(i, at, e.error);
        }
    }
}

/// Counts what pushing item `i` (at WAL offset `at`) came to.
fn count_pushed(
    live: &Live,
    out: &mut Applied,
    pushed: Pushed,
    i: u64,
    at: u64,
    ts: fencewatch_assess::EventTime,
) {
    match pushed {
        Pushed::Malformed => {
            let error = DecodeError {
                field: None,
                reason: live.view().last_malformed().unwrap_or_default().to_string(),
                ts: Some(ts),
            };
            out.malformed(i, at, error);
        }
        Pushed::Duplicate => {
            out.accepted += 1;
            out.duplicates += 1;
        }
        Pushed::Assessed | Pushed::Unattributed => out.accepted += 1,
    }
}
