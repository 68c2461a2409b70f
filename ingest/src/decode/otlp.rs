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
//! Ingest goes in two steps, both here: [`reduce_traces`] / [`reduce_logs`] keep of a request
//! only its fencing items and their `fencing.*` attributes (with what the mapping reads: ids,
//! times, status), which is what the WAL stores as protobuf; [`decode`] maps such a body to
//! items, on ingest and on replay alike, so both give the same events. Malformed items come
//! out as errors in their place, to be kept as `malformed_event` evidence.

use crate::decode::json::DecodeError;
use fencewatch_assess::event::{Epoch, Event, Incarnation, Kind, Order, Outcome, Seq};
use fencewatch_assess::time::EventTime;
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value::Value};
use opentelemetry_proto::tonic::trace::v1::status::StatusCode;
use prost::Message;

pub use opentelemetry_proto::tonic::collector::logs::v1 as logs_service;
pub use opentelemetry_proto::tonic::collector::trace::v1 as trace_service;
pub use opentelemetry_proto::tonic::{common, logs, resource, trace};

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

/// A request reduced to its fencing items (see the module doc).
#[derive(Debug, Default)]
pub struct Reduced {
    /// The reduced request, protobuf: what the WAL stores.
    pub body: Vec<u8>,
    /// Its items, in order: the fencing items of the request.
    pub items: u64,
    /// Items without `fencing.kind`: neither taken nor rejected.
    pub ignored: u64,
    /// Where each kept item sat in the original request.
    pub locations: Vec<Location>,
}

fn is_fencing(kv: &KeyValue) -> bool {
    kv.key.starts_with(PREFIX)
}

fn has_kind(attrs: &[KeyValue]) -> bool {
    attrs.iter().any(|kv| kv.key == KIND)
}

/// Keeps the `fencing.*` attributes only.
fn strip(attrs: &mut Vec<KeyValue>) {
    attrs.retain(is_fencing);
}

/// Reduces a trace request to its fencing spans (module doc).
pub fn reduce_traces(mut req: ExportTraceServiceRequest) -> Reduced {
    let mut out = Reduced::default();
    for (r, rs) in req.resource_spans.iter_mut().enumerate() {
        rs.schema_url.clear();
        if let Some(res) = &mut rs.resource {
            strip(&mut res.attributes);
            res.entity_refs.clear();
        }
        for (s, ss) in rs.scope_spans.iter_mut().enumerate() {
            ss.schema_url.clear();
            if let Some(sc) = &mut ss.scope {
                strip(&mut sc.attributes);
                sc.name.clear();
                sc.version.clear();
            }
            let mut i = 0;
            ss.spans.retain_mut(|span| {
                let keep = has_kind(&span.attributes);
                if keep {
                    strip(&mut span.attributes);
                    span.events.clear();
                    span.links.clear();
                    span.trace_state.clear();
                    span.parent_span_id.clear();
                    if let Some(st) = &mut span.status {
                        st.message.clear();
                    }
                    out.locations.push([r as u32, s as u32, i]);
                } else {
                    out.ignored += 1;
                }
                i += 1;
                keep
            });
        }
        rs.scope_spans.retain(|ss| !ss.spans.is_empty());
    }
    req.resource_spans.retain(|rs| !rs.scope_spans.is_empty());
    out.items = out.locations.len() as u64;
    if out.items > 0 {
        out.body = req.encode_to_vec();
    }
    out
}

/// Reduces a logs request to its fencing log records (module doc).
pub fn reduce_logs(mut req: ExportLogsServiceRequest) -> Reduced {
    let mut out = Reduced::default();
    for (r, rl) in req.resource_logs.iter_mut().enumerate() {
        rl.schema_url.clear();
        if let Some(res) = &mut rl.resource {
            strip(&mut res.attributes);
            res.entity_refs.clear();
        }
        for (s, sl) in rl.scope_logs.iter_mut().enumerate() {
            sl.schema_url.clear();
            if let Some(sc) = &mut sl.scope {
                strip(&mut sc.attributes);
                sc.name.clear();
                sc.version.clear();
            }
            let mut i = 0;
            sl.log_records.retain_mut(|rec| {
                let keep = has_kind(&rec.attributes);
                if keep {
                    strip(&mut rec.attributes);
                    rec.body = None;
                    rec.severity_text.clear();
                    rec.event_name.clear();
                    out.locations.push([r as u32, s as u32, i]);
                } else {
                    out.ignored += 1;
                }
                i += 1;
                keep
            });
        }
        rl.scope_logs.retain(|sl| !sl.log_records.is_empty());
    }
    req.resource_logs.retain(|rl| !rl.scope_logs.is_empty());
    out.items = out.locations.len() as u64;
    if out.items > 0 {
        out.body = req.encode_to_vec();
    }
    out
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
}

/// A malformed fencing item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ItemError {
    /// Its provenance when it is a span with valid ids.
    pub span: Option<String>,
    /// What is wrong.
    pub error: DecodeError,
}

/// The items of one reduced request, decoded, in order.
#[derive(Debug, Default)]
pub struct Decoded {
    strings: Vec<String>,
    items: Vec<(Result<Item, DecodeError>, Option<String>)>,
}

/// One decoded item: an event (with its span's provenance, if any), or why it is malformed.
#[derive(Debug)]
pub enum Entry<'a> {
    /// A fencing event.
    Event(Event<'a>, Option<&'a str>),
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
                Entry::Event(ev, span.as_deref())
            }
            Err(e) => Entry::Malformed(ItemError {
                span: span.clone(),
                error: e.clone(),
            }),
        })
    }
}

/// Why a stored body does not decode (a WAL record this build did not write).
#[derive(Debug, Clone, thiserror::Error)]
#[error("not an OTLP {signal} request: {reason}")]
pub struct BodyError {
    signal: &'static str,
    reason: String,
}

/// Decodes a reduced request body of `signal` (protobuf) into its items.
pub fn decode(signal: Signal, body: &[u8]) -> Result<Decoded, BodyError> {
    let bad = |e: prost::DecodeError| BodyError {
        signal: signal.as_str(),
        reason: e.to_string(),
    };
    match signal {
        Signal::Traces => ExportTraceServiceRequest::decode(body)
            .map(map_traces)
            .map_err(bad),
        Signal::Logs => ExportLogsServiceRequest::decode(body)
            .map(map_logs)
            .map_err(bad),
    }
}

/// The `fencing.*` attributes of one level (item, scope or resource), by key, with the first
/// key found repeated.
#[derive(Debug, Default)]
struct Level {
    attrs: Vec<KeyValue>,
    repeated: Option<String>,
}

impl Level {
    fn of(attrs: Vec<KeyValue>) -> Level {
        let mut attrs: Vec<KeyValue> = attrs.into_iter().filter(is_fencing).collect();
        attrs.sort_by(|a, b| a.key.cmp(&b.key));
        let repeated = attrs
            .windows(2)
            .find(|w| w[0].key == w[1].key)
            .map(|w| w[0].key.clone());
        Level { attrs, repeated }
    }

    fn index(&self, key: &str) -> Option<usize> {
        self.attrs
            .binary_search_by(|kv| kv.key.as_str().cmp(key))
            .ok()
    }
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
    Item(usize),
    /// On its scope or resource: shared by its items.
    Shared(&'l AnyValue),
}

impl Lookup<'_> {
    fn find(&self, key: &str) -> Option<Found<'_>> {
        if let Some(i) = self.item.index(key) {
            return Some(Found::Item(i));
        }
        for level in [self.scope, self.resource] {
            if let Some(i) = level.index(key) {
                return level.attrs[i].value.as_ref().map(Found::Shared);
            }
        }
        None
    }
}

const U64_FIELDS: &str =
    "must be a non-negative integer: an intValue >= 0 or a stringValue of decimal digits";
const STR_FIELDS: &str = "must be a string: a stringValue, or an intValue";

fn field_error(
    field: &'static str,
    reason: impl Into<String>,
    ts: Option<EventTime>,
) -> DecodeError {
    DecodeError {
        field: Some(field),
        reason: reason.into(),
        ts,
    }
}

/// Builds [`Decoded`], moving item-level strings into its table and sharing scope- and
/// resource-level ones among their items.
#[derive(Default)]
struct Builder {
    out: Decoded,
    /// Table indices of strings shared by the items of the current scope and resource, by the
    /// address of their value.
    shared: Vec<(*const AnyValue, Str)>,
}

impl Builder {
    fn push_str(&mut self, s: String) -> Str {
        self.out.strings.push(s);
        (self.out.strings.len() - 1) as Str
    }

    /// A string field.
    fn string(
        &mut self,
        look: &mut Lookup<'_>,
        key: &'static str,
        ts: Option<EventTime>,
    ) -> Result<Str, DecodeError> {
        match look.find(key) {
            None => Ok(NO_STR),
            Some(Found::Item(i)) => {
                let value = look.item.attrs[i].value.take();
                let s = as_string(value.and_then(|v| v.value))
                    .ok_or_else(|| field_error(key, STR_FIELDS, ts))?;
                Ok(self.push_str(s))
            }
            Some(Found::Shared(v)) => {
                let at = v as *const AnyValue;
                if let Some(&(_, s)) = self.shared.iter().find(|(p, _)| *p == at) {
                    return Ok(s);
                }
                let s =
                    as_string(v.value.clone()).ok_or_else(|| field_error(key, STR_FIELDS, ts))?;
                let s = self.push_str(s);
                self.shared.push((at, s));
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
        let kind_s = self.text(look, KIND, ts)?.unwrap_or_default();
        let kind = Kind::parse(&kind_s)
            .ok_or_else(|| field_error(KIND, format!("unknown kind `{kind_s}`"), ts))?;
        let outcome = match self.text(look, "fencing.outcome", ts)? {
            None => Outcome::default(),
            Some(o) => Outcome::parse(&o).ok_or_else(|| {
                field_error("fencing.outcome", format!("unknown outcome `{o}`"), ts)
            })?,
        };
        let u = |look: &Lookup<'_>, key: &'static str| -> Result<Option<u64>, DecodeError> {
            match look.find(key) {
                None => Ok(None),
                Some(Found::Item(i)) => as_u64(look.item.attrs[i].value.as_ref()).map(Some),
                Some(Found::Shared(v)) => as_u64(Some(v)).map(Some),
            }
            .map_err(|()| field_error(key, U64_FIELDS, ts))
        };
        let epoch = u(look, "fencing.epoch")?.map(Epoch);
        let incarnation = Incarnation(u(look, "fencing.incarnation")?.unwrap_or(0));
        let order = u(look, "fencing.order")?.map(Order);
        let seq = u(look, "fencing.seq")?.map(Seq);
        // The premise fields (SPEC §10) are checked for their type.
        for key in [
            "fencing.premise",
            "fencing.valid_for",
            "fencing.attester",
            "fencing.evidence",
        ] {
            self.text(look, key, ts)?;
        }
        Ok(Item {
            kind,
            ts: at,
            outcome,
            epoch,
            incarnation,
            order,
            seq,
            property: self.string(look, "fencing.property", ts)?,
            scope: self.string(look, "fencing.scope", ts)?,
            route: self.string(look, "fencing.route", ts)?,
            holder: self.string(look, "fencing.holder", ts)?,
            op_id: self.string(look, "fencing.op_id", ts)?,
            emitter: self.string(look, "fencing.emitter", ts)?,
        })
    }

    /// A string field read without keeping it.
    fn text(
        &self,
        look: &Lookup<'_>,
        key: &'static str,
        ts: Option<EventTime>,
    ) -> Result<Option<String>, DecodeError> {
        let v = match look.find(key) {
            None => return Ok(None),
            Some(Found::Item(i)) => look.item.attrs[i].value.as_ref(),
            Some(Found::Shared(v)) => Some(v),
        };
        as_string(v.and_then(|v| v.value.clone()))
            .map(Some)
            .ok_or_else(|| field_error(key, STR_FIELDS, ts))
    }

    fn push(&mut self, item: Result<Item, DecodeError>, span: Option<String>) {
        self.out.items.push((item, span));
    }
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

fn hex(bytes: &[u8], out: &mut String) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for b in bytes {
        out.push(DIGITS[(b >> 4) as usize] as char);
        out.push(DIGITS[(b & 15) as usize] as char);
    }
}

/// A span's provenance, `otlp:<trace_id>/<span_id>`, or why its ids are not valid.
pub fn span_provenance(trace_id: &[u8], span_id: &[u8]) -> Result<String, String> {
    for (name, id, len) in [("trace_id", trace_id, 16), ("span_id", span_id, 8)] {
        if id.len() != len {
            return Err(format!("{name} is {} bytes, must be {len}", id.len()));
        }
        if id.iter().all(|&b| b == 0) {
            return Err(format!("{name} is all zeros"));
        }
    }
    let mut s = String::with_capacity(54);
    s.push_str("otlp:");
    hex(trace_id, &mut s);
    s.push('/');
    hex(span_id, &mut s);
    Ok(s)
}

fn line_error(reason: String, ts: Option<EventTime>) -> DecodeError {
    DecodeError {
        field: None,
        reason,
        ts,
    }
}

fn map_traces(req: ExportTraceServiceRequest) -> Decoded {
    let mut b = Builder::default();
    for rs in req.resource_spans {
        let resource = Level::of(rs.resource.map(|r| r.attributes).unwrap_or_default());
        for ss in rs.scope_spans {
            let scope = Level::of(ss.scope.map(|s| s.attributes).unwrap_or_default());
            b.shared.clear();
            for span in ss.spans {
                let mut item = Level::of(span.attributes);
                if item.index(KIND).is_none() {
                    continue;
                }
                let ts = time(span.end_time_unix_nano);
                let prov = span_provenance(&span.trace_id, &span.span_id);
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
                        let outcome_set = look.find("fencing.outcome").is_some();
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
    b.out
}

fn map_logs(req: ExportLogsServiceRequest) -> Decoded {
    let mut b = Builder::default();
    for rl in req.resource_logs {
        let resource = Level::of(rl.resource.map(|r| r.attributes).unwrap_or_default());
        for sl in rl.scope_logs {
            let scope = Level::of(sl.scope.map(|s| s.attributes).unwrap_or_default());
            b.shared.clear();
            for rec in sl.log_records {
                let mut item = Level::of(rec.attributes);
                if item.index(KIND).is_none() {
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
    b.out
}

/// Why a request body is not an OTLP request (an HTTP `400`, a gRPC `INVALID_ARGUMENT`).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct RequestError(pub String);

/// Parses an OTLP/HTTP trace request body, protobuf or (`json`) OTLP/JSON.
pub fn parse_traces(body: &[u8], json: bool) -> Result<ExportTraceServiceRequest, RequestError> {
    if json {
        serde_json::from_slice(body).map_err(|e| RequestError(format!("invalid OTLP/JSON: {e}")))
    } else {
        ExportTraceServiceRequest::decode(body)
            .map_err(|e| RequestError(format!("invalid OTLP protobuf: {e}")))
    }
}

/// Parses an OTLP/HTTP logs request body, protobuf or (`json`) OTLP/JSON.
pub fn parse_logs(body: &[u8], json: bool) -> Result<ExportLogsServiceRequest, RequestError> {
    if json {
        serde_json::from_slice(body).map_err(|e| RequestError(format!("invalid OTLP/JSON: {e}")))
    } else {
        ExportLogsServiceRequest::decode(body)
            .map_err(|e| RequestError(format!("invalid OTLP protobuf: {e}")))
    }
}

#[cfg(test)]
mod tests;
