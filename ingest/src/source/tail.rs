//! `--ingest-file`: an NDJSON file (or stdin) appended to the WAL source in batches of lines,
//! each waited for, its events positioned by their line numbers (`file:line`). A file
//! ingested before (the local partition remembers its last line) resumes after that line
//! instead of being appended again, however its path was spelled then (the same file,
//! resolved from the working directory); stdin is always read whole.
//!
//! Memory is bounded whatever the file holds: a line longer than `max_line_bytes` is kept only
//! up to `max_line_bytes + 1` bytes (it is malformed for its length alone, and is counted so,
//! with a WARN giving its line and real length), and a batch ends at 4096 lines or 8 MiB. A
//! binary file is so many malformed lines. A file that shrinks while read (truncated, or
//! replaced), or that has fewer lines than were ingested from it before, is reported at WARN.

use crate::source::wal::WalSource;
use std::io::{BufRead, Read};

/// Lines per batch of file ingest.
const FILE_BATCH_LINES: usize = 4096;
/// Bytes per batch of file ingest: a batch ends at the line that reaches this.
const FILE_BATCH_BYTES: usize = 8 << 20;
/// Over-long lines of a file logged one by one (then only counted).
const FILE_LONG_LINES_LOGGED: u64 = 10;

/// One line as [`read_line_bounded`] read it.
struct LineRead {
    /// Its length without the newline, however much of it was kept.
    len: u64,
    /// Whether it ended with a newline (else the input ended).
    newline: bool,
}

/// Reads the next line, appending at most `keep` bytes of it (no newline) to `out` and
/// passing over the rest: a line of any length costs at most `keep` bytes of memory. `None`
/// at the end of the input.
fn read_line_bounded(
    r: &mut impl BufRead,
    out: &mut Vec<u8>,
    keep: usize,
) -> std::io::Result<Option<LineRead>> {
    let mut len = 0u64;
    let mut any = false;
    loop {
        let buf = match r.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if buf.is_empty() {
            return Ok(any.then_some(LineRead {
                len,
                newline: false,
            }));
        }
        any = true;
        let newline = buf.iter().position(|&b| b == b'\n');
        let chunk = &buf[..newline.unwrap_or(buf.len())];
        let room = (keep as u64).saturating_sub(len) as usize;
        out.extend_from_slice(&chunk[..chunk.len().min(room)]);
        len += chunk.len() as u64;
        let used = chunk.len() + usize::from(newline.is_some());
        r.consume(used);
        if newline.is_some() {
            return Ok(Some(LineRead { len, newline: true }));
        }
    }
}

/// Appends an NDJSON file (or `-`, stdin) to `wal` in batches, waiting for each (see the
/// [module docs](self)), once `wal` is ready.
pub fn ingest_file(wal: &WalSource, path: &std::path::Path) {
    wal.wait_ready();
    let max_line = wal.max_line_bytes();
    let keep = max_line.saturating_add(1);
    let name = path.display().to_string();
    let stdin = name == "-";
    let mut size_at_open = None;
    let reader: Box<dyn Read> = if stdin {
        Box::new(std::io::stdin())
    } else {
        match std::fs::File::open(path) {
            Ok(f) => {
                size_at_open = f.metadata().ok().map(|m| m.len());
                Box::new(f)
            }
            Err(e) => {
                tracing::error!(file = %name, error = %e, "cannot read the ingest file");
                return;
            }
        }
    };
    let mut reader = std::io::BufReader::with_capacity(1 << 20, reader);
    let (mut batch, mut lines, mut total, mut malformed) = (Vec::new(), 0usize, 0u64, 0u64);
    let (mut read_bytes, mut long_lines) = (0u64, 0u64);
    let mut first_line = 1u64;
    // A file ingested before (this data directory's state remembers its last line) resumes
    // after that line instead of being appended again. stdin is always read whole.
    // The file may have been named otherwise before (`events.ndjson`, `./events.ndjson`, its
    // absolute path): a source that is the same file, resolved from the working directory,
    // counts too. Its events keep the name as given, as `check` names them.
    let done = if stdin {
        0
    } else {
        let this = std::fs::canonicalize(path).ok();
        wal.sources_progress(|source| {
            source == name || this.is_some() && std::fs::canonicalize(source).ok() == this
        })
    };
    if done > 0 {
        let mut skip = Vec::new();
        while first_line <= done {
            match read_line_bounded(&mut reader, &mut skip, 0) {
                Ok(None) => break,
                Ok(Some(l)) => {
                    read_bytes += l.len + u64::from(l.newline);
                    first_line += 1;
                }
                Err(e) => {
                    tracing::error!(file = %name, error = %e, "reading the ingest file failed");
                    return;
                }
            }
        }
        if first_line <= done {
            tracing::warn!(file = %name, lines = first_line - 1, ingested_before = done, "the ingest file has fewer lines than were ingested from it before (truncated or replaced?): nothing of it is ingested again");
        } else {
            tracing::info!(file = %name, resumed_after_line = done, "file ingested before: resuming");
        }
    }
    let source = if stdin {
        "stdin".to_string()
    } else {
        name.clone()
    };
    let mut failed = false;
    loop {
        let line = match read_line_bounded(&mut reader, &mut batch, keep) {
            Ok(l) => l,
            Err(e) => {
                tracing::error!(file = %name, line = first_line + lines as u64, error = %e, "reading the ingest file failed; the lines before are ingested");
                failed = true;
                None
            }
        };
        if let Some(l) = &line {
            batch.push(b'\n');
            lines += 1;
            read_bytes += l.len + u64::from(l.newline);
            if l.len > max_line as u64 {
                long_lines += 1;
                if long_lines <= FILE_LONG_LINES_LOGGED {
                    tracing::warn!(file = %name, line = first_line + lines as u64 - 1, bytes = l.len, max_line_bytes = max_line, kept_bytes = keep, "a line over max_line_bytes: a malformed event (only its first bytes are kept)");
                }
            }
        }
        if (line.is_none() && !batch.is_empty())
            || lines >= FILE_BATCH_LINES
            || batch.len() >= FILE_BATCH_BYTES
        {
            match wal.submit_lines(&source, first_line, &batch) {
                Ok(done) => {
                    total += done.applied.accepted;
                    malformed += done.applied.malformed;
                }
                Err(e) => {
                    tracing::error!(file = %name, error = %e, "file ingest stopped");
                    return;
                }
            }
            batch.clear();
            first_line += lines as u64;
            lines = 0;
        }
        if line.is_none() {
            break;
        }
    }
    if let Some(size) = size_at_open
        && !failed
    {
        let now = std::fs::metadata(path).map(|m| m.len());
        match now {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                tracing::warn!(file = %name, bytes_read = read_bytes, "the ingest file was removed while it was read (read to its end through the open file)");
            }
            _ if read_bytes < size => {
                tracing::warn!(file = %name, bytes_at_open = size, bytes_read = read_bytes, bytes_now = now.ok(), "the ingest file shrank while it was read (truncated or replaced?): only the lines read are ingested");
            }
            _ => {}
        }
    }
    if long_lines > FILE_LONG_LINES_LOGGED {
        tracing::warn!(file = %name, lines = long_lines, max_line_bytes = max_line, "lines over max_line_bytes (malformed events)");
    }
    tracing::info!(file = %name, events = total, malformed, lines_over_limit = long_lines, "file ingested");
}
