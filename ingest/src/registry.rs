//! The partition registry: every partition of this instance (the local WAL's, each assigned
//! Kafka partition's) and the summaries other instances publish of theirs register here, and
//! every query is answered from here, through one merged [`View`] (SPEC §5). Sources know the
//! registry, not each other.
//!
//! Watermarks: alone, the local partition is the watermark. Beside streamed partitions
//! (Kafka, whose messages may still be in flight) it joins only once it holds events, and as
//! idle (a `2xx` means applied: nothing of it is in flight), so the watermark is the minimum
//! over the streamed partitions still reading. A streamed partition read to its end is idle
//! too. A remote summary joins unless its partition is one of this instance's.

use crate::partition::Partition;
use crate::report::{Durability, Metrics};
use fencewatch_assess::live::{ScopeView, SeqRuns, Summary, View};
use fencewatch_assess::{Contract, EventTime};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// A registered partition, shared by its source (which applies to it) and the registry.
pub type Shared = Arc<RwLock<Partition>>;

/// Reads a shared partition (a poisoned lock is read anyway: the state is whole between
/// batches).
pub fn read(part: &Shared) -> RwLockReadGuard<'_, Partition> {
    part.read().unwrap_or_else(|p| p.into_inner())
}

/// Writes a shared partition.
pub fn write(part: &Shared) -> RwLockWriteGuard<'_, Partition> {
    part.write().unwrap_or_else(|p| p.into_inner())
}

/// How a partition's watermark counts (see the [module docs](self)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The local WAL's: complete once its batches are answered.
    Local,
    /// A streamed source's (Kafka): active until read to its end.
    Streamed,
}

/// Another instance's partition as it last published it.
#[derive(Debug, Clone)]
pub struct Remote {
    /// The publishing instance.
    pub owner: String,
    /// The partition offset the summary covers.
    pub next: i64,
    /// Whether the partition was idle (read to its end).
    pub idle: bool,
    /// Wall time of publication, ns.
    pub at: i64,
    /// The summary.
    pub summary: Summary,
}

#[derive(Debug)]
struct Entry {
    name: String,
    kind: Kind,
    part: Shared,
    /// A streamed partition's summary as the last scrape took it (see
    /// [`Registry::refresh_gauges`]).
    snap: std::sync::Mutex<Option<Snap>>,
}

/// A streamed partition's figures taken at once under its read lock, for scrapes.
#[derive(Debug)]
struct Snap {
    /// Where the partition stood: (next, idle). An unchanged partition is not summarised again.
    at: (u64, bool),
    summary: Summary,
    scopes: usize,
    bytes: usize,
}

/// The partitions of this instance and the published summaries of the others'.
#[derive(Debug)]
pub struct Registry {
    contract: Contract,
    parts: RwLock<Vec<Entry>>,
    remote: RwLock<BTreeMap<String, Remote>>,
    /// Whether a streamed source is configured (even with no partition assigned yet).
    streamed: AtomicBool,
    /// The evidence archive every partition feeds, when on.
    #[cfg(feature = "archive")]
    archive: std::sync::OnceLock<Arc<crate::archive::Archive>>,
}

impl Registry {
    /// An empty registry; every partition runs under `contract`.
    pub fn new(contract: Contract) -> Registry {
        Registry {
            contract,
            parts: RwLock::new(Vec::new()),
            remote: RwLock::new(BTreeMap::new()),
            streamed: AtomicBool::new(false),
            #[cfg(feature = "archive")]
            archive: std::sync::OnceLock::new(),
        }
    }

    /// Makes every partition prepared from now on ([`Registry::prepare`]) feed `archive`.
    #[cfg(feature = "archive")]
    pub fn set_archive(&self, archive: Arc<crate::archive::Archive>) {
        let _ = self.archive.set(archive);
    }

    /// The evidence archive, if on.
    #[cfg(feature = "archive")]
    pub fn archive(&self) -> Option<&Arc<crate::archive::Archive>> {
        self.archive.get()
    }

    /// The offset below which the evidence archive holds every row of partition `name`, when
    /// the archive is on and lists it.
    pub fn archive_lists(&self, name: &str) -> Option<u64> {
        #[cfg(feature = "archive")]
        return self.archive.get().and_then(|a| a.listed_below(name));
        #[cfg(not(feature = "archive"))]
        {
            let _ = name;
            None
        }
    }

    /// Readies a partition before anything is applied to it: attaches the evidence archive.
    pub fn prepare(&self, part: &mut Partition) {
        #[cfg(feature = "archive")]
        if let Some(a) = self.archive.get() {
            part.attach_archive(a.clone());
        }
        let _ = part;
    }

    /// The contract.
    pub fn contract(&self) -> &Contract {
        &self.contract
    }

    /// Says that a streamed source is configured: from now on the local partition no longer
    /// holds the watermark (see the [module docs](self)).
    pub fn expect_streamed(&self) {
        self.streamed.store(true, Ordering::Release);
    }

    /// Registers `part` (replacing one of the same name) and returns it shared.
    pub fn register(&self, kind: Kind, part: Partition) -> Shared {
        let name = part.name().to_string();
        let shared = Arc::new(RwLock::new(part));
        let mut parts = self.parts.write().unwrap_or_else(|p| p.into_inner());
        parts.retain(|e| e.name != name);
        parts.push(Entry {
            name,
            kind,
            part: shared.clone(),
            snap: std::sync::Mutex::new(None),
        });
        shared
    }

    /// Drops partition `name` (revoked).
    pub fn unregister(&self, name: &str) {
        let mut parts = self.parts.write().unwrap_or_else(|p| p.into_inner());
        parts.retain(|e| e.name != name);
    }

    /// Partition `name`, if registered.
    pub fn get(&self, name: &str) -> Option<Shared> {
        let parts = self.parts.read().unwrap_or_else(|p| p.into_inner());
        parts
            .iter()
            .find(|e| e.name == name)
            .map(|e| e.part.clone())
    }

    /// Keeps `remote` as the summary of partition `name` unless the one kept is newer.
    pub fn offer_remote(&self, name: &str, remote: Remote) {
        let mut kept = self.remote.write().unwrap_or_else(|p| p.into_inner());
        let newer = kept
            .get(name)
            .is_none_or(|old| (remote.next, remote.at) >= (old.next, old.at));
        if newer {
            kept.insert(name.to_string(), remote);
        }
    }

    /// Answers a query over every partition merged (see the [module docs](self)).
    pub fn query<R>(&self, f: impl FnOnce(&View<'_>) -> R) -> R {
        self.query_parts(|view, _| f(view))
    }

    /// [`Registry::query`] with this instance's partitions beside the view, all read at once.
    pub fn query_parts<R>(&self, f: impl FnOnce(&View<'_>, &[&Partition]) -> R) -> R {
        let parts = self.parts.read().unwrap_or_else(|p| p.into_inner());
        let guards: Vec<(Kind, RwLockReadGuard<'_, Partition>)> =
            parts.iter().map(|e| (e.kind, read(&e.part))).collect();
        self.merged(&parts, &guards, f)
    }

    /// [`Registry::query`] unless a partition is being written now (`None`): a source holds
    /// its partition's write lock for a whole batch.
    pub fn try_query<R>(&self, f: impl FnOnce(&View<'_>) -> R) -> Option<R> {
        let parts = self.parts.read().unwrap_or_else(|p| p.into_inner());
        let mut guards = Vec::with_capacity(parts.len());
        for e in parts.iter() {
            guards.push((e.kind, e.part.try_read().ok()?));
        }
        Some(self.merged(&parts, &guards, |view, _| f(view)))
    }

    fn merged<R>(
        &self,
        parts: &[Entry],
        guards: &[(Kind, RwLockReadGuard<'_, Partition>)],
        f: impl FnOnce(&View<'_>, &[&Partition]) -> R,
    ) -> R {
        let remote = self.remote.read().unwrap_or_else(|p| p.into_inner());
        let streamed = self.streamed.load(Ordering::Acquire);
        let mut view = View::new(&self.contract);
        let same = "every partition runs under the registry's contract";
        for (kind, part) in guards {
            match kind {
                Kind::Local => add_local(&mut view, part.live(), streamed),
                Kind::Streamed => view.add_live(part.live(), !part.is_idle()).expect(same),
            }
        }
        // Other instances' partitions (scale-out): the ones this instance does not own.
        for (name, r) in remote.iter() {
            if !parts.iter().any(|e| &e.name == name) {
                // Summaries of another contract were dropped when read.
                let _ = view.add_summary(&r.summary, !r.idle);
            }
        }
        let local: Vec<&Partition> = guards.iter().map(|(_, g)| &**g).collect();
        f(&view, &local)
    }

    /// One scope's resident history: scopes live in one partition each (producers key by
    /// scope); a scope found in several (misrouted messages) is shown merged. A scope owned by
    /// another instance shows its counterexamples from the published summaries.
    pub fn scope(&self, p: usize, scope: &str) -> Option<ScopeView> {
        let mut found: Option<ScopeView> = None;
        self.for_each(|_, part| {
            let Some(v) = part.live().scope(p, scope) else {
                return;
            };
            match &mut found {
                None => found = Some(v),
                Some(f) => {
                    f.events.extend(v.events);
                    f.events
                        .sort_by(|a, b| (&a.ts, &a.source).cmp(&(&b.ts, &b.source)));
                    for c in v.counterexamples {
                        if !f.counterexamples.iter().any(|x| x.id == c.id) {
                            f.counterexamples.push(c);
                        }
                    }
                    if v.high_water.as_ref().map(|h| (h.incarnation, h.epoch))
                        > f.high_water.as_ref().map(|h| (h.incarnation, h.epoch))
                    {
                        f.high_water = v.high_water;
                    }
                }
            }
        });
        if found.is_none() {
            let cxs =
                self.query(|v| v.counterexamples(Some(p), Some(scope), None, None, None, 1000));
            if !cxs.counterexamples.is_empty() {
                found = Some(ScopeView {
                    property: self.contract.properties[p].name.clone(),
                    scope: scope.to_string(),
                    events: Vec::new(),
                    high_water: None,
                    counterexamples: cxs.counterexamples,
                });
            }
        }
        found
    }

    /// Calls `f` with every registered partition, read.
    pub fn for_each(&self, mut f: impl FnMut(Kind, &Partition)) {
        let parts = self.parts.read().unwrap_or_else(|p| p.into_inner());
        for e in parts.iter() {
            f(e.kind, &read(&e.part));
        }
    }

    /// Feeds the seqs seen by every streamed partition (this instance's and the published
    /// ones) back to each of this instance's. Producers key by scope, so one emitter's seqs are
    /// spread over partitions and each partition alone would keep one run per event (memory,
    /// and work for every query that merges them); joined with what the others saw, its runs
    /// stay as few as the real gaps.
    pub fn absorb_seq_runs(&self) {
        let streamed: Vec<Shared> = {
            let parts = self.parts.read().unwrap_or_else(|p| p.into_inner());
            parts
                .iter()
                .filter(|e| e.kind == Kind::Streamed)
                .map(|e| e.part.clone())
                .collect()
        };
        let seen: SeqRuns = {
            let remote = self.remote.read().unwrap_or_else(|p| p.into_inner());
            if streamed.len() < 2 && remote.is_empty() {
                return;
            }
            let guards: Vec<_> = streamed.iter().map(read).collect();
            let mut view = View::new(&self.contract);
            for g in &guards {
                let _ = view.add_live(g.live(), true);
            }
            for r in remote.values() {
                let _ = view.add_summary(&r.summary, true);
            }
            view.seq_runs()
        };
        if seen.is_empty() {
            return;
        }
        for part in &streamed {
            write(part).live_mut().absorb_seq_runs(&seen);
        }
    }
}

/// Adds the local partition to `view`: alone it is the watermark; beside streamed partitions
/// it joins once it holds events, as idle (see the [module docs](self)).
fn add_local<'a>(view: &mut View<'a>, live: &'a fencewatch_assess::live::Live, streamed: bool) {
    let same = "every partition runs under the registry's contract";
    if !streamed {
        view.add_live(live, true).expect(same);
    } else {
        let (valid, malformed, unattributed, _) = live.totals();
        if valid + malformed + unattributed > 0 {
            view.add_live(live, false).expect(same);
        }
    }
}

impl Registry {
    /// [`Registry::query`] for a scrape, which must not stall ingest: each streamed partition
    /// is summarised on its own, under its read lock for the copy only (not again while it has
    /// not moved), and the view merges the copies with no streamed partition locked. Returns
    /// the active scopes and state bytes beside `f`'s work.
    fn scrape(&self, f: impl FnOnce(&View<'_>)) -> (usize, usize) {
        let parts = self.parts.read().unwrap_or_else(|p| p.into_inner());
        let mut snaps = Vec::new();
        let mut local = Vec::new();
        let (mut scopes, mut bytes) = (0, 0);
        for e in parts.iter() {
            if e.kind == Kind::Local {
                local.push(read(&e.part));
                continue;
            }
            let mut snap = e.snap.lock().unwrap_or_else(|p| p.into_inner());
            {
                let part = read(&e.part);
                let at = (part.next(), part.is_idle());
                if snap.as_ref().is_none_or(|s| s.at != at) {
                    let live = part.live();
                    *snap = Some(Snap {
                        at,
                        summary: live.summary(),
                        scopes: live.active_scopes(),
                        bytes: live.state_bytes(),
                    });
                }
            }
            snaps.push(snap);
        }
        let remote = self.remote.read().unwrap_or_else(|p| p.into_inner());
        let streamed = self.streamed.load(Ordering::Acquire);
        let mut view = View::new(&self.contract);
        let same = "every partition runs under the registry's contract";
        for part in &local {
            let live = part.live();
            scopes += live.active_scopes();
            bytes += live.state_bytes();
            add_local(&mut view, live, streamed);
        }
        for snap in &snaps {
            let s = snap.as_ref().expect("taken above");
            scopes += s.scopes;
            bytes += s.bytes;
            view.add_summary(&s.summary, !s.at.1).expect(same);
        }
        for (name, r) in remote.iter() {
            if !parts.iter().any(|e| &e.name == name) {
                let _ = view.add_summary(&r.summary, !r.idle);
            }
        }
        f(&view);
        (scopes, bytes)
    }

    /// Sets every gauge of `metrics` derived from the partitions at wall time `now` (ns), the
    /// local partition's `durability` and the ingest bytes in flight (before each scrape).
    pub fn refresh_gauges(
        &self,
        metrics: &Metrics,
        durability: &Durability,
        pending_bytes: u64,
        now: EventTime,
    ) {
        let registry = self;
        let now = now.0;
        let contract = registry.contract();
        let (scopes, bytes) = registry.scrape(|view| {
            for (p, prop) in contract.properties.iter().enumerate() {
                let a = view.assurance(p, now, prop.assurance_window.0, now);
                metrics.set_assurance(&prop.name, a.verdict);
                metrics.set_provisional(&prop.name, view.provisional_count(p));
                let counts = view.unknown_counts(p);
                for r in fencewatch_assess::Reason::ALL {
                    let n = counts.get(&r).copied().unwrap_or(0) as i64;
                    metrics.set_unknown(&prop.name, r, n);
                }
                let wm = view.watermark(p);
                if wm != EventTime::MIN {
                    metrics.set_watermark(&prop.name, wm, EventTime(now));
                }
                for r in view.coverage(p).routes {
                    if let Some(t) = r.last_seen_ns {
                        metrics.set_route_last_seen(&prop.name, &r.name, EventTime(t));
                    }
                }
                for pv in view.premises(p, now) {
                    let labels = crate::report::metrics::PremiseLabels {
                        property: prop.name.clone(),
                        premise: pv.premise.name,
                        route: pv.premise.route.unwrap_or_default(),
                    };
                    metrics.set_premise(labels, pv.supported_until_ns);
                }
                metrics.set_attestations_ignored(&prop.name, view.attestations_ignored(p));
            }
        });
        metrics.active_scopes.set(scopes as i64);
        metrics.ingest_pending_bytes.set(pending_bytes as i64);
        metrics.state_bytes.set(bytes as i64);
        let d = durability;
        metrics
            .wal_bytes
            .set(d.wal_bytes.load(Ordering::Acquire) as i64);
        metrics
            .wal_next_offset
            .set(d.next_offset.load(Ordering::Acquire) as i64);
        metrics
            .checkpoint_offset
            .set(d.checkpoint_offset.load(Ordering::Acquire) as i64);
        let at = d.checkpoint_at.load(Ordering::Acquire);
        if at > 0 {
            metrics.checkpoint_age_seconds.set((now - at) as f64 / 1e9);
        }
    }
}
