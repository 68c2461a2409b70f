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
/// written: no copy of the bytes is held).
pub fn write_state(state: &LiveState, out: &mut impl std::io::Write) -> std::io::Result<()> {
    out.write_all(&STATE_TAG)?;
    out.write_all(&STATE_LAYOUT.to_le_bytes())?;
    let mut kept = KeepError { out, error: None };
    match postcard::to_io(state, &mut kept) {
        Ok(_) => Ok(()),
        Err(e) => Err(kept
            .error
            .take()
            .unwrap_or_else(|| std::io::Error::other(e.to_string()))),
    }
}

/// A writer that keeps the error it failed with (postcard reports only that one occurred).
struct KeepError<'a, W> {
    out: &'a mut W,
    error: Option<std::io::Error>,
}

impl<W: std::io::Write> std::io::Write for KeepError<'_, W> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.write_all(bytes).map(|()| bytes.len())
    }

    #[inline]
    fn write_all(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.out.write_all(bytes).inspect_err(|e| {
            self.error = Some(std::io::Error::new(e.kind(), e.to_string()));
        })
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
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
