//! The scheduler: the facade a host drives. It owns the allocation state
//! ([`ClusterState`]), the job book (every job and its indexes), the policy
//! set and the round's reusable scratch, takes the host's events, and runs
//! a round ([`crate::round`]) over them.

use std::collections::BTreeMap;
use std::sync::Arc;

use gangway_plugin_sdk::{Fairness, JobId, Slot, SlotContract, VcId, WaitReason};

use crate::book::{JobBook, VirtualCluster};
use crate::job::{AttemptEnd, JobRecord, JobSpec, JobState};
use crate::policy::{BoxedBackend, PolicySet, SlotHealth, ViewChanges};
use crate::round::{Round, RoundReport, RoundScratch};
use crate::scheduler_error::SchedulerError;
use crate::server_set::ServerSet;
use crate::state::{ClusterState, Health, InvariantViolation, Placement};
use crate::topology::{GpuRequest, ServerId, Topology};

mod types;

/// A GPU-cluster scheduler: jobs, virtual clusters, allocation state and the
/// six policy slots. The host feeds it events (submit, attempt ends, server
/// health) and calls [`Scheduler::round`] to learn which jobs to start where.
///
/// ```
/// use gangway_core::{Scheduler, Topology, JobSpec, AttemptEnd};
/// use gangway_plugin_sdk::JobId;
///
/// let mut sched = Scheduler::new(Topology::uniform(2, 4, 8).unwrap());
/// let vc = sched.virtual_cluster("research");
/// sched.set_quota(vc, Some(32));
/// sched.submit(JobSpec { id: JobId(1), vc, user: 0, gpus: 16, submitted_s: 0 }).unwrap();
/// sched.submit(JobSpec { id: JobId(2), vc, user: 0, gpus: 32, submitted_s: 1 }).unwrap();
///
/// let round = sched.round(1).unwrap();
/// assert_eq!(round.starts.len(), 1); // job 2 would take the VC over its quota
/// assert_eq!(round.starts[0].job, JobId(1));
/// assert_eq!(round.starts[0].choice.servers, 2);
/// println!("job 2 waits: {:?}", sched.why_pending(JobId(2)));
///
/// sched.end_attempt(JobId(1), 600, AttemptEnd::Passed).unwrap();
/// let round = sched.round(600).unwrap();
/// assert_eq!(round.starts[0].job, JobId(2));
/// sched.check_invariants().unwrap();
/// ```
pub struct Scheduler {
    pub(crate) state: ClusterState,
    pub(crate) book: JobBook,
    pub(crate) policies: PolicySet,
    pub(crate) last_round_s: u64,
    /// Jobs per VC a fairness view shows (0: all).
    pub(crate) view_window: usize,
    /// Rounds run so far.
    pub(crate) rounds: u64,
    /// Reclaim and defragment are not shown jobs that have run less than
    /// this many seconds (0: every stoppable job).
    pub(crate) min_run_before_stop: u64,
    /// What a round keeps for the next one to reuse.
    scratch: RoundScratch,
}

impl std::fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scheduler")
            .field("jobs", &self.book.records().len())
            .field("pending", &self.book.pending().len())
            .field("policies", &self.policies)
            .finish_non_exhaustive()
    }
}

impl Scheduler {
    /// How many pending jobs of each VC a round shows a fairness policy that
    /// declares a queue order, by default.
    ///
    /// 32 per VC is about 450 jobs for Philly's 14 VCs: the depth that
    /// Slurm's schedulers look into by default (`default_queue_depth` 100
    /// for the main scheduler, `bf_max_job_test` 500 for backfill). A round
    /// costs about this many jobs however long the queues grow; jobs behind
    /// the window wait as [`WaitReason::Queued`].
    pub const DEFAULT_VIEW_WINDOW: usize = 32;

    /// A scheduler over `topology` with the built-in policies.
    pub fn new(topology: Topology) -> Scheduler {
        Scheduler::with_policies(topology, PolicySet::fallbacks())
    }

    /// A scheduler with the given policies.
    pub fn with_policies(topology: Topology, policies: PolicySet) -> Scheduler {
        let topology = Arc::new(topology);
        let order = policies.slot::<Fairness>().manifest().queue_order;
        Scheduler {
            state: ClusterState::new(Arc::clone(&topology)),
            book: JobBook::new(topology, order),
            policies,
            last_round_s: 0,
            view_window: Scheduler::DEFAULT_VIEW_WINDOW,
            rounds: 0,
            min_run_before_stop: 0,
            scratch: RoundScratch::default(),
        }
    }

    /// The allocation state (read-only).
    pub fn state(&self) -> &ClusterState {
        &self.state
    }

    /// Sets how placement search breaks ties between equally local
    /// placements (best fit by default).
    pub fn set_placement_strategy(&mut self, strategy: crate::PlacementStrategy) {
        self.state.set_strategy(strategy);
    }

    /// Sets how many pending jobs of each virtual cluster a round shows the
    /// fairness policy, when the policy declares the order it follows within
    /// a VC (`0`: every pending job). A round's cost then grows with the
    /// window and the number of VCs, not with the backlog.
    pub fn set_view_window(&mut self, jobs_per_vc: usize) {
        self.view_window = jobs_per_vc;
    }

    /// Sets a run time under which no reclaim or defragment policy may
    /// stop or move a job, whatever the policy (`0`, the default: each
    /// policy's own rule). Such jobs are left out of their views. A host
    /// on which stopping a job is costly (a Kubernetes gang's pods are
    /// deleted and made again) keeps young gangs from being taken back
    /// moments after they started.
    pub fn set_min_run_before_stop(&mut self, secs: u64) {
        self.min_run_before_stop = secs;
    }

    /// Restricts where job `id` may be placed from now on to the servers
    /// of `allowed` (`None`: anywhere again): a host's constraint that the
    /// core's view of GPUs does not capture (a node selector, a taint the
    /// job's pods do not tolerate, too little memory on a server for them).
    /// Every placement the core makes for it (starts, reclaim's starts,
    /// defragment's target and moves) stays within the set, and when it
    /// does not fit, its wait reason counts the set's free GPUs only. A
    /// restricted job is never given a reservation (the gang slot's
    /// `Reserve` backfills it). Not kept in snapshots: a host sets it
    /// again after a restore.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use gangway_core::{JobId, JobSpec, Scheduler, ServerId, ServerSet, Topology};
    /// let mut sched = Scheduler::new(Topology::uniform(1, 2, 8).unwrap());
    /// let vc = sched.virtual_cluster("a");
    /// sched.submit(JobSpec { id: JobId(1), vc, user: 0, gpus: 4, submitted_s: 0 }).unwrap();
    /// let only: ServerSet = [ServerId(1)].into_iter().collect();
    /// sched.restrict(JobId(1), Some(Arc::new(only))).unwrap();
    /// let round = sched.round(0).unwrap();
    /// assert_eq!(round.starts[0].choice.placement.parts[0].server, ServerId(1));
    /// ```
    pub fn restrict(
        &mut self,
        id: JobId,
        allowed: Option<Arc<ServerSet>>,
    ) -> Result<(), SchedulerError> {
        if self.book.get(&id).is_none() {
            return Err(SchedulerError::UnknownJob(id));
        }
        self.book.restrict(id, allowed);
        Ok(())
    }

    /// The topology.
    pub fn topology(&self) -> &Topology {
        self.state.topology()
    }

    /// The id of the virtual cluster named `name`, created (without a quota)
    /// on first use.
    pub fn virtual_cluster(&mut self, name: &str) -> VcId {
        self.book.named_vc(name)
    }

    /// The id of the virtual cluster named `name`, if it exists.
    pub fn find_virtual_cluster(&self, name: &str) -> Option<VcId> {
        self.book.vcs.find(name)
    }

    /// Sets a virtual cluster's GPU quota (`None` = unlimited). Unknown ids are ignored.
    pub fn set_quota(&mut self, vc: VcId, quota_gpus: Option<u32>) {
        self.book.change_vc(vc, |v| v.quota_gpus = quota_gpus);
    }

    /// Sets a virtual cluster's weight for weighted fair shares (at least 1).
    pub fn set_weight(&mut self, vc: VcId, weight: u32) {
        self.book.change_vc(vc, |v| v.weight = weight.max(1));
    }

    /// Every virtual cluster, indexed by [`VcId`].
    pub fn virtual_clusters(&self) -> &[VirtualCluster] {
        self.book.vcs.list()
    }

    /// The policies in use.
    pub fn policies(&self) -> &PolicySet {
        &self.policies
    }

    /// The policies in use, mutably: swap a slot's policy between rounds
    /// (`policies_mut().slot_mut::<S>().swap(..)`) or change guard settings.
    pub fn policies_mut(&mut self) -> &mut PolicySet {
        &mut self.policies
    }

    /// Makes `backend` slot `S`'s active policy now (keeping the previous one
    /// for rollback). Call it between rounds; from another thread, stage it
    /// through the slot's [`crate::policy::SlotHandle`] instead.
    pub fn swap<S: SlotContract>(&mut self, backend: BoxedBackend<S>) {
        self.policies.slot_mut::<S>().swap(backend);
        if S::SLOT == Slot::Fairness {
            self.sync_queue_order();
        }
    }

    /// Re-sorts the per-VC queues if the fairness policy's declared order
    /// changed.
    fn sync_queue_order(&mut self) {
        let order = self.policies.slot::<Fairness>().manifest().queue_order;
        self.book.set_queue_order(order);
    }

    /// Failure counters of a slot's current policy.
    pub fn slot_health(&self, slot: Slot) -> &SlotHealth {
        self.policies.health(slot)
    }

    /// The change log as it stands: which jobs and VCs changed how views
    /// show them since any earlier stamp (see [`ViewChanges`]). Rounds hand
    /// it to every backend with its view.
    pub fn view_changes(&self) -> ViewChanges<'_> {
        let log = self.book.changes();
        ViewChanges::new(log, log.now())
    }

    /// Submits a job; it waits for the next round. On a cluster of several
    /// GPU types it may run on any type large enough for its gang (see
    /// [`Scheduler::submit_requesting`]).
    pub fn submit(&mut self, spec: JobSpec) -> Result<(), SchedulerError> {
        self.submit_requesting(spec, &GpuRequest::default())
    }

    /// Runs one scheduling round at time `now` and applies its decisions.
    ///
    /// Staged policy swaps take effect first. The retry slot decides about
    /// every attempt that failed since the last round; retries whose delay is
    /// over become pending. Fairness orders the pending jobs of its view and
    /// marks eligibility; locality gives each eligible job a spread limit;
    /// jobs are placed in order, the gang policy deciding what a job that
    /// does not fit does to those behind it. Then the reclaim slot may stop
    /// running jobs for waiting ones and the defragment slot may move
    /// running jobs to make room for a waiting gang. Every pending job of the
    /// view leaves the round with a [`WaitReason`].
    pub fn round(&mut self, now: u64) -> Result<RoundReport, SchedulerError> {
        if now < self.last_round_s {
            return Err(SchedulerError::TimeWentBack {
                now,
                last: self.last_round_s,
            });
        }
        self.last_round_s = now;
        self.rounds += 1;
        // Between rounds: the only point where a slot may swap what it runs.
        let swapped = self.policies.prepare_round();
        // Also catches a policy set replaced through `policies_mut`.
        self.sync_queue_order();
        let round = Round {
            now,
            view_window: self.view_window,
            min_run_s: self.min_run_before_stop,
            state: &mut self.state,
            book: &mut self.book,
            policies: &mut self.policies,
            scratch: &mut self.scratch,
        };
        Ok(round.run(swapped))
    }

    /// A job (any state).
    pub fn job(&self, id: JobId) -> Option<&JobRecord> {
        self.book.get(&id)
    }

    /// Every job, by id.
    pub fn jobs(&self) -> &BTreeMap<JobId, JobRecord> {
        self.book.records()
    }

    /// Every running job by id, as the reclaim and defragment slots see
    /// it: its VC, user, GPUs and their servers, when its attempt started,
    /// and the GPU-seconds it has received with the current attempt counted
    /// up to `now_s`. Its cost is one copy per running job (the scheduler
    /// keeps them indexed), not a walk over every job it knows.
    ///
    /// ```
    /// use gangway_core::{JobId, JobSpec, Scheduler, Topology};
    ///
    /// let mut sched = Scheduler::new(Topology::uniform(1, 2, 8)?);
    /// let vc = sched.virtual_cluster("speech");
    /// sched.submit(JobSpec { id: JobId(7), vc, user: 3, gpus: 4, submitted_s: 0 })?;
    /// sched.round(10)?;
    /// let running = sched.running_jobs(110);
    /// assert_eq!(running.len(), 1);
    /// assert_eq!((running[0].id, running[0].gpus, running[0].started_s), (JobId(7), 4, 10));
    /// assert_eq!(running[0].attained_gpu_s, 4 * 100);
    /// assert_eq!(running[0].parts.iter().map(|(_, g)| g).sum::<u32>(), 4);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn running_jobs(&self, now_s: u64) -> Vec<gangway_plugin_sdk::RunningJob> {
        self.book
            .running()
            .values()
            .map(|r| {
                let mut job = r.clone();
                job.attained_gpu_s = crate::book::attained_at(r, now_s);
                job
            })
            .collect()
    }

    /// The time of the last round run (0 before the first): the host's
    /// "now" as far as the scheduler knows, e.g. for
    /// [`JobRecord::wait_at`](crate::JobRecord::wait_at).
    pub fn last_round_s(&self) -> u64 {
        self.last_round_s
    }

    /// Number of pending jobs.
    pub fn pending_len(&self) -> usize {
        self.book.pending().len()
    }

    /// The pending jobs, in submit order (then id): those a round may start,
    /// including those beyond their VC's view window. Its cost is the walk
    /// over the pending jobs only.
    ///
    /// ```
    /// use gangway_core::{JobId, JobSpec, Scheduler, Topology};
    ///
    /// let mut sched = Scheduler::new(Topology::uniform(1, 1, 8)?);
    /// let vc = sched.virtual_cluster("speech");
    /// sched.submit(JobSpec { id: JobId(2), vc, user: 0, gpus: 8, submitted_s: 0 })?;
    /// sched.submit(JobSpec { id: JobId(1), vc, user: 0, gpus: 8, submitted_s: 5 })?;
    /// assert_eq!(sched.pending_jobs().collect::<Vec<_>>(), [JobId(2), JobId(1)]);
    /// sched.round(10)?;
    /// assert_eq!(sched.pending_jobs().collect::<Vec<_>>(), [JobId(1)]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn pending_jobs(&self) -> impl Iterator<Item = JobId> + '_ {
        self.book.pending().iter().map(|(_, id)| *id)
    }

    /// Jobs that are neither pending nor finished but will be again: failed
    /// attempts awaiting a retry decision and jobs waiting out a retry delay.
    pub fn retrying_len(&self) -> usize {
        self.book.awaiting_retry().len() + self.book.delayed().len()
    }

    /// The smallest gang among pending jobs (`None` when none waits). A host
    /// can skip a round while fewer GPUs are free than this: no job could
    /// start (unless a reclaim policy would stop jobs for it).
    pub fn smallest_pending_gpus(&self) -> Option<u32> {
        self.book.smallest_pending_gpus()
    }

    /// Failed attempts the retry slot decides about at the next round.
    pub fn awaiting_retry_len(&self) -> usize {
        self.book.awaiting_retry().len()
    }

    /// The earliest time a delayed retry becomes pending, if any.
    pub fn next_retry_s(&self) -> Option<u64> {
        self.book.delayed().first().map(|(t, _)| *t)
    }

    /// Why a job waits: the reason of the last round that considered it, or
    /// [`WaitReason::Queued`] if it is pending behind its VC's view window,
    /// or [`WaitReason::RetryDelay`] while it waits to be retried. `None` if
    /// it is running or finished, or no round has run since it was submitted.
    pub fn why_pending(&self, id: JobId) -> Option<WaitReason> {
        match self.book.get(&id)?.state {
            JobState::Pending { reason, .. } => match reason {
                Some(r) if self.book.was_viewed(&id) => Some(r),
                _ if self.rounds > 0 => Some(WaitReason::Queued),
                _ => None,
            },
            JobState::Delayed { .. } | JobState::AwaitingRetry(_) => Some(WaitReason::RetryDelay),
            _ => None,
        }
    }

    /// The host reports that a running job's attempt ended.
    pub fn end_attempt(
        &mut self,
        id: JobId,
        now: u64,
        end: AttemptEnd,
    ) -> Result<(), SchedulerError> {
        self.book.end_attempt(&mut self.state, id, now, end)
    }

    /// Part of running job `id`'s gang ended while the rest runs (one pod
    /// of a multi-pod job finished): from `now` it holds only `keep`, a part
    /// of its GPUs, and the others are free for new work at once. The GPU
    /// time the freed GPUs ran is counted as attained, and the job's VC no
    /// longer holds them. The job still ends through
    /// [`Scheduler::end_attempt`]; if it is stopped and started again, it
    /// asks for its whole gang. Refused ([`SchedulerError::Shrink`]) when
    /// `keep` is empty or not a part of what the job holds.
    ///
    /// ```
    /// use gangway_core::{JobId, JobSpec, Placement, Scheduler, ServerGpus, ServerId, Topology};
    /// let mut sched = Scheduler::new(Topology::uniform(1, 1, 8).unwrap());
    /// let vc = sched.virtual_cluster("a");
    /// sched.submit(JobSpec { id: JobId(1), vc, user: 0, gpus: 8, submitted_s: 0 }).unwrap();
    /// sched.round(0).unwrap();
    /// let keep = Placement { parts: vec![ServerGpus { server: ServerId(0), gpus: 0x0f }] };
    /// sched.shrink(JobId(1), &keep, 10).unwrap();
    /// assert_eq!(sched.state().free_gpus(), 4);
    /// assert_eq!(sched.job(JobId(1)).unwrap().attained_gpu_s, 40);
    /// sched.check_invariants().unwrap();
    /// ```
    pub fn shrink(&mut self, id: JobId, keep: &Placement, now: u64) -> Result<(), SchedulerError> {
        self.book.shrink(&mut self.state, id, keep, now).map(|_| ())
    }

    /// The host could not launch a job the round started, through no fault
    /// of the job (its engine did not answer, or refused for a reason of its
    /// own configuration): the job's GPUs are released and it is pending
    /// again from `now`. The attempt is not a failure: no retry decision,
    /// no GPU time counted as lost.
    ///
    /// ```
    /// use gangway_core::{JobId, JobSpec, Scheduler, Topology};
    /// let mut sched = Scheduler::new(Topology::uniform(1, 1, 8).unwrap());
    /// let vc = sched.virtual_cluster("a");
    /// sched.submit(JobSpec { id: JobId(1), vc, user: 0, gpus: 8, submitted_s: 0 }).unwrap();
    /// assert_eq!(sched.round(0).unwrap().starts.len(), 1);
    /// sched.requeue(JobId(1), 0).unwrap();
    /// assert!(sched.job(JobId(1)).unwrap().is_pending());
    /// assert_eq!(sched.state().free_gpus(), 8);
    /// sched.check_invariants().unwrap();
    /// ```
    pub fn requeue(&mut self, id: JobId, now: u64) -> Result<(), SchedulerError> {
        self.book.stop(&mut self.state, id, now, false)?;
        self.book.enqueue(id, now);
        Ok(())
    }

    /// Kills a job that has not finished.
    pub fn kill(&mut self, id: JobId, now: u64) -> Result<(), SchedulerError> {
        self.book.kill(&mut self.state, id, now)
    }

    /// A server failed: every job with a GPU on it is interrupted (its whole
    /// gang released) and re-queued. Returns those jobs in id order.
    pub fn server_down(
        &mut self,
        server: ServerId,
        now: u64,
    ) -> Result<Vec<JobId>, SchedulerError> {
        let hit = self
            .state
            .set_health(server, Health::Down)
            .map_err(|_| SchedulerError::UnknownServer(server))?;
        for &id in &hit {
            self.book.stop(&mut self.state, id, now, true)?;
            self.book.enqueue(id, now);
        }
        Ok(hit)
    }

    /// A server is back (or stops draining).
    pub fn server_up(&mut self, server: ServerId) -> Result<(), SchedulerError> {
        self.state
            .set_health(server, Health::Up)
            .map(|_| ())
            .map_err(|_| SchedulerError::UnknownServer(server))
    }

    /// A server keeps its jobs but takes no new ones.
    pub fn drain(&mut self, server: ServerId) -> Result<(), SchedulerError> {
        if self.state.health(server) == Some(Health::Down) {
            return Ok(());
        }
        self.state
            .set_health(server, Health::Draining)
            .map(|_| ())
            .map_err(|_| SchedulerError::UnknownServer(server))
    }

    /// Verifies the allocation state and the job book against each other:
    /// no GPU held twice, every running gang holds exactly its placement
    /// (no more GPUs than it needs; fewer only once shrunk), every job is in
    /// exactly one state and every index agrees with it, VC totals match.
    pub fn check_invariants(&self) -> Result<(), InvariantViolation> {
        self.state.check_invariants()?;
        self.book.check(&self.state)?;
        self.check_types()?;
        if self.state.held_gpus() != 0 {
            return Err(InvariantViolation(
                "reservation holds survived the round".into(),
            ));
        }
        Ok(())
    }
}
