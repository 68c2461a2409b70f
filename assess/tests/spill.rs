//! `check --max-memory` (the crate's `Spilled`): a history assessed part by part, in any number
//! of scope files and groups of them, gives the report the whole history gives, byte for byte.
//! Random histories with equal and conflicting re-sends (some under another scope), gaps in
//! seqs, malformed events and attestations, read in batches of random sizes.

mod common;

use common::{E, arb_history_with_resends, event, seqs};
use fencewatch_assess::event::{Event, Kind};
use fencewatch_assess::history::{Batch, Spilled};
use fencewatch_assess::time::Duration;
use fencewatch_assess::{Contract, EventTime, History};
use proptest::prelude::*;

const SCOPES: [&str; 9] = ["s1", "s2", "s3", "s4", "s5", "s6", "s7", "s8", "s9"];

fn contract() -> Contract {
    let src = "[[property]]\nname=\"p\"\nsubject=\"S\"\nstrategy=\"lease_epoch\"\nwindow=\"100ns\"\nclock_skew=\"5ns\"\nallowed_lateness=\"10ns\"\nroute_freshness=\"60ns\"\n[[property.route]]\nname=\"r1\"\n[[property.route]]\nname=\"r2\"\nfenced=false\n[[property.premise]]\nname=\"durable_fence\"\nmax_age=\"300ns\"\n";
    Contract::parse("spill.toml", src).unwrap()
}

/// What is read, in order: an event (index into the history) or a malformed line.
#[derive(Debug, Clone)]
enum Line {
    Event(usize),
    Malformed(Option<i64>),
    Attest(i64),
}

fn arb_case() -> impl Strategy<Value = (Vec<E>, Vec<Line>, Vec<usize>, usize, bool)> {
    (
        arb_history_with_resends(),
        prop::collection::vec((0usize..9, 0usize..64), 0..40),
        prop::collection::vec((0usize..64, prop::option::of(0i64..1000)), 0..4),
        prop::collection::vec((0usize..64, 0i64..1000), 0..3),
        prop::collection::vec(1usize..12, 1..8),
        1usize..9,
        any::<bool>(),
        prop::collection::vec((0usize..64, prop::bool::weighted(0.5)), 0..4),
    )
        .prop_map(
            |((mut evs, order), relabel, malformed, attests, cuts, parts, small, copies)| {
                // More scopes than two, so that scope files differ.
                for (k, i) in relabel {
                    let i = i % evs.len();
                    if evs[i].scope.is_some() && evs[i].resend_of.is_none() {
                        evs[i].scope = Some(SCOPES[k]);
                        for e in evs.iter_mut().filter(|e| e.resend_of == Some(i)) {
                            e.scope = Some(SCOPES[k]);
                        }
                    }
                }
                // Equal re-sends, and re-sends under another scope (a conflict across files).
                let mut order = order;
                for (i, other_scope) in copies {
                    let i = i % evs.len();
                    if evs[i].emitter.is_none() || evs[i].resend_of.is_some() {
                        continue;
                    }
                    let mut copy = evs[i].clone();
                    copy.resend_of = Some(i);
                    if other_scope {
                        copy.scope = Some(if copy.scope == Some("s9") { "s8" } else { "s9" });
                    }
                    evs.push(copy);
                    order.push(evs.len() - 1);
                }
                let mut lines: Vec<Line> = order.into_iter().map(Line::Event).collect();
                for (at, ts) in malformed {
                    lines.insert(at % (lines.len() + 1), Line::Malformed(ts));
                }
                for (at, ts) in attests {
                    lines.insert(at % (lines.len() + 1), Line::Attest(ts));
                }
                (evs, lines, cuts, parts, small)
            },
        )
}

/// The lines as batches cut at `cuts` (cycled), pushed into `sink`.
fn batches(evs: &[E], lines: &[Line], cuts: &[usize], mut sink: impl FnMut(Batch)) {
    let c = contract();
    let seqs = seqs(evs);
    let mut batch = Batch::new(fencewatch_assess::SourceId(0));
    let (mut n, mut k) = (0, 0);
    // A batch's positions are relative to the line before its first, shifted as it is sunk.
    let mut start = 0u64;
    for (pos, line) in lines.iter().enumerate() {
        let pos = pos as u64 + 1 - start;
        match line {
            Line::Event(i) => batch.push(&c, &event(&evs[*i], seqs[*i]), pos),
            Line::Malformed(ts) => {
                batch.push_malformed(pos, ts.map(EventTime), "not an event".into())
            }
            Line::Attest(ts) => {
                let mut a = Event::new(Kind::Attestation, EventTime(*ts));
                a.premise = Some("durable_fence");
                a.valid_for = Some(Duration(200));
                a.attester = Some("ci");
                batch.push(&c, &a, pos);
            }
        }
        n += 1;
        if n == cuts[k % cuts.len()] {
            batch.shift_positions(start);
            sink(std::mem::replace(
                &mut batch,
                Batch::new(fencewatch_assess::SourceId(0)),
            ));
            start += n as u64;
            n = 0;
            k += 1;
        }
    }
    batch.shift_positions(start);
    sink(batch);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1500))]

    #[test]
    fn a_history_assessed_by_parts_reports_what_the_whole_does(
        (evs, lines, cuts, parts, small) in arb_case()
    ) {
        let mut whole = History::new(contract());
        whole.add_source("events.ndjson");
        // Batches of other sizes than the spilled history's: the cut does not matter either.
        batches(&evs, &lines, &[1, 3], |b| whole.append(b));
        let want = serde_json::to_string_pretty(&whole.finish()).unwrap();
        // A budget of one byte assesses each scope file alone; a large one, all at once.
        let budget = if small { 1 } else { 1 << 30 };
        let mut spilled = Spilled::new(contract(), Vec::<Vec<u8>>::new(), parts, budget);
        spilled.add_source("events.ndjson");
        spilled.set_threads(2);
        batches(&evs, &lines, &cuts, |b| spilled.append(b).unwrap());
        let mut seen = Vec::new();
        let got = spilled.finish(&mut |done, total| seen.push((done, total))).unwrap();
        let got = serde_json::to_string_pretty(&got).unwrap();
        prop_assert_eq!(got, want);
        prop_assert!(seen.windows(2).all(|w| w[0].0 <= w[1].0));
    }
}
