//! One scheduling round: fairness -> locality -> placement -> gang.

use std::collections::HashSet;

use gangway_plugin_sdk::{
    FairnessDecision, GangAction, GangDecision, JobId, Level, LocalityDecision, PendingJob,
    QueueView, RoundView, VcUsage,
};
use serde::{Deserialize, Serialize};

use crate::job::{JobState, WaitReason};
use crate::placement::PlacementChoice;
use crate::policy::{PolicyError, PolicyErrorKind, Slot, validate};
use crate::scheduler::{Scheduler, SchedulerError};

/// A job the round started. The host launches it on `choice.placement`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Start {
    /// The job.
    pub job: JobId,
    /// Where it runs, its achieved locality and servers spanned.
    pub choice: PlacementChoice,
}

/// A job that holds a reservation after this round.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reservation {
    /// The blocked job.
    pub job: JobId,
    /// GPUs held for it during the round.
    pub held_gpus: u32,
}

/// What a round decided.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoundReport {
    /// The round's time.
    pub now_s: u64,
    /// Jobs started, in the order they were placed.
    pub starts: Vec<Start>,
    /// Every job still pending, with why.
    pub waiting: Vec<(JobId, WaitReason)>,
    /// Reservations made.
    pub reservations: Vec<Reservation>,
    /// Policy calls that failed; the slot's default answered instead.
    pub policy_errors: Vec<PolicyError>,
}

impl Scheduler {
    fn round_view(&self, now: u64) -> RoundView {
        let topo = self.state.topology();
        let mut vcs: Vec<VcUsage> = self
            .vcs
            .iter()
            .enumerate()
            .map(|(i, v)| VcUsage {
                id: gangway_plugin_sdk::VcId(i as u32),
                quota_gpus: v.quota_gpus,
                weight: v.weight,
                held_gpus: v.held_gpus,
                pending_gpus: 0,
                attained_gpu_s: v.attained_gpu_s,
            })
            .collect();
        let mut jobs = Vec::with_capacity(self.pending.len());
        for (_, id) in &self.pending {
            let Some(job) = self.jobs.get(id) else {
                continue;
            };
            let JobState::Pending { since_s, .. } = job.state else {
                continue;
            };
            if let Some(v) = vcs.get_mut(job.spec.vc.0 as usize) {
                v.pending_gpus += job.spec.gpus;
            }
            jobs.push(PendingJob {
                id: *id,
                vc: job.spec.vc,
                user: job.spec.user,
                gpus: job.spec.gpus,
                submitted_s: job.spec.submitted_s,
                waiting_s: now.saturating_sub(since_s),
                attempts: job.attempts,
                attained_gpu_s: job.attained_gpu_s,
                min_level: topo.min_level_for(job.spec.gpus).unwrap_or(Level::ANY),
            });
        }
        RoundView {
            now_s: now,
            cluster: self.state.summary(),
            vcs,
            jobs,
        }
    }

    /// Handles a slot's answer: counts failures and falls back to the default.
    fn settle<D>(
        &mut self,
        slot: Slot,
        answer: Result<D, PolicyError>,
        check: impl Fn(&D) -> Result<(), PolicyErrorKind>,
        fallback: impl FnOnce(&mut Self) -> Result<D, PolicyError>,
        errors: &mut Vec<PolicyError>,
    ) -> D
    where
        D: Default,
    {
        let name = match slot {
            Slot::Fairness => self.policies.fairness.name(),
            Slot::Locality => self.policies.locality.name(),
            Slot::Gang => self.policies.gang.name(),
        }
        .to_string();
        let err = match answer {
            Ok(d) => match check(&d) {
                Ok(()) => {
                    self.note_success(slot);
                    self.report_outcome(slot, Ok(()));
                    return d;
                }
                Err(kind) => PolicyError::new(slot, name, kind),
            },
            Err(e) => e,
        };
        self.report_outcome(slot, Err(&err));
        tracing::warn!(%err, "policy failed; using the built-in default for this round");
        self.note_failure(&err);
        errors.push(err);
        // The built-in defaults are total functions of a valid view.
        fallback(self).unwrap_or_default()
    }

    /// Tells the slot's backend how its last call went.
    fn report_outcome(&mut self, slot: Slot, outcome: Result<(), &PolicyError>) {
        match slot {
            Slot::Fairness => self.policies.fairness.report(outcome),
            Slot::Locality => self.policies.locality.report(outcome),
            Slot::Gang => self.policies.gang.report(outcome),
        }
    }

    /// Runs one scheduling round at time `now` and applies its starts.
    ///
    /// Fairness orders the pending jobs and marks eligibility; locality gives
    /// each eligible job a spread limit; jobs are placed in order; the gang
    /// policy decides what a job that does not fit does to those behind it.
    /// Every pending job leaves the round with a [`WaitReason`].
    pub fn round(&mut self, now: u64) -> Result<RoundReport, SchedulerError> {
        if now < self.last_round_s {
            return Err(SchedulerError::TimeWentBack {
                now,
                last: self.last_round_s,
            });
        }
        self.last_round_s = now;
        // Between rounds: the only point where a slot may swap what it runs.
        self.policies.fairness.prepare_round();
        self.policies.locality.prepare_round();
        self.policies.gang.prepare_round();
        let mut report = RoundReport {
            now_s: now,
            ..RoundReport::default()
        };
        if self.pending.is_empty() {
            return Ok(report);
        }
        let view = self.round_view(now);

        // 1. Fairness.
        let answer = self.policies.fairness.order(&view);
        let fairness: FairnessDecision = self.settle(
            Slot::Fairness,
            answer,
            |d| validate::fairness(&view, d),
            |s| s.fallback.fairness.order(&view),
            &mut report.policy_errors,
        );
        let by_id: std::collections::HashMap<JobId, usize> = view
            .jobs
            .iter()
            .enumerate()
            .map(|(i, j)| (j.id, i))
            .collect();
        let mut queue = QueueView {
            now_s: now,
            cluster: view.cluster.clone(),
            jobs: Vec::new(),
            spread: Vec::new(),
        };
        let mut ineligible = Vec::new();
        for r in &fairness.order {
            if let Some(&i) = by_id.get(&r.job) {
                if r.eligible {
                    queue.jobs.push(view.jobs[i].clone());
                } else {
                    ineligible.push(r.job);
                }
            }
        }

        // 2. Locality.
        let locality: LocalityDecision = if queue.jobs.is_empty() {
            LocalityDecision::default()
        } else {
            let answer = self.policies.locality.spread(&queue);
            self.settle(
                Slot::Locality,
                answer,
                |d| validate::locality(&queue, d),
                |s| s.fallback.locality.spread(&queue),
                &mut report.policy_errors,
            )
        };
        queue.spread = locality.spread;

        // 3 and 4. Placement in order; the gang slot is asked (once, with the
        // view as it was before any placement) only when a job first fails
        // to fit: a round where everything fits never needs its answer.
        let mut gang: Option<GangDecision> = None;
        let mut reasons: Vec<(JobId, WaitReason)> = Vec::with_capacity(view.jobs.len());
        reasons.extend(ineligible.iter().map(|id| (*id, WaitReason::FairShare)));
        let mut failed: HashSet<(u32, Level)> = HashSet::new();
        let mut blocked = false;
        let mut reserved_now = 0u32;
        let mut reserved_jobs = HashSet::new();
        for (i, job) in queue.jobs.iter().enumerate() {
            if blocked {
                reasons.push((job.id, WaitReason::HeldByPolicy));
                continue;
            }
            let limit = queue.spread[i];
            let found = if failed.contains(&(job.gpus, limit)) {
                None
            } else {
                self.state.find_placement(job.gpus, limit)
            };
            if let Some(choice) = found
                && self.state.allocate(job.id, &choice.placement).is_ok()
            {
                self.start(job.id, now, &choice);
                report.starts.push(Start {
                    job: job.id,
                    choice,
                });
                continue;
            }
            failed.insert((job.gpus, limit));
            let free = self.state.free_gpus();
            let reason = if free >= job.gpus {
                WaitReason::Fragmentation
            } else if reserved_now > 0 && free + self.state.held_gpus() >= job.gpus {
                WaitReason::Reserved
            } else {
                WaitReason::NoCapacity
            };
            reasons.push((job.id, reason));
            if gang.is_none() {
                let answer = self.policies.gang.on_blocked(&queue);
                gang = Some(self.settle(
                    Slot::Gang,
                    answer,
                    |d| validate::gang(&queue, d),
                    |s| s.fallback.gang.on_blocked(&queue),
                    &mut report.policy_errors,
                ));
            }
            let Some(gang) = &gang else { continue };
            match gang
                .on_blocked
                .get(i)
                .copied()
                .unwrap_or(GangAction::Backfill)
            {
                GangAction::Backfill => {}
                GangAction::Block => blocked = true,
                GangAction::Reserve if reserved_now < gang.max_reservations => {
                    let sticky = self.reservations.get(&job.id).copied();
                    if let Some(scope) = self.state.reservation_scope(job.gpus, limit, sticky) {
                        let held = self.state.hold_in(scope, job.gpus);
                        self.reservations.insert(job.id, scope);
                        reserved_jobs.insert(job.id);
                        reserved_now += 1;
                        report.reservations.push(Reservation {
                            job: job.id,
                            held_gpus: held,
                        });
                    }
                }
                GangAction::Reserve => {}
            }
        }
        self.state.clear_holds();
        self.reservations.retain(|id, _| reserved_jobs.contains(id));

        // 5. Charge waits and record reasons.
        for (id, reason) in &reasons {
            if let Some(job) = self.jobs.get_mut(id)
                && let JobState::Pending { reason: last, .. } = &mut job.state
            {
                let charge_to = last.unwrap_or(*reason);
                *last = Some(*reason);
                job.charge(Some(charge_to), now);
            }
        }
        report.waiting = reasons;
        report.waiting.sort_by_key(|(id, _)| *id);
        Ok(report)
    }

    fn start(&mut self, id: JobId, now: u64, choice: &PlacementChoice) {
        let Some(job) = self.jobs.get_mut(&id) else {
            return;
        };
        if let JobState::Pending { reason, .. } = job.state {
            job.charge(reason, now);
        }
        self.pending.remove(&(job.spec.submitted_s, id));
        self.reservations.remove(&id);
        job.attempts += 1;
        if job.first_start_s.is_none() {
            job.first_start_s = Some(now);
            job.first_placement = Some((choice.servers, choice.locality));
        }
        job.state = JobState::Running {
            started_s: now,
            choice: choice.clone(),
        };
        if let Some(v) = self.vcs.get_mut(job.spec.vc.0 as usize) {
            v.held_gpus += job.spec.gpus;
        }
    }
}
