//! The defragment step: migrate running jobs so a gang waiting with
//! fragmentation delay finds local room.
//!
//! The core applies the moves in order, each onto GPUs free at that point
//! (the lowest free GPUs of each named server), then starts the waiting gang
//! within its spread limit. If a move does not fit, the gang still does not
//! fit, or a moved job's old GPUs end up used by no other job (the move
//! freed nothing anyone needed), everything is rolled back and the decision
//! counts as the policy's failure.

use gangway_plugin_sdk::Defragment;
use std::collections::HashMap;

use gangway_plugin_sdk::{
    DefragmentDecision, DefragmentView, JobId, Move, SpreadLimit, WaitReason,
};

use super::{Migration, Placed, Round, RoundReport};
use crate::placement::{PlacementChoice, lowest_bits};
use crate::policy::invalid;
use crate::policy::{PolicyErrorKind, Stamp, ViewChanges};
use crate::state::{Placement, ServerGpus};
use crate::topology::ServerId;

impl Round<'_> {
    /// Asks the defragment slot (unless it is `none` or no gang waits with
    /// fragmentation delay) and applies its decision if it is sound.
    pub(super) fn defragment(
        &mut self,
        view: &gangway_plugin_sdk::FairnessView,
        view_at: Stamp,
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
        self.defragment_with(&defrag_view, view_at, placed, report);
        self.scratch.running = defrag_view.running;
    }

    /// Asks the defragment slot about `defrag_view` and applies its decision
    /// if it is sound.
    fn defragment_with(
        &mut self,
        defrag_view: &DefragmentView,
        view_at: Stamp,
        placed: &mut Placed,
        report: &mut RoundReport,
    ) {
        let changes = ViewChanges::new(self.book.changes(), view_at);
        let decided = self
            .policies
            .slot_mut::<Defragment>()
            .decide(defrag_view, &changes);
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
        limit: SpreadLimit,
        placed: &mut Placed,
        report: &mut RoundReport,
    ) -> Result<(), PolicyErrorKind> {
        // A target its VC's per-type quota has no room for (the VC took
        // more of its types since the view): nothing to do, and nothing the
        // policy could have seen.
        let gpus = self.book.get(&target).map_or(0, |j| j.next_gpus());
        if self.book.start_reach(&target, gpus).is_none() {
            return Ok(());
        }
        let mut plan = Moves::default();
        let found = d
            .moves
            .iter()
            .try_for_each(|m| self.apply_move(m, &mut plan))
            .and_then(|()| self.place_target(target, limit, &plan.released));
        let choice = match found {
            Ok(choice) => choice,
            Err(e) => {
                self.undo(&plan.released, &plan.moved);
                return Err(e);
            }
        };
        // Commit.
        let old: HashMap<JobId, Placement> = plan.released.into_iter().collect();
        for (id, choice) in plan.moved {
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

    /// Applies move `m`: releases the job's GPUs and allocates it the
    /// lowest free GPUs of each server it is moved to, noting both in
    /// `plan` (for the commit or the rollback).
    fn apply_move(&mut self, m: &Move, plan: &mut Moves) -> Result<(), PolicyErrorKind> {
        let Ok(old) = self.state.release(m.job) else {
            return Err(invalid(format!("moves {}, which holds no GPUs", m.job)));
        };
        let mut parts = Vec::with_capacity(m.to.len());
        let at = self.book.reach_of(&m.job);
        let topo = self.state.topology();
        let gpu_type = |s: &ServerId| topo.server(*s).map(|s| s.gpu_type);
        // A moved job keeps its GPU type (its speed, and its gang on one type).
        let first_type = old.parts.first().and_then(|p| gpu_type(&p.server));
        plan.released.push((m.job, old));
        for (server, gpus) in &m.to {
            if !at.allows(topo, *server) {
                return Err(invalid(format!(
                    "moves {} onto {server}, where it may not run",
                    m.job
                )));
            }
            if gpu_type(server) != first_type {
                return Err(invalid(format!(
                    "moves {} onto {server}, of another GPU type than it runs on",
                    m.job
                )));
            }
            let mask = self.state.avail_mask(*server);
            if mask.count_ones() < *gpus {
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
        plan.moved.push((m.job, choice));
        Ok(())
    }

    /// Finds and allocates the waiting gang `target`'s GPUs within `limit`
    /// once the moves are made; refuses (releasing them again) if a move
    /// freed GPUs that no other job then uses.
    fn place_target(
        &mut self,
        target: JobId,
        limit: SpreadLimit,
        released: &[(JobId, Placement)],
    ) -> Result<PlacementChoice, PolicyErrorKind> {
        let Some(gpus) = self.book.get(&target).map(|j| j.next_gpus()) else {
            return Err(invalid(format!("makes room for unknown {target}")));
        };
        // Within its VC's per-type quota.
        let Some(reach) = self.book.start_reach(&target, gpus) else {
            return Err(invalid(format!(
                "makes room for {target}, whose virtual cluster's per-type quota has no room"
            )));
        };
        let Some(choice) = self
            .state
            .find_placement_in(gpus, limit, reach.at(), |_| false, |_| {})
        else {
            return Err(invalid(format!(
                "the moves do not make room for {target} ({gpus} GPUs, {limit})"
            )));
        };
        if self.state.allocate(target, &choice.placement).is_err() {
            return Err(invalid(format!(
                "{target} cannot take the GPUs found for it"
            )));
        }
        for (id, old) in released {
            // Room freed for the plan: taken by the waiting gang or another
            // moved job, not by the moved job itself (a move onto its own
            // GPUs frees nothing).
            if !self.state.owned_by_other(old, *id) {
                let _ = self.state.release(target);
                return Err(invalid(format!(
                    "moving {id} frees GPUs that no other job then uses"
                )));
            }
        }
        Ok(choice)
    }
}

/// The moves of a defragment decision applied so far: each job's GPUs
/// before and after.
#[derive(Default)]
struct Moves {
    released: Vec<(JobId, Placement)>,
    moved: Vec<(JobId, PlacementChoice)>,
}

#[cfg(test)]
mod tests {
    use gangway_plugin_sdk::{
        Defragment, DefragmentDecision, DefragmentPolicy, DefragmentView, Move, ServerId,
    };

    use crate::policy::{Native, PolicySet};
    use crate::{JobId, JobSpec, Scheduler, Topology};

    /// Moves the first running job onto the servers it already runs on,
    /// beside whatever `also` adds, for the first waiting gang.
    struct InPlace {
        also: Vec<Move>,
    }

    impl DefragmentPolicy for InPlace {
        fn plan(&self, view: &DefragmentView) -> DefragmentDecision {
            let (Some(r), Some(w)) = (view.running.first(), view.waiting.first()) else {
                return DefragmentDecision::default();
            };
            let mut moves = vec![Move {
                job: r.id,
                to: r.parts.clone(),
            }];
            moves.extend(self.also.iter().cloned());
            DefragmentDecision {
                moves,
                start: Some(w.job.id),
            }
        }
    }

    #[test]
    fn a_move_onto_the_gpus_a_job_holds_is_no_migration() {
        // 3 servers of 8 GPUs in one rack: job 1 holds 6 GPUs of server 0,
        // job 2 6 of server 1, job 4 4 of server 2; job 3 (8 GPUs, one
        // server) waits with fragmentation delay. Moving job 4 onto servers
        // 0 and 1 would make room; moving job 1 onto its own server is no
        // move, so the plan that has both is refused whole.
        let topo = Topology::uniform(1, 3, 8).unwrap();
        let policy = InPlace {
            also: vec![Move {
                job: JobId(4),
                to: vec![(ServerId(0), 2), (ServerId(1), 2)],
            }],
        };
        let set =
            PolicySet::fallbacks().with::<Defragment>(Box::new(Native::new("in-place", policy)));
        let mut sched = Scheduler::with_policies(topo, set);
        let vc = sched.virtual_cluster("a");
        let spec = |id, gpus, t| JobSpec {
            id: JobId(id),
            vc,
            user: 0,
            gpus,
            submitted_s: t,
        };
        for (id, gpus) in [(1, 6), (2, 6), (4, 4)] {
            sched.submit(spec(id, gpus, 0)).unwrap();
        }
        assert_eq!(sched.round(0).unwrap().starts.len(), 3);
        sched.submit(spec(3, 8, 1)).unwrap();
        let r = sched.round(1).unwrap();
        assert!(r.migrations.is_empty(), "{:?}", r.migrations);
        assert!(r.starts.is_empty(), "{:?}", r.starts);
        assert_eq!(r.policy_errors.len(), 1, "{:?}", r.policy_errors);
        assert!(
            r.policy_errors[0]
                .to_string()
                .contains("onto the servers it runs on"),
            "{}",
            r.policy_errors[0]
        );
        for id in [1, 4] {
            assert_eq!(sched.job(JobId(id)).unwrap().migrations, 0);
        }
        sched.check_invariants().unwrap();
    }
}
