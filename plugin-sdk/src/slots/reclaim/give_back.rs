//! What [`RunningScope::GiveBack`](crate::RunningScope::GiveBack) shows of a
//! reclaim view: the running jobs each borrowing VC could give back, newest
//! first, as far as it borrows.

use std::collections::BTreeMap;

use super::ReclaimView;
use crate::gpu_types::TypesView;
use crate::ids::{GpuTypeId, JobId, VcId};
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
        self.give_back_by(min_run_s, |_| None, |_, _| None)
    }

    /// [`ReclaimView::give_back`] for a policy that takes the GPU types,
    /// `types` beside this view (contract 2.2): a VC with quotas per type
    /// ([`TypesView::has_type_quotas`]) gives back on each type on its
    /// own, by the same walk over its jobs running on that type, counting
    /// down from the GPUs of the type it holds and keeping at least its
    /// nominal quota of it; a VC with a pooled quota as in `give_back`. In
    /// VC order, then type order.
    ///
    /// This is exactly what a host shows a policy that takes the types
    /// under [`RunningScope::GiveBack`](crate::RunningScope::GiveBack).
    ///
    /// ```
    /// use gangway_plugin_sdk::*;
    ///
    /// let (a100, v100) = (GpuTypeId(0), GpuTypeId(1));
    /// let job = |id, gpus, started_s| RunningJob {
    ///     id: JobId(id), vc: VcId(0), gpus, started_s, ..RunningJob::default()
    /// };
    /// let on = |job, t| JobTypes { job: JobId(job), allowed: vec![t], running: Some(t), class: 0 };
    /// let quota = |gpu_type, held_gpus, nominal| VcTypeUsage {
    ///     vc: VcId(0), gpu_type, held_gpus, nominal_gpus: Some(nominal), borrowing_limit_gpus: None,
    /// };
    /// // VC 0 holds 12 A100s against a nominal 8, and 4 V100s against 8:
    /// // 16 GPUs against 16 in all, but it borrows 4 A100s.
    /// let view = ReclaimView {
    ///     now_s: 100,
    ///     vcs: vec![VcUsage { id: VcId(0), quota_gpus: Some(16), held_gpus: 16, ..VcUsage::default() }],
    ///     running: vec![job(1, 8, 10), job(2, 4, 20), job(3, 4, 30)],
    ///     ..ReclaimView::default()
    /// };
    /// let types = TypesView {
    ///     jobs: vec![on(1, a100), on(2, a100), on(3, v100)],
    ///     vcs: vec![quota(a100, 12, 8), quota(v100, 4, 8)],
    ///     ..TypesView::default()
    /// };
    /// let ids = |jobs: Vec<&RunningJob>| jobs.iter().map(|j| j.id.0).collect::<Vec<_>>();
    /// assert!(view.give_back(0).is_empty(), "pooled, it borrows nothing");
    /// assert_eq!(ids(view.give_back_typed(0, &types)), [2]);
    /// ```
    pub fn give_back_typed(&self, min_run_s: u64, types: &TypesView) -> Vec<&RunningJob> {
        let type_of = |j: &RunningJob| {
            types
                .has_type_quotas(j.vc)
                .then(|| types.job(j.id).and_then(|t| t.running).unwrap_or_default())
        };
        let held_floor = |vc: VcId, t: GpuTypeId| {
            types
                .vc_type(vc, t)
                .map(|u| (u64::from(u.held_gpus), u.nominal_gpus.map_or(0, u64::from)))
        };
        self.give_back_by(min_run_s, type_of, |vc, t| {
            t.and_then(|t| held_floor(vc, t))
        })
    }

    /// The give-back walk over each account of the running jobs: a VC
    /// (`type_of` gives `None`) or a VC's use of one type. An account's
    /// held GPUs and floor are `per_type`'s, else the VC's (`held_gpus`,
    /// `quota_gpus`). In account order.
    fn give_back_by(
        &self,
        min_run_s: u64,
        type_of: impl Fn(&RunningJob) -> Option<GpuTypeId>,
        per_type: impl Fn(VcId, Option<GpuTypeId>) -> Option<(u64, u64)>,
    ) -> Vec<&RunningJob> {
        let mut by_account: BTreeMap<(VcId, Option<GpuTypeId>), Vec<&RunningJob>> = BTreeMap::new();
        for j in &self.running {
            if self.now_s.saturating_sub(j.started_s) >= min_run_s {
                by_account.entry((j.vc, type_of(j))).or_default().push(j);
            }
        }
        let mut out = Vec::new();
        for ((vc, t), mut jobs) in by_account {
            let (held, floor) = per_type(vc, t).unwrap_or_else(|| {
                let v = self.vcs.iter().find(|v| v.id == vc);
                (
                    v.map_or(0, |v| u64::from(v.held_gpus)),
                    self.vcs
                        .get(vc.0 as usize)
                        .and_then(|v| v.quota_gpus)
                        .map_or(0, u64::from),
                )
            });
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
        self.showing(self.give_back(min_run_s))
    }

    /// This view as a host shows it under
    /// [`RunningScope::GiveBack`](crate::RunningScope::GiveBack) to a
    /// policy that takes the GPU types: as [`ReclaimView::as_give_back`],
    /// with [`ReclaimView::give_back_typed`]'s running jobs. For tests of
    /// policies that declare the scope and take the types (the host also
    /// shows `types` only for the jobs left and, if it gave the servers'
    /// types, only for the servers left: [`TypesView::shown_in`]).
    pub fn as_give_back_typed(&self, min_run_s: u64, types: &TypesView) -> ReclaimView {
        self.showing(self.give_back_typed(min_run_s, types))
    }

    /// This view with only `running` (by id), the servers with free GPUs
    /// or running one of them, and the waiting jobs that wait for GPUs.
    fn showing(&self, running: Vec<&RunningJob>) -> ReclaimView {
        let mut running: Vec<RunningJob> = running.into_iter().cloned().collect();
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

impl TypesView {
    /// These types as a host shows them beside `shown`, a reclaim view
    /// made of `full` (as [`ReclaimView::as_give_back_typed`] makes it):
    /// the types of `shown`'s jobs only, and, if these give the servers'
    /// types (in `full`'s server order), those of `shown`'s servers.
    pub fn shown_in(&self, full: &ReclaimView, shown: &ReclaimView) -> TypesView {
        let mut ids: Vec<JobId> = shown.waiting.iter().map(|w| w.job.id).collect();
        ids.extend(shown.running.iter().map(|j| j.id));
        ids.sort_unstable();
        let servers = if self.servers.is_empty() {
            Vec::new()
        } else {
            shown
                .servers
                .iter()
                .filter_map(|s| {
                    let at = full.servers.iter().position(|f| f.id == s.id)?;
                    self.servers.get(at).copied()
                })
                .collect()
        };
        TypesView {
            types: self.types.clone(),
            jobs: self
                .jobs
                .iter()
                .filter(|j| ids.binary_search(&j.job).is_ok())
                .cloned()
                .collect(),
            vcs: self.vcs.clone(),
            speeds: self.speeds.clone(),
            servers,
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
