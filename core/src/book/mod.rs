//! The job book: every job record and every index over them, as one type.
//!
//! A job is in exactly one state ([`JobState`]) and, for each state, in
//! exactly the indexes that state needs: a pending job in the submit-order
//! set, its VC's queue, the size histogram and its VC's pending counters; a
//! failed attempt in the retry set; a delayed retry in the delay set. The
//! book changes a job's state only through its mutators (submit, enqueue,
//! start, stop, preempt, finish, retry, forget), each of which updates every
//! index the change touches, so no index can be updated in one place and
//! forgotten in another. [`JobBook::check`] verifies them all.

#[cfg(test)]
mod change_differential;
mod change_log;
mod check;
mod queue;
mod quotas;
mod running;
mod table;
mod types;
mod vcs;
mod waits;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use gangway_plugin_sdk::{
    GpuTypeId, JobId, PendingJob, QueueOrder, RetryAction, VcId, VcUsage, WaitReason,
};
use rustc_hash::FxHashMap;

use crate::job::{AttemptEnd, AttemptFailure, FinalStatus, JobRecord, JobSpec, JobState};
use crate::placement::{PlacementChoice, Scope};
use crate::reach::Reach;
use crate::scheduler_error::SchedulerError;
use crate::state::{ClusterState, Placement};
use crate::topology::Topology;

pub(crate) use change_log::ChangeLog;
pub use change_log::Stamp;
use queue::QueueIndex;
pub(crate) use queue::Queued;
pub(crate) use running::{RunningIndex, Started, stoppable};
use table::JobTable;

use crate::server_set::ServerSet;
pub(crate) use quotas::StartReach;
pub use quotas::{TypeQuota, TypeQuotas};
pub(crate) use table::attained_at;
pub(crate) use vcs::Vcs;
pub use vcs::VirtualCluster;

/// Every job and every index over the jobs (see the module docs).
#[derive(Debug)]
pub(crate) struct JobBook {
    topology: Arc<Topology>,
    records: JobTable,
    /// Pending jobs keyed by (submit time, id).
    pending: BTreeSet<(u64, JobId)>,
    /// Pending jobs per VC, in the fairness policy's declared order.
    queues: QueueIndex,
    /// How many pending jobs need each GPU count.
    pending_sizes: BTreeMap<u32, u32>,
    /// Jobs waiting out a retry delay, by (until, id).
    delayed: BTreeSet<(u64, JobId)>,
    /// Jobs whose failed attempt the retry slot has not seen yet.
    awaiting_retry: BTreeSet<JobId>,
    /// The virtual clusters and their counters.
    pub(crate) vcs: Vcs,
    /// Sticky reservation scopes of blocked jobs.
    pub(crate) reservations: BTreeMap<JobId, Scope>,
    /// The servers a job may be placed on, where the host restricted it.
    pub(crate) allowed: FxHashMap<JobId, Arc<ServerSet>>,
    /// The GPU types each job may run on, most preferred first: every
    /// job's on a cluster of several types, none on a cluster of one.
    pub(crate) gpu_types: FxHashMap<JobId, Arc<[GpuTypeId]>>,
    /// Where each job of `gpu_types` may be placed (see [`Reach`]).
    reach: FxHashMap<JobId, Arc<Reach>>,
    /// The VCs with quotas per GPU type, and those quotas.
    pub(crate) type_quotas: BTreeMap<VcId, TypeQuotas>,
    /// Each job's class, where the host gave one: its row of
    /// `class_speeds` (contract 2.2's views).
    pub(crate) job_classes: FxHashMap<JobId, u32>,
    /// How fast each class of job runs on each GPU type, by class.
    pub(crate) class_speeds: Vec<gangway_plugin_sdk::ClassSpeeds>,
    /// The pending jobs of the last round's fairness view, with the reason
    /// each waited for (a job leaves it when it stops being pending).
    last_view: FxHashMap<JobId, WaitReason>,
    /// The time of the last round that showed fairness a view.
    prev_view_round_s: Option<u64>,
}

impl JobBook {
    /// An empty book for `topology`, its queues in `order`.
    pub(crate) fn new(topology: Arc<Topology>, order: QueueOrder) -> JobBook {
        let mut queues = QueueIndex::default();
        queues.rebuild(order, std::iter::empty());
        JobBook {
            records: JobTable::new(topology.servers().iter().map(|s| s.gpu_type).collect()),
            topology,
            pending: BTreeSet::new(),
            queues,
            pending_sizes: BTreeMap::new(),
            delayed: BTreeSet::new(),
            awaiting_retry: BTreeSet::new(),
            vcs: Vcs::default(),
            reservations: BTreeMap::new(),
            allowed: FxHashMap::default(),
            gpu_types: FxHashMap::default(),
            reach: FxHashMap::default(),
            type_quotas: BTreeMap::new(),
            job_classes: FxHashMap::default(),
            class_speeds: Vec::new(),
            last_view: FxHashMap::default(),
            prev_view_round_s: None,
        }
    }

    // ---- Reading -------------------------------------------------------

    /// Every job, by id.
    pub(crate) fn records(&self) -> &BTreeMap<JobId, JobRecord> {
        &self.records
    }

    /// Job `id`'s record.
    pub(crate) fn get(&self, id: &JobId) -> Option<&JobRecord> {
        self.records.get(id)
    }

    /// The running jobs by id, each with the GPU time it attained before
    /// its current attempt (see [`JobTable::running`]).
    pub(crate) fn running(&self) -> &BTreeMap<JobId, gangway_plugin_sdk::RunningJob> {
        self.records.running()
    }

    /// The running jobs with each VC's in start order, for a give-back walk.
    pub(crate) fn running_index(&self) -> &RunningIndex {
        self.records.running_index()
    }

    /// Pending jobs by (submit time, id).
    pub(crate) fn pending(&self) -> &BTreeSet<(u64, JobId)> {
        &self.pending
    }

    /// Failed attempts the retry slot decides about at the next round.
    pub(crate) fn awaiting_retry(&self) -> &BTreeSet<JobId> {
        &self.awaiting_retry
    }

    /// Jobs waiting out a retry delay, by (until, id).
    pub(crate) fn delayed(&self) -> &BTreeSet<(u64, JobId)> {
        &self.delayed
    }

    /// The smallest gang among pending jobs.
    pub(crate) fn smallest_pending_gpus(&self) -> Option<u32> {
        self.pending_sizes.keys().next().copied()
    }

    /// Whether job `id` was in the last round's fairness view.
    pub(crate) fn was_viewed(&self, id: &JobId) -> bool {
        self.last_view.contains_key(id)
    }

    /// The ids of the last round's fairness view, sorted.
    pub(crate) fn last_view_ids(&self) -> Vec<JobId> {
        let mut ids: Vec<JobId> = self.last_view.keys().copied().collect();
        ids.sort_unstable();
        ids
    }

    /// The time of the last round that showed fairness a view.
    pub(crate) fn prev_view_round_s(&self) -> Option<u64> {
        self.prev_view_round_s
    }

    /// A pending job's queue entry: as policies see it, and since when.
    pub(crate) fn queued(&self, job: &JobRecord) -> Queued {
        let gpus = job.next_gpus();
        let (min_level, min_servers) = self.min_spread(job.spec.id, gpus);
        let since_s = match job.state {
            JobState::Pending { since_s, .. } => since_s,
            _ => 0,
        };
        Queued {
            since_s,
            job: PendingJob {
                id: job.spec.id,
                vc: job.spec.vc,
                user: job.spec.user,
                gpus,
                submitted_s: job.spec.submitted_s,
                waiting_s: 0,
                attempts: job.attempts,
                attained_gpu_s: job.attained_gpu_s,
                min_level,
                min_servers,
            },
        }
    }

    /// The pending jobs a fairness view shows at `now`, in (submit time, id)
    /// order: every one when `window` is 0 or the queues keep no order, else
    /// each VC's first `window` in the queues' order.
    pub(crate) fn pending_view(&self, window: usize, now: u64) -> Vec<PendingJob> {
        if window > 0 && *self.queues.order() != QueueOrder::All {
            // The queue entries hold the jobs as the view shows them.
            self.queues.heads_by_submit(window, now)
        } else {
            self.pending
                .iter()
                .filter_map(|(_, id)| self.records.get(id))
                .map(|j| self.queued(j).at(now))
                .collect()
        }
    }

    /// Every VC's configuration and use, as views show them.
    pub(crate) fn vc_usage(&self) -> Vec<VcUsage> {
        self.vcs.usage()
    }

    /// The log of changes to how views show jobs and VCs.
    pub(crate) fn changes(&self) -> &ChangeLog {
        self.records.changes()
    }

    /// Changes VC `vc`'s record with `change` (its quota, its weight, or a
    /// restored record), logged when it changed; `false` for an unknown VC.
    pub(crate) fn change_vc(&mut self, vc: VcId, change: impl FnOnce(&mut VirtualCluster)) -> bool {
        let Some(v) = self.vcs.get_mut(vc) else {
            return false;
        };
        let before = v.clone();
        change(v);
        if *v != before {
            self.records.changes_mut().vc(vc);
        }
        true
    }

    /// The id of the VC named `name`, created (and logged) on first use.
    pub(crate) fn named_vc(&mut self, name: &str) -> VcId {
        let known = self.vcs.len();
        let vc = self.vcs.named(name);
        if self.vcs.len() != known {
            self.records.changes_mut().vc(vc);
        }
        vc
    }

    // ---- Changing ------------------------------------------------------

    /// Adds a just-submitted job, pending from its submit time, allowed on
    /// `types` (most preferred first; `None` on a cluster of one type).
    /// Refuses what [`JobBook::check_submit`] refuses.
    pub(crate) fn submit(
        &mut self,
        spec: JobSpec,
        types: Option<Arc<[GpuTypeId]>>,
    ) -> Result<(), SchedulerError> {
        self.check_submit(&spec)?;
        let (id, since) = (spec.id, spec.submitted_s);
        if let Some(types) = types {
            self.set_gpu_types(id, types);
        }
        self.records.insert(id, JobRecord::submitted(spec));
        self.enqueue(id, since);
        Ok(())
    }

    /// Refuses a repeated id, no GPUs, more GPUs than the cluster has, an
    /// unknown VC.
    pub(crate) fn check_submit(&self, spec: &JobSpec) -> Result<(), SchedulerError> {
        let id = spec.id;
        if self.records.contains_key(&id) {
            return Err(SchedulerError::DuplicateJob(id));
        }
        if spec.gpus == 0 {
            return Err(SchedulerError::ZeroGpus(id));
        }
        let cluster = self.topology.total_gpus();
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
        Ok(())
    }

    /// Adds `record` as it is, filed in the indexes of its state (for a
    /// restore: a running job's GPUs are the caller's to allocate).
    pub(crate) fn insert_record(&mut self, record: JobRecord) {
        let id = record.spec.id;
        match record.state {
            JobState::Pending { since_s, .. } => {
                // Files it in every index; the record is put back whole
                // below (its queue entry does not depend on what enqueue
                // resets: the reason and where its wait was charged to).
                self.records.insert(id, record.clone());
                self.enqueue(id, since_s);
            }
            JobState::AwaitingRetry(_) => {
                self.awaiting_retry.insert(id);
            }
            JobState::Delayed { until_s, .. } => {
                self.delayed.insert((until_s, id));
            }
            JobState::Running { .. } | JobState::Finished { .. } => {}
        }
        self.records.insert(id, record);
    }

    /// Makes `id` pending since `since` and files it in every index.
    pub(crate) fn enqueue(&mut self, id: JobId, since: u64) {
        let Some(mut job) = self.records.get_mut(&id) else {
            return;
        };
        job.state = JobState::Pending {
            since_s: since,
            reason: None,
        };
        job.charged_to_s = job.charged_to_s.max(since);
        let gpus = job.next_gpus();
        let (vc, submitted_s) = (job.spec.vc, job.spec.submitted_s);
        drop(job);
        self.pending.insert((submitted_s, id));
        if let Some(job) = self.records.get(&id) {
            let queued = self.queued(job);
            self.queues.insert(job, queued);
        }
        *self.pending_sizes.entry(gpus).or_insert(0) += 1;
        self.vcs.add_pending(vc, gpus);
        let changes = self.records.changes_mut();
        changes.job(id);
        changes.vc(vc);
    }

    /// Takes pending `id` out of every index (its state is the caller's to
    /// set).
    pub(crate) fn dequeue(&mut self, id: JobId) {
        let Some(job) = self.records.get(&id) else {
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
        let vc = job.spec.vc;
        self.vcs.remove_pending(vc, gpus);
        let changes = self.records.changes_mut();
        changes.job(id);
        changes.vc(vc);
        self.reservations.remove(&id);
        self.last_view.remove(&id);
    }

    /// Starts pending `id` on `choice` at `now`: books the attempt and the
    /// VC's GPUs (the caller has allocated them). Returns the probe's run
    /// time if the attempt is a retry policy's probe.
    pub(crate) fn start(&mut self, id: JobId, now: u64, choice: &PlacementChoice) -> Option<u64> {
        self.dequeue(id);
        let mut job = self.records.get_mut(&id)?;
        if let JobState::Pending { reason, since_s } = job.state {
            // Never shown before but pending through an earlier round: it
            // waited behind its VC's view window, as `charge_waits` counts it.
            let reason = match reason {
                None if self.prev_view_round_s.is_some_and(|p| since_s < p) => {
                    Some(WaitReason::Queued)
                }
                r => r,
            };
            job.charge(reason, now);
        }
        job.attempts += 1;
        if job.first_start_s.is_none() {
            job.first_start_s = Some(now);
            job.first_placement = Some((choice.servers, choice.locality));
        }
        let probe_s = job.probe.map(|(_, s)| s);
        job.state = JobState::Running {
            started_s: now,
            choice: choice.clone(),
            probe_s,
        };
        let vc = job.spec.vc;
        drop(job);
        self.vcs.add_held(vc, choice.placement.gpu_count());
        self.records.changes_mut().vc(vc);
        probe_s
    }

    /// Moves running `id` onto `choice` (the caller has moved its GPUs).
    pub(crate) fn migrate(&mut self, id: JobId, choice: &PlacementChoice) {
        if let Some(mut job) = self.records.get_mut(&id)
            && let JobState::Running { choice: c, .. } = &mut job.state
        {
            *c = choice.clone();
            job.migrations += 1;
        }
    }

    /// Records that running `id` now runs on `choice`, as the engine says
    /// (the caller has moved its GPUs).
    pub(crate) fn relocate(&mut self, id: JobId, choice: PlacementChoice) {
        if let Some(mut job) = self.records.get_mut(&id)
            && let JobState::Running { choice: c, .. } = &mut job.state
        {
            *c = choice;
        }
    }

    /// Shrinks running `id` to `keep`, a part of its GPUs (a member of its
    /// gang ended while the rest run): the others are freed in `state`,
    /// their run time so far is banked as attained GPU time (the job's and
    /// its VC's), and the VC holds them no more. Returns how many GPUs were
    /// freed.
    pub(crate) fn shrink(
        &mut self,
        state: &mut ClusterState,
        id: JobId,
        keep: &Placement,
        now: u64,
    ) -> Result<u32, SchedulerError> {
        let job = self
            .records
            .get(&id)
            .ok_or(SchedulerError::UnknownJob(id))?;
        let JobState::Running { started_s, .. } = job.state else {
            return Err(SchedulerError::WrongState {
                job: id,
                event: "shrink",
                state: job.state.name(),
            });
        };
        let vc = job.spec.vc;
        let mut keep = keep.clone();
        keep.parts.sort_by_key(|p| p.server);
        let freed = state
            .shrink(id, &keep)
            .map_err(|e| SchedulerError::Shrink {
                job: id,
                why: e.to_string(),
            })?;
        let used = u64::from(freed) * now.saturating_sub(started_s);
        let choice = PlacementChoice {
            locality: self.topology.common_level(&keep.servers()),
            servers: keep.server_count(),
            placement: keep,
        };
        if let Some(mut job) = self.records.get_mut(&id) {
            job.attained_gpu_s += used;
            if let JobState::Running { choice: c, .. } = &mut job.state {
                *c = choice;
            }
        }
        self.vcs.book_stop(vc, freed, used);
        self.records.changes_mut().vc(vc);
        Ok(freed)
    }

    /// Releases running `id`'s GPUs in `state` and books its run time (as
    /// lost GPU time when `lost`); returns the GPU-seconds of the attempt.
    /// The job's state is the caller's to set next.
    pub(crate) fn stop(
        &mut self,
        state: &mut ClusterState,
        id: JobId,
        now: u64,
        lost: bool,
    ) -> Result<u64, SchedulerError> {
        let job = self
            .records
            .get(&id)
            .ok_or(SchedulerError::UnknownJob(id))?;
        let JobState::Running {
            started_s,
            ref choice,
            ..
        } = job.state
        else {
            return Err(SchedulerError::WrongState {
                job: id,
                event: "end an attempt of",
                state: job.state.name(),
            });
        };
        // What it holds (fewer than its gang once shrunk), also when a
        // server failure already released it.
        let gpus = choice.placement.gpu_count();
        if state.allocation(id).is_some() {
            // Absent only when a server failure already released it.
            state
                .release(id)
                .map_err(|_| SchedulerError::UnknownJob(id))?;
        }
        let vc = job.spec.vc;
        let used = u64::from(gpus) * now.saturating_sub(started_s);
        if let Some(mut job) = self.records.get_mut(&id) {
            job.attained_gpu_s += used;
            if lost {
                job.failed_gpu_s += used;
            }
        }
        self.vcs.book_stop(vc, gpus, used);
        self.records.changes_mut().vc(vc);
        Ok(used)
    }

    /// Books running `id`, whose GPUs (`placement`) a reclaim released, as
    /// preempted at `now` and makes it pending again. Returns how long the
    /// stopped attempt ran.
    pub(crate) fn preempt(&mut self, id: JobId, now: u64, placement: &Placement) -> u64 {
        let ran_s = match self.records.get(&id).map(|j| &j.state) {
            Some(JobState::Running { started_s, .. }) => now.saturating_sub(*started_s),
            _ => 0,
        };
        let gpus = placement.gpu_count();
        let mut stopped = None;
        if let Some(mut job) = self.records.get_mut(&id) {
            let used = u64::from(gpus) * ran_s;
            job.attained_gpu_s += used;
            job.preemptions += 1;
            job.preempted_gpu_s += used;
            stopped = Some((job.spec.vc, used));
        }
        if let Some((vc, used)) = stopped {
            self.vcs.book_stop(vc, gpus, used);
            self.records.changes_mut().vc(vc);
        }
        self.enqueue(id, now);
        ran_s
    }

    /// Ends `id` with `status` at `now`.
    pub(crate) fn finish(&mut self, id: JobId, status: FinalStatus, now: u64) {
        if let Some(mut job) = self.records.get_mut(&id) {
            job.state = JobState::Finished { status, at_s: now };
            job.probe = None;
        }
    }

    /// Books the end of running `id`'s attempt, as the host reports it.
    pub(crate) fn end_attempt(
        &mut self,
        state: &mut ClusterState,
        id: JobId,
        now: u64,
        end: AttemptEnd,
    ) -> Result<(), SchedulerError> {
        let (started_s, probe_s, gpus) = match self.records.get(&id).map(|j| (&j.state, j)) {
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
                    state: state.name(),
                });
            }
            None => return Err(SchedulerError::UnknownJob(id)),
        };
        let failed = matches!(end, AttemptEnd::Failed { .. });
        self.stop(state, id, now, failed)?;
        match end {
            AttemptEnd::Passed if probe_s.is_some() => {
                // The probe survived: the whole gang is next.
                if let Some(mut job) = self.records.get_mut(&id) {
                    job.probe = None;
                }
                self.enqueue(id, now);
            }
            AttemptEnd::Passed => self.finish(id, FinalStatus::Passed, now),
            AttemptEnd::Killed => self.finish(id, FinalStatus::Killed, now),
            AttemptEnd::Failed { last: true, .. } => self.finish(id, FinalStatus::Failed, now),
            AttemptEnd::Failed { class, last: false } => {
                if let Some(mut job) = self.records.get_mut(&id) {
                    job.state = JobState::AwaitingRetry(AttemptFailure {
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

    /// Kills `id`, which has not finished.
    pub(crate) fn kill(
        &mut self,
        state: &mut ClusterState,
        id: JobId,
        now: u64,
    ) -> Result<(), SchedulerError> {
        let job = self
            .records
            .get(&id)
            .ok_or(SchedulerError::UnknownJob(id))?;
        match job.state {
            JobState::Pending { reason, .. } => {
                self.dequeue(id);
                if let Some(mut job) = self.records.get_mut(&id) {
                    job.charge(reason, now);
                }
            }
            JobState::Delayed { until_s, .. } => {
                self.delayed.remove(&(until_s, id));
                if let Some(mut job) = self.records.get_mut(&id) {
                    job.charge(Some(WaitReason::RetryDelay), now);
                }
            }
            JobState::AwaitingRetry(_) => {
                self.awaiting_retry.remove(&id);
            }
            JobState::Running { .. } => {
                self.stop(state, id, now, false)?;
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

    /// Takes every failed attempt awaiting a retry decision, in id order.
    pub(crate) fn take_awaiting_retry(&mut self) -> Vec<JobId> {
        std::mem::take(&mut self.awaiting_retry)
            .into_iter()
            .collect()
    }

    /// Applies the retry slot's `action` to `id`'s failed attempt at `now`:
    /// gives up, or makes it pending now or after a delay. Returns whether
    /// `id` had a failed attempt to decide about.
    pub(crate) fn retry(&mut self, id: JobId, now: u64, action: RetryAction) -> bool {
        let Some(mut job) = self.records.get_mut(&id) else {
            return false;
        };
        let JobState::AwaitingRetry(failure) = job.state else {
            return false;
        };
        let after_s = match action {
            RetryAction::GiveUp => {
                job.probe = None;
                job.state = JobState::Finished {
                    status: FinalStatus::Failed,
                    at_s: now,
                };
                return true;
            }
            RetryAction::Retry { after_s } => {
                job.probe = None;
                after_s
            }
            RetryAction::Probe {
                gpus,
                run_s,
                after_s,
            } => {
                job.probe = Some((gpus, run_s));
                after_s
            }
        };
        // The wait since the failure counts as retry delay.
        let until = now.saturating_add(after_s).max(failure.at_s);
        if until <= now {
            job.charge(Some(WaitReason::RetryDelay), now);
            drop(job);
            self.enqueue(id, now);
        } else {
            job.state = JobState::Delayed {
                since_s: failure.at_s,
                until_s: until,
            };
            self.delayed.insert((until, id));
        }
        true
    }

    /// Makes every delayed retry whose time has come by `now` pending.
    pub(crate) fn release_delayed(&mut self, now: u64) {
        while let Some(&(until, id)) = self.delayed.first() {
            if until > now {
                break;
            }
            self.delayed.remove(&(until, id));
            if let Some(mut job) = self.records.get_mut(&id) {
                job.charge(Some(WaitReason::RetryDelay), until);
            }
            self.enqueue(id, until);
        }
    }

    /// Makes a job that awaits a retry decision or waits out a retry delay
    /// pending at `now` (a job in another state stays as it is).
    pub(crate) fn make_pending(&mut self, id: JobId, now: u64) {
        match self.records.get(&id).map(|j| &j.state) {
            Some(JobState::AwaitingRetry(_)) => {
                self.awaiting_retry.remove(&id);
                self.enqueue(id, now);
            }
            Some(JobState::Delayed { until_s, .. }) => {
                let until_s = *until_s;
                self.delayed.remove(&(until_s, id));
                self.enqueue(id, now);
            }
            _ => {}
        }
    }

    /// Drops pending `id` and its record (a submit the engine refused).
    pub(crate) fn withdraw(&mut self, id: JobId) {
        self.dequeue(id);
        self.records.remove(&id);
    }

    /// Re-sorts the per-VC queues in `order` if it changed.
    pub(crate) fn set_queue_order(&mut self, order: QueueOrder) {
        if &order != self.queues.order() {
            let entries: Vec<(&JobRecord, Queued)> = self
                .pending
                .iter()
                .filter_map(|(_, id)| self.records.get(id))
                .map(|job| (job, self.queued(job)))
                .collect();
            let mut queues = std::mem::take(&mut self.queues);
            queues.rebuild(order, entries.into_iter());
            self.queues = queues;
        }
    }

    /// Drops finished `id`'s record and returns it.
    pub(crate) fn forget(&mut self, id: JobId) -> Result<JobRecord, SchedulerError> {
        let job = self
            .records
            .get(&id)
            .ok_or(SchedulerError::UnknownJob(id))?;
        if !matches!(job.state, JobState::Finished { .. }) {
            return Err(SchedulerError::WrongState {
                job: id,
                event: "forget",
                state: job.state.name(),
            });
        }
        self.last_view.remove(&id);
        self.allowed.remove(&id);
        self.forget_types(id);
        self.records
            .remove(&id)
            .ok_or(SchedulerError::UnknownJob(id))
    }

    /// Drops every finished job's record; returns how many.
    pub(crate) fn forget_finished(&mut self) -> usize {
        let before = self.records.len();
        let last_view = &mut self.last_view;
        let allowed = &mut self.allowed;
        let (gpu_types, reach) = (&mut self.gpu_types, &mut self.reach);
        let classes = &mut self.job_classes;
        self.records.retain(|id, j| {
            let finished = matches!(j.state, JobState::Finished { .. });
            if finished {
                last_view.remove(id);
                allowed.remove(id);
                gpu_types.remove(id);
                reach.remove(id);
                classes.remove(id);
            }
            !finished
        });
        before - self.records.len()
    }

    /// Restores the wait bookkeeping of a snapshot: the last view's jobs
    /// (each with its recorded reason) and when it was shown.
    pub(crate) fn restore_last_view(&mut self, ids: &[JobId], prev_view_round_s: Option<u64>) {
        for id in ids {
            if let Some(JobState::Pending {
                reason: Some(r), ..
            }) = self.records.get(id).map(|j| &j.state)
            {
                self.last_view.insert(*id, *r);
            }
        }
        self.prev_view_round_s = prev_view_round_s;
    }
}
