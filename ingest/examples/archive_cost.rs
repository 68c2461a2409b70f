//! What archiving an event costs, stage by stage, for instruction counts that do not depend
//! on the machine's load (issue 14: the archive's share of HTTP ingest):
//!
//! ```text
//! cargo build --release -p fencewatch-ingest --features archive --example archive_cost
//! for n in 1 3; do valgrind --tool=callgrind --callgrind-out-file=/tmp/ac.$n \
//!   target/release/examples/archive_cost rows $n; done
//! ```
//!
//! The difference of the two totals over 2 rounds of 100,000 events is two rounds' cost.
//! Stages: `log` (an applied event into an `EventLog`, as the sink does on the applier's
//! thread, a chunk taken every `CHUNK_ROWS`), `batch` (those chunks made Arrow, on the
//! archive's thread), `rows` (an event straight into the `events` table's builders, as the
//! applier did before), `parquet` (the batches encoded into a Parquet file in memory with the
//! archive's `file_properties`), `column:NAME` (column `NAME` of `events` alone, encoded the
//! same way: its share of `parquet`), `sink:logged` and `sink:kept` (the events as bodies of
//! 1,000 lines applied to a partition feeding an archive in a temporary folder, then written:
//! logged on the applier's thread as a replay does, or noted there and read again by the
//! archive as the WAL source does; `callgrind_annotate --inclusive=yes` splits the applier's
//! share, `Partition::apply_kept`, from the archive's, `Archive::write_some`), `sink:none`
//! (the same partition without an archive: the applier's cost against which `sink:kept`'s
//! share is read), `all`. Without valgrind it prints the wall time a row of
//! each stage. For `column:NAME`, comma-separated column lists in `PLAIN` (no dictionary),
//! `NOSTATS`, `NOBLOOM`, `NOCOMP` (uncompressed), `PLAINENC` (no dictionary, `PLAIN` encoding),
//! `DLBA` / `DBA` (`DELTA_LENGTH_BYTE_ARRAY`,
//! `DELTA_BYTE_ARRAY`) and `LZ4` (needs parquet's `lz4` feature) change those columns'
//! properties, to measure what each costs.
//!
//! The events are `serve_bench`'s: 200k scopes, rising epochs, two routes, 64 holders, one
//! emitter per connection with a rising `seq`.

use arrow_array::RecordBatch;
use fencewatch_ingest::archive::chunk::Chunk;
use fencewatch_ingest::archive::log::EventLog;
use fencewatch_ingest::archive::rows::{EventRows, Rows, Src};
use fencewatch_ingest::archive::{CHUNK_ROWS, Origin, Table, file_properties};
use fencewatch_ingest::decode::json::{Decoded, decode_line};
use parquet::arrow::ArrowWriter;
use parquet::schema::types::ColumnPath;
use std::hint::black_box;
use std::io::Write;
use std::time::Instant;

const EVENTS: usize = 100_000;

fn lines() -> Vec<u8> {
    let (mut rng, mut epochs, mut out) = (7u64, vec![0u32; 200_000], Vec::new());
    let mut ts = 1_764_417_600_000_000_000i64;
    for i in 0..EVENTS {
        rng ^= rng >> 12;
        rng ^= rng << 25;
        rng ^= rng >> 27;
        let r = rng.wrapping_mul(0x2545_f491_4f6c_dd1d);
        let s = (r >> 32) as usize % epochs.len();
        let epoch = &mut epochs[s];
        if *epoch == 0 {
            *epoch = 1 + (r % 5) as u32;
        } else if r.is_multiple_of(12) {
            *epoch += 1;
        }
        let route = ["orders.commit", "orders.refund"][(r >> 8) as usize % 2];
        let _ = writeln!(
            out,
            r#"{{"kind":"commit","ts":{ts},"scope":"order-{s}","epoch":{},"route":"{route}","holder":"w{}","emitter":"bench-order-{}","seq":{}}}"#,
            *epoch,
            *epoch % 64,
            i % 4,
            i / 4 + 1
        );
        ts += 50_000;
    }
    out
}

fn rows(events: &[Decoded<'_>]) -> Vec<RecordBatch> {
    let mut rows = EventRows::default();
    let mut out = Vec::new();
    let at = Origin {
        partition: "wal",
        received: 1_764_417_600_000_000_000,
    };
    for (i, d) in events.iter().enumerate() {
        let ev = d.event();
        rows.push(
            at,
            &ev,
            Some("orders"),
            Src::At("http", i as u64 % 1000 + 1),
            i as u64,
        );
        if rows.len() == CHUNK_ROWS {
            out.push(rows.finish());
        }
    }
    if rows.len() > 0 {
        out.push(rows.finish());
    }
    out
}

fn log(events: &[Decoded<'_>]) -> Vec<Chunk> {
    let mut log = EventLog::new("wal");
    let mut out = Vec::new();
    let received = 1_764_417_600_000_000_000;
    for (i, d) in events.iter().enumerate() {
        let ev = d.event();
        log.push(
            received,
            &ev,
            Some("orders"),
            Src::At("http", i as u64 % 1000 + 1),
            i as u64,
        );
        if log.len() == CHUNK_ROWS {
            out.push(Chunk::events(log.take()));
        }
    }
    if !log.is_empty() {
        out.push(Chunk::events(log.take()));
    }
    out
}

/// The archive's `file_properties`, changed for the columns named in the knobs' variables.
fn props() -> parquet::file::properties::WriterProperties {
    use parquet::basic::{Compression, Encoding};
    use parquet::file::properties::{EnabledStatistics, WriterPropertiesBuilder};
    type Set = fn(WriterPropertiesBuilder, ColumnPath) -> WriterPropertiesBuilder;
    let knobs: [(&str, Set); 8] = [
        ("PLAIN", |p, c| p.set_column_dictionary_enabled(c, false)),
        ("NOSTATS", |p, c| {
            p.set_column_statistics_enabled(c, EnabledStatistics::None)
        }),
        ("NOBLOOM", |p, c| {
            p.set_column_bloom_filter_enabled(c, false)
        }),
        ("NOCOMP", |p, c| {
            p.set_column_compression(c, Compression::UNCOMPRESSED)
        }),
        ("DLBA", |p, c| {
            p.set_column_encoding(c, Encoding::DELTA_LENGTH_BYTE_ARRAY)
        }),
        ("DBA", |p, c| {
            p.set_column_encoding(c, Encoding::DELTA_BYTE_ARRAY)
        }),
        ("PLAINENC", |p, c| {
            p.set_column_dictionary_enabled(c.clone(), false)
                .set_column_encoding(c, Encoding::PLAIN)
        }),
        ("LZ4", |p, c| {
            p.set_column_compression(c, Compression::LZ4_RAW)
        }),
    ];
    let mut props = file_properties(100_000).into_builder();
    for (var, set) in knobs {
        let names = std::env::var(var).unwrap_or_default();
        for c in names.split(',').filter(|c| !c.is_empty()) {
            props = set(props, ColumnPath::from(c));
        }
    }
    props.build()
}

fn parquet(batches: &[RecordBatch]) -> usize {
    let mut w = ArrowWriter::try_new(
        Vec::with_capacity(8 << 20),
        Table::Events.schema(),
        Some(props()),
    )
    .expect("a writer");
    for b in batches {
        w.write(b).expect("write");
    }
    w.into_inner().expect("close").len()
}

/// The batches' column `name` alone, encoded as in the archive: its share of `parquet`.
fn column(batches: &[RecordBatch], name: &str) -> usize {
    let i = Table::Events
        .schema()
        .index_of(name)
        .expect("a column of `events`");
    let one: Vec<RecordBatch> = batches
        .iter()
        .map(|b| b.project(&[i]).expect("project"))
        .collect();
    let mut w = ArrowWriter::try_new(Vec::with_capacity(8 << 20), one[0].schema(), Some(props()))
        .expect("a writer");
    for b in &one {
        w.write(b).expect("write");
    }
    w.into_inner().expect("close").len()
}

/// The events as bodies of 1,000 lines, applied to a partition feeding an archive under `dir`
/// (its events kept for the archive to read again when `kept`), then written.
fn sink(text: &[u8], way: &str, dir: &std::path::Path) {
    let kept = way == "kept";
    use fencewatch_assess::Contract;
    use fencewatch_assess::live::{Live, LiveOptions};
    use fencewatch_ingest::archive::{Archive, ArchiveOptions};
    use fencewatch_ingest::batch::{self, DecodedGroup, Format, Retained};
    use fencewatch_ingest::partition::Partition;
    use std::sync::Arc;
    let contract = Contract::parse(
        "c.toml",
        "[[property]]\nname=\"orders\"\nsubject=\"S\"\nstrategy=\"lease_epoch\"\n[[property.route]]\nname=\"orders.commit\"\n[[property.route]]\nname=\"orders.refund\"\n",
    )
    .expect("a contract");
    let archive = Arc::new(Archive::open(ArchiveOptions::new(dir.join("archive"))).expect("open"));
    let mut p = Partition::new("wal", Live::new(contract, LiveOptions::default()), 0);
    if way != "none" {
        p.attach_archive(archive.clone());
    }
    let lines: Vec<&[u8]> = text.split_inclusive(|&b| b == b'\n').collect();
    let payloads: Vec<Vec<u8>> = lines
        .chunks(1000)
        .map(|c| batch::encode(Format::Ndjson, 1 << 62, "http", None, &c.concat()))
        .collect();
    let mut base = 0;
    for group in payloads.chunks(64) {
        let group = Arc::new(DecodedGroup::decode(group.to_vec(), 1 << 20));
        let retained: Arc<dyn Retained> = group.clone();
        for (k, (b, items)) in group.batches().iter().enumerate() {
            let len = items.len() as u64;
            let keep = kept.then_some((&retained, k));
            p.apply_kept(base, len, b, items, keep, 1 << 20)
                .expect("applied");
            p.commit_archive();
            base += len;
        }
        archive.write_some().expect("written");
    }
    archive.flush().expect("flushed");
}

fn main() {
    let mut args = std::env::args().skip(1);
    let stage = args.next().unwrap_or_else(|| "all".into());
    let rounds: usize = args
        .next()
        .map_or(1, |n| n.parse().expect("rounds: a number"));
    let text = lines();
    let events: Vec<Decoded<'_>> = text
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| decode_line(l, 1 << 20).expect("valid"))
        .collect();
    let built = rows(&events);
    let (mut rows_s, mut parquet_s, mut bytes) = (0.0, 0.0, 0);
    let (mut log_s, mut batch_s) = (0.0, 0.0);
    for _ in 0..rounds {
        let all = stage == "all";
        if all || stage == "log" || stage == "batch" {
            let t = Instant::now();
            let chunks = black_box(log(&events));
            log_s += t.elapsed().as_secs_f64();
            if stage != "log" {
                let t = Instant::now();
                let b: Vec<RecordBatch> = chunks.iter().flat_map(Chunk::batches).collect();
                batch_s += t.elapsed().as_secs_f64();
                assert_eq!(b, built, "a log makes the builders' batches");
            }
        }
        if matches!(stage.as_str(), "rows" | "all") {
            let t = Instant::now();
            black_box(rows(&events));
            rows_s += t.elapsed().as_secs_f64();
        }
        if let Some(way) = stage.strip_prefix("sink:") {
            let dir = tempfile::tempdir().expect("a temporary folder");
            let t = Instant::now();
            sink(&text, way, dir.path());
            parquet_s += t.elapsed().as_secs_f64();
        }
        if let Some(name) = stage.strip_prefix("column:") {
            let t = Instant::now();
            bytes = black_box(column(&built, name));
            parquet_s += t.elapsed().as_secs_f64();
        }
        if matches!(stage.as_str(), "parquet" | "all") {
            let t = Instant::now();
            bytes = black_box(parquet(&built));
            parquet_s += t.elapsed().as_secs_f64();
        }
    }
    let per = |s: f64| s / (rounds * EVENTS) as f64 * 1e9;
    println!(
        "{stage}: log {:.0} ns/event, log to batch {:.0}, rows {:.0}, parquet {:.0} ({:.1} B/event)",
        per(log_s),
        per(batch_s),
        per(rows_s),
        per(parquet_s),
        bytes as f64 / EVENTS as f64
    );
}
