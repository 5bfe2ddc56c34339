//! The book's invariants: every job in exactly one state and in exactly
//! the indexes of that state, every running job holding exactly its GPUs,
//! the VC counters equal to what their jobs hold and ask for.

use super::JobBook;
use crate::job::JobState;
use crate::state::{ClusterState, InvariantViolation};

impl JobBook {
    /// Verifies every index against the job records, and the running jobs
    /// against the allocations of `state`.
    pub(crate) fn check(&self, state: &ClusterState) -> Result<(), InvariantViolation> {
        let fail = |m: String| Err(InvariantViolation(m));
        let vcs = self.vcs.list();
        let mut vc_held = vec![0u32; vcs.len()];
        let mut vc_pending = vec![(0u32, 0u32); vcs.len()];
        let (mut running, mut pending, mut delayed, mut awaiting, mut finished) = (0, 0, 0, 0, 0);
        for (id, job) in self.records.iter() {
            let vc = job.spec.vc.0 as usize;
            if vc >= vcs.len() {
                return fail(format!("{id} is in unknown VC {}", job.spec.vc));
            }
            if job.probe.is_some_and(|(g, _)| g == 0 || g >= job.spec.gpus) {
                return fail(format!("{id} has a probe as large as its gang"));
            }
            match &job.state {
                JobState::Pending { .. } => {
                    pending += 1;
                    if !self.pending.contains(&(job.spec.submitted_s, *id)) {
                        return fail(format!("{id} is pending but not queued"));
                    }
                    match self.queues.get(job) {
                        None => return fail(format!("{id} is pending but not queued")),
                        Some(q) if *q != self.queued(job) => {
                            return fail(format!(
                                "{id}'s queue entry is stale: {q:?}, the job is now {:?}",
                                self.queued(job)
                            ));
                        }
                        Some(_) => {}
                    }
                    vc_pending[vc].0 += job.next_gpus();
                    vc_pending[vc].1 += 1;
                }
                JobState::Delayed { until_s, .. } => {
                    delayed += 1;
                    if !self.delayed.contains(&(*until_s, *id)) {
                        return fail(format!("{id} is delayed but not filed"));
                    }
                }
                JobState::AwaitingRetry(_) => {
                    awaiting += 1;
                    if !self.awaiting_retry.contains(id) {
                        return fail(format!("{id} awaits a retry decision but is not filed"));
                    }
                }
                JobState::Running { choice, .. } => {
                    running += 1;
                    let Some(p) = state.allocation(*id) else {
                        return fail(format!("{id} is running but holds no GPUs"));
                    };
                    if p.gpu_count() != job.next_gpus() || p != &choice.placement {
                        return fail(format!(
                            "{id} needs {} GPUs but holds {}",
                            job.next_gpus(),
                            p.gpu_count()
                        ));
                    }
                    vc_held[vc] += p.gpu_count();
                }
                JobState::Finished { .. } => finished += 1,
            }
        }
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
        for ((v, held), (pgpus, pjobs)) in vcs.iter().zip(vc_held).zip(vc_pending) {
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
