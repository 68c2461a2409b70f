//! Writing a checkpoint as its state is encoded: [`Pending`], the `.tmp` file the bytes go
//! into (its length and crc counted on the way, the header written last), and [`pipe`], which
//! carries the bytes from the thread that encodes the state under the partition's lock to
//! the one that writes the file, so that the lock is held as long as encoding takes, not
//! encoding and writing. Neither holds more than a few chunks of the state at a time.

use super::{CheckpointStore, Error, HEADER_BYTES, MAGIC, Result, VERSION};
use crossbeam_channel::{Receiver, Sender, bounded};
use std::fs::{self, File};
use std::io::{self, Seek, SeekFrom, Write};
use std::path::PathBuf;

/// Bytes a [`Pending`] buffers, and the size of a [`pipe`]'s chunks.
const CHUNK: usize = 1 << 20;
/// Chunks a [`pipe`] holds between its ends (besides the one each end has in hand).
const DEPTH: usize = 4;

/// A checkpoint being written by [`CheckpointStore::begin`]: a `.tmp` file holding zeros where
/// the header goes and the state's bytes as they are written, with their length and crc32
/// counted. Only [`CheckpointStore::commit`] writes the header, fsyncs and renames it into
/// place; dropped before, the file is deleted (and a crash leaves a `.tmp` file, which
/// [`CheckpointStore::open`] deletes): a checkpoint is whole and verified or not there.
#[derive(Debug)]
pub struct Pending {
    pub(super) offset: u64,
    pub(super) tmp: PathBuf,
    pub(super) file: Option<File>,
    pub(super) buf: Vec<u8>,
    pub(super) crc: crc32fast::Hasher,
    pub(super) len: u64,
}

impl Pending {
    /// The offset it covers.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// The temporary file.
    pub fn path(&self) -> &std::path::Path {
        &self.tmp
    }

    /// The state's bytes written so far.
    pub fn state_bytes(&self) -> u64 {
        self.len + self.buf.len() as u64
    }

    fn put(&mut self, bytes: &[u8]) -> io::Result<()> {
        let file = self.file.as_mut().ok_or(io::ErrorKind::NotConnected)?;
        file.write_all(bytes)?;
        self.crc.update(bytes);
        self.len += bytes.len() as u64;
        Ok(())
    }

    fn drain(&mut self) -> io::Result<()> {
        let buf = std::mem::take(&mut self.buf);
        let put = self.put(&buf);
        self.buf = buf;
        self.buf.clear();
        put
    }

    /// Writes what is buffered and the header, and fsyncs: the file's length when done.
    pub(super) fn finish(&mut self) -> io::Result<u64> {
        self.drain()?;
        let header = header(self.offset, self.len, self.crc.clone().finalize());
        let mut file = self.file.take().ok_or(io::ErrorKind::NotConnected)?;
        file.seek(SeekFrom::Start(0))?;
        file.write_all(&header)?;
        file.sync_all()?;
        Ok(HEADER_BYTES as u64 + self.len)
    }
}

impl Write for Pending {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.write_all(bytes).map(|()| bytes.len())
    }

    fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        if self.buf.len() + bytes.len() > CHUNK {
            self.drain()?;
        }
        if bytes.len() >= CHUNK {
            self.put(bytes)
        } else {
            if self.buf.capacity() == 0 {
                self.buf.reserve_exact(CHUNK);
            }
            self.buf.extend_from_slice(bytes);
            Ok(())
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        self.drain()
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if !self.tmp.as_os_str().is_empty() {
            drop(self.file.take());
            let _ = fs::remove_file(&self.tmp);
        }
    }
}

/// The header of a checkpoint at `offset` whose state is `len` bytes with crc32 `crc`.
pub(super) fn header(offset: u64, len: u64, crc: u32) -> [u8; HEADER_BYTES] {
    let mut h = [0; HEADER_BYTES];
    h[0..4].copy_from_slice(&MAGIC);
    h[4..8].copy_from_slice(&VERSION.to_le_bytes());
    h[8..16].copy_from_slice(&offset.to_le_bytes());
    h[16..24].copy_from_slice(&len.to_le_bytes());
    h[24..28].copy_from_slice(&crc.to_le_bytes());
    h
}

/// One piece of what a [`PipeWriter`] sends.
enum Piece {
    Bytes(Vec<u8>),
    /// Everything was sent: without it (the encoding thread failed or panicked), what came
    /// is not a whole state.
    End,
}

impl std::fmt::Debug for Piece {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Piece::Bytes(b) => write!(f, "{} bytes", b.len()),
            Piece::End => f.write_str("end"),
        }
    }
}

/// A bounded pipe of a state's bytes in chunks of 1 MiB, at most a few in flight, their
/// buffers handed back for reuse: the writing end waits only when the reading end (the disk)
/// falls behind.
pub fn pipe() -> (PipeWriter, PipeReader) {
    let (tx, rx) = bounded(DEPTH);
    let (free_tx, free_rx) = bounded(DEPTH + 2);
    let writer = PipeWriter {
        buf: Vec::new(),
        tx,
        free: free_rx,
    };
    (writer, PipeReader { rx, free: free_tx })
}

/// The encoding end of a [`pipe`]: a buffered writer; [`PipeWriter::finish`] says it is all.
#[derive(Debug)]
pub struct PipeWriter {
    buf: Vec<u8>,
    tx: Sender<Piece>,
    free: Receiver<Vec<u8>>,
}

fn closed() -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, "the checkpoint writer stopped")
}

impl PipeWriter {
    fn send(&mut self) -> io::Result<()> {
        let next = self
            .free
            .try_recv()
            .unwrap_or_else(|_| Vec::with_capacity(CHUNK));
        let full = std::mem::replace(&mut self.buf, next);
        self.tx.send(Piece::Bytes(full)).map_err(|_| closed())
    }

    /// Sends what is buffered and the end of the state.
    pub fn finish(mut self) -> io::Result<()> {
        if !self.buf.is_empty() {
            self.send()?;
        }
        self.tx.send(Piece::End).map_err(|_| closed())
    }
}

impl Write for PipeWriter {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.write_all(bytes).map(|()| bytes.len())
    }

    #[inline]
    fn write_all(&mut self, mut bytes: &[u8]) -> io::Result<()> {
        if self.buf.capacity() == 0 {
            self.buf.reserve_exact(CHUNK);
        }
        loop {
            let room = CHUNK - self.buf.len();
            if bytes.len() < room {
                self.buf.extend_from_slice(bytes);
                return Ok(());
            }
            self.buf.extend_from_slice(&bytes[..room]);
            bytes = &bytes[room..];
            self.send()?;
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The writing end of a [`pipe`].
#[derive(Debug)]
pub struct PipeReader {
    rx: Receiver<Piece>,
    free: Sender<Vec<u8>>,
}

impl PipeReader {
    /// Writes everything the pipe carries into `to`: `true` at its end, `false` if it closed
    /// before [`PipeWriter::finish`] (what came is not a whole state), an error if writing
    /// failed.
    pub fn copy_to(self, to: &mut impl Write) -> io::Result<bool> {
        loop {
            match self.rx.recv() {
                Ok(Piece::Bytes(mut b)) => {
                    to.write_all(&b)?;
                    b.clear();
                    let _ = self.free.try_send(b);
                }
                Ok(Piece::End) => return Ok(true),
                Err(_) => return Ok(false),
            }
        }
    }
}

/// Starts a checkpoint of `store` at `offset` and runs `encode` (which writes the state's
/// bytes while the caller holds the partition's lock) on this thread while another writes
/// what it encodes into the file. Returns the checkpoint written, to be committed (by
/// [`CheckpointStore::commit`]) once the lock is released.
pub fn stream(
    store: &CheckpointStore,
    offset: u64,
    encode: impl FnOnce(&mut PipeWriter) -> io::Result<()>,
) -> Result<Pending> {
    let mut pending = store.begin(offset)?;
    let tmp = pending.tmp.clone();
    let (mut w, r) = pipe();
    let (encoded, written) = std::thread::scope(|s| {
        let writer = s.spawn(|| r.copy_to(&mut pending));
        // `w` is gone when this returns, finished or not, so the writer stops either way.
        let encoded = encode(&mut w).and_then(|()| w.finish());
        (encoded, writer.join())
    });
    let written =
        written.unwrap_or_else(|_| Err(io::Error::other("the checkpoint writer panicked")));
    // The writer's own failure first: the encoding fails after it only because it stopped.
    let source = match (written, encoded) {
        (Ok(true), Ok(())) => return Ok(pending),
        (Err(e), _) | (Ok(_), Err(e)) => e,
        (Ok(false), Ok(())) => io::Error::other("the state's bytes ended early"),
    };
    Err(Error::Io { path: tmp, source })
}

#[cfg(test)]
mod tests {
    use super::super::tests::files as names;
    use super::*;

    /// Bytes that no two chunks repeat, longer than the pipe holds.
    fn state(len: usize) -> Vec<u8> {
        (0..len as u64)
            .map(|i| (i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 56) as u8)
            .collect()
    }

    #[test]
    fn a_streamed_checkpoint_is_the_file_a_save_writes() {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let bytes = state((DEPTH + 3) * CHUNK + 12_345);
        let mut saved = CheckpointStore::open(a.path()).unwrap();
        saved.save(77, &bytes).unwrap();
        let mut streamed = CheckpointStore::open(b.path()).unwrap();
        // In uneven pieces, as an encoder writes.
        let pending = stream(&streamed, 77, |out| {
            bytes.chunks(1000).try_for_each(|c| out.write_all(c))
        })
        .unwrap();
        assert_eq!(pending.state_bytes(), bytes.len() as u64);
        assert_eq!(
            names(b.path()),
            ["checkpoint-00000000000000000077.ckpt.tmp"],
            "not a checkpoint before the commit"
        );
        assert_eq!(streamed.commit(pending).unwrap(), 28 + bytes.len() as u64);
        let name = "checkpoint-00000000000000000077.ckpt";
        assert_eq!(names(b.path()), [name]);
        let file = fs::read(b.path().join(name)).unwrap();
        assert!(file == fs::read(a.path().join(name)).unwrap());
        let (loaded, back) = streamed.latest().unwrap().unwrap();
        assert!(loaded.offset == 77 && back == bytes);
    }

    #[test]
    fn a_checkpoint_not_committed_leaves_nothing_and_the_previous_one_stands() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = CheckpointStore::open(dir.path()).unwrap();
        store.save(5, b"five").unwrap();
        let only = ["checkpoint-00000000000000000005.ckpt"];
        // The encoding fails (or panics) half way: what came is not committed.
        let half = state(3 * CHUNK);
        let err = stream(&store, 9, |out| {
            out.write_all(&half)?;
            Err(io::Error::other("encoder failed"))
        })
        .unwrap_err();
        assert!(err.to_string().contains("encoder failed"), "{err}");
        assert_eq!(names(dir.path()), only);
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            stream(&store, 9, |out| {
                out.write_all(&half)?;
                panic!("encoder panicked")
            })
        }));
        assert!(panicked.is_err());
        assert_eq!(names(dir.path()), only);
        // A pipe dropped unfinished is not a whole state.
        let (mut out, pipe) = pipe();
        out.write_all(&half).unwrap();
        let mut pending = store.begin(9).unwrap();
        let copier = std::thread::spawn(move || {
            let whole = pipe.copy_to(&mut pending).unwrap();
            (whole, pending.state_bytes())
        });
        drop(out);
        assert_eq!(copier.join().unwrap(), (false, half.len() as u64));
        assert_eq!(names(dir.path()), only);
        // A crash while writing leaves the .tmp file, which is never read and goes on open.
        let mut pending = store.begin(9).unwrap();
        pending.write_all(&half).unwrap();
        pending.flush().unwrap();
        std::mem::forget(pending);
        assert_eq!(names(dir.path()).len(), 2);
        let mut store = CheckpointStore::open(dir.path()).unwrap();
        assert_eq!(names(dir.path()), only);
        let (loaded, back) = store.latest().unwrap().unwrap();
        assert!(loaded.offset == 5 && back == b"five");
    }

    #[test]
    fn a_writer_that_fails_stops_the_encoding_instead_of_blocking_it() {
        struct Full(usize);
        impl Write for Full {
            fn write(&mut self, b: &[u8]) -> io::Result<usize> {
                if self.0 < b.len() {
                    return Err(io::Error::new(io::ErrorKind::StorageFull, "disk full"));
                }
                self.0 -= b.len();
                Ok(b.len())
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let (mut out, pipe) = pipe();
        let copier = std::thread::spawn(move || pipe.copy_to(&mut Full(2 * CHUNK)));
        // More than the pipe holds: without the reader's failure closing it, this would block.
        let big = state((DEPTH + 4) * CHUNK);
        let err = out.write_all(&big).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::BrokenPipe);
        let failed = copier.join().unwrap().unwrap_err();
        assert_eq!(failed.kind(), io::ErrorKind::StorageFull);
    }
}
