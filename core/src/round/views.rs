//! Building each slot's view from the round's state.

use gangway_plugin_sdk::{FairnessView, JobId, RunningJob, ServerState, VcId, WaitingJob};

use super::{Placed, Round};
use crate::job::JobState;

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

    /// Every running job of a VC that `shown` accepts, by id, as the reclaim
    /// and defragment slots see it, except those this round started
    /// (`started`): a round never stops or moves what it just started.
    /// Written over `out`, whose records (and their parts' memory) are
    /// reused: a reclaim view lists every running job, round after round.
    pub(super) fn running_jobs_into(
        &self,
        started: &[crate::Start],
        shown: impl Fn(VcId) -> bool,
        out: &mut Vec<RunningJob>,
    ) {
        let now = self.now;
        let started: rustc_hash::FxHashSet<JobId> = started.iter().map(|s| s.job).collect();
        let mut n = 0;
        let running = self
            .state
            .allocations()
            .iter()
            // The VC index first: the records of jobs not shown stay untouched.
            .filter(|(id, _)| self.book.vc_of(id).is_some_and(&shown) && !started.contains(id))
            .filter_map(|(id, placement)| {
                let job = self.book.get(id)?;
                let JobState::Running { started_s, .. } = job.state else {
                    return None;
                };
                Some((id, placement, job, started_s))
            });
        for (id, placement, job, started_s) in running {
            if n == out.len() {
                out.push(RunningJob::default());
            }
            let gpus = placement.gpu_count();
            let mut parts = std::mem::take(&mut out[n].parts);
            parts.clear();
            parts.extend(
                placement
                    .parts
                    .iter()
                    .map(|p| (p.server, p.gpus.count_ones())),
            );
            out[n] = RunningJob {
                id: *id,
                vc: job.spec.vc,
                user: job.spec.user,
                gpus,
                submitted_s: job.spec.submitted_s,
                started_s,
                attempts: job.attempts,
                attained_gpu_s: job.attained_gpu_s
                    + u64::from(gpus) * now.saturating_sub(started_s),
                parts,
            };
            n += 1;
        }
        out.truncate(n);
    }
}
