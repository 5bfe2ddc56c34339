//! Fairness, locality, then placement in fairness order with the gang slot
//! deciding what a job that does not fit does to the jobs behind it.

use gangway_plugin_sdk::{Fairness, Gang, Locality};
use rustc_hash::FxHashSet;

use gangway_plugin_sdk::{
    FairnessView, GangAction, GangDecision, GpuTypeSet, PendingJob, QueueView, SpreadLimit,
    WaitReason,
};

use super::{Placed, Reservation, Round, RoundReport};
use crate::policy::{Stamp, ViewChanges};
use crate::reach::Where;
use crate::server_set::ServerSet;

/// What a failed search is remembered by within a round: size, limit and
/// the server set (by address; 0 for any server).
fn search_key(
    gpus: u32,
    limit: SpreadLimit,
    set: Option<&std::sync::Arc<ServerSet>>,
) -> (u32, SpreadLimit, usize) {
    let set = set.map_or(0, |a| std::sync::Arc::as_ptr(a).addr());
    (gpus, limit, set)
}

impl Round<'_> {
    /// Asks fairness and locality about the view's jobs and places them.
    /// `view_at` is the stamp of the state `view` was built from.
    pub(super) fn place(
        &mut self,
        view: &FairnessView,
        view_at: Stamp,
        report: &mut RoundReport,
    ) -> Placed {
        let (mut queue, mut placed) = self.fairness_order(view, view_at, report);
        if !queue.jobs.is_empty() {
            let changes = ViewChanges::new(self.book.changes(), view_at);
            let locality = self
                .policies
                .slot_mut::<Locality>()
                .decide_settled(&queue, &changes);
            report.policy_errors.extend(locality.error);
            queue.spread = locality.decision.limits;
        }
        // Placement in order; the gang slot is asked (once, with the view as
        // it was before any placement) only when a job first fails to fit: a
        // round where everything fits never needs its answer.
        let mut pass = Pass::default();
        for (i, job) in queue.jobs.iter().enumerate() {
            let limit = queue.spread.get(i).copied().unwrap_or_default();
            placed.limits.insert(job.id, limit);
            if pass.blocked {
                placed.reasons.insert(job.id, WaitReason::HeldByPolicy);
                continue;
            }
            // Its VC's quotas per GPU type leave it no type: it waits for
            // its fair share, as if fairness had held it, and does not
            // count as a gang that does not fit (the gang slot could block
            // every VC's queue behind it).
            if self.start_reach(&job.id, job.gpus).is_none() {
                placed.reasons.insert(job.id, WaitReason::FairShare);
                continue;
            }
            if self.try_start(job, limit, &mut pass.failed, report) {
                continue;
            }
            let reason = self.why_waiting(job, pass.reserved_now);
            placed.reasons.insert(job.id, reason);
            let gang = pass
                .gang
                .get_or_insert_with(|| self.ask_gang(&queue, view_at, report));
            match gang
                .on_blocked
                .get(i)
                .copied()
                .unwrap_or(GangAction::Backfill)
            {
                GangAction::Backfill => {}
                GangAction::Block => pass.blocked = true,
                GangAction::Reserve if pass.reserved_now < gang.max_reservations => {
                    if self.reserve(job, limit, &mut placed, report) {
                        pass.reserved_now = pass.reserved_now.saturating_add(1);
                    }
                }
                GangAction::Reserve => {}
            }
        }
        placed
    }

    /// Asks fairness about the view: the fairness order goes into the
    /// round's [`Placed`] (the last round's maps, emptied, their memory
    /// reused), ineligible jobs wait for their fair share, and the eligible
    /// ones form the queue for locality and placement.
    #[inline]
    fn fairness_order(
        &mut self,
        view: &FairnessView,
        view_at: Stamp,
        report: &mut RoundReport,
    ) -> (QueueView, Placed) {
        let changes = ViewChanges::new(self.book.changes(), view_at);
        // Contract 2.2: the GPU types beside the view, for a policy that
        // takes them; the types it chose hold for this round's placement.
        let types = self
            .takes_types::<Fairness>()
            .then(|| self.types_view(view.jobs.iter().map(|j| j.id)));
        let fairness = self.policies.slot_mut::<Fairness>().decide_settled_typed(
            view,
            types.as_ref(),
            &changes,
        );
        report.policy_errors.extend(fairness.error);
        self.scratch.chosen.clear();
        self.scratch
            .chosen
            .extend(fairness.choices.choices.iter().map(|c| (c.job, c.gpu_type)));
        let mut placed = std::mem::take(&mut self.scratch.placed);
        placed.clear();
        placed
            .index
            .extend(view.jobs.iter().enumerate().map(|(i, j)| (j.id, i)));
        let mut queue = QueueView {
            now_s: self.now,
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
        (queue, placed)
    }

    /// Starts `job` within `limit` if a placement is found and allocated
    /// (not searched again for a size, limit and server set that already
    /// `failed`, and each set that fails noted there); whether it started.
    #[inline]
    fn try_start(
        &mut self,
        job: &PendingJob,
        limit: SpreadLimit,
        failed: &mut FxHashSet<(u32, SpreadLimit, usize)>,
        report: &mut RoundReport,
    ) -> bool {
        let failed = std::cell::RefCell::new(failed);
        // Not on a type its VC's per-type quota has no room on.
        let Some(reach) = self.start_reach(&job.id, job.gpus) else {
            return false;
        };
        let found = self.state.find_placement_in(
            job.gpus,
            limit,
            reach.at(),
            |set| failed.borrow().contains(&search_key(job.gpus, limit, set)),
            |set| {
                failed.borrow_mut().insert(search_key(job.gpus, limit, set));
            },
        );
        drop(reach);
        if let Some(choice) = found
            && self.state.allocate(job.id, &choice.placement).is_ok()
        {
            let start = self.start(job.id, &choice);
            report.starts.push(start);
            return true;
        }
        false
    }

    /// Why `job`, which did not fit, waits, with `reserved_now`
    /// reservations made this round: free GPUs are counted where it may
    /// run (on one GPU type at a time); for its fair share if its VC's
    /// per-type quotas leave it no type.
    #[inline]
    fn why_waiting(&self, job: &PendingJob, reserved_now: u32) -> WaitReason {
        let gpus = job.gpus;
        let Some(reach) = self.start_reach(&job.id, gpus) else {
            return WaitReason::FairShare;
        };
        let free = self.state.free_gpus_in(reach.at());
        if free >= gpus {
            WaitReason::Fragmentation
        } else if reserved_now > 0 && free.saturating_add(self.state.held_gpus()) >= gpus {
            WaitReason::Reserved
        } else {
            WaitReason::NoCapacity
        }
    }

    /// Asks the gang slot about `queue` (built before any placement: its
    /// stamp is the view's, `view_at`).
    #[inline]
    fn ask_gang(
        &mut self,
        queue: &QueueView,
        view_at: Stamp,
        report: &mut RoundReport,
    ) -> GangDecision {
        let changes = ViewChanges::new(self.book.changes(), view_at);
        let decided = self
            .policies
            .slot_mut::<Gang>()
            .decide_settled(queue, &changes);
        report.policy_errors.extend(decided.error);
        decided.decision
    }

    /// Reserves GPUs for `job` within `limit` (in the scope it held
    /// before, if any, and if there is one); whether it did.
    #[inline]
    fn reserve(
        &mut self,
        job: &PendingJob,
        limit: SpreadLimit,
        placed: &mut Placed,
        report: &mut RoundReport,
    ) -> bool {
        // A job a host restricted to some servers gets none.
        if self.book.allowed.contains_key(&job.id) {
            return false;
        }
        // A typed job's scope is of one type it may use (and its VC's
        // per-type quota has room on): a server, or a domain whose servers
        // all share it.
        let Some(reach) = self.start_reach(&job.id, job.gpus) else {
            return false;
        };
        let types = match reach.at() {
            Where::Types(r) => Some(GpuTypeSet::of(r.sets.iter().map(|(t, _)| *t))),
            _ => None,
        };
        drop(reach);
        let sticky = self.book.reservations.get(&job.id).copied();
        let Some(scope) = self
            .state
            .reservation_scope(job.gpus, limit.level, sticky, types)
        else {
            return false;
        };
        let held = self.state.hold_in(scope, job.gpus, limit.max_servers);
        self.book.reservations.insert(job.id, scope);
        placed.reserved.insert(job.id);
        report.reservations.push(Reservation {
            job: job.id,
            held_gpus: held,
        });
        true
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
            }) && self.start_reach(id, job.gpus).is_some();
            if within {
                *reason = WaitReason::Queued;
            }
        }
    }
}

/// The placement pass over a round's queue: what it has learnt so far.
#[derive(Default)]
struct Pass {
    /// The gang slot's answer, asked when a job first fails to fit.
    gang: Option<GangDecision>,
    /// Gang sizes, spread limits and server sets that found no placement
    /// this round.
    failed: FxHashSet<(u32, SpreadLimit, usize)>,
    /// The gang slot blocked the jobs behind.
    blocked: bool,
    /// Reservations made this round.
    reserved_now: u32,
}
