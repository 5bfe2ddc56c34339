//! The retry slot: after an attempt fails, retry it now, later, on a smaller
//! probe, or give up.

mod fallback;
mod rules;
#[cfg(any(test, feature = "testing"))]
pub(crate) mod testing;

use serde::{Deserialize, Serialize};

use crate::ids::{JobId, VcId};
use crate::slot_contract::{InvalidDecision, Policy, SlotContract, WorkCost};
use crate::slots::Slot;
use crate::view::{ClusterSummary, VcUsage};
use crate::wire::Wire;
use crate::wire::codec;

pub use fallback::Fixed;
/// Why an attempt failed: the failure reasons of the Philly study's Table 7
/// (a rule-based classifier over the job's logs), as the host reports them.
/// The host passes `Unknown` when it cannot tell.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, Wire,
)]
pub enum FailureClass {
    /// No classification.
    #[default]
    Unknown,
    /// The job ran out of host memory.
    CpuOutOfMemory,
    /// Model or input files unreadable (e.g. on HDFS).
    IncorrectInputs,
    /// Library version mismatch or broken dependency set-up.
    SemanticError,
    /// The process dumped core.
    CoreDump,
    /// A bad pointer or a race while copying, in CPU or GPU memory.
    InvalidMemoryAccess,
    /// Writing a checkpoint failed (transient storage errors).
    ModelCheckpointError,
    /// A CUDA call failed.
    CudaFailure,
    /// The program does not parse.
    SyntaxError,
    /// A traceback from a crash.
    TracebackFromCrash,
    /// An MPI error.
    MpiError,
    /// The job ran out of GPU memory.
    GpuOutOfMemory,
    /// A lost connection to a peer MPI process or an MPI daemon failure.
    MpiRuntimeFailure,
    /// A permission was denied.
    PermissionError,
    /// A module could not be imported.
    ImportError,
    /// The scheduler reclaimed the job's GPUs for another job.
    JobPreempted,
    /// CUDA could not initialise.
    CudaInitFailed,
    /// Training diverged.
    ModelDiverged,
    /// The CUDA version does not match.
    CudaVersionMismatch,
    /// A GPU reported an ECC error.
    GpuEccError,
    /// An output node failed.
    OutputNodeError,
    /// Libraries could not be loaded.
    CannotLoadLibs,
    /// The logs matched no rule.
    NoSignature,
}

impl FailureClass {
    /// Every class, [`FailureClass::Unknown`] first.
    pub const ALL: [FailureClass; 23] = [
        FailureClass::Unknown,
        FailureClass::CpuOutOfMemory,
        FailureClass::IncorrectInputs,
        FailureClass::SemanticError,
        FailureClass::CoreDump,
        FailureClass::InvalidMemoryAccess,
        FailureClass::ModelCheckpointError,
        FailureClass::CudaFailure,
        FailureClass::SyntaxError,
        FailureClass::TracebackFromCrash,
        FailureClass::MpiError,
        FailureClass::GpuOutOfMemory,
        FailureClass::MpiRuntimeFailure,
        FailureClass::PermissionError,
        FailureClass::ImportError,
        FailureClass::JobPreempted,
        FailureClass::CudaInitFailed,
        FailureClass::ModelDiverged,
        FailureClass::CudaVersionMismatch,
        FailureClass::GpuEccError,
        FailureClass::OutputNodeError,
        FailureClass::CannotLoadLibs,
        FailureClass::NoSignature,
    ];

    /// The class's name in trace files and reports (`incorrect-inputs`, ...).
    ///
    /// ```
    /// use gangway_plugin_sdk::FailureClass;
    /// for c in FailureClass::ALL {
    ///     assert_eq!(FailureClass::from_name(c.as_str()), Some(c));
    /// }
    /// assert_eq!(FailureClass::from_name("mpi-runtime-failure"), Some(FailureClass::MpiRuntimeFailure));
    /// ```
    pub const fn as_str(self) -> &'static str {
        match self {
            FailureClass::Unknown => "unknown",
            FailureClass::CpuOutOfMemory => "cpu-out-of-memory",
            FailureClass::IncorrectInputs => "incorrect-inputs",
            FailureClass::SemanticError => "semantic-error",
            FailureClass::CoreDump => "core-dump",
            FailureClass::InvalidMemoryAccess => "invalid-memory-access",
            FailureClass::ModelCheckpointError => "model-checkpoint-error",
            FailureClass::CudaFailure => "cuda-failure",
            FailureClass::SyntaxError => "syntax-error",
            FailureClass::TracebackFromCrash => "traceback-from-crash",
            FailureClass::MpiError => "mpi-error",
            FailureClass::GpuOutOfMemory => "gpu-out-of-memory",
            FailureClass::MpiRuntimeFailure => "mpi-runtime-failure",
            FailureClass::PermissionError => "permission-error",
            FailureClass::ImportError => "import-error",
            FailureClass::JobPreempted => "job-preempted",
            FailureClass::CudaInitFailed => "cuda-init-failed",
            FailureClass::ModelDiverged => "model-diverged",
            FailureClass::CudaVersionMismatch => "cuda-version-mismatch",
            FailureClass::GpuEccError => "gpu-ecc-error",
            FailureClass::OutputNodeError => "output-node-error",
            FailureClass::CannotLoadLibs => "cannot-load-libs",
            FailureClass::NoSignature => "no-signature",
        }
    }

    /// The class called `name`, if any.
    pub fn from_name(name: &str) -> Option<FailureClass> {
        FailureClass::ALL.into_iter().find(|c| c.as_str() == name)
    }
}

impl std::fmt::Display for FailureClass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One failed attempt, as the retry slot sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, Wire)]
pub struct FailedAttempt {
    /// The job.
    pub job: JobId,
    /// Its virtual cluster.
    pub vc: VcId,
    /// Its user.
    pub user: u32,
    /// GPUs of the whole gang.
    pub gpus: u32,
    /// GPUs the failed attempt had (fewer than `gpus` for a probe).
    pub attempt_gpus: u32,
    /// Attempts started so far, the failed one included.
    pub attempts: u32,
    /// How long the failed attempt ran before it failed (seconds).
    pub run_s: u64,
    /// Why it failed.
    pub class: FailureClass,
    /// Whether the failed attempt was a probe a retry policy asked for.
    pub probe: bool,
    /// GPU-seconds of all the job's failed attempts so far, this one included.
    pub failed_gpu_s: u64,
}

/// What the retry slot sees: the attempts that failed since the last round,
/// by job id.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, Wire)]
#[wire(view)]
pub struct RetryView {
    /// The host's clock (seconds).
    pub now_s: u64,
    /// The failures to decide about.
    pub failures: Vec<FailedAttempt>,
}

/// What to do about one failed attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Wire)]
pub enum RetryAction {
    /// Queue the job again once `after_s` seconds have passed (0: now).
    Retry {
        /// Seconds to wait before the job is pending again.
        after_s: u64,
    },
    /// Run the job first as a probe of `gpus` GPUs (fewer than its gang),
    /// for at most `run_s` seconds, after `after_s` seconds; a probe that
    /// survives `run_s` is followed by the full gang, one that fails comes
    /// back to this slot.
    Probe {
        /// GPUs of the probe (1 to the gang's size).
        gpus: u32,
        /// How long the probe must run without failing.
        run_s: u64,
        /// Seconds to wait before the probe is pending.
        after_s: u64,
    },
    /// Stop: the job ends as failed.
    GiveUp,
}

impl RetryAction {
    /// The longest retry delay (`after_s`) a policy may ask for: 366 days.
    /// A longer one is invalid (the slot's fallback decides instead); a
    /// policy that means "never" gives up.
    pub const MAX_DELAY_S: u64 = 366 * 86_400;
    /// The longest probe (`run_s`) a policy may ask for: 366 days.
    pub const MAX_PROBE_S: u64 = 366 * 86_400;
}

impl Default for RetryAction {
    fn default() -> Self {
        RetryAction::Retry { after_s: 0 }
    }
}

/// The retry slot's answer: one action per failure of the view, in order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, Wire)]
#[wire(answers = RetryView)]
pub struct RetryDecision {
    /// `actions[i]` applies to `failures[i]`.
    pub actions: Vec<RetryAction>,
}

/// The retry slot: decide what follows a failed attempt.
pub trait RetryPolicy {
    /// One action per failure of `view`, in order.
    fn retry(&self, view: &RetryView) -> RetryDecision;
}

impl<P: RetryPolicy + ?Sized> Policy<Retry> for P {
    fn decide(&self, view: &RetryView) -> RetryDecision {
        self.retry(view)
    }
}

/// The retry slot's export glue, with its WIT names: what
/// [`export!`](crate::export)`(Retry, ...)` expands.
#[doc(hidden)]
#[macro_export]
macro_rules! __gangway_export_retry {
    ($policy:ty) => {
        $crate::__gangway_export!(
            __GangwayRetry,
            __gangway_retry,
            "retry-policy-buffered",
            $policy,
            retry,
            retry_buffered,
            retry,
            $crate::Retry
        );
    };
}
#[doc(hidden)]
pub use crate::__gangway_export_retry as Retry;

/// The retry slot (WIT interface `retry`, function `retry`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Retry;

impl SlotContract for Retry {
    const SLOT: Slot = Slot::Retry;
    const NAME: &'static str = "retry";
    const CALL: &'static str = "retry";
    const FALLBACK: &'static str = "fixed";
    /// The costliest built-in module (the retry built-ins), measured and rounded up.
    const WORK: WorkCost = WorkCost {
        per_call: 4_000,
        per_job: 1_300,
        ..WorkCost::NONE
    };
    type View = RetryView;
    type Decision = RetryDecision;
    type Fallback = Fixed;

    fn validate(view: &Self::View, d: &Self::Decision) -> Result<(), InvalidDecision> {
        rules::validate(view, d)
    }
    fn view_jobs(view: &RetryView) -> usize {
        view.failures.len()
    }
    fn idle_view(_cluster: &ClusterSummary, _vcs: &[VcUsage]) -> RetryView {
        RetryView::default()
    }

    fn max_reply_bytes(view: &RetryView) -> usize {
        codec::LEN + view.failures.len() * (1 + codec::U32 + 2 * codec::U64)
    }
}
