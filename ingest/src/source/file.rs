//! Streaming files (and stdin) into a [`History`]: a reader thread cuts the input into
//! line-aligned chunks, a pool of workers decodes them in parallel, and the caller's thread
//! feeds the decoded events to the core in reading order.
//!
//! Memory is bounded by the chunk size times the queue depth, never by the input: a line
//! longer than the limit is skipped up to its newline and reported as malformed, and the lines
//! around it are read as usual.

use crate::decode::json::{self, DecodeError};
use crossbeam_channel::{Receiver, Sender, bounded};
use fencewatch_assess::Contract;
use fencewatch_assess::history::{Batch, History, SourceId, SpillStore, Spilled};
use memmap2::{Advice, Mmap, UncheckedAdvice};
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, Read};
use std::ops::Range;
use std::path::PathBuf;
use std::sync::Arc;

/// Bytes read per chunk.
const CHUNK_BYTES: usize = 1 << 20;

/// Where events are read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// A file (NDJSON, or a JSON array when its first non-blank byte is `[`).
    Path(PathBuf),
    /// Standard input (NDJSON), named `-`.
    Stdin,
}

impl Input {
    /// The name used in provenance: the path as given, or `-`.
    pub fn name(&self) -> String {
        match self {
            Input::Path(p) => p.display().to_string(),
            Input::Stdin => "-".to_string(),
        }
    }
}

/// Bytes of the inputs that are files (stdin counts 0): the size of a progress bar, and a hint
/// for reserving memory.
pub fn total_size(inputs: &[Input]) -> u64 {
    inputs
        .iter()
        .filter_map(|i| match i {
            Input::Path(p) => std::fs::metadata(p).ok().map(|m| m.len()),
            Input::Stdin => None,
        })
        .sum()
}

/// How inputs are read.
#[derive(Debug, Clone, Copy)]
pub struct ReadOptions {
    /// Lines over this many bytes are malformed.
    pub max_line_bytes: usize,
    /// Decoding threads (at least 1).
    pub threads: usize,
    /// Regular files are mapped rather than read ([`map_file`]).
    pub map_files: bool,
}

impl Default for ReadOptions {
    fn default() -> ReadOptions {
        ReadOptions {
            max_line_bytes: json::DEFAULT_MAX_LINE_BYTES,
            threads: std::thread::available_parallelism().map_or(2, |n| n.get()),
            map_files: true,
        }
    }
}

/// A failure to read an input (not a malformed event: those are evidence).
#[derive(Debug, thiserror::Error)]
#[error("{name}: {source}")]
pub struct ReadError {
    /// The input.
    pub name: String,
    /// The IO error.
    #[source]
    pub source: io::Error,
}

/// Progress callback: bytes read so far.
pub type Progress<'a> = &'a mut dyn FnMut(u64);

/// Whole lines of one input, numbered from 1 here: the reader does not count them (a pass
/// over every byte), the worker does, and the thread appending in order shifts them.
struct Chunk {
    seq: u64,
    source: SourceId,
    data: Data,
    /// The byte length of the chunk's first line when it was over the limit and is an empty
    /// line in `data` (a chunk holds at most one: the line that ends a skipped one starts it).
    oversized: Option<u64>,
    array: bool,
}

/// A chunk's bytes: read into a buffer, or a range of a mapped file.
enum Data {
    Read(Vec<u8>),
    Mapped(Arc<Mmap>, Range<usize>),
}

impl Data {
    fn bytes(&self) -> &[u8] {
        match self {
            Data::Read(v) => v,
            Data::Mapped(m, r) => &m[r.clone()],
        }
    }

    /// Done with: a buffer goes back to `pool` to be read into again (not one grown for a
    /// long line: the pool stays a few megabytes); a mapped range's pages are unmapped, so
    /// that a large file is not all resident at once (the page cache keeps them).
    fn release(self, pool: &Sender<Vec<u8>>) {
        match self {
            Data::Read(v) => {
                if v.capacity() <= 4 * CHUNK_BYTES {
                    let _ = pool.try_send(v);
                }
            }
            Data::Mapped(m, r) => {
                #[allow(unsafe_code)]
                // SAFETY: the mapping is private and read-only: dropping its pages only makes
                // the next read of them (a neighbour's chunk sharing a page) fault them in
                // again from the file, unchanged.
                let _ = unsafe {
                    m.unchecked_advise_range(UncheckedAdvice::DontNeed, r.start, r.len())
                };
            }
        }
    }
}

/// A decoded chunk: its place in reading order, its events and its number of lines.
struct Parsed {
    seq: u64,
    source: SourceId,
    batch: Batch,
    lines: u64,
}

fn bad(batch: &mut Batch, position: u64, e: DecodeError) {
    batch.push_malformed(position, e.ts, e.to_string());
}

fn decode_chunk(chunk: &Chunk, max_line_bytes: usize, contract: &Contract) -> Parsed {
    // Simulated and typical events are 120-200 bytes a line.
    let data = chunk.data.bytes();
    let mut batch = Batch::with_capacity(chunk.source, data.len() / 100);
    if chunk.array {
        // The reader checked that the document is well-formed (`json::for_each_element`).
        match json::decode_array(data, max_line_bytes) {
            Ok(elements) => {
                for (i, r) in elements.into_iter().enumerate() {
                    match r {
                        Ok(d) => batch.push(contract, &d.event(), i as u64 + 1),
                        Err(e) => bad(&mut batch, i as u64 + 1, e),
                    }
                }
            }
            Err(e) => bad(
                &mut batch,
                1,
                DecodeError {
                    field: None,
                    reason: e.to_string(),
                    ts: None,
                },
            ),
        }
        // The positions are element numbers, the only chunk of its input: no lines to shift.
        return Parsed {
            seq: chunk.seq,
            source: chunk.source,
            batch,
            lines: 0,
        };
    }
    let body = json::Body::new(data);
    // The lines are the pieces between newlines, the last one after the last newline (maybe
    // empty). Each is tried by the fast path where it starts, which finds where it ends; only
    // one it does not take is looked for its newline first.
    let mut count = 0;
    let mut start = 0;
    while start <= data.len() {
        count += 1;
        let this = count;
        let rest = &data[start..];
        let oversized = this == 1 && chunk.oversized.is_some();
        if !oversized && let Some((ev, end)) = &json::fast_line(rest) {
            // The limit is on the line without a `\r` before its newline (`json::decode_line`).
            let len = end - usize::from(rest[..*end].ends_with(b"\r"));
            if len <= max_line_bytes {
                batch.push(contract, ev, this);
                start += end + 1;
                continue;
            }
        }
        let end = memchr::memchr(b'\n', rest).unwrap_or(rest.len());
        start += end + 1;
        if let (true, Some(len)) = (oversized, chunk.oversized) {
            bad(
                &mut batch,
                this,
                DecodeError {
                    field: None,
                    reason: format!("line is {len} bytes, over the {max_line_bytes}-byte limit"),
                    ts: None,
                },
            );
            continue;
        }
        let line = &rest[..end];
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if json::is_blank(line) {
            continue;
        }
        if let Err(e) =
            body.with_slow_line(line, max_line_bytes, |ev| batch.push(contract, ev, this))
        {
            bad(&mut batch, this, e);
        }
    }
    Parsed {
        seq: chunk.seq,
        source: chunk.source,
        batch,
        lines: count,
    }
}

/// Cuts one input into chunks of whole lines.
struct Cutter<'a> {
    tx: &'a Sender<Chunk>,
    /// Chunks' buffers the decoders are done with, to be filled again: a fresh megabyte a
    /// chunk would be faulted in page by page (2.1M events: ~100k page faults a run).
    pool: &'a Receiver<Vec<u8>>,
    seq: &'a mut u64,
    source: SourceId,
    max_line_bytes: usize,
    carry: Vec<u8>,
    oversized: Option<u64>,
    /// Length so far of an oversized line being skipped.
    skipping: Option<u64>,
}

impl Cutter<'_> {
    fn send(&mut self, data: Vec<u8>) -> bool {
        let chunk = Chunk {
            seq: *self.seq,
            source: self.source,
            data: Data::Read(data),
            oversized: self.oversized.take(),
            array: false,
        };
        *self.seq += 1;
        self.tx.send(chunk).is_ok()
    }

    /// Takes the bytes just read into `carry`, from `from` on (before `from`, `carry` holds
    /// the unfinished line read before, with no newline: empty while skipping).
    fn filled(&mut self, mut from: usize) -> bool {
        if let Some(len) = self.skipping {
            match memchr::memchr(b'\n', &self.carry[from..]) {
                None => {
                    self.skipping = Some(len + (self.carry.len() - from) as u64);
                    self.carry.truncate(from);
                    return true;
                }
                Some(i) => {
                    // The oversized line ends here: it becomes the empty first line of the next
                    // chunk, sent just below (the newline at 0 is found).
                    debug_assert!(self.oversized.is_none());
                    self.oversized = Some(len + i as u64);
                    self.skipping = None;
                    self.carry.drain(..from + i);
                    from = 0;
                }
            }
        }
        if let Some(last) = memchr::memrchr(b'\n', &self.carry[from..]) {
            let last = from + last;
            let mut rest = self.pool.try_recv().unwrap_or_default();
            rest.clear();
            rest.extend_from_slice(&self.carry[last + 1..]);
            let mut data = std::mem::replace(&mut self.carry, rest);
            data.truncate(last);
            if !self.send(data) {
                return false;
            }
        }
        if self.carry.len() > self.max_line_bytes {
            // An unterminated line over the limit: skip to its newline without buffering it.
            self.skipping = Some(self.carry.len() as u64);
            self.carry.clear();
        }
        true
    }

    fn end(mut self) {
        if let Some(len) = self.skipping {
            self.oversized = Some(len);
            self.send(Vec::new());
        } else if !self.carry.is_empty() {
            let data = std::mem::take(&mut self.carry);
            self.send(data);
        }
    }
}

/// Whether the first non-blank byte of `data` (an input's first chunk) is `[`: a JSON array
/// document.
fn starts_an_array(data: &[u8]) -> bool {
    data.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[')
}

/// `file` mapped, when it is a regular file that is not empty and can be mapped: read in
/// place rather than copied out of the page cache by `read` (7% of `check`'s CPU, 2.6M
/// events). A file truncated while `check` reads it this way ends `check` with `SIGBUS`: the
/// README says so (stdin, `-`, is read with `read`).
fn map_file(file: &File) -> Option<Mmap> {
    let meta = file.metadata().ok()?;
    if !meta.is_file() || meta.len() == 0 {
        return None;
    }
    #[allow(unsafe_code)]
    // SAFETY: the mapping is read-only and private; its bytes are read as plain bytes (no
    // reference into it outlives the chunks that hold the map). Another process changing the
    // file meanwhile changes what is read (as with `read`); truncating it raises SIGBUS.
    let map = unsafe { Mmap::map(file) }.ok()?;
    let _ = map.advise(Advice::Sequential);
    Some(map)
}

/// Sends a mapped NDJSON input as chunks of whole lines of about [`CHUNK_BYTES`] (a line
/// longer than that is a chunk of its own, judged by the decoder against the line limit), as
/// [`Cutter`] cuts what it reads: each chunk's pages are faulted in here before it is sent
/// (`MADV_POPULATE_READ`, where the kernel has it), not by the decoder page by page.
fn send_mapped(
    map: &Arc<Mmap>,
    source: SourceId,
    seq: &mut u64,
    tx: &Sender<Chunk>,
    read_bytes: &std::sync::atomic::AtomicU64,
) {
    let len = map.len();
    let mut pos = 0;
    while pos < len {
        let end = (pos + CHUNK_BYTES).min(len);
        let newline = if end == len {
            (map[len - 1] == b'\n').then_some(len - 1)
        } else {
            (memchr::memrchr(b'\n', &map[pos..end]).map(|i| pos + i))
                .or_else(|| memchr::memchr(b'\n', &map[end..]).map(|i| end + i))
        };
        let cut = newline.unwrap_or(len);
        let _ = map.advise_range(Advice::PopulateRead, pos, cut - pos);
        let chunk = Chunk {
            seq: *seq,
            source,
            data: Data::Mapped(Arc::clone(map), pos..cut),
            oversized: None,
            array: false,
        };
        *seq += 1;
        let next = newline.map_or(len, |n| n + 1);
        read_bytes.fetch_add((next - pos) as u64, std::sync::atomic::Ordering::Relaxed);
        if tx.send(chunk).is_err() {
            return;
        }
        pos = next;
    }
}

fn read_input(
    input: &Input,
    source: SourceId,
    seq: &mut u64,
    tx: &Sender<Chunk>,
    pool: &Receiver<Vec<u8>>,
    opts: ReadOptions,
    read_bytes: &std::sync::atomic::AtomicU64,
) -> Result<(), ReadError> {
    let max_line_bytes = opts.max_line_bytes;
    let err = |source| ReadError {
        name: input.name(),
        source,
    };
    let mut reader: Box<dyn Read> = match input {
        Input::Path(p) => {
            let file = File::open(p).map_err(err)?;
            if let Some(map) = opts.map_files.then(|| map_file(&file)).flatten() {
                let map = Arc::new(map);
                if !starts_an_array(&map[..map.len().min(CHUNK_BYTES)]) {
                    send_mapped(&map, source, seq, tx, read_bytes);
                    return Ok(());
                }
            }
            Box::new(file)
        }
        Input::Stdin => Box::new(io::stdin().lock()),
    };
    let mut cutter = Cutter {
        tx,
        pool,
        seq,
        source,
        max_line_bytes,
        carry: Vec::new(),
        oversized: None,
        skipping: None,
    };
    let mut first = true;
    // Stdin is read one `read` at a time, so that a terminal's end of input (one `read` of 0
    // bytes, which `read_to_end` would read past) ends it.
    let mut buf = match input {
        Input::Stdin => vec![0u8; CHUNK_BYTES],
        Input::Path(_) => Vec::new(),
    };
    loop {
        let from = cutter.carry.len();
        cutter.carry.reserve(CHUNK_BYTES);
        let read = match input {
            // Straight into the carried buffer (no copy), up to a chunk at a time.
            Input::Path(_) => reader
                .by_ref()
                .take(CHUNK_BYTES as u64)
                .read_to_end(&mut cutter.carry),
            Input::Stdin => match reader.read(&mut buf) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                r => r.inspect(|&n| cutter.carry.extend_from_slice(&buf[..n])),
            },
        };
        let n = match read {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) => return Err(err(e)),
        };
        read_bytes.fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
        if first && matches!(input, Input::Path(_)) && starts_an_array(&cutter.carry[from..]) {
            // A JSON array document: read whole and decoded element by element; one that is
            // not well-formed JSON is refused whole (SPEC §2), an error of the input.
            let mut data = std::mem::take(&mut cutter.carry);
            reader.read_to_end(&mut data).map_err(err)?;
            if let Err(e) = json::for_each_element(&data, |_, _| {}) {
                return Err(err(io::Error::new(io::ErrorKind::InvalidData, e)));
            }
            let chunk = Chunk {
                seq: *cutter.seq,
                source,
                data: Data::Read(data),
                oversized: None,
                array: true,
            };
            *cutter.seq += 1;
            let _ = tx.send(chunk);
            return Ok(());
        }
        first = false;
        if !cutter.filled(from) {
            return Ok(());
        }
    }
    cutter.end();
    Ok(())
}

/// What [`read_into`] reads into: a whole [`History`], or one assessed part by part within a
/// memory budget ([`Spilled`], `check --max-memory`).
pub trait Sink {
    /// Registers a source (see [`History::add_source`]).
    fn add_source(&mut self, name: &str) -> SourceId;
    /// The contract the events are admitted under.
    fn contract(&self) -> &Contract;
    /// About `events` events are coming, decoded on `threads` threads.
    fn prepare(&mut self, events: usize, threads: usize);
    /// Adds a batch after those read so far.
    fn append(&mut self, batch: Batch) -> io::Result<()>;
}

impl Sink for History {
    fn add_source(&mut self, name: &str) -> SourceId {
        History::add_source(self, name)
    }

    fn contract(&self) -> &Contract {
        History::contract(self)
    }

    fn prepare(&mut self, events: usize, threads: usize) {
        self.reserve(events);
        self.set_threads(threads);
    }

    fn append(&mut self, batch: Batch) -> io::Result<()> {
        History::append(self, batch);
        Ok(())
    }
}

impl<S: SpillStore> Sink for Spilled<S> {
    fn add_source(&mut self, name: &str) -> SourceId {
        Spilled::add_source(self, name)
    }

    fn contract(&self) -> &Contract {
        Spilled::contract(self)
    }

    fn prepare(&mut self, _events: usize, threads: usize) {
        self.set_threads(threads);
    }

    fn append(&mut self, batch: Batch) -> io::Result<()> {
        Spilled::append(self, batch)
    }
}

/// Reads `inputs` as one stream in argument order into `history`. `progress` is called with
/// the bytes read so far, from the caller's thread.
pub fn read_into(
    history: &mut impl Sink,
    inputs: &[Input],
    opts: ReadOptions,
    progress: Option<Progress<'_>>,
) -> Result<(), ReadError> {
    let sources: Vec<SourceId> = inputs
        .iter()
        .map(|i| history.add_source(&i.name()))
        .collect();
    // Simulated and typical events are 120-200 bytes a line.
    let threads = opts.threads.max(1);
    history.prepare(
        usize::try_from(total_size(inputs) / 160).unwrap_or(0),
        threads,
    );
    let (chunk_tx, chunk_rx): (Sender<Chunk>, Receiver<Chunk>) = bounded(threads * 2);
    let (parsed_tx, parsed_rx): (Sender<Parsed>, Receiver<Parsed>) = bounded(threads * 2);
    // As many buffers as can be in flight: those queued, decoding, and the reader's own.
    let (pool_tx, pool_rx) = bounded::<Vec<u8>>(threads * 4 + 2);
    let read_bytes = std::sync::atomic::AtomicU64::new(0);
    let mut progress = progress;
    // The workers' copy: `history` is borrowed mutably by this thread meanwhile.
    let contract = history.contract().clone();
    std::thread::scope(|s| {
        let reader = s.spawn(|| {
            let mut seq = 0u64;
            for (input, &source) in inputs.iter().zip(&sources) {
                read_input(
                    input,
                    source,
                    &mut seq,
                    &chunk_tx,
                    &pool_rx,
                    opts,
                    &read_bytes,
                )?;
            }
            drop(chunk_tx);
            Ok::<(), ReadError>(())
        });
        let contract = &contract;
        for _ in 0..threads {
            let rx = chunk_rx.clone();
            let tx = parsed_tx.clone();
            let pool = pool_tx.clone();
            s.spawn(move || {
                for chunk in rx {
                    let parsed = decode_chunk(&chunk, opts.max_line_bytes, contract);
                    // The batch owns what it kept: the bytes are done with.
                    chunk.data.release(&pool);
                    if tx.send(parsed).is_err() {
                        break;
                    }
                }
            });
        }
        drop(chunk_rx);
        drop(parsed_tx);
        drop(pool_tx);
        let mut pending: BTreeMap<u64, Parsed> = BTreeMap::new();
        let mut next = 0u64;
        let mut failed = None;
        // The input being appended and its lines before the next chunk.
        let (mut source, mut lines_before) = (None, 0u64);
        'read: for parsed in &parsed_rx {
            pending.insert(parsed.seq, parsed);
            while let Some(mut p) = pending.remove(&next) {
                if source != Some(p.source) {
                    (source, lines_before) = (Some(p.source), 0);
                }
                p.batch.shift_positions(lines_before);
                lines_before += p.lines;
                if let Err(e) = history.append(p.batch) {
                    failed = Some(e);
                    break 'read;
                }
                next += 1;
            }
            if let Some(f) = progress.as_mut() {
                f(read_bytes.load(std::sync::atomic::Ordering::Relaxed));
            }
        }
        // The workers and then the reader stop once their channel's other end is gone.
        drop(parsed_rx);
        let read = reader.join().expect("reader thread");
        match failed {
            Some(source) => Err(ReadError {
                name: "the spill files (--max-memory)".into(),
                source,
            }),
            None => read,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use fencewatch_assess::Contract;
    use std::io::Write;

    const CONTRACT: &str = "[[property]]\nname=\"p\"\nsubject=\"S\"\nstrategy=\"lease_epoch\"\n[[property.route]]\nname=\"r\"\n";

    /// The report of `content` as a file, mapped and read: the same.
    fn run(content: &[u8], max: usize) -> fencewatch_assess::Report {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(content).unwrap();
        let [mapped, read] = [true, false].map(|map_files| {
            let mut h = History::new(Contract::parse("c", CONTRACT).unwrap());
            let opts = ReadOptions {
                max_line_bytes: max,
                threads: 2,
                map_files,
            };
            read_into(&mut h, &[Input::Path(f.path().into())], opts, None).unwrap();
            h.finish()
        });
        assert_eq!(
            serde_json::to_string(&mapped).unwrap(),
            serde_json::to_string(&read).unwrap(),
            "mapped and read"
        );
        mapped
    }

    /// The lines of `data` split at `\n` (the last one may be empty): how `decode_chunk` cut a
    /// chunk before its fast path found the lines' ends itself, kept as the model.
    fn lines(data: &[u8]) -> impl Iterator<Item = &[u8]> {
        let mut start = 0;
        let ends = memchr::memchr_iter(b'\n', data).chain(std::iter::once(data.len()));
        ends.map(move |end| {
            let line = &data[start..end];
            start = end + 1;
            line
        })
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 2000, ..Default::default() })]
        /// A chunk decodes as its lines do one by one, each cut at its newline first and
        /// decoded by `json::decode_line`: the same events and malformed lines at the same
        /// numbers, and the same line count.
        #[test]
        fn a_chunk_decodes_as_its_lines_one_by_one(
            pieces in proptest::collection::vec(proptest::prop_oneof![
                proptest::prelude::Just(&b"{\"kind\":\"commit\",\"scope\":\"s\",\"route\":\"r\",\"epoch\":1,\"ts\":5}"[..]),
                proptest::prelude::Just(&b"{\"kind\":\"heartbeat\",\"route\":\"r\",\"ts\":7}"[..]),
                proptest::prelude::Just(&b" {\"kind\" :\r\"heartbeat\",\t\"route\":\"r\",\"ts\":8 } "[..]),
                proptest::prelude::Just("{\"kind\":\"heartbeat\",\"route\":\"\u{e9}\",\"ts\":9}".as_bytes()),
                proptest::prelude::Just(&b"{\"kind\":\"heartbeat\",\"route\":\"\xff\",\"ts\":9}"[..]),
                proptest::prelude::Just(&b"{\"kind\":\"heartbeat\",\"route\":\"r\\u0031\",\"ts\":10}"[..]),
                proptest::prelude::Just(&b"{\"kind\":\"attestation\",\"ts\":1,\"premise\":\"p\"}"[..]),
                proptest::prelude::Just(&b"{\"kind\":\"heartbeat\",\"route\":\"r\",\"ts\":11}x"[..]),
                proptest::prelude::Just(&b"{\"kind\":\"heartbeat\",\"route\":\"r\",\"ts\":11,\"ts\":12}"[..]),
                proptest::prelude::Just(&b"{\"kind\":\"heartbeat\",\"route\":"[..]),
                proptest::prelude::Just(&b"\"r\",\"ts\":13}"[..]),
                proptest::prelude::Just(&b"\xef\xbb\xbf{\"kind\":\"heartbeat\",\"route\":\"r\",\"ts\":14}"[..]),
                proptest::prelude::Just(&b"{\"kind\":\"heartbeat\",\"route\":\"a-route-name-long-enough-to-pass-the-limit\",\"ts\":15}"[..]),
                proptest::prelude::Just(&b"{}"[..]),
                proptest::prelude::Just(&b"{"[..]),
                proptest::prelude::Just(&b"12"[..]),
                proptest::prelude::Just(&b""[..]),
                proptest::prelude::Just(&b" \t"[..]),
                proptest::prelude::Just(&b"\r"[..]),
                proptest::prelude::Just(&b"\r\r"[..]),
                proptest::prelude::Just(&b"\n"[..]),
                proptest::prelude::Just(&b"\xff"[..]),
            ], 0..24),
            max in proptest::prop_oneof![proptest::prelude::Just(1usize << 20), proptest::prelude::Just(64usize)],
        ) {
            let data: Vec<u8> = pieces.iter().flat_map(|p| p.iter().copied().chain([b'\n'])).collect();
            // Without its last newline too, so the last line ends the chunk.
            for data in [&data[..], &data[..data.len().saturating_sub(1)]] {
                let contract = Contract::parse("c", CONTRACT).unwrap();
                let chunk = Chunk {
                    seq: 0,
                    source: SourceId(0),
                    data: Data::Read(data.to_vec()),
                    oversized: None,
                    array: false,
                };
                let parsed = decode_chunk(&chunk, max, &contract);
                let mut got = History::new(contract.clone());
                got.add_source("f");
                got.append(parsed.batch);
                let mut want = History::new(contract);
                let source = want.add_source("f");
                let mut count = 0;
                for (n, line) in (1..).zip(lines(data)) {
                    count = n;
                    let line = line.strip_suffix(b"\r").unwrap_or(line);
                    if json::is_blank(line) {
                        continue;
                    }
                    match json::decode_line(line, max) {
                        Ok(d) => want.push(&d.event(), source, n),
                        Err(e) => want.push_malformed(source, n, e.ts, e.to_string()),
                    }
                }
                proptest::prop_assert_eq!(parsed.lines, count);
                proptest::prop_assert_eq!(
                    serde_json::to_string(&got.finish()).unwrap(),
                    serde_json::to_string(&want.finish()).unwrap()
                );
            }
        }
    }

    #[test]
    fn a_bad_utf8_line_costs_only_itself_in_any_chunk() {
        // Over three chunks, so that some are valid UTF-8 whole and some are not: each bad
        // line is malformed at its own number, every other line is read.
        let mut content = Vec::new();
        let lines = 3 * CHUNK_BYTES / 80;
        // Only in the first megabyte: the chunks after it are valid whole.
        let bad = |i: usize| i % 4001 == 7 && i < lines / 4;
        for i in 0..lines {
            if bad(i) {
                content.extend_from_slice(b"{\"kind\":\"commit\",\"scope\":\"\xff\",\"ts\":1}\n");
            } else if i % 5003 == 11 {
                content.extend_from_slice("{\"kind\":\"commit\",\"scope\":\"\u{e9}\",\"route\":\"r\",\"epoch\":1,\"ts\":1}\r\n".as_bytes());
            } else {
                writeln!(
                    content,
                    "{{\"kind\":\"commit\",\"scope\":\"s{}\",\"route\":\"r\",\"epoch\":1,\"ts\":{i}}}",
                    i % 97
                )
                .unwrap();
            }
        }
        let bad: Vec<u64> = (0..lines as u64).filter(|&i| bad(i as usize)).collect();
        let report = run(&content, 1 << 20);
        assert_eq!(report.events, (lines - bad.len()) as u64);
        assert_eq!(report.malformed, bad.len() as u64);
        assert_eq!(report.malformed_events.len(), bad.len());
        for (s, i) in report.malformed_events.iter().zip(&bad) {
            assert!(s.source.ends_with(&format!(":{}", i + 1)), "{s:?}");
            assert!(s.detail.contains("invalid UTF-8 at byte"), "{s:?}");
        }
    }

    #[test]
    fn oversized_lines_lose_nothing_around_them() {
        let ok = |e: u64, t: u64| {
            format!(
                "{{\"kind\":\"commit\",\"scope\":\"s\",\"route\":\"r\",\"epoch\":{e},\"ts\":{t}}}\n"
            )
        };
        let mut content = ok(1, 1_000);
        content.push_str(&format!(
            "{{\"kind\":\"commit\",\"pad\":\"{}\"}}\n",
            "x".repeat(5 * CHUNK_BYTES)
        ));
        content.push_str(&ok(2, 2_000_000_000));
        content.push_str("\n  \r\n");
        content.push_str(&"y".repeat(300));
        content.push('\n');
        content.push_str(&ok(3, 3_000_000_000));
        let r = run(content.as_bytes(), 256);
        assert_eq!(r.events, 3);
        assert_eq!(r.malformed, 2);
        let lines: Vec<&str> = r
            .malformed_events
            .iter()
            .map(|s| s.source.rsplit(':').next().unwrap())
            .collect();
        assert_eq!(lines, ["2", "6"]);
        assert!(
            r.malformed_events[0]
                .detail
                .contains("over the 256-byte limit")
        );
    }

    #[test]
    fn unterminated_last_line_and_crlf() {
        let content = b"{\"kind\":\"heartbeat\",\"route\":\"r\",\"ts\":1}\r\n{\"kind\":\"heartbeat\",\"route\":\"r\",\"ts\":2}";
        let r = run(content, 1024);
        assert_eq!(r.events, 2);
        assert_eq!(r.malformed, 0);
    }

    #[test]
    fn many_chunks_keep_line_numbers() {
        let mut content = String::new();
        let n = 60_000;
        for i in 0..n {
            if i == n - 7 {
                content.push_str("{bad\n");
            } else {
                content.push_str(&format!(
                    "{{\"kind\":\"heartbeat\",\"route\":\"r\",\"ts\":{i}}}\n"
                ));
            }
        }
        assert!(content.len() > 2 * CHUNK_BYTES);
        let r = run(content.as_bytes(), 1024);
        assert_eq!(r.events, n - 1);
        assert!(
            r.malformed_events[0]
                .source
                .ends_with(&format!(":{}", n - 6)),
            "{:?}",
            r.malformed_events
        );
    }

    #[test]
    fn json_array_files() {
        let r = run(
            br#" [{"kind":"heartbeat","route":"r","ts":1},{"kind":"heartbeat","ts":2}]"#,
            1024,
        );
        assert_eq!(r.events, 1);
        assert_eq!(r.malformed, 1);
        assert!(r.malformed_events[0].source.ends_with(":2"));
        // A bad element costs only itself: the valid ones after it are kept.
        let r = run(
            br#"[{"kind":"heartbeat","route":"r","ts":1,"ts":2},{"kind":"heartbeat","route":"r","ts":3}]"#,
            1024,
        );
        assert_eq!((r.events, r.malformed), (1, 1));
    }

    #[test]
    fn a_json_array_that_is_not_well_formed_is_refused_whole() {
        for bad in [
            &br#"[{"kind":"heartbeat","route":"r","ts":1}, NaN]"#[..],
            br#"[{"kind":"heartbeat","route":"r","ts":1}, {"kind""#,
            b"[{\"kind\":\"heartbeat\",\"route\":\"\xff\",\"ts\":1}]",
        ] {
            let mut f = tempfile::NamedTempFile::new().unwrap();
            f.write_all(bad).unwrap();
            let mut h = History::new(Contract::parse("c", CONTRACT).unwrap());
            let err = read_into(
                &mut h,
                &[Input::Path(f.path().into())],
                ReadOptions::default(),
                None,
            )
            .unwrap_err();
            assert!(
                err.to_string().contains("not a well-formed JSON array"),
                "{err}"
            );
        }
    }
}
