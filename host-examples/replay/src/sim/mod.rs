//! The discrete-event replay: arrivals, attempt ends, retries and optional
//! server failures drive a real [`Scheduler`]; the scheduler only decides when
//! and where each recorded attempt runs.
//!
//! How the scheduler's decisions play out on the recorded attempts:
//!
//! * a failed attempt is reported as failed with its recorded class, final
//!   only if the trace has no later attempt; the retry slot decides what
//!   follows. Retried, the job runs its next recorded attempt. Given up, it
//!   ends as failed, and the attempts it did not run are GPU time saved (a
//!   job the trace shows passing later is counted as a passing job lost);
//! * a probe (a retry policy's smaller first attempt) of an attempt that
//!   fails within the probe's time fails as that attempt did, on fewer GPUs;
//!   otherwise it survives its time and the full gang runs the attempt;
//! * a preempted attempt (reclaim) resumes later from where it stopped, as a
//!   checkpointed job does, after a restart of `restart_s`; a migrated one
//!   (defragment) restarts on its new GPUs, also losing `restart_s`. Those
//!   restarts are the GPU time lost to preemption and migration;
//! * a server failure interrupts an attempt, which resumes from its last
//!   checkpoint (one every `checkpoint_s` of its run; 0: none, it runs again
//!   from the start), after a restart of `restart_s`. The attempt is counted
//!   as lost in the scheduler (its GPU time so far as failed), and the run
//!   since its last checkpoint is lost work.

//!
//! The types of a replay's settings and outcome are here; the replay
//! itself (events, rounds, what each decision does to the recorded
//! attempts) is in `replay.rs`, the cluster's use over time in `meter.rs`.

use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::time::{Duration, Instant};

use gangway_core::policy::PolicySet;
use gangway_core::{PlacementStrategy, Scheduler, SchedulerError, Topology, WaitReason};

pub use crate::queued_time::QueuedBehind;
use crate::trace::{Outcome, Trace};

mod meter;
mod replay;
mod typed_work;

use meter::Meter;
use replay::Replay;

/// How often a job checkpoints by default: every 30 minutes of its run, a
/// common setting of training frameworks' periodic checkpoints (the study
/// lists checkpoint errors among failures but gives no interval).
pub const DEFAULT_CHECKPOINT_S: u64 = 1800;

/// How far a replay has got, for progress reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Progress {
    /// Jobs arrived so far.
    pub arrived: usize,
    /// Jobs ended for good so far.
    pub finished: usize,
    /// Simulated time, in seconds.
    pub now_s: u64,
}

/// Knobs of one replay.
#[derive(Clone, Debug, PartialEq)]
pub struct SimConfig {
    /// Rounds run on a grid of this many seconds, after anything changed
    /// (Philly's scheduler, like YARN's, works in periodic passes). 0 = a
    /// round at every event time.
    pub round_interval_s: u64,
    /// While jobs wait, a round runs at least this often even if nothing
    /// changed, so locality can relax with waiting time.
    pub idle_tick_s: u64,
    /// Mean time between failures of one server, in seconds (`None`: no failures).
    pub server_mtbf_s: Option<u64>,
    /// How long a failed server stays down.
    pub server_repair_s: u64,
    /// Seed for the failure process.
    pub seed: u64,
    /// GPU quota per virtual cluster name (absent: unlimited).
    pub quotas: BTreeMap<String, u32>,
    /// How placement search breaks ties.
    pub placement: PlacementStrategy,
    /// Seconds a preempted or migrated job loses restarting from its checkpoint.
    pub restart_s: u64,
    /// How often a running job checkpoints, in seconds of its run: a server
    /// failure loses the run since the last one (0: no checkpoints, an
    /// interrupted attempt runs again from the start).
    pub checkpoint_s: u64,
    /// Pending jobs per VC a round shows a fairness policy that declares its
    /// queue order (0: all).
    pub view_window: usize,
    /// Locality costs run time: an attempt spread over more servers than its
    /// gang needs runs longer by [`locality_slowdown`] (off: every placement
    /// runs at recorded speed).
    pub locality_cost: bool,
    /// Speeds per GPU type of the trace's job classes: a job with measured
    /// work ([`crate::trace::Work`]) runs its steps at its type's speed and
    /// may run only on types where it runs at all (none: recorded times).
    pub throughputs: Option<std::sync::Arc<crate::throughputs::Throughputs>>,
}

/// How much longer an attempt runs on `servers` servers than on the fewest
/// servers that hold its gang (`min_servers`), from the GPU
/// utilisation the study measured (PHILLY.md §3.5):
///
/// * a gang that fits one server, spread over 2: Table 4, ResNet-50 on the
///   same server 57.7 % vs different servers 49.6 % utilisation: 1.163x;
/// * a multi-server gang on twice its fewest servers: Table 5, 16 GPUs on
///   2 servers 43.66 % vs 4 servers 40.94 %: 1.066x;
/// * on 4 or more times its fewest servers (or a one-server gang on 3 or
///   more): Table 5, 2 vs 8 servers 43.66 / 28.56 %: 1.529x (the study has
///   no wider point, so the factor stays there).
///
/// ```
/// use gangway_replay::sim::locality_slowdown;
/// assert_eq!(locality_slowdown(1, 1), 1.0);
/// // 16 GPUs on 8 servers instead of 2.
/// assert!((locality_slowdown(8, 2) - 1.529).abs() < 0.001);
/// assert!((locality_slowdown(2, 1) - 1.163).abs() < 0.001);
/// ```
pub fn locality_slowdown(servers: u32, min_servers: u32) -> f64 {
    let min = min_servers.max(1);
    if servers <= min {
        return 1.0;
    }
    let ratio = f64::from(servers) / f64::from(min);
    if ratio <= 2.0 {
        if min == 1 { 57.7 / 49.6 } else { 43.66 / 40.94 }
    } else {
        43.66 / 28.56
    }
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            round_interval_s: 10,
            idle_tick_s: 60,
            server_mtbf_s: None,
            server_repair_s: 2 * 3600,
            seed: 0,
            quotas: BTreeMap::new(),
            placement: PlacementStrategy::BestFit,
            restart_s: 60,
            checkpoint_s: DEFAULT_CHECKPOINT_S,
            view_window: Scheduler::DEFAULT_VIEW_WINDOW,
            locality_cost: false,
            throughputs: None,
        }
    }
}

/// What happened to one job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobOutcome {
    /// GPUs.
    pub gpus: u32,
    /// Virtual cluster index into [`RunResult::vcs`].
    pub vc: usize,
    /// Submit time.
    pub submit_s: u64,
    /// First attempt's start.
    pub first_start_s: Option<u64>,
    /// When it finished for good.
    pub finish_s: Option<u64>,
    /// Final status, `None` if it never finished.
    pub status: Option<Outcome>,
    /// Seconds of waiting by reason (all its waits), indexed like
    /// [`WaitReason::ALL`].
    pub wait_s: [u64; 7],
    /// Seconds between its submission and its end (or the replay's end)
    /// that it did not run: every wait of every attempt, the time until
    /// the scheduler's next pass and retry gaps included.
    pub waited_s: u64,
    /// Its `queued` seconds split by what its VC's queue waited for,
    /// indexed like [`QueuedBehind::ALL`]; they add up to its `queued` wait.
    pub queued_behind_s: [u64; QueuedBehind::COUNT],
    /// Servers its first attempt spanned.
    pub first_servers: Option<u32>,
    /// GPU-seconds of attempts that failed or were interrupted.
    pub failed_gpu_s: u64,
    /// Times the reclaim slot stopped it.
    pub preemptions: u32,
    /// Times the defragment slot moved it.
    pub migrations: u32,
    /// GPU-seconds lost restarting after preemptions and migrations.
    pub restart_gpu_s: u64,
    /// Recorded attempts it did not run because the retry policy gave up.
    pub attempts_avoided: u32,
    /// GPU-seconds of those attempts: what giving up saved.
    pub saved_gpu_s: u64,
    /// The trace shows it passing later, but the retry policy gave up on it.
    pub passing_lost: bool,
    /// Probes it ran.
    pub probes: u32,
    /// Delay events by kind: times it entered a stretch of fair-share /
    /// fragmentation waiting (the study's Table 2 counts these, not jobs).
    pub delay_events: DelayEvents,
    /// GPU-seconds its attempts used (every attempt's run time times its GPUs).
    pub used_gpu_s: u64,
    /// Attempts started (probes included).
    pub attempts: u32,
    /// GPU-seconds its attempts ran longer because they were spread over
    /// more servers than needed ([`SimConfig::locality_cost`]).
    pub spread_slowdown_gpu_s: u64,
    /// The GPU type of its last attempt, on a cluster of several types.
    pub gpu_type: Option<u8>,
}

/// Counts of delay events of the study's two kinds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DelayEvents {
    /// Stretches of fair-share delay (its VC had used its quota).
    pub fair_share: u32,
    /// Stretches of fragmentation delay (quota free, no local room).
    pub fragmentation: u32,
}

impl JobOutcome {
    /// Seconds it waited for `reason`.
    pub fn waited(&self, reason: WaitReason) -> u64 {
        self.wait_s[reason.index()]
    }
}

/// A sample of the cluster over time.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// Time.
    pub t_s: u64,
    /// GPUs allocated.
    pub allocated: u32,
    /// GPUs on servers that are up (the capacity line of the plots).
    pub online: u32,
    /// GPUs held per VC.
    pub per_vc: Vec<u32>,
}

/// A policy the scheduler removed from a slot after repeated failures.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Quarantine {
    /// Simulated time of the round that quarantined it, in seconds.
    pub at_s: u64,
    /// The slot.
    pub slot: gangway_core::Slot,
    /// The policy removed.
    pub module: String,
    /// The policy that decides in its place from then on.
    pub restored: String,
    /// Its last error.
    pub error: String,
}

/// The outcome of one replay.
#[derive(Clone, Debug)]
pub struct RunResult {
    /// Per job, in trace order.
    pub jobs: Vec<JobOutcome>,
    /// The first `warm` jobs were carried into a window already running
    /// ([`Trace::warm`]); statistics leave them out.
    pub warm: usize,
    /// VC names, indexed by [`JobOutcome::vc`].
    pub vcs: Vec<String>,
    /// VC quotas used.
    pub quotas: Vec<Option<u32>>,
    /// Time-weighted mean GPUs held per VC over the arrival window.
    pub vc_mean_held: Vec<f64>,
    /// Time-weighted mean of allocated / online GPUs over the arrival window.
    pub gpu_allocation_mean: f64,
    /// Periodic samples for plots.
    pub samples: Vec<Sample>,
    /// Policy calls that failed and fell back to the default.
    pub policy_errors: u64,
    /// Policies the scheduler quarantined after repeated failures, in order.
    pub quarantines: Vec<Quarantine>,
    /// Rounds run.
    pub rounds: u64,
    /// Rounds skipped because fewer GPUs were free than the smallest waiting gang.
    pub skipped_rounds: u64,
    /// Wall-clock time of the replay loop (never written to report.json).
    pub elapsed: Duration,
    /// Wall-clock time inside `Scheduler::round`.
    pub in_rounds: Duration,
    /// Each GPU type's GPUs and use (by `GpuTypeId`), on a cluster of
    /// several types (empty on one of one type).
    pub gpu_types: Vec<TypeUse>,
}

/// One GPU type of a cluster of several, and its use over a run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TypeUse {
    /// Its name.
    pub name: String,
    /// Its GPUs.
    pub gpus: u32,
    /// GPU-seconds attempts on it used.
    pub used_gpu_s: u64,
}

/// A replay that could not run.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// The scheduler refused a job (e.g. larger than the cluster).
    #[error("trace job {job}: {source}")]
    Rejected {
        /// The trace job's name.
        job: String,
        /// The scheduler's reason.
        source: SchedulerError,
    },
    /// The host asked the replay to stop (e.g. Ctrl-C from Python).
    #[error("interrupted at simulated time {at_s} s")]
    Interrupted {
        /// The simulated time when it stopped.
        at_s: u64,
    },
    /// An event the scheduler refused: a replay bug, reported rather than hidden.
    #[error("replay event refused: {0}")]
    Scheduler(#[from] SchedulerError),
    /// The scheduler's state broke an invariant.
    #[error("scheduler invariant broken: {0}")]
    Invariant(#[from] gangway_core::InvariantViolation),
}

/// Replays `trace` on `topology` with `policies`. `on_progress` is told how
/// far the replay has got whenever a job arrives or ends (for progress
/// bars: a slow run shows its simulated time moving).
pub fn run(
    topology: Topology,
    trace: &Trace,
    policies: PolicySet,
    cfg: &SimConfig,
    mut on_progress: impl FnMut(Progress),
) -> Result<RunResult, SimError> {
    run_until(topology, trace, policies, cfg, |p| {
        on_progress(p);
        ControlFlow::Continue(())
    })
}

/// [`run`], stopping with [`SimError::Interrupted`] as soon as
/// `on_progress` answers [`ControlFlow::Break`] (a host's Ctrl-C).
pub fn run_until(
    topology: Topology,
    trace: &Trace,
    policies: PolicySet,
    cfg: &SimConfig,
    mut on_progress: impl FnMut(Progress) -> ControlFlow<()>,
) -> Result<RunResult, SimError> {
    let clock = Instant::now();
    let mut sim = Replay::new(topology, trace, policies, cfg);
    let mut meter = Meter::new(trace, sim.sched.virtual_clusters().len());
    let mut reported = Progress::default();
    while let Some(t) = sim.next_time() {
        meter.account(&sim.sched, t);
        sim.handle_instant(t)?;
        let progress = Progress {
            arrived: sim.next_arrival,
            finished: sim.finished,
            now_s: t,
        };
        if (progress.arrived, progress.finished) != (reported.arrived, reported.finished) {
            reported = progress;
            if on_progress(progress).is_break() {
                return Err(SimError::Interrupted { at_s: t });
            }
        }
        if sim.over() {
            break;
        }
    }
    sim.result(meter, clock)
}
