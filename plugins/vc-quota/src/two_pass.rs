//! The two passes of `vc-quota` over per-VC FIFO queues, given each VC's
//! quota (see the crate docs of `vc-quota` for the rule).
//!
//! One implementation for two policies: `vc-quota` sets its effective
//! quotas, `max-min` (which compiles this same file with `#[path]`) sets
//! its fair shares. It is shared as a source file rather than through a
//! Cargo dependency because every policy crate exports its Wasm interface
//! with `export!(Fairness, ...)`: linking `vc-quota` into `max-min` would put two
//! definitions of the same exports into one module.
//!
//! The queues are one list of the pending jobs sorted by (VC, submit time,
//! id) and one record per VC holding its range of that list; their buffers
//! are kept between rounds, so a round allocates only its answer.

use std::cell::RefCell;
use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;
use std::collections::binary_heap::PeekMut;

use gangway_plugin_sdk::sort;
use gangway_plugin_sdk::{
    FairnessDecision, FairnessView, JobId, PendingJob, Ranked, VcId, VcUsage,
};

/// One VC of a round: its usage, its quota (set by the policy) and its FIFO
/// queue of pending jobs.
pub(crate) struct VcQueue {
    /// The VC.
    pub(crate) id: VcId,
    /// Its usage record in the view (an index into `view.vcs`), if listed.
    usage: Option<usize>,
    /// The GPUs it holds now.
    pub(crate) held_gpus: u64,
    /// The GPUs its pending jobs ask for.
    pub(crate) asked_gpus: u64,
    /// Its quota in GPUs; `None` (the default) means unlimited.
    pub(crate) quota_gpus: Option<u64>,
    /// GPUs counted while serving: held plus granted this round.
    used: u64,
    /// Its jobs not yet ordered: `Queues::jobs[next..end]` (oldest first).
    next: usize,
    end: usize,
}

impl VcQueue {
    /// Whether it has pending jobs.
    pub(crate) fn has_jobs(&self) -> bool {
        self.end > self.next
    }

    /// Its usage record in `view`, if the host listed it.
    pub(crate) fn usage<'v>(&self, view: &'v FairnessView) -> Option<&'v VcUsage> {
        self.usage.and_then(|i| view.vcs.get(i))
    }
}

/// The buffers of a round, kept between rounds so that a round allocates
/// only its answer (a policy runs every few seconds, often inside a Wasm
/// sandbox where each allocation is comparatively dear).
#[derive(Default)]
struct Scratch {
    vcs: Vec<VcQueue>,
    /// The VCs with pending jobs (indices into `vcs`), in id order.
    active: Vec<usize>,
    jobs: Vec<u32>,
    ids: Vec<VcId>,
    turns: BinaryHeap<Reverse<Turn>>,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// The VCs of a round in id order (see [`Cover`]), each with its pending
/// jobs oldest first.
pub(crate) struct Queues<'a> {
    view: &'a FairnessView,
    scratch: &'a mut Scratch,
}

/// Which VCs the queues of a round hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cover {
    /// Every VC of `view.vcs` and any other a pending job names.
    All,
    /// At least the VCs with pending jobs: enough to order the jobs when no
    /// quota depends on the other VCs. The VCs without jobs are left out
    /// only when the view does not index VCs by id (then leaving them out
    /// saves a search per job); otherwise they cost nothing and stay.
    #[allow(dead_code)] // `max-min` compiles this file too and needs every VC.
    WithJobs,
}

/// Runs `f` on the queues of `view` holding the VCs `cover` says.
pub(crate) fn with_queues<R>(
    view: &FairnessView,
    cover: Cover,
    f: impl FnOnce(&mut Queues<'_>) -> R,
) -> R {
    SCRATCH.with(|cell| match cell.try_borrow_mut() {
        Ok(mut scratch) => f(&mut Queues::build(view, cover, &mut scratch)),
        // Only if `f` itself asked for queues again: fresh buffers then.
        Err(_) => f(&mut Queues::build(view, cover, &mut Scratch::default())),
    })
}

impl<'a> Queues<'a> {
    /// Groups the pending jobs of `view` by VC, oldest first.
    fn build(view: &'a FairnessView, cover: Cover, scratch: &'a mut Scratch) -> Queues<'a> {
        let dense = cover_ids(view, cover, &mut scratch.ids);
        let position = Positions {
            dense,
            ids: &scratch.ids,
        };
        fill_records(view, &position, &mut scratch.vcs);
        group_jobs(view, &position, &mut scratch.vcs, &mut scratch.jobs);
        let active = &mut scratch.active;
        active.clear();
        active.extend(
            scratch
                .vcs
                .iter()
                .enumerate()
                .filter(|(_, q)| q.has_jobs())
                .map(|(i, _)| i),
        );
        Queues { view, scratch }
    }

    /// The VCs in id order.
    pub(crate) fn vcs(&self) -> &[VcQueue] {
        &self.scratch.vcs
    }

    /// The VCs in id order, to set their quotas.
    pub(crate) fn vcs_mut(&mut self) -> &mut [VcQueue] {
        &mut self.scratch.vcs
    }

    /// Orders the pending jobs by the two passes:
    ///
    /// 1. **Within quota**: most under-served VC first (smallest fraction of
    ///    its quota in use; ties: the older oldest job, then the lower VC
    ///    id), its oldest job eligible while the VC stays within its quota
    ///    (or it is the one oversized job of a VC holding nothing); a VC
    ///    whose oldest job does not fit leaves the pass (FIFO within a VC).
    /// 2. **Lending**: the remaining jobs in the same order, each eligible if
    ///    `lend` and the free GPUs not granted in pass 1 still cover it.
    ///
    /// With `shortcut`, pass 2 skips the per-job turns when no load can
    /// change (nothing to lend); the same order (a test checks it against
    /// the general loop).
    pub(crate) fn order_with(&mut self, lend: bool, shortcut: bool) -> FairnessDecision {
        let view = self.view;
        let Scratch {
            vcs,
            active,
            jobs,
            turns,
            ..
        } = &mut *self.scratch;
        let mut passes = Passes {
            view,
            jobs,
            vcs,
            active,
            turns,
            order: Vec::with_capacity(view.jobs.len()),
        };
        let granted = passes.within_quota();
        let lendable = u64::from(view.cluster.free_gpus).saturating_sub(granted);
        if shortcut && (!lend || lendable == 0) {
            passes.rest_by_load(lend, lendable);
        } else {
            passes.lend_rest(lend, lendable);
        }
        FairnessDecision {
            order: passes.order,
        }
    }
}

/// Where a VC's record is among a round's queues: at its id when the view
/// indexes VCs by id (`dense`), else found among the sorted `ids`.
struct Positions<'i> {
    dense: bool,
    ids: &'i [VcId],
}

impl Positions<'_> {
    /// The position of `vc`'s record.
    #[inline]
    fn of(&self, vc: VcId) -> usize {
        if self.dense {
            vc.0 as usize
        } else {
            self.ids.binary_search(&vc).unwrap_or(0)
        }
    }
}

/// Whether `view` lists its VCs indexed by id (then a job's VC is found by
/// index, and every listed VC gets a record: one without jobs is never
/// active, so covering it changes no answer); otherwise (or for a VC only a
/// job names) `ids` gets the sorted ids of the VCs `cover` says, to find
/// them by search.
fn cover_ids(view: &FairnessView, cover: Cover, ids: &mut Vec<VcId>) -> bool {
    let listed = view.vcs.len();
    let dense = view
        .vcs
        .iter()
        .enumerate()
        .all(|(i, v)| v.id.0 as usize == i)
        && view.jobs.iter().all(|j| (j.vc.0 as usize) < listed);
    ids.clear();
    if !dense {
        if cover == Cover::All {
            ids.extend(view.vcs.iter().map(|v| v.id));
        }
        ids.extend(view.jobs.iter().map(|j| j.vc));
        sort::by_key(ids, |id| [u64::from(id.0), 0, 0]);
        ids.dedup();
    }
    dense
}

/// One record per VC covered (`position` says which), in id order, with
/// no jobs yet.
fn fill_records(view: &FairnessView, position: &Positions<'_>, vcs: &mut Vec<VcQueue>) {
    vcs.clear();
    let count = if position.dense {
        view.vcs.len()
    } else {
        position.ids.len()
    };
    vcs.extend((0..count).map(|i| {
        let (id, usage) = if position.dense {
            (VcId(i as u32), Some(i))
        } else {
            let id = position.ids[i];
            (id, usage_index(view, id))
        };
        let held_gpus = usage
            .and_then(|u| view.vcs.get(u))
            .map_or(0, |u| u64::from(u.held_gpus));
        VcQueue {
            id,
            usage,
            held_gpus,
            asked_gpus: 0,
            quota_gpus: None,
            used: held_gpus,
            next: 0,
            end: 0,
        }
    }));
}

/// Groups the jobs of `view` by VC into `jobs` with a counting pass, each
/// VC's range in its record, keeping the view's order within each VC: the
/// host lists jobs by (submit time, id), so each queue is then FIFO
/// already; if not, each queue is sorted. Also counts what each VC asks.
fn group_jobs(
    view: &FairnessView,
    position: &Positions<'_>,
    vcs: &mut [VcQueue],
    jobs: &mut Vec<u32>,
) {
    jobs.clear();
    jobs.resize(view.jobs.len(), 0);
    for j in &view.jobs {
        vcs[position.of(j.vc)].end += 1;
    }
    let mut at = 0;
    for q in vcs.iter_mut() {
        q.next = at;
        at += q.end;
        q.end = q.next;
    }
    for (i, j) in view.jobs.iter().enumerate() {
        let q = &mut vcs[position.of(j.vc)];
        if let Some(slot) = jobs.get_mut(q.end) {
            *slot = i as u32;
        }
        q.end += 1;
        q.asked_gpus += u64::from(j.gpus);
    }
    // A bounded view shows only each VC's first jobs; the host's count of
    // all its pending GPUs is its real demand.
    for q in vcs.iter_mut() {
        if let Some(u) = q.usage.and_then(|i| view.vcs.get(i)) {
            q.asked_gpus = q.asked_gpus.max(u64::from(u.pending_gpus));
        }
    }
    let key = |i: &u32| view.jobs.get(*i as usize).map(|j| (j.submitted_s, j.id));
    if !view.jobs.is_sorted_by_key(|j| (j.submitted_s, j.id)) {
        for q in vcs.iter() {
            if let Some(queue) = jobs.get_mut(q.next..q.end) {
                sort::by_key(queue, |i| match key(i) {
                    Some((submitted_s, id)) => [1, submitted_s, id.0],
                    None => [0, 0, 0],
                });
            }
        }
    }
}

/// The two passes of [`Queues::order_with`] under way: the round's queues
/// and the order so far.
struct Passes<'v, 's> {
    view: &'v FairnessView,
    /// The jobs grouped by VC (indices into `view.jobs`).
    jobs: &'s [u32],
    vcs: &'s mut [VcQueue],
    /// The VCs with pending jobs.
    active: &'s [usize],
    turns: &'s mut BinaryHeap<Reverse<Turn>>,
    order: Vec<Ranked>,
}

/// The oldest job of `q` not yet ordered (`jobs` grouping `view`'s).
#[inline]
fn head<'v>(view: &'v FairnessView, jobs: &[u32], q: &VcQueue) -> Option<&'v PendingJob> {
    (q.next < q.end).then(|| &view.jobs[jobs[q.next] as usize])
}

/// The turn of `q` (record `index`), if it has a job not yet ordered.
#[inline]
fn turn(view: &FairnessView, jobs: &[u32], q: &VcQueue, index: usize) -> Option<Turn> {
    let job = head(view, jobs, q)?;
    Some(Turn {
        load: q.load(),
        head: (job.submitted_s, job.id),
        index,
    })
}

impl Passes<'_, '_> {
    /// Pass 1: within quota; the GPUs granted. A VC whose oldest job does
    /// not fit leaves the pass, so its later jobs cannot overtake that job.
    fn within_quota(&mut self) -> u64 {
        let (view, jobs, vcs) = (self.view, self.jobs, &mut *self.vcs);
        let all = self
            .active
            .iter()
            .filter_map(|&i| turn(view, jobs, &vcs[i], i));
        let mut current = start(self.turns, all);
        let mut granted = 0u64;
        while let Some(i) = current {
            let q = &mut vcs[i];
            let next = match head(view, jobs, q) {
                Some(job) if q.head_fits(u64::from(job.gpus)) => {
                    let gpus = u64::from(job.gpus);
                    self.order.push(Ranked {
                        job: job.id,
                        eligible: true,
                    });
                    q.next += 1;
                    q.used += gpus;
                    granted += gpus;
                    turn(view, jobs, q, i)
                }
                _ => None,
            };
            current = advance(self.turns, next);
        }
        granted
    }

    /// Pass 2 when nothing can take a GPU (a job of no GPUs aside): every
    /// VC's load stays as it is, so the turns take the VCs in load order,
    /// merging their queues by head only where loads tie. The same order
    /// as [`Passes::lend_rest`], without a heap operation per job where
    /// none ties.
    fn rest_by_load(&mut self, lend: bool, lendable: u64) {
        let (view, jobs, vcs) = (self.view, self.jobs, &mut *self.vcs);
        let mut rest: Vec<Turn> = self
            .active
            .iter()
            .filter_map(|&i| turn(view, jobs, &vcs[i], i))
            .collect();
        sort::by(&mut rest, &Turn::cmp);
        let mut at = 0;
        while at < rest.len() {
            let tied = rest[at..]
                .iter()
                .take_while(|t| by_load(t.load, rest[at].load) == Ordering::Equal)
                .count();
            let mut current = if tied == 1 {
                Some(rest[at].index)
            } else {
                start(self.turns, rest[at..at + tied].iter().copied())
            };
            while let Some(i) = current {
                let q = &mut vcs[i];
                if let Some(job) = head(view, jobs, q) {
                    self.order.push(Ranked {
                        job: job.id,
                        eligible: lend && u64::from(job.gpus) <= lendable,
                    });
                    q.next += 1;
                }
                current = if tied == 1 {
                    head(view, jobs, q).map(|_| i)
                } else {
                    advance(self.turns, turn(view, jobs, q, i))
                };
            }
            at += tied;
        }
    }

    /// Pass 2: the rest, each eligible on `lendable` GPUs if `lend`.
    fn lend_rest(&mut self, lend: bool, mut lendable: u64) {
        let (view, jobs, vcs) = (self.view, self.jobs, &mut *self.vcs);
        let all = self
            .active
            .iter()
            .filter_map(|&i| turn(view, jobs, &vcs[i], i));
        let mut current = start(self.turns, all);
        while let Some(i) = current {
            let q = &mut vcs[i];
            if let Some(job) = head(view, jobs, q) {
                let gpus = u64::from(job.gpus);
                let eligible = lend && gpus <= lendable;
                self.order.push(Ranked {
                    job: job.id,
                    eligible,
                });
                q.next += 1;
                if eligible {
                    lendable -= gpus;
                    q.used += gpus;
                }
            }
            current = advance(self.turns, turn(view, jobs, q, i));
        }
    }
}

/// The usage record of `vc` in `view` (normally at index `vc`).
#[allow(dead_code)] // `max-min` compiles this file too and has no use for it.
pub(crate) fn usage_of(view: &FairnessView, vc: VcId) -> Option<&VcUsage> {
    usage_index(view, vc).and_then(|i| view.vcs.get(i))
}

/// The index in `view.vcs` of the usage record of `vc` (normally `vc`).
fn usage_index(view: &FairnessView, vc: VcId) -> Option<usize> {
    match view.vcs.get(vc.0 as usize) {
        Some(v) if v.id == vc => Some(vc.0 as usize),
        _ => view.vcs.iter().position(|v| v.id == vc),
    }
}

impl VcQueue {
    /// The fraction of the quota in use as (numerator, denominator); an
    /// unlimited VC is at 0, a zero quota is infinitely full.
    fn load(&self) -> (u64, u64) {
        match self.quota_gpus {
            None => (0, 1),
            Some(0) => (1, 0),
            Some(q) => (self.used, q),
        }
    }

    /// Whether its oldest job stays within quota (or is the one oversized job
    /// a VC holding nothing may start).
    fn head_fits(&self, gpus: u64) -> bool {
        match self.quota_gpus {
            None => true,
            Some(q) => (self.used < q && self.used + gpus <= q) || (q > 0 && self.used == 0),
        }
    }
}

/// A VC's place in the serving order: lowest load first, then the older
/// oldest job (job ids are unique, so this is total).
#[derive(Clone, Copy, PartialEq, Eq)]
struct Turn {
    load: (u64, u64),
    head: (u64, JobId),
    index: usize,
}

/// Load `a` against load `b` (held over quota), by cross-multiplying: in u64
/// when every term fits in 32 bits (always, for GPU counts), else in u128.
fn by_load(a: (u64, u64), b: (u64, u64)) -> Ordering {
    if (a.0 | a.1 | b.0 | b.1) >> 32 == 0 {
        (a.0 * b.1).cmp(&(b.0 * a.1))
    } else {
        (u128::from(a.0) * u128::from(b.1)).cmp(&(u128::from(b.0) * u128::from(a.1)))
    }
}

impl Ord for Turn {
    fn cmp(&self, other: &Self) -> Ordering {
        by_load(self.load, other.load)
            .then(self.head.cmp(&other.head))
            .then(self.index.cmp(&other.index))
    }
}

impl PartialOrd for Turn {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Fills the serving order `turns` (a min-heap) with the VCs' turns and
/// takes the first VC to serve.
fn start(turns: &mut BinaryHeap<Reverse<Turn>>, all: impl Iterator<Item = Turn>) -> Option<usize> {
    turns.clear();
    // One push each: `extend` rebuilds the heap wholesale, dearer for the
    // handful of VCs a round usually has.
    for turn in all {
        turns.push(Reverse(turn));
    }
    turns.pop().map(|Reverse(t)| t.index)
}

/// The VC to serve after the current one was served; `next` is the current
/// VC's new turn, if it still takes part. It keeps going while it stays
/// first.
fn advance(turns: &mut BinaryHeap<Reverse<Turn>>, next: Option<Turn>) -> Option<usize> {
    match (next, turns.peek_mut()) {
        (Some(mine), Some(mut top)) if top.0 < mine => {
            Some(std::mem::replace(&mut top.0, mine).index)
        }
        (Some(mine), _) => Some(mine.index),
        (None, Some(top)) => Some(PeekMut::pop(top).0.index),
        (None, None) => None,
    }
}
