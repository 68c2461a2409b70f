//! The partitions a [`View`](super::View) reads: a local [`Live`] (its state borrowed) or a
//! [`Summary`], and what each yields of a property, its emitters and its counterexamples.

use super::emitters::Runs;
use super::state::{Cx, CxKey, Live, partition_watermark};
use super::summary::Summary;
use super::tally::{Kept, Tally};
use crate::finding::Counterexample;
use crate::time::EventTime;
use std::borrow::Cow;
use std::ops::Bound;

#[derive(Debug, Clone, Copy)]
pub(super) struct Part<'a> {
    pub(super) src: Src<'a>,
    pub(super) active: bool,
}

#[derive(Debug, Clone, Copy)]
pub(super) enum Src<'a> {
    Live(&'a Live),
    Summary(&'a Summary),
}

/// One emitter, merged over the partitions.
#[derive(Debug, Clone)]
pub(super) struct EmitterRef<'a> {
    pub(super) name: &'a str,
    /// Runs of contiguous seqs by first seq.
    pub(super) runs: Cow<'a, Runs>,
    /// Indices of the properties it fed.
    pub(super) props: Cow<'a, [u16]>,
    pub(super) events: u64,
}

/// A counterexample of one partition: kept by a [`Live`] (rendered on demand) or rendered in a
/// [`Summary`].
#[derive(Debug, Clone, Copy)]
pub(super) enum CxRef<'a> {
    Kept(&'a Live, usize, &'a Cx),
    Rendered(&'a Counterexample),
}

impl<'a> CxRef<'a> {
    pub(super) fn id(&self) -> &'a str {
        match self {
            CxRef::Kept(_, _, c) => &c.id,
            CxRef::Rendered(c) => &c.id,
        }
    }

    pub(super) fn scope(&self) -> &'a str {
        match self {
            CxRef::Kept(_, _, c) => &c.scope,
            CxRef::Rendered(c) => &c.scope,
        }
    }

    pub(super) fn render(&self) -> Counterexample {
        match self {
            CxRef::Kept(l, p, c) => l.render(*p, c),
            CxRef::Rendered(c) => (*c).clone(),
        }
    }

    /// Whether it was withdrawn (it refutes nothing).
    pub(super) fn withdrawn(&self) -> bool {
        match self {
            CxRef::Kept(_, _, c) => c.withdrawn.is_some(),
            CxRef::Rendered(c) => c.withdrawn.is_some(),
        }
    }

    fn is_final(&self) -> bool {
        match self {
            CxRef::Kept(_, _, c) => c.is_final,
            CxRef::Rendered(c) => c.is_final,
        }
    }

    /// How settled it is, to choose among partitions holding one id: final (never withdrawn)
    /// over withdrawn over provisional.
    pub(super) fn settled(&self) -> u8 {
        if self.is_final() {
            2
        } else {
            u8::from(self.withdrawn())
        }
    }
}

impl<'a> Src<'a> {
    pub(super) fn fingerprint(self) -> u64 {
        match self {
            Src::Live(l) => l.state.fingerprint,
            Src::Summary(s) => s.fingerprint,
        }
    }

    pub(super) fn tally(self, p: usize) -> &'a Tally {
        match self {
            Src::Live(l) => &l.state.props[p].tally,
            Src::Summary(s) => &s.props[p].tally,
        }
    }

    pub(super) fn watermark(self, lateness: i64) -> EventTime {
        match self {
            Src::Live(l) => partition_watermark(l.state.max_ts, l.state.closed, lateness),
            Src::Summary(s) => partition_watermark(s.max_ts, s.closed, lateness),
        }
    }

    pub(super) fn totals(self) -> [u64; 4] {
        match self {
            Src::Live(l) => {
                let s = &l.state;
                [s.valid, s.malformed, s.unattributed, s.duplicates]
            }
            Src::Summary(s) => [s.valid, s.malformed, s.unattributed, s.duplicates],
        }
    }

    pub(super) fn malformed_samples(self) -> &'a std::collections::VecDeque<Kept> {
        match self {
            Src::Live(l) => &l.state.malformed_samples,
            Src::Summary(s) => &s.malformed_samples,
        }
    }

    pub(super) fn emitters(self, out: &mut Vec<EmitterRef<'a>>) {
        match self {
            Src::Live(l) => out.extend(l.state.emitters.iter().map(|(&id, e)| EmitterRef {
                name: &l.state.names[id as usize],
                runs: Cow::Borrowed(&e.runs),
                props: Cow::Borrowed(e.props.as_slice()),
                events: e.events,
            })),
            Src::Summary(s) => out.extend(s.emitters.iter().map(|(name, e)| EmitterRef {
                name,
                runs: Cow::Borrowed(&e.runs),
                props: Cow::Borrowed(&e.props),
                events: e.events,
            })),
        }
    }

    pub(super) fn cx_count(self, p: usize) -> usize {
        match self {
            Src::Live(l) => l.state.props[p].cxs.len(),
            Src::Summary(s) => s.props[p].cxs.len(),
        }
    }

    pub(super) fn withdrawn_count(self, p: usize) -> usize {
        match self {
            Src::Live(l) => l.state.props[p].withdrawn,
            Src::Summary(s) => s.props[p]
                .cxs
                .values()
                .filter(|c| c.withdrawn.is_some())
                .count(),
        }
    }

    pub(super) fn provisional_count(self, p: usize) -> usize {
        match self {
            Src::Live(l) => l.state.props[p].provisional.len(),
            Src::Summary(s) => s.props[p]
                .cxs
                .values()
                .filter(|c| !c.is_final && c.withdrawn.is_none())
                .count(),
        }
    }

    /// Counterexamples of property `p` from `start` on, by key.
    pub(super) fn cxs(
        self,
        p: usize,
        start: Bound<CxKey>,
    ) -> Box<dyn Iterator<Item = (&'a CxKey, CxRef<'a>)> + 'a> {
        let range = (start, Bound::Unbounded);
        match self {
            Src::Live(l) => Box::new(
                l.state.props[p]
                    .cxs
                    .range(range)
                    .map(move |(k, c)| (k, CxRef::Kept(l, p, c))),
            ),
            Src::Summary(s) => Box::new(
                s.props[p]
                    .cxs
                    .range(range)
                    .map(|(k, c)| (k, CxRef::Rendered(c))),
            ),
        }
    }
}
