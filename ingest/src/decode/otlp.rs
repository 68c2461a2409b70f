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
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value::Value};
use opentelemetry_proto::tonic::trace::v1::status::StatusCode;
use prost::Message;

pub use opentelemetry_proto::tonic::collector::logs::v1 as logs_service;
pub use opentelemetry_proto::tonic::collector::trace::v1 as trace_service;
pub use opentelemetry_proto::tonic::{common, logs, resource, trace};

pub mod stored;

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

fn is_fencing(kv: &KeyValue) -> bool {
    kv.key.starts_with(PREFIX)
}

/// A string of [`Decoded`]'s table, `NO_STR` when absent.
type Str = u32;
const NO_STR: Str = u32::MAX;

/// One fencing item mapped to an event; strings are indices into [`Decoded`]'s table.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Item {
    kind: Kind,
    ts: EventTime,
    outcome: Outcome,
    epoch: Option<Epoch>,
    incarnation: Incarnation,
    order: Option<Order>,
    seq: Option<Seq>,
    property: Str,
    scope: Str,
    route: Str,
    holder: Str,
    op_id: Str,
    emitter: Str,
    /// The attestation fields (SPEC §10), kept on an attestation only.
    premise: Str,
    valid_for: Option<fencewatch_assess::time::Duration>,
    attester: Str,
    evidence: Str,
}

/// A malformed fencing item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ItemError {
    /// Its trace and span ids when it is a span with valid ids.
    pub span: Option<SpanId>,
    /// What is wrong.
    pub error: DecodeError,
}

/// The fencing items of one request, mapped, in order.
#[derive(Debug, Default)]
pub struct Decoded {
    strings: Vec<String>,
    items: Vec<(Result<Item, DecodeError>, Option<SpanId>)>,
}

/// One decoded item: an event (with its span's provenance, if any), or why it is malformed.
#[derive(Debug)]
pub enum Entry<'a> {
    /// A fencing event, with its span's trace and span ids.
    Event(Event<'a>, Option<&'a SpanId>),
    /// A malformed fencing item.
    Malformed(ItemError),
}

impl Decoded {
    /// How many items.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    fn str(&self, s: Str) -> Option<&str> {
        (s != NO_STR).then(|| self.strings[s as usize].as_str())
    }

    /// The items in order.
    pub fn entries(&self) -> impl Iterator<Item = Entry<'_>> {
        self.items.iter().map(|(item, span)| match item {
            Ok(it) => {
                let mut ev = Event::new(it.kind, it.ts);
                ev.outcome = it.outcome;
                ev.epoch = it.epoch;
                ev.incarnation = it.incarnation;
                ev.order = it.order;
                ev.seq = it.seq;
                ev.property = self.str(it.property);
                ev.scope = self.str(it.scope);
                ev.route = self.str(it.route);
                ev.holder = self.str(it.holder);
                ev.op_id = self.str(it.op_id);
                ev.emitter = self.str(it.emitter);
                ev.premise = self.str(it.premise);
                ev.valid_for = it.valid_for;
                ev.attester = self.str(it.attester);
                ev.evidence = self.str(it.evidence);
                Entry::Event(ev, span.as_ref())
            }
            Err(e) => Entry::Malformed(ItemError {
                span: *span,
                error: e.clone(),
            }),
        })
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
            .map(|r| map_traces(r).items)
            .map_err(bad),
        Signal::Logs => ExportLogsServiceRequest::decode(body)
            .map(|r| map_logs(r).items)
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

/// The `fencing.*` attributes of one level (item, scope or resource), by key (a key present
/// without a value is `Some(None)`), with the first key found repeated (unknown `fencing.*`
/// keys too).
#[derive(Debug, Default)]
struct Level {
    values: [Option<Option<AnyValue>>; KEYS.len()],
    repeated: Option<String>,
}

impl Level {
    fn of(attrs: Vec<KeyValue>) -> Level {
        let mut level = Level::default();
        let mut unknown: Vec<String> = Vec::new();
        for kv in attrs {
            if !is_fencing(&kv) {
                continue;
            }
            match key_index(&kv.key) {
                Some(i) if level.values[i].is_none() => level.values[i] = Some(kv.value),
                Some(_) => {
                    level.repeated.get_or_insert(kv.key);
                }
                None if unknown.contains(&kv.key) => {
                    level.repeated.get_or_insert(kv.key);
                }
                None => unknown.push(kv.key),
            }
        }
        level
    }

    fn has(&self, key: Key) -> bool {
        self.values[key].is_some()
    }
}

/// The index of a `fencing.*` key in [`KEYS`] (one `match`, not a search).
fn key_index(key: &str) -> Option<Key> {
    Some(match key.strip_prefix(PREFIX)? {
        "kind" => 0,
        "scope" => 1,
        "epoch" => 2,
        "route" => 3,
        "property" => 4,
        "holder" => 5,
        "op_id" => 6,
        "incarnation" => 7,
        "order" => 8,
        "outcome" => 9,
        "emitter" => 10,
        "seq" => 11,
        "premise" => 12,
        "valid_for" => 13,
        "attester" => 14,
        "evidence" => 15,
        _ => return None,
    })
}

/// The three levels an item's attributes are looked up in, item first.
struct Lookup<'l> {
    item: &'l mut Level,
    scope: &'l Level,
    resource: &'l Level,
}

/// Where a field's value was found.
enum Found<'l> {
    /// On the item: its value can be moved out.
    Item,
    /// On its scope (`true`) or resource: shared by its items.
    Shared(bool, Option<&'l AnyValue>),
}

impl Lookup<'_> {
    fn find(&self, key: Key) -> Option<Found<'_>> {
        if self.item.has(key) {
            return Some(Found::Item);
        }
        for (scope, level) in [(true, self.scope), (false, self.resource)] {
            if let Some(v) = &level.values[key] {
                return Some(Found::Shared(scope, v.as_ref()));
            }
        }
        None
    }

    /// The value of `key`, if present (`Some(None)`: present without a value).
    fn value(&self, key: Key) -> Option<Option<&AnyValue>> {
        match self.find(key)? {
            Found::Item => Some(self.item.values[key].as_ref().and_then(Option::as_ref)),
            Found::Shared(_, v) => Some(v),
        }
    }
}

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

/// Builds [`Decoded`], moving item-level strings into its table and sharing scope- and
/// resource-level ones among their items.
#[derive(Default)]
struct Builder {
    mapped: Mapped,
    /// Table indices of the strings of the current scope's and resource's keys, once taken.
    scope_strs: [Option<Str>; KEYS.len()],
    resource_strs: [Option<Str>; KEYS.len()],
}

impl Builder {
    /// For a request of `n` items: room for them all to be fencing items (a few hundred
    /// bytes each, for the time of one request, and for 65,536 at most), so that the lists
    /// do not grow on the way.
    fn for_items(n: usize) -> Builder {
        let n = n.min(1 << 16);
        let mut b = Builder::default();
        b.mapped.items.items.reserve(n);
        b.mapped.locations.reserve(n);
        b
    }

    fn push_str(&mut self, s: String) -> Str {
        let strings = &mut self.mapped.items.strings;
        strings.push(s);
        (strings.len() - 1) as Str
    }

    /// Whether the item at `at` is a fencing item (else it is counted as ignored).
    fn take(&mut self, item: &Level, at: [usize; 3]) -> bool {
        if !item.has(K_KIND) {
            self.mapped.ignored += 1;
            return false;
        }
        let index = |i: usize| u32::try_from(i).unwrap_or(u32::MAX);
        self.mapped.locations.push(at.map(index));
        true
    }

    /// A new scope: its strings are its own (a resource's too: they are few).
    fn next_scope(&mut self) {
        self.scope_strs = [None; KEYS.len()];
        self.resource_strs = [None; KEYS.len()];
    }

    /// A string field.
    fn string(
        &mut self,
        look: &mut Lookup<'_>,
        key: Key,
        ts: Option<EventTime>,
    ) -> Result<Str, DecodeError> {
        let bad = || field_error(key, STR_FIELDS, ts);
        match look.find(key) {
            None => Ok(NO_STR),
            Some(Found::Item) => {
                let value = look.item.values[key].take().flatten();
                let s = as_string(value.and_then(|v| v.value)).ok_or_else(bad)?;
                Ok(self.push_str(s))
            }
            Some(Found::Shared(scope, v)) => {
                let cached = if scope {
                    self.scope_strs[key]
                } else {
                    self.resource_strs[key]
                };
                if let Some(s) = cached {
                    return Ok(s);
                }
                let s = as_string(v.and_then(|v| v.value.clone())).ok_or_else(bad)?;
                let s = self.push_str(s);
                if scope {
                    self.scope_strs[key] = Some(s);
                } else {
                    self.resource_strs[key] = Some(s);
                }
                Ok(s)
            }
        }
    }

    fn item(&mut self, look: &mut Lookup<'_>, at: EventTime) -> Result<Item, DecodeError> {
        let ts = Some(at);
        for level in [&*look.item, look.scope, look.resource] {
            if let Some(k) = &level.repeated {
                return Err(line_error(format!("attribute `{k}` is repeated"), ts));
            }
        }
        let kind = self.text(look, K_KIND, ts, |s| {
            Kind::parse(s).ok_or_else(|| format!("unknown kind `{s}`"))
        })?;
        let kind = kind.ok_or_else(|| field_error(K_KIND, STR_FIELDS, ts))?;
        let outcome = self.text(look, K_OUTCOME, ts, |s| {
            Outcome::parse(s).ok_or_else(|| format!("unknown outcome `{s}`"))
        })?;
        let u = |look: &Lookup<'_>, key: Key| -> Result<Option<u64>, DecodeError> {
            look.value(key)
                .map(|v| as_u64(v).map_err(|()| field_error(key, U64_FIELDS, ts)))
                .transpose()
        };
        let epoch = u(look, K_EPOCH)?.map(Epoch);
        let incarnation = Incarnation(u(look, K_INCARNATION)?.unwrap_or(0));
        let order = u(look, K_ORDER)?.map(Order);
        let seq = u(look, K_SEQ)?.map(Seq);
        // The premise fields (SPEC §10) are checked for their type, and kept on an attestation.
        let attestation = kind == Kind::Attestation;
        let [k_premise, k_valid_for, k_attester, k_evidence] = K_PREMISES;
        let valid_for = if attestation {
            self.text(look, k_valid_for, ts, valid_for)?
        } else {
            self.text(look, k_valid_for, ts, |_| Ok(()))?;
            None
        };
        let (premise, attester, evidence) = if attestation {
            (
                self.string(look, k_premise, ts)?,
                self.string(look, k_attester, ts)?,
                self.string(look, k_evidence, ts)?,
            )
        } else {
            for key in [k_premise, k_attester, k_evidence] {
                self.text(look, key, ts, |_| Ok(()))?;
            }
            (NO_STR, NO_STR, NO_STR)
        };
        Ok(Item {
            kind,
            ts: at,
            outcome: outcome.unwrap_or(Outcome::default_of(kind)),
            epoch,
            incarnation,
            order,
            seq,
            property: self.string(look, K_PROPERTY, ts)?,
            scope: self.string(look, K_SCOPE, ts)?,
            route: self.string(look, K_ROUTE, ts)?,
            holder: self.string(look, K_HOLDER, ts)?,
            op_id: self.string(look, K_OP_ID, ts)?,
            emitter: self.string(look, K_EMITTER, ts)?,
            premise,
            valid_for,
            attester,
            evidence,
        })
    }

    /// A string field read in place, through `parse` (an `Err` is the field's reason).
    fn text<T>(
        &self,
        look: &Lookup<'_>,
        key: Key,
        ts: Option<EventTime>,
        parse: impl Fn(&str) -> Result<T, String>,
    ) -> Result<Option<T>, DecodeError> {
        let Some(v) = look.value(key) else {
            return Ok(None);
        };
        let parsed = match v.and_then(|v| v.value.as_ref()) {
            Some(Value::StringValue(s)) => parse(s),
            Some(Value::IntValue(i)) => parse(&i.to_string()),
            _ => Err(STR_FIELDS.to_string()),
        };
        parsed.map(Some).map_err(|why| field_error(key, why, ts))
    }

    fn push(&mut self, item: Result<Item, DecodeError>, span: Option<SpanId>) {
        self.mapped.items.items.push((item, span));
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

fn as_string(v: Option<Value>) -> Option<String> {
    match v? {
        Value::StringValue(s) => Some(s),
        Value::IntValue(i) => Some(i.to_string()),
        _ => None,
    }
}

fn as_u64(v: Option<&AnyValue>) -> Result<u64, ()> {
    match v.and_then(|v| v.value.as_ref()) {
        Some(Value::IntValue(i)) => u64::try_from(*i).map_err(drop),
        Some(Value::StringValue(s)) if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) => {
            s.parse().map_err(drop)
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

/// Maps a trace request to its fencing spans (module doc), consuming it: item-level strings
/// are moved, not copied.
pub fn map_traces(req: ExportTraceServiceRequest) -> Mapped {
    let spans = req.resource_spans.iter().flat_map(|r| &r.scope_spans);
    let mut b = Builder::for_items(spans.map(|s| s.spans.len()).sum());
    for (r, rs) in req.resource_spans.into_iter().enumerate() {
        let resource = Level::of(rs.resource.map(|r| r.attributes).unwrap_or_default());
        for (s, ss) in rs.scope_spans.into_iter().enumerate() {
            let scope = Level::of(ss.scope.map(|s| s.attributes).unwrap_or_default());
            b.next_scope();
            for (i, span) in ss.spans.into_iter().enumerate() {
                let mut item = Level::of(span.attributes);
                if !b.take(&item, [r, s, i]) {
                    continue;
                }
                let ts = time(span.end_time_unix_nano);
                let prov = span_ids(&span.trace_id, &span.span_id);
                let ok_ts = ts.and_then(Result::ok);
                let result = match (&prov, ts) {
                    (Err(e), _) => Err(line_error(e.clone(), ok_ts)),
                    (_, None) => Err(line_error("span end_time_unix_nano is 0".into(), None)),
                    (_, Some(Err(()))) => Err(line_error(
                        "span end_time_unix_nano is beyond 2^63-1 ns".into(),
                        None,
                    )),
                    (Ok(_), Some(Ok(t))) => {
                        let mut look = Lookup {
                            item: &mut item,
                            scope: &scope,
                            resource: &resource,
                        };
                        let errored = span
                            .status
                            .as_ref()
                            .is_some_and(|s| s.code == StatusCode::Error as i32);
                        let outcome_set = look.find(K_OUTCOME).is_some();
                        b.item(&mut look, t).and_then(|it| {
                            if errored && it.kind.is_mutation() && !outcome_set {
                                Err(line_error(ERROR_WITHOUT_OUTCOME.into(), ok_ts))
                            } else {
                                Ok(it)
                            }
                        })
                    }
                };
                b.push(result, prov.ok());
            }
        }
    }
    b.mapped
}

/// Maps a logs request to its fencing log records (module doc), consuming it.
pub fn map_logs(req: ExportLogsServiceRequest) -> Mapped {
    let records = req.resource_logs.iter().flat_map(|r| &r.scope_logs);
    let mut b = Builder::for_items(records.map(|s| s.log_records.len()).sum());
    for (r, rl) in req.resource_logs.into_iter().enumerate() {
        let resource = Level::of(rl.resource.map(|r| r.attributes).unwrap_or_default());
        for (s, sl) in rl.scope_logs.into_iter().enumerate() {
            let scope = Level::of(sl.scope.map(|s| s.attributes).unwrap_or_default());
            b.next_scope();
            for (i, rec) in sl.log_records.into_iter().enumerate() {
                let mut item = Level::of(rec.attributes);
                if !b.take(&item, [r, s, i]) {
                    continue;
                }
                let ts = time(rec.time_unix_nano).or_else(|| time(rec.observed_time_unix_nano));
                let result = match ts {
                    None => Err(line_error(
                        "log record time_unix_nano and observed_time_unix_nano are 0".into(),
                        None,
                    )),
                    Some(Err(())) => Err(line_error(
                        "log record time is beyond 2^63-1 ns".into(),
                        None,
                    )),
                    Some(Ok(t)) => {
                        let mut look = Lookup {
                            item: &mut item,
                            scope: &scope,
                            resource: &resource,
                        };
                        b.item(&mut look, t)
                    }
                };
                b.push(result, None);
            }
        }
    }
    b.mapped
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
        serde_json::from_slice(body.as_ref())
            .map_err(|e| RequestError(format!("invalid OTLP/JSON: {e}")))
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
        serde_json::from_slice(body.as_ref())
            .map_err(|e| RequestError(format!("invalid OTLP/JSON: {e}")))
    } else {
        ExportLogsServiceRequest::decode(body)
            .map_err(|e| RequestError(format!("invalid OTLP protobuf: {e}")))
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
#[test]
fn key_indices_name_their_keys() {
    for (i, k) in KEYS.iter().enumerate() {
        assert_eq!(key_index(k), Some(i), "{k}");
    }
    assert_eq!(key_index("fencing.other"), None);
    assert_eq!(key_index("kind"), None);
}
