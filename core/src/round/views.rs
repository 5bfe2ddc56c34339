//! Building each slot's view from the round's state.

use gangway_plugin_sdk::{
    FairnessView, GpuCounts, GpuTypeId, JobId, RunningJob, ServerState, VcId, VcUsage, WaitingJob,
    give_back_walk,
};

use super::borrowing::Borrowing;
use super::{Placed, Round};
use crate::book::{RunningIndex, Started};

impl Round<'_> {
    /// The fairness view: every pending job if the fairness policy shows no
    /// queue order (or the window is 0), else each VC's first jobs in that
    /// order; in (submit time, id) order either way.
    pub(super) fn fairness_view(&self) -> FairnessView {
        FairnessView {
            now_s: self.now,
            cluster: self.state.summary(),
            vcs: self.book.vc_usage(),
            jobs: self.book.pending_view(self.view_window, self.now),
        }
    }

    /// Every server with its free GPUs, by id.
    pub(super) fn server_states(&self) -> Vec<ServerState> {
        self.state
            .topology()
            .servers()
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let id = crate::ServerId(u32::try_from(i).unwrap_or(u32::MAX));
                ServerState {
                    id,
                    domain: s.ancestors.last().map_or(0, |d| d.0),
                    gpus: s.gpus,
                    free: self.state.avail(id),
                }
            })
            .collect()
    }

    /// The waiting jobs of the view, in fairness order, with their reasons
    /// and limits. A job with a reason is still pending (a job that starts
    /// loses its reason), and is as the round's view shows it.
    pub(super) fn waiting_jobs(&self, view: &FairnessView, placed: &Placed) -> Vec<WaitingJob> {
        placed
            .order
            .iter()
            .filter_map(|id| {
                let reason = *placed.reasons.get(id)?;
                let pending = *view.jobs.get(*placed.index.get(id)?)?;
                let limit =
                    placed.limits.get(id).copied().unwrap_or_else(|| {
                        gangway_plugin_sdk::SpreadLimit::new(pending.min_level, 0)
                    });
                Some(WaitingJob {
                    job: pending,
                    reason,
                    limit,
                })
            })
            .collect()
    }

    /// Every running job that `shown` accepts, by id, as the reclaim
    /// and defragment slots see it, except those this round started
    /// (`started`): a round never stops or moves what it just started; nor
    /// foreign load, which the engine runs on its own.
    /// Written over `out`, whose records (and their parts' memory) are
    /// reused: a reclaim view lists every running job, round after round.
    pub(super) fn running_jobs_into(
        &self,
        started: &[crate::Start],
        shown: impl Fn(&RunningJob) -> bool,
        out: &mut Vec<RunningJob>,
    ) {
        let now = self.now;
        let min_run_s = self.min_run_s;
        let mut started: Vec<JobId> = started.iter().map(|s| s.job).collect();
        started.sort_unstable();
        let mut n = 0;
        let running = self.book.running().values().filter(|r| {
            shown(r)
                && crate::book::stoppable(r)
                && started.binary_search(&r.id).is_err()
                && now.saturating_sub(r.started_s) >= min_run_s
        });
        for r in running {
            if n == out.len() {
                out.push(RunningJob::default());
            }
            let job = &mut out[n];
            job.clone_from(r);
            // The index holds what the job attained before this attempt.
            job.attained_gpu_s = crate::book::attained_at(r, now);
            n = n.saturating_add(1);
        }
        out.truncate(n);
    }

    /// The running jobs [`RunningScope::GiveBack`] shows, by id, written
    /// over `out` as [`Round::running_jobs_into`] does: for each VC that
    /// borrows (`borrowing`), what [`ReclaimView::give_back`] takes of its
    /// jobs that this round did not start (per type, as
    /// [`ReclaimView::give_back_typed`] does, for a VC that borrows per
    /// type), read newest first from the book's index (a pooled VC's walk
    /// reads only as far as it borrows, not every running job).
    ///
    /// [`RunningScope::GiveBack`]: gangway_plugin_sdk::RunningScope::GiveBack
    /// [`ReclaimView::give_back`]: gangway_plugin_sdk::ReclaimView::give_back
    /// [`ReclaimView::give_back_typed`]: gangway_plugin_sdk::ReclaimView::give_back_typed
    pub(super) fn give_back_into(
        &self,
        vcs: &[VcUsage],
        started: &[crate::Start],
        borrowing: &Borrowing,
        min_run_s: u64,
        out: &mut Vec<RunningJob>,
    ) {
        let now = self.now;
        let min_run_s = min_run_s.max(self.min_run_s);
        let mut started: Vec<JobId> = started.iter().map(|s| s.job).collect();
        started.sort_unstable();
        let index = self.book.running_index();
        // Neither shown nor counted: this round's starts (started now) and
        // jobs younger than `min_run_s`, all at the newest end of a VC.
        let hidden = |j: &Started| {
            started.binary_search(&j.id).is_ok() || now.saturating_sub(j.started_s) < min_run_s
        };
        let newest_hidden = now.saturating_sub(min_run_s.saturating_sub(1)).min(now);
        let mut taken: Vec<JobId> = Vec::new();
        for v in vcs.iter().filter(|v| borrowing.vc(v.id)) {
            if borrowing.has_type_quotas(v.id) {
                Self::give_back_types(v.id, borrowing, &hidden, index, &mut taken);
                continue;
            }
            let mut sizes = index.sizes(v.id);
            for j in index
                .newest_first(v.id)
                .take_while(|j| j.started_s >= newest_hidden)
                .filter(|j| hidden(j))
            {
                sizes.remove(j.gpus);
            }
            let floor = vcs
                .get(v.id.index())
                .and_then(|x| x.quota_gpus)
                .map_or(0, u64::from);
            give_back_walk(
                index
                    .newest_first(v.id)
                    .filter(|j| !hidden(j))
                    .map(|j| (j.id, j.gpus)),
                u64::from(v.held_gpus),
                floor,
                &mut sizes,
                |id| taken.push(id),
            );
        }
        taken.sort_unstable();
        let taken: Vec<&RunningJob> = taken
            .iter()
            .filter_map(|id| index.by_id().get(id))
            .collect();
        out.truncate(taken.len());
        for (i, r) in taken.into_iter().enumerate() {
            if i == out.len() {
                out.push(RunningJob::default());
            }
            if let Some(job) = out.get_mut(i) {
                job.clone_from(r);
                job.attained_gpu_s = crate::book::attained_at(r, now);
            }
        }
    }

    /// The give-back walk of VC `vc`, which has quotas per type, on each
    /// type it borrows: over its jobs running on the type and not
    /// `hidden`, newest first, counting down from what it holds of the type
    /// and keeping its nominal quota of it; each job taken is pushed on
    /// `taken`. (It reads every running job of the VC: a VC's jobs of one
    /// type are not filed apart.)
    fn give_back_types(
        vc: VcId,
        borrowing: &Borrowing,
        hidden: &impl Fn(&Started) -> bool,
        index: &RunningIndex,
        taken: &mut Vec<JobId>,
    ) {
        let type_of = |j: &Started| index.by_id().get(&j.id).map(|r| index.type_of(r));
        for t in (0..borrowing.types()).filter_map(|t| u8::try_from(t).ok().map(GpuTypeId)) {
            let Some(u) = borrowing.type_use(vc, t) else {
                continue;
            };
            let floor = u64::from(u.nominal_gpus.unwrap_or(0));
            if u64::from(u.held_gpus) <= floor {
                continue;
            }
            let jobs = || {
                index
                    .newest_first(vc)
                    .filter(move |j| !hidden(j) && type_of(j) == Some(t))
            };
            let mut sizes = GpuCounts::default();
            for j in jobs() {
                sizes.add(j.gpus);
            }
            give_back_walk(
                jobs().map(|j| (j.id, j.gpus)),
                u64::from(u.held_gpus),
                floor,
                &mut sizes,
                |id| taken.push(id),
            );
        }
    }
}
