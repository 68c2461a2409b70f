//! A batch: what a source hands a partition at one offset. Its items (NDJSON lines, array
//! elements, or one message) take consecutive offsets from its base, so every event has a
//! stable position `base + index`: its provenance (`source:offset`), and the key of its
//! counterexample ids.
//!
//! In the write-ahead log a batch is stored as received (an OTLP request as its mapped items,
//! `decode::otlp::stored`): a small header (format, the wall time it was received, the source
//! name, the first line's number) and the body bytes ([`encode`], [`decode`]). Applying a
//! record decodes it again, so replay after a crash goes through exactly the same code as live
//! ingest.

use crate::decode::json::{self, DecodeError};

mod observe;
#[cfg(feature = "archive")]
pub(crate) use observe::for_each_event;
pub use observe::{Applying, Observer, Retained, Unobserved};

const PAYLOAD_VERSION: u8 = 1;

/// How a batch body is framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// One JSON object per line.
    Ndjson,
    /// A JSON array of objects.
    Array,
    /// An OTLP request's fencing items, mapped to events and errors (`decode::otlp::stored`):
    /// what OTLP ingest stores.
    Otlp,
    /// An OTLP trace request reduced to its fencing spans, protobuf: records of earlier builds,
    /// still read (`decode::otlp::decode`).
    OtlpTraces,
    /// An OTLP logs request reduced to its fencing log records, protobuf (earlier builds).
    OtlpLogs,
    /// One message that must be one JSON object (a Kafka message value): one item, however
    /// many lines it has.
    Message,
}

impl Format {
    pub(crate) fn is_otlp(self) -> bool {
        matches!(self, Format::Otlp | Format::OtlpTraces | Format::OtlpLogs)
    }
}

/// Why a WAL payload is not a batch.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PayloadError {
    /// It ends before its header does.
    #[error("payload too short")]
    Short,
    /// A payload version this build does not know.
    #[error("unknown payload version {0}")]
    Version(u8),
    /// A body format this build does not know.
    #[error("unknown body format {0}")]
    Format(u8),
    /// The source name is not UTF-8.
    #[error("source is not UTF-8")]
    SourceNotUtf8,
}

/// Number of offsets a body takes: its lines (blank ones included), array elements, or one
/// message. An array body must be well-formed (see [`json::split_array`]); one that is not
/// takes one.
pub fn items(format: Format, body: &[u8]) -> u64 {
    match format {
        Format::Ndjson => {
            let body = body.strip_suffix(b"\n").unwrap_or(body);
            if body.is_empty() {
                0
            } else {
                memchr::memchr_iter(b'\n', body).count() as u64 + 1
            }
        }
        Format::Array => json::for_each_element(body, |_, _| {}).map_or(1, |n| n as u64),
        Format::Otlp | Format::OtlpTraces | Format::OtlpLogs => otlp_items(format, body),
        Format::Message => 1,
    }
}

pub(crate) fn lines(body: &[u8]) -> impl Iterator<Item = &[u8]> {
    let body = body.strip_suffix(b"\n").unwrap_or(body);
    let mut rest = (!body.is_empty()).then_some(body);
    std::iter::from_fn(move || {
        let r = rest?;
        match memchr::memchr(b'\n', r) {
            Some(i) => {
                rest = Some(&r[i + 1..]);
                Some(&r[..i])
            }
            None => {
                rest = None;
                Some(r)
            }
        }
    })
}

/// Encodes a batch as a WAL payload. `first_line` is the 1-based line number of the body's
/// first line in its source (file ingest); without it, an event's position is its WAL offset.
pub fn encode(
    format: Format,
    received_at: i64,
    source: &str,
    first_line: Option<u64>,
    body: &[u8],
) -> Vec<u8> {
    let mut out = encode_header(format, received_at, source, first_line, body.len());
    out.extend_from_slice(body);
    out
}

/// The header of a WAL payload ([`encode`]) with room for `body_capacity` bytes of body: the
/// body is appended to it as it arrives, so a request body is not copied into its payload.
pub fn encode_header(
    format: Format,
    received_at: i64,
    source: &str,
    first_line: Option<u64>,
    body_capacity: usize,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(body_capacity + source.len() + 20);
    out.push(PAYLOAD_VERSION);
    out.push(format_byte(format));
    out.extend_from_slice(&received_at.to_le_bytes());
    out.extend_from_slice(&first_line.unwrap_or(u64::MAX).to_le_bytes());
    out.extend_from_slice(&(source.len() as u16).to_le_bytes());
    out.extend_from_slice(source.as_bytes());
    out
}

/// Bytes of the header [`encode_header`] writes for `source`.
pub fn header_len(source: &str) -> usize {
    20 + source.len()
}

/// Sets the receive time of a payload from [`encode_header`].
pub fn set_received_at(payload: &mut [u8], received_at: i64) {
    payload[2..10].copy_from_slice(&received_at.to_le_bytes());
}

/// Sets the body format of a payload from [`encode_header`] (known once the body is read).
pub fn set_format(payload: &mut [u8], format: Format) {
    payload[1] = format_byte(format);
}

fn format_byte(format: Format) -> u8 {
    match format {
        Format::Ndjson => 0,
        Format::Array => 1,
        Format::OtlpTraces => 2,
        Format::OtlpLogs => 3,
        Format::Message => 4,
        Format::Otlp => 5,
    }
}

/// A batch: decoded from a WAL payload ([`decode`]), or made by a source.
#[derive(Debug, Clone, Copy)]
pub struct Batch<'a> {
    /// Framing of the body.
    pub format: Format,
    /// Wall time it was received, ns.
    pub received_at: i64,
    /// The ingest source (`http`, a file name, `topic/partition`).
    pub source: &'a str,
    /// Line number of the body's first line in its source, if it has lines of its own.
    pub first_line: Option<u64>,
    /// The partitioning key it arrived under (a Kafka message key), if its source has one:
    /// an assessed event whose scope is not the key is `misrouted_partition` evidence.
    pub key: Option<&'a [u8]>,
    /// The body as received.
    pub body: &'a [u8],
}

/// Decodes a WAL payload.
pub fn decode(payload: &[u8]) -> Result<Batch<'_>, PayloadError> {
    let (&version, rest) = payload.split_first().ok_or(PayloadError::Short)?;
    if version != PAYLOAD_VERSION {
        return Err(PayloadError::Version(version));
    }
    let (&fmt, rest) = rest.split_first().ok_or(PayloadError::Short)?;
    let format = match fmt {
        0 => Format::Ndjson,
        1 => Format::Array,
        2 => Format::OtlpTraces,
        3 => Format::OtlpLogs,
        4 => Format::Message,
        5 => Format::Otlp,
        x => return Err(PayloadError::Format(x)),
    };
    let (ts, rest) = rest.split_at_checked(8).ok_or(PayloadError::Short)?;
    let (line, rest) = rest.split_at_checked(8).ok_or(PayloadError::Short)?;
    let line = u64::from_le_bytes(line.try_into().expect("8 bytes"));
    let (len, rest) = rest.split_at_checked(2).ok_or(PayloadError::Short)?;
    let len = u16::from_le_bytes([len[0], len[1]]) as usize;
    let (source, body) = rest.split_at_checked(len).ok_or(PayloadError::Short)?;
    Ok(Batch {
        format,
        received_at: i64::from_le_bytes(ts.try_into().expect("8 bytes")),
        source: std::str::from_utf8(source).map_err(|_| PayloadError::SourceNotUtf8)?,
        first_line: (line != u64::MAX).then_some(line),
        key: None,
        body,
    })
}

/// The batches of a group with their items decoded, borrowing from the payloads they own.
type DecodedBatches<'a> = Vec<(Batch<'a>, DecodedItems<'a>)>;

self_cell::self_cell!(
    /// WAL payloads and their batches decoded ([`DecodedGroup::decode`]): the WAL source
    /// decodes a group on its own thread while the previous one is applied, and keeps it
    /// until the evidence archive has read its events ([`Retained`]).
    pub struct DecodedGroup {
        owner: Vec<Vec<u8>>,
        #[covariant]
        dependent: DecodedBatches,
    }
);

impl DecodedGroup {
    /// Decodes WAL payloads this build encoded ([`encode`]), each with its items.
    ///
    /// # Panics
    /// If a payload does not decode: the WAL source encoded each.
    pub fn decode(payloads: Vec<Vec<u8>>, max_line_bytes: usize) -> DecodedGroup {
        DecodedGroup::new(payloads, |payloads| {
            payloads
                .iter()
                .map(|p| {
                    let batch = decode(p).expect("a payload this source encoded");
                    let items = decode_items(&batch, max_line_bytes);
                    (batch, items)
                })
                .collect()
        })
    }

    /// Its batches, in order, with their items.
    pub fn batches(&self) -> &[(Batch<'_>, DecodedItems<'_>)] {
        self.borrow_dependent()
    }
}

impl std::fmt::Debug for DecodedGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DecodedGroup")
            .field("batches", &self.borrow_owner().len())
            .finish_non_exhaustive()
    }
}

impl Retained for DecodedGroup {
    fn with_batch(&self, k: usize, f: &mut dyn FnMut(&Batch<'_>, &DecodedItems<'_>)) {
        let (batch, items) = &self.borrow_dependent()[k];
        f(batch, items);
    }
}

/// A batch's items decoded: its valid events and the indices of its malformed items, both in
/// order (blank lines skipped). A malformed item keeps only its index: its error is worded
/// again when applied, so that a body of many bad lines costs 4 bytes a line, not a decoded
/// event and an error message each.
#[derive(Debug, Default)]
pub struct DecodedItems<'a> {
    pub(crate) events: Vec<(u32, json::Decoded<'a>)>,
    pub(crate) bad: Vec<u32>,
    /// The items of an OTLP body.
    #[cfg(feature = "otlp")]
    pub(crate) otlp: Option<OtlpItems<'a>>,
}

impl DecodedItems<'_> {
    /// How many items: events, items that did not decode, and OTLP items.
    pub fn len(&self) -> usize {
        #[cfg(feature = "otlp")]
        let otlp = match &self.otlp {
            Some(OtlpItems::Stored(entries)) => entries.len(),
            Some(OtlpItems::Request(items)) => items.len(),
            None => 0,
        };
        #[cfg(not(feature = "otlp"))]
        let otlp = 0;
        self.events.len() + self.bad.len() + otlp
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether an observer can read the events again cheaply, from any item on
    /// ([`observe::for_each_event`]): all but a legacy OTLP record (a reduced request), which
    /// decodes whole each time.
    #[cfg(feature = "archive")]
    pub(crate) fn can_read_again(&self) -> bool {
        #[cfg(feature = "otlp")]
        if matches!(self.otlp, Some(OtlpItems::Request(_))) {
            return false;
        }
        true
    }
}

/// The items of an OTLP body, decoded.
#[cfg(feature = "otlp")]
#[derive(Debug)]
pub(crate) enum OtlpItems<'a> {
    /// Of a record of format `Otlp`, borrowing from it.
    Stored(Vec<crate::decode::otlp::Entry<'a>>),
    /// Of a reduced request (formats `OtlpTraces`, `OtlpLogs`).
    Request(crate::decode::otlp::Decoded),
}

/// One item of a batch, decoded.
pub(crate) fn decode_item<'a>(
    format: Format,
    item: &'a [u8],
    max_line_bytes: usize,
) -> Result<json::Decoded<'a>, DecodeError> {
    match format {
        Format::Ndjson | Format::Message => json::decode_line(item, max_line_bytes),
        // Elements come from `for_each_element`, which checked the UTF-8.
        Format::Array => json::decode_element(
            json::utf8(item).expect("for_each_element checked UTF-8"),
            max_line_bytes,
        ),
        Format::Otlp | Format::OtlpTraces | Format::OtlpLogs => {
            unreachable!("OTLP items are decoded whole")
        }
    }
}

/// Calls `each` with every item of a batch and its index, in order: its lines, the elements
/// of its array (`Err` when the array is not well-formed: a record written before such bodies
/// were refused whole), or its one message. Nothing is collected.
pub(crate) fn for_each_item<'a>(
    batch: &Batch<'a>,
    mut each: impl FnMut(u32, &'a [u8]),
) -> Result<(), json::ArrayError> {
    match batch.format {
        Format::Ndjson => {
            for (i, line) in lines(batch.body).enumerate() {
                each(i as u32, line);
            }
            Ok(())
        }
        Format::Array => {
            json::for_each_element(batch.body, |i, e| each(i as u32, e.as_bytes())).map(drop)
        }
        Format::Message => {
            each(0, batch.body);
            Ok(())
        }
        Format::Otlp | Format::OtlpTraces | Format::OtlpLogs => {
            unreachable!("OTLP items are decoded whole")
        }
    }
}

/// Decodes a batch's items. Pure: it can run on any thread, before the assessor is locked.
pub fn decode_items<'a>(batch: &Batch<'a>, max_line_bytes: usize) -> DecodedItems<'a> {
    let mut out = DecodedItems::default();
    if batch.format.is_otlp() {
        return otlp_decode(batch, out);
    }
    let body = (batch.format == Format::Ndjson).then(|| json::Body::new(batch.body));
    let walked = for_each_item(batch, |i, item| {
        if batch.format == Format::Ndjson && json::is_blank(item) {
            return;
        }
        let decoded = match &body {
            Some(body) => body.decode_line(item, max_line_bytes),
            None => decode_item(batch.format, item, max_line_bytes),
        };
        match decoded {
            Ok(d) => out.events.push((i, d)),
            Err(_) => out.bad.push(i),
        }
    });
    if walked.is_err() {
        out = DecodedItems {
            bad: vec![0],
            ..DecodedItems::default()
        };
    }
    out
}

#[cfg(feature = "otlp")]
pub(crate) fn otlp_signal(format: Format) -> crate::decode::otlp::Signal {
    use crate::decode::otlp::Signal;
    if format == Format::OtlpLogs {
        Signal::Logs
    } else {
        Signal::Traces
    }
}

/// Items of an OTLP body: its decoded items (one when it does not decode).
fn otlp_items(format: Format, body: &[u8]) -> u64 {
    #[cfg(feature = "otlp")]
    {
        use crate::decode::otlp;
        let n = match format {
            Format::Otlp => otlp::stored::count(body).ok(),
            _ => otlp::decode(otlp_signal(format), body)
                .ok()
                .map(|d| d.len() as u64),
        };
        if let Some(n) = n {
            return n;
        }
    }
    let _ = (format, body);
    1
}

fn otlp_decode<'a>(batch: &Batch<'a>, mut out: DecodedItems<'a>) -> DecodedItems<'a> {
    #[cfg(feature = "otlp")]
    {
        use crate::decode::otlp;
        let items = match batch.format {
            Format::Otlp => otlp::stored::decode(batch.body).ok().map(OtlpItems::Stored),
            f => otlp::decode(otlp_signal(f), batch.body)
                .ok()
                .map(OtlpItems::Request),
        };
        if let Some(items) = items {
            out.otlp = Some(items);
            return out;
        }
    }
    let _ = batch;
    out.bad.push(0);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const BATCH: &str = "{\"kind\":\"commit\",\"ts\":1000,\"scope\":\"o\",\"epoch\":2,\"route\":\"r\"}\n\n{\"kind\":\"commit\",\"ts\":\"bad\"}\n{\"kind\":\"commit\",\"ts\":2000000000,\"scope\":\"o\",\"epoch\":1,\"route\":\"r\"}\n";

    #[test]
    fn payload_round_trip_and_item_counts() {
        let p = encode(Format::Ndjson, 42, "http", None, BATCH.as_bytes());
        let b = decode(&p).unwrap();
        assert_eq!(
            (b.format, b.received_at, b.source),
            (Format::Ndjson, 42, "http")
        );
        assert_eq!(b.body, BATCH.as_bytes());
        assert_eq!(p.len(), header_len("http") + BATCH.len());
        let mut q = encode_header(Format::Ndjson, 42, "http", None, 2);
        q.extend_from_slice(b"[]");
        set_format(&mut q, Format::Array);
        set_received_at(&mut q, 7);
        assert_eq!(decode(&q).unwrap().received_at, 7);
        set_received_at(&mut q, 42);
        assert_eq!(q, encode(Format::Array, 42, "http", None, b"[]"));
        assert_eq!(items(Format::Ndjson, BATCH.as_bytes()), 4);
        assert_eq!(items(Format::Ndjson, b"{}"), 1);
        assert_eq!(items(Format::Ndjson, b""), 0);
        assert_eq!(items(Format::Array, b"[{}, {}, 3]"), 3);
        assert_eq!(items(Format::Array, b"[{}, {}, NaN]"), 1);
        assert_eq!(items(Format::Message, BATCH.as_bytes()), 1);
        assert_eq!(decode(&p[..5]).unwrap_err(), PayloadError::Short);
        for f in [
            Format::Otlp,
            Format::OtlpTraces,
            Format::OtlpLogs,
            Format::Message,
        ] {
            let m = encode(f, 7, "t/0", None, b"{}");
            assert_eq!(decode(&m).unwrap().format, f);
        }
    }

    #[test]
    fn a_message_is_one_item_whatever_it_holds() {
        let two = "{\"kind\":\"commit\",\"ts\":1,\"scope\":\"o\",\"epoch\":1,\"route\":\"r\"}\n{\"kind\":\"commit\",\"ts\":2,\"scope\":\"o\",\"epoch\":1,\"route\":\"r\"}";
        let b = Batch {
            format: Format::Message,
            received_at: 0,
            source: "t/0",
            first_line: None,
            key: None,
            body: two.as_bytes(),
        };
        let d = decode_items(&b, 1 << 20);
        assert_eq!((d.events.len(), d.bad.as_slice()), (0, &[0][..]));
        let empty = Batch { body: b"", ..b };
        assert_eq!(decode_items(&empty, 1 << 20).bad, [0]);
    }
}
