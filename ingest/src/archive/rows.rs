//! The archive's tables (SPEC §9): their Arrow schemas and the builders that collect rows.
//!
//! Column names and types are normative: times are `Timestamp(ns, UTC)`, u64 fields `UInt64`.
//! `malformed` also has `partition` and `offset`, as `events` has.

use crate::batch::Applying;
use arrow_array::builder::{
    ArrayBuilder, BooleanBuilder, Int64Builder, PrimitiveBuilder, StringBuilder,
    TimestampNanosecondBuilder, UInt64Builder,
};
use arrow_array::types::ArrowPrimitiveType;
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use fencewatch_assess::live::{Settled, SpanId, SpanProvenance};
use fencewatch_assess::window::WindowDetail;
use fencewatch_assess::{Event, EventTime, Reason};
use std::sync::{Arc, LazyLock};

/// The archive's tables, as stored: `windows` is a view over `window_revisions`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Table {
    /// Every applied event.
    Events,
    /// Every malformed line.
    Malformed,
    /// Every counterexample, once, when final or withdrawn.
    Counterexamples,
    /// Every final window, and each revision of it.
    WindowRevisions,
}

impl Table {
    /// The stored tables.
    pub const ALL: [Table; 4] = [
        Table::Events,
        Table::Malformed,
        Table::Counterexamples,
        Table::WindowRevisions,
    ];

    /// Its name (and folder under `archive/`).
    pub fn name(self) -> &'static str {
        match self {
            Table::Events => "events",
            Table::Malformed => "malformed",
            Table::Counterexamples => "counterexamples",
            Table::WindowRevisions => "window_revisions",
        }
    }

    /// Parses a name.
    pub fn parse(name: &str) -> Option<Table> {
        Table::ALL.into_iter().find(|t| t.name() == name)
    }

    /// Its schema.
    pub fn schema(self) -> SchemaRef {
        match self {
            Table::Events => EVENTS.clone(),
            Table::Malformed => MALFORMED.clone(),
            Table::Counterexamples => COUNTEREXAMPLES.clone(),
            Table::WindowRevisions => WINDOW_REVISIONS.clone(),
        }
    }
}

fn ts() -> DataType {
    DataType::Timestamp(TimeUnit::Nanosecond, Some("UTC".into()))
}

fn schema(fields: &[(&str, DataType, bool)]) -> SchemaRef {
    Arc::new(Schema::new(
        fields
            .iter()
            .map(|(n, t, null)| Field::new(*n, t.clone(), *null))
            .collect::<Vec<_>>(),
    ))
}

static EVENTS: LazyLock<SchemaRef> = LazyLock::new(|| {
    use DataType::{Int64, UInt64, Utf8};
    schema(&[
        ("ts", ts(), false),
        ("received", ts(), false),
        ("kind", Utf8, false),
        ("property", Utf8, true),
        ("scope", Utf8, true),
        ("epoch", UInt64, true),
        ("incarnation", UInt64, false),
        ("route", Utf8, true),
        ("holder", Utf8, true),
        ("op_id", Utf8, true),
        ("outcome", Utf8, false),
        ("order", UInt64, true),
        ("emitter", Utf8, true),
        ("seq", UInt64, true),
        ("premise", Utf8, true),
        ("valid_for", Int64, true),
        ("attester", Utf8, true),
        ("evidence", Utf8, true),
        ("source", Utf8, false),
        ("partition", Utf8, false),
        ("offset", UInt64, false),
    ])
});

static MALFORMED: LazyLock<SchemaRef> = LazyLock::new(|| {
    use DataType::{UInt64, Utf8};
    schema(&[
        ("received", ts(), false),
        ("ts", ts(), true),
        ("source", Utf8, false),
        ("reason", Utf8, false),
        ("line", Utf8, false),
        ("partition", Utf8, false),
        ("offset", UInt64, false),
    ])
});

static COUNTEREXAMPLES: LazyLock<SchemaRef> = LazyLock::new(|| {
    use DataType::{Boolean, UInt64, Utf8};
    schema(&[
        ("id", Utf8, false),
        ("property", Utf8, false),
        ("kind", Utf8, false),
        ("scope", Utf8, false),
        ("incarnation", UInt64, false),
        ("stale_ts", ts(), false),
        ("stale_epoch", UInt64, true),
        ("stale_route", Utf8, true),
        ("stale_holder", Utf8, true),
        ("stale_source", Utf8, false),
        ("superseding_ts", ts(), true),
        ("superseding_epoch", UInt64, true),
        ("superseding_source", Utf8, false),
        ("explanation", Utf8, false),
        ("found_at", ts(), false),
        ("final", Boolean, false),
        ("withdrawn", Utf8, true),
    ])
});

static WINDOW_REVISIONS: LazyLock<SchemaRef> = LazyLock::new(|| {
    use DataType::{Boolean, UInt64, Utf8};
    schema(&[
        ("property", Utf8, false),
        ("start", ts(), false),
        ("end", ts(), false),
        ("verdict", Utf8, false),
        ("final", Boolean, false),
        ("revised", Boolean, false),
        ("counterexamples", UInt64, false),
        ("unknown", Utf8, false),
        ("revision", UInt64, false),
    ])
});

/// The first bytes of a malformed line that are archived.
pub const MALFORMED_LINE_BYTES: usize = 1024;

fn tsb() -> TimestampNanosecondBuilder {
    TimestampNanosecondBuilder::new().with_timezone("UTC")
}

/// Where a row came from: its partition (`wal`, or `<topic>/<partition>`) and the wall time
/// its batch was received.
#[derive(Debug, Clone, Copy)]
pub struct Origin<'a> {
    /// The partition's name.
    pub partition: &'a str,
    /// Receive time of the batch, ns.
    pub received: i64,
}

/// A row's provenance (its `source`): `<name>:<position>` (`http:17`, `orders/2:40`,
/// `events.ndjson:3`), written without `core::fmt`, or any other text.
#[derive(Debug, Clone, Copy)]
pub enum Src<'a> {
    /// `<name>:<position>`.
    At(&'a str, u64),
    /// The text of these arguments.
    Args(std::fmt::Arguments<'a>),
    /// This text.
    Text(&'a str),
    /// A span's provenance (`<source>:<trace_id>/<span_id>`), written without the formatting
    /// machinery (on the applier's thread, for every OTLP event).
    Span(SpanProvenance<'a>),
}

impl<'a> From<std::fmt::Arguments<'a>> for Src<'a> {
    fn from(a: std::fmt::Arguments<'a>) -> Src<'a> {
        Src::Args(a)
    }
}

impl<'a> Src<'a> {
    /// The provenance of item `i` of the batch being applied at `at`: its span's own
    /// (`<source>:<trace_id>/<span_id>`), else `<source>:<position>`.
    pub fn of_item(at: &Applying<'a>, i: u64, span: Option<&'a SpanId>) -> Src<'a> {
        match span {
            Some(s) => Src::Span(SpanProvenance(at.batch.source, s)),
            None => Src::At(at.batch.source, at.position(i)),
        }
    }
}

impl Src<'_> {
    /// Writes its text to `out` (a builder's value being built, an event log's text).
    pub(super) fn write_to(self, out: &mut impl std::fmt::Write) {
        let _ = match self {
            Src::At(name, n) => out
                .write_str(name)
                .and_then(|()| out.write_str(":"))
                .and_then(|()| out.write_str(itoa::Buffer::new().format(n))),
            Src::Text(s) => out.write_str(s),
            Src::Args(a) => out.write_fmt(a),
            Src::Span(p) => out
                .write_str(p.0)
                .and_then(|()| out.write_str(p.position(&mut [0u8; 50]))),
        };
    }

    /// Appends it as the next value of `b`.
    fn append_to(self, b: &mut StringBuilder) {
        self.write_to(b);
        b.append_value("");
    }
}

/// Rows of `events` being collected.
#[derive(Debug)]
pub struct EventRows {
    ts: TimestampNanosecondBuilder,
    received: TimestampNanosecondBuilder,
    kind: StringBuilder,
    property: StringBuilder,
    scope: StringBuilder,
    epoch: UInt64Builder,
    incarnation: UInt64Builder,
    route: StringBuilder,
    holder: StringBuilder,
    op_id: StringBuilder,
    outcome: StringBuilder,
    order: UInt64Builder,
    emitter: StringBuilder,
    seq: UInt64Builder,
    premise: StringBuilder,
    valid_for: Int64Builder,
    attester: StringBuilder,
    evidence: StringBuilder,
    source: StringBuilder,
    partition: StringBuilder,
    offset: UInt64Builder,
    len: usize,
}

impl Default for EventRows {
    fn default() -> EventRows {
        EventRows::with_capacity(0, 0)
    }
}

impl EventRows {
    /// Builders with room for `rows` rows whose strings take about `bytes` bytes.
    pub fn with_capacity(rows: usize, bytes: usize) -> EventRows {
        let ts = || TimestampNanosecondBuilder::with_capacity(rows).with_timezone("UTC");
        let u64s = || UInt64Builder::with_capacity(rows);
        // Most strings are short and many columns null: room for the ones every row has.
        let s = |bytes: usize| StringBuilder::with_capacity(rows, bytes);
        EventRows {
            ts: ts(),
            received: ts(),
            kind: s(rows * 6),
            property: s(0),
            scope: s(bytes / 4),
            epoch: u64s(),
            incarnation: u64s(),
            route: s(0),
            holder: s(0),
            op_id: s(0),
            outcome: s(rows * 9),
            order: u64s(),
            emitter: s(0),
            seq: u64s(),
            premise: s(0),
            valid_for: Int64Builder::with_capacity(rows),
            attester: s(0),
            evidence: s(0),
            source: s(bytes / 4),
            partition: s(0),
            offset: u64s(),
            len: 0,
        }
    }
}

impl EventRows {
    /// Adds one applied event: `property` as the assessor attributed it (`None`:
    /// unattributed), `source` its provenance, `offset` its offset in its partition.
    pub fn push<'s>(
        &mut self,
        at: Origin<'_>,
        ev: &Event<'_>,
        property: Option<&str>,
        source: impl Into<Src<'s>>,
        offset: u64,
    ) {
        self.ts.append_value(ev.ts.0);
        self.received.append_value(at.received);
        self.kind.append_value(ev.kind.as_str());
        self.property.append_option(property);
        self.scope.append_option(ev.scope);
        self.epoch.append_option(ev.epoch.map(|e| e.0));
        self.incarnation.append_value(ev.incarnation.0);
        self.route.append_option(ev.route);
        self.holder.append_option(ev.holder);
        self.op_id.append_option(ev.op_id);
        self.outcome.append_value(ev.outcome.as_str());
        self.order.append_option(ev.order.map(|o| o.0));
        self.emitter.append_option(ev.emitter);
        self.seq.append_option(ev.seq.map(|s| s.0));
        // An attestation's fields (SPEC §10) as it gave them: `valid_for` null when it named
        // none (the premise's `max_age` applies), never the capped value, so that `check`
        // re-assesses the row as it was sent.
        self.premise.append_option(ev.premise);
        self.valid_for.append_option(ev.valid_for.map(|d| d.0));
        self.attester.append_option(ev.attester);
        self.evidence.append_option(ev.evidence);
        source.into().append_to(&mut self.source);
        self.partition.append_value(at.partition);
        self.offset.append_value(offset);
        self.len += 1;
    }
}

/// Rows of `malformed` being collected.
#[derive(Debug)]
pub struct MalformedRows {
    received: TimestampNanosecondBuilder,
    ts: TimestampNanosecondBuilder,
    source: StringBuilder,
    reason: StringBuilder,
    line: StringBuilder,
    partition: StringBuilder,
    offset: UInt64Builder,
    len: usize,
}

impl Default for MalformedRows {
    fn default() -> MalformedRows {
        MalformedRows {
            received: tsb(),
            ts: tsb(),
            source: StringBuilder::new(),
            reason: StringBuilder::new(),
            line: StringBuilder::new(),
            partition: StringBuilder::new(),
            offset: UInt64Builder::new(),
            len: 0,
        }
    }
}

impl MalformedRows {
    /// Adds one malformed line: `line` is cut to its first [`MALFORMED_LINE_BYTES`] (invalid
    /// UTF-8 replaced).
    pub fn push<'s>(
        &mut self,
        at: Origin<'_>,
        ts: Option<EventTime>,
        source: impl Into<Src<'s>>,
        reason: &str,
        line: &[u8],
        offset: u64,
    ) {
        self.received.append_value(at.received);
        self.ts.append_option(ts.map(|t| t.0));
        source.into().append_to(&mut self.source);
        self.reason.append_value(reason);
        let cut = &line[..line.len().min(MALFORMED_LINE_BYTES)];
        self.line.append_value(String::from_utf8_lossy(cut));
        self.partition.append_value(at.partition);
        self.offset.append_value(offset);
        self.len += 1;
    }
}

/// Rows of `counterexamples` being collected.
#[derive(Debug)]
pub struct CounterexampleRows {
    id: StringBuilder,
    property: StringBuilder,
    kind: StringBuilder,
    scope: StringBuilder,
    incarnation: UInt64Builder,
    stale_ts: TimestampNanosecondBuilder,
    stale_epoch: UInt64Builder,
    stale_route: StringBuilder,
    stale_holder: StringBuilder,
    stale_source: StringBuilder,
    superseding_ts: TimestampNanosecondBuilder,
    superseding_epoch: UInt64Builder,
    superseding_source: StringBuilder,
    explanation: StringBuilder,
    found_at: TimestampNanosecondBuilder,
    is_final: BooleanBuilder,
    withdrawn: StringBuilder,
    len: usize,
}

impl Default for CounterexampleRows {
    fn default() -> CounterexampleRows {
        CounterexampleRows {
            id: StringBuilder::new(),
            property: StringBuilder::new(),
            kind: StringBuilder::new(),
            scope: StringBuilder::new(),
            incarnation: UInt64Builder::new(),
            stale_ts: tsb(),
            stale_epoch: UInt64Builder::new(),
            stale_route: StringBuilder::new(),
            stale_holder: StringBuilder::new(),
            stale_source: StringBuilder::new(),
            superseding_ts: tsb(),
            superseding_epoch: UInt64Builder::new(),
            superseding_source: StringBuilder::new(),
            explanation: StringBuilder::new(),
            found_at: tsb(),
            is_final: BooleanBuilder::new(),
            withdrawn: StringBuilder::new(),
            len: 0,
        }
    }
}

impl CounterexampleRows {
    /// Adds one counterexample.
    pub fn push(&mut self, s: &Settled) {
        let c = &s.counterexample;
        self.id.append_value(&c.id);
        self.property.append_value(&c.property);
        self.kind.append_value(c.kind.as_str());
        self.scope.append_value(&c.scope);
        self.incarnation.append_value(c.incarnation);
        self.stale_ts.append_value(c.at);
        self.stale_epoch.append_option(c.stale.epoch);
        self.stale_route.append_option(c.stale.route.as_deref());
        self.stale_holder.append_option(c.stale.holder.as_deref());
        self.stale_source.append_value(&c.stale.source);
        let sts = EventTime::parse_rfc3339(&c.superseding.ts)
            .ok()
            .map(|t| t.0);
        self.superseding_ts.append_option(sts);
        self.superseding_epoch.append_option(c.superseding.epoch);
        self.superseding_source.append_value(&c.superseding.source);
        self.explanation.append_value(&c.explanation);
        self.found_at.append_value(s.found_at);
        self.is_final.append_value(c.is_final);
        self.withdrawn
            .append_option(c.withdrawn.map(|w| w.as_str()));
        self.len += 1;
    }
}

/// Rows of `window_revisions` being collected.
#[derive(Debug)]
pub struct WindowRows {
    property: StringBuilder,
    start: TimestampNanosecondBuilder,
    end: TimestampNanosecondBuilder,
    verdict: StringBuilder,
    is_final: BooleanBuilder,
    revised: BooleanBuilder,
    counterexamples: UInt64Builder,
    unknown: StringBuilder,
    revision: UInt64Builder,
    len: usize,
}

impl Default for WindowRows {
    fn default() -> WindowRows {
        WindowRows {
            property: StringBuilder::new(),
            start: tsb(),
            end: tsb(),
            verdict: StringBuilder::new(),
            is_final: BooleanBuilder::new(),
            revised: BooleanBuilder::new(),
            counterexamples: UInt64Builder::new(),
            unknown: StringBuilder::new(),
            revision: UInt64Builder::new(),
            len: 0,
        }
    }
}

impl WindowRows {
    /// Adds one revision of a window of `property`.
    pub fn push(&mut self, property: &str, w: &WindowDetail, revision: u64) {
        use std::fmt::Write;
        self.property.append_value(property);
        self.start.append_value(w.start);
        self.end.append_value(w.end);
        self.verdict.append_value(w.verdict.as_str());
        self.is_final.append_value(w.is_final);
        self.revised.append_value(w.revised);
        self.counterexamples.append_value(w.summary.counterexamples);
        self.unknown.write_char('{').expect("infallible");
        let mut first = true;
        for r in Reason::ALL {
            let n = w.summary.unknown[r as usize];
            if n > 0 {
                let sep = if first { "" } else { "," };
                write!(self.unknown, "{sep}\"{}\":{n}", r.as_str()).expect("infallible");
                first = false;
            }
        }
        self.unknown.append_value("}");
        self.revision.append_value(revision);
        self.len += 1;
    }
}

/// The builders of one table, behind one interface.
pub trait Rows: Default + Send {
    /// The table they fill.
    const TABLE: Table;
    /// Rows collected.
    fn len(&self) -> usize;
    /// Whether none are.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The rows as a batch; the builders start over.
    fn finish(&mut self) -> RecordBatch;
}

fn batch(table: Table, columns: Vec<ArrayRef>) -> RecordBatch {
    RecordBatch::try_new(table.schema(), columns).expect("builders match their schema")
}

/// A builder that finishes into an array and starts over sized as it was: the next chunk,
/// most often about as large, fills it without a reallocation (and copy) per doubling, which
/// was a tenth of the applier's samples with the archive on (perf: realloc, free).
trait Refill {
    fn refill(&mut self) -> ArrayRef;
}

impl Refill for StringBuilder {
    fn refill(&mut self) -> ArrayRef {
        let (n, bytes) = (ArrayBuilder::len(self), self.values_slice().len());
        let a = Arc::new(self.finish());
        *self = StringBuilder::with_capacity(n, bytes);
        a
    }
}

impl<T: ArrowPrimitiveType> Refill for PrimitiveBuilder<T> {
    fn refill(&mut self) -> ArrayRef {
        let a = self.finish();
        let data_type = a.data_type().clone();
        *self = PrimitiveBuilder::with_capacity(a.len()).with_data_type(data_type);
        Arc::new(a)
    }
}

impl Refill for BooleanBuilder {
    fn refill(&mut self) -> ArrayRef {
        let a = self.finish();
        *self = BooleanBuilder::with_capacity(a.len());
        Arc::new(a)
    }
}

macro_rules! arrays {
    ($self:ident: $($col:ident),*) => {
        vec![$($self.$col.refill()),*]
    };
}

impl Rows for EventRows {
    const TABLE: Table = Table::Events;
    fn len(&self) -> usize {
        self.len
    }
    fn finish(&mut self) -> RecordBatch {
        self.len = 0;
        let cols = arrays!(self: ts, received, kind, property, scope, epoch, incarnation, route,
            holder, op_id, outcome, order, emitter, seq, premise, valid_for, attester, evidence,
            source, partition, offset);
        batch(Self::TABLE, cols)
    }
}

impl Rows for MalformedRows {
    const TABLE: Table = Table::Malformed;
    fn len(&self) -> usize {
        self.len
    }
    fn finish(&mut self) -> RecordBatch {
        self.len = 0;
        let cols = arrays!(self: received, ts, source, reason, line, partition, offset);
        batch(Self::TABLE, cols)
    }
}

impl Rows for CounterexampleRows {
    const TABLE: Table = Table::Counterexamples;
    fn len(&self) -> usize {
        self.len
    }
    fn finish(&mut self) -> RecordBatch {
        self.len = 0;
        let cols = arrays!(self: id, property, kind, scope, incarnation, stale_ts, stale_epoch,
            stale_route, stale_holder, stale_source, superseding_ts, superseding_epoch,
            superseding_source, explanation, found_at, is_final, withdrawn);
        batch(Self::TABLE, cols)
    }
}

impl Rows for WindowRows {
    const TABLE: Table = Table::WindowRevisions;
    fn len(&self) -> usize {
        self.len
    }
    fn finish(&mut self) -> RecordBatch {
        self.len = 0;
        let cols = arrays!(self: property, start, end, verdict, is_final, revised,
            counterexamples, unknown, revision);
        batch(Self::TABLE, cols)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::cast::AsArray;
    use fencewatch_assess::Kind;

    /// A span's provenance is written as findings display it.
    #[test]
    fn a_span_source_is_its_provenance() {
        let mut id = [0u8; 24];
        for (i, b) in id.iter_mut().enumerate() {
            *b = (i * 11) as u8;
        }
        let p = SpanProvenance("otlp", &id);
        let mut out = String::new();
        Src::Span(p).write_to(&mut out);
        assert_eq!(out, p.to_string());
        assert_eq!(
            out,
            "otlp:000b16212c37424d58636e79848f9aa5/b0bbc6d1dce7f2fd"
        );
    }

    #[test]
    fn builders_fill_their_schema() {
        let mut e = EventRows::default();
        let mut ev = Event::new(Kind::Commit, EventTime(5));
        ev.scope = Some("o-1");
        ev.epoch = Some(fencewatch_assess::Epoch(3));
        let at = Origin {
            partition: "wal",
            received: 7,
        };
        e.push(at, &ev, Some("p"), format_args!("http:{}", 12), 12);
        e.push(at, &ev, None, Src::At("http", 13), 13);
        e.push(at, &ev, None, Src::At("orders/2", 0), 0);
        e.push(at, &ev, None, Src::At("f", u64::MAX), 1);
        let b = e.finish();
        assert_eq!(b.num_rows(), 4);
        assert_eq!(b.schema(), Table::Events.schema());
        let src = b.column_by_name("source").unwrap().as_string::<i32>();
        assert_eq!((src.value(0), src.value(1)), ("http:12", "http:13"));
        assert_eq!(src.value(2), "orders/2:0");
        assert_eq!(src.value(3), format!("f:{}", u64::MAX));
        assert!(b.column_by_name("property").unwrap().is_null(1));
        assert_eq!(e.len(), 0);
        assert_eq!(e.finish().num_rows(), 0);
        // Builders start over sized as they were, with their types (the timestamps' zone).
        e.push(at, &ev, Some("p"), Src::At("http", 14), 14);
        let b = e.finish();
        assert_eq!(b.schema(), Table::Events.schema());
        let src = b.column_by_name("source").unwrap().as_string::<i32>();
        assert_eq!((b.num_rows(), src.value(0)), (1, "http:14"));

        let mut m = MalformedRows::default();
        m.push(
            at,
            None,
            format_args!("f.ndjson:{}", 3),
            "bad",
            &[b'x'; 5000],
            40,
        );
        let b = m.finish();
        let line = b.column_by_name("line").unwrap().as_string::<i32>();
        assert_eq!(line.value(0).len(), MALFORMED_LINE_BYTES);
    }

    #[test]
    fn window_unknown_is_a_json_object_of_reason_counts() {
        let mut w = WindowRows::default();
        let mut summary = fencewatch_assess::window::WindowSummary::default();
        summary.unknown[Reason::MissingEpoch as usize] = 2;
        summary.unknown[Reason::RouteSilent as usize] = 1;
        let d = WindowDetail {
            index: 1,
            start: 60,
            end: 120,
            verdict: fencewatch_assess::Verdict::Unknown,
            is_final: true,
            revised: false,
            summary: summary.clone(),
        };
        w.push("p", &d, 0);
        summary.unknown = Default::default();
        w.push("p", &WindowDetail { summary, ..d }, 1);
        let b = w.finish();
        let u = b.column_by_name("unknown").unwrap().as_string::<i32>();
        assert_eq!(u.value(0), r#"{"missing_epoch":2,"route_silent":1}"#);
        assert_eq!(u.value(1), "{}");
        let v: serde_json::Value = serde_json::from_str(u.value(0)).unwrap();
        assert_eq!(v["missing_epoch"], 2);
    }
}
