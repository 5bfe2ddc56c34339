//! The two passes of `vc-quota` over per-VC FIFO queues, given each VC's
//! quota (see the crate docs of `vc-quota` for the rule).
//!
//! One implementation for two policies: `vc-quota` passes its effective
//! quotas, `max-min` (which compiles this same file with `#[path]`) passes
//! its fair shares. It is shared as a source file rather than through a
//! Cargo dependency because every policy crate exports its Wasm interface
//! with `export_fairness!`: linking `vc-quota` into `max-min` would put two
//! definitions of the same exports into one module.

use std::cmp::{Ordering, Reverse};
use std::collections::binary_heap::PeekMut;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};

use gangway_plugin_sdk::{FairnessDecision, JobId, PendingJob, Ranked, RoundView, VcId};

/// One VC's input to [`order_by_quotas`].
pub(crate) struct VcLimit {
    /// The VC.
    pub(crate) vc: VcId,
    /// Its quota in GPUs; `None` means unlimited.
    pub(crate) quota_gpus: Option<u64>,
    /// The GPUs it holds now.
    pub(crate) held_gpus: u64,
}

/// Orders the pending jobs of `view` by the two passes:
///
/// 1. **Within quota**: most under-served VC first (smallest fraction of its
///    quota in use; ties: the older oldest job, then the earlier entry of
///    `vcs`), its oldest job eligible while the VC stays within its quota
///    (or it is the one oversized job of a VC holding nothing); a VC whose
///    oldest job does not fit leaves the pass (FIFO within a VC).
/// 2. **Lending**: the remaining jobs in the same order, each eligible if
///    `lend` and the free GPUs not granted in pass 1 still cover it.
///
/// `vcs` lists each VC once (callers pass them by VC id); jobs of a VC not
/// listed are left out of the answer.
pub(crate) fn order_by_quotas(view: &RoundView, vcs: &[VcLimit], lend: bool) -> FairnessDecision {
    let index: BTreeMap<VcId, usize> = vcs.iter().enumerate().map(|(i, l)| (l.vc, i)).collect();
    let mut tenants: Vec<Tenant<'_>> = vcs
        .iter()
        .map(|l| Tenant {
            quota: l.quota_gpus,
            used: l.held_gpus,
            queue: VecDeque::new(),
        })
        .collect();
    let mut jobs: Vec<&PendingJob> = view.jobs.iter().collect();
    jobs.sort_by_key(|j| (j.submitted_s, j.id));
    for j in jobs {
        if let Some(&i) = index.get(&j.vc) {
            tenants[i].queue.push_back(j);
        }
    }
    FairnessDecision {
        order: serve(&mut tenants, u64::from(view.cluster.free_gpus), lend),
    }
}

/// One VC during a round: its limit, GPUs counted so far, and its FIFO queue.
struct Tenant<'a> {
    quota: Option<u64>,
    used: u64,
    queue: VecDeque<&'a PendingJob>,
}

impl Tenant<'_> {
    /// The fraction of the quota in use as (numerator, denominator); an
    /// unlimited VC is at 0, a zero quota is infinitely full.
    fn load(&self) -> (u64, u64) {
        match self.quota {
            None => (0, 1),
            Some(0) => (1, 0),
            Some(q) => (self.used, q),
        }
    }

    /// Whether its oldest job stays within quota (or is the one oversized job
    /// a VC holding nothing may start).
    fn head_fits(&self, gpus: u64) -> bool {
        match self.quota {
            None => true,
            Some(q) => (self.used < q && self.used + gpus <= q) || (q > 0 && self.used == 0),
        }
    }

    /// Its place in the serving order, if it has jobs left.
    fn turn(&self, index: usize) -> Option<Turn> {
        let head = self.queue.front()?;
        Some(Turn {
            load: self.load(),
            head: (head.submitted_s, head.id),
            index,
        })
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

impl Ord for Turn {
    fn cmp(&self, other: &Self) -> Ordering {
        let (a, b) = (self.load, other.load);
        (u128::from(a.0) * u128::from(b.1))
            .cmp(&(u128::from(b.0) * u128::from(a.1)))
            .then(self.head.cmp(&other.head))
            .then(self.index.cmp(&other.index))
    }
}

impl PartialOrd for Turn {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// The two passes over the VCs' queues (see the crate docs).
fn serve(tenants: &mut [Tenant<'_>], free_gpus: u64, lend: bool) -> Vec<Ranked> {
    let mut order = Vec::with_capacity(tenants.iter().map(|t| t.queue.len()).sum());
    // Pass 1: within quota. A VC whose oldest job does not fit leaves the
    // pass, so its later jobs cannot overtake that job.
    let mut turns = Turns::new(tenants);
    let mut granted = 0u64;
    while let Some(i) = turns.current {
        let t = &mut tenants[i];
        let next = match t.queue.front().copied() {
            Some(job) if t.head_fits(u64::from(job.gpus)) => {
                t.queue.pop_front();
                t.used += u64::from(job.gpus);
                granted += u64::from(job.gpus);
                order.push(Ranked {
                    job: job.id,
                    eligible: true,
                });
                t.turn(i)
            }
            _ => None,
        };
        turns.advance(next);
    }
    // Pass 2: the rest, on lent GPUs if allowed.
    let mut turns = Turns::new(tenants);
    let mut lendable = free_gpus.saturating_sub(granted);
    while let Some(i) = turns.current {
        let t = &mut tenants[i];
        if let Some(job) = t.queue.pop_front() {
            let gpus = u64::from(job.gpus);
            let eligible = lend && gpus <= lendable;
            if eligible {
                lendable -= gpus;
                t.used += gpus;
            }
            order.push(Ranked {
                job: job.id,
                eligible,
            });
        }
        turns.advance(t.turn(i));
    }
    order
}

/// The serving order of the VCs: the one being served and a min-heap of the
/// others' turns.
struct Turns {
    current: Option<usize>,
    waiting: BinaryHeap<Reverse<Turn>>,
}

impl Turns {
    fn new(tenants: &[Tenant<'_>]) -> Turns {
        let mut waiting: BinaryHeap<Reverse<Turn>> = tenants
            .iter()
            .enumerate()
            .filter_map(|(i, t)| t.turn(i).map(Reverse))
            .collect();
        let current = waiting.pop().map(|Reverse(t)| t.index);
        Turns { current, waiting }
    }

    /// Moves on after the current VC was served; `next` is its new turn, if
    /// it still takes part. It keeps going while it stays first.
    fn advance(&mut self, next: Option<Turn>) {
        self.current = match (next, self.waiting.peek_mut()) {
            (Some(mine), Some(mut top)) if top.0 < mine => {
                Some(std::mem::replace(&mut top.0, mine).index)
            }
            (Some(mine), _) => Some(mine.index),
            (None, Some(top)) => Some(PeekMut::pop(top).0.index),
            (None, None) => None,
        };
    }
}
