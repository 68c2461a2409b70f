//! `check` within a memory budget (`--max-memory`): the history is assessed part by part.
//!
//! Reading ([`Spilled::append`]) writes each record with its names to one of `parts` files by
//! its scope's hash (records without a scope, and attestations, to one more file), and the
//! (emitter, seq) key of every record that has one to a file of its emitter's. Only counts,
//! the malformed events and each emitter's seq track stay in memory. [`Spilled::finish`] then
//! 1. settles the (emitter, seq) keys one key file at a time: a key whose deliveries differ is
//!    a conflict (all of them set aside, wherever they are), and telemetry gaps are found per
//!    emitter, streaming the keys of emitters whose seqs arrived increasing, sorting those of
//!    the others;
//! 2. assesses the scope files a few at a time, each group as a [`History`] of its own whose
//!    (emitter, seq) keys were settled in step 1 (equal deliveries share their scope, so a
//!    group settles those itself), merging what each found into one accumulator per property
//!    (route observations folded into runs: memory per silence, not per event);
//! 3. assesses the last file in the history that concludes the report.
//!
//! Every finding is placed where the whole history's `check` places it, and accumulators merge
//! without regard to order, so the report is the same, byte for byte.

use super::acc::Acc;
use super::attest::AttestRec;
use super::input::{Batch, SourceId};
use super::settle::{Delivery, hit_conflict, hit_gap, seq_gaps};
use super::state::{AsideSet, History, Judged};
use crate::contract::Contract;
use crate::event::Kind;
use crate::intern::Interner;
use crate::report::{EmitterReport, Report};
use crate::rules::{NONE, REJECTED, Rec};
use serde::{Deserialize, Serialize};
use std::io;
use std::sync::Arc;

/// Memory a group of scope files takes while assessed, per byte of the files: the files read
/// whole, then a history about as large (a whole history of 1.05M simulated events held 151
/// MiB, its spill files 141 MiB), then the sweeps' buffers; 4 leaves room.
const MEMORY_PER_SPILLED_BYTE: u64 = 4;

/// Most scope files: each is open while reading (with a 64 KiB buffer in `fencewatch check`).
const MAX_PARTS: usize = 256;

/// Scope files for a history expected to take `memory` bytes held whole (`None`: unknown, the
/// most) within `budget`: four per budget's worth, so that groups of them fit it.
pub fn parts_for(memory: Option<u64>, budget: u64) -> usize {
    memory.map_or(MAX_PARTS, |m| {
        usize::try_from(m.div_ceil(budget.max(1)).saturating_mul(4))
            .unwrap_or(MAX_PARTS)
            .clamp(2, MAX_PARTS)
    })
}

/// Where a spilled history keeps its files.
pub trait SpillStore {
    /// Appends `bytes` to file `file`.
    fn append(&mut self, file: usize, bytes: &[u8]) -> io::Result<()>;
    /// The whole of file `file` (empty if nothing was appended); it is not needed again.
    fn take(&mut self, file: usize) -> io::Result<Vec<u8>>;
}

/// Files in memory (for tests).
impl SpillStore for Vec<Vec<u8>> {
    fn append(&mut self, file: usize, bytes: &[u8]) -> io::Result<()> {
        if self.len() <= file {
            self.resize_with(file + 1, Vec::new);
        }
        self[file].extend_from_slice(bytes);
        Ok(())
    }

    fn take(&mut self, file: usize) -> io::Result<Vec<u8>> {
        Ok(self.get_mut(file).map(std::mem::take).unwrap_or_default())
    }
}

/// A record as spilled: the record and the names its ids stood for.
#[derive(Serialize, Deserialize)]
struct Spilt<'a> {
    rec: Rec,
    #[serde(borrow)]
    scope: Option<&'a str>,
    #[serde(borrow)]
    holder: Option<&'a str>,
    #[serde(borrow)]
    route: Option<&'a str>,
    #[serde(borrow)]
    emitter: Option<&'a str>,
    attest: Option<AttestRec>,
}

/// One (emitter, seq) delivery as spilled: its emitter, reading order and content digest.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct Key {
    emitter: u32,
    idx: u64,
    digest: u128,
    at: Delivery,
}

/// What reading saw of one emitter's seqs (as [`SeqTrack`](super::input::SeqTrack) does,
/// without the gaps).
#[derive(Debug, Default)]
struct Track {
    events: u64,
    first: u64,
    last: u64,
    increasing: bool,
    props: Vec<u16>,
}

/// A history assessed within a memory budget, its records kept in a [`SpillStore`].
#[derive(Debug)]
pub struct Spilled<S> {
    /// Sources, malformed events and counts; at the end the records of the last file.
    main: History,
    store: S,
    parts: usize,
    key_files: usize,
    /// Bytes appended to each file.
    sizes: Vec<u64>,
    budget: u64,
    next_idx: u64,
    emitters: Interner,
    tracks: Vec<Track>,
    /// Per property, the times its windows must cover.
    ranges: Vec<Option<(i64, i64)>>,
    buf: Vec<u8>,
}

impl<S: SpillStore> Spilled<S> {
    /// An empty history under `contract` kept in `store`: records in `parts` files by scope
    /// (at least one), assessed in groups of files expected to take at most `budget` bytes.
    pub fn new(contract: Contract, store: S, parts: usize, budget: u64) -> Spilled<S> {
        let parts = parts.max(1);
        let key_files = parts.min(64);
        let ranges = vec![None; contract.properties.len()];
        Spilled {
            main: History::new(contract),
            store,
            parts,
            key_files,
            sizes: vec![0; parts + 1 + key_files],
            budget,
            next_idx: 0,
            emitters: Interner::new(),
            tracks: Vec::new(),
            ranges,
            buf: Vec::new(),
        }
    }

    /// The contract.
    pub fn contract(&self) -> &Contract {
        self.main.contract()
    }

    /// See [`History::add_source`].
    pub fn add_source(&mut self, name: &str) -> SourceId {
        self.main.add_source(name)
    }

    /// See [`History::set_threads`].
    pub fn set_threads(&mut self, threads: usize) {
        self.main.set_threads(threads);
    }

    /// See [`History::note_conformance`].
    pub fn note_conformance(&mut self) {
        self.main.note_conformance();
    }

    /// Bytes written to the store so far.
    pub fn spilled_bytes(&self) -> u64 {
        self.sizes.iter().sum()
    }

    /// Adds the events of `batch` after those read so far (see [`History::append`]).
    pub fn append(&mut self, batch: Batch) -> io::Result<()> {
        let Batch {
            source,
            recs,
            strings,
            names: _,
            scopes,
            malformed,
            tally,
            attests,
            shift,
        } = batch;
        self.main.note_counts(source, malformed, tally, shift);
        let mut attests = attests.into_iter().peekable();
        for (j, r) in recs.iter().enumerate() {
            let r = &Rec {
                position: r.position + shift,
                ..*r
            };
            let attest = attests.next_if(|(i, _)| *i == j as u32).map(|(_, a)| a);
            let name = |id: u32| (id != NONE).then(|| strings.resolve(id));
            let scope = r
                .has_scope()
                .then(|| (scopes.hash(r.scope), scopes.get(r.scope)));
            super::state::note_range(&mut self.ranges, r);
            let idx = self.next_idx;
            self.next_idx += 1;
            if let Some((e, _)) = r.seq_key() {
                let emitter = self.emitters.intern(strings.resolve(e));
                self.note_seq(emitter, r);
                let key = Key {
                    emitter,
                    idx,
                    digest: digest(r, &name, scope.map(|s| s.0), attest.as_ref()),
                    at: Delivery::of(r),
                };
                self.put(self.parts + 1 + emitter as usize % self.key_files, &key)?;
            }
            // Attestations go with the history that concludes: their premises are judged there.
            let file = match scope {
                Some((h, _)) if r.kind != Kind::Attestation => {
                    ((h >> 64) as u64 % self.parts as u64) as usize
                }
                _ => self.parts,
            };
            let spilt = Spilt {
                rec: *r,
                scope: scope.map(|s| s.1),
                holder: name(r.holder),
                route: name(r.route),
                emitter: name(r.emitter),
                attest,
            };
            self.put(file, &spilt)?;
        }
        Ok(())
    }

    fn note_seq(&mut self, emitter: u32, r: &Rec) {
        let e = emitter as usize;
        if e >= self.tracks.len() {
            self.tracks.resize_with(e + 1, Track::default);
        }
        let t = &mut self.tracks[e];
        if t.events == 0 {
            t.first = r.seq;
            t.increasing = true;
        } else if r.seq <= t.last {
            t.increasing = false;
        }
        t.events += 1;
        t.last = r.seq;
        if !t.props.contains(&r.prop) {
            t.props.push(r.prop);
        }
    }

    /// Appends `value` to `file`, length first.
    fn put(&mut self, file: usize, value: &impl Serialize) -> io::Result<()> {
        let mut buf = std::mem::take(&mut self.buf);
        buf.clear();
        buf.extend_from_slice(&[0; 4]);
        let mut buf = postcard::to_extend(value, buf).map_err(invalid)?;
        let n = u32::try_from(buf.len() - 4).map_err(invalid)?;
        buf[..4].copy_from_slice(&n.to_le_bytes());
        self.sizes[file] += buf.len() as u64;
        let written = self.store.append(file, &buf);
        self.buf = buf;
        written
    }

    /// Assesses the history: the report [`History::finish`] gives for the same events.
    /// `progress` is told the bytes of scope files assessed so far and their total.
    pub fn finish(mut self, progress: &mut dyn FnMut(u64, u64)) -> io::Result<Report> {
        let contract = self.main.contract().clone();
        let mut accs = super::state::accs_covering(&contract, &self.ranges);
        let (aside, emitters) = self.settle_seqs(&mut accs)?;
        let aside = Arc::new(aside);
        let mut judged = Judged {
            duplicates: 0,
            emitters,
            conformance: None,
        };
        let mut fenced: Vec<Vec<u64>> = contract
            .properties
            .iter()
            .map(|p| vec![0; p.routes.len()])
            .collect();
        let total: u64 = self.sizes[..self.parts].iter().sum();
        let per_group = (self.budget / MEMORY_PER_SPILLED_BYTE).max(1);
        let (mut done, mut file) = (0, 0);
        while file < self.parts {
            let (mut end, mut bytes) = (file + 1, self.sizes[file]);
            while end < self.parts && bytes + self.sizes[end] <= per_group {
                bytes += self.sizes[end];
                end += 1;
            }
            if bytes > 0 {
                let mut h = History::new(contract.clone());
                h.sources = self.main.sources.clone();
                h.threads = self.main.threads;
                h.conformance = self.main.conformance;
                h.settle_seqs_outside(aside.clone());
                for f in file..end {
                    load(&mut h, &self.store.take(f)?)?;
                }
                let mut part = h.accs();
                let j = h.judge(&mut part);
                judged.duplicates += j.duplicates;
                add_fenced(&mut fenced, j.conformance);
                for ((acc, mut theirs), prop) in accs.iter_mut().zip(part).zip(&contract.properties)
                {
                    // Route names by the concluding history's ids.
                    theirs.undeclared = std::mem::take(&mut theirs.undeclared)
                        .into_iter()
                        .map(|(id, n)| (self.main.strings.intern(h.strings.resolve(id)), n))
                        .collect();
                    acc.absorb(theirs);
                    acc.compact_routes(prop.route_freshness.0);
                }
            }
            done += bytes;
            progress(done, total);
            file = end;
        }
        let last = self.store.take(self.parts)?;
        let mut main = self.main;
        load(&mut main, &last)?;
        drop(last);
        main.settle_seqs_outside(aside);
        let mut own = main.accs();
        let j = main.judge(&mut own);
        judged.duplicates += j.duplicates;
        judged.conformance = j.conformance.map(|mut c| {
            for (mine, theirs) in c.fenced_rejections.iter_mut().zip(&fenced) {
                for (a, b) in mine.iter_mut().zip(theirs) {
                    *a += b;
                }
            }
            c
        });
        for (acc, theirs) in accs.iter_mut().zip(own) {
            acc.absorb(theirs);
        }
        Ok(main.report(accs, judged))
    }

    /// Settles the (emitter, seq) keys (step 1 of the module's note): the conflicting
    /// deliveries, set aside, and each emitter's report, conflicts and gaps counted in `accs`.
    fn settle_seqs(&mut self, accs: &mut [Acc]) -> io::Result<(AsideSet, Vec<EmitterReport>)> {
        let mut aside = AsideSet::default();
        let mut reports = Vec::new();
        let shown = |main: &History, d: &Delivery| main.shown(d.source, d.position);
        let nprops = accs.len();
        let feeds = |t: &Track| {
            let mut f = vec![false; nprops];
            for &p in &t.props {
                if let Some(x) = f.get_mut(p as usize) {
                    *x = true;
                }
            }
            f
        };
        for k in 0..self.key_files {
            let data = self.store.take(self.parts + 1 + k)?;
            // Emitters whose seqs arrived increasing: their keys in reading order are in seq
            // order, so each gap is between two consecutive ones.
            let mut streams: Vec<Option<(Delivery, u64, u64)>> = Vec::new();
            let mut back: Vec<Key> = Vec::new();
            for key in entries::<Key>(&data) {
                let key = key?;
                let t = &self.tracks[key.emitter as usize];
                if !t.increasing {
                    back.push(key);
                    continue;
                }
                let slot = key.emitter as usize / self.key_files;
                if slot >= streams.len() {
                    streams.resize(slot + 1, None);
                }
                if let Some((x, gaps, missing)) = &mut streams[slot] {
                    let y = key.at;
                    if y.seq > x.seq + 1 {
                        let name = self.emitters.resolve(key.emitter);
                        let span = (x.ts, y.ts);
                        hit_gap(accs, &feeds(t), name, (x, &y, span), |d| {
                            shown(&self.main, d)
                        });
                        *gaps += 1;
                        *missing += y.seq - x.seq - 1;
                    }
                    *x = y;
                } else {
                    streams[slot] = Some((key.at, 0, 0));
                }
            }
            drop(data);
            for (slot, s) in streams.iter().enumerate() {
                let Some((_, gaps, missing)) = *s else {
                    continue;
                };
                let e = slot * self.key_files + k;
                let t = &self.tracks[e];
                reports.push(EmitterReport {
                    emitter: self.emitters.resolve(e as u32).to_string(),
                    events: t.events,
                    first_seq: t.first,
                    last_seq: t.last,
                    gaps,
                    missing,
                });
            }
            back.sort_unstable_by_key(|k| (k.emitter, k.at.seq, k.idx));
            for run in back.chunk_by(|a, b| a.emitter == b.emitter) {
                let name = self.emitters.resolve(run[0].emitter);
                for g in run.chunk_by(|a, b| a.at.seq == b.at.seq) {
                    if g.len() > 1 && g.iter().any(|k| k.digest != g[0].digest) {
                        aside.extend(g.iter().map(|k| (k.at.source, k.at.position)));
                        let members: Vec<Delivery> = g.iter().map(|k| k.at).collect();
                        hit_conflict(accs, &members, |d| shown(&self.main, d));
                    }
                }
                let fed = feeds(&self.tracks[run[0].emitter as usize]);
                let (mut gaps, mut missing) = (0, 0);
                let at = |k: usize| (run[k].at.seq, run[k].at.ts);
                let distinct = seq_gaps(run.len(), at, |x, y, span| {
                    let (x, y) = (&run[x].at, &run[y].at);
                    hit_gap(accs, &fed, name, (x, y, span), |d| shown(&self.main, d));
                    gaps += 1;
                    missing += y.seq - x.seq - 1;
                });
                reports.push(EmitterReport {
                    emitter: name.to_string(),
                    events: distinct,
                    first_seq: run[0].at.seq,
                    last_seq: run[run.len() - 1].at.seq,
                    gaps,
                    missing,
                });
            }
        }
        reports.sort_by(|a, b| a.emitter.cmp(&b.emitter));
        Ok((aside, reports))
    }
}

fn add_fenced(into: &mut [Vec<u64>], c: Option<crate::report::Conformance>) {
    for (mine, theirs) in into
        .iter_mut()
        .zip(c.map(|c| c.fenced_rejections).unwrap_or_default())
    {
        for (a, b) in mine.iter_mut().zip(theirs) {
            *a += b;
        }
    }
}

/// Adds the spilled records in `data` to `h`, in their order.
fn load(h: &mut History, data: &[u8]) -> io::Result<()> {
    for s in entries::<Spilt<'_>>(data) {
        let s = s?;
        let mut r = s.rec;
        r.scope = s.scope.map_or(NONE, |t| h.scopes.push(t));
        let mut name = |s: Option<&str>| s.map_or(NONE, |s| h.strings.intern(s));
        r.holder = name(s.holder);
        r.route = name(s.route);
        r.emitter = name(s.emitter);
        let idx = h.recs.len() as u32;
        h.note_added(&r);
        if let Some(a) = s.attest {
            h.attests.push((idx, a));
        }
        h.recs.push(r);
    }
    Ok(())
}

/// The length-prefixed values of a spilled file.
fn entries<'a, T: Deserialize<'a>>(mut data: &'a [u8]) -> impl Iterator<Item = io::Result<T>> {
    std::iter::from_fn(move || {
        if data.is_empty() {
            return None;
        }
        let item = (|| {
            let (len, rest) = data
                .split_at_checked(4)
                .ok_or_else(|| invalid("cut short"))?;
            let n = u32::from_le_bytes(len.try_into().expect("4 bytes")) as usize;
            let (item, rest) = rest
                .split_at_checked(n)
                .ok_or_else(|| invalid("cut short"))?;
            data = rest;
            postcard::from_bytes(item).map_err(invalid)
        })();
        if item.is_err() {
            data = &[];
        }
        Some(item)
    })
}

fn invalid(e: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("spilled history: {e}"))
}

/// The content of a delivery under the Duplicates rule (SPEC §4: what
/// [`Rec::same_content`], the scope and the attestation fields compare), as 128 bits.
fn digest<'a>(
    r: &Rec,
    name: &dyn Fn(u32) -> Option<&'a str>,
    scope: Option<u128>,
    attest: Option<&AttestRec>,
) -> u128 {
    let mut h = xxhash_rust::xxh3::Xxh3Default::new();
    // Each value is tagged present (1) or absent (0) and its length given, so that no two
    // contents share their bytes.
    let mut put = |v: Option<&[u8]>| match v {
        Some(b) => {
            h.update(&[1]);
            h.update(&(b.len() as u32).to_le_bytes());
            h.update(b);
        }
        None => h.update(&[0]),
    };
    put(Some(&[r.kind as u8, u8::from(r.has(REJECTED))]));
    put(Some(&r.prop.to_le_bytes()));
    put(Some(&r.inc.to_le_bytes()));
    put(r.epoch().map(u64::to_le_bytes).as_ref().map(|b| &b[..]));
    put(r.order().map(u64::to_le_bytes).as_ref().map(|b| &b[..]));
    put(name(r.holder).map(str::as_bytes));
    put(name(r.route).map(str::as_bytes));
    put(Some(&r.ts.to_le_bytes()));
    put(scope.map(u128::to_le_bytes).as_ref().map(|b| &b[..]));
    match attest {
        Some(a) => put(Some(&postcard::to_stdvec(a).unwrap_or_default())),
        None => put(None),
    }
    h.digest128()
}
