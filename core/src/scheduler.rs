//! The scheduler: the job table, virtual clusters, events, and the policy set.
//! The round itself lives in [`crate::round`].

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use rustc_hash::FxHashMap;

use gangway_plugin_sdk::{JobId, RunningJob, Slot, VcId, WaitReason};

use crate::job::{AttemptEnd, Failure, FinalStatus, JobRecord, JobSpec, JobState};
use crate::job_table::JobTable;
use crate::placement::Scope;
use crate::policy::{BoxedBackend, PolicySet, SlotHealth};
use crate::queue::{QueueIndex, Queued};
use crate::state::{ClusterState, Health, InvariantViolation};
use crate::topology::{ServerId, Topology};
use gangway_plugin_sdk::SlotContract;

/// A virtual cluster (tenant) and its bookkeeping.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct VirtualCluster {
    /// Its name.
    pub name: String,
    /// Its GPU quota, if any.
    pub quota_gpus: Option<u32>,
    /// Its weight for weighted fair shares.
    pub weight: u32,
    /// GPUs its running jobs hold.
    pub held_gpus: u32,
    /// GPU-seconds its jobs received (finished attempts).
    pub attained_gpu_s: u64,
    /// GPUs its pending jobs ask for.
    pub pending_gpus: u32,
    /// Its pending jobs.
    pub pending_jobs: u32,
}

/// A refused event. The scheduler is unchanged.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SchedulerError {
    /// A job with this id was already submitted.
    #[error("{0} was already submitted")]
    DuplicateJob(JobId),
    /// The job is not known.
    #[error("{0} is unknown")]
    UnknownJob(JobId),
    /// The job asks for no GPUs.
    #[error("{0} asks for 0 GPUs")]
    ZeroGpus(JobId),
    /// The job can never fit on this cluster.
    #[error("{job} asks for {gpus} GPUs but the cluster has only {cluster}")]
    TooLarge {
        /// The job.
        job: JobId,
        /// Its GPUs.
        gpus: u32,
        /// The cluster's GPUs.
        cluster: u32,
    },
    /// The virtual cluster id was not created by [`Scheduler::virtual_cluster`].
    #[error("{job}: unknown virtual cluster {vc:?}")]
    UnknownVc {
        /// The job.
        job: JobId,
        /// The id.
        vc: VcId,
    },
    /// The event does not fit the job's state (e.g. ending a pending job).
    #[error("{job}: cannot {event} a job that is {state}")]
    WrongState {
        /// The job.
        job: JobId,
        /// The event.
        event: &'static str,
        /// Its state.
        state: &'static str,
    },
    /// The server does not exist.
    #[error("{0} does not exist")]
    UnknownServer(ServerId),
    /// Time went backwards.
    #[error("time went backwards: {now} is before the last round at {last}")]
    TimeWentBack {
        /// The time given.
        now: u64,
        /// The previous round.
        last: u64,
    },
}

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
    pub(crate) jobs: JobTable,
    /// Pending jobs keyed by (submit time, id).
    pub(crate) pending: BTreeSet<(u64, JobId)>,
    /// Pending jobs per VC, in the fairness policy's declared order.
    pub(crate) queues: QueueIndex,
    /// How many pending jobs need each GPU count.
    pending_sizes: BTreeMap<u32, u32>,
    /// Jobs waiting out a retry delay, by (until, id).
    pub(crate) delayed: BTreeSet<(u64, JobId)>,
    /// Jobs whose failed attempt the retry slot has not seen yet.
    pub(crate) awaiting_retry: BTreeSet<JobId>,
    pub(crate) vcs: Vec<VirtualCluster>,
    vc_names: HashMap<String, VcId>,
    pub(crate) policies: PolicySet,
    pub(crate) last_round_s: u64,
    /// Sticky reservation scopes of blocked jobs.
    pub(crate) reservations: BTreeMap<JobId, Scope>,
    /// Jobs per VC a fairness view shows (0: all).
    pub(crate) view_window: usize,
    /// The pending jobs of the last round's fairness view, with the reason
    /// each waited for (a job leaves it when it stops being pending).
    pub(crate) last_view: FxHashMap<JobId, WaitReason>,
    /// Rounds run so far.
    pub(crate) rounds: u64,
    /// The time of the last round that showed fairness a view.
    pub(crate) prev_view_round_s: Option<u64>,
    /// The running jobs of the last reclaim or defragment view, kept so the
    /// next one reuses their memory (see `running_jobs_into`).
    pub(crate) spare_running: Vec<RunningJob>,
    /// The maps of the last round's placement, kept so the next round
    /// reuses their memory.
    pub(crate) spare_placed: crate::round::Placed,
}

impl std::fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scheduler")
            .field("jobs", &self.jobs.len())
            .field("pending", &self.pending.len())
            .field("policies", &self.policies)
            .finish_non_exhaustive()
    }
}

pub(crate) fn state_name(state: &JobState) -> &'static str {
    match state {
        JobState::Pending { .. } => "pending",
        JobState::AwaitingRetry(_) => "awaiting a retry decision",
        JobState::Delayed { .. } => "waiting to be retried",
        JobState::Running { .. } => "running",
        JobState::Finished { .. } => "finished",
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
        Scheduler::with_policies(topology, PolicySet::builtin())
    }

    /// A scheduler with the given policies.
    pub fn with_policies(topology: Topology, policies: PolicySet) -> Scheduler {
        let mut queues = QueueIndex::default();
        queues.rebuild(
            policies
                .slot::<gangway_plugin_sdk::Fairness>()
                .manifest()
                .queue_order,
            std::iter::empty(),
        );
        Scheduler {
            state: ClusterState::new(Arc::new(topology)),
            jobs: JobTable::default(),
            pending: BTreeSet::new(),
            queues,
            pending_sizes: BTreeMap::new(),
            delayed: BTreeSet::new(),
            awaiting_retry: BTreeSet::new(),
            vcs: Vec::new(),
            vc_names: HashMap::new(),
            policies,
            last_round_s: 0,
            reservations: BTreeMap::new(),
            view_window: Scheduler::DEFAULT_VIEW_WINDOW,
            last_view: FxHashMap::default(),
            rounds: 0,
            prev_view_round_s: None,
            spare_running: Vec::new(),
            spare_placed: crate::round::Placed::default(),
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

    /// The topology.
    pub fn topology(&self) -> &Topology {
        self.state.topology()
    }

    /// The id of the virtual cluster named `name`, created (without a quota)
    /// on first use.
    pub fn virtual_cluster(&mut self, name: &str) -> VcId {
        if let Some(id) = self.vc_names.get(name) {
            return *id;
        }
        let id = VcId(u32::try_from(self.vcs.len()).unwrap_or(u32::MAX));
        self.vcs.push(VirtualCluster {
            name: name.to_string(),
            quota_gpus: None,
            weight: 1,
            held_gpus: 0,
            attained_gpu_s: 0,
            pending_gpus: 0,
            pending_jobs: 0,
        });
        self.vc_names.insert(name.to_string(), id);
        id
    }

    /// The id of the virtual cluster named `name`, if it exists.
    pub fn find_virtual_cluster(&self, name: &str) -> Option<VcId> {
        self.vc_names.get(name).copied()
    }

    /// Sets a virtual cluster's GPU quota (`None` = unlimited). Unknown ids are ignored.
    pub fn set_quota(&mut self, vc: VcId, quota_gpus: Option<u32>) {
        if let Some(v) = self.vcs.get_mut(vc.0 as usize) {
            v.quota_gpus = quota_gpus;
        }
    }

    /// Sets a virtual cluster's weight for weighted fair shares (at least 1).
    pub fn set_weight(&mut self, vc: VcId, weight: u32) {
        if let Some(v) = self.vcs.get_mut(vc.0 as usize) {
            v.weight = weight.max(1);
        }
    }

    /// Every virtual cluster, indexed by [`VcId`].
    pub fn virtual_clusters(&self) -> &[VirtualCluster] {
        &self.vcs
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
    pub(crate) fn sync_queue_order(&mut self) {
        let order = self
            .policies
            .slot::<gangway_plugin_sdk::Fairness>()
            .manifest()
            .queue_order;
        if &order != self.queues.order() {
            let entries: Vec<(&JobRecord, Queued)> = self
                .pending
                .iter()
                .filter_map(|(_, id)| self.jobs.get(id))
                .map(|job| (job, self.queued(job)))
                .collect();
            let mut queues = std::mem::take(&mut self.queues);
            queues.rebuild(order, entries.into_iter());
            self.queues = queues;
        }
    }

    /// Failure counters of a slot's current policy.
    pub fn slot_health(&self, slot: Slot) -> &SlotHealth {
        self.policies.health(slot)
    }

    /// Submits a job; it waits for the next round.
    pub fn submit(&mut self, spec: JobSpec) -> Result<(), SchedulerError> {
        let id = spec.id;
        if self.jobs.contains_key(&id) {
            return Err(SchedulerError::DuplicateJob(id));
        }
        if spec.gpus == 0 {
            return Err(SchedulerError::ZeroGpus(id));
        }
        let cluster = self.topology().total_gpus();
        if spec.gpus > cluster {
            return Err(SchedulerError::TooLarge {
                job: id,
                gpus: spec.gpus,
                cluster,
            });
        }
        if spec.vc.0 as usize >= self.vcs.len() {
            return Err(SchedulerError::UnknownVc {
                job: id,
                vc: spec.vc,
            });
        }
        let since = spec.submitted_s;
        self.jobs.insert(id, JobRecord::submitted(spec));
        self.enqueue(id, since);
        Ok(())
    }

    /// Makes `id` pending since `since` and files it in every index.
    pub(crate) fn enqueue(&mut self, id: JobId, since: u64) {
        let Some(job) = self.jobs.get_mut(&id) else {
            return;
        };
        job.state = JobState::Pending {
            since_s: since,
            reason: None,
        };
        job.charged_to_s = job.charged_to_s.max(since);
        let gpus = job.next_gpus();
        let (vc, submitted_s) = (job.spec.vc, job.spec.submitted_s);
        self.pending.insert((submitted_s, id));
        if let Some(job) = self.jobs.get(&id) {
            let queued = self.queued(job);
            self.queues.insert(job, queued);
        }
        *self.pending_sizes.entry(gpus).or_insert(0) += 1;
        if let Some(v) = self.vcs.get_mut(vc.0 as usize) {
            v.pending_gpus += gpus;
            v.pending_jobs += 1;
        }
    }

    /// Takes pending `id` out of every index (its state is the caller's to set).
    pub(crate) fn dequeue(&mut self, id: JobId) {
        let Some(job) = self.jobs.get(&id) else {
            return;
        };
        if !self.pending.remove(&(job.spec.submitted_s, id)) {
            return;
        }
        self.queues.remove(job);
        let gpus = job.next_gpus();
        if let Some(n) = self.pending_sizes.get_mut(&gpus) {
            *n -= 1;
            if *n == 0 {
                self.pending_sizes.remove(&gpus);
            }
        }
        if let Some(v) = self.vcs.get_mut(job.spec.vc.0 as usize) {
            v.pending_gpus = v.pending_gpus.saturating_sub(gpus);
            v.pending_jobs = v.pending_jobs.saturating_sub(1);
        }
        self.reservations.remove(&id);
        self.last_view.remove(&id);
    }

    /// A job (any state).
    pub fn job(&self, id: JobId) -> Option<&JobRecord> {
        self.jobs.get(&id)
    }

    /// Every job, by id.
    pub fn jobs(&self) -> &BTreeMap<JobId, JobRecord> {
        &self.jobs
    }

    /// The time of the last round run (0 before the first): the host's
    /// "now" as far as the scheduler knows, e.g. for
    /// [`JobRecord::wait_at`](crate::JobRecord::wait_at).
    pub fn last_round_s(&self) -> u64 {
        self.last_round_s
    }

    /// Number of pending jobs.
    pub fn pending_len(&self) -> usize {
        self.pending.len()
    }

    /// Jobs that are neither pending nor finished but will be again: failed
    /// attempts awaiting a retry decision and jobs waiting out a retry delay.
    pub fn retrying_len(&self) -> usize {
        self.awaiting_retry.len() + self.delayed.len()
    }

    /// The smallest gang among pending jobs (`None` when none waits). A host
    /// can skip a round while fewer GPUs are free than this: no job could
    /// start (unless a reclaim policy would stop jobs for it).
    pub fn smallest_pending_gpus(&self) -> Option<u32> {
        self.pending_sizes.keys().next().copied()
    }

    /// Failed attempts the retry slot decides about at the next round.
    pub fn awaiting_retry_len(&self) -> usize {
        self.awaiting_retry.len()
    }

    /// The earliest time a delayed retry becomes pending, if any.
    pub fn next_retry_s(&self) -> Option<u64> {
        self.delayed.first().map(|(t, _)| *t)
    }

    /// Why a job waits: the reason of the last round that considered it, or
    /// [`WaitReason::Queued`] if it is pending behind its VC's view window,
    /// or [`WaitReason::RetryDelay`] while it waits to be retried. `None` if
    /// it is running or finished, or no round has run since it was submitted.
    pub fn why_pending(&self, id: JobId) -> Option<WaitReason> {
        match self.jobs.get(&id)?.state {
            JobState::Pending { reason, .. } => match reason {
                Some(r) if self.last_view.contains_key(&id) => Some(r),
                _ if self.rounds > 0 => Some(WaitReason::Queued),
                _ => None,
            },
            JobState::Delayed { .. } | JobState::AwaitingRetry(_) => Some(WaitReason::RetryDelay),
            _ => None,
        }
    }

    /// Releases a running job's GPUs and books its run time; returns the
    /// GPU-seconds of the attempt.
    pub(crate) fn stop_running(
        &mut self,
        id: JobId,
        now: u64,
        lost: bool,
    ) -> Result<u64, SchedulerError> {
        let job = self.jobs.get(&id).ok_or(SchedulerError::UnknownJob(id))?;
        let JobState::Running { started_s, .. } = job.state else {
            return Err(SchedulerError::WrongState {
                job: id,
                event: "end an attempt of",
                state: state_name(&job.state),
            });
        };
        let gpus = self
            .state
            .allocation(id)
            .map_or_else(|| job.next_gpus(), |p| p.gpu_count());
        if self.state.allocation(id).is_some() {
            // Absent only when a server failure already released it.
            self.state
                .release(id)
                .map_err(|_| SchedulerError::UnknownJob(id))?;
        }
        let vc = job.spec.vc.0 as usize;
        let used = u64::from(gpus) * now.saturating_sub(started_s);
        if let Some(job) = self.jobs.get_mut(&id) {
            job.attained_gpu_s += used;
            if lost {
                job.failed_gpu_s += used;
            }
        }
        if let Some(v) = self.vcs.get_mut(vc) {
            v.held_gpus = v.held_gpus.saturating_sub(gpus);
            v.attained_gpu_s += used;
        }
        Ok(used)
    }

    pub(crate) fn finish(&mut self, id: JobId, status: FinalStatus, now: u64) {
        if let Some(job) = self.jobs.get_mut(&id) {
            job.state = JobState::Finished { status, at_s: now };
            job.probe = None;
        }
    }

    /// The host reports that a running job's attempt ended.
    pub fn end_attempt(
        &mut self,
        id: JobId,
        now: u64,
        end: AttemptEnd,
    ) -> Result<(), SchedulerError> {
        let (started_s, probe_s, gpus) = match self.jobs.get(&id).map(|j| (&j.state, j)) {
            Some((
                JobState::Running {
                    started_s, probe_s, ..
                },
                j,
            )) => (*started_s, *probe_s, j.next_gpus()),
            Some((state, _)) => {
                return Err(SchedulerError::WrongState {
                    job: id,
                    event: "end an attempt of",
                    state: state_name(state),
                });
            }
            None => return Err(SchedulerError::UnknownJob(id)),
        };
        let failed = matches!(end, AttemptEnd::Failed { .. });
        self.stop_running(id, now, failed)?;
        match end {
            AttemptEnd::Passed if probe_s.is_some() => {
                // The probe survived: the whole gang is next.
                if let Some(job) = self.jobs.get_mut(&id) {
                    job.probe = None;
                }
                self.enqueue(id, now);
            }
            AttemptEnd::Passed => self.finish(id, FinalStatus::Passed, now),
            AttemptEnd::Killed => self.finish(id, FinalStatus::Killed, now),
            AttemptEnd::Failed { last: true, .. } => self.finish(id, FinalStatus::Failed, now),
            AttemptEnd::Failed { class, last: false } => {
                if let Some(job) = self.jobs.get_mut(&id) {
                    job.state = JobState::AwaitingRetry(Failure {
                        at_s: now,
                        class,
                        run_s: now.saturating_sub(started_s),
                        gpus,
                        probe: probe_s.is_some(),
                    });
                    job.charged_to_s = job.charged_to_s.max(now);
                }
                self.awaiting_retry.insert(id);
            }
        }
        Ok(())
    }

    /// Kills a job that has not finished.
    pub fn kill(&mut self, id: JobId, now: u64) -> Result<(), SchedulerError> {
        let job = self.jobs.get(&id).ok_or(SchedulerError::UnknownJob(id))?;
        match job.state {
            JobState::Pending { reason, .. } => {
                self.dequeue(id);
                if let Some(job) = self.jobs.get_mut(&id) {
                    job.charge(reason, now);
                }
            }
            JobState::Delayed { until_s, .. } => {
                self.delayed.remove(&(until_s, id));
                if let Some(job) = self.jobs.get_mut(&id) {
                    job.charge(Some(WaitReason::RetryDelay), now);
                }
            }
            JobState::AwaitingRetry(_) => {
                self.awaiting_retry.remove(&id);
            }
            JobState::Running { .. } => {
                self.stop_running(id, now, false)?;
            }
            JobState::Finished { .. } => {
                return Err(SchedulerError::WrongState {
                    job: id,
                    event: "kill",
                    state: "finished",
                });
            }
        }
        self.finish(id, FinalStatus::Killed, now);
        Ok(())
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
            self.stop_running(id, now, true)?;
            self.enqueue(id, now);
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

    /// Verifies the allocation state and the job table against each other:
    /// no GPU held twice, every running gang holds exactly its GPUs, every
    /// job is in exactly one state and every index agrees with it, VC totals
    /// match.
    pub fn check_invariants(&self) -> Result<(), InvariantViolation> {
        self.state.check_invariants()?;
        let fail = |m: String| Err(InvariantViolation(m));
        let mut vc_held = vec![0u32; self.vcs.len()];
        let mut vc_pending = vec![(0u32, 0u32); self.vcs.len()];
        let (mut running, mut pending, mut delayed, mut awaiting, mut finished) = (0, 0, 0, 0, 0);
        for (id, job) in self.jobs.iter() {
            let vc = job.spec.vc.0 as usize;
            if vc >= self.vcs.len() {
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
                    let Some(p) = self.state.allocation(*id) else {
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
        if pending + running + delayed + awaiting + finished != self.jobs.len() {
            return fail("a job is in no state or in two".into());
        }
        if !self.jobs.index_matches() {
            return fail("the jobs' VC index disagrees with their records".into());
        }
        let sizes: u32 = self.pending_sizes.values().sum();
        if sizes as usize != pending {
            return fail(format!("{sizes} pending sizes for {pending} pending jobs"));
        }
        if running != self.state.allocations().len() {
            return fail(format!(
                "{running} jobs running but {} allocations",
                self.state.allocations().len()
            ));
        }
        for ((v, held), (pgpus, pjobs)) in self.vcs.iter().zip(vc_held).zip(vc_pending) {
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
        if self.state.held_gpus() != 0 {
            return fail("reservation holds survived the round".into());
        }
        Ok(())
    }
}
