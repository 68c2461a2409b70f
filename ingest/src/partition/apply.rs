//! Applying one decoded batch to an assessor: each item pushed in order, what it came to
//! counted, a malformed item's error worded again from its text, and an [`Observer`] (the
//! evidence archive) told of each item.

use super::Applied;
use crate::batch::{self, Batch, DecodedItems, Format, decode_item, for_each_item};
use crate::batch::{Applying, Observer};
use crate::decode::json::{self, DecodeError};
use fencewatch_assess::live::{Live, Pushed};

/// Events whose memory [`Live::warm`] reads in a row, ahead of pushing them.
const WARM: usize = 32;

/// Feeds a batch decoded by [`batch::decode_items`] (with the same `max_line_bytes`) at
/// offset `base` to the assessor, in item order. A malformed item's error is worded again
/// from its text, in one pass over the items, and only when the batch has some.
pub(super) fn apply_decoded<'a, O: Observer>(
    live: &mut Live,
    base: u64,
    batch: &Batch<'a>,
    items: &DecodedItems<'_>,
    max_line_bytes: usize,
    obs: &mut O,
) -> Applied {
    if batch.format.is_otlp() {
        return otlp_apply(live, base, batch, items, obs);
    }
    let source = live.add_source(batch.source);
    let mut out = Applied::default();
    let at = Applying { base, batch };
    let push_event = |live: &mut Live,
                      out: &mut Applied,
                      obs: &mut O,
                      i: u32,
                      d: &json::Decoded<'_>,
                      text: &mut dyn FnMut(u32) -> Option<&'a [u8]>| {
        let i = u64::from(i);
        let ev = d.event();
        let pushed = live.push(&ev, source, at.position(i), batch.received_at);
        obs.event(live, &at, i, None, &ev, pushed);
        if pushed == Pushed::Malformed
            && let Some(t) = text(i as u32)
        {
            let reason = live.view().last_malformed().unwrap_or_default();
            obs.malformed(&at, i, None, Some(ev.ts), reason, t);
        }
        // Partitioning by scope is what keeps a scope's events together.
        if pushed == Pushed::Assessed
            && let Some(key) = batch.key
            && ev.scope.is_some_and(|s| s.as_bytes() != key)
        {
            let key = String::from_utf8_lossy(key);
            live.note_misrouted(&ev, source, at.position(i), &key);
        }
        count_pushed(live, out, pushed, i, base + i, ev.ts);
    };
    let push_bad = |live: &mut Live,
                    out: &mut Applied,
                    obs: &mut O,
                    i: u32,
                    error: DecodeError,
                    text: &[u8]| {
        let i = u64::from(i);
        let reason = error.to_string();
        obs.malformed(&at, i, None, error.ts, &reason, text);
        live.push_malformed(source, at.position(i), error.ts, reason);
        out.malformed(i, base + i, error);
    };
    // A one-event batch (a Kafka message) gains nothing: its lookup has nothing to overlap.
    let warm = |live: &Live, k: usize| {
        if k.is_multiple_of(WARM) && items.events.len() > 1 {
            let ahead = items.events.iter().skip(k).take(WARM);
            live.warm_all(ahead.map(|(_, d)| d.event()));
        }
    };
    if items.bad.is_empty() && !O::TEXT {
        for (k, (i, d)) in items.events.iter().enumerate() {
            warm(live, k);
            push_event(live, &mut out, obs, *i, d, &mut |_| None);
        }
        return out;
    }
    if items.bad.is_empty() && batch.format == Format::Ndjson {
        // An item's text is needed only when the assessor finds it malformed: the lines are
        // walked to it then, not each one ahead (a memchr per line, with the archive on).
        let mut lines = batch::lines(batch.body).enumerate();
        let mut text = |i: u32| lines.find(|(n, _)| *n == i as usize).map(|(_, t)| t);
        for (k, (i, d)) in items.events.iter().enumerate() {
            warm(live, k);
            push_event(live, &mut out, obs, *i, d, &mut text);
        }
        return out;
    }
    let mut events = items.events.iter().enumerate().peekable();
    let mut bad = items.bad.iter().copied().peekable();
    let walked = for_each_item(batch, |i, item| {
        if events.peek().is_some_and(|(_, (e, _))| *e == i) {
            let (k, (_, d)) = events.next().expect("peeked");
            warm(live, k);
            push_event(live, &mut out, obs, i, d, &mut |_| Some(item));
        } else if bad.peek() == Some(&i) {
            bad.next();
            match decode_item(batch.format, item, max_line_bytes) {
                Err(e) => push_bad(live, &mut out, obs, i, e, item),
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
        push_bad(live, &mut out, obs, 0, error, batch.body);
    }
    debug_assert!(batch.format != Format::Message || out.accepted + out.malformed == 1);
    out
}

/// Feeds a decoded OTLP body: a span with its own provenance (`otlp:<trace_id>/<span_id>`), a
/// log record at its offset. A body that does not decode (a build without OTLP, or a record
/// another build wrote) is one malformed item.
fn otlp_apply(
    live: &mut Live,
    base: u64,
    batch: &Batch<'_>,
    items: &DecodedItems<'_>,
    obs: &mut impl Observer,
) -> Applied {
    let source = live.add_source(batch.source);
    let mut out = Applied::default();
    let applying = Applying { base, batch };
    #[cfg(feature = "otlp")]
    if let Some(otlp) = &items.otlp {
        use crate::batch::OtlpItems;
        use crate::decode::otlp::Entry;
        match otlp {
            OtlpItems::Stored(entries) => {
                for (i, e) in entries.iter().enumerate() {
                    if i.is_multiple_of(WARM) {
                        let ahead = entries.iter().skip(i).take(WARM);
                        for w in ahead.clone() {
                            if let Entry::Event(_, Some(s)) = w {
                                live.warm_span(s);
                            }
                        }
                        live.warm_all(ahead.filter_map(|w| match w {
                            Entry::Event(ev, _) => Some(ev),
                            Entry::Malformed(_) => None,
                        }));
                    }
                    otlp_entry(live, &mut out, (source, &applying, obs), i, e);
                }
            }
            OtlpItems::Request(d) => {
                for (i, e) in d.entries().enumerate() {
                    otlp_entry(live, &mut out, (source, &applying, obs), i, &e);
                }
            }
        }
        return out;
    }
    let _ = items;
    let reason = "an OTLP record this build cannot decode".to_string();
    obs.malformed(&applying, 0, None, None, &reason, b"");
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

/// Feeds item `i` of the OTLP body `at` (its source's id `source`), telling `obs`.
#[cfg(feature = "otlp")]
fn otlp_entry(
    live: &mut Live,
    out: &mut Applied,
    (source, at, obs): (u32, &Applying<'_>, &mut impl Observer),
    i: usize,
    entry: &crate::decode::otlp::Entry<'_>,
) {
    use crate::decode::otlp::Entry;
    let (received_at, applying) = (at.batch.received_at, at);
    let (i, at) = (i as u64, at.base + i as u64);
    match entry {
        Entry::Event(ev, span) => {
            let pushed = match span {
                Some(s) => live.push_span(ev, s, source, at, received_at),
                None => live.push(ev, source, at, received_at),
            };
            obs.event(live, applying, i, *span, ev, pushed);
            if pushed == Pushed::Malformed {
                let reason = live.view().last_malformed().unwrap_or_default();
                obs.malformed(applying, i, *span, Some(ev.ts), reason, b"");
            }
            count_pushed(live, out, pushed, i, at, ev.ts);
        }
        Entry::Malformed(e) => {
            let message = e.error.to_string();
            obs.malformed(applying, i, e.span.as_ref(), e.error.ts, &message, b"");
            match &e.span {
                Some(s) => live.push_malformed_span(s, source, at, e.error.ts, message),
                None => live.push_malformed(source, at, e.error.ts, message),
            }
            out.malformed(i, at, e.error.clone());
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
        Pushed::Assessed | Pushed::SpanAgain | Pushed::Unattributed => out.accepted += 1,
    }
}
