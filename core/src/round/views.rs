//! Building each slot's view from the scheduler's state.

use gangway_plugin_sdk::{
    FairnessView, JobId, Level, PendingJob, QueueOrder, RunningJob, ServerState, VcId, VcUsage,
};

use crate::job::{JobRecord, JobState};
use crate::queue::Queued;
use crate::scheduler::Scheduler;

impl Scheduler {
    /// Every VC's configuration and use.
    pub(crate) fn vc_usage(&self) -> Vec<VcUsage> {
        self.vcs
            .iter()
            .enumerate()
            .map(|(i, v)| VcUsage {
                id: VcId(u32::try_from(i).unwrap_or(u32::MAX)),
                quota_gpus: v.quota_gpus,
                weight: v.weight,
                held_gpus: v.held_gpus,
                pending_gpus: v.pending_gpus,
                attained_gpu_s: v.attained_gpu_s,
                pending_jobs: v.pending_jobs,
            })
            .collect()
    }

    /// A pending job as policies see it at `now`.
    pub(crate) fn pending_job(&self, job: &JobRecord, now: u64) -> PendingJob {
        self.queued(job).at(now)
    }

    /// A pending job's queue entry: as policies see it, and since when.
    pub(crate) fn queued(&self, job: &JobRecord) -> Queued {
        let topo = self.state.topology();
        let gpus = job.next_gpus();
        let since_s = match job.state {
            JobState::Pending { since_s, .. } => since_s,
            _ => self.last_round_s,
        };
        Queued {
            since_s,
            job: PendingJob {
                id: job.spec.id,
                vc: job.spec.vc,
                user: job.spec.user,
                gpus,
                submitted_s: job.spec.submitted_s,
                waiting_s: 0,
                attempts: job.attempts,
                attained_gpu_s: job.attained_gpu_s,
                min_level: topo.min_level_for(gpus).unwrap_or(Level::ANY),
                min_servers: topo.min_servers_for(gpus).unwrap_or(u32::MAX),
            },
        }
    }

    /// The fairness view: every pending job if the fairness policy shows no
    /// queue order (or the window is 0), else each VC's first jobs in that
    /// order; in (submit time, id) order either way.
    pub(crate) fn fairness_view(&self, now: u64) -> FairnessView {
        let windowed = self.view_window > 0 && *self.queues.order() != QueueOrder::All;
        let jobs: Vec<PendingJob> = if windowed {
            // The queue entries hold the jobs as the view shows them.
            self.queues.heads_by_submit(self.view_window, now)
        } else {
            self.pending
                .iter()
                .filter_map(|(_, id)| self.jobs.get(id))
                .map(|j| self.pending_job(j, now))
                .collect()
        };
        FairnessView {
            now_s: now,
            cluster: self.state.summary(),
            vcs: self.vc_usage(),
            jobs,
        }
    }

    /// Every server with its free GPUs, by id.
    pub(crate) fn server_states(&self) -> Vec<ServerState> {
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

    /// Every running job of a VC that `shown` accepts, by id, as the reclaim
    /// and defragment slots see it, except those this round started
    /// (`started`): a round never stops or moves what it just started.
    /// Written over `out`, whose records (and their parts' memory) are
    /// reused: a reclaim view lists every running job, round after round.
    pub(crate) fn running_jobs_into(
        &self,
        now: u64,
        started: &[crate::Start],
        shown: impl Fn(VcId) -> bool,
        out: &mut Vec<RunningJob>,
    ) {
        let started: rustc_hash::FxHashSet<JobId> = started.iter().map(|s| s.job).collect();
        let mut n = 0;
        let running = self
            .state
            .allocations()
            .iter()
            // The VC index first: the records of jobs not shown stay untouched.
            .filter(|(id, _)| self.jobs.vc_of(id).is_some_and(&shown) && !started.contains(id))
            .filter_map(|(id, placement)| {
                let job = self.jobs.get(id)?;
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
