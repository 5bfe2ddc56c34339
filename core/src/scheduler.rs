//! The scheduler: the job table, virtual clusters, events, and the policy set.
//! The round itself lives in [`crate::round`].

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use gangway_plugin_sdk::{JobId, VcId};

use crate::job::{AttemptEnd, FinalStatus, JobRecord, JobSpec, JobState, WaitBreakdown};
use crate::placement::Scope;
use crate::policy::{FairnessBackend, GangBackend, LocalityBackend, PolicyError, PolicySet, Slot};
use crate::state::{ClusterState, Health, InvariantViolation};
use crate::topology::{ServerId, Topology};

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
    #[error("server {0:?} does not exist")]
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

/// Per-slot failure bookkeeping.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SlotHealth {
    /// Failed calls, ever.
    pub failures: u64,
    /// Failed calls in a row (reset by a good call).
    pub consecutive: u32,
}

/// The scheduler a host embeds: submit jobs, report events, call
/// [`Scheduler::round`] and apply the starts it returns.
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
    pub(crate) jobs: BTreeMap<JobId, JobRecord>,
    /// Pending jobs keyed by (submit time, id).
    pub(crate) pending: BTreeSet<(u64, JobId)>,
    pub(crate) vcs: Vec<VirtualCluster>,
    vc_names: HashMap<String, VcId>,
    pub(crate) policies: PolicySet,
    pub(crate) fallback: PolicySet,
    pub(crate) slot_health: [SlotHealth; 3],
    pub(crate) last_round_s: u64,
    /// Sticky reservation scopes of blocked jobs.
    pub(crate) reservations: BTreeMap<JobId, Scope>,
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

fn state_name(state: &JobState) -> &'static str {
    match state {
        JobState::Pending { .. } => "pending",
        JobState::Running { .. } => "running",
        JobState::Finished { .. } => "finished",
    }
}

impl Scheduler {
    /// A scheduler over `topology` with the built-in default policies.
    pub fn new(topology: Topology) -> Scheduler {
        Scheduler::with_policies(topology, PolicySet::defaults())
    }

    /// A scheduler with the given policies.
    pub fn with_policies(topology: Topology, policies: PolicySet) -> Scheduler {
        Scheduler {
            state: ClusterState::new(Arc::new(topology)),
            jobs: BTreeMap::new(),
            pending: BTreeSet::new(),
            vcs: Vec::new(),
            vc_names: HashMap::new(),
            policies,
            fallback: PolicySet::defaults(),
            slot_health: Default::default(),
            last_round_s: 0,
            reservations: BTreeMap::new(),
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
        });
        self.vc_names.insert(name.to_string(), id);
        id
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

    /// The policies in use (read-only).
    pub fn policies(&self) -> &PolicySet {
        &self.policies
    }

    /// Replaces the fairness policy between rounds; returns the previous one.
    pub fn swap_fairness(&mut self, p: Box<dyn FairnessBackend>) -> Box<dyn FairnessBackend> {
        self.slot_health[Slot::Fairness as usize] = SlotHealth::default();
        std::mem::replace(&mut self.policies.fairness, p)
    }

    /// Replaces the locality policy between rounds; returns the previous one.
    pub fn swap_locality(&mut self, p: Box<dyn LocalityBackend>) -> Box<dyn LocalityBackend> {
        self.slot_health[Slot::Locality as usize] = SlotHealth::default();
        std::mem::replace(&mut self.policies.locality, p)
    }

    /// Replaces the gang policy between rounds; returns the previous one.
    pub fn swap_gang(&mut self, p: Box<dyn GangBackend>) -> Box<dyn GangBackend> {
        self.slot_health[Slot::Gang as usize] = SlotHealth::default();
        std::mem::replace(&mut self.policies.gang, p)
    }

    /// Failure counters of a slot's current policy.
    pub fn slot_health(&self, slot: Slot) -> &SlotHealth {
        &self.slot_health[slot as usize]
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
        self.pending.insert((since, id));
        self.jobs.insert(
            id,
            JobRecord {
                spec,
                state: JobState::Pending {
                    since_s: since,
                    reason: None,
                },
                attempts: 0,
                attained_gpu_s: 0,
                failed_gpu_s: 0,
                first_start_s: None,
                first_placement: None,
                wait: WaitBreakdown::default(),
                charged_to_s: since,
            },
        );
        Ok(())
    }

    /// A job (any state).
    pub fn job(&self, id: JobId) -> Option<&JobRecord> {
        self.jobs.get(&id)
    }

    /// Every job, by id.
    pub fn jobs(&self) -> &BTreeMap<JobId, JobRecord> {
        &self.jobs
    }

    /// Number of pending jobs.
    pub fn pending_len(&self) -> usize {
        self.pending.len()
    }

    /// The smallest gang among pending jobs (`None` when none waits). A host
    /// can skip a round while fewer GPUs are free than this: no job could start.
    pub fn smallest_pending_gpus(&self) -> Option<u32> {
        self.pending
            .iter()
            .filter_map(|(_, id)| self.jobs.get(id).map(|j| j.spec.gpus))
            .min()
    }

    /// Why a pending job did not start in the last round (`None` if it is not
    /// pending or no round has considered it yet).
    pub fn why_pending(&self, id: JobId) -> Option<crate::WaitReason> {
        match self.jobs.get(&id)?.state {
            JobState::Pending { reason, .. } => reason,
            _ => None,
        }
    }

    /// Releases a running job's GPUs and books its run time.
    pub(crate) fn stop_running(
        &mut self,
        id: JobId,
        now: u64,
        lost: bool,
    ) -> Result<(), SchedulerError> {
        let job = self.jobs.get(&id).ok_or(SchedulerError::UnknownJob(id))?;
        let JobState::Running { started_s, .. } = job.state else {
            return Err(SchedulerError::WrongState {
                job: id,
                event: "end an attempt of",
                state: state_name(&job.state),
            });
        };
        if self.state.allocation(id).is_some() {
            // Absent only when a server failure already released it.
            self.state
                .release(id)
                .map_err(|_| SchedulerError::UnknownJob(id))?;
        }
        let gpus = job.spec.gpus;
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
        Ok(())
    }

    pub(crate) fn requeue(&mut self, id: JobId, now: u64) {
        if let Some(job) = self.jobs.get_mut(&id) {
            job.state = JobState::Pending {
                since_s: now,
                reason: None,
            };
            job.charged_to_s = now;
            self.pending.insert((job.spec.submitted_s, id));
        }
    }

    pub(crate) fn finish(&mut self, id: JobId, status: FinalStatus, now: u64) {
        if let Some(job) = self.jobs.get_mut(&id) {
            job.state = JobState::Finished { status, at_s: now };
        }
    }

    /// The host reports that a running job's attempt ended.
    pub fn end_attempt(
        &mut self,
        id: JobId,
        now: u64,
        end: AttemptEnd,
    ) -> Result<(), SchedulerError> {
        let failed = matches!(end, AttemptEnd::Failed { .. });
        self.stop_running(id, now, failed)?;
        match end {
            AttemptEnd::Passed => self.finish(id, FinalStatus::Passed, now),
            AttemptEnd::Killed => self.finish(id, FinalStatus::Killed, now),
            AttemptEnd::Failed { retry: true } => self.requeue(id, now),
            AttemptEnd::Failed { retry: false } => self.finish(id, FinalStatus::Failed, now),
        }
        Ok(())
    }

    /// Kills a pending or running job.
    pub fn kill(&mut self, id: JobId, now: u64) -> Result<(), SchedulerError> {
        let job = self
            .jobs
            .get_mut(&id)
            .ok_or(SchedulerError::UnknownJob(id))?;
        match job.state {
            JobState::Pending { reason, .. } => {
                job.charge(reason, now);
                let key = (job.spec.submitted_s, id);
                self.pending.remove(&key);
                self.reservations.remove(&id);
            }
            JobState::Running { .. } => self.stop_running(id, now, false)?,
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
            self.requeue(id, now);
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

    /// Records a policy failure; returns the consecutive count.
    pub(crate) fn note_failure(&mut self, err: &PolicyError) -> u32 {
        let h = &mut self.slot_health[err.slot as usize];
        h.failures += 1;
        h.consecutive += 1;
        h.consecutive
    }

    pub(crate) fn note_success(&mut self, slot: Slot) {
        self.slot_health[slot as usize].consecutive = 0;
    }

    /// Verifies the allocation state and the job table against each other:
    /// no GPU held twice, every running gang holds exactly its GPUs, every
    /// submitted job is pending, running or finished, VC totals match.
    pub fn check_invariants(&self) -> Result<(), InvariantViolation> {
        self.state.check_invariants()?;
        let fail = |m: String| Err(InvariantViolation(m));
        let mut vc_held = vec![0u32; self.vcs.len()];
        let mut running = 0;
        for (id, job) in &self.jobs {
            match &job.state {
                JobState::Pending { .. } => {
                    if !self.pending.contains(&(job.spec.submitted_s, *id)) {
                        return fail(format!("{id} is pending but not queued"));
                    }
                }
                JobState::Running { choice, .. } => {
                    running += 1;
                    let Some(p) = self.state.allocation(*id) else {
                        return fail(format!("{id} is running but holds no GPUs"));
                    };
                    if p.gpu_count() != job.spec.gpus || p != &choice.placement {
                        return fail(format!(
                            "{id} needs {} GPUs but holds {}",
                            job.spec.gpus,
                            p.gpu_count()
                        ));
                    }
                    vc_held[job.spec.vc.0 as usize] += job.spec.gpus;
                }
                JobState::Finished { .. } => {}
            }
        }
        if self.pending.len() + running + self.finished_len() != self.jobs.len() {
            return fail("a job is in no state or in two".into());
        }
        if running != self.state.allocations().len() {
            return fail(format!(
                "{running} jobs running but {} allocations",
                self.state.allocations().len()
            ));
        }
        for (v, held) in self.vcs.iter().zip(vc_held) {
            if v.held_gpus != held {
                return fail(format!(
                    "VC {} books {} GPUs, holds {held}",
                    v.name, v.held_gpus
                ));
            }
        }
        if self.state.held_gpus() != 0 {
            return fail("reservation holds survived the round".into());
        }
        Ok(())
    }

    fn finished_len(&self) -> usize {
        self.jobs
            .values()
            .filter(|j| matches!(j.state, JobState::Finished { .. }))
            .count()
    }
}
