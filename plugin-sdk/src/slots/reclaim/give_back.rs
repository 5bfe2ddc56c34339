//! What [`RunningScope::GiveBack`](crate::RunningScope::GiveBack) shows of a
//! reclaim view: the running jobs each borrowing VC could give back, newest
//! first, as far as it borrows.

use std::collections::BTreeMap;

use super::ReclaimView;
use crate::ids::VcId;
use crate::view::RunningJob;

impl ReclaimView {
    /// The running jobs a newest-first give-back takes: for each VC, of its
    /// running jobs that ran at least `min_run_s` seconds (by `now_s`),
    /// latest start first (then highest id), every job the VC can stop and
    /// keep at least its quota (`quota_gpus`, none counting as 0), counting
    /// down from the GPUs it holds (`held_gpus`); the walk stops once no job
    /// left could be taken. In that order, VC by VC (by id).
    ///
    /// This is exactly what a host shows under
    /// [`RunningScope::GiveBack`](crate::RunningScope::GiveBack).
    ///
    /// ```
    /// use gangway_plugin_sdk::*;
    ///
    /// let job = |id, gpus, started_s| RunningJob {
    ///     id: JobId(id), vc: VcId(0), gpus, started_s, ..RunningJob::default()
    /// };
    /// // VC 0 holds 14 GPUs against a quota of 8: it borrows 6.
    /// let view = ReclaimView {
    ///     now_s: 100,
    ///     vcs: vec![VcUsage { id: VcId(0), quota_gpus: Some(8), held_gpus: 14, ..VcUsage::default() }],
    ///     running: vec![job(1, 8, 10), job(2, 4, 20), job(3, 2, 30)],
    ///     ..ReclaimView::default()
    /// };
    /// let ids = |jobs: Vec<&RunningJob>| jobs.iter().map(|j| j.id.0).collect::<Vec<_>>();
    /// // Newest first: job 3 (2 GPUs, 12 left), job 2 (4 GPUs, 8 left);
    /// // job 1 would take the VC below its quota.
    /// assert_eq!(ids(view.give_back(0)), [3, 2]);
    /// // Job 3 is too young to stop: job 2, then 10 left, and no job fits in 2.
    /// assert_eq!(ids(view.give_back(80)), [2]);
    /// ```
    pub fn give_back(&self, min_run_s: u64) -> Vec<&RunningJob> {
        let mut by_vc: BTreeMap<VcId, Vec<&RunningJob>> = BTreeMap::new();
        for j in &self.running {
            if self.now_s.saturating_sub(j.started_s) >= min_run_s {
                by_vc.entry(j.vc).or_default().push(j);
            }
        }
        let mut held: BTreeMap<VcId, u64> = BTreeMap::new();
        for v in &self.vcs {
            held.insert(v.id, u64::from(v.held_gpus));
        }
        let mut out = Vec::new();
        for (vc, mut jobs) in by_vc {
            let floor = self
                .vcs
                .get(vc.0 as usize)
                .and_then(|v| v.quota_gpus)
                .map_or(0, u64::from);
            let held = held.get(&vc).copied().unwrap_or(0);
            crate::sort::by_key(&mut jobs, |j| [!j.started_s, !j.id.0, 0]);
            let mut sizes = GpuCounts::default();
            for j in &jobs {
                sizes.add(j.gpus);
            }
            give_back_walk(
                jobs.into_iter().map(|j| (j, j.gpus)),
                held,
                floor,
                &mut sizes,
                |j| out.push(j),
            );
        }
        out
    }

    /// This view as a host shows it under
    /// [`RunningScope::GiveBack`](crate::RunningScope::GiveBack): `running`
    /// only [`ReclaimView::give_back`]`(min_run_s)`, by id; `servers` only
    /// those with free GPUs or running one of them; `waiting` only the jobs
    /// that wait for GPUs (no capacity, fragmentation or a reservation).
    /// For tests of policies that declare the scope.
    pub fn as_give_back(&self, min_run_s: u64) -> ReclaimView {
        let mut running: Vec<RunningJob> = self.give_back(min_run_s).into_iter().cloned().collect();
        running.sort_unstable_by_key(|j| j.id);
        let servers = self
            .servers
            .iter()
            .filter(|s| {
                s.free > 0
                    || running
                        .iter()
                        .any(|j| j.parts.iter().any(|(id, _)| *id == s.id))
            })
            .copied()
            .collect();
        ReclaimView {
            now_s: self.now_s,
            cluster: self.cluster.clone(),
            vcs: self.vcs.clone(),
            servers,
            running,
            waiting: self
                .waiting
                .iter()
                .filter(|w| w.reason.waits_for_gpus())
                .copied()
                .collect(),
        }
    }
}

/// How many of a VC's jobs hold each GPU count: what a give-back walk has
/// not read yet.
#[doc(hidden)]
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GpuCounts(BTreeMap<u32, usize>);

impl GpuCounts {
    /// One more job of `gpus` GPUs.
    pub fn add(&mut self, gpus: u32) {
        *self.0.entry(gpus).or_insert(0) += 1;
    }

    /// One job of `gpus` GPUs fewer.
    pub fn remove(&mut self, gpus: u32) {
        if let Some(n) = self.0.get_mut(&gpus) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.0.remove(&gpus);
            }
        }
    }

    /// The smallest GPU count held by a job, if any.
    pub fn smallest(&self) -> Option<u32> {
        self.0.keys().next().copied()
    }
}

/// The give-back walk over one VC's jobs, newest first, each with its GPUs:
/// `sizes` counts the jobs not read yet (all of them at first); a job is
/// taken (`take`) while the VC, counted down from `held`, keeps at least
/// `floor` GPUs without it; the walk ends when even the smallest job left
/// would take it below. Shared by [`ReclaimView::give_back`] and hosts that
/// walk their own index.
#[doc(hidden)]
pub fn give_back_walk<J>(
    jobs: impl Iterator<Item = (J, u32)>,
    held: u64,
    floor: u64,
    sizes: &mut GpuCounts,
    mut take: impl FnMut(J),
) {
    let mut h = held;
    for (job, gpus) in jobs {
        let can_give = sizes
            .smallest()
            .is_some_and(|g| h >= floor.saturating_add(u64::from(g)));
        if !can_give {
            break;
        }
        sizes.remove(gpus);
        let g = u64::from(gpus);
        if h >= floor.saturating_add(g) {
            h = h.saturating_sub(g);
            take(job);
        }
    }
}
