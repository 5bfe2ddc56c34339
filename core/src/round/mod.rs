//! One scheduling round: retry -> fairness -> locality -> placement with gang
//! -> reclaim -> defragment, each step in its own file.

mod defragment;
mod place;
mod reclaim;
mod retry;
mod views;

use std::collections::BTreeSet;

use rustc_hash::FxHashMap;

use gangway_plugin_sdk::{JobId, RetryAction, Slot, SpreadLimit, WaitReason};
use serde::{Deserialize, Serialize};

use crate::job::JobState;
use crate::placement::PlacementChoice;
use crate::policy::PolicyError;
use crate::scheduler::{Scheduler, SchedulerError};
use crate::state::Placement;

/// A job the round started. The host launches it on `choice.placement`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Start {
    /// The job.
    pub job: JobId,
    /// Where it runs, its achieved locality and servers spanned.
    pub choice: PlacementChoice,
    /// For a retry policy's probe (fewer GPUs than the gang): how long it
    /// must run without failing before the host ends it as passed (the full
    /// gang is queued next).
    pub probe_s: Option<u64>,
}

/// A job that holds a reservation after this round.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reservation {
    /// The blocked job.
    pub job: JobId,
    /// GPUs held for it during the round.
    pub held_gpus: u32,
}

/// A running job the reclaim slot stopped. The host stops it; it is pending
/// again.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Preemption {
    /// The job.
    pub job: JobId,
    /// The GPUs it held.
    pub placement: Placement,
    /// How long the stopped attempt ran.
    pub ran_s: u64,
}

/// A running job the defragment slot moved. The host checkpoints it and
/// restarts it on `to`; it stays running.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Migration {
    /// The job.
    pub job: JobId,
    /// The GPUs it held.
    pub from: Placement,
    /// Where it runs now.
    pub to: PlacementChoice,
}

/// What a round decided.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoundReport {
    /// The round's time.
    pub now_s: u64,
    /// Jobs started, in the order they were placed.
    pub starts: Vec<Start>,
    /// Every job of the round's fairness view still pending, with why.
    pub waiting: Vec<(JobId, WaitReason)>,
    /// Pending jobs left out of the fairness view (they wait with
    /// [`WaitReason::Queued`] behind their VC's first jobs).
    pub queued: usize,
    /// Reservations made.
    pub reservations: Vec<Reservation>,
    /// Jobs the reclaim slot stopped (re-queued).
    pub preempted: Vec<Preemption>,
    /// Jobs the defragment slot moved.
    pub migrations: Vec<Migration>,
    /// What the retry slot chose for each failed attempt it saw.
    pub retries: Vec<(JobId, RetryAction)>,
    /// Slots whose active policy changed at the start of the round.
    pub swapped: Vec<Slot>,
    /// Policy calls that failed; the slot's built-in policy answered instead.
    pub policy_errors: Vec<PolicyError>,
}

impl Scheduler {
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
        let mut report = RoundReport {
            now_s: now,
            ..RoundReport::default()
        };
        // Between rounds: the only point where a slot may swap what it runs.
        report.swapped = self.policies.prepare_round();
        // Also catches a policy set replaced through `policies_mut`.
        self.sync_queue_order();

        self.retry_step(now, &mut report);
        self.release_delayed(now);
        if self.pending.is_empty() {
            self.last_view.clear();
            return Ok(report);
        }

        let view = self.fairness_view(now);
        report.queued = self.pending.len() - view.jobs.len();
        let mut placed = self.place_step(now, &view, &mut report);
        self.reclaim_step(now, &view, &mut placed, &mut report);
        self.defragment_step(now, &view, &mut placed, &mut report);
        self.state.clear_holds();
        self.reservations
            .retain(|id, _| placed.reserved.contains(id));
        // The last round's reasons come back to be reused (emptied by the
        // next round's placement).
        placed.reasons = self.charge_waits(now, &view, placed.reasons, &mut report);
        self.spare_placed = placed;
        Ok(report)
    }

    /// Makes every delayed retry whose time has come pending.
    fn release_delayed(&mut self, now: u64) {
        while let Some(&(until, id)) = self.delayed.first() {
            if until > now {
                break;
            }
            self.delayed.remove(&(until, id));
            if let Some(job) = self.jobs.get_mut(&id) {
                job.charge(Some(WaitReason::RetryDelay), until);
            }
            self.enqueue(id, until);
        }
    }

    /// Records each viewed job's reason and charges its wait; a job that
    /// left the view since the last round waits [`WaitReason::Queued`] from
    /// now on. Returns the last round's reasons, whose memory the next
    /// round reuses.
    ///
    /// Waits are charged when a job's reason changes, not every round: a job
    /// shown last round with the same reason keeps accruing to it (its state
    /// holds the reason and `charged_to_s` where the accrual began), so a
    /// round costs the jobs whose reason changed, not the whole view.
    fn charge_waits(
        &mut self,
        now: u64,
        view: &gangway_plugin_sdk::FairnessView,
        reasons: FxHashMap<JobId, WaitReason>,
        report: &mut RoundReport,
    ) -> FxHashMap<JobId, WaitReason> {
        let previous = std::mem::take(&mut self.last_view);
        let prev_round = self.prev_view_round_s;
        for (id, reason) in &reasons {
            if previous.get(id) == Some(reason) {
                continue;
            }
            let Some(job) = self.jobs.get_mut(id) else {
                continue;
            };
            let JobState::Pending {
                reason: last,
                since_s,
            } = &mut job.state
            else {
                continue;
            };
            let charge_to = match *last {
                Some(r) if previous.contains_key(id) => r,
                // Considered before, then behind the window until now.
                Some(_) => WaitReason::Queued,
                // Pending through an earlier round without being shown.
                None if prev_round.is_some_and(|p| *since_s < p) => WaitReason::Queued,
                None => *reason,
            };
            *last = Some(*reason);
            job.charge(Some(charge_to), now);
        }
        // Jobs shown last round and still pending but not shown now: their
        // interval so far goes to their last reason, the rest to Queued.
        for id in previous.keys().filter(|id| !reasons.contains_key(id)) {
            if let Some(job) = self.jobs.get_mut(id)
                && let JobState::Pending { reason, .. } = &mut job.state
            {
                let last = *reason;
                *reason = Some(WaitReason::Queued);
                job.charge(last, now);
            }
        }
        report.waiting = view
            .jobs
            .iter()
            .filter_map(|j| reasons.get(&j.id).map(|r| (j.id, *r)))
            .collect();
        // Ids mostly follow submit order: the stable sort is near-linear then.
        report.waiting.sort_by_key(|(id, _)| *id);
        self.last_view = reasons;
        self.prev_view_round_s = Some(now);
        previous
    }

    /// Starts `id` on `choice`: books the attempt and the VC's GPUs.
    pub(crate) fn start(&mut self, id: JobId, now: u64, choice: &PlacementChoice) -> Start {
        self.dequeue(id);
        let Some(job) = self.jobs.get_mut(&id) else {
            return Start {
                job: id,
                choice: choice.clone(),
                probe_s: None,
            };
        };
        if let JobState::Pending { reason, .. } = job.state {
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
        let gpus = choice.placement.gpu_count();
        if let Some(v) = self.vcs.get_mut(job.spec.vc.0 as usize) {
            v.held_gpus += gpus;
        }
        Start {
            job: id,
            choice: choice.clone(),
            probe_s,
        }
    }
}

/// What placement left for the later steps.
#[derive(Default)]
pub(crate) struct Placed {
    /// Every job of the view that did not start, with its reason.
    pub(crate) reasons: FxHashMap<JobId, WaitReason>,
    /// The spread limit each eligible job was placed with.
    pub(crate) limits: FxHashMap<JobId, SpreadLimit>,
    /// Jobs holding a reservation this round.
    pub(crate) reserved: BTreeSet<JobId>,
    /// The fairness order of the view's jobs.
    pub(crate) order: Vec<JobId>,
    /// Each job's position in the round's view.
    pub(crate) index: FxHashMap<JobId, usize>,
}

impl Placed {
    /// Empties it, keeping its memory for the next round.
    fn clear(&mut self) {
        let Placed {
            reasons,
            limits,
            reserved,
            order,
            index,
        } = self;
        reasons.clear();
        limits.clear();
        reserved.clear();
        order.clear();
        index.clear();
    }
}
