//! Benchmark of a scope's whole history out of the evidence archive (issue 14's target: 10
//! million events, under 1 s), through the code `/v1/scopes/{scope}` runs
//! (`serve::history::page_of`: the parameterised query on the query runtime).
//!
//! ```sh
//! cargo run -p fencewatch-api --example scope_history -- 10000000 [PAGE_SIZE]
//! ```
//!
//! Writes an archive of N `events` rows (default 10 million) in files of 1 million, as the
//! archive writes them (`archive::file_properties`: zstd, row groups of 100,000, a bloom filter
//! on `scope`), into a temporary folder with its manifest; then times, cold (the first query,
//! footers not cached) and warm (the median of 5), the first page (`PAGE_SIZE` events, default
//! 100) and every page
//! of: a scope whose ~100 events lie close together in time (as an order's do), and a hot
//! scope with an event every 10,000 rows (1,000 events, in every row group). Then, through
//! `POST /v1/query`'s code (`Queries::run_blocking`, the same snapshot), the count by route
//! over every event (issue 14's target: 10 million events, under 2 s), cold and warm.

use fencewatch_api::query::{Limits, Queries};
use fencewatch_api::serve::history::{Cursor, page_of};
use fencewatch_assess::{Epoch, Event, EventTime, Kind};
use fencewatch_ingest::archive::manifest::{FileEntry, Manifest};
use fencewatch_ingest::archive::rows::{EventRows, Rows};
use fencewatch_ingest::archive::{Origin, Snapshot, Table, file_properties};
use std::time::Instant;

const PER_FILE: u64 = 1_000_000;
const HOT: &str = "hot-scope";
const ROUTES: [&str; 3] = [
    "orders-api.transition",
    "settlement-worker.settle",
    "refund-worker.refund",
];
const BY_ROUTE: &str = "SELECT route, count(*) AS n FROM events GROUP BY route ORDER BY route";

fn scope_of(i: u64) -> String {
    if i.is_multiple_of(10_000) {
        return HOT.to_string();
    }
    // ~100 events a scope, spread over ~1,100 consecutive rows.
    let jitter = (i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 54) % 1000;
    format!("order-{}", (i + jitter) / 100)
}

fn write(dir: &std::path::Path, n: u64) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir.join("events"))?;
    let mut m = Manifest::default();
    let at = Origin {
        partition: "wal",
        received: 1_700_000_000_000_000_000,
    };
    let mut file_no = 0;
    let mut i = 0;
    while i < n {
        let rel = format!("events/{file_no}.parquet");
        let path = dir.join(&rel);
        let f = std::fs::File::create(&path)?;
        let mut w = datafusion::parquet::arrow::ArrowWriter::try_new(
            f,
            Table::Events.schema(),
            Some(file_properties(100_000)),
        )?;
        let end = (i + PER_FILE).min(n);
        let mut rows = EventRows::default();
        while i < end {
            let scope = scope_of(i);
            let mut ev = Event::new(
                Kind::Commit,
                EventTime(at.received - 3_600_000_000_000 + i as i64 * 1000),
            );
            ev.scope = Some(&scope);
            ev.epoch = Some(Epoch(1 + i % 7));
            ev.route = Some(ROUTES[(i % 3) as usize]);
            let holder = format!("worker-{}", i % 50);
            ev.holder = Some(&holder);
            rows.push(at, &ev, Some("p"), format_args!("http:{i}"), i);
            i += 1;
            if rows.len() == 8192 {
                w.write(&rows.finish())?;
            }
        }
        if rows.len() > 0 {
            w.write(&rows.finish())?;
        }
        w.close()?;
        m.files.push(FileEntry {
            table: "events".into(),
            path: rel,
            rows: end - file_no * PER_FILE,
            bytes: std::fs::metadata(&path)?.len(),
            created: 0,
        });
        file_no += 1;
    }
    m.store(dir)?;
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let n: u64 = std::env::args()
        .nth(1)
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(10_000_000);
    let limit: usize = std::env::args()
        .nth(2)
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(100);
    let dir = tempfile::tempdir()?;
    let started = Instant::now();
    write(dir.path(), n)?;
    let bytes: u64 = Manifest::load(dir.path())?
        .files
        .iter()
        .map(|f| f.bytes)
        .sum();
    println!(
        "archive: {n} events, {} MiB, written in {:.1?}",
        bytes >> 20,
        started.elapsed()
    );
    let queries = Queries::new(Limits::default())?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()?;
    let mid = format!("order-{}", n / 200);
    for (i, scope) in [mid.as_str(), HOT].into_iter().enumerate() {
        let mut first = Vec::new();
        let mut all = Vec::new();
        let mut total = 0;
        for _ in 0..6 {
            let t = Instant::now();
            let mut after: Option<Cursor> = None;
            let mut pages = 0;
            total = 0;
            loop {
                let snap = Snapshot::of_dir(dir.path())?;
                let page = rt
                    .block_on(page_of(&queries, snap, ("p", scope), after.take(), limit))
                    .map_err(|e| anyhow::anyhow!("{e}"))?;
                total += page["events"].as_array().map_or(0, Vec::len);
                if pages == 0 {
                    first.push(t.elapsed());
                }
                pages += 1;
                match page["next_cursor"].as_str() {
                    Some(c) => {
                        after = Some(Cursor::parse(c).map_err(|e| anyhow::anyhow!("{e:?}"))?)
                    }
                    None => break,
                }
            }
            all.push(t.elapsed());
        }
        let (cold_first, cold_all) = (first.remove(0), all.remove(0));
        first.sort();
        all.sort();
        println!(
            "{}: {total} events; first page cold {cold_first:.1?}, warm {:.1?}; every page cold {cold_all:.1?}, warm {:.1?}",
            if i == 0 {
                "clustered scope"
            } else {
                "hot scope"
            },
            first[first.len() / 2],
            all[all.len() / 2],
        );
    }
    let mut times = Vec::new();
    for _ in 0..6 {
        let t = Instant::now();
        let a = queries
            .run_blocking(BY_ROUTE, Snapshot::of_dir(dir.path())?)
            .map_err(|e| anyhow::anyhow!("{e:?}"))?;
        times.push(t.elapsed());
        assert_eq!(a.rows(), ROUTES.len(), "one row a route");
    }
    let cold = times.remove(0);
    times.sort();
    println!(
        "count by route (`{BY_ROUTE}`) over {n} events: cold {cold:.1?}, warm {:.1?}",
        times[times.len() / 2]
    );
    Ok(())
}
