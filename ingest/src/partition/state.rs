//! The assessor's state as a checkpoint holds it: a layout tag, then postcard, written as it is
//! encoded. The one place
//! that knows the format [`super::restore`] reads.

use fencewatch_assess::live::LiveState;

/// The layout of [`LiveState`] that [`encode_state`] writes: raised whenever the state's
/// serialized shape changes, so that a checkpoint of another build is recognised as such
/// rather than failing to decode somewhere in the middle. (States written before layouts were
/// tagged start with no tag at all.) Layout 3: `check` and `serve` keep one record type. Layout
/// 4: counterexamples keep the wall time they were found, withdrawn ones their due time (the
/// evidence archive). Layout 5: a scope's mark is kept in its state, not in a tracker. Layout 6:
/// the deliveries of spans no scope keeps, the conflicted duplicate keys and the order keys of
/// deliveries set aside on arrival are kept in the state. Layout 7: applied attestations'
/// (emitter, seq) deliveries kept behind the lowest horizon (`late_attests`). Layout 8: an
/// emitter's recent deliveries whose seq jumped beyond its window's span kept beside it, and
/// the times of every delivery of the seqs at the ends of its runs. Layout 9: a scope's folded
/// mark keeps the holder of its epoch (packed with the mark's flags), its folded events' greatest
/// `order`, and deliveries' content hashes are computed another way (`rules::content_hash`).
/// Layout 10: that greatest `order` is kept with the incarnation it belongs to (the folded
/// events' latest).
pub const STATE_LAYOUT: u16 = 10;
const STATE_TAG: [u8; 4] = *b"FWS\0";

/// Why a checkpoint's state does not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    /// Tagged with another layout.
    #[error("written by a fencewatch with state layout {0}; this one reads layout {STATE_LAYOUT}")]
    Layout(u16),
    /// Written before layouts were tagged.
    #[error(
        "written by an earlier fencewatch (state layout 1); this one reads layout {STATE_LAYOUT}"
    )]
    Untagged,
    /// The layout is this one's but the bytes do not decode.
    #[error("{0}")]
    Decode(String),
}

/// Serializes a state for a checkpoint.
pub fn encode_state(state: &LiveState) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    write_state(state, &mut out).expect("a vector takes every byte");
    out
}

/// Serializes a state for a checkpoint into `out` as it goes (a checkpoint file being
/// written: no copy of the bytes is held, [`CHUNK`] of them at most).
pub fn write_state(state: &LiveState, out: &mut impl std::io::Write) -> std::io::Result<()> {
    out.write_all(&STATE_TAG)?;
    out.write_all(&STATE_LAYOUT.to_le_bytes())?;
    serialize_chunked(state, out)
}

/// postcard's bytes of `value` written into `out` through [`Chunked`]; a failing writer's own
/// error is the answer.
fn serialize_chunked<T: serde::Serialize + ?Sized>(
    value: &T,
    out: &mut impl std::io::Write,
) -> std::io::Result<()> {
    let mut error = None;
    let chunked = Chunked {
        buf: Vec::with_capacity(CHUNK),
        out,
        error: &mut error,
    };
    postcard::serialize_with_flavor(value, chunked)
        .map_err(|e| error.unwrap_or_else(|| std::io::Error::other(e.to_string())))
}

/// Bytes [`Chunked`] gathers before handing them to its writer.
const CHUNK: usize = 64 << 10;

/// postcard's output for [`write_state`]: its bytes gathered in a buffer and handed to the
/// writer [`CHUNK`] at a time. postcard writes a byte at a time (every varint, every byte of a
/// span id); through its own `io::Write` flavor each byte was a `write_all` call: encoding the
/// state of 300k OTLP spans took 846M instructions that way, 604M this way. The bytes are the
/// same.
struct Chunked<'a, W> {
    buf: Vec<u8>,
    out: &'a mut W,
    /// The writer's error, kept for [`write_state`]'s answer (postcard's own says only that
    /// one occurred).
    error: &'a mut Option<std::io::Error>,
}

impl<W: std::io::Write> Chunked<'_, W> {
    /// Hands the buffer to the writer.
    #[cold]
    fn spill(&mut self) -> postcard::Result<()> {
        let r = self.out.write_all(&self.buf);
        self.buf.clear();
        self.kept(r)
    }

    /// A write's outcome, its error kept for [`write_state`]'s answer.
    fn kept(&mut self, r: std::io::Result<()>) -> postcard::Result<()> {
        r.map_err(|e| {
            *self.error = Some(e);
            postcard::Error::SerializeBufferFull
        })
    }
}

impl<W: std::io::Write> postcard::ser_flavors::Flavor for Chunked<'_, W> {
    type Output = ();

    #[inline]
    fn try_push(&mut self, byte: u8) -> postcard::Result<()> {
        if self.buf.len() == CHUNK {
            self.spill()?;
        }
        self.buf.push(byte);
        Ok(())
    }

    #[inline]
    fn try_extend(&mut self, bytes: &[u8]) -> postcard::Result<()> {
        if self.buf.len() + bytes.len() > CHUNK {
            self.spill()?;
            if bytes.len() > CHUNK {
                let r = self.out.write_all(bytes);
                return self.kept(r);
            }
        }
        self.buf.extend_from_slice(bytes);
        Ok(())
    }

    fn finalize(mut self) -> postcard::Result<()> {
        self.spill()
    }
}

/// Reads a state saved by [`encode_state`] from a stream of its `len` bytes, holding no more
/// of them at a time than the longest string in it (the scratch space is as long as the state
/// but only as much of it as that string is ever written).
pub fn read_state(bytes: &mut dyn std::io::Read, len: u64) -> Result<LiveState, StateError> {
    let mut head = [0; 6];
    if len < 6 || bytes.read_exact(&mut head).is_err() {
        return Err(StateError::Untagged);
    }
    match head
        .strip_prefix(&STATE_TAG)
        .map(|l| u16::from_le_bytes([l[0], l[1]]))
    {
        Some(STATE_LAYOUT) => {
            let mut scratch = vec![0; len as usize];
            // postcard reads a byte at a time (each varint): from a buffer of a concrete type
            // that is an inlined copy, through `dyn Read` a call each, ~350M on a restore of
            // ten million scopes.
            let buffered = std::io::BufReader::with_capacity(1 << 16, bytes);
            postcard::from_io((buffered, &mut scratch[..]))
                .map(|(state, _)| state)
                .map_err(|e| StateError::Decode(e.to_string()))
        }
        Some(other) => Err(StateError::Layout(other)),
        None => Err(StateError::Untagged),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::partition::Partition;
    use crate::partition::tests::{contract, ndjson};
    use fencewatch_assess::live::{Live, LiveOptions};
    use std::io::{ErrorKind, Write};

    /// A state of 3,000 scopes: more than two [`CHUNK`]s.
    fn partition() -> Partition {
        let mut part = Partition::new("t/0", Live::new(contract(), LiveOptions::default()), 0);
        let body: String = (0..3000)
            .map(|i| {
                format!(
                    "{{\"kind\":\"commit\",\"ts\":{},\"scope\":\"order-{i}\",\"epoch\":{},\"route\":\"r\",\"holder\":\"worker-{}\"}}\n",
                    1_000_000 + i,
                    1 + i % 7,
                    i % 13
                )
            })
            .collect();
        part.apply(0, 3000, &ndjson(&body), 1 << 20).unwrap();
        part
    }

    /// Takes `room` bytes, then fails as a full disk does.
    struct Full {
        room: usize,
        taken: Vec<u8>,
    }

    impl Write for Full {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            if self.taken.len() + bytes.len() > self.room {
                return Err(std::io::Error::new(
                    ErrorKind::StorageFull,
                    "the disk is full",
                ));
            }
            self.taken.extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn the_chunked_encoding_is_postcards_and_reads_back() {
        let part = partition();
        let state = part.live().state();
        let bytes = encode_state(state);
        let plain = postcard::to_stdvec(state).unwrap();
        assert!(
            plain.len() > 2 * CHUNK,
            "{} bytes: spans chunks",
            plain.len()
        );
        assert_eq!(bytes[..4], STATE_TAG);
        assert_eq!(bytes[4..6], STATE_LAYOUT.to_le_bytes());
        assert!(bytes[6..] == plain[..], "the same bytes as postcard's own");
        let back = read_state(&mut &bytes[..], bytes.len() as u64).unwrap();
        assert_eq!(&back, state);
    }

    /// A value of strings longer than a chunk (written past the buffer) between short ones.
    #[test]
    fn bytes_longer_than_a_chunk_go_straight_through() {
        let value: Vec<String> = ["a".repeat(10), "b".repeat(CHUNK + 5), "c".repeat(CHUNK - 3)]
            .into_iter()
            .collect();
        let want = postcard::to_stdvec(&value).unwrap();
        let mut out = Vec::new();
        serialize_chunked(&value, &mut out).unwrap();
        assert!(out == want);
        for room in [5, 20, CHUNK + 10, 2 * CHUNK] {
            let mut full = Full {
                room,
                taken: Vec::new(),
            };
            let e = serialize_chunked(&value, &mut full).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::StorageFull, "{room}: {e}");
        }
    }

    #[test]
    fn a_failing_writer_is_answered_with_its_own_error() {
        let part = partition();
        let len = encode_state(part.live().state()).len();
        // Failing on the tag, at the first chunk, in the middle, at the very last byte.
        for room in [3, 6, CHUNK / 2, 2 * CHUNK + 17, len - 1] {
            let mut full = Full {
                room,
                taken: Vec::new(),
            };
            let e = write_state(part.live().state(), &mut full).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::StorageFull, "room {room}: {e}");
            assert_eq!(e.to_string(), "the disk is full");
        }
        let mut room = Full {
            room: len,
            taken: Vec::new(),
        };
        write_state(part.live().state(), &mut room).unwrap();
        assert_eq!(room.taken.len(), len);
    }
}
