//! OTLP spans and log records as events: the mapping of SPEC §8, pure, from the
//! `opentelemetry-proto` types (protobuf or OTLP/JSON) to schema-v1 events.
//!
//! An item (span or log record) is a fencing event iff it carries `fencing.kind` itself; the
//! others are ignored (counted by the caller). Each `fencing.*` field is looked up on the item,
//! then its instrumentation scope, then its resource, the first wins. u64 fields take an
//! `intValue >= 0` or a `stringValue` of decimal digits; string fields a `stringValue` or an
//! `intValue` (written in decimal). A span's time is its end, a log record's its time (or its
//! observed time when that is 0). A span's provenance is `otlp:<trace_id>/<span_id>` (ids of
//! exactly 16 and 8 bytes, not all zero); a log record has none of its own (the WAL offset).
//!
//! A protobuf body is mapped as it is read ([`wire::map`]: no request is built, the same items
//! and the same refusals as prost's parse followed by the mapping); OTLP/JSON and gRPC
//! requests are parsed into `opentelemetry-proto`'s types and mapped from those.
//!
//! Ingest decodes the client's request once: [`map_traces`] / [`map_logs`] map it to its
//! fencing items (events, and errors in the place of malformed items, to be kept as
//! `malformed_event` evidence), which the WAL stores as they are ([`stored`]); applying a
//! record, on ingest and on replay alike, reads those items back. [`decode`] reads the records
//! of earlier builds (the request reduced to its fencing items, protobuf) through the same
//! mapping.

use crate::decode::json::DecodeError;
use fencewatch_assess::event::{Epoch, Event, Incarnation, Kind, Order, Outcome, Seq};
use fencewatch_assess::live::SpanId;
use fencewatch_assess::time::EventTime;
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::trace::v1::status::StatusCode;
use prost::Message;

pub use opentelemetry_proto::tonic::collector::logs::v1 as logs_service;
pub use opentelemetry_proto::tonic::collector::trace::v1 as trace_service;
pub use opentelemetry_proto::tonic::{common, logs, resource, trace};

mod json_times;
mod level;
pub mod stored;
pub mod wire;

use level::{Level, Lookup, Val};

/// The attribute that makes an item a fencing event (read from the item only).
pub const KIND: &str = "fencing.kind";
const PREFIX: &str = "fencing.";
/// The message of an errored commit or fence span without `fencing.outcome` (SPEC §8).
pub const ERROR_WITHOUT_OUTCOME: &str =
    "span status ERROR: the commit's outcome is unknown; set fencing.outcome";

/// Which OTLP signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Signal {
    /// Spans (`/v1/traces`, the trace service).
    Traces,
    /// Log records (`/v1/logs`, the logs service).
    Logs,
}

impl Signal {
    /// The metric label value: `traces` or `logs`.
    pub fn as_str(self) -> &'static str {
        match self {
            Signal::Traces => "traces",
            Signal::Logs => "logs",
        }
    }

    /// What one item is called: `span` or `log record`.
    pub fn item(self) -> &'static str {
        match self {
            Signal::Traces => "span",
            Signal::Logs => "log record",
        }
    }
}

/// Where an item sat in its request: (resource, scope, item) indices.
pub type Location = [u32; 3];

/// Names an item of a request of `signal` at `loc`, e.g. `resource_spans[0].scope_spans[1].spans[3]`.
pub fn location_name(signal: Signal, loc: Location) -> String {
    let [r, s, i] = loc;
    match signal {
        Signal::Traces => format!("resource_spans[{r}].scope_spans[{s}].spans[{i}]"),
        Signal::Logs => format!("resource_logs[{r}].scope_logs[{s}].log_records[{i}]"),
    }
}

/// A request mapped to its fencing items: what the WAL stores ([`stored::encode_into`]).
#[derive(Debug, Default)]
pub struct Mapped {
    /// Its fencing items, in order.
    pub items: Decoded,
    /// Items without `fencing.kind`: neither taken nor rejected.
    pub ignored: u64,
    /// Where each fencing item sat in the request.
    pub locations: Vec<Location>,
}

/// A string field's value, borrowed from the request: absent, a string's bytes (UTF-8), or
/// an integer (written in decimal where it is stored); never [`Val::Other`].
type Text<'a> = Option<Val<'a>>;

/// One fencing item mapped to an event, its strings borrowed from the request until the item
/// is written into [`Decoded`]'s record.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Item<'a> {
    kind: Kind,
    ts: EventTime,
    outcome: Outcome,
    epoch: Option<Epoch>,
    incarnation: Incarnation,
    order: Option<Order>,
    seq: Option<Seq>,
    property: Text<'a>,
    scope: Text<'a>,
    route: Text<'a>,
    holder: Text<'a>,
    op_id: Text<'a>,
    emitter: Text<'a>,
    /// The attestation fields (SPEC §10), kept on an attestation only.
    premise: Text<'a>,
    valid_for: Option<fencewatch_assess::time::Duration>,
    attester: Text<'a>,
    evidence: Text<'a>,
}

/// A malformed fencing item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ItemError {
    /// Its trace and span ids when it is a span with valid ids.
    pub span: Option<SpanId>,
    /// What is wrong.
    pub error: DecodeError,
}

/// The fencing items of one request, mapped, in order: written as they are mapped in the
/// WAL's form of them ([`stored`]), so that the request's strings are copied once, into it,
/// and storing the items is one copy of it.
#[derive(Debug)]
pub struct Decoded {
    /// How many items.
    count: usize,
    /// What the buffer began with (a WAL payload's header: [`wire::map_into`]), then from
    /// `start` the items' WAL form: their count (in [`stored::COUNT_BYTES`], written last),
    /// then the items.
    record: Vec<u8>,
    start: usize,
}

/// One decoded item: an event (with its span's provenance, if any), or why it is malformed.
#[derive(Debug)]
pub enum Entry<'a> {
    /// A fencing event, with its span's trace and span ids.
    Event(Event<'a>, Option<&'a SpanId>),
    /// A malformed fencing item.
    Malformed(ItemError),
}

/// No items: a valid record of none.
impl Default for Decoded {
    fn default() -> Decoded {
        Decoded {
            count: 0,
            record: stored::count_bytes(0).to_vec(),
            start: 0,
        }
    }
}

impl Decoded {
    /// How many items.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The items in order.
    pub fn entries(&self) -> impl Iterator<Item = Entry<'_>> {
        stored::decode(self.stored())
            .expect("a record written by the mapping reads back")
            .into_iter()
    }

    /// The items' WAL form ([`stored`]).
    pub fn stored(&self) -> &[u8] {
        &self.record[self.start..]
    }

    /// The buffer: what it began with, then the items' WAL form (for [`wire::map_into`], the
    /// WAL payload).
    pub fn into_buffer(self) -> Vec<u8> {
        self.record
    }
}

/// Why a stored body does not decode (a WAL record this build did not write).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct BodyError(String);

/// Decodes a request body of `signal` (protobuf) into its items: the WAL records of formats
/// `OtlpTraces` / `OtlpLogs` (a request reduced to its fencing items, by earlier builds).
pub fn decode(signal: Signal, body: &[u8]) -> Result<Decoded, BodyError> {
    let bad =
        |e: prost::DecodeError| BodyError(format!("not an OTLP {} request: {e}", signal.as_str()));
    match signal {
        Signal::Traces => ExportTraceServiceRequest::decode(body)
            .map(|r| map_traces(&r).items)
            .map_err(bad),
        Signal::Logs => ExportLogsServiceRequest::decode(body)
            .map(|r| map_logs(&r).items)
            .map_err(bad),
    }
}

/// The `fencing.*` attributes the mapping reads, by index ([`Key`]).
const KEYS: [&str; 16] = [
    KIND,
    "fencing.scope",
    "fencing.epoch",
    "fencing.route",
    "fencing.property",
    "fencing.holder",
    "fencing.op_id",
    "fencing.incarnation",
    "fencing.order",
    "fencing.outcome",
    "fencing.emitter",
    "fencing.seq",
    "fencing.premise",
    "fencing.valid_for",
    "fencing.attester",
    "fencing.evidence",
];

/// An index into [`KEYS`].
type Key = usize;
const K_KIND: Key = 0;
const K_SCOPE: Key = 1;
const K_EPOCH: Key = 2;
const K_ROUTE: Key = 3;
const K_PROPERTY: Key = 4;
const K_HOLDER: Key = 5;
const K_OP_ID: Key = 6;
const K_INCARNATION: Key = 7;
const K_ORDER: Key = 8;
const K_OUTCOME: Key = 9;
const K_EMITTER: Key = 10;
const K_SEQ: Key = 11;
const K_PREMISES: [Key; 4] = [12, 13, 14, 15];

const U64_FIELDS: &str =
    "must be a non-negative integer: an intValue >= 0 or a stringValue of decimal digits";
const STR_FIELDS: &str = "must be a string: a stringValue, or an intValue";

fn field_error(key: Key, reason: impl Into<String>, ts: Option<EventTime>) -> DecodeError {
    DecodeError {
        field: Some(KEYS[key]),
        reason: reason.into(),
        ts,
    }
}

/// What a span contributes besides its attributes.
struct SpanFacts<'a> {
    trace_id: &'a [u8],
    span_id: &'a [u8],
    end_time_unix_nano: u64,
    /// Its status is `ERROR`.
    errored: bool,
}

/// What a [`Builder`] held at one point ([`Builder::mark`]).
#[derive(Clone, Copy)]
struct Mark {
    record: usize,
    count: usize,
    ignored: u64,
    locations: usize,
}

/// Builds [`Decoded`], writing each item's WAL form as it is mapped.
#[derive(Default)]
struct Builder {
    mapped: Mapped,
}

impl Builder {
    /// For a request of `n` items: room for them all to be fencing items (about a hundred
    /// bytes each in the record, for the time of one request, and for 65,536 at most), so
    /// that the lists do not grow on the way.
    /// The items' WAL form is written after what `buf` holds.
    fn after(mut buf: Vec<u8>, n: usize) -> Builder {
        let n = n.min(1 << 16);
        buf.reserve(stored::COUNT_BYTES + 96 * n);
        let start = buf.len();
        buf.extend_from_slice(&[0; stored::COUNT_BYTES]);
        let mut b = Builder::default();
        b.mapped.items.record = buf;
        b.mapped.items.start = start;
        b.mapped.locations.reserve(n);
        b
    }

    /// Where the items stand, to go back to with [`Builder::rewind`].
    fn mark(&self) -> Mark {
        let m = &self.mapped;
        Mark {
            record: m.items.record.len(),
            count: m.items.count,
            ignored: m.ignored,
            locations: m.locations.len(),
        }
    }

    /// Forgets the items added since `mark` was taken.
    fn rewind(&mut self, mark: Mark) {
        let m = &mut self.mapped;
        m.items.record.truncate(mark.record);
        m.items.count = mark.count;
        m.ignored = mark.ignored;
        m.locations.truncate(mark.locations);
    }

    fn finish(mut self) -> Mapped {
        let d = &mut self.mapped.items;
        let at = d.start..d.start + stored::COUNT_BYTES;
        d.record[at].copy_from_slice(&stored::count_bytes(d.count));
        self.mapped
    }

    /// Whether the item at `at` is a fencing item (else it is counted as ignored).
    fn take(&mut self, item: &Level<'_>, at: [usize; 3]) -> bool {
        if !item.has(K_KIND) {
            self.mapped.ignored += 1;
            return false;
        }
        let index = |i: usize| u32::try_from(i).unwrap_or(u32::MAX);
        self.mapped.locations.push(at.map(index));
        true
    }

    fn item<'a>(look: &Lookup<'_, 'a>, at: EventTime) -> Result<Item<'a>, DecodeError> {
        let ts = Some(at);
        for level in [look.item, look.up] {
            if let Some(k) = &level.repeated {
                return Err(line_error(format!("attribute `{k}` is repeated"), ts));
            }
        }
        // Kind and outcome matched as bytes (a string value was checked to be UTF-8 where it
        // was read): the common case makes no `str` and no error.
        let bytes_of = |key: Key| match look.value(key) {
            Some(Some(Val::Str(b))) => Some(b),
            _ => None,
        };
        let kind = match bytes_of(K_KIND).and_then(Kind::parse_bytes) {
            Some(kind) => Some(kind),
            None => Self::text(look, K_KIND, ts, |s| {
                Kind::parse(s).ok_or_else(|| format!("unknown kind `{s}`"))
            })?,
        };
        let kind = kind.ok_or_else(|| field_error(K_KIND, STR_FIELDS, ts))?;
        let outcome = match bytes_of(K_OUTCOME).and_then(Outcome::parse_bytes) {
            Some(outcome) => Some(outcome),
            None => Self::text(look, K_OUTCOME, ts, |s| {
                Outcome::parse(s).ok_or_else(|| format!("unknown outcome `{s}`"))
            })?,
        };
        // The numbers and the strings fail with their key alone (a `Result` of a word or two,
        // not of a `DecodeError`), made the field's error once, in the same order.
        let u = |key: Key| -> Result<Option<u64>, Key> {
            look.value(key)
                .map(|v| as_u64(v).map_err(|()| key))
                .transpose()
        };
        let nums = (|| Ok([u(K_EPOCH)?, u(K_INCARNATION)?, u(K_ORDER)?, u(K_SEQ)?]))()
            .map_err(|key| field_error(key, U64_FIELDS, ts))?;
        let [epoch, incarnation, order, seq] = nums;
        let (epoch, order, seq) = (epoch.map(Epoch), order.map(Order), seq.map(Seq));
        let incarnation = Incarnation(incarnation.unwrap_or(0));
        let string = |key: Key| -> Result<Text<'a>, Key> {
            match look.value(key) {
                None => Ok(None),
                Some(Some(v @ (Val::Str(_) | Val::Int(_)))) => Ok(Some(v)),
                Some(_) => Err(key),
            }
        };
        let str_error = |key: Key| field_error(key, STR_FIELDS, ts);
        // The premise fields (SPEC §10) are checked for their type, and kept on an attestation.
        let attestation = kind == Kind::Attestation;
        let [k_premise, k_valid_for, k_attester, k_evidence] = K_PREMISES;
        let valid_for = if attestation {
            Self::text(look, k_valid_for, ts, valid_for)?
        } else {
            string(k_valid_for).map_err(str_error)?;
            None
        };
        let premises = (|| Ok([string(k_premise)?, string(k_attester)?, string(k_evidence)?]))()
            .map_err(str_error)?;
        let [premise, attester, evidence] = if attestation { premises } else { [None; 3] };
        let strs = (|| {
            Ok([
                string(K_PROPERTY)?,
                string(K_SCOPE)?,
                string(K_ROUTE)?,
                string(K_HOLDER)?,
                string(K_OP_ID)?,
                string(K_EMITTER)?,
            ])
        })()
        .map_err(str_error)?;
        let [property, scope, route, holder, op_id, emitter] = strs;
        Ok(Item {
            kind,
            ts: at,
            outcome: outcome.unwrap_or(Outcome::default_of(kind)),
            epoch,
            incarnation,
            order,
            seq,
            property,
            scope,
            route,
            holder,
            op_id,
            emitter,
            premise,
            valid_for,
            attester,
            evidence,
        })
    }

    /// A string field read in place, through `parse` (an `Err` is the field's reason).
    fn text<T>(
        look: &Lookup<'_, '_>,
        key: Key,
        ts: Option<EventTime>,
        parse: impl Fn(&str) -> Result<T, String>,
    ) -> Result<Option<T>, DecodeError> {
        let Some(v) = look.value(key) else {
            return Ok(None);
        };
        let parsed = match v {
            Some(Val::Str(b)) => match std::str::from_utf8(b) {
                Ok(s) => parse(s),
                Err(_) => Err(STR_FIELDS.to_string()),
            },
            Some(Val::Int(i)) => parse(&i.to_string()),
            _ => Err(STR_FIELDS.to_string()),
        };
        parsed.map(Some).map_err(|why| field_error(key, why, ts))
    }

    fn push(&mut self, item: Result<Item<'_>, DecodeError>, span: Option<SpanId>) {
        let d = &mut self.mapped.items;
        stored::write_item(&mut d.record, &item, span.as_ref());
        d.count += 1;
    }

    /// The span at `at`, with its attributes `item` under `up` (its scope's and resource's).
    fn span(&mut self, item: &Level<'_>, up: &Level<'_>, at: [usize; 3], span: SpanFacts<'_>) {
        if !self.take(item, at) {
            return;
        }
        let ts = time(span.end_time_unix_nano);
        let prov = span_ids(span.trace_id, span.span_id);
        let ok_ts = ts.and_then(Result::ok);
        let result = match (&prov, ts) {
            (Err(e), _) => Err(line_error(e.clone(), ok_ts)),
            (_, None) => Err(line_error("span end_time_unix_nano is 0".into(), None)),
            (_, Some(Err(()))) => Err(line_error(
                "span end_time_unix_nano is beyond 2^63-1 ns".into(),
                None,
            )),
            (Ok(_), Some(Ok(t))) => {
                let look = Lookup { item, up };
                let outcome_set = look.value(K_OUTCOME).is_some();
                Self::item(&look, t).and_then(|it| {
                    if span.errored && it.kind.is_mutation() && !outcome_set {
                        Err(line_error(ERROR_WITHOUT_OUTCOME.into(), ok_ts))
                    } else {
                        Ok(it)
                    }
                })
            }
        };
        self.push(result, prov.ok());
    }

    /// The log record at `at`, with its attributes `item` under `up` (its scope's and
    /// resource's).
    fn log(
        &mut self,
        item: &Level<'_>,
        up: &Level<'_>,
        at: [usize; 3],
        time_ns: u64,
        observed_ns: u64,
    ) {
        if !self.take(item, at) {
            return;
        }
        let result = match time(time_ns).or_else(|| time(observed_ns)) {
            None => Err(line_error(
                "log record time_unix_nano and observed_time_unix_nano are 0".into(),
                None,
            )),
            Some(Err(())) => Err(line_error(
                "log record time is beyond 2^63-1 ns".into(),
                None,
            )),
            Some(Ok(t)) => {
                let look = Lookup { item, up };
                Self::item(&look, t)
            }
        };
        self.push(result, None);
    }
}

/// `fencing.valid_for`: a contract duration (`24h`) or decimal nanoseconds, above zero.
fn valid_for(v: &str) -> Result<fencewatch_assess::time::Duration, String> {
    let d = if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) {
        let n: i64 = v
            .parse()
            .map_err(|_| "exceeds 2^63-1 nanoseconds".to_string())?;
        fencewatch_assess::time::Duration(n)
    } else {
        fencewatch_assess::time::Duration::parse(v).map_err(|e| e.to_string())?
    };
    if d.0 == 0 {
        return Err("must be greater than zero".into());
    }
    Ok(d)
}

fn as_u64(v: Option<Val<'_>>) -> Result<u64, ()> {
    match v {
        Some(Val::Int(i)) => u64::try_from(i).map_err(drop),
        Some(Val::Str(s)) if !s.is_empty() && s.iter().all(u8::is_ascii_digit) => {
            // Digits only: ASCII.
            std::str::from_utf8(s).map_err(drop)?.parse().map_err(drop)
        }
        _ => Err(()),
    }
}

/// An item's event time from a u64 of ns: 0 is absent, beyond `i64::MAX` out of range.
fn time(ns: u64) -> Option<Result<EventTime, ()>> {
    (ns != 0).then(|| i64::try_from(ns).map(EventTime).map_err(drop))
}

/// A span's trace and span ids (its provenance, rendered `otlp:<trace_id>/<span_id>`), or why
/// they are not valid.
pub fn span_ids(trace_id: &[u8], span_id: &[u8]) -> Result<SpanId, String> {
    for (name, id, len) in [("trace_id", trace_id, 16), ("span_id", span_id, 8)] {
        if id.len() != len {
            return Err(format!("{name} is {} bytes, must be {len}", id.len()));
        }
        if id.iter().all(|&b| b == 0) {
            return Err(format!("{name} is all zeros"));
        }
    }
    let mut id = [0u8; 24];
    id[..16].copy_from_slice(trace_id);
    id[16..].copy_from_slice(span_id);
    Ok(id)
}

fn line_error(reason: String, ts: Option<EventTime>) -> DecodeError {
    DecodeError {
        field: None,
        reason,
        ts,
    }
}

fn attributes_of(r: Option<&resource::v1::Resource>) -> Level<'_> {
    r.map_or_else(Level::default, |r| Level::of(&r.attributes))
}

fn scope_attributes(s: Option<&common::v1::InstrumentationScope>) -> Level<'_> {
    s.map_or_else(Level::default, |s| Level::of(&s.attributes))
}

/// Maps a parsed trace request to its fencing spans (module doc). A protobuf body is mapped
/// without materialising the request by [`wire::map`], to the same items.
pub fn map_traces(req: &ExportTraceServiceRequest) -> Mapped {
    map_traces_into(req, Vec::new())
}

/// [`map_traces`], the items' WAL form written after what `buf` holds (as [`wire::map_into`]).
pub fn map_traces_into(req: &ExportTraceServiceRequest, buf: Vec<u8>) -> Mapped {
    let spans = req.resource_spans.iter().flat_map(|r| &r.scope_spans);
    let mut b = Builder::after(buf, spans.map(|s| s.spans.len()).sum());
    for (r, rs) in req.resource_spans.iter().enumerate() {
        let resource = attributes_of(rs.resource.as_ref());
        for (s, ss) in rs.scope_spans.iter().enumerate() {
            let up = scope_attributes(ss.scope.as_ref()).over(&resource);
            for (i, span) in ss.spans.iter().enumerate() {
                let item = Level::of(&span.attributes);
                let facts = SpanFacts {
                    trace_id: &span.trace_id,
                    span_id: &span.span_id,
                    end_time_unix_nano: span.end_time_unix_nano,
                    errored: span
                        .status
                        .as_ref()
                        .is_some_and(|s| s.code == StatusCode::Error as i32),
                };
                b.span(&item, &up, [r, s, i], facts);
            }
        }
    }
    b.finish()
}

/// Maps a parsed logs request to its fencing log records (module doc).
pub fn map_logs(req: &ExportLogsServiceRequest) -> Mapped {
    map_logs_into(req, Vec::new())
}

/// [`map_logs`], the items' WAL form written after what `buf` holds (as [`wire::map_into`]).
pub fn map_logs_into(req: &ExportLogsServiceRequest, buf: Vec<u8>) -> Mapped {
    let records = req.resource_logs.iter().flat_map(|r| &r.scope_logs);
    let mut b = Builder::after(buf, records.map(|s| s.log_records.len()).sum());
    for (r, rl) in req.resource_logs.iter().enumerate() {
        let resource = attributes_of(rl.resource.as_ref());
        for (s, sl) in rl.scope_logs.iter().enumerate() {
            let up = scope_attributes(sl.scope.as_ref()).over(&resource);
            for (i, rec) in sl.log_records.iter().enumerate() {
                let item = Level::of(&rec.attributes);
                b.log(
                    &item,
                    &up,
                    [r, s, i],
                    rec.time_unix_nano,
                    rec.observed_time_unix_nano,
                );
            }
        }
    }
    b.finish()
}

/// Why a request body is not an OTLP request (an HTTP `400`, a gRPC `INVALID_ARGUMENT`).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct RequestError(pub String);

/// Parses an OTLP/HTTP trace request body, protobuf or (`json`) OTLP/JSON. Given a
/// [`prost::bytes::Bytes`], prost copies each id once (from a slice, twice: through a `Bytes`
/// of its own).
pub fn parse_traces(
    body: impl prost::bytes::Buf + AsRef<[u8]>,
    json: bool,
) -> Result<ExportTraceServiceRequest, RequestError> {
    if json {
        from_json(body.as_ref())
    } else {
        ExportTraceServiceRequest::decode(body)
            .map_err(|e| RequestError(format!("invalid OTLP protobuf: {e}")))
    }
}

/// Parses an OTLP/HTTP logs request body, protobuf or (`json`) OTLP/JSON (as
/// [`parse_traces`]).
pub fn parse_logs(
    body: impl prost::bytes::Buf + AsRef<[u8]>,
    json: bool,
) -> Result<ExportLogsServiceRequest, RequestError> {
    if json {
        from_json(body.as_ref())
    } else {
        ExportLogsServiceRequest::decode(body)
            .map_err(|e| RequestError(format!("invalid OTLP protobuf: {e}")))
    }
}

/// An OTLP/JSON request, its times written as JSON integers read as the decimal strings
/// opentelemetry-proto reads ([`json_times`]: protobuf's JSON mapping allows a 64-bit integer
/// either way). Parsed once; where integers were quoted, an error's column counts the quotes.
fn from_json<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, RequestError> {
    let quoted = json_times::quote_times(body);
    serde_json::from_slice(quoted.as_deref().unwrap_or(body))
        .map_err(|e| RequestError(format!("invalid OTLP/JSON: {e}")))
}

#[cfg(test)]
mod tests;
