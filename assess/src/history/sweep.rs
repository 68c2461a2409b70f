//! Judging the records in `finish`: what each applied event counts for, then the per-scope
//! sweeps of [`crate::scope`] over every (property, scope) group, on all threads.

use super::acc::Acc;
use super::state::History;
use crate::contract::Grants;
use crate::event::Kind;
use crate::finding::{Counterexample, Reason, counterexample_id};
use crate::rules::{self, ASIDE, Applied, DUP, NONE, Observes, Rec, RouteIds, UNATTRIBUTED};
use crate::scope::{self, Slot};

/// How many records ahead the sweep's gather asks for (see [`prefetch`]).
const GATHER_AHEAD: usize = 8;

/// Asks the CPU to bring record `r`'s cache lines (72 bytes: two of them) in, for a read soon:
/// the sweep's gather reads records in scope order, a cache miss each.
#[inline(always)]
fn prefetch(r: &Rec) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        let p = std::ptr::from_ref(r).cast::<i8>();
        // SAFETY: SSE, which `_mm_prefetch` needs, is in every x86_64 CPU; a prefetch reads
        // nothing the program sees and never faults, whatever the address.
        #[allow(unsafe_code)]
        unsafe {
            _mm_prefetch::<_MM_HINT_T0>(p);
            _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(std::mem::size_of::<Rec>() - 1));
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = r;
}

/// Items `0..items` taken in turn by up to `threads` threads, each taking the next one as it
/// is free (both phases of [`History::assess_events`]): a thread's state starts as `init()`
/// and `work(&mut state, k)` is called for each item `k` it takes; returns the states, one a
/// thread that ran.
fn in_turns<S: Send>(
    threads: usize,
    items: usize,
    init: impl Fn() -> S + Sync,
    work: impl Fn(&mut S, usize) + Sync,
) -> Vec<S> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let (init, work, next) = (&init, &work, &next);
    std::thread::scope(|sc| {
        let handles: Vec<_> = (0..threads.min(items))
            .map(|_| {
                sc.spawn(move || {
                    let mut state = init();
                    loop {
                        let k = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        if k >= items {
                            break state;
                        }
                        work(&mut state, k);
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("sweep thread"))
            .collect()
    })
}

/// Events of one property counted in one window: `[lo, hi)`, `n` of them, one at `t`.
#[derive(Debug, Clone, Copy)]
struct EventRun {
    lo: i64,
    hi: i64,
    t: i64,
    n: u64,
}

impl History {
    /// What every applied event of `recs` counts for (SPEC §4 and [`rules::Applied`]): an
    /// event of its property (set-aside ones too), route observations, stale rejections and
    /// the per-event reasons. `each` is called with every record first, so that another pass
    /// over them rides on this one.
    fn per_event(&self, recs: &[Rec], accs: &mut [Acc], mut each: impl FnMut(&Rec)) {
        let routes = RouteIds::new(&self.contract, |name| self.strings.get(name));
        let name = |id: u32| (id != NONE).then(|| self.strings.resolve(id));
        // By property, the window of its latest events and how many fell in it: events come
        // mostly in time order, and a window's count added once per run of them, not by a
        // division and a tree lookup an event (~100 instructions each). Nothing reads the
        // counts before the end: no window is final while `check` reads (its series has no
        // watermark), so reasons placed meanwhile (`add_reason`) change no `revised` mark.
        let mut runs: Vec<Option<EventRun>> = vec![None; accs.len()];
        for r in recs {
            each(r);
            // Attestations count for their premise's support only (the `premises` module).
            if r.prop == UNATTRIBUTED || r.has(DUP) || r.kind == Kind::Attestation {
                continue;
            }
            let p = r.prop as usize;
            let acc = &mut accs[p];
            match &mut runs[p] {
                Some(run) if run.lo <= r.ts && r.ts < run.hi => run.n += 1,
                run => {
                    if let Some(done) = run.take() {
                        acc.series.add_events(done.t, done.n);
                    }
                    // Covered now, as each event's window was: reasons are placed by it.
                    acc.series.cover(r.ts);
                    let k = acc.series.index(r.ts);
                    *run = Some(EventRun {
                        lo: acc.series.start_of(k),
                        hi: acc.series.start_of(k.saturating_add(1)),
                        t: r.ts,
                        n: 1,
                    });
                }
            }
            acc.events += 1;
            if r.has(ASIDE) {
                continue;
            }
            let applied = Applied::of(r, routes.route(p, r.route), &self.contract.properties[p]);
            match applied.observes {
                Observes::Declared(i) => acc.route_obs[i].push(r.ts),
                Observes::UndeclaredByMutation => *acc.undeclared.entry(r.route).or_default() += 1,
                Observes::UndeclaredByHeartbeat | Observes::Nothing => {}
            }
            if applied.stale_rejection {
                acc.stale_rejections += 1;
            }
            for reason in applied.reasons.iter() {
                acc.hit(reason, 1, (r.source, r.position), || {
                    self.sample(r, rules::detail(reason, r.kind, name(r.route)))
                });
                acc.series.add_reason(r.ts, reason);
            }
        }
        for (acc, run) in accs.iter_mut().zip(runs) {
            if let Some(run) = run {
                acc.series.add_events(run.t, run.n);
            }
        }
    }

    /// The per-event reasons ([`History::per_event`]) and the per-scope sweeps over every
    /// (property, scope) group, on up to `threads` threads.
    ///
    /// Scopes are told apart by their hash (the top 96 bits of XXH3's 128-bit variant)
    /// rather than by comparing names: for a billion distinct scopes the chance that any two
    /// share those bits is about 6·10^-12 (10^-21 for all 128), far below that of a memory
    /// error, while a table of names costs a random memory access per event, which was most of
    /// the time of a large check.
    ///
    /// First the threads take contiguous ranges of records in turn (four a thread): each
    /// raises their per-event reasons and buckets the scope group members among them by the
    /// hash's top bits (a counting sort of 16-byte (hash, index) entries, in record order),
    /// the ranges' parts then put back in record order. Then the threads take
    /// ranges of buckets in turn (sixteen a thread): for each bucket a thread gathers its
    /// entries from every first-phase part (about a thousand, in cache), sorts them by scope
    /// and builds their slots from their records in one loop (a cache miss each,
    /// overlapping); for each scope it sorts the members' slots by [`Slot::sort_key`] and
    /// sweeps each property's group. Full slots in the buckets were measured slower: three
    /// times the bytes to write, fault in and sort, against one record read per member. Every
    /// part has its own accumulators, merged at the end; nothing depends on the split (nor on
    /// which thread took which range), so the output is that of a single thread.
    pub(super) fn assess_events(&self, accs: &mut [Acc]) {
        /// A group member: the top 96 bits of its scope's hash and its record (16 bytes: the
        /// whole hash made them 24, a third more to write, fault in and sort).
        #[derive(Clone, Copy, Default)]
        struct Keyed {
            hi: u64,
            lo: u32,
            idx: u32,
        }
        impl Keyed {
            /// The scope's 96 bits.
            fn scope(&self) -> (u64, u32) {
                (self.hi, self.lo)
            }
        }
        const _: () = assert!(std::mem::size_of::<Keyed>() == 16);
        struct Part {
            accs: Vec<Acc>,
            starts: Vec<u32>,
            keyed: Vec<Keyed>,
        }
        let recs = &self.recs;
        let scopes = &self.scopes;
        let member = |r: &Rec| {
            r.prop != UNATTRIBUTED
                && r.has_scope()
                && r.applied()
                && !matches!(r.kind, Kind::Heartbeat | Kind::Attestation)
        };
        // About 1024 events per bucket, each sorted by [`SUB_BITS`] more bits first.
        let bits = (usize::BITS - (recs.len() / 1024).leading_zeros()).min(16);
        const SUB_BITS: u32 = 8;
        const SUBS: usize = 1 << SUB_BITS;
        let nbuckets = 1usize << bits;
        let bucket = |h: u128| {
            if bits == 0 {
                0
            } else {
                (h >> (128 - bits)) as usize
            }
        };
        let first = |lo: usize, hi: usize, mut accs: Vec<Acc>| -> Part {
            let recs = &recs[lo..hi];
            let mut starts = vec![0u32; nbuckets + 1];
            self.per_event(recs, &mut accs, |r| {
                if member(r) {
                    starts[bucket(scopes.hash(r.scope)) + 1] += 1;
                }
            });
            // Each part folds its own route observations into runs, on its own thread; the
            // runs are joined when concluding (exact, as for `check --max-memory`'s parts).
            // Sorting all of them there was most of what `check` did alone after the sweep.
            for (acc, prop) in accs.iter_mut().zip(&self.contract.properties) {
                acc.compact_routes(prop.route_freshness.0);
            }
            for b in 0..nbuckets {
                starts[b + 1] += starts[b];
            }
            let mut fill = starts.clone();
            let mut keyed = vec![Keyed::default(); starts[nbuckets] as usize];
            for (i, r) in (lo..).zip(recs) {
                if !member(r) {
                    continue;
                }
                let h = scopes.hash(r.scope);
                let at = &mut fill[bucket(h)];
                keyed[*at as usize] = Keyed {
                    hi: (h >> 64) as u64,
                    lo: (h >> 32) as u32,
                    idx: i as u32,
                };
                *at += 1;
            }
            Part {
                accs,
                starts,
                keyed,
            }
        };
        let second = |lo: usize, hi: usize, parts: &[Part], accs: &mut [Acc]| {
            let mut work = scope::Workspace::default();
            let (mut bucket, mut gathered): (Vec<Keyed>, Vec<Keyed>) = (Vec::new(), Vec::new());
            let mut slots: Vec<Slot> = Vec::new();
            let mut starts = [0u32; SUBS + 1];
            for b in lo..hi {
                // Sorted by scope: a counting sort on the hash's next bits (a thousand
                // entries of ~50 scopes into 256 runs, mostly of one scope each), then each
                // run by the whole hash. A comparison sort of the bucket was ~6% of `check`'s
                // instructions.
                gathered.clear();
                for part in parts {
                    let (from, to) = (part.starts[b] as usize, part.starts[b + 1] as usize);
                    gathered.extend_from_slice(&part.keyed[from..to]);
                }
                let sub = |k: &Keyed| ((k.hi << bits) >> (64 - SUB_BITS)) as usize;
                starts.fill(0);
                gathered.iter().for_each(|k| starts[sub(k) + 1] += 1);
                for i in 0..SUBS {
                    starts[i + 1] += starts[i];
                }
                bucket.clear();
                bucket.resize(gathered.len(), Keyed::default());
                let mut fill = starts;
                for k in &gathered {
                    let at = &mut fill[sub(k)];
                    bucket[*at as usize] = *k;
                    *at += 1;
                }
                for w in starts.windows(2) {
                    let run = &mut bucket[w[0] as usize..w[1] as usize];
                    if run.len() > 1 {
                        run.sort_unstable_by_key(Keyed::scope);
                    }
                }
                // The whole bucket's slots in one loop of independent reads: each is a cache
                // miss, and back to back they overlap (scope by scope, the sweeps between
                // them kept the misses one at a time).
                slots.clear();
                slots.reserve(bucket.len());
                for (j, k) in bucket.iter().enumerate() {
                    if let Some(ahead) = bucket.get(j + GATHER_AHEAD) {
                        prefetch(&recs[ahead.idx as usize]);
                    }
                    slots.push(recs[k.idx as usize].slot(k.idx));
                }
                let mut a = 0;
                while a < bucket.len() {
                    let scope = bucket[a].scope();
                    let len = bucket[a..]
                        .iter()
                        .take_while(|k| k.scope() == scope)
                        .count();
                    let group = &mut slots[a..a + len];
                    scope::sort_slots(group);
                    let mut p = 0;
                    while p < group.len() {
                        let prop = group[p].prop;
                        let n = group[p..].iter().take_while(|x| x.prop == prop).count();
                        self.assess_group(&group[p..p + n], &mut accs[prop as usize], &mut work);
                        p += n;
                    }
                    a += len;
                }
            }
        };
        let threads = self.threads.clamp(1, 16);
        let empty = || accs.iter().map(Acc::empty_like).collect::<Vec<Acc>>();
        let mut parts: Vec<Part> = if threads == 1 {
            vec![first(0, recs.len(), empty())]
        } else {
            // Four ranges a thread, taken in turn by whichever thread is free, and put back in
            // record order: with one range a thread, one often waited for the other (on 3.15M
            // events, the first phase's threads took 56 and 82 ms, 64 and 81).
            let per = recs.len().div_ceil(threads * 4).max(1);
            let starts: Vec<usize> = (0..recs.len()).step_by(per).collect();
            let mut done: Vec<(usize, Part)> =
                in_turns(threads, starts.len(), Vec::new, |mine: &mut Vec<_>, k| {
                    let lo = starts[k];
                    mine.push((k, first(lo, (lo + per).min(recs.len()), empty())));
                })
                .into_iter()
                .flatten()
                .collect();
            done.sort_unstable_by_key(|&(k, _)| k);
            done.into_iter().map(|(_, part)| part).collect()
        };
        let mut locals: Vec<Vec<Acc>> = parts
            .iter_mut()
            .map(|p| std::mem::take(&mut p.accs))
            .collect();
        // Bucket ranges of about equal numbers of slots.
        let mut sizes = vec![0u64; nbuckets + 1];
        for b in 0..nbuckets {
            let n: u32 = parts.iter().map(|p| p.starts[b + 1] - p.starts[b]).sum();
            sizes[b + 1] = sizes[b] + u64::from(n);
        }
        let total = sizes[nbuckets];
        // Ranges of buckets taken in turn by whichever thread is free: equal numbers of slots
        // are not equal work (cache misses, scope sizes), and one range a thread left one
        // thread working alone for up to a tenth of `check`'s time.
        let pieces = if threads == 1 { 1 } else { threads * 16 };
        let mut cuts = vec![0usize];
        for t in 1..pieces {
            let target = total * t as u64 / pieces as u64;
            cuts.push(sizes.partition_point(|&x| x < target).min(nbuckets));
        }
        cuts.push(nbuckets);
        if threads == 1 {
            let mut local = empty();
            second(0, nbuckets, &parts, &mut local);
            locals.push(local);
        } else {
            locals.extend(in_turns(threads, cuts.len() - 1, empty, |local, k| {
                second(cuts[k], cuts[k + 1], &parts, local);
            }));
        }
        drop(parts);
        for local in locals {
            for (acc, part) in accs.iter_mut().zip(local) {
                acc.absorb(part);
            }
        }
    }

    fn assess_group(&self, group: &[Slot], acc: &mut Acc, work: &mut scope::Workspace) {
        let recs = &self.recs;
        let prop = &self.contract.properties[group[0].prop as usize];
        let required = prop.grants == Grants::Required;
        let mut found = scope::decide_group(group, prop.clock_skew.0, required, work);
        let group_scope = recs[group[0].idx as usize].scope;
        let raise = |acc: &mut Acc, i: u32, reason: Reason| {
            let r = &recs[i as usize];
            acc.hit(reason, 1, (r.source, r.position), || {
                let scope = self.scopes.get(group_scope);
                self.sample(r, rules::sweep_detail(reason, r.epoch, scope))
            });
            acc.series.add_reason(r.ts, reason);
        };
        for &i in found.ambiguous() {
            raise(acc, i, Reason::AmbiguousOrder);
        }
        if required {
            for &i in &found.ungranted {
                raise(acc, i, Reason::UngrantedEpoch);
            }
        }
        if found.cxs.is_empty() {
            return;
        }
        let mut by_time: Vec<u32> = group.iter().map(|x| x.idx).collect();
        by_time.sort_unstable_by_key(|&i| (recs[i as usize].ts, i));
        let scope = self.scopes.get(group_scope).to_string();
        for &(kind, stale, witness) in &found.cxs {
            let (s, w) = (&recs[stale as usize], &recs[witness as usize]);
            let context = rules::context(&by_time, |i| recs[i as usize].ts, stale)
                .iter()
                .map(|&i| self.view(&recs[i as usize]))
                .collect();
            let cx = Counterexample::shown(
                counterexample_id(&prop.name, kind, &scope, s.inc, &self.prov(s)),
                kind,
                prop.name.clone(),
                scope.clone(),
                [self.view(s), self.view(w)],
                context,
                s.ts,
            );
            acc.series.add_counterexample(s.ts);
            acc.cxs.push(cx);
        }
    }
}
