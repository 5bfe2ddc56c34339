//! The defragment step: migrate running jobs so a gang waiting with
//! fragmentation delay finds local room.
//!
//! The core applies the moves in order, each onto GPUs free at that point
//! (the lowest free GPUs of each named server), then starts the waiting gang
//! within its spread limit. If a move does not fit, the gang still does not
//! fit, or a moved job's old GPUs end up used by nobody (the move freed
//! nothing anyone needed), everything is rolled back and the decision counts
//! as the policy's failure.

use gangway_plugin_sdk::Defragment;
use std::collections::HashMap;

use gangway_plugin_sdk::{DefragmentDecision, DefragmentView, JobId, WaitReason};

use super::{Migration, Placed, Round, RoundReport};
use crate::placement::{PlacementChoice, lowest_bits};
use crate::policy::PolicyErrorKind;
use crate::policy::invalid;
use crate::state::{Placement, ServerGpus};

impl Round<'_> {
    /// Asks the defragment slot (unless it is `none` or no gang waits with
    /// fragmentation delay) and applies its decision if it is sound.
    pub(super) fn defragment(
        &mut self,
        view: &gangway_plugin_sdk::FairnessView,
        placed: &mut Placed,
        report: &mut RoundReport,
    ) {
        if self.policies.slot_mut::<Defragment>().is_noop()
            || !placed
                .reasons
                .values()
                .any(|r| *r == WaitReason::Fragmentation)
        {
            return;
        }
        let waiting: Vec<_> = self
            .waiting_jobs(view, placed)
            .into_iter()
            .filter(|w| w.reason == WaitReason::Fragmentation)
            .collect();
        if waiting.is_empty() {
            return;
        }
        let mut running = std::mem::take(&mut self.scratch.running);
        self.running_jobs_into(&report.starts, |_| true, &mut running);
        let defrag_view = DefragmentView {
            now_s: self.now,
            cluster: self.state.summary(),
            servers: self.server_states(),
            running,
            waiting,
        };
        self.defragment_with(&defrag_view, placed, report);
        self.scratch.running = defrag_view.running;
    }

    /// Asks the defragment slot about `defrag_view` and applies its decision
    /// if it is sound.
    fn defragment_with(
        &mut self,
        defrag_view: &DefragmentView,
        placed: &mut Placed,
        report: &mut RoundReport,
    ) {
        let decided = self.policies.slot_mut::<Defragment>().decide(defrag_view);
        if let Some(e) = decided.error {
            report.policy_errors.push(e);
            return;
        }
        let Some(target) = decided.decision.start else {
            self.policies.slot_mut::<Defragment>().settle(Ok(()));
            return;
        };
        let limit = defrag_view
            .waiting
            .iter()
            .find(|w| w.job.id == target)
            .map(|w| w.limit)
            .unwrap_or_default();
        let outcome = self.apply_moves(&decided.decision, target, limit, placed, report);
        report
            .policy_errors
            .extend(self.policies.slot_mut::<Defragment>().settle(outcome));
    }

    fn apply_moves(
        &mut self,
        d: &DefragmentDecision,
        target: JobId,
        limit: gangway_plugin_sdk::SpreadLimit,
        placed: &mut Placed,
        report: &mut RoundReport,
    ) -> Result<(), PolicyErrorKind> {
        let mut released: Vec<(JobId, Placement)> = Vec::new();
        let mut moved: Vec<(JobId, PlacementChoice)> = Vec::new();
        for m in &d.moves {
            let Ok(old) = self.state.release(m.job) else {
                self.undo(&released, &moved);
                return Err(invalid(format!("moves {}, which holds no GPUs", m.job)));
            };
            released.push((m.job, old));
            let mut parts = Vec::with_capacity(m.to.len());
            for (server, gpus) in &m.to {
                let mask = self.state.avail_mask(*server);
                if mask.count_ones() < *gpus {
                    self.undo(&released, &moved);
                    return Err(invalid(format!(
                        "moves {} onto {server}, which has {} of the {gpus} GPUs free",
                        m.job,
                        mask.count_ones()
                    )));
                }
                parts.push(ServerGpus {
                    server: *server,
                    gpus: lowest_bits(mask, *gpus),
                });
            }
            parts.sort_by_key(|p| p.server);
            let placement = Placement { parts };
            if self.state.allocate(m.job, &placement).is_err() {
                self.undo(&released, &moved);
                return Err(invalid(format!(
                    "{} cannot take the GPUs it is moved to",
                    m.job
                )));
            }
            let servers = placement.servers();
            let choice = PlacementChoice {
                locality: self.state.topology().common_level(&servers),
                servers: placement.server_count(),
                placement,
            };
            moved.push((m.job, choice));
        }
        let Some(gpus) = self.book.get(&target).map(|j| j.next_gpus()) else {
            self.undo(&released, &moved);
            return Err(invalid(format!("makes room for unknown {target}")));
        };
        let Some(choice) = self.state.find_placement(gpus, limit) else {
            self.undo(&released, &moved);
            return Err(invalid(format!(
                "the moves do not make room for {target} ({gpus} GPUs, {limit})"
            )));
        };
        if self.state.allocate(target, &choice.placement).is_err() {
            self.undo(&released, &moved);
            return Err(invalid(format!(
                "{target} cannot take the GPUs found for it"
            )));
        }
        for (id, old) in &released {
            if !self.state.any_owned(old) {
                let _ = self.state.release(target);
                self.undo(&released, &moved);
                return Err(invalid(format!(
                    "moving {id} frees GPUs that nobody then uses"
                )));
            }
        }
        // Commit.
        let old: HashMap<JobId, Placement> = released.into_iter().collect();
        for (id, choice) in moved {
            self.book.migrate(id, &choice);
            report.migrations.push(Migration {
                job: id,
                from: old.get(&id).cloned().unwrap_or(Placement { parts: vec![] }),
                to: choice,
            });
        }
        placed.reasons.remove(&target);
        let start = self.start(target, &choice);
        report.starts.push(start);
        Ok(())
    }
}
