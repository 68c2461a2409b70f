//! `check` over the archive (SPEC §9): Parquet files of the `events` (and `malformed`) schema
//! read into a [`History`], each row with its `source` as its provenance, so that
//! counterexample ids equal `serve`'s.
//!
//! An input is an archive folder (holding `MANIFEST.json`), a data directory (holding
//! `archive/MANIFEST.json`) or an archive's `events/` folder: the manifest's `events` and
//! `malformed` files, oldest first; any other folder: its `*.parquet` files in name order; or
//! one Parquet file (magic `PAR1`). Files are read a record batch at a time, so memory is
//! bounded by a row group, not by the file. Malformed rows are merged into the events by their
//! partition's offset (reading order, exact for one partition); only their offsets and times
//! are kept in memory, and the texts of the first [`MALFORMED_SAMPLES`] of each partition.
//!
//! What the archive does not keep: the `property` an unattributed event named (it is archived
//! as null), and whether an attributed event named its property or was given the only one of
//! `serve`'s contract. Such events stay unattributed, and the caller is told how many
//! ([`Read::unattributed`]).

use super::manifest::{MANIFEST, Manifest};
use super::rows::Table;
use arrow_array::cast::AsArray;
use arrow_array::types::{Int64Type, TimestampNanosecondType, UInt64Type};
use arrow_array::{Array, RecordBatch, StringArray};
use arrow_schema::{DataType, SchemaRef};
use fencewatch_assess::history::{History, MALFORMED_SAMPLES, SourceId};
use fencewatch_assess::{
    Duration, Epoch, Event, EventTime, Incarnation, Kind, Order, Outcome, Seq,
};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use std::collections::{HashMap, VecDeque};
use std::io::Read as _;
use std::path::{Path, PathBuf};

/// Rows decoded per record batch.
const BATCH_ROWS: usize = 8192;

/// Why an archive input cannot be read (not a malformed event: those are evidence).
#[derive(Debug, thiserror::Error)]
#[error("{path}: {reason}")]
pub struct ReadError {
    /// The file or folder.
    pub path: String,
    /// Why.
    pub reason: String,
}

fn err(path: &Path, reason: impl std::fmt::Display) -> ReadError {
    ReadError {
        path: path.display().to_string(),
        reason: reason.to_string(),
    }
}

/// What was read.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Read {
    /// Parquet files read.
    pub files: usize,
    /// Event rows.
    pub events: u64,
    /// Malformed rows.
    pub malformed: u64,
    /// Event rows archived unattributed (`property` null), which stay unattributed.
    pub unattributed: u64,
}

/// Whether `path` is read as the archive: a folder, a file whose first bytes are Parquet's
/// magic `PAR1`, or a file named `*.parquet` (which then must be Parquet).
pub fn is_archive_input(path: &Path) -> bool {
    if path.is_dir() || path.extension().is_some_and(|e| e == "parquet") {
        return true;
    }
    let mut magic = [0u8; 4];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok_and(|()| &magic == b"PAR1")
}

/// The files an input stands for, each with its table.
fn files_of(path: &Path) -> Result<Vec<PathBuf>, ReadError> {
    if !path.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let archive = [
        Some(path.to_path_buf()),
        Some(path.join("archive")),
        path.parent()
            .filter(|_| path.file_name().is_some_and(|n| n == "events"))
            .map(Path::to_path_buf),
    ]
    .into_iter()
    .flatten()
    .find(|d| d.join(MANIFEST).is_file());
    if let Some(dir) = archive {
        let m = Manifest::load(&dir).map_err(|e| err(&dir, e))?;
        let tables = [Table::Events.name(), Table::Malformed.name()];
        return Ok(m
            .files
            .iter()
            .filter(|f| tables.contains(&f.table.as_str()))
            .map(|f| dir.join(&f.path))
            .collect());
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(path)
        .map_err(|e| err(path, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "parquet"))
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(err(
            path,
            "a folder with no archive manifest and no .parquet file",
        ));
    }
    Ok(files)
}

/// Which table a file's schema is: `events` or `malformed`, every column of it present with
/// its type (a timestamp of any time zone).
fn table_of(path: &Path, schema: &SchemaRef) -> Result<Table, ReadError> {
    let fits = |t: Table| -> Result<(), String> {
        for want in t.schema().fields() {
            let Ok(got) = schema.field_with_name(want.name()) else {
                return Err(format!("no column `{}`", want.name()));
            };
            let same = match (want.data_type(), got.data_type()) {
                (DataType::Timestamp(a, _), DataType::Timestamp(b, _)) => a == b,
                (a, b) => a == b,
            };
            if !same {
                return Err(format!(
                    "column `{}` is {}, not {}",
                    want.name(),
                    got.data_type(),
                    want.data_type()
                ));
            }
        }
        Ok(())
    };
    let why = match fits(Table::Events) {
        Ok(()) => return Ok(Table::Events),
        Err(why) => why,
    };
    if fits(Table::Malformed).is_ok() {
        return Ok(Table::Malformed);
    }
    Err(err(
        path,
        format!(
            "not a Parquet file of the archive's `events` schema (SPEC §9): {why} (columns: {})",
            schema
                .fields()
                .iter()
                .map(|f| f.name().as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    ))
}

/// A malformed row waiting for its place among the events of its partition.
struct Pending {
    offset: u64,
    ts: Option<i64>,
    /// Source and reason, for the first [`MALFORMED_SAMPLES`] of the partition.
    text: Option<(String, String)>,
}

/// Reads archive inputs into a history.
struct Reader<'h> {
    history: &'h mut History,
    sources: HashMap<String, SourceId>,
    /// A property name the contract lacks: what an unattributed row names.
    nobody: String,
    /// Per partition, its malformed rows not pushed yet, in offset order.
    malformed: HashMap<String, VecDeque<Pending>>,
    read: Read,
}

/// `source` split into its source and position (`http:12` is `http` at 12); a source without
/// a numeric position (an OTLP span, `otlp:<trace_id>/<span_id>`) is its own source at 0, as
/// `serve` hashes it into counterexample ids.
fn provenance(source: &str) -> (&str, u64) {
    match source.rsplit_once(':') {
        Some((name, pos)) => match pos.parse() {
            Ok(p) => (name, p),
            Err(_) => (source, 0),
        },
        None => (source, 0),
    }
}

impl Reader<'_> {
    fn source(&mut self, name: &str) -> SourceId {
        if let Some(&id) = self.sources.get(name) {
            return id;
        }
        let id = self.history.add_source(name);
        self.sources.insert(name.to_string(), id);
        id
    }

    fn file(&mut self, path: &Path) -> Result<(), ReadError> {
        let (builder, table) = open(path)?;
        let reader = builder
            .with_batch_size(BATCH_ROWS)
            .build()
            .map_err(|e| err(path, e))?;
        self.read.files += 1;
        for batch in reader {
            let batch = batch.map_err(|e| err(path, e))?;
            if table == Table::Malformed {
                self.malformed_batch(path, &batch)?;
            } else {
                self.events_batch(path, &batch)?;
            }
        }
        Ok(())
    }

    fn malformed_batch(&mut self, path: &Path, b: &RecordBatch) -> Result<(), ReadError> {
        let ts = b["ts"].as_primitive::<TimestampNanosecondType>();
        let source = required(path, b, "source")?;
        let reason = required(path, b, "reason")?;
        let partition = required(path, b, "partition")?;
        let offset = b["offset"].as_primitive::<UInt64Type>();
        for i in 0..b.num_rows() {
            let queue = match self.malformed.get_mut(partition.value(i)) {
                Some(q) => q,
                None => self
                    .malformed
                    .entry(partition.value(i).to_string())
                    .or_default(),
            };
            let text = (queue.len() < MALFORMED_SAMPLES)
                .then(|| (source.value(i).to_string(), reason.value(i).to_string()));
            queue.push_back(Pending {
                offset: offset.value(i),
                ts: ts.is_valid(i).then(|| ts.value(i)),
                text,
            });
            self.read.malformed += 1;
        }
        Ok(())
    }

    /// Pushes the malformed rows of `partition` below `offset` (all of them: `u64::MAX`).
    fn malformed_before(&mut self, partition: &str, offset: u64) {
        let Some(mut queue) = self.malformed.remove(partition) else {
            return;
        };
        while queue.front().is_some_and(|m| m.offset < offset) {
            let m = queue.pop_front().expect("a front");
            let (source, position, reason) = match m.text {
                Some((s, r)) => {
                    let (name, pos) = provenance(&s);
                    (self.source(name), pos, r)
                }
                None => (SourceId(0), m.offset, String::new()),
            };
            self.history
                .push_malformed(source, position, m.ts.map(EventTime), reason);
        }
        if !queue.is_empty() {
            self.malformed.insert(partition.to_string(), queue);
        }
    }

    fn events_batch(&mut self, path: &Path, b: &RecordBatch) -> Result<(), ReadError> {
        let ts = b["ts"].as_primitive::<TimestampNanosecondType>();
        let kind = required(path, b, "kind")?;
        let outcome = required(path, b, "outcome")?;
        let source = required(path, b, "source")?;
        let partition = required(path, b, "partition")?;
        let offset = b["offset"].as_primitive::<UInt64Type>();
        let incarnation = b["incarnation"].as_primitive::<UInt64Type>();
        let valid_for = b["valid_for"].as_primitive::<Int64Type>();
        let text = |name: &str| b[name].as_string::<i32>();
        let (property, scope, route, holder, op_id) = (
            text("property"),
            text("scope"),
            text("route"),
            text("holder"),
            text("op_id"),
        );
        let (emitter, premise, attester, evidence) = (
            text("emitter"),
            text("premise"),
            text("attester"),
            text("evidence"),
        );
        let u64s = |name: &str| b[name].as_primitive::<UInt64Type>();
        let (epoch, order, seq) = (u64s("epoch"), u64s("order"), u64s("seq"));
        for col in [ts as &dyn Array, offset, incarnation] {
            if col.null_count() > 0 {
                return Err(err(
                    path,
                    "a required column (ts, incarnation, offset) has nulls",
                ));
            }
        }
        let nobody = self.nobody.clone();
        let opt64 = |a: &arrow_array::UInt64Array, i: usize| a.is_valid(i).then(|| a.value(i));
        for i in 0..b.num_rows() {
            if !self.malformed.is_empty() {
                self.malformed_before(partition.value(i), offset.value(i));
            }
            let Some(k) = Kind::parse(kind.value(i)) else {
                return Err(err(
                    path,
                    format!("row {i}: unknown kind `{}`", kind.value(i)),
                ));
            };
            let Some(out) = Outcome::parse(outcome.value(i)) else {
                let o = outcome.value(i);
                return Err(err(path, format!("row {i}: unknown outcome `{o}`")));
            };
            let mut ev = Event::new(k, EventTime(ts.value(i)));
            ev.outcome = out;
            ev.property = match opt(property, i) {
                Some(p) => Some(p),
                None => {
                    self.read.unattributed += 1;
                    Some(nobody.as_str())
                }
            };
            ev.scope = opt(scope, i);
            ev.epoch = opt64(epoch, i).map(Epoch);
            ev.route = opt(route, i);
            ev.holder = opt(holder, i);
            ev.op_id = opt(op_id, i);
            ev.incarnation = Incarnation(incarnation.value(i));
            ev.order = opt64(order, i).map(Order);
            ev.emitter = opt(emitter, i);
            ev.seq = opt64(seq, i).map(Seq);
            ev.premise = opt(premise, i);
            ev.valid_for = valid_for.is_valid(i).then(|| Duration(valid_for.value(i)));
            ev.attester = opt(attester, i);
            ev.evidence = opt(evidence, i);
            let (name, position) = provenance(source.value(i));
            let id = self.source(name);
            self.history.push(&ev, id, position);
            self.read.events += 1;
        }
        Ok(())
    }
}

fn opt(a: &StringArray, i: usize) -> Option<&str> {
    a.is_valid(i).then(|| a.value(i))
}

/// A string column without nulls.
fn required<'b>(path: &Path, b: &'b RecordBatch, name: &str) -> Result<&'b StringArray, ReadError> {
    let a = b[name].as_string::<i32>();
    if a.null_count() > 0 {
        return Err(err(path, format!("column `{name}` has nulls")));
    }
    Ok(a)
}

/// Reads the archive inputs `paths` (see the module docs) into `history`, after what it holds.
pub fn read_archive(history: &mut History, paths: &[PathBuf]) -> Result<Read, ReadError> {
    let mut nobody = String::from("(unattributed)");
    while history.contract().property_index(&nobody).is_some() {
        nobody.push('?');
    }
    let mut r = Reader {
        history,
        sources: HashMap::new(),
        nobody,
        malformed: HashMap::new(),
        read: Read::default(),
    };
    for path in paths {
        let files = files_of(path)?;
        // Malformed files first: their rows wait for their place among the events.
        let mut ordered: Vec<(bool, &PathBuf)> = Vec::with_capacity(files.len());
        for f in &files {
            ordered.push((open(f)?.1 != Table::Malformed, f));
        }
        ordered.sort_by_key(|(events, _)| *events);
        for (_, f) in ordered {
            r.file(f)?;
        }
        let left: Vec<String> = r.malformed.keys().cloned().collect();
        for p in left {
            r.malformed_before(&p, u64::MAX);
        }
    }
    Ok(r.read)
}

/// A Parquet file opened (its footer read) and the table its schema is.
fn open(path: &Path) -> Result<(ParquetRecordBatchReaderBuilder<std::fs::File>, Table), ReadError> {
    let file = std::fs::File::open(path).map_err(|e| err(path, e))?;
    let builder = ParquetRecordBatchReaderBuilder::try_new(file).map_err(|e| {
        err(
            path,
            format!("not a Parquet file of the archive's `events` schema: {e}"),
        )
    })?;
    let table = table_of(path, builder.schema())?;
    Ok((builder, table))
}

#[cfg(test)]
mod tests {
    use super::provenance;

    #[test]
    fn a_source_is_split_at_its_numeric_position() {
        assert_eq!(provenance("http:12"), ("http", 12));
        assert_eq!(provenance("/d/e.ndjson:3"), ("/d/e.ndjson", 3));
        assert_eq!(provenance("orders/2:70"), ("orders/2", 70));
        assert_eq!(provenance("otlp:ab12/cd34"), ("otlp:ab12/cd34", 0));
        assert_eq!(provenance("bare"), ("bare", 0));
    }
}
