//! Fairness, locality, then placement in fairness order with the gang slot
//! deciding what a job that does not fit does to the jobs behind it.

use gangway_plugin_sdk::{Fairness, Gang, Locality};
use rustc_hash::FxHashSet;

use gangway_plugin_sdk::{
    FairnessView, GangAction, GangDecision, QueueView, SpreadLimit, WaitReason,
};

use super::{Placed, Reservation, Round, RoundReport};
use crate::policy::{Stamp, ViewChanges};

impl Round<'_> {
    /// Asks fairness and locality about the view's jobs and places them.
    /// `view_at` is the stamp of the state `view` was built from.
    pub(super) fn place(
        &mut self,
        view: &FairnessView,
        view_at: Stamp,
        report: &mut RoundReport,
    ) -> Placed {
        let now = self.now;
        // 1. Fairness.
        let changes = ViewChanges::new(self.book.changes(), view_at);
        let fairness = self
            .policies
            .slot_mut::<Fairness>()
            .decide_settled(view, &changes);
        report.policy_errors.extend(fairness.error);
        // The last round's maps, emptied: their memory is reused.
        let mut placed = std::mem::take(&mut self.scratch.placed);
        placed.clear();
        placed
            .index
            .extend(view.jobs.iter().enumerate().map(|(i, j)| (j.id, i)));
        let mut queue = QueueView {
            now_s: now,
            cluster: view.cluster.clone(),
            jobs: Vec::new(),
            spread: Vec::new(),
        };
        let index = &placed.index;
        for r in &fairness.decision.order {
            if let Some(&i) = index.get(&r.job) {
                placed.order.push(r.job);
                if r.eligible {
                    queue.jobs.push(view.jobs[i]);
                } else {
                    placed.reasons.insert(r.job, WaitReason::FairShare);
                }
            }
        }

        // 2. Locality.
        if !queue.jobs.is_empty() {
            let changes = ViewChanges::new(self.book.changes(), view_at);
            let locality = self
                .policies
                .slot_mut::<Locality>()
                .decide_settled(&queue, &changes);
            report.policy_errors.extend(locality.error);
            queue.spread = locality.decision.limits;
        }

        // 3 and 4. Placement in order; the gang slot is asked (once, with the
        // view as it was before any placement) only when a job first fails
        // to fit: a round where everything fits never needs its answer.
        let mut gang: Option<GangDecision> = None;
        let mut failed: FxHashSet<(u32, SpreadLimit)> = FxHashSet::default();
        let mut blocked = false;
        let mut reserved_now = 0u32;
        for (i, job) in queue.jobs.iter().enumerate() {
            let limit = queue.spread.get(i).copied().unwrap_or_default();
            placed.limits.insert(job.id, limit);
            if blocked {
                placed.reasons.insert(job.id, WaitReason::HeldByPolicy);
                continue;
            }
            let found = if failed.contains(&(job.gpus, limit)) {
                None
            } else {
                self.state.find_placement(job.gpus, limit)
            };
            if let Some(choice) = found
                && self.state.allocate(job.id, &choice.placement).is_ok()
            {
                let start = self.start(job.id, &choice);
                report.starts.push(start);
                continue;
            }
            failed.insert((job.gpus, limit));
            let free = self.state.free_gpus();
            let reason = if free >= job.gpus {
                WaitReason::Fragmentation
            } else if reserved_now > 0 && free.saturating_add(self.state.held_gpus()) >= job.gpus {
                WaitReason::Reserved
            } else {
                WaitReason::NoCapacity
            };
            placed.reasons.insert(job.id, reason);
            if gang.is_none() {
                // (Built before any placement: its stamp is the view's.)
                let changes = ViewChanges::new(self.book.changes(), view_at);
                let decided = self
                    .policies
                    .slot_mut::<Gang>()
                    .decide_settled(&queue, &changes);
                report.policy_errors.extend(decided.error);
                gang = Some(decided.decision);
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
                    let sticky = self.book.reservations.get(&job.id).copied();
                    if let Some(scope) = self.state.reservation_scope(job.gpus, limit.level, sticky)
                    {
                        let held = self.state.hold_in(scope, job.gpus, limit.max_servers);
                        self.book.reservations.insert(job.id, scope);
                        placed.reserved.insert(job.id);
                        reserved_now = reserved_now.saturating_add(1);
                        report.reservations.push(Reservation {
                            job: job.id,
                            held_gpus: held,
                        });
                    }
                }
                GangAction::Reserve => {}
            }
        }
        placed
    }

    /// Tells the two kinds of ineligible job apart, once the round has
    /// started and stopped what it will: one whose virtual cluster would
    /// stay within its quota with it waits behind an earlier job of its own VC, in the fairness
    /// policy's order within the VC ([`WaitReason::Queued`]); only one whose
    /// VC is at its quota, or has none, waits for its fair share.
    pub(super) fn held_or_fair_share(&self, view: &FairnessView, placed: &mut Placed) {
        let vcs = self.book.vcs.list();
        for (id, reason) in placed.reasons.iter_mut() {
            if *reason != WaitReason::FairShare {
                continue;
            }
            let Some(job) = placed.index.get(id).and_then(|&i| view.jobs.get(i)) else {
                continue;
            };
            let within = vcs.get(job.vc.index()).is_some_and(|v| {
                v.quota_gpus.is_some_and(|q| {
                    u64::from(v.held_gpus).saturating_add(u64::from(job.gpus)) <= u64::from(q)
                })
            });
            if within {
                *reason = WaitReason::Queued;
            }
        }
    }
}
