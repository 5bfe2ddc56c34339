//! Jobs as the scheduler tracks them: spec, lifecycle state, wait attribution.

use gangway_plugin_sdk::{FailureClass, JobId, VcId, WaitReason};
use serde::{Deserialize, Serialize};

use crate::placement::PlacementChoice;

/// The user number of a job [`Scheduler::reconcile`](crate::Scheduler::reconcile) adopted as foreign
/// load: the engine runs it on its own, so no reclaim or defragment view
/// shows it (a policy cannot stop or move it). Hosts do not give this number
/// to their own users.
pub const FOREIGN_USER: u32 = u32::MAX;

/// What a host submits.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobSpec {
    /// Unique id, chosen by the host.
    pub id: JobId,
    /// Its virtual cluster (from [`crate::Scheduler::virtual_cluster`]).
    pub vc: VcId,
    /// Its user, as a host-assigned number.
    pub user: u32,
    /// GPUs of the gang.
    pub gpus: u32,
    /// Submit time (seconds).
    pub submitted_s: u64,
}

/// How a job ended for good.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum FinalStatus {
    /// Completed successfully.
    Passed,
    /// Failed and will not be retried.
    Failed,
    /// Killed by its user or an operator.
    Killed,
}

impl FinalStatus {
    /// Its name in reports and logs: `passed`, `failed` or `killed`.
    ///
    /// ```
    /// assert_eq!(gangway_core::FinalStatus::Killed.as_str(), "killed");
    /// ```
    pub const fn as_str(self) -> &'static str {
        match self {
            FinalStatus::Passed => "passed",
            FinalStatus::Failed => "failed",
            FinalStatus::Killed => "killed",
        }
    }
}

/// How one attempt ended (reported by the host).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum AttemptEnd {
    /// The attempt finished successfully: the job is done (or, if the
    /// attempt was a retry policy's probe that ran its time, the full gang
    /// is queued next).
    Passed,
    /// The attempt failed. Unless `last`, the retry slot decides at the
    /// next round what follows (retry now or later, a smaller probe, or give
    /// up); `last` says the host will run no further attempt (its own retry
    /// limit, or the end of a recorded trace) and the job ends as failed.
    Failed {
        /// Why, as far as the host can tell.
        class: FailureClass,
        /// No further attempt is possible.
        last: bool,
    },
    /// The job was killed.
    Killed,
}

impl AttemptEnd {
    /// A failure of unknown class that the retry policy decides about.
    pub const FAILED: AttemptEnd = AttemptEnd::Failed {
        class: FailureClass::Unknown,
        last: false,
    };
}

/// Seconds a job has waited, split by reason. The time between rounds is
/// charged to the reason given at the start of that interval (a new job's
/// first interval to its first reason; the time a job spent behind its VC's
/// window before it was first shown to fairness to [`WaitReason::Queued`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaitBreakdown {
    /// Seconds per reason, indexed like [`WaitReason::ALL`].
    pub seconds: [u64; 7],
}

impl WaitBreakdown {
    /// Seconds charged to `reason`.
    pub fn get(&self, reason: WaitReason) -> u64 {
        self.seconds[reason.index()]
    }

    pub(crate) fn add(&mut self, reason: WaitReason, s: u64) {
        self.seconds[reason.index()] += s;
    }

    /// Seconds charged to any reason.
    pub fn total(&self) -> u64 {
        self.seconds.iter().sum()
    }
}

/// A failed attempt the retry slot has not decided about yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptFailure {
    /// When it failed.
    pub at_s: u64,
    /// Why.
    pub class: FailureClass,
    /// How long the attempt ran.
    pub run_s: u64,
    /// GPUs it had.
    pub gpus: u32,
    /// Whether it was a probe.
    pub probe: bool,
}

/// Where a job is in its life.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum JobState {
    /// Waiting to start.
    Pending {
        /// When it last became pending.
        since_s: u64,
        /// The reason given in the last round it was considered in, if any.
        reason: Option<WaitReason>,
    },
    /// Its attempt failed; the retry slot decides at the next round.
    AwaitingRetry(AttemptFailure),
    /// Waiting out the delay its retry policy chose; pending from `until_s`.
    Delayed {
        /// When it failed.
        since_s: u64,
        /// When it becomes pending.
        until_s: u64,
    },
    /// Holding its GPUs.
    Running {
        /// When this attempt started.
        started_s: u64,
        /// Where it runs.
        choice: PlacementChoice,
        /// For a retry policy's probe: how long it must run without failing.
        probe_s: Option<u64>,
    },
    /// Done for good.
    Finished {
        /// How it ended.
        status: FinalStatus,
        /// When.
        at_s: u64,
    },
}

impl JobState {
    /// The state's name in errors ("pending", "running", ...).
    pub(crate) fn name(&self) -> &'static str {
        match self {
            JobState::Pending { .. } => "pending",
            JobState::AwaitingRetry(_) => "awaiting a retry decision",
            JobState::Delayed { .. } => "waiting to be retried",
            JobState::Running { .. } => "running",
            JobState::Finished { .. } => "finished",
        }
    }
}

/// Everything the scheduler knows about one job.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobRecord {
    /// What was submitted.
    pub spec: JobSpec,
    /// Current state.
    pub state: JobState,
    /// Attempts started so far (probes included).
    pub attempts: u32,
    /// For a probe the retry policy asked for: the next attempt's GPUs and
    /// how long it must run.
    pub probe: Option<(u32, u64)>,
    /// Attempts stopped by the reclaim slot.
    pub preemptions: u32,
    /// GPU-seconds of the attempts the reclaim slot stopped.
    pub preempted_gpu_s: u64,
    /// Migrations by the defragment slot.
    pub migrations: u32,
    /// GPU-seconds received by finished attempts.
    pub attained_gpu_s: u64,
    /// GPU-seconds of attempts that failed or were interrupted.
    pub failed_gpu_s: u64,
    /// When its first attempt started.
    pub first_start_s: Option<u64>,
    /// Servers and locality of its first attempt.
    pub first_placement: Option<(u32, gangway_plugin_sdk::Level)>,
    /// Its waiting time, split by reason, charged up to the last change of
    /// its wait reason; [`JobRecord::wait_at`] adds the time since.
    pub wait: WaitBreakdown,
    /// Time up to which its wait has been charged.
    pub(crate) charged_to_s: u64,
}

impl JobRecord {
    /// The record of a job just submitted, before the scheduler enqueues
    /// it: no attempts, nothing attained, its wait charged up to its submit
    /// time. Its state stays `Finished(Killed)` at the submit time until
    /// [`crate::Scheduler`] makes it pending.
    pub(crate) fn submitted(spec: JobSpec) -> JobRecord {
        let since = spec.submitted_s;
        JobRecord {
            spec,
            state: JobState::Finished {
                status: FinalStatus::Killed,
                at_s: since,
            },
            attempts: 0,
            probe: None,
            preemptions: 0,
            preempted_gpu_s: 0,
            migrations: 0,
            attained_gpu_s: 0,
            failed_gpu_s: 0,
            first_start_s: None,
            first_placement: None,
            wait: WaitBreakdown::default(),
            charged_to_s: since,
        }
    }

    /// Whether the job is pending.
    pub fn is_pending(&self) -> bool {
        matches!(self.state, JobState::Pending { .. })
    }

    /// GPUs its next attempt needs: the gang, or a probe's size.
    pub fn next_gpus(&self) -> u32 {
        self.probe.map_or(self.spec.gpus, |(g, _)| g)
    }

    /// Whether the job is running.
    pub fn is_running(&self) -> bool {
        matches!(self.state, JobState::Running { .. })
    }

    /// The final status, if finished.
    pub fn final_status(&self) -> Option<FinalStatus> {
        match self.state {
            JobState::Finished { status, .. } => Some(status),
            _ => None,
        }
    }

    /// Its waiting time split by reason up to `now`: [`JobRecord::wait`]
    /// plus, while it waits, the time since that was last charged, counted
    /// to its current reason (the one of the last round that showed it, or
    /// the retry delay).
    ///
    /// ```
    /// use gangway_core::{JobId, JobSpec, Scheduler, Topology};
    ///
    /// let mut sched = Scheduler::new(Topology::uniform(1, 2, 8).unwrap());
    /// let (a, b) = (sched.virtual_cluster("a"), sched.virtual_cluster("b"));
    /// sched.submit(JobSpec { id: JobId(1), vc: a, user: 0, gpus: 16, submitted_s: 0 }).unwrap();
    /// sched.submit(JobSpec { id: JobId(2), vc: b, user: 0, gpus: 8, submitted_s: 0 }).unwrap();
    /// sched.round(10).unwrap(); // job 1 takes every GPU
    /// sched.round(40).unwrap();
    /// let reason = sched.why_pending(JobId(2)).unwrap();
    /// let job = sched.job(JobId(2)).unwrap();
    /// // Charged when the reason was first given (at 10), accrued since.
    /// assert_eq!(job.wait.get(reason), 10);
    /// assert_eq!(job.wait_at(70).get(reason), 70);
    /// ```
    pub fn wait_at(&self, now: u64) -> WaitBreakdown {
        let mut wait = self.wait;
        let reason = match self.state {
            JobState::Pending { reason, .. } => reason,
            JobState::Delayed { .. } => Some(WaitReason::RetryDelay),
            _ => None,
        };
        if let Some(r) = reason {
            wait.add(r, now.saturating_sub(self.charged_to_s));
        }
        wait
    }

    /// Charges the wait from the last charge up to `now` to `reason`.
    pub(crate) fn charge(&mut self, reason: Option<WaitReason>, now: u64) {
        let delta = now.saturating_sub(self.charged_to_s);
        if let Some(r) = reason {
            self.wait.add(r, delta);
        }
        self.charged_to_s = self.charged_to_s.max(now);
    }
}
