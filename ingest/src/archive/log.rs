//! The `events` rows of a partition as its sink collects them on the applier's thread: each
//! applied event as one fixed-size record and each of its strings appended to its column's
//! text, turned into Arrow arrays (the batch [`EventRows`](super::rows::EventRows) makes) only
//! on the archive's thread (or a query's) when the chunk is encoded or read.
//!
//! The applier is ingest's serial stage. Filling the 21 columns' builders there cost ~1,300
//! instructions an event (a log takes ~400), writing to ~50 buffers at once beside the
//! assessor's scope tables (`serve_bench`: with the archive on, the applier took 0.5–1.2 µs
//! more per event; with the log, 0.1–0.3). A record and each string appended to its column's
//! text, which becomes the column's values as it is: no value is copied a second time.

use super::Table;
use super::rows::Src;
use arrow_array::types::{ArrowPrimitiveType, Int64Type, UInt64Type};
use arrow_array::{ArrayRef, PrimitiveArray, RecordBatch, StringArray, TimestampNanosecondArray};
use arrow_buffer::{BooleanBuffer, Buffer, NullBuffer, OffsetBuffer, ScalarBuffer};
use fencewatch_assess::{Duration, Epoch, Event, Incarnation, Kind, Order, Outcome, Seq};
use std::sync::{Arc, OnceLock};

/// Rows a sink collects before it hands them over, even inside a record.
pub const CHUNK_ROWS: usize = 8192;

/// Bytes of events' strings a sink collects before it hands them over, even inside a record:
/// fields but `scope` are bounded only by the line (`max_line_bytes`), and 8192 events of
/// long ones would pass the 2 GiB an Arrow string column holds. A chunk this large (counted
/// twice, log and batch) stays below what makes ingest wait (two files' worth of rows, 64 MiB
/// by default).
pub(super) const CHUNK_BYTES: usize = 16 << 20;

/// A string that is absent.
const NULL: u32 = u32::MAX;

/// The strings of a logged event, in this order, their lengths in [`Logged::lens`].
const PROPERTY: usize = 0;
const SCOPE: usize = 1;
const ROUTE: usize = 2;
const HOLDER: usize = 3;
const OP_ID: usize = 4;
const EMITTER: usize = 5;
const PREMISE: usize = 6;
const ATTESTER: usize = 7;
const EVIDENCE: usize = 8;
const SOURCE: usize = 9;
const STRINGS: usize = 10;

/// One applied event: its fields but its strings, each appended to its column's text
/// (`lens[i]` bytes long, [`NULL`] when absent).
#[derive(Debug, Clone)]
struct Logged {
    ts: i64,
    received: i64,
    offset: u64,
    epoch: Option<Epoch>,
    incarnation: Incarnation,
    order: Option<Order>,
    seq: Option<Seq>,
    valid_for: Option<Duration>,
    kind: Kind,
    outcome: Outcome,
    lens: [u32; STRINGS],
}

/// A string column's bytes a row that [`EventLog::sized_like`] reserves at most.
const SIZED_ROW_BYTES: usize = 256;

/// Bytes per row of each string column of a log: the size of the next one.
#[derive(Debug, Clone, Default)]
pub(super) struct LogShape {
    per_row: [usize; STRINGS],
}

/// The `events` rows of one partition being collected ([`EventLog::push`]).
#[derive(Debug, Default)]
pub struct EventLog {
    partition: String,
    rows: Vec<Logged>,
    /// Per string column, its values one after the other: the values buffer of its array.
    texts: [String; STRINGS],
}

impl EventLog {
    /// An empty log of `partition`'s events.
    pub fn new(partition: &str) -> EventLog {
        EventLog {
            partition: partition.to_string(),
            ..EventLog::default()
        }
    }

    /// Bytes a row takes but its strings.
    pub(super) const ROW_BYTES: usize = std::mem::size_of::<Logged>();

    /// An empty log with room for `rows` rows whose strings are as long, column by column, as
    /// those of `like` (per row), up to [`SIZED_ROW_BYTES`] a row: filled without a
    /// reallocation per doubling. The bound keeps one log of long values (a 1 MiB `evidence`)
    /// from reserving that much for every row of the next.
    pub(super) fn sized_like(partition: &str, rows: usize, like: &LogShape) -> EventLog {
        EventLog {
            partition: partition.to_string(),
            rows: Vec::with_capacity(rows),
            texts: std::array::from_fn(|i| {
                String::with_capacity(like.per_row[i].min(SIZED_ROW_BYTES) * rows + 64)
            }),
        }
    }

    /// Its strings' bytes per row, column by column (for [`EventLog::sized_like`]).
    pub(super) fn shape(&self) -> LogShape {
        let n = self.rows.len().max(1);
        LogShape {
            per_row: std::array::from_fn(|i| self.texts[i].len().div_ceil(n)),
        }
    }

    /// Rows collected.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether none are.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Adds one applied event, as [`EventRows::push`](super::rows::EventRows::push) takes it:
    /// received at `received` (ns), `property` as the assessor attributed it (`None`:
    /// unattributed), `source` its provenance, `offset` its offset in the partition.
    pub fn push<'s>(
        &mut self,
        received: i64,
        ev: &Event<'_>,
        property: Option<&str>,
        source: impl Into<Src<'s>>,
        offset: u64,
    ) {
        let mut lens = [NULL; STRINGS];
        let texts = &mut self.texts;
        let mut put = |i: usize, s: Option<&str>| {
            if let Some(s) = s {
                texts[i].push_str(s);
                lens[i] = s.len() as u32;
            }
        };
        put(PROPERTY, property);
        put(SCOPE, ev.scope);
        put(ROUTE, ev.route);
        put(HOLDER, ev.holder);
        put(OP_ID, ev.op_id);
        put(EMITTER, ev.emitter);
        put(PREMISE, ev.premise);
        put(ATTESTER, ev.attester);
        put(EVIDENCE, ev.evidence);
        let text = &mut self.texts[SOURCE];
        let before = text.len();
        source.into().write_to(text);
        // A provenance is a name and a position: never 4 GiB.
        lens[SOURCE] = u32::try_from(text.len() - before).unwrap_or(NULL - 1);
        self.rows.push(Logged {
            ts: ev.ts.0,
            received,
            offset,
            epoch: ev.epoch,
            incarnation: ev.incarnation,
            order: ev.order,
            seq: ev.seq,
            valid_for: ev.valid_for,
            kind: ev.kind,
            outcome: ev.outcome,
            lens,
        });
    }

    /// The rows collected; the log starts over sized as it was (the next chunk, about as
    /// large, fills it without a reallocation per doubling).
    pub fn take(&mut self) -> EventLog {
        let fresh = EventLog {
            partition: self.partition.clone(),
            rows: Vec::with_capacity(self.rows.len()),
            texts: std::array::from_fn(|i| String::with_capacity(self.texts[i].len())),
        };
        std::mem::replace(self, fresh)
    }

    /// Bytes of the rows' strings.
    pub fn text_bytes(&self) -> usize {
        self.texts.iter().map(String::len).sum()
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        let texts: usize = self.texts.iter().map(String::capacity).sum();
        self.rows.capacity() * std::mem::size_of::<Logged>() + texts
    }

    /// The rows as a batch of the `events` table, the same as
    /// [`EventRows`](super::rows::EventRows) makes of the same events. Each string column's
    /// values are its text as it was collected (one copy, no value copied alone); its offsets
    /// and nulls are the rows' lengths. Each other column is built whole, written straight
    /// into the vector that becomes its buffer. 1,282 instructions an event through 21
    /// builders, 1,141 with the values copied one by one out of one text, 760 with each text
    /// copied whole and Arrow's checks, 477 now (callgrind, `archive_cost batch`: the texts
    /// taken, not copied, the string columns' offsets in one pass, no checks). A chunk handed
    /// to the archive ([`EventLog::into_logged`]) gives its texts to the batch as they are; this copies
    /// them.
    pub fn to_batch(&self) -> RecordBatch {
        let texts = std::array::from_fn(|i| Buffer::from(self.texts[i].as_bytes()));
        batch_of(&self.partition, &self.rows, texts)
    }

    /// The rows as a batch, as [`EventLog::to_batch`] makes it, without copying the texts.
    pub(super) fn into_batch(self) -> RecordBatch {
        let (partition, rows, texts) = self.into_parts();
        batch_of(&partition, &rows, texts)
    }

    /// The texts, each the values buffer of its column (no copy: the buffer takes the
    /// string's allocation).
    fn into_parts(self) -> (String, Vec<Logged>, [Buffer; STRINGS]) {
        let texts = self.texts.map(|t| Buffer::from_vec(t.into_bytes()));
        (self.partition, self.rows, texts)
    }

    /// The log handed to the archive, its texts taken as they are.
    pub fn into_logged(self) -> LoggedEvents {
        let bytes = self.bytes();
        let (partition, rows, texts) = self.into_parts();
        LoggedEvents {
            partition,
            rows,
            texts,
            bytes,
            batch: OnceLock::new(),
        }
    }
}

/// The batch of `rows` of `partition`, `texts` the values of their string columns (see
/// [`EventLog::to_batch`]).
fn batch_of(partition: &str, rows: &[Logged], texts: [Buffer; STRINGS]) -> RecordBatch {
    let n = rows.len();
    let strs = string_columns(rows, texts);
    let [
        property,
        scope,
        route,
        holder,
        op_id,
        emitter,
        premise,
        attester,
        evidence,
        source,
    ] = strs;
    let named = |f: fn(&Logged) -> &'static str| names(rows, f);
    let partition = {
        let p = partition.as_bytes();
        let _: i32 = i32::try_from(n * p.len()).expect("a partition's name is short");
        let offsets = (0..=n)
            .map(|i| (i * p.len()) as i32)
            .collect::<ScalarBuffer<i32>>();
        let values = Buffer::from_vec(p.repeat(n));
        Arc::new(StringArray::new(OffsetBuffer::new(offsets), values, None)) as ArrayRef
    };
    let time = |f: fn(&Logged) -> i64| -> ArrayRef {
        let values: ScalarBuffer<i64> = rows.iter().map(f).collect();
        Arc::new(TimestampNanosecondArray::new(values, None).with_timezone("UTC"))
    };
    let columns: Vec<ArrayRef> = vec![
        time(|r| r.ts),
        time(|r| r.received),
        named(|r| r.kind.as_str()),
        property,
        scope,
        optional::<UInt64Type>(rows, |r| r.epoch.map(|e| e.0)),
        optional::<UInt64Type>(rows, |r| Some(r.incarnation.0)),
        route,
        holder,
        op_id,
        named(|r| r.outcome.as_str()),
        optional::<UInt64Type>(rows, |r| r.order.map(|o| o.0)),
        emitter,
        optional::<UInt64Type>(rows, |r| r.seq.map(|s| s.0)),
        premise,
        optional::<Int64Type>(rows, |r| r.valid_for.map(|d| d.0)),
        attester,
        evidence,
        source,
        partition,
        optional::<UInt64Type>(rows, |r| Some(r.offset)),
    ];
    RecordBatch::try_new(Table::Events.schema(), columns).expect("columns match the schema")
}

/// The string columns of `rows`, `texts[i]` the values of column `i` (theirs one after the
/// other): offsets from the lengths and null bits, for all ten columns in one pass over the
/// rows (a pass a column read every row ten times: ~25 instructions a row a column), a null
/// buffer only where some row has none.
///
/// Arrow's checks of a string array are left out (`try_new` went over every offset and every
/// byte again: 158 instructions an event). [`EventLog::push`] appends every value whole (a
/// `str`) to its column's text and records that value's length, so the text is UTF-8 and
/// every offset a char boundary; the lengths are checked to sum to exactly the text's length,
/// below 2 GiB, so every offset is in bounds and none decreases. The one length `push` could
/// not record (a provenance over 4 GiB, recorded as `NULL - 1`) makes the sum miss the text:
/// the conversion stops there instead of making an invalid array.
fn string_columns(rows: &[Logged], texts: [Buffer; STRINGS]) -> [ArrayRef; STRINGS] {
    let n = rows.len();
    let mut offsets: [Vec<i32>; STRINGS] = std::array::from_fn(|_| {
        let mut v = Vec::with_capacity(n + 1);
        v.push(0);
        v
    });
    let mut words: [Vec<u64>; STRINGS] =
        std::array::from_fn(|_| Vec::with_capacity(n.div_ceil(64)));
    // Summed in 64 bits: no length can wrap them before the check below.
    let mut ends = [0u64; STRINGS];
    for group in rows.chunks(64) {
        let mut word = [0u64; STRINGS];
        for (j, r) in group.iter().enumerate() {
            for i in 0..STRINGS {
                let len = r.lens[i];
                let valid = len != NULL;
                ends[i] += if valid { u64::from(len) } else { 0 };
                offsets[i].push(ends[i] as i32);
                word[i] |= u64::from(valid) << j;
            }
        }
        for i in 0..STRINGS {
            words[i].push(word[i]);
        }
    }
    let mut offsets = offsets.into_iter();
    let mut words = words.into_iter();
    std::array::from_fn(|i| {
        let (offsets, words) = (offsets.next().expect("ten"), words.next().expect("ten"));
        let text = &texts[i];
        assert!(
            ends[i] == text.len() as u64 && i32::try_from(text.len()).is_ok(),
            "a chunk's strings fit 2 GiB and its lengths add up to its text"
        );
        let nulls = nulls_of(words, n);
        // SAFETY: the offsets start at 0, never decrease and end at the text's length, below
        // 2 GiB (checked just above); each lies between two whole `str`s of the text, so on a
        // char boundary of valid UTF-8 (see the function's docs).
        #[allow(unsafe_code)]
        let array = unsafe {
            StringArray::new_unchecked(
                OffsetBuffer::new_unchecked(ScalarBuffer::from(offsets)),
                text.clone(),
                nulls,
            )
        };
        Arc::new(array) as ArrayRef
    })
}

/// Which rows have a value (`valid`), or `None` if all do: the bits gathered 64 at a time
/// (a builder's append per row, or a buffer collected from an iterator of booleans, cost
/// ~10 instructions a row).
fn validity(rows: &[Logged], valid: impl Fn(&Logged) -> bool) -> Option<NullBuffer> {
    let mut words = Vec::with_capacity(rows.len().div_ceil(64));
    for group in rows.chunks(64) {
        let mut word = 0u64;
        for (j, r) in group.iter().enumerate() {
            word |= u64::from(valid(r)) << j;
        }
        words.push(word);
    }
    nulls_of(words, rows.len())
}

/// The null buffer of `n` rows whose validity bits are `words` (64 a word, the first row the
/// lowest bit), or `None` if every row is valid.
fn nulls_of(words: Vec<u64>, n: usize) -> Option<NullBuffer> {
    let all = words.iter().enumerate().all(|(k, &w)| {
        let bits = (n - 64 * k).min(64);
        w == u64::MAX >> (64 - bits)
    });
    (!all).then(|| NullBuffer::new(BooleanBuffer::new(Buffer::from_vec(words), 0, n)))
}

/// A column of a name of each row (a kind, an outcome), no row without one. Arrow's checks are
/// left out, as in [`string_columns`].
fn names(rows: &[Logged], f: fn(&Logged) -> &'static str) -> ArrayRef {
    let mut offsets = Vec::with_capacity(rows.len() + 1);
    offsets.push(0i32);
    let mut values: Vec<u8> = Vec::with_capacity(rows.len() * 10);
    for r in rows {
        values.extend_from_slice(f(r).as_bytes());
        offsets.push(i32::try_from(values.len()).expect("a chunk's names fit 2 GiB"));
    }
    // SAFETY: each value appended is a whole `str` and its end pushed after it, checked to fit
    // an i32: the offsets start at 0, never decrease, end at the values' length and each lies
    // on a char boundary of valid UTF-8.
    #[allow(unsafe_code)]
    let array = unsafe {
        StringArray::new_unchecked(
            OffsetBuffer::new_unchecked(ScalarBuffer::from(offsets)),
            Buffer::from_vec(values),
            None,
        )
    };
    Arc::new(array)
}

/// A primitive column of `f` of each row, with a null buffer only if some row has none.
fn optional<T: ArrowPrimitiveType>(
    rows: &[Logged],
    f: impl Fn(&Logged) -> Option<T::Native>,
) -> ArrayRef {
    let values: ScalarBuffer<T::Native> = rows.iter().map(|r| f(r).unwrap_or_default()).collect();
    let nulls = validity(rows, |r| f(r).is_some());
    Arc::new(PrimitiveArray::<T>::new(values, nulls))
}

/// An [`EventLog`] handed to the archive ([`EventLog::into_logged`]): its texts already the
/// buffers of its string columns, and, once made, its batch.
#[derive(Debug)]
pub struct LoggedEvents {
    partition: String,
    rows: Vec<Logged>,
    texts: [Buffer; STRINGS],
    /// [`EventLog::bytes`] of the log.
    bytes: usize,
    batch: OnceLock<RecordBatch>,
}

impl LoggedEvents {
    /// Rows.
    pub fn rows(&self) -> usize {
        self.rows.len()
    }

    /// Bytes of the rows' strings.
    pub fn text_bytes(&self) -> usize {
        self.texts.iter().map(Buffer::len).sum()
    }

    /// [`EventLog::bytes`] of the log.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The rows as a batch, made once (by the first that needs it: the archive's thread, or a
    /// query reading it first).
    pub fn batch(&self) -> RecordBatch {
        self.batch
            .get_or_init(|| batch_of(&self.partition, &self.rows, self.texts.clone()))
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::archive::rows::{EventRows, Origin, Rows};
    use fencewatch_assess::EventTime;
    use fencewatch_assess::Kind;

    /// Events with every field present or absent, through the log and straight into the
    /// builders: the same batch.
    #[test]
    fn a_log_makes_the_batch_the_builders_make() {
        let mut direct = EventRows::default();
        let mut log = EventLog::new("orders/3");
        let texts = [
            "",
            "o-1",
            "ünïcode",
            "a much longer string than the others, 64 bytes",
        ];
        for i in 0..200u64 {
            let t = |k: u64| (!(i / k).is_multiple_of(5)).then(|| texts[((i + k) % 4) as usize]);
            let mut ev = Event::new(
                if i % 7 == 0 {
                    Kind::Attestation
                } else {
                    Kind::Commit
                },
                EventTime(i as i64 * 1000 - 50_000),
            );
            ev.scope = t(1);
            ev.route = t(2);
            ev.holder = t(3);
            ev.op_id = t(4);
            ev.emitter = t(6);
            ev.premise = t(7);
            ev.attester = t(8);
            ev.evidence = t(9);
            ev.epoch = (i % 3 != 0).then_some(Epoch(i));
            ev.order = (i % 4 != 0).then_some(Order(i * 2));
            ev.seq = (i % 5 != 0).then_some(Seq(i * 3));
            ev.valid_for = (i % 6 != 0).then_some(Duration(i as i64));
            ev.incarnation = Incarnation(i % 2);
            ev.outcome = if i % 2 == 0 {
                Outcome::Committed
            } else {
                Outcome::Rejected
            };
            let property = t(10);
            let received = 1_000 + i as i64;
            let at = Origin {
                partition: "orders/3",
                received,
            };
            let id = [i as u8; 24];
            match i % 4 {
                3 => {
                    let p = fencewatch_assess::live::SpanProvenance("otlp", &id);
                    direct.push(at, &ev, property, format_args!("{p}"), i);
                    log.push(received, &ev, property, Src::Span(p), i);
                }
                0 => {
                    direct.push(at, &ev, property, Src::At("http", i), i);
                    log.push(received, &ev, property, Src::At("http", i), i);
                }
                1 => {
                    let s = format_args!("otlp:{i:032x}/{:016x}", i * 7);
                    direct.push(at, &ev, property, s, i);
                    let s = format_args!("otlp:{i:032x}/{:016x}", i * 7);
                    log.push(received, &ev, property, s, i);
                }
                _ => {
                    direct.push(at, &ev, property, Src::At("f.ndjson", u64::MAX - i), i);
                    log.push(
                        received,
                        &ev,
                        property,
                        Src::At("f.ndjson", u64::MAX - i),
                        i,
                    );
                }
            }
        }
        assert_eq!(log.len(), 200);
        // The log's own batch (its texts copied) and the logged one's (its texts taken) alike.
        let copied = log.to_batch();
        let logged = log.into_logged();
        assert_eq!(logged.rows(), 200);
        assert!(logged.bytes() > 0 && logged.text_bytes() > 0);
        let b = &logged.batch();
        let built = direct.finish();
        assert_eq!(b, &built);
        assert_eq!(copied, built);
        // Arrays made without Arrow's checks pass them all (offsets, UTF-8, char boundaries).
        for c in b.columns().iter().chain(copied.columns()) {
            c.to_data().validate_full().expect("a valid array");
        }
        // Made once: the second call gives the same arrays.
        let again = logged.batch();
        assert!(Arc::ptr_eq(b.column(0), again.column(0)));
        assert_eq!(EventLog::new("wal").to_batch().num_rows(), 0);
    }

    /// A log sized like one of long values reserves a bounded amount a row, not those values'
    /// length for every row of the next (review of session 22).
    #[test]
    fn a_log_sized_like_one_of_long_values_reserves_a_bounded_amount() {
        let mut ev = Event::new(Kind::Commit, fencewatch_assess::EventTime(1));
        let long = "e".repeat(1 << 20);
        ev.evidence = Some(&long);
        let mut log = EventLog::new("wal");
        log.push(1, &ev, None, Src::At("http", 1), 1);
        let like = log.shape();
        let next = EventLog::sized_like("wal", 8192, &like);
        assert!(
            next.bytes() < 64 << 20,
            "{} bytes reserved for 8192 rows",
            next.bytes()
        );
        assert_eq!(like.per_row[EVIDENCE], 1 << 20);
    }

    /// Lengths that do not add up to their text (none can, but the arrays are made without
    /// Arrow's checks) stop the conversion instead of making an invalid array.
    #[test]
    fn lengths_that_miss_their_text_are_refused() {
        let mut ev = Event::new(Kind::Commit, fencewatch_assess::EventTime(1));
        ev.scope = Some("héllo");
        for change in [1i64, -1] {
            let mut log = EventLog::new("wal");
            log.push(1, &ev, None, Src::At("http", 1), 1);
            log.push(2, &ev, None, Src::At("http", 2), 2);
            let len = &mut log.rows[0].lens[SCOPE];
            *len = len.checked_add_signed(change as i32).unwrap();
            let made = std::panic::catch_unwind(|| log.to_batch());
            assert!(made.is_err(), "a length off by {change} was taken");
        }
    }
}
