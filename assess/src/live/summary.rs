//! Mergeable partial summaries of one partition (SPEC §5): what every query needs from a
//! partition, and nothing per scope.
//!
//! A [`Summary`] is exported by [`Live::summary`], sent between processes (JSON or postcard: it
//! is plain data with no skipped fields, so a non-self-describing format reads it back) and
//! merged with other partitions' summaries and local [`Live`]s in a [`super::View`]. Its
//! per-property part is the same [`Tally`] a [`Live`] keeps, so exporting is a copy, and
//! counterexamples travel rendered, so the receiver needs no name table.

use super::emitters::Runs;
use super::state::{CxKey, Live};
use super::tally::{Kept, Tally};
use crate::event::{Kind, Outcome};
use crate::finding::{Counterexample, CounterexampleKind, EventView, Withdrawal};
use crate::time::EventTime;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};

/// The queryable state of one partition, to merge with others (SPEC §5 "mergeable partial
/// summaries"): per property its tally and rendered counterexamples; emitters by name;
/// the partition's watermark inputs, totals and malformed samples.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Summary {
    /// The contract it was assessed under ([`super::fingerprint`]).
    pub(super) fingerprint: u64,
    /// Greatest valid event time of the partition (over all properties).
    pub(super) max_ts: Option<i64>,
    /// The partition's input ended (its watermark is the end of time).
    pub(super) closed: bool,
    /// Per property, in contract order.
    pub(super) props: Vec<PropSummary>,
    /// Emitters by name: one emitter's seqs are spread over partitions, so its runs merge by
    /// name and gaps are derived after the merge.
    pub(super) emitters: BTreeMap<String, EmitterSummary>,
    pub(super) valid: u64,
    pub(super) malformed: u64,
    pub(super) unattributed: u64,
    pub(super) duplicates: u64,
    /// Unattributed events of emitters beyond [`super::LiveOptions::max_emitters`].
    pub(super) untracked_unattributed: u64,
    /// The most recent malformed events of the partition.
    pub(super) malformed_samples: VecDeque<Kept>,
}

/// One property of a [`Summary`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct PropSummary {
    pub(super) tally: Tally,
    /// Rendered, by (stale event time, id).
    #[serde(with = "wire")]
    pub(super) cxs: BTreeMap<CxKey, Counterexample>,
}

/// One emitter as a partition saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct EmitterSummary {
    /// Runs of contiguous seqs by first seq (serialized as a map).
    pub(super) runs: Runs,
    /// Indices of the properties it fed.
    pub(super) props: Vec<u16>,
    /// Distinct seqs seen.
    pub(super) events: u64,
}

impl Summary {
    /// The fingerprint of the contract it was assessed under.
    pub fn fingerprint(&self) -> u64 {
        self.fingerprint
    }

    /// The partition's greatest valid event time, if it saw any valid event.
    pub fn max_ts(&self) -> Option<EventTime> {
        self.max_ts.map(EventTime)
    }

    /// Whether the partition's input ended (every window final).
    pub fn closed(&self) -> bool {
        self.closed
    }
}

impl Live {
    /// Exports this partition's queryable state as a [`Summary`]: a copy of every property's
    /// tally, its counterexamples rendered, and its emitters by name.
    pub fn summary(&self) -> Summary {
        let s = &self.state;
        Summary {
            fingerprint: s.fingerprint,
            max_ts: s.max_ts,
            closed: s.closed,
            props: s
                .props
                .iter()
                .enumerate()
                .map(|(p, prop)| PropSummary {
                    tally: prop.tally.clone(),
                    cxs: prop
                        .cxs
                        .iter()
                        .map(|(k, c)| (k.clone(), self.render(p, c)))
                        .collect(),
                })
                .collect(),
            emitters: s
                .emitters
                .iter()
                .map(|(&id, e)| {
                    (
                        s.names[id as usize].clone(),
                        EmitterSummary {
                            runs: e.runs.clone(),
                            props: e.props.as_slice().to_vec(),
                            events: e.events,
                        },
                    )
                })
                .collect(),
            valid: s.valid,
            malformed: s.malformed,
            unattributed: s.unattributed,
            duplicates: s.duplicates,
            untracked_unattributed: s.untracked_unattributed,
            malformed_samples: s.malformed_samples.clone(),
        }
    }
}

/// Counterexamples on the wire: a sequence (a JSON map cannot have tuple keys) of mirrors of
/// [`Counterexample`] with every field present (`final` and `withdrawn` included, so a view
/// merging this summary knows which are provisional and which another instance withdrew) ([`EventView`] skips absent fields in JSON
/// reports, which postcard could not read back) and the stale event time kept.
mod wire {
    use super::*;
    use serde::de::Error as _;
    use serde::{Deserializer, Serializer};

    #[derive(Serialize)]
    struct EventOut<'a> {
        kind: &'a str,
        ts: &'a str,
        epoch: Option<u64>,
        incarnation: u64,
        order: Option<u64>,
        route: Option<&'a str>,
        holder: Option<&'a str>,
        outcome: &'a str,
        emitter: Option<&'a str>,
        seq: Option<u64>,
        source: &'a str,
    }

    #[derive(Deserialize)]
    struct EventIn {
        kind: String,
        ts: String,
        epoch: Option<u64>,
        incarnation: u64,
        order: Option<u64>,
        route: Option<String>,
        holder: Option<String>,
        outcome: String,
        emitter: Option<String>,
        seq: Option<u64>,
        source: String,
    }

    #[derive(Serialize)]
    struct CxOut<'a> {
        id: &'a str,
        kind: CounterexampleKind,
        property: &'a str,
        scope: &'a str,
        incarnation: u64,
        stale: EventOut<'a>,
        superseding: EventOut<'a>,
        context: Vec<EventOut<'a>>,
        explanation: &'a str,
        is_final: bool,
        withdrawn: Option<Withdrawal>,
        at: i64,
    }

    #[derive(Deserialize)]
    struct CxIn {
        id: String,
        kind: CounterexampleKind,
        property: String,
        scope: String,
        incarnation: u64,
        stale: EventIn,
        superseding: EventIn,
        context: Vec<EventIn>,
        explanation: String,
        is_final: bool,
        withdrawn: Option<Withdrawal>,
        at: i64,
    }

    fn event_out(e: &EventView) -> EventOut<'_> {
        EventOut {
            kind: e.kind,
            ts: &e.ts,
            epoch: e.epoch,
            incarnation: e.incarnation,
            order: e.order,
            route: e.route.as_deref(),
            holder: e.holder.as_deref(),
            outcome: e.outcome,
            emitter: e.emitter.as_deref(),
            seq: e.seq,
            source: &e.source,
        }
    }

    fn event_in<E: serde::de::Error>(e: EventIn) -> Result<EventView, E> {
        let kind = Kind::parse(&e.kind)
            .ok_or_else(|| E::custom(format!("unknown event kind `{}`", e.kind)))?;
        let outcome = Outcome::parse(&e.outcome)
            .ok_or_else(|| E::custom(format!("unknown outcome `{}`", e.outcome)))?;
        Ok(EventView {
            kind: kind.as_str(),
            ts: e.ts,
            epoch: e.epoch,
            incarnation: e.incarnation,
            order: e.order,
            route: e.route,
            holder: e.holder,
            outcome: outcome.as_str(),
            emitter: e.emitter,
            seq: e.seq,
            source: e.source,
        })
    }

    pub(super) fn serialize<S: Serializer>(
        cxs: &BTreeMap<CxKey, Counterexample>,
        ser: S,
    ) -> Result<S::Ok, S::Error> {
        ser.collect_seq(cxs.values().map(|c| CxOut {
            id: &c.id,
            kind: c.kind,
            property: &c.property,
            scope: &c.scope,
            incarnation: c.incarnation,
            stale: event_out(&c.stale),
            superseding: event_out(&c.superseding),
            context: c.context.iter().map(event_out).collect(),
            explanation: &c.explanation,
            is_final: c.is_final,
            withdrawn: c.withdrawn,
            at: c.at,
        }))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        de: D,
    ) -> Result<BTreeMap<CxKey, Counterexample>, D::Error> {
        let mut out = BTreeMap::new();
        for c in Vec::<CxIn>::deserialize(de)? {
            let cx = Counterexample {
                id: c.id,
                kind: c.kind,
                property: c.property,
                scope: c.scope,
                incarnation: c.incarnation,
                stale: event_in(c.stale)?,
                superseding: event_in(c.superseding)?,
                context: c
                    .context
                    .into_iter()
                    .map(event_in)
                    .collect::<Result<_, _>>()?,
                explanation: c.explanation,
                is_final: c.is_final,
                withdrawn: c.withdrawn,
                at: c.at,
            };
            if out.insert((cx.at, cx.id.clone()), cx).is_some() {
                return Err(D::Error::custom("a counterexample id appears twice"));
            }
        }
        Ok(out)
    }
}
