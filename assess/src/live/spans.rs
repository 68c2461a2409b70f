//! The own provenance of events that carry one ([`Live::push_span`]: an OTLP span's source,
//! trace and span ids), 28 bytes each in a table the records point into ([`Rec::span`]): no
//! string, no hash, no allocation per event. Rendered `<source>:<trace_id>/<span_id>` in
//! lower-case hex. Swept like the name table: when it holds twice the ids alive after the last
//! sweep (at least 65,536), every slot no kept event or counterexample refers to is freed and
//! reused.
//!
//! [`Live::push_span`]: super::Live::push_span
//! [`Rec::span`]: crate::rules::Rec::span

use crate::rules::OWN_PROVENANCE;
use serde::{Deserialize, Serialize};

/// A span's identity: its 16-byte trace id, then its 8-byte span id.
pub type SpanId = [u8; 24];

const SWEEP_MIN: usize = 1 << 16;

/// The table of spans: each slot a span id and the source it was read from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Spans {
    ids: Vec<(SpanId, u32)>,
    /// Freed slots, reused first.
    free: Vec<u32>,
    /// Sweep when more than this many are alive.
    sweep_at: u64,
}

impl Default for Spans {
    fn default() -> Spans {
        Spans {
            ids: Vec::new(),
            free: Vec::new(),
            sweep_at: SWEEP_MIN as u64,
        }
    }
}

impl Spans {
    /// Adds `id`, read from `source`; its slot.
    pub(super) fn add(&mut self, id: &SpanId, source: u32) -> u32 {
        match self.free.pop() {
            Some(i) => {
                self.ids[i as usize] = (*id, source);
                i
            }
            None => {
                let i = self.ids.len() as u32;
                assert!(i < OWN_PROVENANCE, "span table full");
                self.ids.push((*id, source));
                i
            }
        }
    }

    /// The span id in slot `i`.
    pub(super) fn get(&self, i: u32) -> Option<&SpanId> {
        self.ids.get(i as usize).map(|(id, _)| id)
    }

    /// The span id in slot `i` and the source it was read from.
    pub(super) fn get_with_source(&self, i: u32) -> Option<(&SpanId, u32)> {
        self.ids.get(i as usize).map(|(id, s)| (id, *s))
    }

    /// Slots in use.
    pub(super) fn len(&self) -> usize {
        self.ids.len() - self.free.len()
    }

    /// Whether a sweep is due.
    pub(super) fn needs_sweep(&self) -> bool {
        self.len() as u64 > self.sweep_at
    }

    /// The number of slots, for the marks of a sweep.
    pub(super) fn slots(&self) -> usize {
        self.ids.len()
    }

    /// Frees every slot not marked `alive`.
    pub(super) fn sweep(&mut self, alive: &[bool]) {
        self.free = (0..self.ids.len() as u32)
            .filter(|&i| !alive.get(i as usize).copied().unwrap_or(false))
            .collect();
        // Free slots at the end go; the others are reused lowest first.
        while let Some(&last) = self.free.last()
            && last as usize + 1 == self.ids.len()
        {
            self.free.pop();
            self.ids.pop();
        }
        self.free.reverse();
        self.ids.shrink_to(self.ids.len() * 2);
        self.sweep_at = (2 * self.len()).max(SWEEP_MIN) as u64;
    }
}

/// `<source>:<trace_id>/<span_id>`, lower-case hex.
pub(super) fn render(source: &str, id: &SpanId) -> String {
    let mut s = String::with_capacity(source.len() + 50);
    std::fmt::Write::write_fmt(&mut s, format_args!("{}", SpanProvenance(source, id)))
        .expect("a String");
    s
}

/// A span's provenance, displayed `<source>:<trace_id>/<span_id>` in lower-case hex (as
/// findings name it) without allocating.
#[derive(Debug, Clone, Copy)]
pub struct SpanProvenance<'a>(pub &'a str, pub &'a SpanId);

impl SpanProvenance<'_> {
    /// The text after the source, `:<trace_id>/<span_id>`, written into `out`: each byte's
    /// two digits copied from a table (a digit at a time, with its bounds checks, was 2.3% of
    /// the applier's samples under OTLP ingest with the archive on, which writes every
    /// event's provenance).
    pub fn position<'o>(&self, out: &'o mut [u8; 50]) -> &'o str {
        /// Each byte's two lower-case hex digits.
        const PAIRS: [[u8; 2]; 256] = {
            const DIGITS: &[u8; 16] = b"0123456789abcdef";
            let mut t = [[0u8; 2]; 256];
            let mut i = 0;
            while i < 256 {
                t[i] = [DIGITS[i >> 4], DIGITS[i & 15]];
                i += 1;
            }
            t
        };
        let (trace, span) = self.1.split_at(16);
        out[0] = b':';
        for (o, &b) in out[1..33].chunks_exact_mut(2).zip(trace) {
            o.copy_from_slice(&PAIRS[b as usize]);
        }
        out[33] = b'/';
        for (o, &b) in out[34..50].chunks_exact_mut(2).zip(span) {
            o.copy_from_slice(&PAIRS[b as usize]);
        }
        std::str::from_utf8(&out[..]).expect("ascii")
    }
}

impl std::fmt::Display for SpanProvenance<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)?;
        f.write_str(self.position(&mut [0u8; 50]))
    }
}

/// The position of a span's record: its span id's bytes.
pub(super) fn span_key(id: &SpanId) -> u64 {
    u64::from_le_bytes(id[16..].try_into().expect("8 bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_render_and_slots_are_reused_after_a_sweep() {
        let mut id = [0u8; 24];
        id[0] = 0x0a;
        id[23] = 0xff;
        assert_eq!(
            render("otlp", &id),
            "otlp:0a000000000000000000000000000000/00000000000000ff"
        );
        let mut t = Spans::default();
        let (a, b, c) = (t.add(&[1; 24], 0), t.add(&[2; 24], 0), t.add(&[3; 24], 0));
        assert_eq!((a, b, c), (0, 1, 2));
        t.sweep(&[true, false, false]);
        assert_eq!(t.len(), 1, "the trailing slots went");
        assert_eq!(t.get(0), Some(&[1; 24]));
        assert_eq!(t.add(&[4; 24], 0), 1);
    }
}
