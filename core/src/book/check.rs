//! The book's invariants: every job in exactly one state and in exactly
//! the indexes of that state, every running job holding exactly its
//! placement (fewer GPUs than it needs only once shrunk), the VC counters
//! equal to what their jobs hold and ask for.

use gangway_plugin_sdk::JobId;

use super::JobBook;
use crate::job::{JobRecord, JobState};
use crate::state::{ClusterState, InvariantViolation};

impl JobBook {
    /// Verifies every index against the job records, and the running jobs
    /// against the allocations of `state`.
    pub(crate) fn check(&self, state: &ClusterState) -> Result<(), InvariantViolation> {
        let mut counts = StateCounts::new(self.vcs.list().len());
        for (id, job) in self.records.iter() {
            self.check_job(*id, job, state, &mut counts)?;
        }
        self.check_indexes(&counts, state)?;
        self.check_vcs(counts)
    }

    /// Checks job `id`'s record against the indexes of its state (and
    /// `state`'s allocation, if it runs), counting it in `counts`.
    fn check_job(
        &self,
        id: JobId,
        job: &JobRecord,
        state: &ClusterState,
        counts: &mut StateCounts,
    ) -> Result<(), InvariantViolation> {
        let vc = job.spec.vc.0 as usize;
        if vc >= counts.vc_held.len() {
            return fail(format!("{id} is in unknown VC {}", job.spec.vc));
        }
        if job.probe.is_some_and(|(g, _)| g == 0 || g >= job.spec.gpus) {
            return fail(format!("{id} has a probe as large as its gang"));
        }
        match &job.state {
            JobState::Pending { .. } => {
                counts.pending += 1;
                self.check_queued(id, job)?;
                counts.vc_pending[vc].0 += job.next_gpus();
                counts.vc_pending[vc].1 += 1;
            }
            JobState::Delayed { until_s, .. } => {
                counts.delayed += 1;
                if !self.delayed.contains(&(*until_s, id)) {
                    return fail(format!("{id} is delayed but not filed"));
                }
            }
            JobState::AwaitingRetry(_) => {
                counts.awaiting += 1;
                if !self.awaiting_retry.contains(&id) {
                    return fail(format!("{id} awaits a retry decision but is not filed"));
                }
            }
            JobState::Running { choice, .. } => {
                counts.running += 1;
                let Some(p) = state.allocation(id) else {
                    return fail(format!("{id} is running but holds no GPUs"));
                };
                // A shrunk gang holds fewer than it needs, never more.
                if p.gpu_count() > job.next_gpus() || p != &choice.placement {
                    return fail(format!(
                        "{id} needs {} GPUs but holds {} (its placement: {})",
                        job.next_gpus(),
                        p.gpu_count(),
                        choice.placement.gpu_count()
                    ));
                }
                counts.vc_held[vc] += p.gpu_count();
            }
            JobState::Finished { .. } => counts.finished += 1,
        }
        Ok(())
    }

    /// Checks that pending job `id` is queued by submit time and in its
    /// VC's queue, with an entry up to date.
    fn check_queued(&self, id: JobId, job: &JobRecord) -> Result<(), InvariantViolation> {
        if !self.pending.contains(&(job.spec.submitted_s, id)) {
            return fail(format!("{id} is pending but not queued"));
        }
        match self.queues.get(job) {
            None => fail(format!("{id} is pending but not queued")),
            Some(q) if *q != self.queued(job) => fail(format!(
                "{id}'s queue entry is stale: {q:?}, the job is now {:?}",
                self.queued(job)
            )),
            Some(_) => Ok(()),
        }
    }

    /// Checks the indexes' sizes against the jobs counted in `counts`, and
    /// the running jobs against `state`'s allocations.
    fn check_indexes(
        &self,
        counts: &StateCounts,
        state: &ClusterState,
    ) -> Result<(), InvariantViolation> {
        let StateCounts {
            running,
            pending,
            delayed,
            awaiting,
            finished,
            ..
        } = *counts;
        if pending != self.pending.len()
            || pending != self.queues.len()
            || delayed != self.delayed.len()
            || awaiting != self.awaiting_retry.len()
        {
            return fail(format!(
                "indexes disagree with job states: {pending} pending jobs, {} queued by \
                 submit, {} by VC; {delayed} delayed, {} filed; {awaiting} awaiting retry, {} filed",
                self.pending.len(),
                self.queues.len(),
                self.delayed.len(),
                self.awaiting_retry.len()
            ));
        }
        if pending + running + delayed + awaiting + finished != self.records.len() {
            return fail("a job is in no state or in two".into());
        }
        if !self.records.index_matches() {
            return fail("the running jobs' index disagrees with their records".into());
        }
        let sizes: u32 = self.pending_sizes.values().sum();
        if sizes as usize != pending {
            return fail(format!("{sizes} pending sizes for {pending} pending jobs"));
        }
        if running != state.allocations().len() {
            return fail(format!(
                "{running} jobs running but {} allocations",
                state.allocations().len()
            ));
        }
        Ok(())
    }

    /// Checks each VC's counters against what its jobs hold and ask for.
    fn check_vcs(&self, counts: StateCounts) -> Result<(), InvariantViolation> {
        let vcs = self.vcs.list();
        for ((v, held), (pgpus, pjobs)) in vcs.iter().zip(counts.vc_held).zip(counts.vc_pending) {
            if v.held_gpus != held {
                return fail(format!(
                    "VC {} books {} GPUs, holds {held}",
                    v.name, v.held_gpus
                ));
            }
            if v.pending_gpus != pgpus || v.pending_jobs != pjobs {
                return fail(format!(
                    "VC {} books {} pending jobs of {} GPUs, has {pjobs} of {pgpus}",
                    v.name, v.pending_jobs, v.pending_gpus
                ));
            }
        }
        Ok(())
    }
}

/// A broken invariant, described.
fn fail(message: String) -> Result<(), InvariantViolation> {
    Err(InvariantViolation(message))
}

/// What [`JobBook::check`] counts over the records.
struct StateCounts {
    /// Jobs in each state.
    running: usize,
    pending: usize,
    delayed: usize,
    awaiting: usize,
    finished: usize,
    /// GPUs each VC's running jobs hold.
    vc_held: Vec<u32>,
    /// GPUs and jobs each VC has pending.
    vc_pending: Vec<(u32, u32)>,
}

impl StateCounts {
    /// Nothing counted yet, over `vcs` VCs.
    fn new(vcs: usize) -> Self {
        StateCounts {
            running: 0,
            pending: 0,
            delayed: 0,
            awaiting: 0,
            finished: 0,
            vc_held: vec![0; vcs],
            vc_pending: vec![(0, 0); vcs],
        }
    }
}
