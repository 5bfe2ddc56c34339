//! Forgetting finished jobs, so a long-lived host's memory is bounded by its
//! live jobs rather than by its history.
//!
//! The scheduler keeps every job record until told otherwise: a replay wants
//! them all for its report, a daemon that runs for months does not. A host
//! reads what it needs from a finished job's record (final status, wait
//! breakdown, attained service) and then calls [`Scheduler::forget`], or
//! [`Scheduler::forget_finished`] now and then. The virtual clusters keep
//! their attained GPU-seconds, so fairness is unaffected. A forgotten id may
//! be submitted again.
//!
//! ```
//! use gangway_core::{AttemptEnd, JobSpec, Scheduler, Topology};
//! use gangway_plugin_sdk::JobId;
//!
//! let mut sched = Scheduler::new(Topology::uniform(1, 1, 8)?);
//! let vc = sched.virtual_cluster("a");
//! sched.submit(JobSpec { id: JobId(1), vc, user: 0, gpus: 8, submitted_s: 0 })?;
//! sched.round(0)?;
//! assert!(sched.forget(JobId(1)).is_err()); // still running
//! sched.end_attempt(JobId(1), 60, AttemptEnd::Passed)?;
//! let record = sched.forget(JobId(1))?;
//! assert_eq!(record.attained_gpu_s, 480);
//! assert!(sched.jobs().is_empty());
//! assert_eq!(sched.virtual_clusters()[0].attained_gpu_s, 480);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use gangway_plugin_sdk::JobId;

use crate::job::JobRecord;
use crate::scheduler::Scheduler;
use crate::scheduler_error::SchedulerError;

impl Scheduler {
    /// Drops a finished job's record and returns it. Pending and running
    /// jobs are refused ([`SchedulerError::WrongState`]).
    pub fn forget(&mut self, id: JobId) -> Result<JobRecord, SchedulerError> {
        self.book.forget(id)
    }

    /// Drops every finished job's record; returns how many.
    pub fn forget_finished(&mut self) -> usize {
        self.book.forget_finished()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{AttemptEnd, JobSpec, Topology};

    #[test]
    fn forgets_only_finished_jobs_and_keeps_invariants() {
        let mut sched = Scheduler::new(Topology::uniform(1, 2, 8).unwrap());
        let vc = sched.virtual_cluster("a");
        for i in 0..4 {
            let spec = JobSpec {
                id: JobId(i),
                vc,
                user: 0,
                gpus: 8,
                submitted_s: i,
            };
            sched.submit(spec).unwrap();
        }
        sched.round(5).unwrap();
        sched.end_attempt(JobId(0), 9, AttemptEnd::Passed).unwrap();
        sched.kill(JobId(3), 9).unwrap();
        assert!(matches!(
            sched.forget(JobId(1)),
            Err(SchedulerError::WrongState { .. })
        ));
        assert!(matches!(
            sched.forget(JobId(2)),
            Err(SchedulerError::WrongState { .. })
        ));
        assert_eq!(sched.forget_finished(), 2);
        assert!(matches!(
            sched.forget(JobId(0)),
            Err(SchedulerError::UnknownJob(_))
        ));
        sched.check_invariants().unwrap();
        let report = sched.round(10).unwrap();
        assert_eq!(report.starts[0].job, JobId(2));
        // A forgotten id may be used again.
        let spec = JobSpec {
            id: JobId(0),
            vc,
            user: 0,
            gpus: 1,
            submitted_s: 11,
        };
        sched.submit(spec).unwrap();
        sched.check_invariants().unwrap();
    }
}
