//! Jobs as the scheduler tracks them: spec, lifecycle state, wait attribution.

use gangway_plugin_sdk::{JobId, VcId};
use serde::{Deserialize, Serialize};

use crate::placement::PlacementChoice;

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

/// How one attempt ended (reported by the host).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum AttemptEnd {
    /// The job finished successfully.
    Passed,
    /// The attempt failed; `retry` re-queues the job (as Philly's retries did),
    /// otherwise it ends as failed.
    Failed {
        /// Whether to re-queue the job.
        retry: bool,
    },
    /// The job was killed.
    Killed,
}

/// Why a pending job did not start in a round.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum WaitReason {
    /// Fairness made it ineligible (its VC is over its share): *fair-share delay*.
    FairShare,
    /// Enough GPUs are free, but not within its spread limit: *fragmentation delay*.
    Fragmentation,
    /// The GPUs it could use are held for another job's reservation.
    Reserved,
    /// A blocked job ahead of it holds the queue (gang policy `Block`).
    HeldByPolicy,
    /// Fewer GPUs are free in the whole cluster than it needs.
    NoCapacity,
}

impl WaitReason {
    /// All reasons.
    pub const ALL: [WaitReason; 5] = [
        WaitReason::FairShare,
        WaitReason::Fragmentation,
        WaitReason::Reserved,
        WaitReason::HeldByPolicy,
        WaitReason::NoCapacity,
    ];

    /// A short name (`fair-share`, `fragmentation`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            WaitReason::FairShare => "fair-share",
            WaitReason::Fragmentation => "fragmentation",
            WaitReason::Reserved => "reserved",
            WaitReason::HeldByPolicy => "held-by-policy",
            WaitReason::NoCapacity => "no-capacity",
        }
    }
}

/// Seconds a job has waited, split by reason. The time between rounds is
/// charged to the reason given at the start of that interval (a new job's
/// first interval to its first reason).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaitBreakdown {
    /// Seconds per reason, indexed like [`WaitReason::ALL`].
    pub seconds: [u64; 5],
}

impl WaitBreakdown {
    /// Seconds charged to `reason`.
    pub fn get(&self, reason: WaitReason) -> u64 {
        self.seconds[reason as usize]
    }

    pub(crate) fn add(&mut self, reason: WaitReason, s: u64) {
        self.seconds[reason as usize] += s;
    }

    /// Seconds charged to any reason.
    pub fn total(&self) -> u64 {
        self.seconds.iter().sum()
    }
}

/// Where a job is in its life.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum JobState {
    /// Waiting to start.
    Pending {
        /// When it last became pending.
        since_s: u64,
        /// The reason given in the last round, if it was considered yet.
        reason: Option<WaitReason>,
    },
    /// Holding its GPUs.
    Running {
        /// When this attempt started.
        started_s: u64,
        /// Where it runs.
        choice: PlacementChoice,
    },
    /// Done for good.
    Finished {
        /// How it ended.
        status: FinalStatus,
        /// When.
        at_s: u64,
    },
}

/// Everything the scheduler knows about one job.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobRecord {
    /// What was submitted.
    pub spec: JobSpec,
    /// Current state.
    pub state: JobState,
    /// Attempts started so far.
    pub attempts: u32,
    /// GPU-seconds received by finished attempts.
    pub attained_gpu_s: u64,
    /// GPU-seconds of attempts that failed or were interrupted.
    pub failed_gpu_s: u64,
    /// When its first attempt started.
    pub first_start_s: Option<u64>,
    /// Servers and locality of its first attempt.
    pub first_placement: Option<(u32, gangway_plugin_sdk::Level)>,
    /// Its waiting time, split by reason.
    pub wait: WaitBreakdown,
    /// Time up to which its wait has been charged.
    pub(crate) charged_to_s: u64,
}

impl JobRecord {
    /// Whether the job is pending.
    pub fn is_pending(&self) -> bool {
        matches!(self.state, JobState::Pending { .. })
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

    /// Charges the wait from the last charge up to `now` to `reason`.
    pub(crate) fn charge(&mut self, reason: Option<WaitReason>, now: u64) {
        let delta = now.saturating_sub(self.charged_to_s);
        if let Some(r) = reason {
            self.wait.add(r, delta);
        }
        self.charged_to_s = self.charged_to_s.max(now);
    }
}
