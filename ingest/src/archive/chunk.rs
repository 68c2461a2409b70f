//! Rows handed to the archive by a sink ([`super::Sink`]), in the order they are written: a
//! batch, a log of events, or the events of an applied batch noted and not read yet.

use super::applied::{AppliedEvents, Unread, read_group};
use super::log::{CHUNK_BYTES, EventLog, LogShape, LoggedEvents};
use arrow_array::RecordBatch;
use std::sync::Arc;

/// Rows handed to the archive: a batch, or events turned into batches once, by the first that
/// needs them (the archive's thread encoding them, or a query reading them first).
#[derive(Debug, Clone)]
pub enum Chunk {
    /// Rows already in Arrow.
    Batch(RecordBatch),
    /// Events logged, not in Arrow yet.
    Events(Arc<LoggedEvents>),
    /// Events of an applied batch, noted, not read yet ([`super::applied`]).
    Applied(Arc<AppliedEvents>),
}

impl Chunk {
    /// A chunk of `log`'s events.
    pub fn events(log: EventLog) -> Chunk {
        Chunk::Events(Arc::new(log.into_logged()))
    }

    /// Its rows.
    pub fn num_rows(&self) -> usize {
        match self {
            Chunk::Batch(b) => b.num_rows(),
            Chunk::Events(e) => e.rows(),
            Chunk::Applied(a) => a.rows(),
        }
    }

    /// Bytes of its events' strings (about, for events not read yet); none for a batch.
    pub fn text_bytes(&self) -> usize {
        match self {
            Chunk::Batch(_) => 0,
            Chunk::Events(e) => e.text_bytes(),
            Chunk::Applied(a) => a.text_bytes(),
        }
    }

    /// The memory it holds, or will once turned into a batch: a log's batch is about as large
    /// as the log, and both are held until the chunk is written.
    pub fn memory_size(&self) -> usize {
        match self {
            Chunk::Batch(b) => b.get_array_memory_size(),
            Chunk::Events(e) => e.bytes() * 2,
            Chunk::Applied(a) => a.bytes(),
        }
    }

    /// Its rows, as batches.
    pub fn batches(&self) -> Vec<RecordBatch> {
        match self {
            Chunk::Batch(b) => vec![b.clone()],
            Chunk::Events(e) => vec![e.batch()],
            Chunk::Applied(a) => a.batches(),
        }
    }
}

/// Rows read at once at most, from consecutive chunks ([`batches_of`]): as many as a sink hands
/// over at once, so that the log a batch is made from (~140 bytes a row, read once per column)
/// stays in the core's cache.
const READ_ROWS: usize = super::log::CHUNK_ROWS;

/// The batches of `chunks`, a table's chunks in order. Consecutive chunks of events not read
/// yet are read together into one log (up to [`READ_ROWS`] rows and [`CHUNK_BYTES`] of
/// strings), sized like the last (`shape`): one batch for many HTTP bodies, not one each
/// (each batch costs the Parquet writer a pass per column, each log its allocations). Each
/// chunk keeps its slice of that batch, for a query that reads it before it is written.
pub(super) fn batches_of(chunks: &[Chunk], shape: &mut LogShape) -> Vec<RecordBatch> {
    let mut out = Vec::with_capacity(chunks.len());
    // Chunks being read together, locked (a query reading one of them waits), and their rows.
    let mut group: Vec<Unread<'_>> = Vec::new();
    let (mut rows, mut text) = (0, 0);
    for chunk in chunks {
        if let Chunk::Applied(a) = chunk
            && a.text_bytes() < CHUNK_BYTES
            && let Some(unread) = a.unread()
        {
            // One log is one partition's (its `partition` column).
            let other = group
                .first()
                .is_some_and(|u| u.partition() != a.partition());
            if rows + a.rows() > READ_ROWS || text + a.text_bytes() > CHUNK_BYTES || other {
                read_group(&mut group, shape, &mut out);
                (rows, text) = (0, 0);
            }
            rows += a.rows();
            text += a.text_bytes();
            group.push(unread);
            continue;
        }
        read_group(&mut group, shape, &mut out);
        (rows, text) = (0, 0);
        out.extend(chunk.batches());
    }
    read_group(&mut group, shape, &mut out);
    out
}
